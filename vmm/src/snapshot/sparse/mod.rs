//! The sparse encoding of guest RAM: all-zero pages are not stored, so a
//! 2 GiB guest that touched 27 MB costs 27 MB. Two sections:
//!
//! ```text
//! section "memory" (the page index, read and checksummed eagerly)
//!      0     8  guest memory size in bytes
//!      8     4  page size (4096)
//!     12     4  number of runs
//!     16  16*n  runs: first page (u64), page count (u64), ascending, disjoint
//!
//! section "memory.pages" (page-aligned in the file)
//!          ...  the pages of every run, in run order
//! ```
//!
//! Because `memory.pages` starts on a page boundary and holds whole pages,
//! run `k` lies at a page-aligned file offset (the section's offset plus
//! the pages of the runs before it): restore maps every run into guest RAM
//! with `mmap(MAP_PRIVATE | MAP_FIXED)` instead of copying it, and the
//! gaps stay fresh anonymous (zero) memory. See [`crate::run::restore`].
//!
//! [`SparseMemory::to_bytes`] / [`SparseMemory::from_bytes`] are the two
//! sections back to back in one buffer (the index, then the pages), for
//! fuzzers and tests that handle memory without a container.

use std::fmt;

use super::format::{le_u32, le_u64, FormatError, SectionInfo};

/// Guest page size of the sparse memory encoding: the platform's.
pub use crate::arch::layout::PAGE_SIZE;

/// Guest memory with the all-zero pages left out.
#[derive(Clone, PartialEq, Eq)]
pub struct SparseMemory {
    /// Size of the guest's RAM in bytes.
    pub size: u64,
    /// (first page, pages) runs, ascending and disjoint.
    pub runs: Vec<(u64, u64)>,
    /// The stored pages, in run order; empty when they were left in the
    /// file ([`in_file`](Self::in_file)).
    pub data: Vec<u8>,
    /// Where the stored pages lie in the snapshot file when they were not
    /// read (a restore maps them): the `memory.pages` section's table entry,
    /// whose length was checked against the runs. `None` when `data` holds
    /// them.
    pub in_file: Option<SectionInfo>,
}

impl fmt::Debug for SparseMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SparseMemory {{ size: {}, runs: {}, stored pages: {} }}",
            self.size,
            self.runs.len(),
            self.stored_pages()
        )
    }
}

impl SparseMemory {
    /// Pages stored (the non-zero ones).
    pub fn stored_pages(&self) -> u64 {
        self.runs.iter().map(|&(_, n)| n).sum()
    }

    /// Encode RAM from address 0 in one piece. The length must be a
    /// multiple of the page size.
    pub fn encode(ram: &[u8]) -> Self {
        let mut s = Self::empty();
        s.append(ram);
        s
    }

    /// No memory yet: [`append`](Self::append) adds it block by block.
    pub fn empty() -> Self {
        Self {
            size: 0,
            runs: Vec::new(),
            data: Vec::new(),
            in_file: None,
        }
    }

    /// Add a block of RAM at guest address `addr`, at or after the end of
    /// what was added so far (the RAM in between is zero): how a snapshot
    /// adds only the pages that can hold data. `addr` is page-aligned.
    pub fn append_at(&mut self, addr: u64, block: &[u8]) {
        debug_assert!(addr >= self.size && addr.is_multiple_of(PAGE_SIZE as u64));
        self.size = self.size.max(addr);
        self.append(block);
    }

    /// Extend the RAM to `size` bytes with zero pages (the tail of RAM a
    /// snapshot found empty).
    pub fn pad_to(&mut self, size: u64) {
        self.size = self.size.max(size);
    }

