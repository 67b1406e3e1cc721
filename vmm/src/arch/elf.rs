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
//! | every `PT_LOAD` lies in `[1 MiB, end of RAM)` | below 1 MiB the boot structures ([`super::layout`]) would overwrite it; past RAM there is nothing to load into |
//! | no two `PT_LOAD` segments overlap | the later would silently overwrite the earlier |
//! | `e_entry >= 1 MiB` | linux-loader refuses lower entries (PVH itself starts at the note's entry) |
//! | notes lie inside their `PT_NOTE` segment (4-byte aligned, as the loader walks them) | a `descsz` of `0xfffffff0` is refused, not skipped over |
//! | exactly one PVH entry note (`"Xen"`, `XEN_ELFNOTE_PHYS32_ENTRY`), descriptor 4 or 8 bytes | 4 bytes is the 32-bit address; 8 is the `.quad` a 64-bit kernel emits |
//! | the PVH entry is not 0, below 4 GiB, outside the MMIO hole, inside RAM, at or above 1 MiB and inside a `PT_LOAD` segment's file bytes | PVH starts the vCPU there in 32-bit mode |
//!
//! The image is then loaded by linux-loader (see [`super::boot`]); the plan
//! this returns supplies the entry point and the end of the image.

use super::layout::{HIGHMEM_START, MAX_MEM_MIB};

/// The largest kernel file `vmm run --kernel` reads: far above our guest
/// (under 1 MiB) and a distribution vmlinux (tens of MiB), far below what
/// would hurt the host to hold in memory.
pub const MAX_KERNEL_BYTES: u64 = 64 << 20;

/// The ELF magic, `\x7fELF`.
pub const ELF_MAGIC: &[u8; 4] = b"\x7fELF";

/// Size of an ELF64 header.
const EHDR_SIZE: u64 = 64;
/// Size of an ELF64 program header.
const PHDR_SIZE: u64 = 56;
/// Size of an ELF note header (namesz, descsz, type).
const NHDR_SIZE: u64 = 12;
/// `EI_CLASS` of a 64-bit ELF.
const ELFCLASS64: u8 = 2;
/// `EI_DATA` of a little-endian ELF.
const ELFDATA2LSB: u8 = 1;
/// `e_type` of an executable.
const ET_EXEC: u16 = 2;
/// `e_machine` of x86-64.
const EM_X86_64: u16 = 0x3e;
/// Loadable segment.
const PT_LOAD: u32 = 1;
/// Note segment.
const PT_NOTE: u32 = 4;
/// The note type that carries the PVH 32-bit entry point.
const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;
/// The PVH note's name, NUL included.
const XEN_NOTE_NAME: &[u8; 4] = b"Xen\0";
/// Where guest RAM can never reach: the 32-bit MMIO hole starts here.
const MMIO_HOLE_START: u64 = MAX_MEM_MIB << 20;
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
}

/// What a valid image loads and where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImagePlan {
    /// The PVH entry point (guest physical, below 4 GiB).
    pub entry: u64,
    /// Its `PT_LOAD` segments with any bytes, in program header order.
    pub segments: Vec<LoadSegment>,
    /// First byte past the highest segment.
    pub end: u64,
}

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

/// Little-endian reads of fixed-size fields, `None` past the end.
fn read<const N: usize>(bytes: &[u8], at: u64) -> Option<[u8; N]> {
    let start = usize::try_from(at).ok()?;
    let end = start.checked_add(N)?;
    bytes.get(start..end)?.try_into().ok()
}

fn u16_at(bytes: &[u8], at: u64) -> Option<u16> {
    read(bytes, at).map(u16::from_le_bytes)
}

fn u32_at(bytes: &[u8], at: u64) -> Option<u32> {
    read(bytes, at).map(u32::from_le_bytes)
}

fn u64_at(bytes: &[u8], at: u64) -> Option<u64> {
    read(bytes, at).map(u64::from_le_bytes)
}

/// `[offset, offset + len)` as a range of `bytes`, if inside it.
fn span(bytes: &[u8], offset: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    bytes.get(start..end)
}

/// One program header, as read.
struct Phdr {
    index: u16,
    p_type: u32,
    offset: u64,
    paddr: u64,
    filesz: u64,
    memsz: u64,
}

