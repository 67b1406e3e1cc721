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
//! Sparse memory (section `memory`): all-zero pages are not stored.
//!
//! ```text
//!      0     8  guest memory size in bytes
//!      8     4  page size (4096)
//!     12     4  number of runs
//!     16  16*n  runs: first page (u64), page count (u64), ascending, disjoint
//!          ...  the pages of every run, in run order
//! ```

use std::fmt;

/// First bytes of every snapshot.
pub const MAGIC: [u8; 8] = *b"VMMSNAP\0";
/// The format this VMM writes and reads.
pub const FORMAT_VERSION: u32 = 1;
pub const HEADER_SIZE: usize = 64;
pub const ENTRY_SIZE: usize = 64;
pub const NAME_LEN: usize = 40;
/// Guest page size of the sparse memory encoding.
pub const PAGE_SIZE: usize = 4096;
const SECTION_ALIGN: usize = 64;

/// Why a snapshot file was refused. Messages name the fault; the caller adds
/// the file name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("truncated: {got} bytes, {need}")]
    Truncated { got: u64, need: String },
    #[error("not a vmm snapshot (magic {found:02x?}, expected \"VMMSNAP\\0\")")]
    BadMagic { found: Vec<u8> },
    #[error("format version {found}; this vmm reads version {FORMAT_VERSION} only")]
    Version { found: u32 },
    #[error("corrupted: {what} checksum mismatch (stored CRC32 {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        what: String,
        stored: u32,
        computed: u32,
    },
    #[error("malformed: {0}")]
    Malformed(String),
}

/// One named section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub data: Vec<u8>,
}

/// Where a section sits in a file, as the section table says.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SectionInfo {
    pub name: String,
    pub offset: u64,
    pub length: u64,
    pub crc32: u32,
}

/// A parsed, checksum-verified container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Container {
    pub sections: Vec<Section>,
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn align_up(v: usize, a: usize) -> usize {
    v.div_ceil(a) * a
}

impl Container {
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

    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.sections
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.data.as_slice())
    }

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
                PAGE_SIZE
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

/// Guest memory with the all-zero pages left out.
#[derive(Clone, PartialEq, Eq)]
pub struct SparseMemory {
    /// Size of the guest's RAM in bytes.
    pub size: u64,
    /// (first page, pages) runs, ascending and disjoint.
    pub runs: Vec<(u64, u64)>,
    /// The stored pages, in run order.
    pub data: Vec<u8>,
}

impl fmt::Debug for SparseMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SparseMemory {{ size: {}, runs: {}, stored pages: {} }}",
            self.size,
            self.runs.len(),
            self.data.len() / PAGE_SIZE
        )
    }
}

impl SparseMemory {
    /// Pages stored (the non-zero ones).
    pub fn stored_pages(&self) -> u64 {
        (self.data.len() / PAGE_SIZE) as u64
    }