    /// Add the next block of RAM, at address `size` (the blocks so far); a
    /// whole number of pages, except perhaps the last block.
    pub fn append(&mut self, block: &[u8]) {
        let base = self.size / PAGE_SIZE as u64;
        for (i, page) in block.chunks(PAGE_SIZE).enumerate() {
            if is_zero(page) {
                continue;
            }
            let i = base + i as u64;
            match self.runs.last_mut() {
                Some((first, n)) if *first + *n == i => *n += 1,
                _ => self.runs.push((i, 1)),
            }
            self.data.extend_from_slice(page);
            self.data
                .resize(self.data.len().next_multiple_of(PAGE_SIZE), 0);
        }
        self.size += block.len() as u64;
    }

    /// The `memory` section's bytes: the index.
    pub fn index_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + 16 * self.runs.len());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
        out.extend_from_slice(&(self.runs.len() as u32).to_le_bytes());
        for (first, n) in &self.runs {
            out.extend_from_slice(&first.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
        out
    }

    /// Both sections back to back: the index, then the pages.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.index_bytes();
        out.extend_from_slice(&self.data);
        out
    }

    /// Decode both sections held back to back in one buffer (see
    /// [`to_bytes`](Self::to_bytes)).
    pub fn from_bytes(b: &[u8]) -> Result<Self, FormatError> {
        let (mut m, data_off) = Self::index(b)?;
        m.check_pages_len(b.len() as u64 - data_off as u64)?;
        m.data = b[data_off..].to_vec();
        Ok(m)
    }

    /// Decode the `memory` section (`index`) and the `memory.pages`
    /// section's bytes (`pages`), read from the file.
    pub fn from_sections(index: &[u8], pages: &[u8]) -> Result<Self, FormatError> {
        let mut m = Self::from_index(index)?;
        m.check_pages_len(pages.len() as u64)?;
        m.data = pages.to_vec();
        Ok(m)
    }

    /// Decode the `memory` section with the pages left in the file at
    /// `pages` (the `memory.pages` table entry): its length must be exactly
    /// the stored pages', so every run a restore maps lies inside the file.
    pub fn from_index_in_file(index: &[u8], pages: &SectionInfo) -> Result<Self, FormatError> {
        let mut m = Self::from_index(index)?;
        m.check_pages_len(pages.length)?;
        if !pages.offset.is_multiple_of(PAGE_SIZE as u64) {
            return Err(FormatError::Malformed(format!(
                "section \"memory.pages\" at offset {} is not page-aligned",
                pages.offset
            )));
        }
        m.in_file = Some(pages.clone());
        Ok(m)
    }

    /// The index alone, exactly the section's bytes.
    fn from_index(index: &[u8]) -> Result<Self, FormatError> {
        let (m, end) = Self::index(index)?;
        if end != index.len() {
            return Err(FormatError::Malformed(format!(
                "section \"memory\": {} bytes after its {} runs",
                index.len() - end,
                m.runs.len()
            )));
        }
        Ok(m)
    }

    fn check_pages_len(&self, len: u64) -> Result<(), FormatError> {
        let stored = self.stored_pages();
        if len != stored * PAGE_SIZE as u64 {
            return Err(FormatError::Malformed(format!(
                "section \"memory.pages\": {len} bytes of page data for {stored} stored pages"
            )));
        }
        Ok(())
    }

    /// Decode and check the index at the start of `b`: page size, runs
    /// inside the memory size, ascending and disjoint. Returns the index
    /// (no page data) and where it ends in `b`.
    fn index(b: &[u8]) -> Result<(Self, usize), FormatError> {
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
        for k in 0..nruns {
            let first = le_u64(b, 16 + 16 * k);
            let n = le_u64(b, 24 + 16 * k);
            if n == 0 {
                return Err(bad(format!("run {k} (at page {first}) is empty")));
            }
            if first < next_free {
                return Err(bad(format!(
                    "run {k} (pages {first}+{n}) stores page {first} again or out of order (the runs so far end at page {next_free})"
                )));
            }
            if first.checked_add(n).is_none_or(|e| e > pages) {
                return Err(bad(format!(
                    "run {k} (pages {first}+{n}) lies past the end of the {pages} pages of RAM"
                )));
            }
            next_free = first + n;
            runs.push((first, n));
        }
        Ok((
            Self {
                size,
                runs,
                data: Vec::new(),
                in_file: None,
            },
            data_off,
        ))
    }

    /// Each run as (guest address, offset of its pages in `memory.pages`,
    /// length in bytes), in order.
    pub fn placed_runs(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let page = PAGE_SIZE as u64;
        self.runs.iter().scan(0u64, move |at, &(first, n)| {
            let placed = (first * page, *at, n * page);
            *at += n * page;
            Some(placed)
        })
    }

    /// Hand every run of stored pages to `write` (guest address, bytes),
    /// e.g. to write them into RAM that is zero elsewhere. Only pages that
    /// were read ([`data`](Self::data)) are handed over: pages left in the
    /// file ([`in_file`](Self::in_file)) are mapped by a restore instead.
    pub fn apply<E>(&self, mut write: impl FnMut(u64, &[u8]) -> Result<(), E>) -> Result<(), E> {
        for (addr, at, len) in self.placed_runs() {
            let Some(bytes) = self.data.get(at as usize..(at + len) as usize) else {
                break;
            };
            write(addr, bytes)?;
        }
        Ok(())
    }
}