/// Check a PVH ELF kernel image against the rules of this module (see the
/// table there) for a guest with `ram_bytes` of RAM from address 0, and say
/// what to load and where to start. Pure: no KVM, no guest memory, no
/// allocation beyond the plan; never panics on any input.
pub fn check_image(bytes: &[u8], ram_bytes: u64) -> Result<ImagePlan, ImageError> {
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

    let mut segments = Vec::new();
    let mut pvh: Option<(u16, u64)> = None;
    for index in 0..phnum {
        let at = phoff + u64::from(index) * PHDR_SIZE;
        // Inside the table, checked above.
        let p = Phdr {
            index,
            p_type: u32_at(bytes, at).unwrap_or_default(),
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
                if let Some(entry) = pvh_note(data, &p)? {
                    if let Some((first, _)) = pvh {
                        return Err(ImageError::DuplicatePvh {
                            first,
                            second: index,
                        });
                    }
                    pvh = Some((index, entry));
                }
            }
            _ => {}
        }
    }
    if segments.is_empty() {
        return Err(ImageError::NoLoad);
    }
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
    let (_, entry) = pvh.ok_or(ImageError::NoPvhEntry)?;
    check_entry(entry, ram_bytes, &segments)?;
    let end = segments
        .iter()
        .map(|s| s.paddr + s.memsz)
        .max()
        .unwrap_or(HIGHMEM_START);
    Ok(ImagePlan {
        entry,
        segments,
        end,
    })
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
    }))
}

