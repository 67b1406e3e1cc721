//! The stored pages of a snapshot found where they lie in guest memory,
//! for a write straight from there (see [`super::super::save`]).

use super::{is_zero, SparseMemory, PAGE_SIZE};

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
            m.page_crcs.push(crc32fast::hash(page));
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
