//! Snapshot and restore under each VMM, mid-workload, timed the same way:
//!
//! - **snapshot**: from the pause request to the snapshot complete on disk
//!   (`vmm`: the stopped vCPU to the file written, as `vmm run` reports it
//!   in `snapshot.save_ms`);
//! - **restore**: from spawning the restoring process to the guest running
//!   again (the peers: their resume request answered; `vmm restore`: its
//!   wall time up to the run, i.e. the process's wall time minus the run
//!   time it reports).
//!
//! The guest runs [`SNAPSHOT_WORDS`] (AES throughput, about 1.5 s of
//! CPL3 work): the peers are paused once the first result line is on the
//! serial console, `vmm` after [`VMM_SNAPSHOT_AFTER_S`]. A cycle counts
//! only when the restored guest then finishes with its normal exit: status
//! 0 and a valid `VMMREC1` record on the restored console.
//!
//! Cloud Hypervisor: `--api-socket`, `PUT vm.pause`, `PUT vm.snapshot`
//! (`file://DIR`), then a new process `--restore source_url=file://DIR` and
//! `PUT vm.resume`. Firecracker: `--api-sock` with the same config file,
//! `PATCH /vm {"state":"Paused"}`, `PUT /snapshot/create`, then a new
//! process, `PUT /snapshot/load` and `PATCH /vm {"state":"Resumed"}`.
//! QEMU is not measured (its snapshots go through QMP and a disk image,
//! which `-M microvm` without drives does not have).

use std::ffi::OsString;
use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::http::{self, HttpError};
use super::model::{tail_text, PeerError, Vmm, MEM_MIB, POLL};
use crate::features::guest_log::GuestRecord;

/// The guest words of a snapshot cycle: long enough to be paused mid-run.
pub const SNAPSHOT_WORDS: &str = "workload=aes";
/// When `vmm run --snapshot-after` snapshots its guest, in seconds.
pub const VMM_SNAPSHOT_AFTER_S: f64 = 0.5;
/// The serial line that shows the guest is inside its workload.
const RUNNING_MARK: &[u8] = b"guest: result ";

/// One snapshot/restore cycle's times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cycle {
    /// Pause request to snapshot complete, ms.
    pub snapshot_ms: f64,
    /// Restoring process spawned to guest resumed, ms.
    pub restore_ms: f64,
    /// The snapshot's files: their lengths added, bytes.
    pub file_bytes: u64,
    /// The disk space they took (allocated blocks), bytes.
    pub disk_bytes: u64,
}

/// When a peer's guest is paused for its snapshot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pause {
    /// Once the guest's first result line is on the serial console.
    FirstResult,
    /// This long after the guest's first serial output (its boot line):
    /// the same point `vmm run --snapshot-after` pauses at, give or take
    /// the guest's boot.
    AfterBoot(Duration),
}

/// How Cloud Hypervisor restores guest memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ChRestore {
    /// Its default: the memory file is read into fresh RAM before resuming.
    Copy,
    /// `memory_restore_mode=ondemand`: pages are faulted in from the file
    /// through userfaultfd (its fastest restore).
    OnDemand,
}

/// The guest a peer's cycle boots, and when and how it is snapshotted.
#[derive(Clone, Copy, Debug)]
pub struct PeerGuest<'a> {
    /// The guest kernel (ELF, PVH).
    pub kernel: &'a Path,
    /// Its command line.
    pub words: &'a str,
    /// Guest RAM, MiB.
    pub mem_mib: u64,
    /// When it is paused.
    pub pause: Pause,
    /// Cloud Hypervisor's restore mode.
    pub ch_restore: ChRestore,
}

/// Free space kept beyond a peer's snapshot, bytes: the snapshot's state
/// file and whatever else shares the disk.
pub const SPACE_MARGIN: u64 = 256 << 20;

/// Why a cycle failed.
#[derive(Debug, thiserror::Error)]
pub enum CycleError {
    /// Starting, waiting or a scratch file failed.
    #[error(transparent)]
    Peer(#[from] PeerError),
    /// An API request failed.
    #[error("{request}: {source}")]
    Api {
        /// The request (`PUT /api/v1/vm.snapshot`).
        request: String,
        /// Why.
        #[source]
        source: HttpError,
    },
    /// The guest never printed its first result before the deadline.
    #[error("the guest printed no result line within {secs} s: not snapshotted")]
    NotRunning {
        /// The limit.
        secs: u64,
    },
    /// `vmm run` or `vmm restore` did not do what was asked.
    #[error("{0}")]
    Vmm(String),
    /// The restored guest did not end with status 0 and a record.
    #[error("the restored guest did not finish normally: {0}")]
    Restored(String),
    /// The snapshot directory's file system has too little room for the
    /// peer's memory file (peers write the whole RAM).
    #[error(
        "not enough free space in {}: a {need_mib} MiB snapshot needs {} MiB free (with a {} MiB margin), {} MiB are",
        dir.display(), need_mib + SPACE_MARGIN / (1 << 20), SPACE_MARGIN / (1 << 20), avail / (1 << 20)
    )]
    NoSpace {
        /// The snapshot directory.
        dir: std::path::PathBuf,
        /// The snapshot's memory file, MiB (the guest's RAM).
        need_mib: u64,
        /// Bytes available to this user there.
        avail: u64,
    },
}

