//! A newcomer's first hour with `vmm`: the documented `--xfeatures` examples
//! work and say what they implied or dropped, `--workload` errors name the
//! option, the results table has units, a run that never reached
//! `--snapshot-after` says so, a measurement that spans a snapshot is never
//! reported as a throughput, and every option has a help text.

mod common;

use std::process::Command;

use common::{harness_sized, hex, kvm_or_skip, stderr, vmm, vmm_bin, vmm_json};

/// Every documented `--xfeatures` example (README.md, docs/run.md) that
/// KVM can give here resolves, boots, and reports its resolution on stderr
/// and in the JSON.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn readme_xfeatures_examples_resolve() {
    if !kvm_or_skip("readme_xfeatures_examples_resolve") {
        return;
    }
    let (_, v) = vmm_json(&["run", "--workload", "none", "--no-native"]);
    let kvm = hex(&v["kvm_xfeatures"]);
    assert!(v["xfeatures_resolution"].is_null(), "no --xfeatures: {v:#}");
    // (value, result, implied, dropped) for the components this KVM has.
    let avx512 = 0xe0u64;
    let mut cases: Vec<(&str, u64, u64, u64)> = vec![
        ("0x7", 0x7, 0, 0),
        ("x87,sse,avx", 0x7, 0, 0),
        ("avx", 0x7, 0x3, 0),
        ("all", kvm, 0, 0),
        ("host,-avx", kvm & !(0x4 | avx512), 0, kvm & avx512),
        // A bare leading `-` is a value, not an option: host minus avx.
        ("-avx", kvm & !(0x4 | avx512), 0, kvm & avx512),
    ];
    if kvm & avx512 == avx512 {
        cases.push(("avx512", 0xe7, 0x7, 0));
        cases.push(("host,-avx512", kvm & !avx512, 0, 0));
    }
    for (spec, result, implied, dropped) in cases {
        let (out, v) = vmm_json(&[
            "run",
            "--workload",
            "none",
            "--no-native",
            "--xfeatures",
            spec,
        ]);
        assert!(out.status.success(), "{spec}: {}", stderr(&out));
        let r = &v["xfeatures_resolution"];
        assert_eq!(r["spec"], spec, "{v:#}");
        assert_eq!(hex(&r["result"]), result, "{spec}: {r:#}");
        assert_eq!(hex(&r["implied"]), implied, "{spec}: {r:#}");
        assert_eq!(hex(&r["dropped"]), dropped, "{spec}: {r:#}");
        assert_eq!(hex(&v["policy_xfeatures"]), result, "{spec}");
        assert_eq!(
            hex(&v["guest_xcr0"]),
            result,
            "{spec}: the guest enabled it"
        );
        let err = stderr(&out);
        let line = format!(
            "vmm: --xfeatures {spec} = {} ({result:#x})",
            r["result_names"].as_str().unwrap()
        );
        assert!(err.contains(&line), "{spec}: {err}");
        if dropped != 0 {
            assert!(err.contains("; dropped opmask,zmm_hi256,hi16_zmm"), "{err}");
        }
    }
    // Contradictions are refused by name, before any VM exists.
    let out = vmm(&["run", "--xfeatures", "avx512,-avx"]);
    assert_eq!(out.status.code(), Some(68));
    assert!(
        stderr(&out).contains("`avx512` needs avx, which `-avx` removes"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
}

/// `--workload nosuch` names the option and the public words, not the
/// xstate policy and not the test hook.
#[test]
fn bad_workload_names_the_option() {
    let out = vmm(&["run", "--workload", "nosuch"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(68), "{err}");
    assert!(
        err.starts_with("vmm: invalid argument: --workload \"nosuch\": unknown workload"),
        "{err}"
    );
    for w in guest::workloads::Selection::WORDS {
        assert!(err.contains(w), "{w}: {err}");
    }
    assert!(!err.contains("corrupt"), "{err}");
    assert!(!err.contains("xstate policy"), "{err}");
    let help = String::from_utf8_lossy(&vmm(&["run", "--help"]).stdout).into_owned();
    assert!(!help.contains("corrupt"), "{help}");
}

/// The results table gives every size its unit, explains `native`, fills
/// `per op`; the JSON keeps its fields and adds the units.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn results_table_has_units() {
    if !kvm_or_skip("results_table_has_units") {
        return;
    }
    let out = vmm(&["run", "--workload", "quick"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let t = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: Vec<&str> = t
        .lines()
        .skip_while(|l| *l != "results")
        .skip(2)
        .take_while(|l| {
            l.starts_with("  aes") || l.starts_with("  dgemm") || l.starts_with("  linpack")
        })
        .collect();
    assert!(!rows.is_empty(), "{t}");
    for r in &rows {
        let cells: Vec<&str> = r.split_whitespace().collect();
        // workload variant size unit throughput unit check native per-op...
        let size_unit = cells[3];
        if r.starts_with("  aes") {
            assert_eq!(size_unit, "B", "{r}");
            assert!(r.ends_with(" ns/block"), "{r}");
        } else {
            assert!(cells[2].starts_with("n="), "{r}");
            assert!(r.ends_with(" cycles/flop"), "{r}");
        }
    }
    assert!(
        t.contains("size: B = message bytes, n = matrix order"),
        "{t}"
    );
    assert!(
        t.contains("native = guest throughput / the same code on the host, same run"),
        "{t}"
    );
    let (_, v) = vmm_json(&["run", "--workload", "quick", "--no-native"]);
    for r in v["results"].as_array().unwrap() {
        let unit = r["size_unit"].as_str().unwrap();
        match r["name"].as_str().unwrap() {
            n if n.starts_with("aes") => {
                assert_eq!(unit, "bytes");
                let want = r["seconds"].as_f64().unwrap() * 1e9
                    / (r["work"].as_u64().unwrap() / 16) as f64;
                assert!((r["ns_per_block"].as_f64().unwrap() - want).abs() <= want * 1e-9);
            }
            _ => assert_eq!(unit, "matrix order"),
        }
        assert!(r["size"].is_u64() && r["invalid"].is_null(), "{r}");
        let cpu = r["cycles"].as_f64().unwrap() / r["work"].as_f64().unwrap();
        assert!((r["cycles_per_unit"].as_f64().unwrap() - cpu).abs() <= cpu * 1e-9);
    }
}

/// A `--snapshot-after` the guest never reaches is reported, not silent.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn snapshot_after_longer_than_the_run_is_reported() {
    if !kvm_or_skip("snapshot_after_longer_than_the_run_is_reported") {
        return;
    }
    let file = std::env::temp_dir().join(format!("vmm-ux-{}-never.snap", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let (out, v) = vmm_json(&[
        "run",
        "--workload",
        "none",
        "--snapshot-after",
        "300",
        "--snapshot-file",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("vmm: warning: the guest exited after ")
            && err.contains(", before --snapshot-after 300: no snapshot written"),
        "{err}"
    );
    let s = &v["snapshot"];
    assert_eq!(s["requested_after_s"], 300.0, "{s}");
    assert_eq!(s["written"], false, "{s}");
    assert!(
        s["reason"]
            .as_str()
            .unwrap()
            .contains("no snapshot written"),
        "{s}"
    );
    assert!(!file.exists());
}

/// A workload row that was being timed when the snapshot was taken is
/// marked invalid after the restore, never reported as a throughput.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn no_throughput_spans_a_snapshot() {
    if !kvm_or_skip("no_throughput_spans_a_snapshot") {
        return;
    }
    // The VM stays stopped far longer than any one measurement lasts: 4 s
    // on a host at full speed. Where rows run longer (kvm_amd under TCG
    // takes 10 s for one), the premise is restored with a gap four times
    // the longest row, so a row that spans the stop still stands out.
    let (mut out, mut v, mut gap_s) = snapshot_then_restore(4.0);
    let longest = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["invalid"].is_null())
        .filter_map(|r| r["seconds"].as_f64())
        .fold(0.0, f64::max);
    if longest * 2.0 >= gap_s {
        (out, v, gap_s) = snapshot_then_restore((longest * 4.0).min(300.0));
    }
    let rows = v["results"].as_array().unwrap();
    assert!(!rows.is_empty(), "{v:#}");
    let mut invalid = 0;
    for r in rows {
        assert_eq!(r["check"], "pass", "{r}");
        if r["invalid"].is_null() {
            // A measured row lasted less than the stop: it cannot span it.
            let secs = r["seconds"].as_f64().unwrap();
            assert!(secs < gap_s, "row timed across the snapshot reported: {r}");
            assert!(r["mb_per_s"].is_number() || r["gflops"].is_number(), "{r}");
        } else {
            invalid += 1;
            assert!(
                r["invalid"]
                    .as_str()
                    .unwrap()
                    .starts_with("spans a snapshot"),
                "{r}"
            );
            for f in ["mb_per_s", "gflops", "events_per_s"] {
                assert!(r.get(f).is_none_or(|x| x.is_null()), "{f}: {r}");
            }
            assert!(r["native_ratio"].is_null(), "{r}");
            // Its raw time includes the stop.
            assert!(r["seconds"].as_f64().unwrap() >= gap_s - 1.0, "{r}");
        }
    }
    assert!(invalid <= 1, "only one row can be running at a snapshot");
    if invalid == 1 {
        assert!(stderr(&out).contains("not a measurement, it spans a snapshot"));
    }
}

/// Run every workload, snapshot 1.5 s in (mid-workload), wait `gap_s`
/// seconds, restore: the restore's output and JSON, and the gap.
fn snapshot_then_restore(gap_s: f64) -> (std::process::Output, serde_json::Value, f64) {
    let file = std::env::temp_dir().join(format!("vmm-ux-{}-mid.snap", std::process::id()));
    let _ = std::fs::remove_file(&file);
    // TCG (the hardware-KVM harness) runs the full sizes for minutes, past
    // the 600 s a test binary is given: every row at quick sizes there.
    let workload = harness_sized("all");
    let (out, v) = vmm_json(&[
        "run",
        "--workload",
        &workload,
        "--no-native",
        "--snapshot-after",
        "1.5",
        "--snapshot-file",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(v["exit_reason"], "snapshotted", "{v:#}");
    assert_eq!(v["snapshot"]["written"], true);
    std::thread::sleep(std::time::Duration::from_secs_f64(gap_s));
    let (out, v) = vmm_json(&["restore", file.to_str().unwrap(), "--no-native"]);
    let _ = std::fs::remove_file(&file);
    assert!(out.status.success(), "{}", stderr(&out));
    (out, v, gap_s)
}

/// `vmm ... --help` for every subcommand: every option and argument has a
/// description, and none points into the source tree.
#[test]
fn every_option_has_help() {
    fn help(path: &[&str]) -> String {
        let out = Command::new(vmm_bin())
            .args(path)
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success(), "{path:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    let mut seen = 0;
    let mut checked = 0;
    while let Some(path) = todo.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args);
        seen += 1;
        assert!(
            !text.contains("tests/data"),
            "{args:?} points into the source tree:\n{text}"
        );
        let lines: Vec<&str> = text.lines().collect();
        let mut section = "";
        for (i, l) in lines.iter().enumerate() {
            if !l.starts_with(' ') && l.ends_with(':') {
                section = l;
                continue;
            }
            match section {
                "Commands:" => {
                    let name = l.split_whitespace().next().unwrap_or("");
                    if !name.is_empty() && name != "help" && l.starts_with("  ") {
                        let mut sub = path.clone();
                        sub.push(name.to_string());
                        todo.push(sub);
                    }
                }
                "Options:" | "Arguments:" => {
                    let t = l.trim_start();
                    let entry = (t.starts_with('-') || t.starts_with('<') || t.starts_with('['))
                        && l.len() - t.len() <= 6;
                    if !entry {
                        continue;
                    }
                    // Long help: the description is on the next line (10
                    // spaces in); short help (one-line): on the same line.
                    let inline = t.contains("  ") && !t.trim_end().ends_with('>');
                    let next = lines.get(i + 1).copied().unwrap_or("");
                    checked += 1;
                    assert!(
                        inline || (next.starts_with("          ") && !next.trim().is_empty()),
                        "{args:?}: `{}` has no help text:\n{text}",
                        t.trim()
                    );
                }
                _ => {}
            }
        }
    }
    assert!(seen >= 8, "visited {seen} help pages");
    assert!(checked >= 40, "checked {checked} options");
}

/// `vmm`'s entry point is the C `main` (start-up time); it still ignores
/// SIGPIPE as Rust's runtime would: output into a closed pipe ends the
/// command with a status, never kills it with the signal.
#[test]
fn a_closed_output_pipe_is_not_a_signal_death() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let mut child = Command::new(vmm_bin())
        .args(["man"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn vmm");
    // Close the only read end before the child writes anything.
    drop(child.stdout.take());
    let status = child.wait().expect("wait");
    assert_eq!(status.signal(), None, "{status:?}");
    assert!(status.code().is_some(), "{status:?}");
}
