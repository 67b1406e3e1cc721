//! Why the platform could not be set up: guest RAM and its layout, the
//! boot structures, the MP table, the kernel image. The machine's other
//! errors, and the one [`crate::Error`] they all convert into, are in
//! [`crate::error`], which re-exports these.

use crate::arch::layout::{CMDLINE_MAX, MAX_MEM_MIB, MIN_MEM_MIB};

/// Why the MP table (`crate::arch::mptable`) could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MpTableError {
    /// No CPU to describe.
    #[error("an MP table needs at least one CPU")]
    NoCpus,
    /// More CPUs than fit the EBDA's first KiB, or than APIC IDs below the
    /// IOAPIC's.
    #[error("{0} CPUs do not fit an MP table in the EBDA's first KiB")]
    TooManyCpus(u32),
}

/// Why the ACPI tables (`crate::arch::acpi`) could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AcpiError {
    /// No CPU to describe.
    #[error("ACPI tables need at least one CPU")]
    NoCpus,
    /// More CPUs than 8-bit APIC IDs below the IOAPIC's (and the
    /// broadcast ID 0xff) can number.
    #[error("{0} CPUs do not fit the MADT's 8-bit APIC IDs beside the IOAPIC's")]
    TooManyCpus(u32),
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
    /// The MP table could not be built.
    #[error("building the MP table: {0}")]
    MpTable(#[source] MpTableError),
    /// The ACPI tables could not be built.
    #[error("building the ACPI tables: {0}")]
    Acpi(#[source] AcpiError),
    /// A snapshot's pages could not be written back.
    #[error("writing {len} bytes at RAM offset {addr:#x}: {source}")]
    Restore {
        /// RAM offset of the run of pages (its guest address below the
        /// 32-bit hole; see `arch::layout::ram_pieces`).
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
    /// Guest RAM is not laid out as the memory map says
    /// (`arch::layout::ram_regions`), or a run of a snapshot's pages lies
    /// outside it or off a page boundary.
    #[error(
        "guest RAM does not match the memory map, or a run of snapshot pages lies outside it \
         or off a page boundary"
    )]
    Layout,
    /// `--mem` puts RAM past the physical addresses the guest's CPU has.
    #[error(
        "--mem {mib} MiB puts guest RAM up to {end:#x}, past the {bits}-bit physical addresses \
         this KVM gives a guest (CPUID 0x8000_0008)"
    )]
    BeyondPhysBits {
        /// The size asked for.
        mib: u64,
        /// Where that RAM ends (guest physical).
        end: u64,
        /// The guest's physical address width.
        bits: u32,
    },
    /// The snapshot file is shorter than the pages a restore maps from it:
    /// it changed after it was checked.
    #[error("the snapshot file is {len} bytes now, but its stored pages end at byte {need}: it was truncated after it was checked")]
    ImageShrank {
        /// The file's length when the pages were about to be mapped.
        len: u64,
        /// Where the last mapped page ends in the file.
        need: u64,
    },
    /// A run of a snapshot's pages could not be mapped (or read) into RAM.
    #[error("mapping {len} bytes of the snapshot file at offset {offset} to guest address {addr:#x}: {source}")]
    MapImage {
        /// Guest physical address of the run.
        addr: u64,
        /// Its length.
        len: u64,
        /// Where its pages are in the file.
        offset: u64,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// Which pages of RAM can hold data could not be found out
    /// (`/proc/self/pagemap`, `/proc/self/maps`).
    #[error("finding guest RAM's resident pages ({what}): {source}")]
    Residency {
        /// The file read.
        what: &'static str,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
    /// `--hugepages hugetlbfs` with RAM that is not a whole number of
    /// 2 MiB pages.
    #[error("--hugepages hugetlbfs needs --mem in whole 2 MiB huge pages: {mib} MiB is odd")]
    HugetlbSize {
        /// The size asked for.
        mib: u64,
    },
    /// The host's pool of free 2 MiB huge pages cannot hold guest RAM.
    #[error(
        "--hugepages hugetlbfs: {mib} MiB of guest RAM needs {need} free 2 MiB huge pages, \
         the host has {free} free (HugePages_Free in /proc/meminfo, of {total}); reserve them \
         as root with `echo {} > /proc/sys/vm/nr_hugepages`",
        total + need.saturating_sub(*free)
    )]
    HugetlbShort {
        /// The size asked for.
        mib: u64,
        /// The pages it takes.
        need: u64,
        /// The pool's free pages (`HugePages_Free`).
        free: u64,
        /// The pool's pages (`HugePages_Total`, as `nr_hugepages`).
        total: u64,
    },
    /// The huge-page mapping failed for another reason than a short pool.
    #[error("--hugepages hugetlbfs: cannot map {mib} MiB of 2 MiB huge pages: {source}")]
    Hugetlb {
        /// The size asked for.
        mib: u64,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
}

