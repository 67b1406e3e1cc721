//! Validation of a PVH ELF kernel image before any VM exists: a pure
//! function of the image's bytes and the guest's RAM size, so a bad image
//! is refused with the segment and the rule it breaks, and so it can be
//! fuzzed without KVM.
//!
//! [`check_image`] reads exactly what the loader acts on (the ELF header,
//! the program headers and the notes of `PT_NOTE` segments), every read
//! bounds-checked and every sum checked, and applies these rules:
//!
//! | rule | why |
//! |------|-----|
//! | ELF64, little-endian, `ET_EXEC`, x86-64, 56-byte program headers | what the loader reads |
//! | the program header table and every segment's file bytes lie inside the file | no read past the end |
//! | `p_filesz <= p_memsz` | the loader copies `p_filesz` bytes into a `p_memsz` segment |
//! | every `PT_LOAD` lies in `[1 MiB, end of RAM below the 32-bit hole)` | below 1 MiB the boot structures (`super::layout`) would overwrite it; past RAM there is nothing to load into |
//! | no two `PT_LOAD` segments overlap | the later would silently overwrite the earlier |
//! | `e_entry >= 1 MiB` | linux-loader refuses lower entries (PVH itself starts at the note's entry) |
//! | notes lie inside their `PT_NOTE` segment (4-byte aligned, as the loader walks them) | a `descsz` of `0xfffffff0` is refused, not skipped over |
//! | exactly one PVH entry note (`"Xen"`, `XEN_ELFNOTE_PHYS32_ENTRY`), descriptor 4 or 8 bytes | 4 bytes is the 32-bit address; 8 is the `.quad` a 64-bit kernel emits |
//! | the PVH entry is not 0, below 4 GiB, outside the MMIO hole, inside RAM, at or above 1 MiB and inside a `PT_LOAD` segment's file bytes | PVH starts the vCPU there in 32-bit mode |
//! | at most one vmm 64-bit entry note (`"vmm"`, type 1), descriptor 8 bytes; its entry inside RAM, at or above 1 MiB, below `DIRECT_MAP_END` and inside a `PT_LOAD` segment's file bytes | optional: `vmm` starts the vCPU there in long mode on its own identity map of the first GiB (see `super::regs`) |
//!
//! The image is then loaded by linux-loader (see [`super::boot`]); the plan
//! this returns supplies the entry point and the end of the image.

mod error;
mod format;
mod notes;

pub use error::ImageError;

use super::layout::{DIRECT_MAP_END, HIGHMEM_START, LOW_RAM_END};
use format::{
    span, u16_at, u32_at, u64_at, Phdr, EHDR_SIZE, ELFCLASS64, ELFDATA2LSB, EM_X86_64, ET_EXEC,
    PF_W, PHDR_SIZE, PT_LOAD, PT_NOTE,
};
use notes::entry_notes;

/// The largest kernel file `vmm run --kernel` reads: far above our guest
/// (under 1 MiB) and a distribution vmlinux (tens of MiB), far below what
/// would hurt the host to hold in memory.
pub const MAX_KERNEL_BYTES: u64 = 64 << 20;

/// The ELF magic, `\x7fELF`.
pub const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// Where RAM below 4 GiB ends: the 32-bit MMIO hole starts here (RAM past
/// it continues at 4 GiB, where no kernel loads).
const MMIO_HOLE_START: u64 = LOW_RAM_END;
/// The top of the 32-bit address space.
const FOUR_GIB: u64 = 1 << 32;

/// A `PT_LOAD` segment the loader will copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    /// Its index in the program header table.
    pub index: u16,
    /// Guest physical address (`p_paddr`).
    pub paddr: u64,
    /// Offset of its bytes in the file.
    pub offset: u64,
    /// Bytes copied from the file.
    pub filesz: u64,
    /// Bytes it occupies in guest memory (the rest is zero).
    pub memsz: u64,
    /// `PF_W`: the kernel writes it (its data), so `vmm run` copies it
    /// into guest RAM even where it maps the rest of the kernel from its
    /// executable (`vstate::machine::place_from_executable`).
    pub writable: bool,
}

/// What a valid image loads and where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImagePlan {
    /// The PVH entry point (guest physical, below 4 GiB).
    pub entry: u64,
    /// vmm's direct 64-bit entry point, when the image declares one
    /// (guest physical, below `DIRECT_MAP_END`).
    pub entry64: Option<u64>,
    /// The image names itself Linux (a Xen guest-OS note "linux", which a
    /// PVH Linux built with Xen support carries): see
    /// `crate::arch::boot::Platform`.
    pub linux: bool,
    /// Its `PT_LOAD` segments with any bytes, in program header order.
    pub segments: Vec<LoadSegment>,
    /// First byte past the highest segment.
    pub end: u64,
}

