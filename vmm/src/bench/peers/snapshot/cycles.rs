//! One snapshot/restore cycle per VMM: `vmm` through its own command line,
//! Cloud Hypervisor and Firecracker through their API sockets, each timed
//! as the module documentation of [`super`] says, its files deleted when
//! the cycle ends.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use super::process::spawn_with_stdin;
use super::process::{api, check_restored, ms, os, scratch, spawn, wait, wait_at_point, Reaper};
use super::serial_input::SerialInput;
use super::{check_space, free_space, guest_words, ChRestore, Cycle, CycleError, PeerGuest};
use super::{SNAPSHOT_POINT, SNAPSHOT_WORKLOAD};
use crate::bench::peers::http;
use crate::bench::peers::model::{tail_text, Vmm, MEM_MIB};

/// Lengths and allocated bytes of the files at `paths` (directories: their
/// files, one level), added.
fn sizes(paths: &[&Path]) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut files = Vec::new();
    for p in paths {
        match std::fs::read_dir(p) {
            Ok(d) => files.extend(d.flatten().map(|e| e.path())),
            Err(_) => files.push(p.to_path_buf()),
        }
    }
    files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .filter(|m| m.is_file())
        .fold((0, 0), |(l, d), m| (l + m.len(), d + m.blocks() * 512))
}

/// Deletes snapshot files and directories when dropped: a peer's snapshot
/// is as large as its RAM, so none outlives its cycle, failed or not.
struct Remove(Vec<std::path::PathBuf>);

impl Drop for Remove {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
        }
    }
}

/// Runs a cycle for `t`, with its scratch files in `dir`. `None` for a VMM
/// whose snapshots are not measured.
pub fn cycle(
    vmm: Vmm,
    binary: &Path,
    kernel: &Path,
    dir: &Path,
    timeout: Duration,
) -> Option<Result<Cycle, CycleError>> {
    let g = PeerGuest {
        kernel,
        workload: SNAPSHOT_WORKLOAD,
        mem_mib: u64::from(MEM_MIB),
        point: SNAPSHOT_POINT,
        ch_restore: ChRestore::Copy,
    };
    match vmm {
        Vmm::Vmm => Some(ours(binary, kernel, dir, timeout)),
        Vmm::Qemu => None,
        Vmm::CloudHypervisor | Vmm::Firecracker => peer_cycle(vmm, binary, &g, dir, timeout),
    }
}

/// A snapshot/restore cycle of peer `vmm` on guest `g`, its files in
/// `dir` (deleted before this returns). `None` for a VMM that is not a
/// peer with a snapshot API here (`vmm`, QEMU).
pub fn peer_cycle(
    vmm: Vmm,
    binary: &Path,
    g: &PeerGuest<'_>,
    dir: &Path,
    timeout: Duration,
) -> Option<Result<Cycle, CycleError>> {
    let space = || -> Result<(), CycleError> { check_space(dir, g.mem_mib, free_space(dir)?) };
    match vmm {
        Vmm::Vmm | Vmm::Qemu => None,
        Vmm::CloudHypervisor => {
            Some(space().and_then(|()| cloud_hypervisor(binary, g, dir, timeout)))
        }
        Vmm::Firecracker => Some(space().and_then(|()| firecracker(binary, g, dir, timeout))),
    }
}

/// `vmm run` snapshotting at the guest's point, then `vmm restore`, both
/// `--json`.
fn ours(binary: &Path, kernel: &Path, dir: &Path, timeout: Duration) -> Result<Cycle, CycleError> {
    let snap = dir.join("vmm.snap");
    let _ = std::fs::remove_file(&snap);
    let secs = timeout.as_secs().max(1).to_string();
    let point = format!("snapshot={}", SNAPSHOT_POINT.name());
    let mut args = os(&[
        "run",
        "--workload",
        SNAPSHOT_WORKLOAD,
        "--cmdline",
        &point,
        "--no-native",
        "--json",
        "--force",
    ]);
    args.extend(os(&["--mem", &MEM_MIB.to_string(), "--timeout", &secs]));
    args.push("--snapshot-file".into());
    args.push(snap.clone().into());
    args.push("--kernel".into());
    args.push(kernel.into());
    let log = dir.join("vmm-snapshot.json");
    let deadline = Instant::now() + timeout;
    let mut c = Reaper(Some(spawn(binary, &args, &log)?));
    wait(c.child(), binary, deadline, timeout)?;
    let run = read_json(&log)?;
    let save_ms = run["snapshot"]["save_ms"].as_f64().ok_or_else(|| {
        CycleError::Vmm(format!(
            "vmm run wrote no snapshot: {}",
            run["snapshot"]["reason"]
                .as_str()
                .unwrap_or("no snapshot section")
        ))
    })?;
    let (file_bytes, disk_bytes) = sizes(&[&snap]);
    let _remove = Remove(vec![snap.clone()]);
    let mut args = os(&["restore", "--no-native", "--json", "--timeout", &secs]);
    args.push(snap.into());
    let log = dir.join("vmm-restore.json");
    let deadline = Instant::now() + timeout;
    let spawned = Instant::now();
    let mut c = Reaper(Some(spawn(binary, &args, &log)?));
    let status = wait(c.child(), binary, deadline, timeout)?;
    let wall = spawned.elapsed();
    let restored = read_json(&log)?;
    if !status.success() || restored["exit_status"] != 0 {
        return Err(CycleError::Restored(format!(
            "vmm restore: {status}, guest exit_status {}",
            restored["exit_status"]
        )));
    }
    let run_ms = restored["timing_ms"]["run"]
        .as_f64()
        .ok_or_else(|| CycleError::Vmm("vmm restore --json has no timing_ms.run".into()))?;
    Ok(Cycle {
        snapshot_ms: save_ms,
        restore_ms: (ms(wall) - run_ms).max(0.0),
        file_bytes,
        disk_bytes,
    })
}

