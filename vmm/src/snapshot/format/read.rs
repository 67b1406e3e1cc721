//! Reading a container from an open file, section by section, never more
//! than its verified header promises and never a section before the
//! caller has checked the table it comes from.

use super::parse::{check_padding, gaps, parse_header, parse_table, section};
use super::{le_u64, Container, FormatError, Header, SectionInfo, HEADER_SIZE};
use crate::input::{InputError, InputFile};

/// A file's verified header and section table: what [`Container::read_table`]
/// read before any section body.
#[derive(Clone, Debug)]
pub struct Table {
    /// The file header.
    pub header: Header,
    /// The section table, in table order.
    pub entries: Vec<SectionInfo>,
}

impl Container {
    /// Read and verify the header and the section table of an open file
    /// (bounded by the header's own section count), and the zero padding
    /// between sections (each gap is under a page). No section body is
    /// read: the caller checks the table first ([`Container::read_sections`]
    /// reads the bodies it then asks for).
    ///
    /// # Errors
    ///
    /// [`ReadError::Format`] naming the broken rule (a file cut inside a
    /// section names it), [`ReadError::Input`] when the file cannot be
    /// read.
    pub fn read_table(file: &mut InputFile) -> Result<Table, ReadError> {
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
        for gap in gaps(&header, &entries) {
            let mut pad = vec![0u8; (gap.end - gap.start) as usize];
            read_at(file, gap.start, &mut pad)?;
            check_padding(gap.start, &pad)?;
        }
        Ok(Table { header, entries })
    }

    /// Read the sections of `table` that `wanted` selects, each checked
    /// against the CRC32 its entry holds, in file order. Their lengths are
    /// the table's: callers bound them first (see
    /// `crate::snapshot::state::bounds`).
    ///
    /// # Errors
    ///
    /// [`ReadError::Format`] for a checksum mismatch,
    /// [`ReadError::Input`] when the file cannot be read.
    pub fn read_sections(
        file: &mut InputFile,
        table: &Table,
        wanted: impl Fn(&SectionInfo) -> bool,
    ) -> Result<Self, ReadError> {
        let mut order: Vec<&SectionInfo> = table.entries.iter().filter(|e| wanted(e)).collect();
        order.sort_by_key(|e| e.offset);
        let mut sections = Vec::with_capacity(order.len());
        for e in order {
            let mut data = vec![0u8; e.length as usize];
            read_at(file, e.offset, &mut data)?;
            sections.push(section(e, data)?);
        }
        Ok(Self {
            sections,
            version: table.header.version,
        })
    }

    /// Move the sections of `other` into this container, keeping file
    /// order by the offsets of `table`.
    pub fn merge(&mut self, other: Container, table: &Table) {
        self.sections.extend(other.sections);
        let at = |name: &str| {
            table
                .entries
                .iter()
                .find(|e| e.name == name)
                .map_or(u64::MAX, |e| e.offset)
        };
        self.sections.sort_by_key(|s| at(&s.name));
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
