//! The ELF64 layout the loader reads: header and program-header sizes,
//! the field values accepted, bounds-checked little-endian reads and one
//! program header as read.

/// Size of an ELF64 header.
pub(super) const EHDR_SIZE: u64 = 64;
/// Size of an ELF64 program header.
pub(super) const PHDR_SIZE: u64 = 56;
/// Size of an ELF note header (namesz, descsz, type).
pub(super) const NHDR_SIZE: u64 = 12;
/// `EI_CLASS` of a 64-bit ELF.
pub(super) const ELFCLASS64: u8 = 2;
/// `EI_DATA` of a little-endian ELF.
pub(super) const ELFDATA2LSB: u8 = 1;
/// `e_type` of an executable.
pub(super) const ET_EXEC: u16 = 2;
/// `e_machine` of x86-64.
pub(super) const EM_X86_64: u16 = 0x3e;
/// Loadable segment.
pub(super) const PT_LOAD: u32 = 1;
/// Note segment.
pub(super) const PT_NOTE: u32 = 4;
/// `p_flags`: the segment is writable.
pub(super) const PF_W: u32 = 2;
/// The note type that carries the PVH 32-bit entry point.
pub(super) const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;
/// `XEN_ELFNOTE_GUEST_OS`: the kernel's name, "linux" for Linux.
pub(super) const XEN_ELFNOTE_GUEST_OS: u32 = 6;
/// The PVH note's name, NUL included.
pub(super) const XEN_NOTE_NAME: &[u8; 4] = b"Xen\0";
/// The name of vmm's own notes, NUL included.
pub(super) const VMM_NOTE_NAME: &[u8; 4] = b"vmm\0";
/// vmm's note type that carries the direct 64-bit entry point (see
/// `crate::arch::regs`), 8 bytes.
pub(super) const VMM_NOTE_ENTRY64: u32 = 1;

/// Little-endian reads of fixed-size fields, `None` past the end.
pub(super) fn read<const N: usize>(bytes: &[u8], at: u64) -> Option<[u8; N]> {
    let start = usize::try_from(at).ok()?;
    let end = start.checked_add(N)?;
    bytes.get(start..end)?.try_into().ok()
}

pub(super) fn u16_at(bytes: &[u8], at: u64) -> Option<u16> {
    read(bytes, at).map(u16::from_le_bytes)
}

pub(super) fn u32_at(bytes: &[u8], at: u64) -> Option<u32> {
    read(bytes, at).map(u32::from_le_bytes)
}

pub(super) fn u64_at(bytes: &[u8], at: u64) -> Option<u64> {
    read(bytes, at).map(u64::from_le_bytes)
}

/// `[offset, offset + len)` as a range of `bytes`, if inside it.
pub(super) fn span(bytes: &[u8], offset: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    bytes.get(start..end)
}

/// One program header, as read.
pub(super) struct Phdr {
    pub(super) index: u16,
    pub(super) p_type: u32,
    pub(super) flags: u32,
    pub(super) offset: u64,
    pub(super) paddr: u64,
    pub(super) filesz: u64,
    pub(super) memsz: u64,
}
