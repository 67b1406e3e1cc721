//! Reading a container held in memory: the header, the section table, the
//! padding between sections and every section's checksum, verified.

use super::{
    le_u32, le_u64, Container, FormatError, Section, SectionInfo, ENTRY_SIZE, FORMAT_VERSION,
    HEADER_SIZE, MAGIC, MAX_SECTIONS, MEMORY_SECTION_ALIGN, NAME_LEN, OLDEST_FORMAT_VERSION,
};

impl Container {
    /// Parse and verify a file held in memory: magic, version, header and
    /// table checksums, bounds, the zero padding between sections and the
    /// checksum of every section. A pure function over bytes (fuzzed).
    pub fn parse(bytes: &[u8]) -> Result<Self, FormatError> {
        let header = parse_header(bytes, bytes.len() as u64)?;
        let table = table_bytes(&header, bytes)?;
        let entries = parse_table(&header, table)?;
        let mut sections = Vec::with_capacity(entries.len());
        for e in &entries {
            let data = &bytes[e.offset as usize..(e.offset + e.length) as usize];
            sections.push(section(e, data.to_vec())?);
        }
        for gap in gaps(&header, &entries) {
            check_padding(gap.start, &bytes[gap.start as usize..gap.end as usize])?;
        }
        Ok(Self {
            sections,
            version: header.version,
        })
    }
}

/// A section's bytes, checked against the CRC32 its entry holds.
pub(super) fn section(e: &SectionInfo, data: Vec<u8>) -> Result<Section, FormatError> {
    let computed = crc32fast::hash(&data);
    if computed != e.crc32 {
        return Err(FormatError::Checksum {
            what: format!("section \"{}\"", e.name),
            stored: e.crc32,
            computed,
        });
    }
    Ok(Section {
        name: e.name.clone(),
        data,
    })
}

/// Padding between sections must be zero: no checksum covers it, so a
/// non-zero byte there is either corruption or data smuggled past the CRCs.
pub(super) fn check_padding(at: u64, pad: &[u8]) -> Result<(), FormatError> {
    match pad.iter().position(|&b| b != 0) {
        None => Ok(()),
        Some(p) => Err(FormatError::Malformed(format!(
            "padding byte at offset {} is not zero",
            at + p as u64
        ))),
    }
}

/// The file header's fields, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The format version (checked: one this vmm reads).
    pub version: u32,
    /// Entries in the section table.
    pub count: u32,
    /// Where the table starts.
    pub table_offset: u64,
    /// The file's length as written.
    pub total: u64,
    /// CRC32 of the table.
    pub table_crc: u32,
}

impl Header {
    /// Bytes of the section table.
    pub fn table_len(&self) -> usize {
        self.count as usize * ENTRY_SIZE
    }

    fn table_end(&self) -> u64 {
        self.table_offset + self.table_len() as u64
    }
}

/// Check the file header: `head` is the file's first bytes (up to 64),
/// `file_len` the file's size. The magic is checked first, then the
/// version (a future format may lay the rest out differently), the
/// header's CRC, its reserved bytes, sizes, the section count bound and
/// the file length. A pure function over bytes.
pub fn parse_header(head: &[u8], file_len: u64) -> Result<Header, FormatError> {
    if head.len() < 12 {
        if head.len() >= 8 && head[..8] != MAGIC {
            return Err(FormatError::BadMagic {
                found: head[..8].to_vec(),
            });
        }
        return Err(FormatError::Truncated {
            got: file_len,
            need: format!("shorter than the {HEADER_SIZE}-byte header"),
        });
    }
    if head[..8] != MAGIC {
        return Err(FormatError::BadMagic {
            found: head[..8].to_vec(),
        });
    }
    let version = le_u32(head, 8);
    if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(FormatError::Version { found: version });
    }
    if head.len() < HEADER_SIZE || file_len < HEADER_SIZE as u64 {
        return Err(FormatError::Truncated {
            got: file_len,
            need: format!("shorter than the {HEADER_SIZE}-byte header"),
        });
    }
    let stored = le_u32(head, 44);
    let computed = crc32fast::hash(&head[..44]);
    if stored != computed {
        return Err(FormatError::Checksum {
            what: "file header".into(),
            stored,
            computed,
        });
    }
    if let Some(p) = head[48..HEADER_SIZE].iter().position(|&b| b != 0) {
        return Err(FormatError::Malformed(format!(
            "reserved header byte {} is not zero",
            48 + p
        )));
    }
    let header_size = le_u32(head, 12) as usize;
    let count = le_u32(head, 16);
    let entry_size = le_u32(head, 20) as usize;
    let table_offset = le_u64(head, 24);
    let total = le_u64(head, 32);
    if header_size != HEADER_SIZE || entry_size != ENTRY_SIZE {
        return Err(FormatError::Malformed(format!(
            "header size {header_size} / table entry size {entry_size}, expected {HEADER_SIZE} / {ENTRY_SIZE}"
        )));
    }
    if count > MAX_SECTIONS {
        return Err(FormatError::Malformed(format!(
            "section count {count} exceeds the limit of {MAX_SECTIONS}"
        )));
    }
    if file_len < total {
        return Err(FormatError::Truncated {
            got: file_len,
            need: format!("the header says the file is {total} bytes"),
        });
    }
    if file_len > total {
        return Err(FormatError::Malformed(format!(
            "{} bytes of trailing data after the {total} bytes the header describes",
            file_len - total
        )));
    }
    let header = Header {
        version,
        count,
        table_offset,
        total,
        table_crc: le_u32(head, 40),
    };
    if table_offset != HEADER_SIZE as u64 || header.table_end() > total {
        return Err(FormatError::Malformed(format!(
            "section table of {count} entries at offset {table_offset} does not follow the header inside the file's {total} bytes"
        )));
    }
    Ok(header)
}

