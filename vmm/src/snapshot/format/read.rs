//! Reading a container from an open file, section by section, never more
//! than its verified header promises.

use super::parse::{check_padding, gaps, parse_header, parse_table, section};
use super::{Container, FormatError, SectionInfo, HEADER_SIZE};
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
        let header = parse_header(&head, len)?;
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
            },
        ))
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
