//! The notes of `PT_NOTE` segments, walked as the loader walks them, for
//! the PVH entry point and vmm's direct 64-bit entry point.

use super::error::ImageError;
use super::format::{
    span, u32_at, Phdr, NHDR_SIZE, VMM_NOTE_ENTRY64, VMM_NOTE_NAME, XEN_ELFNOTE_GUEST_OS,
    XEN_ELFNOTE_PHYS32_ENTRY, XEN_NOTE_NAME,
};

/// The entry points one `PT_NOTE` segment declares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct EntryNotes {
    /// The PVH 32-bit entry (`"Xen"`, `XEN_ELFNOTE_PHYS32_ENTRY`).
    pub pvh: Option<u64>,
    /// vmm's direct 64-bit entry (`"vmm"`, type 1).
    pub entry64: Option<u64>,
    /// The image names itself Linux (`"Xen"`, `XEN_ELFNOTE_GUEST_OS`
    /// "linux"): it gets the PC platform.
    pub linux: bool,
}

/// Walk the notes of a `PT_NOTE` segment (`data`, its file bytes) as the
/// loader does (4-byte aligned name and descriptor); the entry points
/// found there.
pub(super) fn entry_notes(data: &[u8], p: &Phdr) -> Result<EntryNotes, ImageError> {
    let align4 = |n: u32| (u64::from(n) + 3) & !3;
    let mut found = EntryNotes::default();
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
            if found.pvh.is_some() {
                return Err(ImageError::DuplicatePvh {
                    first: p.index,
                    second: p.index,
                });
            }
            found.pvh = Some(entry);
        }
        if n_type == XEN_ELFNOTE_GUEST_OS && name == XEN_NOTE_NAME {
            found.linux |= desc.strip_suffix(b"\0").unwrap_or(desc) == b"linux";
        }
        if n_type == VMM_NOTE_ENTRY64 && name == VMM_NOTE_NAME {
            let [a, b, c, d, e, f, g, h] = *desc else {
                return Err(ImageError::Entry64DescSize {
                    index: p.index,
                    descsz,
                });
            };
            if found.entry64.is_some() {
                return Err(ImageError::DuplicateEntry64 {
                    first: p.index,
                    second: p.index,
                });
            }
            found.entry64 = Some(u64::from_le_bytes([a, b, c, d, e, f, g, h]));
        }
        // The padding of the last note may run past the segment; no note
        // can follow it then.
        at = desc_at + align4(descsz);
    }
    Ok(found)
}
