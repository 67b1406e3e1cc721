//! The rule an image breaks.

use super::super::layout::HIGHMEM_START;
use super::format::{EHDR_SIZE, PHDR_SIZE};

/// The rule an image breaks. Segments are named by their index in the
/// program header table.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Shorter than an ELF header.
    #[error("{len} bytes is too short for an ELF64 header ({EHDR_SIZE} bytes)")]
    TooShort {
        /// The image's size.
        len: usize,
    },
    /// No ELF magic.
    #[error("not an ELF file (no \\x7fELF magic)")]
    NotElf,
    /// Not `ELFCLASS64`.
    #[error("EI_CLASS {0}: not a 64-bit ELF (the loader reads ELF64 only)")]
    Class(u8),
    /// Not little-endian.
    #[error("EI_DATA {0}: not a little-endian ELF")]
    Endianness(u8),
    /// Not an executable.
    #[error("e_type {0}: not an executable (ET_EXEC)")]
    Type(u16),
    /// Not for x86-64.
    #[error("e_machine {0:#x}: not an x86-64 image")]
    Machine(u16),
    /// Program headers of the wrong size.
    #[error("e_phentsize {0}: ELF64 program headers are {PHDR_SIZE} bytes")]
    PhentSize(u16),
    /// The program header table is not inside the file.
    #[error(
        "program header table ({phnum} entries at offset {phoff:#x}) is not inside the \
         {len}-byte file"
    )]
    PhdrTable {
        /// `e_phoff`.
        phoff: u64,
        /// `e_phnum`.
        phnum: u16,
        /// The file's size.
        len: usize,
    },
    /// linux-loader refuses an ELF entry below the kernel area.
    #[error("e_entry {0:#x} is below 1 MiB ({HIGHMEM_START:#x}), where the loader refuses it")]
    ElfEntryLow(u64),
    /// A segment's file bytes are not inside the file.
    #[error(
        "segment {index}: its {filesz:#x} file bytes at offset {offset:#x} are not inside \
         the {len}-byte file"
    )]
    SegmentPastEof {
        /// Program header index.
        index: u16,
        /// `p_offset`.
        offset: u64,
        /// `p_filesz`.
        filesz: u64,
        /// The file's size.
        len: usize,
    },
    /// More file bytes than memory.
    #[error("segment {index}: p_filesz {filesz:#x} is larger than p_memsz {memsz:#x}")]
    FileLargerThanMemory {
        /// Program header index.
        index: u16,
        /// `p_filesz`.
        filesz: u64,
        /// `p_memsz`.
        memsz: u64,
    },
    /// A `PT_LOAD` below 1 MiB.
    #[error(
        "PT_LOAD segment {index} at {paddr:#x} is below 1 MiB ({HIGHMEM_START:#x}), where \
         the boot structures would overwrite it"
    )]
    LoadBelowKernelArea {
        /// Program header index.
        index: u16,
        /// `p_paddr`.
        paddr: u64,
    },
    /// A `PT_LOAD` that does not fit in RAM.
    #[error(
        "PT_LOAD segment {index} at {paddr:#x} with p_memsz {memsz:#x} does not fit in the \
         guest's {ram:#x} bytes of RAM"
    )]
    LoadPastRam {
        /// Program header index.
        index: u16,
        /// `p_paddr`.
        paddr: u64,
        /// `p_memsz`.
        memsz: u64,
        /// Guest RAM size.
        ram: u64,
    },
    /// Two `PT_LOAD` segments share guest memory.
    #[error(
        "PT_LOAD segments {first} and {second} overlap at {at:#x}: the later would silently \
         overwrite the earlier"
    )]
    Overlap {
        /// The lower segment's index.
        first: u16,
        /// The segment that starts inside it.
        second: u16,
        /// Where the second starts.
        at: u64,
    },
    /// A note does not fit its segment.
    #[error(
        "PT_NOTE segment {index}: the note at offset {offset:#x} (namesz {namesz:#x}, descsz \
         {descsz:#x}) runs past the end of the segment"
    )]
    NotePastSegment {
        /// Program header index.
        index: u16,
        /// The note's offset in the file.
        offset: u64,
        /// Its `n_namesz` (0 when the header itself does not fit).
        namesz: u32,
        /// Its `n_descsz` (0 when the header itself does not fit).
        descsz: u32,
    },
    /// The PVH note's descriptor is not an address.
    #[error(
        "PT_NOTE segment {index}: the PVH entry note's descriptor is {descsz:#x} bytes; it \
         must be 4 or 8"
    )]
    PvhDescSize {
        /// Program header index.
        index: u16,
        /// `n_descsz`.
        descsz: u32,
    },
    /// Two PVH entry notes: which one starts the guest would be the
    /// loader's accident.
    #[error("more than one PVH entry note (in PT_NOTE segments {first} and {second})")]
    DuplicatePvh {
        /// The first note's segment.
        first: u16,
        /// The second note's segment.
        second: u16,
    },
    /// vmm's 64-bit entry note's descriptor is not an 8-byte address.
    #[error(
        "PT_NOTE segment {index}: the vmm 64-bit entry note's descriptor is {descsz:#x} bytes; \
         it must be 8"
    )]
    Entry64DescSize {
        /// Program header index.
        index: u16,
        /// `n_descsz`.
        descsz: u32,
    },
    /// Two vmm 64-bit entry notes.
    #[error("more than one vmm 64-bit entry note (in PT_NOTE segments {first} and {second})")]
    DuplicateEntry64 {
        /// The first note's segment.
        first: u16,
        /// The second note's segment.
        second: u16,
    },
    /// vmm's 64-bit entry point breaks a rule.
    #[error("vmm 64-bit entry {entry:#x} {rule}")]
    Entry64 {
        /// The entry point from the note.
        entry: u64,
        /// The rule, for people.
        rule: &'static str,
    },
    /// No PVH entry note.
    #[error("no PVH entry note (\"Xen\", XEN_ELFNOTE_PHYS32_ENTRY): not a PVH kernel")]
    NoPvhEntry,
    /// No `PT_LOAD` with any bytes.
    #[error("no PT_LOAD segment: nothing to load")]
    NoLoad,
    /// The PVH entry point breaks a rule.
    #[error("PVH entry {entry:#x} {rule}")]
    PvhEntry {
        /// The entry point from the note.
        entry: u64,
        /// The rule, for people.
        rule: &'static str,
    },
}
