//! The guest's serial record (`VMMREC1`): printed by the guest without
//! `quiet`, read back by `vmm features --guest-log` and `vmm features
//! compare`, equal to the binary report `vmm run` copied out of guest memory.

mod common;

use common::{hex, kvm_or_skip, temp_file, vmm_json};

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn serial_record_reads_back_as_the_binary_report() {
    if !kvm_or_skip("serial_record_reads_back_as_the_binary_report") {
        return;
    }
    // --json puts the guest's serial output on stderr.
    let (out, run) = vmm_json(&[
        "run",
        "--serial",
        "--workload",
        "none",
        "--cmdline",
        "bench=exits exits=50",
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let serial = String::from_utf8_lossy(&out.stderr).to_string();
    let lines: Vec<&str> = serial
        .lines()
        .filter(|l| l.starts_with("VMMREC1 "))
        .collect();
    assert_eq!(lines.len(), 1, "{serial}");
    let log = temp_file("guest-record.log", serial.as_bytes());

    let (out, f) = vmm_json(&["features", "--guest-log", log.to_str().unwrap()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    // The same log through a pipe (`qemu ... | vmm features --guest-log
    // /dev/stdin`) reads the same.
    let stdin = common::stdin_path();
    let piped = common::vmm_piped(
        &["features", "--guest-log", stdin, "--json"],
        serial.as_bytes(),
    );
    assert!(piped.status.success(), "{}", common::stderr(&piped));
    let pf: serde_json::Value = serde_json::from_slice(&piped.stdout).unwrap();
    // Equal but for the name of the source.
    assert_eq!(pf["source"], format!("guest log {stdin}"));
    for k in ["columns", "components", "consistency", "xcr0", "xss"] {
        assert_eq!(pf[k], f[k], "{k}");
    }
    let g = &f["columns"]["guest"];
    let cpuid = &run["guest_cpuid"];
    assert_eq!(hex(&g["xcr0"]), hex(&run["guest_xcr0"]));
    assert_eq!(hex(&g["xinuse"]), hex(&run["guest_xinuse"]));
    assert_eq!(hex(&g["xcr0_supported"]), hex(&cpuid["xcr0_supported"]));
    assert_eq!(hex(&g["xss_supported"]), hex(&cpuid["xss_supported"]));
    for k in [
        "standard_size_max",
        "standard_size_enabled",
        "compacted_size",
        "computed_standard_size",
        "computed_compacted_size",
        "xsave_variants",
    ] {
        assert_eq!(g[k], cpuid[k], "{k}");
    }

    // compare: the guest's own figures, exactly as the binary report has them.
    let (out, c) = vmm_json(&["features", "compare", log.to_str().unwrap()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let piped = common::vmm_piped(&["features", "compare", stdin, "--json"], serial.as_bytes());
    assert!(piped.status.success(), "{}", common::stderr(&piped));
    let mut pc: serde_json::Value = serde_json::from_slice(&piped.stdout).unwrap();
    // Equal but for the name of the file.
    assert_eq!(pc["guests"][0]["file"], stdin);
    pc["guests"][0]["file"] = c["guests"][0]["file"].clone();
    assert_eq!(pc["guests"], c["guests"]);
    assert_eq!(c["hosts"][0]["xcr0_source"], "guest");
    assert_eq!(hex(&c["hosts"][0]["xcr0"]), hex(&cpuid["xcr0_supported"]));
    let guest = &c["guests"][0];
    assert_eq!(guest["switch_strategy"], run["switch_strategy"]);
    assert_eq!(guest["tsc_khz"], run["tsc_khz"]);
    let ours: Vec<_> = run["switch_cycles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["strategy"].clone(), s["cycles"].clone()))
        .collect();
    // compare lists every strategy, null where the guest could not time it
    // (no XSAVEC under TCG's kvm_amd); the run lists the timed ones.
    let all: Vec<_> = guest["switch_cycles"].as_array().unwrap().iter().collect();
    let theirs: Vec<_> = all
        .iter()
        .filter(|p| !p[1].is_null())
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    assert_eq!(ours, theirs);
    for p in all.iter().filter(|p| p[1].is_null()) {
        assert!(
            ours.iter().all(|(s, _)| *s != p[0]),
            "{p}: timed in the run"
        );
    }
    let rows = run["results"].as_array().unwrap();
    let timings = guest["timings"].as_array().unwrap();
    assert_eq!(rows.len(), timings.len());
    assert!(rows.len() >= 3, "{run}");
    for (r, t) in rows.iter().zip(timings) {
        assert_eq!(r["name"], t["name"]);
        assert_eq!(r["variant"], t["variant"]);
        let cpe = r["cycles"].as_f64().unwrap() / r["work"].as_f64().unwrap();
        assert_eq!(t["cycles_per_event"].as_f64().unwrap(), cpe);
    }
    let _ = std::fs::remove_file(&log);
}

#[test]
fn guest_log_errors_name_the_file() {
    let log = temp_file("no-record.log", b"guest: exit: success\n");
    let out = common::vmm(&["features", "--guest-log", log.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64));
    let err = common::stderr(&out);
    assert!(
        err.contains(&format!(
            "guest log {}: no VMMREC1 line in the log",
            log.display()
        )),
        "{err}"
    );
    let out = common::vmm(&["features", "compare", log.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64));
    let err = common::stderr(&out);
    assert!(
        err.contains(&format!(
            "{}: neither a CPUID profile or dump (vmm profile JSON, `cpuid -r` output, InstLatx64 dump, Firecracker template dump) nor a serial log with a VMMREC1 guest record",
            log.display()
        )),
        "{err}"
    );
    let _ = std::fs::remove_file(&log);
}

/// A pipe is read to its end and judged as the file would be; one with
/// nothing in it, or more than the bound, is named as such.
#[test]
fn guest_logs_through_a_pipe_are_read_to_their_end() {
    let stdin = common::stdin_path();
    let out = common::vmm_piped(
        &["features", "--guest-log", stdin],
        b"guest: exit: success\n",
    );
    assert_eq!(out.status.code(), Some(64));
    let err = common::stderr(&out);
    assert!(
        err.contains(&format!("guest log {stdin}: no VMMREC1 line in the log")),
        "{err}"
    );
    let out = common::vmm_piped(&["features", "--guest-log", stdin], b"");
    assert_eq!(out.status.code(), Some(64));
    let err = common::stderr(&out);
    assert!(
        err.contains(&format!(
            "guest log {stdin} is a pipe that ended before its first byte"
        )),
        "{err}"
    );
    // 16 MiB and one byte: refused at the bound, not read on.
    let big = vec![b'x'; (16 << 20) + 1];
    let out = common::vmm_piped(&["features", "compare", stdin], &big);
    assert_eq!(out.status.code(), Some(64));
    let err = common::stderr(&out);
    assert!(
        err.contains(&format!(
            "compare input {stdin} is a pipe that carried more than 16777216 bytes"
        )),
        "{err}"
    );
    // A terminal or /dev/null as standard input is a device: refused.
    let out = common::vmm(&["features", "--guest-log", "/dev/null"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        common::stderr(&out).contains("is a character device, not a regular file"),
        "{}",
        common::stderr(&out)
    );
}
