//! `vmm bench peers`: the same guest under `vmm` and QEMU here (Cloud
//! Hypervisor and Firecracker only when `VMM_PEER_CLOUD_HYPERVISOR` /
//! `VMM_PEER_FIRECRACKER` name them: CI does not build them), a record
//! parsed from every serial log, and failures (a bad variable, a peer that
//! hangs or prints no record) reported, not hidden.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{kvm_or_skip, vmm_bin};

const PEER_VARS: [&str; 3] = [
    "VMM_PEER_QEMU",
    "VMM_PEER_CLOUD_HYPERVISOR",
    "VMM_PEER_FIRECRACKER",
];

/// `vmm bench peers ARGS --json --quiet` with the peer variables of
/// `env` (the others as this process has them, unless `clear`).
fn peers(args: &[&str], env: &[(&str, &Path)], clear: bool) -> (Output, serde_json::Value) {
    let mut cmd = Command::new(vmm_bin());
    cmd.args(["bench", "peers", "--json", "--quiet"]).args(args);
    if clear {
        for v in PEER_VARS {
            cmd.env_remove(v);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run vmm");
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out, v)
}

fn row<'a>(doc: &'a serde_json::Value, vmm: &str) -> Option<&'a serde_json::Value> {
    doc["vmms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["vmm"] == vmm)
}

