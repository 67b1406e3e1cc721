//! Argument parsing, the goals against the peers, the floor's file and the
//! peers' plans and disk checks, without a VM.

use std::path::Path;

use super::measure::write_floor;
use super::*;

#[test]
fn snapshot_points() {
    assert_eq!(parse_point(DEFAULT_POINT), Ok(SnapshotPhase::Mid));
    assert_eq!(parse_point("end"), Ok(SnapshotPhase::End));
    assert_eq!(
        parse_point("0.5").unwrap_err(),
        "\"0.5\" is no snapshot point: one of start, mid, end"
    );
}

/// A run that ended without its snapshot says how, and which point it
/// never asked at; one whose snapshot could not be written says that (a
/// full disk once read "exited with status 0 without asking").
#[test]
fn a_missed_point_is_named() {
    use super::measure::no_snapshot;
    use crate::run::RunEnd;
    let full =
        "output: cannot write snapshot /d/bench-64MiB.snap: not enough free space".to_string();
    assert_eq!(
        no_snapshot(&RunEnd::Exited(0), &[full], SnapshotPhase::Mid),
        "no snapshot: the guest asked at its point snapshot=mid but the file was not written: \
         output: cannot write snapshot /d/bench-64MiB.snap: not enough free space"
    );
    assert_eq!(
        no_snapshot(&RunEnd::Exited(1), &[], SnapshotPhase::Mid),
        "no snapshot: the guest exited with status 1 without asking for one at its point snapshot=mid"
    );
    assert_eq!(
        no_snapshot(
            &RunEnd::TimedOut(Duration::from_secs(20)),
            &[],
            SnapshotPhase::End
        ),
        "no snapshot: the guest ran past --timeout (20 s) and was stopped without asking for one \
         at its point snapshot=end"
    );
    let stopped = no_snapshot(
        &RunEnd::ProtocolViolation("XCR0 0x7".into()),
        &[],
        SnapshotPhase::Mid,
    );
    assert!(
        stopped.starts_with("no snapshot: the guest ended otherwise (ProtocolViolation("),
        "{stopped}"
    );
}

#[test]
fn mem_lists() {
    assert_eq!(parse_mem("64,512, 2048").unwrap(), vec![64, 512, 2048]);
    assert!(parse_mem("64,x").unwrap_err().contains("\"x\""));
    let big = (MAX_MEM_MIB + 1).to_string();
    assert!(parse_mem(&big).unwrap_err().contains("outside"));
}

const CH: Vmm = Vmm::CloudHypervisor;
const FC: Vmm = Vmm::Firecracker;

#[test]
fn goals_against_the_best_peer() {
    // 512 MiB: vmm 20 ms against CH 200 / FC 100 (best): 0.2x, met.
    let g = Goals::of(
        512,
        Some(20.0),
        Some(5.0),
        1000,
        &[
            (CH, Some(200.0), Some(25.0), 4000),
            (FC, Some(100.0), Some(10.0), 2000),
        ],
    );
    assert_eq!(g.best_snapshot_peer, Some(FC));
    assert_eq!(g.snapshot_ratio, Some(0.2));
    assert_eq!(g.snapshot_goal, Goal::Met);
    assert_eq!(g.best_restore_peer, Some(FC));
    assert_eq!(g.restore_ratio, Some(0.5));
    assert_eq!(g.restore_goal, Goal::Met);
    assert_eq!(g.file_ratio, Some(0.5));
    assert!(g.none_missed());
    // Just above 0.2x misses; a restore equal to the peer's misses.
    let g = Goals::of(
        2048,
        Some(20.5),
        Some(10.0),
        0,
        &[(FC, Some(100.0), Some(10.0), 2000)],
    );
    assert_eq!(g.snapshot_goal, Goal::Missed);
    assert_eq!(g.restore_goal, Goal::Missed);
    assert_eq!(g.file_ratio, None);
    assert!(!g.none_missed());
}

#[test]
fn goals_without_peers_or_below_their_sizes() {
    // Below 512 MiB the snapshot goal does not apply, ratio or not.
    let g = Goals::of(64, Some(50.0), Some(5.0), 1, &[(CH, Some(10.0), None, 1)]);
    assert_eq!(g.snapshot_ratio, Some(5.0));
    assert_eq!(g.snapshot_goal, Goal::NotApplicable);
    assert_eq!(g.restore_goal, Goal::Unmeasured);
    // No peer measured (absent or every cycle failed).
    let g = Goals::of(512, Some(50.0), Some(5.0), 1, &[(CH, None, None, 0)]);
    assert_eq!(g.snapshot_goal, Goal::Unmeasured);
    assert_eq!(g.restore_goal, Goal::Unmeasured);
    assert_eq!(g.best_snapshot_peer, None);
    // vmm itself not measured.
    let g = Goals::of(512, None, None, 0, &[(CH, Some(1.0), Some(1.0), 1)]);
    assert_eq!(g.snapshot_goal, Goal::Unmeasured);
    assert!(g.none_missed());
}

