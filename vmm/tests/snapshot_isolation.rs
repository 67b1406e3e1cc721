//! A restored guest's memory is its own from the moment `vmm restore`
//! opens the snapshot, and every page is verified (issue 37 §1).
//!
//! Each way into the file while its restore runs (overwrite in place,
//! truncate, `cp` over it, remove and replace it, append to it) is done as
//! soon as the restoring process has the file open: the guest must still
//! end with every check passing, and the report mark the row timed across
//! the snapshot as it does for an untouched file (the report never reads
//! the file again). A flipped byte in the stored pages
//! stops the restore with status 69 naming the page and the section,
//! before the first `KVM_RUN` with `--verify-memory`; a snapshot of a
//! restored guest whose file was truncated is written and restores.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{kvm_or_skip, stderr, vmm, vmm_bin, vmm_json};

/// Status of a snapshot page that failed (`vmm::report::EXIT_SNAPSHOT_MEMORY`).
const EXIT_SNAPSHOT_MEMORY: i32 = 69;

fn snap_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "vmm-isolation-test-{}-{name}.snap",
        std::process::id()
    ))
}

/// Removes its file when dropped, a failed test's too (snapshots are
/// tens of MB).
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The guest's workloads: `gemm`, or its small sizes (`gemm,quick`) in the
/// hardware-KVM harness, where TCG runs the full DGEMM sizes so slowly that
/// the nine tests' snapshots and restores took more than its 600 s for one
/// binary. Either has several DGEMM rows, the largest last.
fn workload() -> String {
    common::harness_sized("gemm")
}

/// When to snapshot the guest: 0.6 of its run, timed once, lands inside
/// the largest DGEMM on any CPU (as `vmm bench snapshot` does), so one row
/// is timed across the snapshot.
fn after() -> &'static str {
    static AFTER: OnceLock<String> = OnceLock::new();
    AFTER.get_or_init(|| {
        let (out, v) = vmm_json(&["run", "--workload", &workload(), "--no-native"]);
        assert!(out.status.success(), "{v}");
        let run_s = v["timing_ms"]["run"].as_f64().unwrap() / 1e3;
        format!("{:.3}", run_s * 0.6)
    })
}

/// A new snapshot of the `gemm` guest mid-DGEMM at `path`.
fn snapshot_to(path: &Path) {
    let (out, v) = vmm_json(&[
        "run",
        "--workload",
        &workload(),
        "--no-native",
        "--snapshot-after",
        after(),
        "--snapshot-file",
        path.to_str().unwrap(),
        "--force",
    ]);
    assert!(out.status.success(), "{v}");
    assert_eq!(v["exit_reason"], "snapshotted", "{v}");
}

/// A new snapshot of the `gemm` guest mid-DGEMM, named `name`, for a
/// test to restore as it likes (and remove).
fn fresh(name: &str) -> PathBuf {
    let p = snap_path(name);
    snapshot_to(&p);
    p
}

/// The rows of a restore that ended 0 with every check passing, as
/// "name variant size valid|invalid".
fn passing_rows(out: &Output, v: &serde_json::Value) -> Vec<String> {
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", stderr(out));
    assert_eq!(v["exit_reason"], "exited", "{v}");
    let rows: Vec<String> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["check"], "pass", "{r}");
            format!(
                "{} {} {} {}",
                r["name"],
                r["variant"],
                r["size"],
                if r["invalid"].is_null() {
                    "valid"
                } else {
                    "invalid"
                }
            )
        })
        .collect();
    assert!(!rows.is_empty(), "{v}");
    rows
}

/// The report of a guest restored right after its snapshot: every check
/// passing and exactly one row, the one timed across the snapshot, marked
/// invalid. Found from the snapshot's memory as the restore kept it: a
/// report that read the file again would find nothing there (a replaced or
/// lengthened file is no snapshot) and mark nothing. (A restore that
/// starts over a second after the snapshot may mark nothing either: the
/// gap then exceeds the row; see `report::spanning`.)
fn assert_report(name: &str, out: &Output, v: &serde_json::Value) {
    let rows = passing_rows(out, v);
    let invalid: Vec<&String> = rows.iter().filter(|r| r.ends_with("invalid")).collect();
    assert_eq!(
        invalid.len(),
        1,
        "{name}: one row timed across the snapshot: {rows:?}"
    );
}