/// Guest RAM's stored pages found in place: the index of a
/// [`SparseMemory`] (size and runs, `data` left empty) and the pages
/// themselves as slices of guest memory, with their length and CRC32, so
/// a snapshot writes them straight from guest memory to its file. Each
/// page is scanned for zeros and, if kept, hashed while it is in the
/// cache; nothing is copied.
pub struct PagesInPlace<'a> {
    /// The index; its `data` stays empty (the pages are [`Self::slices`]).
    pub memory: SparseMemory,
    /// The stored pages in run order: their concatenation is what the
    /// `memory.pages` section holds. Adjacent kept pages share a slice.
    pub slices: Vec<&'a [u8]>,
    crc: crc32fast::Hasher,
    len: u64,
}

impl<'a> PagesInPlace<'a> {
    /// Nothing scanned yet.
    pub fn new() -> Self {
        Self {
            memory: SparseMemory::empty(),
            slices: Vec::new(),
            crc: crc32fast::Hasher::new(),
            len: 0,
        }
    }

    /// Scan `block`, guest RAM at page-aligned `addr` (at or after the end
    /// of what was scanned so far; the RAM in between is zero): its
    /// non-zero pages are kept, by reference. As
    /// [`SparseMemory::append_at`], without the copy. `block` is whole
    /// pages (guest RAM always is).
    pub fn scan_at(&mut self, addr: u64, block: &'a [u8]) {
        debug_assert!(addr >= self.memory.size && addr.is_multiple_of(PAGE_SIZE as u64));
        debug_assert!(block.len().is_multiple_of(PAGE_SIZE));
        let m = &mut self.memory;
        m.size = m.size.max(addr);
        let base = m.size / PAGE_SIZE as u64;
        // The kept pages of `block` not yet in `slices`: [from, to).
        let mut pending: Option<(usize, usize)> = None;
        for (i, page) in block.chunks(PAGE_SIZE).enumerate() {
            if is_zero(page) {
                continue;
            }
            self.crc.update(page);
            let at = i * PAGE_SIZE;
            let p = base + i as u64;
            match m.runs.last_mut() {
                Some((first, n)) if *first + *n == p => *n += 1,
                _ => m.runs.push((p, 1)),
            }
            pending = match pending {
                Some((from, to)) if to == at => Some((from, at + page.len())),
                Some((from, to)) => {
                    self.slices.push(&block[from..to]);
                    Some((at, at + page.len()))
                }
                None => Some((at, at + page.len())),
            };
            self.len += page.len() as u64;
        }
        if let Some((from, to)) = pending {
            self.slices.push(&block[from..to]);
        }
        m.size += block.len() as u64;
    }

    /// Extend the RAM to `size` bytes with zero pages.
    pub fn pad_to(&mut self, size: u64) {
        self.memory.pad_to(size);
    }

