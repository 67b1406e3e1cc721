//! Start-up: vmm's direct 64-bit entry boots the embedded guest to exactly
//! the report the PVH entry gives (`--entry pvh` forces that one), the
//! first-instruction time lies inside the run, and `vmm bench startup`
//! measures the floor beside `vmm run`. No speed is asserted.

mod common;

use common::{kvm_or_skip, vmm_json};
use serde_json::Value;

/// `vmm run --workload none --no-native --json` with `extra` arguments.
fn run(extra: &[&str]) -> Value {
    let mut args = vec!["run", "--workload", "none", "--no-native"];
    args.extend_from_slice(extra);
    let (out, v) = vmm_json(&args);
    assert!(out.status.success(), "{}", common::stderr(&out));
    v
}

/// Everything but the wall times, which differ from run to run.
fn without_timing(mut v: Value) -> Value {
    v.as_object_mut().unwrap().remove("timing_ms");
    v
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn direct_entry_reports_exactly_what_the_pvh_entry_reports() {
    if !kvm_or_skip("direct_entry_reports_exactly_what_the_pvh_entry_reports") {
        return;
    }
    for extra in [
        &[][..],
        &["--xfeatures", "x87,sse,avx"][..],
        &["--xfeatures", "x87,sse", "--init-xstate", "all"][..],
    ] {
        let direct = run(extra);
        let pvh = run(&[extra, &["--entry", "pvh"][..]].concat());
        assert_eq!(direct["timing_ms"]["boot_entry"], "direct64", "{extra:?}");
        assert_eq!(pvh["timing_ms"]["boot_entry"], "pvh", "{extra:?}");
        assert_eq!(direct["exit_status"], 0);
        // XCR0, the CPUID view, XINUSE, the initial state, exit count:
        // every field of the document, bit for bit.
        assert_eq!(without_timing(direct), without_timing(pvh), "{extra:?}");
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn first_instruction_lies_between_setup_and_the_guest_exit() {
    if !kvm_or_skip("first_instruction_lies_between_setup_and_the_guest_exit") {
        return;
    }
    let v = run(&[]);
    let t = &v["timing_ms"];
    let (setup, guest_run) = (t["setup"].as_f64().unwrap(), t["run"].as_f64().unwrap());
    let first = t["first_instruction"]
        .as_f64()
        .expect("direct entry reports it");
    // The guest's TSC, placed on the VMM's clock: after the VM was built,
    // before the run ended (a µs of rounding allowed).
    assert!(first >= setup - 0.001, "{t}");
    assert!(first <= setup + guest_run + 0.001, "{t}");
    assert!(t["start_clock_monotonic_ns"].as_u64().unwrap() > 0, "{t}");
    // The PVH entry has no slot to write it to.
    let pvh = run(&["--entry", "pvh"]);
    assert!(pvh["timing_ms"]["first_instruction"].is_null());
}

#[cfg_attr(any(no_kvm, no_cc), ignore = "needs /dev/kvm and cc")]
#[test]
fn bench_startup_measures_the_floor_beside_vmm() {
    let name = "bench_startup_measures_the_floor_beside_vmm";
    if !kvm_or_skip(name) || !common::cc_or_skip(name) {
        return;
    }
    let (out, v) = vmm_json(&["bench", "startup", "--pairs", "2", "--quiet"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["pairs"], 2);
    assert_eq!(v["boot_entry"], "direct64");
    assert_eq!(v["goal_ratio"], 2.0);
    for k in ["floor_ms", "vmm_ms", "ratio", "vmm_to_first_instruction_ms"] {
        let s = &v[k];
        let (min, med, p90) = (
            s["min"].as_f64().unwrap(),
            s["median"].as_f64().unwrap(),
            s["p90"].as_f64().unwrap(),
        );
        assert!(min > 0.0 && min <= med && med <= p90, "{k}: {s}");
    }
    // Process start to the first instruction comes before the exit.
    assert!(
        v["vmm_to_first_instruction_ms"]["min"].as_f64().unwrap()
            < v["vmm_ms"]["p90"].as_f64().unwrap()
    );
    let r = &v["ratio"];
    let f = |k: &str| r[k].as_f64().unwrap();
    assert_eq!(v["goal_met"].as_bool().unwrap(), f("median") <= 2.0);
    assert_eq!(
        v["goal_within_noise"].as_bool().unwrap(),
        f("min") <= 2.0 && f("p90") > 2.0
    );
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn bench_startup_names_a_missing_compiler() {
    if !kvm_or_skip("bench_startup_names_a_missing_compiler") {
        return;
    }
    let out = std::process::Command::new(common::vmm_bin())
        .args(["bench", "startup", "--pairs", "1", "--quiet"])
        .env("CC", "/nonexistent/cc")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("vmm: compiling the floor program: `/nonexistent/cc` did not start"),
        "{err}"
    );
    assert!(
        err.contains("hint: the floor is compiled at run time"),
        "{err}"
    );
}

/// The `vmm` binary carries GCC's unwinder instead of loading
/// `libgcc_s.so.1` at every start (vmm/build.rs, `static_unwinder`),
/// whenever the C compiler has the static archive to link.
#[test]
fn the_binary_does_not_load_the_shared_unwinder() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let archive = std::process::Command::new(&cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|p| std::path::Path::new(p).is_absolute());
    let Some(archive) = archive else {
        eprintln!("skipped: `{cc}` has no libgcc_eh.a, so vmm links the shared unwinder");
        return;
    };
    let bin = std::fs::read(common::vmm_bin()).unwrap();
    // DT_NEEDED names live in .dynstr; nothing else in the binary spells it.
    let needed = bin.windows(13).any(|w| w == b"libgcc_s.so.1");
    assert!(
        !needed,
        "vmm still needs libgcc_s.so.1 although {archive} exists"
    );
}
