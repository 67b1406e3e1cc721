//! The VMM's errors: one enum per kind of operation (choosing the xstate
//! policy, setting up guest memory, booting, moving xstate, driving the
//! vCPU), each keeping the typed error it came from as its `source`, all
//! converted into the top [`Error`] the commands report.
//!
//! Every message names what went wrong and where; the top-level prefixes
//! ("invalid xstate policy:", "guest memory:", "xstate:") are what users
//! and tests have always seen.

use std::path::PathBuf;

use vmm_sys_util::fam::Error as FamError;
use xstate::kvm::KvmXsaveError;
use xstate::XfeatureMask;
use xstate::{BufferError, ConvertError, InfoError, LayoutError, MaskError, Xcr0Error};

pub use crate::arch::error::{AcpiError, BootError, MemoryError, MpTableError};
use crate::arch::layout::{MAX_MEM_MIB, MIN_MEM_MIB};

/// A `--vcpus` value refused before any VM exists.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VcpuCountError {
    /// `--vcpus 0`.
    #[error("--vcpus 0: a guest needs at least one vCPU")]
    Zero,
    /// More than `KVM_CAP_MAX_VCPUS`.
    #[error("--vcpus {asked}: KVM allows at most {max} vCPUs per VM (KVM_CAP_MAX_VCPUS)")]
    AboveKvm {
        /// What was asked.
        asked: u32,
        /// `KVM_CAP_MAX_VCPUS`.
        max: u32,
    },
    /// More than vmm's machine holds: what its embedded guest brings up,
    /// which its machine tables and snapshot sections are sized for,
    /// whatever kernel boots.
    #[error(
        "--vcpus {asked}: vmm runs at most {max} vCPUs with any kernel (its embedded guest's \
         MAX_CPUS, which its snapshots follow)"
    )]
    AboveGuest {
        /// What was asked.
        asked: u32,
        /// The guest kernel's `MAX_CPUS`.
        max: u32,
    },
}

