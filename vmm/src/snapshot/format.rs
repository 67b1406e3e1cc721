//! The snapshot container: a versioned, self-describing file of named
//! sections, each covered by a CRC32, plus the sparse encoding of guest
//! memory. What goes *into* the sections is [`super::state`]'s business.
//!
//! ```text
//! offset  size  file header (64 bytes, little-endian)
//!      0     8  magic "VMMSNAP\0"
//!      8     4  format version (FORMAT_VERSION)
//!     12     4  header size (64)
//!     16     4  section count
//!     20     4  section table entry size (64)
//!     24     8  section table offset
//!     32     8  total file length (a shorter file was truncated)
//!     40     4  CRC32 of the section table
//!     44     4  CRC32 of header bytes 0..44
//!     48    16  reserved, must be zero
//!
//! The table follows the header; sections follow the table, in any order,
//! never overlapping; the bytes between them (alignment padding, fewer than
//! 4096) must be zero.
//!
//!         section table entry (64 bytes)
//!      0    40  name, NUL-padded ASCII ("meta", "memory", "vcpu0.regs", ...)
//!     40     8  offset of the section's bytes in the file
//!     48     8  length in bytes
//!     56     4  CRC32 of the section's bytes
//!     60     4  flags (reserved, must be zero)
//! ```
//!
//! Sections start on 64-byte boundaries; `memory` starts on a page boundary
//! so a later version can map it instead of copying. The version is checked
//! before anything else: a future format may lay its header out differently.
//!
//!
//! The `memory` section's own encoding is [`super::sparse`].

pub use super::sparse::{SparseMemory, PAGE_SIZE};
use crate::input::{InputError, InputFile};

/// First bytes of every snapshot.
const MAGIC: [u8; 8] = *b"VMMSNAP\0";
/// The format this VMM writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the file header.
const HEADER_SIZE: usize = 64;
/// Size of one section table entry.
const ENTRY_SIZE: usize = 64;
/// Longest section name (NUL-padded in its entry).
const NAME_LEN: usize = 40;
/// Most sections a file may list (a one-vCPU snapshot has about a dozen):
/// bounds the table read before anything is checked.
pub const MAX_SECTIONS: u32 = 1024;
/// Alignment of every section but `memory`.
const SECTION_ALIGN: usize = 64;
/// Alignment of the `memory` section: a host page, so a later version can
/// map it instead of copying.
const MEMORY_SECTION_ALIGN: usize = 4096;

/// Why a snapshot file was refused. Messages name the fault; the caller adds
/// the file name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The file ends before what its header (or the header itself) needs.
    #[error("truncated: {got} bytes, {need}")]
    Truncated {
        /// The file's length.
        got: u64,
        /// What it should hold, in words.
        need: String,
    },
    /// Not a snapshot at all.
    #[error("not a vmm snapshot (magic {found:02x?}, expected \"VMMSNAP\\0\")")]
    BadMagic {
        /// The first bytes found.
        found: Vec<u8>,
    },
    /// A snapshot of another format version.
    #[error("format version {found}; this vmm reads version {FORMAT_VERSION} only")]
    Version {
        /// The version in the header.
        found: u32,
    },
    /// A CRC32 does not match: the file was corrupted.
    #[error("corrupted: {what} checksum mismatch (stored CRC32 {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// The part covered: "file header", "section table", a section.
        what: String,
        /// The CRC32 the file holds.
        stored: u32,
        /// The CRC32 of the bytes.
        computed: u32,
    },
    /// The file is structurally wrong (bounds, names, section contents).
    #[error("malformed: {0}")]
    Malformed(String),
}

/// One named section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// ASCII, 1..=40 bytes, unique in a file.
    pub name: String,
    /// The section's bytes.
    pub data: Vec<u8>,
}