/// Wait until process `pid` has `path` open (the restore's first step),
/// then until it holds a lease on it (`/proc/locks`), taken right after the
/// open, before the restore reads a byte: from then on the file is the
/// restore's. A `vmm` that takes no lease is given 200 ms more (its guest
/// is still running then).
fn wait_open(pid: u32, path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let fds = PathBuf::from(format!("/proc/{pid}/fd"));
    loop {
        let open = std::fs::read_dir(&fds)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == path));
        if open {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "vmm restore never opened {}",
            path.display()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let leased = Instant::now() + Duration::from_millis(200);
    while Instant::now() < leased {
        let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        let pid = pid.to_string();
        if locks
            .lines()
            .any(|l| l.contains("LEASE") && l.split_whitespace().any(|w| w == pid))
        {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Snapshot the guest, restore it at once, do `hostile` to the file as
/// soon as the restore has it open, and check the guest and the report.
fn restore_while(name: &str, hostile: impl FnOnce(&Path)) {
    let path = snap_path(name);
    let _removed = Removed(path.clone());
    snapshot_to(&path);
    let child = Command::new(vmm_bin())
        .args(["restore", path.to_str().unwrap(), "--no-native", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_open(child.id(), &path);
    hostile(&path);
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&path);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{name}: no JSON ({e}): {}", stderr(&out)));
    assert_report(name, &out, &v);
}

/// Bytes unlike any snapshot's: 0xa5 everywhere.
fn junk(len: usize) -> Vec<u8> {
    vec![0xa5; len]
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn overwriting_the_file_in_place_changes_nothing_the_guest_sees() {
    if !kvm_or_skip("overwriting_the_file_in_place_changes_nothing_the_guest_sees") {
        return;
    }
    restore_while("overwrite", |p| {
        let len = std::fs::metadata(p).unwrap().len() as usize;
        let mut f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        f.write_all(&junk(len)).unwrap();
        f.sync_all().unwrap();
    });
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn truncating_the_file_takes_nothing_away() {
    if !kvm_or_skip("truncating_the_file_takes_nothing_away") {
        return;
    }
    restore_while("truncate", |p| {
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        f.set_len(0).unwrap();
    });
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn copying_the_same_bytes_over_the_file_takes_nothing_away() {
    if !kvm_or_skip("copying_the_same_bytes_over_the_file_takes_nothing_away") {
        return;
    }
    // `cp` over it: open with O_TRUNC, then the very same bytes.
    restore_while("cp", |p| {
        let same = std::fs::read(p).unwrap();
        std::fs::write(p, same).unwrap();
    });
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn removing_and_replacing_the_file_changes_nothing() {
    if !kvm_or_skip("removing_and_replacing_the_file_changes_nothing") {
        return;
    }
    restore_while("replace", |p| {
        let len = std::fs::metadata(p).unwrap().len() as usize;
        std::fs::remove_file(p).unwrap();
        std::fs::write(p, junk(len)).unwrap();
    });
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn appending_to_the_file_changes_nothing() {
    if !kvm_or_skip("appending_to_the_file_changes_nothing") {
        return;
    }
    restore_while("append", |p| {
        let mut f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
        f.write_all(&junk(8192)).unwrap();
    });
}

/// A new snapshot with one byte flipped in its middle stored page: that
/// page's index and the flipped byte's file offset.
fn flipped(name: &str) -> (Removed, u64, u64) {
    let p = fresh(name);
    let bytes = std::fs::read(&p).unwrap();
    let table = vmm::snapshot::format::read_table(&bytes).unwrap();
    let pages = table.iter().find(|e| e.name == "memory.pages").unwrap();
    let k = pages.length / 4096 / 2;
    let at = pages.offset + k * 4096 + 100;
    let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[bytes[at as usize] ^ 0x01]).unwrap();
    (Removed(p), k, at)
}

/// A flipped byte stops the restore with status 69, naming the page (its
/// index, guest address and file offset) and the section, never the
/// guest: while the guest runs by default, before it starts with
/// `--verify-memory`.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_flipped_byte_stops_the_restore_with_its_own_status() {
    if !kvm_or_skip("a_flipped_byte_stops_the_restore_with_its_own_status") {
        return;
    }
    let (removed, k, at) = flipped("flipped");
    let page = format!("stored page {k} (guest address 0x");
    let p = &removed.0;
    let (out, v) = vmm_json(&["restore", p.to_str().unwrap(), "--no-native"]);
    assert_eq!(
        out.status.code(),
        Some(EXIT_SNAPSHOT_MEMORY),
        "{v}\n{}",
        stderr(&out)
    );
    assert_eq!(v["exit_reason"], "snapshot_memory", "{v}");
    let why = v["exit_description"].as_str().unwrap_or_default();
    for needle in [
        page.clone(),
        format!("file offset {})", at - 100),
        "section \"memory.pages\" is corrupt".into(),
        "not the guest".into(),
    ] {
        assert!(why.contains(&needle), "{needle:?} not in {why:?}");
    }

    let out = vmm(&[
        "restore",
        p.to_str().unwrap(),
        "--no-native",
        "--verify-memory",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(EXIT_SNAPSHOT_MEMORY), "{err}");
    assert!(out.stdout.is_empty(), "the guest never ran: no report");
    assert!(
        err.contains(&page)
            && err.contains("section \"memory.pages\" is corrupt")
            && err.contains("the guest was not started"),
        "{err}"
    );
}

/// `--verify-memory` reads and verifies every page before the first
/// `KVM_RUN`; without it they come in on demand (as root, with a lease),
/// and the JSON says which.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn verify_memory_reads_every_page_before_the_guest_runs() {
    if !kvm_or_skip("verify_memory_reads_every_page_before_the_guest_runs") {
        return;
    }
    let removed = Removed(fresh("verify"));
    let p = &removed.0;
    for (flag, mode) in [(Some("--verify-memory"), "up_front"), (None, "on_demand")] {
        let mut args = vec!["restore", p.to_str().unwrap(), "--no-native"];
        args.extend(flag);
        let (out, v) = vmm_json(&args);
        passing_rows(&out, &v);
        let m = &v["restored_memory"];
        if flag.is_none() && m["mode"] == "up_front" {
            eprintln!("on demand not possible here: {}", m["why_up_front"]);
            continue;
        }
        assert_eq!(m["mode"], mode, "{m}");
        if flag.is_some() {
            assert_eq!(m["why_up_front"], "--verify-memory", "{m}");
            assert_eq!(m["faults"], 0, "{m}");
        }
        assert!(m["fill_ms"].as_f64().unwrap() > 0.0, "{m}");
    }
}

/// A restored guest whose file is truncated while it runs is snapshotted
/// again (no SIGBUS: its memory is its own), and that snapshot restores
/// with every check passing.
///
/// The first snapshot is the one the guest asks for as its workloads
/// start (`snapshot=start`), so the restored guest has its whole run
/// ahead, and the second is taken half-way to [`after`] (0.3 of a run).
/// It used to restore a mid-DGEMM snapshot and take the second after a
/// fixed 0.3 s: with 0.1 s of work left the guest could exit first (a CI
/// failure on Zen 3: "the guest exited after 0.1 s, before
/// --snapshot-after 0.3").
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_snapshot_after_the_file_was_truncated_is_written_and_restores() {
    if !kvm_or_skip("a_snapshot_after_the_file_was_truncated_is_written_and_restores") {
        return;
    }
    let first = snap_path("again-1");
    let second = snap_path("again-2");
    let _removed = (Removed(first.clone()), Removed(second.clone()));
    let (out, v) = vmm_json(&[
        "run",
        "--workload",
        &workload(),
        "--no-native",
        "--cmdline",
        "snapshot=start",
        "--snapshot-file",
        first.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{v}");
    assert_eq!(v["exit_reason"], "snapshotted", "{v}");
    let second_after = format!("{:.3}", after().parse::<f64>().unwrap() / 2.0);
    let child = Command::new(vmm_bin())
        .args([
            "restore",
            first.to_str().unwrap(),
            "--no-native",
            "--json",
            "--snapshot-after",
            &second_after,
            "--snapshot-file",
            second.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_open(child.id(), &first);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .unwrap()
        .set_len(0)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&first);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}; {:?}): {}", out.status, stderr(&out)));
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", stderr(&out));
    assert_eq!(v["exit_reason"], "snapshotted", "{v}");
    let (out, v) = vmm_json(&["restore", second.to_str().unwrap(), "--no-native"]);
    let _ = std::fs::remove_file(&second);
    passing_rows(&out, &v);
}

/// A format-2 file written before `memory.crc32` still restores: its pages
/// are read up front and checked against the section's CRC32; a flipped
/// byte there is named by section (69).
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_file_without_page_checksums_is_verified_whole_up_front() {
    if !kvm_or_skip("a_file_without_page_checksums_is_verified_whole_up_front") {
        return;
    }
    use vmm::snapshot::format::Container;
    let new = Removed(fresh("new"));
    let bytes = std::fs::read(&new.0).unwrap();
    let mut c = Container::parse(&bytes).unwrap();
    c.sections.retain(|s| s.name != "memory.crc32");
    let old = c.to_bytes();
    let removed = Removed(snap_path("old"));
    let p = &removed.0;
    std::fs::write(p, &old).unwrap();
    let (out, v) = vmm_json(&["restore", p.to_str().unwrap(), "--no-native"]);
    passing_rows(&out, &v);
    assert_eq!(v["restored_memory"]["mode"], "up_front", "{v}");
    let why = v["restored_memory"]["why_up_front"].as_str().unwrap();
    assert!(why.contains("memory.crc32"), "{why}");

    let table = vmm::snapshot::format::read_table(&old).unwrap();
    let pages = table.iter().find(|e| e.name == "memory.pages").unwrap();
    let mut bad = old;
    bad[pages.offset as usize + 123] ^= 0x40;
    std::fs::write(p, &bad).unwrap();
    let out = vmm(&["restore", p.to_str().unwrap(), "--no-native"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(EXIT_SNAPSHOT_MEMORY), "{err}");
    assert!(err.contains("section \"memory.pages\" is corrupt"), "{err}");
}
