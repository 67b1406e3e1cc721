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
//! CPL3 work) and stops at its snapshot point `mid`
//! ([`guest::protocol::snapshot`]), the same work under every VMM: `vmm`
//! snapshots in the guest's own request (`vmm run --cmdline snapshot=mid
//! --snapshot-file`); the peers, which ignore our ports, are paused once
//! the guest's waiting line is on their console, while it polls COM1, and
//! their restored guest is released by one byte on its serial input
//! ([`serial_input`]). A cycle counts only when the restored guest was
//! released and then finished with its normal exit: status 0 and a valid
//! `VMMREC1` record on the restored console, every check passing.
//!
//! Cloud Hypervisor: `--api-socket`, `PUT vm.pause`, `PUT vm.snapshot`
//! (`file://DIR`), then a new process `--restore source_url=file://DIR` and
//! `PUT vm.resume`. Firecracker: `--api-sock` with the same config file,
//! `PATCH /vm {"state":"Paused"}`, `PUT /snapshot/create`, then a new
//! process, `PUT /snapshot/load` and `PATCH /vm {"state":"Resumed"}`.
//! QEMU is not measured (its snapshots go through QMP and a disk image,
//! which `-M microvm` without drives does not have).

use std::path::Path;

use super::http::HttpError;
use super::model::{PeerError, Vmm};

use guest::protocol::snapshot::{POINT_LINE, RELEASED, WAITING};
use guest::protocol::SnapshotPhase;

mod cycles;
mod process;
mod serial_input;

pub use cycles::{cycle, peer_cycle};

/// The workload of `vmm bench peers`' snapshot cycle.
pub const SNAPSHOT_WORKLOAD: &str = "aes";
/// Where that cycle's guest stops for its snapshot.
pub const SNAPSHOT_POINT: SnapshotPhase = SnapshotPhase::Mid;
/// The guest words of that cycle, as the table prints them.
pub const SNAPSHOT_WORDS: &str = "workload=aes snapshot=mid";

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

/// The guest's command line for `workload` stopping at `point`.
pub fn guest_words(workload: &str, point: SnapshotPhase) -> String {
    format!("workload={workload} snapshot={}", point.name())
}

/// The console line a guest waiting at `point` prints (up to its bound).
pub fn waiting_line(point: SnapshotPhase) -> String {
    format!("{POINT_LINE}{}{WAITING}", point.name())
}

/// The console line a guest released at `point` prints.
pub fn released_line(point: SnapshotPhase) -> String {
    format!("{POINT_LINE}{}{RELEASED}\n", point.name())
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

/// The guest a peer's cycle boots, and where and how it is snapshotted.
#[derive(Clone, Copy, Debug)]
pub struct PeerGuest<'a> {
    /// The guest kernel (ELF, PVH).
    pub kernel: &'a Path,
    /// Its workload list (`workload=`).
    pub workload: &'a str,
    /// Guest RAM, MiB.
    pub mem_mib: u64,
    /// Where it stops to be paused (`snapshot=`).
    pub point: SnapshotPhase,
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
    /// The guest never reached its snapshot point before the deadline.
    #[error("the guest printed no {line:?} line within {secs} s: not snapshotted")]
    NotAtPoint {
        /// The line waited for.
        line: String,
        /// The limit.
        secs: u64,
    },
    /// The restored guest did not say it was released at its point: the
    /// byte sent to its serial input never reached it (it went on by
    /// itself after its bound, or not at all).
    #[error("the restored guest was not released at its snapshot point (no {line:?} line): {log_tail:?}")]
    NotReleased {
        /// The line looked for.
        line: String,
        /// The restored console's last bytes.
        log_tail: String,
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

/// Why a VMM's snapshot is not measured, or how it is.
pub fn method(vmm: Vmm) -> &'static str {
    match vmm {
        Vmm::Vmm => "vmm run --snapshot-file (at the guest's request), vmm restore",
        Vmm::Qemu => {
            "not measured (QEMU snapshots through QMP onto a disk image; microvm has none here)"
        }
        Vmm::CloudHypervisor => {
            "API: vm.pause, vm.snapshot; --restore, vm.resume; a byte on the serial input"
        }
        Vmm::Firecracker => {
            "API: PATCH /vm Paused, PUT /snapshot/create; PUT /snapshot/load, PATCH /vm Resumed; \
             a byte on the serial input"
        }
    }
}
