//! Reading a container from an open file, section by section, never more
//! than its verified header promises.

use super::parse::{check_padding, gaps, parse_header, parse_table, section};
use super::{le_u64, Container, FormatError, SectionInfo, HEADER_SIZE};
use crate::input::{InputError, InputFile};

impl Container {
    /// Read and verify a snapshot from an open file without reading more
    /// than its header promises: the header and the section table first
    /// (bounded by the header's own section count), then every section's
    /// bytes, seeking to each, the memory sections last. `check_table`
    /// sees the verified table before any section body is read, so a file
    /// with unknown sections is refused before its memory is read.
    ///
    /// Sections named in `lazy` are left in the file: neither read nor
    /// checksummed, and absent from the container (their table entries,
    /// bounds-checked against the file's length, say where they are). A
    /// restore maps `memory.pages` so.
    pub fn read_from(
        file: &mut InputFile,
        check_table: impl FnOnce(&[SectionInfo]) -> Result<(), FormatError>,
        lazy: &[&str],
    ) -> Result<(Vec<SectionInfo>, Self), ReadError> {
        let len = file.len();
        let mut head = vec![0u8; HEADER_SIZE.min(len as usize)];
        read_at(file, 0, &mut head)?;
        let header = match parse_header(&head, len) {
            Err(FormatError::Truncated { got, need }) => {
                return Err(name_truncated(file, &head, got, need).into())
            }
            r => r?,
        };
        let mut table = vec![0u8; header.table_len()];
        read_at(file, header.table_offset, &mut table)?;
        let entries = parse_table(&header, &table)?;
        check_table(&entries)?;
        for gap in gaps(&header, &entries) {
            let mut pad = vec![0u8; (gap.end - gap.start) as usize];
            read_at(file, gap.start, &mut pad)?;
            check_padding(gap.start, &pad)?;
        }
        let mut order: Vec<&SectionInfo> = entries
            .iter()
            .filter(|e| !lazy.contains(&e.name.as_str()))
            .collect();
        order.sort_by_key(|e| (e.name.starts_with("memory"), e.offset));
        let mut sections = Vec::with_capacity(entries.len());
        for e in order {
            let mut data = vec![0u8; e.length as usize];
            read_at(file, e.offset, &mut data)?;
            sections.push((e.offset, section(e, data)?));
        }
        sections.sort_by_key(|(off, _)| *off);
        Ok((
            entries,
            Self {
                sections: sections.into_iter().map(|(_, s)| s).collect(),
                version: header.version,
            },
        ))
    }
}

/// A file shorter than its header says: when the header and the table are
/// intact, name the sections that end past the file's end (a cut-off
/// `memory.pages` is what a restore would otherwise map past the end of
/// the file); otherwise the header's own words.
fn name_truncated(file: &mut InputFile, head: &[u8], got: u64, need: String) -> FormatError {
    let truncated = FormatError::Truncated { got, need };
    if head.len() < HEADER_SIZE {
        return truncated;
    }
    let Ok(header) = parse_header(head, le_u64(head, 32)) else {
        return truncated;
    };
    if header.table_offset + header.table_len() as u64 > got {
        return truncated;
    }
    let mut table = vec![0u8; header.table_len()];
    if read_at(file, header.table_offset, &mut table).is_err() {
        return truncated;
    }
    let Ok(entries) = parse_table(&header, &table) else {
        return truncated;
    };
    let cut: Vec<String> = entries
        .iter()
        .filter(|e| e.offset + e.length > got)
        .map(|e| {
            format!(
                "section \"{}\" ends at byte {}",
                e.name,
                e.offset + e.length
            )
        })
        .collect();
    if cut.is_empty() {
        return truncated;
    }
    FormatError::Truncated {
        got,
        need: cut.join(", "),
    }
}

/// Why a snapshot could not be read from its file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file system failed (or the file shrank while being read).
    #[error(transparent)]
    Input(#[from] InputError),
    /// The bytes are not a valid snapshot container.
    #[error(transparent)]
    Format(#[from] FormatError),
}

fn read_at(file: &mut InputFile, at: u64, buf: &mut [u8]) -> Result<(), InputError> {
    use std::io::{Read, Seek, SeekFrom};
    let r = file
        .file()
        .seek(SeekFrom::Start(at))
        .and_then(|_| file.file().read_exact(buf));
    r.map_err(|source| file.read_err(source))
}