/// Where a section sits in a file, as the section table says.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct SectionInfo {
    /// The section's name.
    pub name: String,
    /// Where its bytes start in the file.
    pub offset: u64,
    /// How many bytes it has.
    pub length: u64,
    /// CRC32 of its bytes, as stored.
    pub crc32: u32,
}

/// A parsed, checksum-verified container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Container {
    /// The sections, in file order.
    pub sections: Vec<Section>,
}

/// The little-endian u32 at `at` (in bounds: callers check lengths first).
pub(crate) fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The little-endian u64 at `at` (in bounds: callers check lengths first).
pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn align_up(v: usize, a: usize) -> usize {
    v.div_ceil(a) * a
}

impl Container {
    /// An empty container.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a section. Names are ASCII, 1..=40 bytes, unique.
    pub fn push(&mut self, name: &str, data: Vec<u8>) {
        debug_assert!(!name.is_empty() && name.len() <= NAME_LEN && name.is_ascii());
        debug_assert!(self.get(name).is_none(), "duplicate section {name}");
        self.sections.push(Section {
            name: name.to_string(),
            data,
        });
    }

    /// The bytes of section `name`.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.sections
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.data.as_slice())
    }

    /// The bytes of section `name`, for editing (tests corrupt files so).
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Vec<u8>> {
        self.sections
            .iter_mut()
            .find(|s| s.name == name)
            .map(|s| &mut s.data)
    }

    /// The file bytes: header, section table, sections, checksums filled in.
    pub fn to_bytes(&self) -> Vec<u8> {
        let table_off = HEADER_SIZE;
        let mut pos = table_off + ENTRY_SIZE * self.sections.len();
        let mut placed = Vec::with_capacity(self.sections.len());
        for s in &self.sections {
            let align = if s.name == "memory" {
                MEMORY_SECTION_ALIGN
            } else {
                SECTION_ALIGN
            };
            pos = align_up(pos, align);
            placed.push(pos);
            pos += s.data.len();
        }
        let total = pos;
        let mut out = vec![0u8; total];
        for (s, &off) in self.sections.iter().zip(&placed) {
            out[off..off + s.data.len()].copy_from_slice(&s.data);
        }
        for (i, (s, &off)) in self.sections.iter().zip(&placed).enumerate() {
            let e = &mut out[table_off + i * ENTRY_SIZE..table_off + (i + 1) * ENTRY_SIZE];
            e[..s.name.len()].copy_from_slice(s.name.as_bytes());
            e[40..48].copy_from_slice(&(off as u64).to_le_bytes());
            e[48..56].copy_from_slice(&(s.data.len() as u64).to_le_bytes());
            e[56..60].copy_from_slice(&crc32fast::hash(&s.data).to_le_bytes());
        }
        let table_crc =
            crc32fast::hash(&out[table_off..table_off + ENTRY_SIZE * self.sections.len()]);
        let h = &mut out[..HEADER_SIZE];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        h[16..20].copy_from_slice(&(self.sections.len() as u32).to_le_bytes());
        h[20..24].copy_from_slice(&(ENTRY_SIZE as u32).to_le_bytes());
        h[24..32].copy_from_slice(&(table_off as u64).to_le_bytes());
        h[32..40].copy_from_slice(&(total as u64).to_le_bytes());
        h[40..44].copy_from_slice(&table_crc.to_le_bytes());
        let header_crc = crc32fast::hash(&h[..44]);
        h[44..48].copy_from_slice(&header_crc.to_le_bytes());
        out
    }

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
        Ok(Self { sections })
    }

    /// Read and verify a snapshot from an open file without reading more
    /// than its header promises: the header and the section table first
    /// (bounded by the header's own section count), then every section's
    /// bytes, seeking to each, `memory` last. `check_table` sees the
    /// verified table before any section body is read, so a file with
    /// unknown sections is refused before its memory is read.
    pub fn read_from(
        file: &mut InputFile,
        check_table: impl FnOnce(&[SectionInfo]) -> Result<(), FormatError>,
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
        let mut order: Vec<&SectionInfo> = entries.iter().collect();
        order.sort_by_key(|e| (e.name == "memory", e.offset));
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

/// A section's bytes, checked against the CRC32 its entry holds.
fn section(e: &SectionInfo, data: Vec<u8>) -> Result<Section, FormatError> {
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
fn check_padding(at: u64, pad: &[u8]) -> Result<(), FormatError> {
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
    if version != FORMAT_VERSION {
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
fn gaps(header: &Header, entries: &[SectionInfo]) -> Vec<std::ops::Range<u64>> {
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

/// Recompute the section table's and the header's CRC32 of a file in
/// memory after its header or table was edited (tests and fuzzers craft
/// files so; sections' own CRCs are left as they are). Does nothing to a
/// buffer shorter than its header and table.
pub fn reseal(bytes: &mut [u8]) {
    if bytes.len() < HEADER_SIZE {
        return;
    }
    let count = le_u32(bytes, 16) as usize;
    let end = HEADER_SIZE.saturating_add(count.saturating_mul(ENTRY_SIZE));
    if let Some(table) = bytes.get(HEADER_SIZE..end) {
        let crc = crc32fast::hash(table);
        bytes[40..44].copy_from_slice(&crc.to_le_bytes());
    }
    let crc = crc32fast::hash(&bytes[..44]);
    bytes[44..48].copy_from_slice(&crc.to_le_bytes());
}

/// Read and verify the header and section table of a file in memory (not
/// the sections' checksums). A pure function over bytes.
pub fn read_table(bytes: &[u8]) -> Result<Vec<SectionInfo>, FormatError> {
    let header = parse_header(bytes, bytes.len() as u64)?;
    parse_table(&header, table_bytes(&header, bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Container {
        let mut c = Container::new();
        c.push("meta", b"{\"a\":1}".to_vec());
        c.push("memory", vec![7u8; 5000]);
        c.push("vcpu0.regs", (0..144u8).collect());
        c
    }

    #[test]
    fn round_trip() {
        let c = sample();
        let bytes = c.to_bytes();
        assert_eq!(&bytes[..8], b"VMMSNAP\0");
        let table = read_table(&bytes).unwrap();
        assert_eq!(table.len(), 3);
        assert_eq!(
            table[1].offset % PAGE_SIZE as u64,
            0,
            "memory is page-aligned"
        );
        assert!(table.iter().all(|e| e.offset % 64 == 0));
        assert_eq!(Container::parse(&bytes).unwrap(), c);
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let bytes = sample().to_bytes();
        // Every byte is checked: header, table and sections by a checksum,
        // the alignment padding between sections by the zero rule.
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(
                Container::parse(&b).is_err(),
                "flip at byte {i} went unnoticed"
            );
        }
    }

    #[test]
    fn checksum_message_names_the_section() {
        let mut bytes = sample().to_bytes();
        let e = read_table(&bytes).unwrap()[2].clone();
        bytes[e.offset as usize + 3] ^= 1;
        let err = Container::parse(&bytes).unwrap_err();
        assert!(matches!(err, FormatError::Checksum { .. }));
        assert!(err.to_string().contains("section \"vcpu0.regs\""), "{err}");
    }

    #[test]
    fn truncation_and_version() {
        let bytes = sample().to_bytes();
        for n in [0, 5, 40, 100, bytes.len() - 1] {
            let err = Container::parse(&bytes[..n]).unwrap_err();
            assert!(matches!(err, FormatError::Truncated { .. }), "{n}: {err}");
        }
        let mut b = bytes.clone();
        b[8] = 2;
        assert_eq!(
            Container::parse(&b).unwrap_err(),
            FormatError::Version { found: 2 }
        );
        let mut b = bytes;
        b[0] = b'X';
        assert!(matches!(
            Container::parse(&b).unwrap_err(),
            FormatError::BadMagic { .. }
        ));
    }
}