/// Walk the notes of a `PT_NOTE` segment (`data`, its file bytes) as the
/// loader does (4-byte aligned name and descriptor); the PVH entry if one
/// is there.
fn pvh_note(data: &[u8], p: &Phdr) -> Result<Option<u64>, ImageError> {
    let align4 = |n: u32| (u64::from(n) + 3) & !3;
    let mut found = None;
    let mut at = 0u64;
    while at < data.len() as u64 {
        let past = |namesz, descsz| ImageError::NotePastSegment {
            index: p.index,
            offset: p.offset + at,
            namesz,
            descsz,
        };
        let (Some(namesz), Some(descsz), Some(n_type)) =
            (u32_at(data, at), u32_at(data, at + 4), u32_at(data, at + 8))
        else {
            return Err(past(0, 0));
        };
        let name_at = at + NHDR_SIZE;
        let desc_at = name_at + align4(namesz);
        let name = span(data, name_at, u64::from(namesz)).ok_or(past(namesz, descsz))?;
        let desc = span(data, desc_at, u64::from(descsz)).ok_or(past(namesz, descsz))?;
        if n_type == XEN_ELFNOTE_PHYS32_ENTRY && name == XEN_NOTE_NAME {
            let entry = match *desc {
                [a, b, c, d] => u64::from(u32::from_le_bytes([a, b, c, d])),
                [a, b, c, d, e, f, g, h] => u64::from_le_bytes([a, b, c, d, e, f, g, h]),
                _ => {
                    return Err(ImageError::PvhDescSize {
                        index: p.index,
                        descsz,
                    })
                }
            };
            if found.is_some() {
                return Err(ImageError::DuplicatePvh {
                    first: p.index,
                    second: p.index,
                });
            }
            found = Some(entry);
        }
        // The padding of the last note may run past the segment; no note
        // can follow it then.
        at = desc_at + align4(descsz);
    }
    Ok(found)
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

#[cfg(test)]
mod tests {
    use super::*;

    const RAM: u64 = 64 << 20;
    const LOAD_AT: u64 = 0x10_0000;

    /// A program header to build: type, paddr, file bytes, memsz.
    struct Seg {
        p_type: u32,
        paddr: u64,
        data: Vec<u8>,
        memsz: u64,
    }

    fn load(paddr: u64, data: &[u8]) -> Seg {
        Seg {
            p_type: PT_LOAD,
            paddr,
            data: data.to_vec(),
            memsz: data.len() as u64,
        }
    }

    fn note(name: &[u8], n_type: u32, desc: &[u8]) -> Vec<u8> {
        let mut n = Vec::new();
        n.extend_from_slice(&(name.len() as u32).to_le_bytes());
        n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        n.extend_from_slice(&n_type.to_le_bytes());
        n.extend_from_slice(name);
        n.resize(n.len().next_multiple_of(4), 0);
        n.extend_from_slice(desc);
        n.resize(n.len().next_multiple_of(4), 0);
        n
    }

    fn pvh_note_bytes(entry: u64) -> Vec<u8> {
        note(
            XEN_NOTE_NAME,
            XEN_ELFNOTE_PHYS32_ENTRY,
            &entry.to_le_bytes(),
        )
    }

    fn notes(data: Vec<u8>) -> Seg {
        Seg {
            p_type: PT_NOTE,
            paddr: 0,
            memsz: data.len() as u64,
            data,
        }
    }

    /// An ELF64 x86-64 executable with these segments, their bytes after
    /// the program header table in order.
    fn elf(segs: &[Seg]) -> Vec<u8> {
        let phnum = segs.len() as u64;
        let mut e = Vec::new();
        e.extend_from_slice(ELF_MAGIC);
        e.extend_from_slice(&[ELFCLASS64, ELFDATA2LSB, 1, 0]);
        e.extend_from_slice(&[0; 8]);
        e.extend_from_slice(&ET_EXEC.to_le_bytes());
        e.extend_from_slice(&EM_X86_64.to_le_bytes());
        e.extend_from_slice(&1u32.to_le_bytes());
        e.extend_from_slice(&LOAD_AT.to_le_bytes()); // e_entry
        e.extend_from_slice(&EHDR_SIZE.to_le_bytes()); // e_phoff
        e.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
        e.extend_from_slice(&0u32.to_le_bytes()); // e_flags
        e.extend_from_slice(&(EHDR_SIZE as u16).to_le_bytes());
        e.extend_from_slice(&(PHDR_SIZE as u16).to_le_bytes());
        e.extend_from_slice(&(phnum as u16).to_le_bytes());
        e.extend_from_slice(&[64, 0, 0, 0, 0, 0]); // e_shentsize, e_shnum, e_shstrndx
        assert_eq!(e.len() as u64, EHDR_SIZE);
        let mut off = EHDR_SIZE + PHDR_SIZE * phnum;
        for s in segs {
            e.extend_from_slice(&s.p_type.to_le_bytes());
            e.extend_from_slice(&5u32.to_le_bytes());
            e.extend_from_slice(&off.to_le_bytes());
            e.extend_from_slice(&s.paddr.to_le_bytes());
            e.extend_from_slice(&s.paddr.to_le_bytes());
            e.extend_from_slice(&(s.data.len() as u64).to_le_bytes());
            e.extend_from_slice(&s.memsz.to_le_bytes());
            e.extend_from_slice(&4u64.to_le_bytes());
            off += s.data.len() as u64;
        }
        for s in segs {
            e.extend_from_slice(&s.data);
        }
        e
    }

    /// Offset of program header `i`'s field at `field`.
    fn ph(i: u64, field: u64) -> usize {
        (EHDR_SIZE + i * PHDR_SIZE + field) as usize
    }

    fn set_u64(e: &mut [u8], at: usize, v: u64) {
        e[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    fn good() -> Vec<u8> {
        elf(&[load(LOAD_AT, &[0xf4; 16]), notes(pvh_note_bytes(LOAD_AT))])
    }

    fn err(image: &[u8]) -> String {
        check_image(image, RAM).unwrap_err().to_string()
    }

    #[test]
    fn accepts_a_minimal_pvh_kernel_and_the_embedded_guest() {
        let plan = check_image(&good(), RAM).unwrap();
        assert_eq!(plan.entry, LOAD_AT);
        assert_eq!(plan.end, LOAD_AT + 16);
        assert_eq!(
            plan.segments,
            [LoadSegment {
                index: 0,
                paddr: LOAD_AT,
                offset: EHDR_SIZE + 2 * PHDR_SIZE,
                filesz: 16,
                memsz: 16
            }]
        );
        // A 4-byte descriptor is the 32-bit address itself.
        let short = note(
            XEN_NOTE_NAME,
            XEN_ELFNOTE_PHYS32_ENTRY,
            &0x10_0004u32.to_le_bytes(),
        );
        let plan = check_image(&elf(&[load(LOAD_AT, &[0; 16]), notes(short)]), RAM).unwrap();
        assert_eq!(plan.entry, 0x10_0004);
        // Other notes before it are skipped.
        let mut n = note(b"GNU\0", 3, &[1, 2, 3, 4, 5]);
        n.extend(pvh_note_bytes(LOAD_AT + 8));
        let plan = check_image(&elf(&[load(LOAD_AT, &[0; 16]), notes(n)]), RAM).unwrap();
        assert_eq!(plan.entry, LOAD_AT + 8);

        let plan = check_image(crate::GUEST_KERNEL, RAM).unwrap();
        assert!(plan.entry >= LOAD_AT && plan.end <= RAM, "{plan:?}");
    }

    #[test]
    fn refuses_load_segments_below_1_mib() {
        let e = err(&elf(&[
            load(0x8000, &[0xf4]),
            notes(pvh_note_bytes(0x8000)),
        ]));
        assert_eq!(
            e,
            "PT_LOAD segment 0 at 0x8000 is below 1 MiB (0x100000), where the boot structures \
             would overwrite it"
        );
    }

    #[test]
    fn refuses_segments_that_do_not_fit_in_ram() {
        // p_memsz larger than RAM.
        let mut big = load(LOAD_AT, &[0xf4]);
        big.memsz = RAM;
        let e = err(&elf(&[big, notes(pvh_note_bytes(LOAD_AT))]));
        assert!(
            e.starts_with("PT_LOAD segment 0 at 0x100000 with p_memsz 0x4000000 does not fit"),
            "{e}"
        );
        // An end that overflows u64.
        let mut wrap = load(LOAD_AT, &[0xf4]);
        wrap.memsz = u64::MAX;
        assert!(matches!(
            check_image(&elf(&[wrap, notes(pvh_note_bytes(LOAD_AT))]), RAM),
            Err(ImageError::LoadPastRam { index: 0, .. })
        ));
        // In the MMIO hole.
        let e = err(&elf(&[
            load(0xc000_0000, &[0xf4]),
            notes(pvh_note_bytes(LOAD_AT)),
        ]));
        assert!(e.contains("segment 0 at 0xc0000000"), "{e}");
    }

    #[test]
    fn refuses_overlapping_segments() {
        let e = err(&elf(&[
            load(LOAD_AT, &[0xf4; 0x100]),
            notes(pvh_note_bytes(LOAD_AT)),
            load(LOAD_AT + 0x80, &[0x90; 0x10]),
        ]));
        assert_eq!(
            e,
            "PT_LOAD segments 0 and 2 overlap at 0x100080: the later would silently overwrite \
             the earlier"
        );
        // Adjacent is fine.
        check_image(
            &elf(&[
                load(LOAD_AT, &[0xf4; 0x100]),
                notes(pvh_note_bytes(LOAD_AT)),
                load(LOAD_AT + 0x100, &[0x90; 0x10]),
            ]),
            RAM,
        )
        .unwrap();
    }

    #[test]
    fn refuses_bad_pvh_entries_naming_the_rule() {
        for (entry, rule) in [
            (0, "is 0"),
            (0x1_0010_0000, "above 4 GiB"),
            (0xfee0_0000, "MMIO hole"),
            (RAM + 0x1000, "past the end of guest RAM"),
            (0x8000, "below 1 MiB"),
            (LOAD_AT + 0x10_0000, "not inside any PT_LOAD"),
            // One past the loaded bytes.
            (LOAD_AT + 16, "not inside any PT_LOAD"),
        ] {
            let e = err(&elf(&[
                load(LOAD_AT, &[0xf4; 16]),
                notes(pvh_note_bytes(entry)),
            ]));
            assert!(
                e.starts_with(&format!("PVH entry {entry:#x} ")) && e.contains(rule),
                "{entry:#x}: {e}"
            );
        }
    }

    #[test]
    fn refuses_notes_that_overrun_their_segment() {
        // descsz 0xfffffff0.
        let mut n = pvh_note_bytes(LOAD_AT);
        n[4..8].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        let e = err(&elf(&[load(LOAD_AT, &[0xf4]), notes(n)]));
        assert_eq!(
            e,
            format!(
                "PT_NOTE segment 1: the note at offset {:#x} (namesz 0x4, descsz 0xfffffff0) \
                 runs past the end of the segment",
                EHDR_SIZE + 2 * PHDR_SIZE + 1
            )
        );
        // A truncated header.
        let e = err(&elf(&[load(LOAD_AT, &[0xf4]), notes(vec![4, 0, 0, 0, 8])]));
        assert!(
            e.contains("PT_NOTE segment 1") && e.contains("runs past"),
            "{e}"
        );
        // A PT_NOTE whose filesz is 1 TB.
        let mut image = good();
        set_u64(&mut image, ph(1, 32), 1 << 40);
        let e = err(&image);
        assert!(
            e.starts_with("segment 1: its 0x10000000000 file bytes at offset"),
            "{e}"
        );
        // A descriptor that is not an address.
        let n = note(XEN_NOTE_NAME, XEN_ELFNOTE_PHYS32_ENTRY, &[0; 6]);
        let e = err(&elf(&[load(LOAD_AT, &[0xf4]), notes(n)]));
        assert!(e.contains("descriptor is 0x6 bytes"), "{e}");
        // Two PVH notes.
        let mut n = pvh_note_bytes(LOAD_AT);
        n.extend(pvh_note_bytes(LOAD_AT));
        let e = err(&elf(&[load(LOAD_AT, &[0xf4]), notes(n)]));
        assert!(e.starts_with("more than one PVH entry note"), "{e}");
        let e = err(&elf(&[
            load(LOAD_AT, &[0xf4]),
            notes(pvh_note_bytes(LOAD_AT)),
            notes(pvh_note_bytes(LOAD_AT)),
        ]));
        assert!(e.contains("segments 1 and 2"), "{e}");
    }

    #[test]
    fn refuses_broken_headers_and_tables() {
        assert_eq!(check_image(b"MZ", RAM), Err(ImageError::NotElf));
        assert_eq!(
            check_image(b"\x7fEL", RAM),
            Err(ImageError::TooShort { len: 3 })
        );
        let g = good();
        assert_eq!(
            check_image(&g[..100], RAM),
            Err(ImageError::PhdrTable {
                phoff: 64,
                phnum: 2,
                len: 100
            })
        );
        // The last code byte cut off.
        assert!(matches!(
            check_image(&g[..g.len() - 1], RAM),
            Err(ImageError::SegmentPastEof { index: 1, .. })
        ));
        let mut e = g.clone();
        e[4] = 1;
        assert_eq!(check_image(&e, RAM), Err(ImageError::Class(1)));
        let mut e = g.clone();
        e[5] = 2;
        assert_eq!(check_image(&e, RAM), Err(ImageError::Endianness(2)));
        let mut e = g.clone();
        e[16] = 3;
        assert_eq!(check_image(&e, RAM), Err(ImageError::Type(3)));
        let mut e = g.clone();
        e[18] = 0xb7;
        assert_eq!(check_image(&e, RAM), Err(ImageError::Machine(0xb7)));
        let mut e = g.clone();
        e[54] = 32;
        assert_eq!(check_image(&e, RAM), Err(ImageError::PhentSize(32)));
        let mut e = g.clone();
        set_u64(&mut e, 32, u64::MAX - 8);
        assert!(matches!(
            check_image(&e, RAM),
            Err(ImageError::PhdrTable { .. })
        ));
        let mut e = g.clone();
        set_u64(&mut e, 24, 0x1000);
        assert_eq!(check_image(&e, RAM), Err(ImageError::ElfEntryLow(0x1000)));
        // filesz > memsz.
        let mut e = g.clone();
        set_u64(&mut e, ph(0, 40), 8);
        assert_eq!(
            check_image(&e, RAM),
            Err(ImageError::FileLargerThanMemory {
                index: 0,
                filesz: 16,
                memsz: 8
            })
        );
        // No PVH note, no PT_LOAD.
        assert_eq!(
            check_image(&elf(&[load(LOAD_AT, &[0xf4])]), RAM),
            Err(ImageError::NoPvhEntry)
        );
        assert_eq!(
            check_image(&elf(&[notes(pvh_note_bytes(LOAD_AT))]), RAM),
            Err(ImageError::NoLoad)
        );
    }

    #[test]
    fn never_panics_on_truncations_or_single_byte_changes() {
        let g = good();
        for n in 0..g.len() {
            let _ = check_image(&g[..n], RAM);
        }
        for i in 0..g.len() {
            for v in [0u8, 0x7f, 0x80, 0xff] {
                let mut e = g.clone();
                e[i] = v;
                let _ = check_image(&e, RAM);
            }
        }
    }
}