fn read_json(path: &Path) -> Result<serde_json::Value, CycleError> {
    let bytes = std::fs::read(path).map_err(scratch(path))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        let stderr = std::fs::read(path.with_extension("stderr")).unwrap_or_default();
        CycleError::Vmm(format!(
            "{}: not JSON ({e}); stderr tail: {:?}",
            path.display(),
            tail_text(&stderr)
        ))
    })
}

/// What the snapshot half of a peer's cycle measured.
struct Taken {
    snapshot_ms: f64,
    file_bytes: u64,
    disk_bytes: u64,
}

/// Starts a peer with `args` (its serial output to `log`), waits for the
/// guest at its snapshot point and times `snapshot` (the pause and
/// snapshot API calls, given the deadline); the peer is stopped before the
/// sizes of the snapshot's `files` are taken.
fn timed_snapshot(
    binary: &Path,
    args: &[OsString],
    log: &Path,
    g: &PeerGuest<'_>,
    timeout: Duration,
    files: &[&Path],
    snapshot: impl FnOnce(Instant) -> Result<(), CycleError>,
) -> Result<Taken, CycleError> {
    let deadline = Instant::now() + timeout;
    let mut c = Reaper(Some(spawn(binary, args, log)?));
    wait_at_point(c.child(), log, g.point, deadline, timeout)?;
    let paused = Instant::now();
    snapshot(deadline)?;
    let snapshot_ms = ms(paused.elapsed());
    drop(c);
    let (file_bytes, disk_bytes) = sizes(files);
    Ok(Taken {
        snapshot_ms,
        file_bytes,
        disk_bytes,
    })
}

/// Starts a peer with `args` (its serial output to `log`, its input a new
/// pseudo-terminal), times it up to the end of `resume` (the restore and
/// resume API calls, given the deadline), then releases the guest and
/// checks the restored run's end: the cycle, with what `taken` measured.
fn timed_restore(
    taken: Taken,
    binary: &Path,
    args: &[OsString],
    log: &Path,
    g: &PeerGuest<'_>,
    timeout: Duration,
    resume: impl FnOnce(Instant) -> Result<(), CycleError>,
) -> Result<Cycle, CycleError> {
    let mut input = SerialInput::open()?;
    let deadline = Instant::now() + timeout;
    let spawned = Instant::now();
    let mut c = Reaper(Some(spawn_with_stdin(binary, args, log, input.stdin())?));
    resume(deadline)?;
    let restore_ms = ms(spawned.elapsed());
    input.release()?;
    let status = wait(c.child(), binary, deadline, timeout)?;
    check_restored(status, log, g.point)?;
    Ok(Cycle {
        snapshot_ms: taken.snapshot_ms,
        restore_ms,
        file_bytes: taken.file_bytes,
        disk_bytes: taken.disk_bytes,
    })
}