/// The floor's file is written in full, then gone; a directory that
/// cannot take it is an error naming the file, not a figure.
#[test]
fn write_floor_writes_and_removes_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let ms = write_floor(dir.path(), 3 << 20).unwrap();
    assert!(ms > 0.0);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let gone = dir.path().join("missing");
    let e = write_floor(&gone, 4096).unwrap_err().to_string();
    assert!(
        e.contains(&gone.join("bench-write-floor.bin").display().to_string()),
        "{e}"
    );
}

#[test]
fn peer_plans_from_the_environment() {
    let p = peer_plans(|v| match v {
        "VMM_PEER_CLOUD_HYPERVISOR" => Some("/bin/true".into()),
        // Never consulted: QEMU has no snapshot here.
        "VMM_PEER_QEMU" => Some("/nonexistent".into()),
        _ => None,
    })
    .unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].vmm, CH);
    assert_eq!(p[0].binary, Ok(PathBuf::from("/bin/true")));
    assert_eq!(p[1].vmm, FC);
    assert!(p[1]
        .binary
        .as_ref()
        .unwrap_err()
        .starts_with("VMM_PEER_FIRECRACKER is not set"));
    let e =
        peer_plans(|v| (v == "VMM_PEER_FIRECRACKER").then(|| "/nonexistent".into())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "VMM_PEER_FIRECRACKER=/nonexistent: not an executable regular file"
    );
}

#[test]
fn a_peer_snapshot_needs_its_ram_free_on_disk() {
    use super::super::peers::snapshot::{check_space, SPACE_MARGIN};
    let dir = Path::new("/scratch");
    assert!(check_space(dir, 2048, (2048 << 20) + SPACE_MARGIN).is_ok());
    let e = check_space(dir, 2048, (2048 << 20) + SPACE_MARGIN - 1).unwrap_err();
    assert_eq!(
        e.to_string(),
        "not enough free space in /scratch: a 2048 MiB snapshot needs 2304 MiB free \
         (with a 256 MiB margin), 2303 MiB are"
    );
}

/// Every failure under the tables names its size, its VMM and why; the
/// checks column counts it out.
#[test]
fn failures_name_their_vmm_and_why() {
    let peer = |vmm, failures: Vec<String>| PeerColumn {
        vmm,
        absent: None,
        snapshot_ms: Spread::of(&[40.0]),
        file_bytes: 64 << 20,
        disk_bytes: 64 << 20,
        restore_ms: Spread::of(&[30.0]),
        restores_passed: 2 - failures.len() as u32,
        failures,
    };
    let row = SnapshotRow {
        mem_mib: 64,
        snapshot_ms: Spread::of(&[20.0]),
        file_bytes: 27 << 20,
        disk_bytes: 27 << 20,
        write_floor_ms: None,
        snapshot_over_floor: None,
        restore_setup_ms: Spread::of(&[2.0]),
        restore_to_first_run_ms: Some(10.0),
        restored_run_ms: Spread::of(&[2000.0]),
        unrestored_rest_ms: Some(1900.0),
        pager_faults: None,
        pages_in_ms: None,
        restores_passed: 1,
        failures: vec!["no snapshot: the guest exited with status 1 without asking for one at its point snapshot=mid".into()],
        peers: vec![
            peer(CH, vec!["the restored guest did not finish normally: exit status: 1".into()]),
            peer(FC, vec![]),
        ],
        goals: None,
    };
    let b = SnapshotBench {
        workload: "gemm".into(),
        point: "mid".into(),
        unrestored_run_s: 3.5,
        runs: 2,
        process_start_ms: Spread::of(&[8.0]),
        rows: vec![row],
        memory_write: "writev".into(),
    };
    assert!(!b.all_ok());
    let t = b.to_table();
    assert!(
        t.starts_with("snapshot of `workload=gemm` at its point `snapshot=mid`"),
        "{t}"
    );
    assert!(t.contains("1/2 pass"), "{t}");
    assert!(
        t.contains("\n64 MiB vmm: no snapshot: the guest exited with status 1 without asking for one at its point snapshot=mid\n"),
        "{t}"
    );
    assert!(
        t.contains("\n64 MiB cloud-hypervisor: the restored guest did not finish normally: exit status: 1\n"),
        "{t}"
    );
    assert!(!t.contains("firecracker:"), "{t}");
}