/// Refuse a snapshot of `mem_mib` MiB when `avail` bytes cannot hold it
/// and [`SPACE_MARGIN`].
pub fn check_space(dir: &Path, mem_mib: u64, avail: u64) -> Result<(), CycleError> {
    if avail >= (mem_mib << 20).saturating_add(SPACE_MARGIN) {
        Ok(())
    } else {
        Err(CycleError::NoSpace {
            dir: dir.to_path_buf(),
            need_mib: mem_mib,
            avail,
        })
    }
}

/// Bytes available to this user on `dir`'s file system.
pub fn free_space(dir: &Path) -> Result<u64, PeerError> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|_| PeerError::Scratch {
        path: dir.to_path_buf(),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` points to writable
    // memory of the size statvfs(3) fills; it is read only on success.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(PeerError::Scratch {
            path: dir.to_path_buf(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

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
        words: SNAPSHOT_WORDS,
        mem_mib: u64::from(MEM_MIB),
        pause: Pause::FirstResult,
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

/// Why a VMM's snapshot is not measured, or how it is.
pub fn method(vmm: Vmm) -> &'static str {
    match vmm {
        Vmm::Vmm => "vmm run --snapshot-after, vmm restore",
        Vmm::Qemu => {
            "not measured (QEMU snapshots through QMP onto a disk image; microvm has none here)"
        }
        Vmm::CloudHypervisor => "API: vm.pause, vm.snapshot; --restore, vm.resume",
        Vmm::Firecracker => {
            "API: PATCH /vm Paused, PUT /snapshot/create; PUT /snapshot/load, PATCH /vm Resumed"
        }
    }
}

fn scratch(path: &Path) -> impl FnOnce(std::io::Error) -> PeerError + '_ {
    move |source| PeerError::Scratch {
        path: path.to_path_buf(),
        source,
    }
}

/// Spawn `binary args` with stdout and stderr to files `log` and
/// `log.stderr`.
fn spawn(binary: &Path, args: &[OsString], log: &Path) -> Result<Child, PeerError> {
    let out = File::create(log).map_err(scratch(log))?;
    let err_log = log.with_extension("stderr");
    let err = File::create(&err_log).map_err(scratch(&err_log))?;
    Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|source| PeerError::Spawn {
            binary: binary.to_path_buf(),
            source,
        })
}

/// Wait for `child` until `deadline`; killed (and an error) past it.
fn wait(
    child: &mut Child,
    binary: &Path,
    deadline: Instant,
    timeout: Duration,
) -> Result<ExitStatus, PeerError> {
    loop {
        if let Some(s) = child.try_wait().map_err(|source| PeerError::Wait {
            binary: binary.to_path_buf(),
            source,
        })? {
            return Ok(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(PeerError::Timeout {
                secs: timeout.as_secs(),
            });
        }
        std::thread::sleep(POLL);
    }
}

/// Kills a child when dropped: a failed cycle leaves no VMM behind.
struct Reaper(Option<Child>);

impl Reaper {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("a child until dropped")
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The first bytes the guest prints at boot.
const BOOT_MARK: &[u8] = b"guest: ";

/// Wait until the guest reaches `pause`: `log` holds [`RUNNING_MARK`], or
/// [`BOOT_MARK`] and then the delay has passed (the child must not end).
fn wait_running(
    child: &mut Child,
    log: &Path,
    pause: Pause,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), CycleError> {
    let (mark, delay) = match pause {
        Pause::FirstResult => (RUNNING_MARK, Duration::ZERO),
        Pause::AfterBoot(d) => (BOOT_MARK, d),
    };
    let mut seen: Option<Instant> = None;
    loop {
        let ended = |bytes: &[u8], s: ExitStatus| {
            CycleError::Vmm(format!(
                "ended ({s}) before it was paused; serial log tail: {:?}",
                tail_text(bytes)
            ))
        };
        match seen {
            Some(t) if t.elapsed() >= delay => return Ok(()),
            Some(_) => {
                if let Ok(Some(s)) = child.try_wait() {
                    let bytes = std::fs::read(log).unwrap_or_default();
                    return Err(ended(&bytes, s));
                }
            }
            None => {
                let bytes = std::fs::read(log).map_err(scratch(log))?;
                if bytes.windows(mark.len()).any(|w| w == mark) {
                    seen = Some(Instant::now());
                    continue;
                }
                if let Ok(Some(s)) = child.try_wait() {
                    return Err(ended(&bytes, s));
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(CycleError::NotRunning {
                secs: timeout.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn api(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
    deadline: Instant,
) -> Result<(), CycleError> {
    http::request(sock, method, path, body, deadline)
        .map(|_| ())
        .map_err(|source| CycleError::Api {
            request: format!("{method} {path}"),
            source,
        })
}

/// The restored run's end: status 0 and a valid record in `log`.
fn check_restored(status: ExitStatus, log: &Path) -> Result<(), CycleError> {
    let bytes = std::fs::read(log).map_err(scratch(log))?;
    let stderr = std::fs::read(log.with_extension("stderr")).unwrap_or_default();
    if !status.success() {
        return Err(CycleError::Restored(format!(
            "{status}; stderr tail: {:?}",
            tail_text(&stderr)
        )));
    }
    let record = GuestRecord::parse(log, &bytes).map_err(|e| {
        CycleError::Restored(format!("{e}; serial log tail: {:?}", tail_text(&bytes)))
    })?;
    let failed: Vec<String> = record
        .report
        .results()
        .iter()
        .filter(|r| r.check != 1)
        .map(|r| guest::protocol::field_str(&r.name).to_string())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CycleError::Restored(format!("checks failed: {failed:?}")))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

/// `vmm run --snapshot-after`, then `vmm restore`, both `--json`.
fn ours(binary: &Path, kernel: &Path, dir: &Path, timeout: Duration) -> Result<Cycle, CycleError> {
    let snap = dir.join("vmm.snap");
    let _ = std::fs::remove_file(&snap);
    let secs = timeout.as_secs().max(1).to_string();
    let mut args = os(&[
        "run",
        "--workload",
        "aes",
        "--no-native",
        "--json",
        "--force",
    ]);
    args.extend(os(&["--mem", &MEM_MIB.to_string(), "--timeout", &secs]));
    args.extend(os(&["--snapshot-after", &VMM_SNAPSHOT_AFTER_S.to_string()]));
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
        g.words,
    ]));
    let log = dir.join("ch-snapshot.serial.log");
    let deadline = Instant::now() + timeout;
    let mut c = Reaper(Some(spawn(binary, &args, &log)?));
    wait_running(c.child(), &log, g.pause, deadline, timeout)?;
    let paused = Instant::now();
    api(&sock, "PUT", "/api/v1/vm.pause", None, deadline)?;
    let body = serde_json::json!({ "destination_url": format!("file://{}", snap.display()) });
    api(
        &sock,
        "PUT",
        "/api/v1/vm.snapshot",
        Some(&body.to_string()),
        deadline,
    )?;
    let snapshot_ms = ms(paused.elapsed());
    drop(c);
    let (file_bytes, disk_bytes) = sizes(&[&snap]);

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
    let deadline = Instant::now() + timeout;
    let spawned = Instant::now();
    let mut c = Reaper(Some(spawn(binary, &args, &log)?));
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
    api(&sock2, "PUT", "/api/v1/vm.resume", None, deadline)?;
    let restore_ms = ms(spawned.elapsed());
    let status = wait(c.child(), binary, deadline, timeout)?;
    check_restored(status, &log)?;
    Ok(Cycle {
        snapshot_ms,
        restore_ms,
        file_bytes,
        disk_bytes,
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
            "boot_args": g.words,
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
    let deadline = Instant::now() + timeout;
    let mut c = Reaper(Some(spawn(binary, &args, &log)?));
    wait_running(c.child(), &log, g.pause, deadline, timeout)?;
    let paused = Instant::now();
    api(
        &sock,
        "PATCH",
        "/vm",
        Some(r#"{"state":"Paused"}"#),
        deadline,
    )?;
    let body = serde_json::json!({
        "snapshot_type": "Full",
        "snapshot_path": state.to_string_lossy(),
        "mem_file_path": mem.to_string_lossy(),
    });
    api(
        &sock,
        "PUT",
        "/snapshot/create",
        Some(&body.to_string()),
        deadline,
    )?;
    let snapshot_ms = ms(paused.elapsed());
    drop(c);
    let (file_bytes, disk_bytes) = sizes(&[&state, &mem]);

    let mut args: Vec<OsString> = vec!["--api-sock".into(), sock2.clone().into()];
    args.extend(os(&["--level", "Error"]));
    let log = dir.join("fc-restore.serial.log");
    let deadline = Instant::now() + timeout;
    let spawned = Instant::now();
    let mut c = Reaper(Some(spawn(binary, &args, &log)?));
    let body = serde_json::json!({
        "snapshot_path": state.to_string_lossy(),
        "mem_backend": { "backend_type": "File", "backend_path": mem.to_string_lossy() },
        "resume_vm": false,
    });
    api(
        &sock2,
        "PUT",
        "/snapshot/load",
        Some(&body.to_string()),
        deadline,
    )?;
    api(
        &sock2,
        "PATCH",
        "/vm",
        Some(r#"{"state":"Resumed"}"#),
        deadline,
    )?;
    let restore_ms = ms(spawned.elapsed());
    let status = wait(c.child(), binary, deadline, timeout)?;
    check_restored(status, &log)?;
    Ok(Cycle {
        snapshot_ms,
        restore_ms,
        file_bytes,
        disk_bytes,
    })
}