/// The table's bytes out of a whole file.
fn table_bytes<'a>(header: &Header, bytes: &'a [u8]) -> Result<&'a [u8], FormatError> {
    let (start, end) = (header.table_offset as usize, header.table_end() as usize);
    bytes.get(start..end).ok_or_else(|| FormatError::Truncated {
        got: bytes.len() as u64,
        need: format!("the section table ends at {end}"),
    })
}

/// Check the section table against its header: CRC, names (NUL-padded
/// ASCII, unique), reserved flags zero, every section inside the file after
/// the table, no two overlapping. A pure function over bytes.
pub fn parse_table(header: &Header, table: &[u8]) -> Result<Vec<SectionInfo>, FormatError> {
    if table.len() != header.table_len() {
        return Err(FormatError::Truncated {
            got: table.len() as u64,
            need: format!("a {}-byte section table", header.table_len()),
        });
    }
    let computed = crc32fast::hash(table);
    if header.table_crc != computed {
        return Err(FormatError::Checksum {
            what: "section table".into(),
            stored: header.table_crc,
            computed,
        });
    }
    let total = header.total;
    let table_end = header.table_end();
    let mut out: Vec<SectionInfo> = Vec::with_capacity(header.count as usize);
    for (i, e) in table.chunks_exact(ENTRY_SIZE).enumerate() {
        let raw = &e[..NAME_LEN];
        let len = raw.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        let name = std::str::from_utf8(&raw[..len])
            .ok()
            .filter(|n| {
                !n.is_empty()
                    && n.bytes().all(|b| b.is_ascii_graphic())
                    && raw[len..].iter().all(|&b| b == 0)
            })
            .ok_or_else(|| {
                FormatError::Malformed(format!(
                    "section table entry {i}: name {raw:02x?} is not NUL-padded printable ASCII"
                ))
            })?
            .to_string();
        let offset = le_u64(e, 40);
        let length = le_u64(e, 48);
        let flags = le_u32(e, 60);
        if flags != 0 {
            return Err(FormatError::Malformed(format!(
                "section \"{name}\": reserved flags {flags:#x} are not zero"
            )));
        }
        if offset.checked_add(length).is_none_or(|end| end > total) || offset < table_end {
            return Err(FormatError::Malformed(format!(
                "section \"{name}\" ({length} bytes at {offset}) lies outside the file's {total} bytes after the section table"
            )));
        }
        if out.iter().any(|s| s.name == name) {
            return Err(FormatError::Malformed(format!(
                "section \"{name}\" appears twice"
            )));
        }
        out.push(SectionInfo {
            name,
            offset,
            length,
            crc32: le_u32(e, 56),
        });
    }
    let mut by_offset: Vec<&SectionInfo> = out.iter().collect();
    by_offset.sort_by_key(|e| (e.offset, e.length));
    for w in by_offset.windows(2) {
        if w[0].offset + w[0].length > w[1].offset {
            return Err(FormatError::Malformed(format!(
                "sections \"{}\" ({} bytes at {}) and \"{}\" (at {}) overlap",
                w[0].name, w[0].length, w[0].offset, w[1].name, w[1].offset
            )));
        }
    }
    let mut pos = table_end;
    for e in &by_offset {
        if e.offset - pos >= MEMORY_SECTION_ALIGN as u64 {
            return Err(FormatError::Malformed(format!(
                "{} unused bytes before section \"{}\" (at most {} bytes of alignment padding are written)",
                e.offset - pos,
                e.name,
                MEMORY_SECTION_ALIGN - 1
            )));
        }
        pos = e.offset + e.length;
    }
    if total - pos >= MEMORY_SECTION_ALIGN as u64 {
        return Err(FormatError::Malformed(format!(
            "{} unused bytes after the last section",
            total - pos
        )));
    }
    Ok(out)
}

/// The byte ranges no section covers (alignment padding), in file order.
pub(super) fn gaps(header: &Header, entries: &[SectionInfo]) -> Vec<std::ops::Range<u64>> {
    let mut by_offset: Vec<&SectionInfo> = entries.iter().collect();
    by_offset.sort_by_key(|e| e.offset);
    let mut pos = header.table_end();
    let mut out = Vec::new();
    for e in by_offset {
        if e.offset > pos {
            out.push(pos..e.offset);
        }
        pos = pos.max(e.offset + e.length);
    }
    if header.total > pos {
        out.push(pos..header.total);
    }
    out
}

/// Read and verify the header and section table of a file in memory (not
/// the sections' checksums). A pure function over bytes.
pub fn read_table(bytes: &[u8]) -> Result<Vec<SectionInfo>, FormatError> {
    let header = parse_header(bytes, bytes.len() as u64)?;
    parse_table(&header, table_bytes(&header, bytes)?)
}
