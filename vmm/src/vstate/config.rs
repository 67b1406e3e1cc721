//! What `vmm run` decides before a VM exists: the kernel, the memory size,
//! the xfeature policy as given, the session's limits and outputs.

use std::path::PathBuf;
use std::time::Duration;

use xstate::InitMode;

use crate::devices::SerialSink;
use crate::error::{BootError, Result};
use crate::xstate_manager::SyncPolicy;

/// A kernel image to boot, with a name for messages.
#[derive(Clone)]
pub struct KernelImage {
    /// How messages name it: a path, or "embedded guest kernel".
    pub name: String,
    /// The ELF image.
    pub bytes: std::borrow::Cow<'static, [u8]>,
}

impl KernelImage {
    /// The guest kernel built from `guest/` and embedded at build time.
    pub fn embedded() -> Self {
        Self {
            name: "embedded guest kernel".into(),
            bytes: std::borrow::Cow::Borrowed(crate::GUEST_KERNEL),
        }
    }

    /// A kernel read from a file.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|source| BootError::KernelRead {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            name: path.display().to_string(),
            bytes: bytes.into(),
        })
    }
}

/// Everything `vmm run` decides before a VM exists.
pub struct RunConfig {
    /// The kernel to boot.
    pub kernel: KernelImage,
    /// Guest RAM in MiB.
    pub mem_mib: u64,
    /// `--xfeatures`; `None` = everything KVM supports.
    pub xfeatures: Option<String>,
    /// The vCPU's initial XSTATE_BV.
    pub init_xstate: InitMode,
    /// The guest's command line (an `xfeatures=` hint is appended).
    pub cmdline: String,
    /// Where the guest's serial output goes.
    pub serial: SerialSink,
    /// Stop a guest that runs longer than this.
    pub timeout: Option<Duration>,
    /// When the VMM moves the guest's xsave state.
    pub xstate_sync: SyncPolicy,
    /// Benchmark the raw limit: a loop that only re-enters the guest, with
    /// no device model (markers and the exit port excepted).
    pub raw_loop: bool,
    /// Snapshot the guest after this long and stop (needs `snapshot_file`).
    pub snapshot_after: Option<Duration>,
    /// Where a snapshot goes, time-triggered or requested by the guest
    /// through `SNAPSHOT_PORT`. Without it the guest's requests are ignored.
    pub snapshot_file: Option<PathBuf>,
    /// `--force`: a regular file already at `snapshot_file` may be replaced
    /// (never anything else; see [`crate::snapshot::write`]).
    pub snapshot_force: bool,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            kernel: KernelImage::embedded(),
            mem_mib: 64,
            xfeatures: None,
            init_xstate: InitMode::Minimal,
            cmdline: String::new(),
            serial: SerialSink::Stdout,
            timeout: Some(Duration::from_secs(600)),
            xstate_sync: SyncPolicy::Lazy,
            raw_loop: false,
            snapshot_after: None,
            snapshot_file: None,
            snapshot_force: false,
        }
    }
}