    /// Encode RAM given as consecutive blocks (e.g. guest memory regions
    /// from address 0). The length must be a multiple of the page size.
    pub fn encode(ram: &[u8]) -> Self {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut data = Vec::new();
        for (i, page) in ram.chunks(PAGE_SIZE).enumerate() {
            if is_zero(page) {
                continue;
            }
            let i = i as u64;
            match runs.last_mut() {
                Some((first, n)) if *first + *n == i => *n += 1,
                _ => runs.push((i, 1)),
            }
            data.extend_from_slice(page);
            data.resize(data.len().next_multiple_of(PAGE_SIZE), 0);
        }
        Self {
            size: ram.len() as u64,
            runs,
            data,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + 16 * self.runs.len() + self.data.len());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
        out.extend_from_slice(&(self.runs.len() as u32).to_le_bytes());
        for (first, n) in &self.runs {
            out.extend_from_slice(&first.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&self.data);
        out
    }

    /// Decode and check: page size, runs inside the memory size, ascending
    /// and disjoint, data length matching the runs.
    pub fn from_bytes(b: &[u8]) -> Result<Self, FormatError> {
        let bad = |m: String| FormatError::Malformed(format!("section \"memory\": {m}"));
        if b.len() < 16 {
            return Err(bad(format!(
                "{} bytes, shorter than its 16-byte header",
                b.len()
            )));
        }
        let size = le_u64(b, 0);
        let page = le_u32(b, 8) as usize;
        let nruns = le_u32(b, 12) as usize;
        if page != PAGE_SIZE {
            return Err(bad(format!("page size {page}, this vmm uses {PAGE_SIZE}")));
        }
        if !size.is_multiple_of(PAGE_SIZE as u64) {
            return Err(bad(format!(
                "memory size {size} is not a whole number of pages"
            )));
        }
        let data_off = nruns
            .checked_mul(16)
            .and_then(|n| n.checked_add(16))
            .filter(|&o| o <= b.len())
            .ok_or_else(|| bad(format!("{nruns} runs do not fit in {} bytes", b.len())))?;
        let pages = size / PAGE_SIZE as u64;
        let mut runs = Vec::with_capacity(nruns);
        let mut next_free = 0u64;
        let mut stored = 0u64;
        for k in 0..nruns {
            let first = le_u64(b, 16 + 16 * k);
            let n = le_u64(b, 24 + 16 * k);
            if n == 0 || first < next_free || first.checked_add(n).is_none_or(|e| e > pages) {
                return Err(bad(format!(
                    "run {k} (pages {first}+{n}) is empty, overlaps or lies outside the {pages} pages"
                )));
            }
            next_free = first + n;
            stored += n;
            runs.push((first, n));
        }
        let data = &b[data_off..];
        if data.len() as u64 != stored * PAGE_SIZE as u64 {
            return Err(bad(format!(
                "{} bytes of page data for {stored} stored pages",
                data.len()
            )));
        }
        Ok(Self {
            size,
            runs,
            data: data.to_vec(),
        })
    }

    /// Write the stored pages into `ram` (which must be `size` bytes and
    /// zero elsewhere, e.g. fresh anonymous memory).
    pub fn apply(
        &self,
        mut write: impl FnMut(u64, &[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut at = 0usize;
        for &(first, n) in &self.runs {
            let len = n as usize * PAGE_SIZE;
            write(first * PAGE_SIZE as u64, &self.data[at..at + len])?;
            at += len;
        }
        Ok(())
    }
}

/// Word-at-a-time zero test: the hot loop of a memory snapshot.
fn is_zero(page: &[u8]) -> bool {
    let (head, words, tail) = {
        // SAFETY: any bit pattern is a valid u64; align_to only splits the
        // slice at alignment boundaries.
        unsafe { page.align_to::<u64>() }
    };
    head.iter().all(|&b| b == 0) && words.iter().all(|&w| w == 0) && tail.iter().all(|&b| b == 0)
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

    #[test]
    fn sparse_memory_skips_zero_pages() {
        let mut ram = vec![0u8; 64 * PAGE_SIZE];
        ram[0] = 1; // page 0
        ram[5 * PAGE_SIZE + 100] = 2; // pages 5..=6
        ram[6 * PAGE_SIZE + 4095] = 3;
        ram[63 * PAGE_SIZE] = 4; // last page
        let s = SparseMemory::encode(&ram);
        assert_eq!(s.runs, vec![(0, 1), (5, 2), (63, 1)]);
        assert_eq!(s.stored_pages(), 4);
        let bytes = s.to_bytes();
        assert_eq!(bytes.len(), 16 + 3 * 16 + 4 * PAGE_SIZE);
        let back = SparseMemory::from_bytes(&bytes).unwrap();
        assert_eq!(back, s);
        let mut out = vec![0u8; ram.len()];
        back.apply(|addr, data| {
            out[addr as usize..addr as usize + data.len()].copy_from_slice(data);
            Ok(())
        })
        .unwrap();
        assert_eq!(out, ram);
    }

    #[test]
    fn sparse_memory_rejects_bad_runs() {
        let mut ram = vec![0u8; 8 * PAGE_SIZE];
        ram[PAGE_SIZE] = 1;
        ram[3 * PAGE_SIZE] = 1;
        let good = SparseMemory::encode(&ram).to_bytes();
        // Run 1 starting inside run 0 (overlap).
        let mut b = good.clone();
        b[32..40].copy_from_slice(&1u64.to_le_bytes());
        assert!(SparseMemory::from_bytes(&b).is_err());
        // A run past the end of memory.
        let mut b = good.clone();
        b[32..40].copy_from_slice(&8u64.to_le_bytes());
        assert!(SparseMemory::from_bytes(&b).is_err());
        // Missing page data.
        assert!(SparseMemory::from_bytes(&good[..good.len() - 1]).is_err());
        // Wrong page size.
        let mut b = good;
        b[8..12].copy_from_slice(&8192u32.to_le_bytes());
        assert!(SparseMemory::from_bytes(&b).is_err());
    }
}
