//! What `vmm run` decides before a VM exists: the kernel, the memory size,
//! the xfeature policy as given, the session's limits and outputs.

use std::path::PathBuf;
use std::time::Duration;

use xstate::{InitMode, Resolution};

use crate::arch::boot::EntryChoice;
use crate::arch::elf::{ELF_MAGIC, MAX_KERNEL_BYTES};
use crate::devices::{NativeSide, SerialSink};
use crate::error::{BootError, Result};
use crate::input::{self, InputError};
use crate::kvm::HostKvm;
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

    /// A kernel read from a file: a regular file of at most
    /// `MAX_KERNEL_BYTES` that starts with the ELF magic or carries the
    /// bzImage header, checked in that order before the rest is read (so
    /// `/dev/zero`, a FIFO or a huge sparse file is refused at once,
    /// naming the rule).
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let mut file =
            input::open_regular(path, "kernel", MAX_KERNEL_BYTES).map_err(BootError::from)?;
        let not_kernel = |len| BootError::NotElf {
            image: path.display().to_string(),
            len,
        };
        match file.check_magic(ELF_MAGIC, "the ELF magic") {
            Ok(()) => {}
            Err(InputError::BadMagic { .. }) => {
                let head = file.read_head(0x206).map_err(BootError::from)?;
                if !crate::arch::linux::is_bzimage(&head) {
                    return Err(not_kernel(file.len()).into());
                }
            }
            Err(e) => return Err(BootError::from(e).into()),
        }
        let bytes = file.read_all().map_err(BootError::from)?;
        Ok(Self {
            name: path.display().to_string(),
            bytes: bytes.into(),
        })
    }
}

/// The largest `--initrd` read.
pub const MAX_INITRD_BYTES: u64 = 1 << 30;

impl KernelImage {
    /// An initrd read from a file: a regular file of at most
    /// `MAX_INITRD_BYTES` (1 GiB); whether it fits the guest's RAM is checked
    /// once the kernel is known.
    pub fn initrd_from_file(path: &std::path::Path) -> Result<Self> {
        let file =
            input::open_regular(path, "initrd", MAX_INITRD_BYTES).map_err(BootError::from)?;
        Ok(Self {
            name: path.display().to_string(),
            bytes: file.read_all().map_err(BootError::from)?.into(),
        })
    }
}

/// Everything `vmm run` decides before a VM exists.
pub struct RunConfig {
    /// The kernel to boot.
    pub kernel: KernelImage,
    /// Guest RAM in MiB.
    pub mem_mib: u64,
    /// `--xfeatures`, resolved once before the run ([`Xfeatures::request`]).
    pub xfeatures: Xfeatures,
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
    /// (never anything else; see `crate::output`).
    pub snapshot_force: bool,
    /// `--vcpus`: how many vCPUs, each a host thread (see
    /// `crate::vstate::smp`); 1 is the VM `vmm` always built.
    pub vcpus: u32,
    /// Which entry the kernel may be started at (`--entry`).
    pub entry: EntryChoice,
    /// The initramfs to load (`--initrd`), for a Linux kernel.
    pub initrd: Option<KernelImage>,
    /// Interleave native repetitions of every workload row with the
    /// guest's (None: the guest runs each row once, unobserved).
    pub interleave: Option<StartNative>,
    /// `--hugepages`: `MADV_HUGEPAGE` on guest RAM (THP), or RAM from
    /// the hugetlbfs pool; `None`: plain anonymous memory.
    pub hugepages: Option<crate::vstate::RamBacking>,
}

/// The xfeatures a run may give its guest: `--xfeatures`, read once.
pub enum Xfeatures {
    /// Everything KVM supports (no `--xfeatures`): KVM's table is read
    /// while the VM is built, and the policy is all of it.
    Kvm,
    /// A request already resolved against this KVM, which stays open for
    /// the run: the dynamic-xfeature permission was asked, the value parsed
    /// and validated, once.
    Resolved(Box<ResolvedXfeatures>),
}

/// `--xfeatures VALUE`, resolved against the KVM the run will use.
pub struct ResolvedXfeatures {
    /// The value as given.
    pub spec: String,
    /// How it was understood: what was named, implied, dropped; the XCR0.
    pub resolution: Resolution,
    /// The KVM it was validated against, open.
    pub host: HostKvm,
}

impl Xfeatures {
    /// Read `--xfeatures` once (`None`: everything KVM supports, decided by
    /// the run itself): ask the host for the dynamic xfeatures `spec` needs
    /// (before KVM's table is read: it lacks AMX until permitted), open KVM,
    /// parse and validate `spec` against KVM's table.
    ///
    /// # Errors
    /// The permission refused for a component `spec` names
    /// ([`crate::Error::DynamicXfeature`]); KVM unavailable; `spec` invalid
    /// or unsupported by KVM ([`crate::Error::Policy`]).
    pub fn request(spec: Option<&str>) -> Result<Self> {
        let Some(spec) = spec else {
            return Ok(Self::Kvm);
        };
        crate::arch::amx::permit_guest(Some(spec))?;
        let host = HostKvm::open()?;
        let resolution = crate::cpuid::validate_policy_resolution(
            Some(spec),
            &host.xstate,
            &host.supported_cpuid,
        )?;
        Ok(Self::Resolved(Box::new(ResolvedXfeatures {
            spec: spec.to_string(),
            resolution,
            host,
        })))
    }

    /// An exact XCR0, as a benchmark asks for it (`0x207`).
    ///
    /// # Errors
    /// As [`Xfeatures::request`].
    pub fn exact(xcr0: xstate::XfeatureMask) -> Result<Self> {
        Self::request(Some(&format!("{:#x}", xcr0.bits())))
    }

    /// The request as resolved, when there was one.
    pub fn resolved(&self) -> Option<&ResolvedXfeatures> {
        match self {
            Self::Kvm => None,
            Self::Resolved(r) => Some(r),
        }
    }
}

/// Starts the native side of an interleaved run, given the guest's TSC
/// rate in kHz (known only once KVM is open); the error is a message for
/// `--workload`. Supplied by the tool that times the host's side
/// (`crate::native::interleave::starter`), so a run never names it.
pub type StartNative =
    Box<dyn FnOnce(u64) -> std::result::Result<Box<dyn NativeSide>, String> + Send>;

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            kernel: KernelImage::embedded(),
            mem_mib: 64,
            xfeatures: Xfeatures::Kvm,
            init_xstate: InitMode::Minimal,
            cmdline: String::new(),
            serial: SerialSink::Stdout,
            timeout: Some(Duration::from_secs(600)),
            xstate_sync: SyncPolicy::Lazy,
            raw_loop: false,
            snapshot_after: None,
            snapshot_file: None,
            snapshot_force: false,
            entry: EntryChoice::Auto,
            initrd: None,
            interleave: None,
            hugepages: None,
            vcpus: 1,
        }
    }
}