/// Check a PVH ELF kernel image against the rules of this module (see the
/// table there) for a guest with `ram_bytes` of RAM, and say what to load
/// and where to start. The image must load into the RAM from address 0,
/// below the 32-bit hole (the rest of a large guest's RAM is above 4 GiB).
/// Pure: no KVM, no guest memory, no allocation beyond the plan; never
/// panics on any input.
pub fn check_image(bytes: &[u8], ram_bytes: u64) -> Result<ImagePlan, ImageError> {
    let ram_bytes = ram_bytes.min(LOW_RAM_END);
    let len = bytes.len();
    let (phoff, phnum) = check_header(bytes)?;
    let mut segments = Vec::new();
    let mut pvh: Option<(u16, u64)> = None;
    let mut entry64: Option<(u16, u64)> = None;
    let mut linux = false;
    for index in 0..phnum {
        let at = phoff + u64::from(index) * PHDR_SIZE;
        // Inside the table, checked above.
        let p = Phdr {
            index,
            p_type: u32_at(bytes, at).unwrap_or_default(),
            flags: u32_at(bytes, at + 4).unwrap_or_default(),
            offset: u64_at(bytes, at + 8).unwrap_or_default(),
            paddr: u64_at(bytes, at + 24).unwrap_or_default(),
            filesz: u64_at(bytes, at + 32).unwrap_or_default(),
            memsz: u64_at(bytes, at + 40).unwrap_or_default(),
        };
        match p.p_type {
            PT_LOAD => {
                if let Some(s) = check_load(bytes, &p, ram_bytes)? {
                    segments.push(s);
                }
            }
            PT_NOTE => {
                let data = span(bytes, p.offset, p.filesz).ok_or(ImageError::SegmentPastEof {
                    index,
                    offset: p.offset,
                    filesz: p.filesz,
                    len,
                })?;
                let found = entry_notes(data, &p)?;
                linux |= found.linux;
                if let Some(entry) = found.pvh {
                    if let Some((first, _)) = pvh {
                        return Err(ImageError::DuplicatePvh {
                            first,
                            second: index,
                        });
                    }
                    pvh = Some((index, entry));
                }
                if let Some(entry) = found.entry64 {
                    if let Some((first, _)) = entry64 {
                        return Err(ImageError::DuplicateEntry64 {
                            first,
                            second: index,
                        });
                    }
                    entry64 = Some((index, entry));
                }
            }
            _ => {}
        }
    }
    if segments.is_empty() {
        return Err(ImageError::NoLoad);
    }
    check_overlaps(&segments)?;
    let (_, entry) = pvh.ok_or(ImageError::NoPvhEntry)?;
    check_entry(entry, ram_bytes, &segments)?;
    let entry64 = entry64.map(|(_, e)| e);
    if let Some(e) = entry64 {
        check_entry64(e, ram_bytes, &segments)?;
    }
    let end = segments
        .iter()
        .map(|s| s.paddr + s.memsz)
        .max()
        .unwrap_or(HIGHMEM_START);
    Ok(ImagePlan {
        entry,
        entry64,
        linux,
        segments,
        end,
    })
}

/// The rules for the ELF header: magic, class, byte order, type, machine,
/// program header size, the program header table inside the file, and the
/// ELF entry above low memory. Returns the table's offset and entry count.
fn check_header(bytes: &[u8]) -> Result<(u64, u16), ImageError> {
    let len = bytes.len();
    if (len as u64) < EHDR_SIZE {
        if !bytes.starts_with(ELF_MAGIC) && !ELF_MAGIC.starts_with(bytes) {
            return Err(ImageError::NotElf);
        }
        return Err(ImageError::TooShort { len });
    }
    // Inside the header from here: the reads below cannot fail.
    let h = |at| u16_at(bytes, at).unwrap_or_default();
    if &bytes[..4] != ELF_MAGIC {
        return Err(ImageError::NotElf);
    }
    if bytes[4] != ELFCLASS64 {
        return Err(ImageError::Class(bytes[4]));
    }
    if bytes[5] != ELFDATA2LSB {
        return Err(ImageError::Endianness(bytes[5]));
    }
    if h(16) != ET_EXEC {
        return Err(ImageError::Type(h(16)));
    }
    if h(18) != EM_X86_64 {
        return Err(ImageError::Machine(h(18)));
    }
    let e_entry = u64_at(bytes, 24).unwrap_or_default();
    let phoff = u64_at(bytes, 32).unwrap_or_default();
    let phentsize = h(54);
    let phnum = h(56);
    if u64::from(phentsize) != PHDR_SIZE {
        return Err(ImageError::PhentSize(phentsize));
    }
    let table = u64::from(phnum) * PHDR_SIZE;
    if phoff < EHDR_SIZE || span(bytes, phoff, table).is_none() {
        return Err(ImageError::PhdrTable { phoff, phnum, len });
    }
    if e_entry < HIGHMEM_START {
        return Err(ImageError::ElfEntryLow(e_entry));
    }
    Ok((phoff, phnum))
}

