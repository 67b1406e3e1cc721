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
//!         section table entry (64 bytes)
//!      0    40  name, NUL-padded ASCII ("meta", "memory", "vcpu0.regs", ...)
//!     40     8  offset of the section's bytes in the file
//!     48     8  length in bytes
//!     56     4  CRC32 of the section's bytes
//!     60     4  flags (0)
//! ```
//!
//! Sections start on 64-byte boundaries; `memory` starts on a page boundary
//! so a later version can map it instead of copying. The version is checked
//! before anything else: a future format may lay its header out differently.
//!
//!
//! The `memory` section's own encoding is [`super::sparse`].

pub use super::sparse::{SparseMemory, PAGE_SIZE};

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

    /// Parse and verify a file: magic, version, header and table checksums,
    /// bounds, and the checksum of every section.
    pub fn parse(bytes: &[u8]) -> Result<Self, FormatError> {
        let table = read_table(bytes)?;
        let mut sections = Vec::with_capacity(table.len());
        for e in table {
            let data = &bytes[e.offset as usize..(e.offset + e.length) as usize];
            let computed = crc32fast::hash(data);
            if computed != e.crc32 {
                return Err(FormatError::Checksum {
                    what: format!("section \"{}\"", e.name),
                    stored: e.crc32,
                    computed,
                });
            }
            sections.push(Section {
                name: e.name,
                data: data.to_vec(),
            });
        }
        Ok(Self { sections })
    }
}

/// Read and verify the header and section table (not the sections'
/// checksums): what `vmm snapshot info` lists.
pub fn read_table(bytes: &[u8]) -> Result<Vec<SectionInfo>, FormatError> {
    let got = bytes.len() as u64;
    if bytes.len() < 12 {
        return Err(FormatError::Truncated {
            got,
            need: format!("shorter than the {HEADER_SIZE}-byte header"),
        });
    }
    if bytes[..8] != MAGIC {
        return Err(FormatError::BadMagic {
            found: bytes[..8].to_vec(),
        });
    }
    let version = le_u32(bytes, 8);
    if version != FORMAT_VERSION {
        return Err(FormatError::Version { found: version });
    }
    if bytes.len() < HEADER_SIZE {
        return Err(FormatError::Truncated {
            got,
            need: format!("shorter than the {HEADER_SIZE}-byte header"),
        });
    }
    let stored = le_u32(bytes, 44);
    let computed = crc32fast::hash(&bytes[..44]);
    if stored != computed {
        return Err(FormatError::Checksum {
            what: "file header".into(),
            stored,
            computed,
        });
    }
    if let Some(p) = bytes[48..HEADER_SIZE].iter().position(|&b| b != 0) {
        return Err(FormatError::Malformed(format!(
            "reserved header byte {} is not zero",
            48 + p
        )));
    }
    let header_size = le_u32(bytes, 12) as usize;
    let count = le_u32(bytes, 16) as usize;
    let entry_size = le_u32(bytes, 20) as usize;
    let table_off = le_u64(bytes, 24);
    let total = le_u64(bytes, 32);
    if header_size != HEADER_SIZE || entry_size != ENTRY_SIZE {
        return Err(FormatError::Malformed(format!(
            "header size {header_size} / table entry size {entry_size}, expected {HEADER_SIZE} / {ENTRY_SIZE}"
        )));
    }
    if got < total {
        return Err(FormatError::Truncated {
            got,
            need: format!("the header says the file is {total} bytes"),
        });
    }
    if got > total {
        return Err(FormatError::Malformed(format!(
            "{} bytes of trailing data after the {total} bytes the header describes",
            got - total
        )));
    }
    let table_len = (count as u64)
        .checked_mul(ENTRY_SIZE as u64)
        .and_then(|l| l.checked_add(table_off))
        .filter(|&end| end <= total && table_off >= HEADER_SIZE as u64)
        .ok_or_else(|| {
            FormatError::Malformed(format!(
                "section table of {count} entries at {table_off} lies outside the file"
            ))
        })?;
    let table = &bytes[table_off as usize..table_len as usize];
    let stored = le_u32(bytes, 40);
    let computed = crc32fast::hash(table);
    if stored != computed {
        return Err(FormatError::Checksum {
            what: "section table".into(),
            stored,
            computed,
        });
    }
    let mut out: Vec<SectionInfo> = Vec::with_capacity(count);
    for e in table.chunks_exact(ENTRY_SIZE) {
        let raw = &e[..NAME_LEN];
        let len = raw.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        let name = std::str::from_utf8(&raw[..len])
            .ok()
            .filter(|n| !n.is_empty() && n.is_ascii() && raw[len..].iter().all(|&b| b == 0))
            .ok_or_else(|| {
                FormatError::Malformed(format!("section name {raw:02x?} is not NUL-padded ASCII"))
            })?
            .to_string();
        let offset = le_u64(e, 40);
        let length = le_u64(e, 48);
        if offset.checked_add(length).is_none_or(|end| end > total) || offset < table_len {
            return Err(FormatError::Malformed(format!(
                "section \"{name}\" ({length} bytes at {offset}) lies outside the file's {total} bytes"
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
    Ok(out)
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
        // Every byte of header, table and sections is covered by a checksum
        // (alignment padding between sections excepted).
        let table = read_table(&bytes).unwrap();
        let covered = |i: usize| {
            i < HEADER_SIZE + ENTRY_SIZE * table.len()
                || table
                    .iter()
                    .any(|e| (e.offset as usize..(e.offset + e.length) as usize).contains(&i))
        };
        for i in (0..bytes.len()).filter(|&i| covered(i)) {
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