fn cloud_hypervisor(
    binary: &Path,
    g: &PeerGuest<'_>,
    dir: &Path,
    timeout: Duration,
) -> Result<Cycle, CycleError> {
    let sock = dir.join("ch.sock");
    let sock2 = dir.join("ch-restore.sock");
    let snap = dir.join("ch-snapshot");
    for p in [&sock, &sock2] {
        let _ = std::fs::remove_file(p);
    }
    let _ = std::fs::remove_dir_all(&snap);
    std::fs::create_dir(&snap).map_err(scratch(&snap))?;
    let _remove = Remove(vec![snap.clone()]);
    let words = guest_words(g.workload, g.point);
    let mut args: Vec<OsString> = vec![
        "--api-socket".into(),
        format!("path={}", sock.display()).into(),
    ];
    args.push("--kernel".into());
    args.push(g.kernel.into());
    args.extend(os(&[
        "--cpus",
        "boot=1",
        "--memory",
        &format!("size={}M", g.mem_mib),
        "--serial",
        "tty",
        "--console",
        "off",
        "--cmdline",
        &words,
    ]));
    let log = dir.join("ch-snapshot.serial.log");
    let taken = timed_snapshot(binary, &args, &log, g, timeout, &[&snap], |deadline| {
        api(&sock, "PUT", "/api/v1/vm.pause", None, deadline)?;
        let body = serde_json::json!({ "destination_url": format!("file://{}", snap.display()) });
        let body = body.to_string();
        api(&sock, "PUT", "/api/v1/vm.snapshot", Some(&body), deadline)
    })?;

    let mode = match g.ch_restore {
        ChRestore::Copy => "",
        ChRestore::OnDemand => ",memory_restore_mode=ondemand",
    };
    let args: Vec<OsString> = vec![
        "--api-socket".into(),
        format!("path={}", sock2.display()).into(),
        "--restore".into(),
        format!("source_url=file://{}{mode}", snap.display()).into(),
    ];
    let log = dir.join("ch-restore.serial.log");
    timed_restore(taken, binary, &args, &log, g, timeout, |deadline| {
        // The API answers before `--restore` has finished ("VM is not
        // running"): wait for the restored VM to report itself paused.
        loop {
            let info = http::request(&sock2, "GET", "/api/v1/vm.info", None, deadline);
            if matches!(&info, Ok(b) if b.contains("\"Paused\"")) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(CycleError::Vmm(format!(
                    "the restored VM never reported itself paused: {info:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        api(&sock2, "PUT", "/api/v1/vm.resume", None, deadline)
    })
}

fn firecracker(
    binary: &Path,
    g: &PeerGuest<'_>,
    dir: &Path,
    timeout: Duration,
) -> Result<Cycle, CycleError> {
    let sock = dir.join("fc.sock");
    let sock2 = dir.join("fc-restore.sock");
    let state = dir.join("fc.vmstate");
    let mem = dir.join("fc.mem");
    for p in [&sock, &sock2, &state, &mem] {
        let _ = std::fs::remove_file(p);
    }
    let _remove = Remove(vec![state.clone(), mem.clone()]);
    let cfg = serde_json::json!({
        "boot-source": {
            "kernel_image_path": g.kernel.to_string_lossy(),
            "boot_args": guest_words(g.workload, g.point),
        },
        "drives": [],
        "machine-config": { "vcpu_count": 1, "mem_size_mib": g.mem_mib },
    });
    let cfg_path = dir.join("firecracker-snapshot.json");
    std::fs::write(&cfg_path, cfg.to_string()).map_err(scratch(&cfg_path))?;
    let mut args: Vec<OsString> = vec!["--api-sock".into(), sock.clone().into()];
    args.push("--config-file".into());
    args.push(cfg_path.into());
    args.extend(os(&["--level", "Error"]));
    let log = dir.join("fc-snapshot.serial.log");
    let files: [&Path; 2] = [&state, &mem];
    let taken = timed_snapshot(binary, &args, &log, g, timeout, &files, |deadline| {
        let paused = Some(r#"{"state":"Paused"}"#);
        api(&sock, "PATCH", "/vm", paused, deadline)?;
        let body = serde_json::json!({
            "snapshot_type": "Full",
            "snapshot_path": state.to_string_lossy(),
            "mem_file_path": mem.to_string_lossy(),
        });
        let body = body.to_string();
        api(&sock, "PUT", "/snapshot/create", Some(&body), deadline)
    })?;

    let mut args: Vec<OsString> = vec!["--api-sock".into(), sock2.clone().into()];
    args.extend(os(&["--level", "Error"]));
    let log = dir.join("fc-restore.serial.log");
    timed_restore(taken, binary, &args, &log, g, timeout, |deadline| {
        let body = serde_json::json!({
            "snapshot_path": state.to_string_lossy(),
            "mem_backend": { "backend_type": "File", "backend_path": mem.to_string_lossy() },
            "resume_vm": false,
        });
        let body = body.to_string();
        api(&sock2, "PUT", "/snapshot/load", Some(&body), deadline)?;
        let resumed = Some(r#"{"state":"Resumed"}"#);
        api(&sock2, "PATCH", "/vm", resumed, deadline)
    })
}