/// No two loaded segments overlap in guest memory.
fn check_overlaps(segments: &[LoadSegment]) -> Result<(), ImageError> {
    let mut sorted: Vec<&LoadSegment> = segments.iter().collect();
    sorted.sort_by_key(|s| s.paddr);
    for w in sorted.windows(2) {
        // Both fit in RAM: the sums cannot overflow.
        if w[1].paddr < w[0].paddr + w[0].memsz {
            return Err(ImageError::Overlap {
                first: w[0].index,
                second: w[1].index,
                at: w[1].paddr,
            });
        }
    }
    Ok(())
}

/// The rules for one `PT_LOAD`; `None` for an empty one (nothing loaded).
fn check_load(bytes: &[u8], p: &Phdr, ram: u64) -> Result<Option<LoadSegment>, ImageError> {
    let index = p.index;
    if span(bytes, p.offset, p.filesz).is_none() {
        return Err(ImageError::SegmentPastEof {
            index,
            offset: p.offset,
            filesz: p.filesz,
            len: bytes.len(),
        });
    }
    if p.filesz > p.memsz {
        return Err(ImageError::FileLargerThanMemory {
            index,
            filesz: p.filesz,
            memsz: p.memsz,
        });
    }
    if p.memsz == 0 {
        return Ok(None);
    }
    if p.paddr < HIGHMEM_START {
        return Err(ImageError::LoadBelowKernelArea {
            index,
            paddr: p.paddr,
        });
    }
    if p.paddr.checked_add(p.memsz).is_none_or(|end| end > ram) {
        return Err(ImageError::LoadPastRam {
            index,
            paddr: p.paddr,
            memsz: p.memsz,
            ram,
        });
    }
    Ok(Some(LoadSegment {
        index,
        paddr: p.paddr,
        offset: p.offset,
        filesz: p.filesz,
        memsz: p.memsz,
        writable: p.flags & PF_W != 0,
    }))
}

/// The rules for the PVH entry point, each with its own message.
fn check_entry(entry: u64, ram: u64, segments: &[LoadSegment]) -> Result<(), ImageError> {
    let rule = if entry == 0 {
        Some("is 0")
    } else if entry >= FOUR_GIB {
        Some("is above 4 GiB: PVH starts the vCPU in 32-bit mode")
    } else if entry >= MMIO_HOLE_START {
        Some("is in the 32-bit MMIO hole (3-4 GiB), where there is no RAM")
    } else if entry >= ram {
        Some("is past the end of guest RAM")
    } else if entry < HIGHMEM_START {
        Some("is below 1 MiB, among the boot structures")
    } else if !segments
        .iter()
        .any(|s| entry >= s.paddr && entry - s.paddr < s.filesz)
    {
        Some("is not inside any PT_LOAD segment's file bytes: no code is loaded there")
    } else {
        None
    };
    match rule {
        Some(rule) => Err(ImageError::PvhEntry { entry, rule }),
        None => Ok(()),
    }
}

/// The rules for vmm's 64-bit entry point: code the VMM's identity map
/// reaches.
fn check_entry64(entry: u64, ram: u64, segments: &[LoadSegment]) -> Result<(), ImageError> {
    let rule = if entry >= ram {
        Some("is past the end of guest RAM")
    } else if entry >= DIRECT_MAP_END {
        Some("is above the first GiB, which is all the direct entry's page tables map")
    } else if entry < HIGHMEM_START {
        Some("is below 1 MiB, among the boot structures")
    } else if !in_file_bytes(entry, segments) {
        Some("is not inside any PT_LOAD segment's file bytes: no code is loaded there")
    } else {
        None
    };
    match rule {
        Some(rule) => Err(ImageError::Entry64 { entry, rule }),
        None => Ok(()),
    }
}

/// Whether `addr` holds bytes copied from the file.
fn in_file_bytes(addr: u64, segments: &[LoadSegment]) -> bool {
    segments
        .iter()
        .any(|s| addr >= s.paddr && addr - s.paddr < s.filesz)
}

#[cfg(test)]
mod tests;