/// Everything that can stop a VMM operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `/dev/kvm` is missing or not accessible.
    #[error("cannot open /dev/kvm: {0} (KVM must be available and /dev/kvm readable and writable by this user)")]
    KvmUnavailable(#[source] kvm_ioctls::Error),
    /// A KVM ioctl failed.
    #[error("{what} failed: {source}")]
    Kvm {
        /// The ioctl, by its KVM name.
        what: &'static str,
        /// What KVM answered.
        #[source]
        source: kvm_ioctls::Error,
    },
    /// KVM lacks a capability this VMM needs.
    #[error("KVM lacks {0}")]
    KvmCapability(&'static str),
    /// KVM's supported CPUID leaf 0xD cannot be used.
    #[error("KVM's supported CPUID leaf 0xD is unusable: {0}")]
    KvmCpuid(#[source] InfoError),
    /// The requested xfeature / CPUID policy is invalid for this host.
    #[error("invalid xstate policy: {0}")]
    Policy(#[from] PolicyError),
    /// The host refused a dynamic xfeature (AMX tile data) the policy asks for.
    #[error("dynamic xfeature: {0}")]
    DynamicXfeature(#[from] crate::arch::amx::PermissionError),
    /// A command-line value other than the xstate policy was refused for
    /// what it is, whatever the host: a usage error (see [`Error::is_usage`]).
    #[error("invalid argument: {0}")]
    Argument(String),
    /// This host (its kernel, its KVM, its resources) cannot do what a
    /// valid command asked.
    #[error("{0}")]
    Host(String),
    /// Guest memory could not be set up or accessed.
    #[error("guest memory: {0}")]
    Memory(#[from] MemoryError),
    /// The kernel could not be read or is not bootable.
    #[error(transparent)]
    Boot(#[from] BootError),
    /// An xsave image or XCR0 value was refused before KVM saw it.
    #[error("xstate: {0}")]
    Xstate(#[from] XstateError),
    /// The vCPU thread or its state could not be driven.
    #[error(transparent)]
    Vcpu(#[from] VcpuError),
    /// `--vcpus` was refused (0, above KVM's or the guest's limit): a usage
    /// error, since any count above a KVM's limit is above the guest's.
    #[error("invalid argument: {0}")]
    VcpuCount(#[from] VcpuCountError),
    /// The guest's run did not end the way the operation needs (a crash, a
    /// non-zero exit status, a failed workload check).
    #[error("guest error: {0}")]
    Guest(String),
    /// The snapshot file could not be written (nothing at its path was
    /// modified; see `crate::output`).
    #[error("output: cannot write snapshot {}: {source}", path.display())]
    SnapshotWrite {
        /// The snapshot's final name.
        path: PathBuf,
        /// Why: the destination, its directory, or the file system.
        #[source]
        source: crate::output::WriteError,
    },
    /// A file `vmm` writes (a schema, a manual page) cannot go to its path,
    /// or could not be written; nothing at the path was changed.
    #[error("output: cannot write {}: {source}", path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// Why: the destination, its directory, or the file system.
        #[source]
        source: crate::output::WriteError,
    },
    /// Standard output did not take the result (its reader closed it, or
    /// the device is full).
    #[error("output: {0}")]
    Stdout(#[from] crate::output::stdout::StdoutError),
    /// Encoding JSON output failed.
    #[error("output: JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A file, directory or process the command needs could not be made,
    /// read or started; `what` names it, so the message says which.
    #[error("{what}: {source}")]
    Io {
        /// The object and the operation, e.g. `cannot create directory x`.
        what: String,
        /// What the system answered.
        #[source]
        source: std::io::Error,
    },
    /// The directory a command writes its files into (`vmm schema DIR`,
    /// `vmm man --dir DIR`) cannot be used or made.
    #[error("{what}: {source}")]
    OutputDir {
        /// Its role: `schema directory`, `manual directory`.
        what: &'static str,
        /// Why.
        #[source]
        source: crate::output::WriteError,
    },
    /// A `vmm bench` baseline could not be saved, found or read.
    #[error("baseline: {0}")]
    Baseline(#[from] BaselineError),
    /// A `--plot` file could not be drawn or written.
    #[error("plot: {0}")]
    Plot(#[from] PlotError),
}

impl Error {
    /// Wrap a failed KVM ioctl with what was being attempted.
    pub fn kvm(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> Error {
        move |source| Error::Kvm { what, source }
    }

    /// Wrap a failed file, directory or process operation with what was
    /// being attempted and on what, so the message names the object.
    ///
    /// # Examples
    ///
    /// ```
    /// let e = std::io::Error::from(std::io::ErrorKind::NotFound);
    /// let err = vmm::Error::io("cannot create directory /x")(e);
    /// assert!(err.to_string().starts_with("cannot create directory /x: "));
    /// ```
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }
}

/// The VMM's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// Why an xfeature policy (`--xfeatures`) cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// Neither leaf 0xD nor CPUID.1 says KVM offers XSAVE.
    #[error("KVM does not offer XSAVE (CPUID.1:ECX.XSAVE clear): no xfeature mask can be set")]
    NoXsave,
    /// The mask does not parse.
    #[error("--xfeatures {spec:?}: {source}")]
    Parse {
        /// The text given.
        spec: String,
        /// Why the parser refused it.
        #[source]
        source: MaskError,
    },
    /// The mask parses but is not a valid XCR0 for what the host supports.
    #[error("--xfeatures {spec}: {source} ({what} supports {host:#x} = {host})")]
    Unsupported {
        /// The text given (`host` for the default).
        spec: String,
        /// Who supports `host`: "KVM", "the profile's CPU", ...
        what: String,
        /// The user state the host supports.
        host: XfeatureMask,
        /// Which XCR0 rule the mask breaks.
        #[source]
        source: Xcr0Error,
    },
    /// KVM's leaf 0xD gives no standard-format size for the mask.
    #[error("standard size of {xcr0:#x}: {source}")]
    StandardSize {
        /// The policy's user state.
        xcr0: XfeatureMask,
        /// Why the layout failed.
        #[source]
        source: LayoutError,
    },
    /// KVM's leaf 0xD gives no compacted size for the mask and its XSS.
    #[error("compacted size of {mask:#x}: {source}")]
    CompactedSize {
        /// The policy's user state | supported XSS.
        mask: XfeatureMask,
        /// Why the layout failed.
        #[source]
        source: LayoutError,
    },
    /// The CPUID table has no room for the TSC frequency leaf.
    #[error("cannot add CPUID leaf {leaf:#x}: {source:?}")]
    CpuidFull {
        /// The leaf that did not fit.
        leaf: u32,
        /// The FAM wrapper's refusal.
        source: FamError,
    },
}

/// Why an xsave image or XCR0 value did not reach (or come back from) KVM.
#[derive(Debug, thiserror::Error)]
pub enum XstateError {
    /// The architectural initial image could not be built.
    #[error("initial xsave image for {xcr0:#x}: {source}")]
    InitialImage {
        /// The policy's user state.
        xcr0: XfeatureMask,
        /// Why.
        #[source]
        source: ConvertError,
    },
    /// The image does not fit the `kvm_xsave` wrapper KVM takes.
    #[error("xsave image of {len} bytes: {source}")]
    KvmImage {
        /// The image's size.
        len: usize,
        /// Why it does not fit.
        #[source]
        source: KvmXsaveError,
    },
    /// `KVM_GET_XCRS` answered without XCR0.
    #[error("KVM_GET_XCRS returned no XCR0")]
    NoXcr0,
    /// The `KVM_GET_XSAVE2` buffer could not be allocated.
    #[error("allocating a {size}-byte kvm_xsave2: {source:?}")]
    Xsave2Alloc {
        /// The size `KVM_CAP_XSAVE2` reported.
        size: usize,
        /// The FAM wrapper's refusal.
        source: FamError,
    },
    /// A compacted image could not be expanded to the standard format.
    #[error("expanding {what}: {source}")]
    Expand {
        /// Whose state: "the guest's state", "the edited state".
        what: &'static str,
        /// Why.
        #[source]
        source: ConvertError,
    },
    /// A register index past XMM15.
    #[error("XMM{0} does not exist (0..=15)")]
    NoSuchXmm(usize),
    /// XMM edits need SSE state in the guest's XCR0.
    #[error("cannot set XMM{reg}: the guest's XCR0 {xcr0:#x} has no SSE state")]
    NoSse {
        /// The register.
        reg: usize,
        /// The guest's policy.
        xcr0: XfeatureMask,
    },
    /// A new standard image could not be compacted to the guest's XCR0.
    #[error("compacting the new state: {0}")]
    Compact(#[source] ConvertError),
    /// KVM handed back an image the xstate model cannot read.
    #[error("the xsave image KVM returned is malformed: {0}")]
    MalformedFromKvm(#[source] ConvertError),
    /// An image failed validation against the XCR0 in force.
    #[error("refusing an xsave image for XCR0 {xcr0:#x}: {source}")]
    Refused {
        /// The XCR0 the image was checked against.
        xcr0: XfeatureMask,
        /// The rule it breaks.
        #[source]
        source: BufferError,
    },
    /// `KVM_SET_XSAVE` only takes the standard format.
    #[error("refusing a compacted xsave image: KVM_SET_XSAVE takes the standard format")]
    Compacted,
    /// A snapshot holds more XCRs than `struct kvm_xcrs` has room for.
    #[error("{count} saved XCRs; KVM takes at most {max}")]
    TooManyXcrs {
        /// XCRs in the snapshot.
        count: usize,
        /// Slots in `kvm_xcrs`.
        max: usize,
    },
}

/// Why the vCPU could not be driven or loaded: VMM and KVM failures, never
/// something the guest did.
#[derive(Debug, thiserror::Error)]
pub enum VcpuError {
    /// The no-op signal handler that interrupts `KVM_RUN` was refused.
    #[error("cannot install the vCPU kick signal handler: {0}")]
    KickHandler(#[source] vmm_sys_util::errno::Error),
    /// The vCPU thread could not be created.
    #[error("cannot start the vCPU thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// The timer that interrupts `KVM_RUN` at a deadline could not be set.
    #[error("cannot set the vCPU's deadline timer: {0}")]
    Timer(#[source] std::io::Error),
    /// The vCPU thread panicked.
    #[error("the vCPU thread panicked")]
    ThreadPanicked,
    /// `KVM_RUN` with `immediate_exit` entered the guest.
    #[error("KVM_RUN with immediate_exit set entered the guest instead of returning EINTR")]
    ImmediateExitEntered,
    /// A `kvm_msrs` list could not be allocated.
    #[error("allocating kvm_msrs: {0:?}")]
    MsrAlloc(FamError),
    /// A saved CPUID table does not fit `kvm_cpuid2`.
    #[error("the saved CPUID table does not fit KVM's: {0:?}")]
    CpuidTable(FamError),
    /// `KVM_SET_MSRS` stopped at an MSR.
    #[error("KVM_SET_MSRS refused {name} = {value:#x} (MSR {index:#x})")]
    MsrRefused {
        /// The MSR's name.
        name: String,
        /// Its index.
        index: u32,
        /// The value refused.
        value: u64,
    },
    /// The saved 8250 registers are inconsistent.
    #[error("the saved UART state is invalid: {0}")]
    UartState(String),
    /// KVM refused a restored vCPU state: names the ioctl, the vCPU, the
    /// snapshot section and the fields that commonly cause the refusal.
    #[error("{ioctl} refused vCPU {vcpu}'s {what} (section \"{section}\"): {source}; {likely}")]
    StateRefused {
        /// The ioctl.
        ioctl: &'static str,
        /// The vCPU.
        vcpu: u32,
        /// The state, for people ("segment/control registers", ...).
        what: &'static str,
        /// The snapshot section the state came from.
        section: String,
        /// The fields that commonly cause this refusal, with their values.
        likely: String,
        /// KVM's error.
        #[source]
        source: kvm_ioctls::Error,
    },
    /// KVM refused a restored VM-wide state (irqchip, PIT): names the
    /// ioctl and the snapshot section.
    #[error("{ioctl} refused the VM's section \"{section}\": {source}")]
    VmStateRefused {
        /// The ioctl.
        ioctl: &'static str,
        /// The snapshot section the state came from.
        section: String,
        /// KVM's error.
        #[source]
        source: kvm_ioctls::Error,
    },
}

/// Why a `vmm bench` baseline (`--save-baseline`, `--baseline`, `--compare`)
/// could not be used.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// The name would not make a plain file name in the baseline directory.
    #[error("{flag} {name:?}: a baseline name is 1 to 64 letters, digits, '-', '_' or '.', not starting with '.'")]
    BadName {
        /// The flag that named it.
        flag: &'static str,
        /// The name given.
        name: String,
    },
    /// No `--baseline-dir`, and neither `$XDG_DATA_HOME` nor `$HOME` to
    /// put the default under.
    #[error("no baseline directory: give --baseline-dir (neither XDG_DATA_HOME nor HOME is set)")]
    NoDir,
    /// `--baseline NAME` names no saved baseline.
    #[error("--baseline {name:?}: no baseline saved under that name ({} does not exist; save one with --save-baseline {name})", path.display())]
    Missing {
        /// The name given.
        name: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The file could not be opened or read.
    #[error(transparent)]
    Read(#[from] crate::input::InputError),
    /// The file is not JSON of the expected shape.
    #[error("{} is not a `vmm bench {bench} --json` result: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The benchmark expected.
        bench: &'static str,
        /// What the JSON parser said.
        #[source]
        source: serde_json::Error,
    },
    /// The file holds another benchmark's result.
    #[error("{} holds a `vmm bench {found}` result, not `{bench}`", path.display())]
    WrongBench {
        /// The file.
        path: PathBuf,
        /// The benchmark expected.
        bench: &'static str,
        /// The benchmark it holds.
        found: String,
    },
    /// The baseline could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file (or its directory).
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
}

/// Why a `--plot` file could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The plot's directory does not exist: refused before measuring, so a
    /// long benchmark is not lost at the end.
    #[error("--plot {}: directory {} does not exist", path.display(), dir.display())]
    NoDir {
        /// The file given.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },
    /// There is nothing to plot.
    #[error("--plot {}: {what}", path.display())]
    Empty {
        /// The file given.
        path: PathBuf,
        /// What is missing.
        what: &'static str,
    },
    /// plotters could not draw the chart.
    #[error("drawing {}: {source}", path.display())]
    Draw {
        /// The file given.
        path: PathBuf,
        /// The drawing error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The SVG cannot go there (a symlink, device, FIFO or directory, an
    /// existing file without `--force`, a directory that refuses writes),
    /// or could not be written; nothing at the path was changed.
    #[error("--plot {}: {source}", path.display())]
    Write {
        /// The file given.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::output::WriteError,
    },
}

/// An error as one line: its message, then each source in its chain that
/// the message does not already spell out, joined by `": "`. (Most messages
/// here embed their source, as users have always seen them; the chain adds
/// what they leave out, never the same text twice.) Line breaks inside a
/// message become `"; "` so the line stays one line.
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = s.source();
    }
    line.split('\n')
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Print `vmm: <error>` on one line to stderr, and `hint: <hint>` on a
/// second line when there is one: what every command prints on failure.
pub fn eprint(e: &(dyn std::error::Error + 'static), hint: Option<String>) {
    crate::output::terminal::line(format_args!("vmm: {}", one_line(e)));
    if let Some(h) = hint {
        crate::output::terminal::line(format_args!("hint: {h}"));
    }
}

/// What `--xfeatures` takes, with every component name: the hint of a mask
/// that does not parse.
pub fn xfeatures_hint() -> String {
    format!(
        "--xfeatures takes a hex mask (0x7), `all`, `host`, or component and group names joined \
         by commas, with -NAME to remove one (`host,-avx`); groups: avx512, amx, mpx, cet; \
         components: {}",
        XfeatureMask::ALL_KNOWN
    )
}

impl Error {
    /// A suggestion for the user where one helps: what to check or run next.
    pub fn hint(&self) -> Option<String> {
        match self {
            Error::KvmUnavailable(e) => Some(match e.errno() {
                libc::EACCES | libc::EPERM => {
                    "this user cannot open /dev/kvm: add it to the kvm group \
                     (`sudo usermod -aG kvm $USER`, then log in again)"
                        .into()
                }
                libc::ENOENT => {
                    "/dev/kvm does not exist: load the KVM module (`modprobe kvm_intel` or \
                     `modprobe kvm_amd`), enable virtualisation in the firmware, or inside a VM \
                     enable nested virtualisation"
                        .into()
                }
                _ => "`ls -l /dev/kvm` and `dmesg | grep -i kvm` show what is wrong".into(),
            }),
            Error::Policy(p) => p.hint(),
            Error::DynamicXfeature(_) => Some(
                "leave AMX out (`--xfeatures host,-amx`) or run on a host whose CPU and kernel \
                 offer it to guests; `vmm features --no-boot` shows what this host offers"
                    .into(),
            ),
            Error::Boot(
                BootError::NotElf { .. } | BootError::Image { .. } | BootError::BzImage { .. },
            ) => Some(
                "--kernel takes a PVH ELF kernel (one with a XEN_ELFNOTE_PHYS32_ENTRY note) or a \
                 64-bit Linux bzImage; without --kernel the embedded guest boots"
                    .into(),
            ),
            Error::Memory(MemoryError::SizeOutOfRange(_)) => Some(format!(
                "--mem takes MiB from {MIN_MEM_MIB} to {MAX_MEM_MIB}"
            )),
            _ => None,
        }
    }
}

impl PolicyError {
    /// A suggestion for the user where one helps.
    pub fn hint(&self) -> Option<String> {
        match self {
            PolicyError::Parse { .. } => Some(xfeatures_hint()),
            PolicyError::Unsupported { .. } => Some(
                "`vmm features --no-boot` shows which components the host, KVM and the policy offer"
                    .into(),
            ),
            PolicyError::NoXsave => Some(
                "this KVM offers no XSAVE to guests; `vmm features --no-boot` shows what it offers"
                    .into(),
            ),
            _ => None,
        }
    }
}

mod usage;

#[cfg(test)]
mod tests;