/// A row that measured: a positive time, a record with XCR0, every
/// exit-pio row timed `exits` times.
fn assert_measured(r: &serde_json::Value, exits: u64) {
    assert!(r["error"].is_null(), "{r}");
    assert_eq!(r["start_to_exit_ms"].as_array().unwrap().len(), 1, "{r}");
    assert!(r["start_to_exit"]["median"].as_f64().unwrap() > 0.0, "{r}");
    let xcr0 = common::hex(&r["masks"]["xcr0"]);
    assert_eq!(xcr0 & 0x3, 0x3, "x87 and SSE are always on: {r}");
    let pio = r["exit_rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "exit-pio" && x["variant"] == "cpl3-clean")
        .unwrap_or_else(|| panic!("no exit-pio cpl3-clean row: {r}"));
    assert_eq!(pio["exits"], exits);
    assert!(pio["cycles_per_exit"]["median"].as_f64().unwrap() > 0.0);
}

/// A row whose snapshot cycle worked: one snapshot and one restore time,
/// positive, and no error (the restored guest finished with status 0 and
/// its record).
fn assert_snapshotted(r: &serde_json::Value) {
    assert!(r["snapshot_error"].is_null(), "{r}");
    for k in ["snapshot_ms", "restore_ms"] {
        let v = r[k].as_array().unwrap();
        assert_eq!(v.len(), 1, "{k}: {r}");
        assert!(v[0].as_f64().unwrap() > 0.0, "{k}: {r}");
    }
    assert!(r["snapshot_time"]["median"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["restore_time"]["median"].as_f64().unwrap() > 0.0, "{r}");
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn bench_peers_runs_vmm_and_qemu_with_a_record_each() {
    let name = "bench_peers_runs_vmm_and_qemu_with_a_record_each";
    if !kvm_or_skip(name) {
        return;
    }
    let qemu = common::qemu_or_skip(name);
    let (out, doc) = peers(&["--runs", "1", "--exits", "200"], &[], false);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["runs"], 1);
    assert_eq!(doc["guest_words"], "workload=none bench=exits exits=200");

    let ours = row(&doc, "vmm").expect("vmm always runs");
    assert_measured(ours, 200);
    assert_snapshotted(ours);
    assert_eq!(
        ours["snapshot"],
        "vmm run --snapshot-file (at the guest's request), vmm restore"
    );
    assert_eq!(ours["differs_from_vmm"].as_array().unwrap().len(), 0);
    // The masks the guest reported under `vmm bench peers` are those of a
    // plain `vmm run` (the default policy: everything KVM offers).
    let (o, run) = common::vmm_json(&["run", "--workload", "none", "--no-native"]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert_eq!(
        common::hex(&ours["masks"]["xcr0"]),
        common::hex(&run["guest_xcr0"])
    );
    assert_eq!(
        common::hex(&ours["masks"]["xcr0_supported"]),
        common::hex(&run["guest_cpuid"]["xcr0_supported"])
    );

    if qemu {
        let q = row(&doc, "qemu").expect("qemu is installed: it must run");
        assert_measured(q, 200);
        // QEMU -cpu host offers what KVM supports, as vmm does.
        assert_eq!(q["masks"]["xcr0"], ours["masks"]["xcr0"]);
        assert!(q["snapshot"].as_str().unwrap().starts_with("not measured"));
        assert!(q["snapshot_time"].is_null() && q["restore_time"].is_null());
        assert!(q["snapshot_error"].is_null());
    }
    for (vmm, var) in [
        ("cloud-hypervisor", "VMM_PEER_CLOUD_HYPERVISOR"),
        ("firecracker", "VMM_PEER_FIRECRACKER"),
    ] {
        if std::env::var_os(var).is_some_and(|v| !v.is_empty()) {
            let r = row(&doc, vmm).expect("its variable is set");
            assert_measured(r, 200);
            assert_snapshotted(r);
        } else {
            eprintln!("{name}: {var} is not set: the {vmm} row is skipped");
            assert!(row(&doc, vmm).is_none());
            let s = doc["skipped"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["vmm"] == vmm)
                .expect("listed as skipped");
            assert!(s["reason"].as_str().unwrap().contains(var), "{s}");
        }
    }
}

#[test]
fn bench_peers_refuses_a_variable_naming_no_executable() {
    let (out, _) = peers(
        &["--runs", "1"],
        &[("VMM_PEER_FIRECRACKER", Path::new("/etc/passwd"))],
        true,
    );
    assert_eq!(out.status.code(), Some(68), "{}", common::stderr(&out));
    assert!(out.stdout.is_empty());
    let err = common::stderr(&out);
    assert!(
        err.contains("VMM_PEER_FIRECRACKER=/etc/passwd: not an executable regular file"),
        "{err}"
    );
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A peer that never ends is killed at --timeout, one that prints no
/// record is reported with its output; `vmm` is still measured, the table
/// is still printed, and the status is 64 (a VMM failed).
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn bench_peers_reports_a_hung_peer_and_one_without_a_record() {
    let name = "bench_peers_reports_a_hung_peer_and_one_without_a_record";
    if !kvm_or_skip(name) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hang = script(dir.path(), "hang", "exec sleep 600");
    let chatty = script(
        dir.path(),
        "chatty",
        "echo booting; echo halted; echo no KVM here >&2",
    );
    let (out, doc) = peers(
        &["--runs", "1", "--exits", "50", "--timeout", "20"],
        &[
            ("VMM_PEER_CLOUD_HYPERVISOR", hang.as_path()),
            ("VMM_PEER_FIRECRACKER", chatty.as_path()),
        ],
        true,
    );
    assert_eq!(out.status.code(), Some(64), "{}", common::stderr(&out));
    assert_measured(row(&doc, "vmm").unwrap(), 50);
    let ch = row(&doc, "cloud-hypervisor").unwrap();
    assert_eq!(ch["error"], "still running after 20 s: killed");
    // No run booted the guest: no snapshot cycle was tried.
    assert!(ch["snapshot_time"].is_null() && ch["snapshot_error"].is_null());
    assert!(ch["masks"].is_null());
    assert!(ch["start_to_exit"].is_null());
    let fc = row(&doc, "firecracker").unwrap();
    let e = fc["error"].as_str().unwrap();
    assert!(
        e.starts_with("guest log ") && e.contains("no VMMREC1 line in the log"),
        "{e}"
    );
    assert!(e.contains("(exit status: 0; serial log tail: \"booting\\nhalted\\n\"; stderr tail: \"no KVM here\\n\")"), "{e}");
    // The Firecracker config the fake peer was given names the guest.
    let cmd: Vec<&str> = fc["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(cmd[1..3], ["--no-api", "--config-file"]);
}
