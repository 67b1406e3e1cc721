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
//! Sections start on 64-byte boundaries; `memory.pages` (the guest's stored
//! pages) starts on a page boundary so a restore maps it instead of copying
//! it. The version is checked before anything else: a future format may lay
//! its header out differently.
//!
//! Versions: 1 stored the page index and the pages in one `memory`
//! section, so a restore had to read and checksum every stored page before
//! the guest ran. 2 splits them (`memory`, `memory.pages`): the index is
//! read and checked eagerly, the pages are mapped. 3 adds `memory.regions`
//! (where guest RAM lies: a guest of more than 3 GiB has RAM above 4 GiB);
//! a version-2 file is read as one region from address 0, as it was
//! written. This vmm refuses a version-1 file by its version (take the
//! snapshot again with this vmm), and an older vmm refuses a version-3
//! file by its version. `memory.crc32` (each stored page's CRC32, so a
//! restore verifies every page before the guest reads it) came without a
//! version of its own: files without it restore, their pages read up
//! front and checked as one section.
//!
//! The `memory` section's own encoding is [`super::sparse`].

mod encode;
mod parse;
mod read;

pub use encode::{reseal, External};
pub use parse::{parse_header, parse_table, read_table, Header};
pub use read::{ReadError, Table};

/// First bytes of every snapshot.
const MAGIC: [u8; 8] = *b"VMMSNAP\0";
/// The format this VMM writes.
pub const FORMAT_VERSION: u32 = 3;
/// The oldest format this VMM reads (up to [`FORMAT_VERSION`]).
pub const OLDEST_FORMAT_VERSION: u32 = 2;
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
/// Alignment of the `memory.pages` section: a host page, so a restore can
/// map it instead of copying.
const MEMORY_SECTION_ALIGN: usize = 4096;
/// The section whose bytes are guest pages, placed page-aligned and, on
/// restore, mapped rather than read.
pub const PAGES_SECTION: &str = "memory.pages";
/// The section holding the CRC32 of each stored page (format 2 files
/// written before it lack it: their pages are checked as one section).
pub const PAGE_CRCS_SECTION: &str = "memory.crc32";

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
    #[error(
        "format version {found}; this vmm reads versions {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}"
    )]
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Container {
    /// The sections, in file order.
    pub sections: Vec<Section>,
    /// The format version of the file it was read from, and the one its
    /// bytes are written with ([`FORMAT_VERSION`] for a new container).
    pub version: u32,
}

impl Default for Container {
    fn default() -> Self {
        Self {
            sections: Vec::new(),
            version: FORMAT_VERSION,
        }
    }
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
}

#[cfg(test)]
mod tests;