/// Why a kernel could not be booted.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// The kernel file could not be opened or read, or is not a regular
    /// file of a kernel's size.
    #[error(transparent)]
    KernelFile(#[from] crate::input::InputError),
    /// The file does not start with the ELF magic and has no bzImage
    /// header.
    #[error(
        "kernel image {image}: not an ELF file ({len} bytes, no \\x7fELF magic) nor a bzImage \
         (no \"HdrS\" at 0x202)"
    )]
    NotElf {
        /// The image's name.
        image: String,
        /// Its size.
        len: u64,
    },
    /// The image breaks a rule of `arch::elf` (checked before any VM exists).
    #[error("kernel image {image}: invalid PVH ELF image: {source}")]
    Image {
        /// The image's name.
        image: String,
        /// The rule it breaks.
        #[source]
        source: crate::arch::elf::ImageError,
    },
    /// The bzImage breaks a rule of `arch::linux` (checked before any VM
    /// exists).
    #[error("kernel image {image}: invalid bzImage: {source}")]
    BzImage {
        /// The image's name.
        image: String,
        /// The rule it breaks.
        #[source]
        source: BzImageError,
    },
    /// linux-loader's bzImage loader refused the image.
    #[error("kernel image {image}: bzImage load failed: {source}")]
    BzImageLoad {
        /// The image's name.
        image: String,
        /// What linux-loader said.
        #[source]
        source: linux_loader::loader::Error,
    },
    /// The initrd does not fit in guest RAM above the kernel.
    #[error(
        "initrd {initrd}: {size} bytes do not fit in guest RAM between the kernel's end {kernel_end:#x} \
         and {top:#x} (the end of low RAM the kernel may address); give more --mem"
    )]
    InitrdTooBig {
        /// The initrd's name.
        initrd: String,
        /// Its size.
        size: u64,
        /// The first address it could take.
        kernel_end: u64,
        /// The highest end it could have.
        top: u64,
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
}

/// Why a file is not a bzImage this VMM can boot.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BzImageError {
    /// Shorter than its header.
    #[error("truncated: {len} bytes, shorter than the boot protocol header (0x264 bytes)")]
    ShortHeader {
        /// The file's size.
        len: u64,
    },
    /// No `HdrS` at 0x202.
    #[error("no \"HdrS\" boot protocol header at 0x202")]
    NoHeader,
    /// Too old a boot protocol.
    #[error("boot protocol {major}.{minor:02} has no 64-bit entry (2.12 or later needed)")]
    OldProtocol {
        /// Major version.
        major: u8,
        /// Minor version.
        minor: u8,
    },
    /// Not a 64-bit kernel, or one that must not be loaded high.
    #[error("not a 64-bit kernel loadable at 1 MiB (loadflags {loadflags:#x}, xloadflags {xloadflags:#x})")]
    Not64 {
        /// `loadflags`.
        loadflags: u8,
        /// `xloadflags`.
        xloadflags: u16,
    },
    /// The kernel asks to be loaded below 1 MiB.
    #[error("code32_start {0:#x} is below 1 MiB: the kernel must load at 1 MiB")]
    LowLoad(u64),
    /// The file ends before the kernel its header describes.
    #[error(
        "truncated: {len} bytes, the header describes {need} (setup {setup} + kernel {kernel})"
    )]
    Truncated {
        /// The file's size.
        len: u64,
        /// What the header describes.
        need: u64,
        /// The setup code's bytes.
        setup: u64,
        /// The protected-mode kernel's bytes.
        kernel: u64,
    },
    /// The kernel needs more RAM than the guest has below the 32-bit hole.
    #[error(
        "needs RAM up to {need:#x} to decompress itself (init_size {init_size:#x} from its \
         preferred address {pref:#x}); the guest's low RAM ends at {ram:#x}"
    )]
    TooBigForRam {
        /// The end it needs.
        need: u64,
        /// Its preferred load address (at least 1 MiB).
        pref: u64,
        /// `init_size`.
        init_size: u64,
        /// The end of the guest's low RAM.
        ram: u64,
    },
}
