//! The VMM's errors: one enum per kind of operation (choosing the xstate
//! policy, setting up guest memory, booting, moving xstate, driving the
//! vCPU), each keeping the typed error it came from as its `source`, all
//! converted into the top [`Error`] the commands report.
//!
//! Every message names what went wrong and where; the top-level prefixes
//! ("invalid xstate policy:", "guest memory:", "xstate:") are what users
//! and tests have always seen.

use std::path::PathBuf;

use linux_loader::loader::elf::PvhBootCapability;
use vmm_sys_util::fam::Error as FamError;
use xstate::kvm::KvmXsaveError;
use xstate::XfeatureMask;
use xstate::{BufferError, ConvertError, InfoError, LayoutError, MaskError, Xcr0Error};

use crate::arch::layout::{CMDLINE_MAX, MAX_MEM_MIB, MIN_MEM_MIB};

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
    /// A command-line value other than the xstate policy was refused.
    #[error("invalid argument: {0}")]
    Argument(String),
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
    /// The guest's run did not end the way the operation needs (a crash, a
    /// non-zero exit status, a failed workload check).
    #[error("guest error: {0}")]
    Guest(String),
    /// The snapshot file could not be written.
    #[error("output: cannot write snapshot {}: {source}", path.display())]
    SnapshotWrite {
        /// The snapshot's final name.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// Encoding JSON output failed.
    #[error("output: JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Writing output failed.
    #[error("output: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// Wrap a failed KVM ioctl with what was being attempted.
    pub fn kvm(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> Error {
        move |source| Error::Kvm { what, source }
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

/// Why guest RAM could not be set up, read or written.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// `--mem` is outside what the memory map allows.
    #[error("--mem {0} MiB is out of range ({MIN_MEM_MIB}..={MAX_MEM_MIB})")]
    SizeOutOfRange(u64),
    /// The anonymous mapping could not be made.
    #[error("cannot allocate {mib} MiB: {source}")]
    Allocate {
        /// The size asked for.
        mib: u64,
        /// What vm-memory said.
        #[source]
        source: vm_memory::mmap::FromRangesError,
    },
    /// Guest RAM has no host mapping (never for anonymous memory).
    #[error("no host mapping for guest RAM: {0}")]
    HostMapping(#[source] vm_memory::GuestMemoryError),
    /// The kernel command line does not fit its slot.
    #[error("kernel command line must be under {CMDLINE_MAX} bytes with no NUL ({0} bytes given)")]
    Cmdline(usize),
    /// A boot structure could not be written.
    #[error("writing {what}: {source}")]
    Write {
        /// The structure: "the command line", "the boot GDT".
        what: &'static str,
        /// What vm-memory said.
        #[source]
        source: vm_memory::GuestMemoryError,
    },
    /// The PVH start info or memory map could not be written.
    #[error("writing PVH boot parameters: {0}")]
    BootParams(#[source] linux_loader::configurator::Error),
    /// A snapshot's pages could not be written back.
    #[error("writing {len} bytes at {addr:#x}: {source}")]
    Restore {
        /// Guest physical address of the run of pages.
        addr: u64,
        /// Its length.
        len: usize,
        /// What vm-memory said.
        #[source]
        source: vm_memory::GuestMemoryError,
    },
    /// Guest RAM could not be read for a snapshot.
    #[error("reading {len} bytes at {addr:#x}: {source}")]
    Read {
        /// Guest physical address of the chunk.
        addr: u64,
        /// Its length.
        len: usize,
        /// What vm-memory said.
        #[source]
        source: vm_memory::GuestMemoryError,
    },
    /// Snapshots assume the one-region layout of `arch::layout`.
    #[error("snapshots support one RAM region from address 0")]
    Layout,
}

/// Why a kernel could not be booted.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// The kernel file could not be read.
    #[error("cannot read kernel {}: {source}", path.display())]
    KernelRead {
        /// The file.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The image does not start with the ELF magic.
    #[error("kernel image {image}: not an ELF file ({len} bytes, no \\x7fELF magic)")]
    NotElf {
        /// The image's name.
        image: String,
        /// Its size.
        len: usize,
    },
    /// The ELF loader refused the image.
    #[error("kernel image {image}: ELF load failed: {source}")]
    ElfLoad {
        /// The image's name.
        image: String,
        /// What linux-loader said.
        #[source]
        source: linux_loader::loader::Error,
    },
    /// The image has no `XEN_ELFNOTE_PHYS32_ENTRY` note to start it at.
    #[error("kernel image {image}: no usable PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY): {found}")]
    NoPvhEntry {
        /// The image's name.
        image: String,
        /// What the loader found instead.
        found: PvhBootCapability,
    },
    /// A segment (with its zero-filled tail, `p_memsz`) ends past the RAM:
    /// the kernel would run on memory that does not exist.
    #[error(
        "kernel image {image}: segments end at {end:#x}, past the {ram:#x} bytes of guest RAM"
    )]
    KernelPastRam {
        /// The image's name.
        image: String,
        /// First byte past the highest segment.
        end: u64,
        /// Bytes of guest RAM.
        ram: u64,
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
}