    /// Bytes of the stored pages (the `memory.pages` section's length).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether no page is stored.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// CRC32 of the stored pages (the `memory.pages` section's).
    pub fn crc(&self) -> u32 {
        self.crc.clone().finalize()
    }

    /// The owned form: the pages copied into `data` (for a snapshot kept in
    /// memory rather than written).
    pub fn to_owned_memory(&self) -> SparseMemory {
        let mut m = self.memory.clone();
        m.data = Vec::with_capacity(self.len as usize);
        for s in &self.slices {
            m.data.extend_from_slice(s);
        }
        m
    }
}

impl Default for PagesInPlace<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// The hot loop of a memory snapshot. Each 64-byte block is OR-folded
/// without an early exit, which the compiler turns into vector ORs; the
/// early exit is per block.
fn is_zero(page: &[u8]) -> bool {
    let mut blocks = page.chunks_exact(64);
    blocks.all(|b| b.iter().fold(0u8, |acc, &x| acc | x) == 0)
        && blocks.remainder().iter().all(|&x| x == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scanning in place keeps the same runs, the same bytes (by
    /// reference, adjacent pages in one slice), and the CRC and length of
    /// the bytes the copying encoder stores, blocks with gaps included.
    #[test]
    fn pages_in_place_match_the_copied_encoding() {
        let mut ram = vec![0u8; 64 * PAGE_SIZE];
        for (p, at) in [
            (0, 0),
            (1, 4095),
            (2, 17),
            (9, 100),
            (10, 0),
            (40, 5),
            (63, 4095),
        ] {
            ram[p * PAGE_SIZE + at] = (p as u8) | 0x80;
        }
        // Blocks as the pagemap gives them: page 63 and pages 30..50 are
        // scanned; the rest of 30..50 is zero.
        let blocks = [(0, 12), (30, 50), (63, 64)];
        let mut copied = SparseMemory::empty();
        let mut in_place = PagesInPlace::new();
        for (a, b) in blocks {
            let block = &ram[a * PAGE_SIZE..b * PAGE_SIZE];
            copied.append_at((a * PAGE_SIZE) as u64, block);
            in_place.scan_at((a * PAGE_SIZE) as u64, block);
        }
        copied.pad_to(ram.len() as u64);
        in_place.pad_to(ram.len() as u64);
        assert_eq!(in_place.memory.runs, vec![(0, 3), (9, 2), (40, 1), (63, 1)]);
        assert_eq!(in_place.memory.runs, copied.runs);
        assert_eq!(in_place.memory.size, copied.size);
        assert!(in_place.memory.data.is_empty());
        assert_eq!(in_place.slices.len(), 4);
        assert_eq!(in_place.len(), copied.data.len() as u64);
        assert_eq!(in_place.crc(), crc32fast::hash(&copied.data));
        // The slices point into `ram`: nothing was copied.
        assert_eq!(in_place.slices[0].as_ptr(), ram.as_ptr());
        assert!(in_place.to_owned_memory() == copied);
        assert!(!in_place.is_empty());
        assert!(PagesInPlace::new().is_empty());
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
            Ok::<(), std::convert::Infallible>(())
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

    #[test]
    fn appending_blocks_equals_encoding_at_once() {
        let mut ram = vec![0u8; 16 * PAGE_SIZE];
        for (i, at) in [
            0,
            4 * PAGE_SIZE - 1,
            4 * PAGE_SIZE,
            9 * PAGE_SIZE + 63,
            16 * PAGE_SIZE - 1,
        ]
        .into_iter()
        .enumerate()
        {
            ram[at] = i as u8 + 1;
        }
        let whole = SparseMemory::encode(&ram);
        let mut parts = SparseMemory::empty();
        for block in ram.chunks(3 * PAGE_SIZE) {
            parts.append(block);
        }
        assert_eq!(parts, whole);
        assert_eq!(whole.runs, vec![(0, 1), (3, 2), (9, 1), (15, 1)]);
    }
}
