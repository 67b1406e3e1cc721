//! The stored pages as they lie in the snapshot file: where each run is,
//! reading pages and checking them against their CRC32.
//!
//! Runs are counted in RAM offsets, as the page index counts them (the
//! regions of guest RAM back to back, [`crate::arch::layout::ram_pieces`]);
//! a page's guest address, which failures name, comes from the regions.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::shared::PageError;
use crate::arch::layout::{ram_pieces, RamRegion};
use crate::snapshot::format::SectionInfo;
use crate::snapshot::sparse::{SparseMemory, PAGE_SIZE};

/// The stored pages left in the snapshot file, ready to be put into RAM.
pub struct PageSource {
    /// The snapshot file, open for reading (and leased when `leased`).
    pub(super) file: File,
    /// The file holds a read lease ([`take_lease`](super::take_lease)).
    pub(super) leased: bool,
    /// The `memory.pages` section's table entry.
    pub(super) section: SectionInfo,
    /// Each run: (RAM offset, offset in the section, length), in file
    /// order.
    pub(super) runs: Vec<(u64, u64, u64)>,
    /// Where the RAM offsets lie in guest physical memory.
    pub(super) regions: Vec<RamRegion>,
    /// Each stored page's CRC32 (`memory.crc32`); empty in older files.
    pub(super) crcs: Vec<u32>,
}

impl PageSource {
    /// The pages `memory` left in `file` (`None` when they were read with
    /// the other sections). `leased`: [`take_lease`](super::take_lease)
    /// succeeded on `file`.
    pub fn new(file: File, leased: bool, memory: &SparseMemory) -> Option<Self> {
        let section = memory.in_file.clone()?;
        Some(Self {
            file,
            leased,
            section,
            runs: memory.placed_runs().collect(),
            regions: memory.ram_regions(),
            crcs: memory.page_crcs.clone(),
        })
    }

    /// The guest address of RAM offset `off` (`off` itself past the
    /// regions, which a checked page index never reaches).
    pub(super) fn gpa(&self, off: u64) -> u64 {
        ram_pieces(&self.regions, off, 1)
            .and_then(|p| p.first().map(|&(addr, _)| addr))
            .unwrap_or(off)
    }

    /// Read `buf` (whole pages, the first being stored page `index` at RAM
    /// offset `off`) from offset `at` of the section.
    pub(super) fn read(
        &self,
        buf: &mut [u8],
        off: u64,
        index: u64,
        at: u64,
    ) -> Result<(), PageError> {
        let offset = self.section.offset + at;
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| PageError::Unreadable {
                gpa: self.gpa(off),
                index,
                offset,
                reason: e.to_string(),
            })
    }

    /// Check each page of `buf` (as [`Self::read`] read it) against its
    /// CRC32.
    pub(super) fn verify(
        &self,
        buf: &[u8],
        off: u64,
        index: u64,
        at: u64,
    ) -> Result<(), PageError> {
        for (k, page) in buf.chunks(PAGE_SIZE).enumerate() {
            let i = index + k as u64;
            let stored = self.crcs[i as usize];
            let computed = crc32fast::hash(page);
            if computed != stored {
                let d = (k * PAGE_SIZE) as u64;
                return Err(PageError::Corrupt {
                    gpa: self.gpa(off + d),
                    index: i,
                    offset: self.section.offset + at + d,
                    stored,
                    computed,
                });
            }
        }
        Ok(())
    }

    /// The stored page at RAM offset `off`: (its index, its offset in the
    /// section), or `None` for a page the snapshot left out (zero).
    fn locate(&self, off: u64) -> Option<(u64, u64)> {
        let k = self.runs.partition_point(|&(o, _, _)| o <= off);
        let &(o, at, len) = self.runs.get(k.checked_sub(1)?)?;
        (off < o + len).then(|| ((at + off - o) / PAGE_SIZE as u64, at + off - o))
    }

    /// Read and verify the one stored page at RAM offset `off` into
    /// `page`; zeros for a page the snapshot left out.
    pub(super) fn page(&self, off: u64, page: &mut [u8]) -> Result<(), PageError> {
        match self.locate(off) {
            None => {
                page.fill(0);
                Ok(())
            }
            Some((index, at)) => {
                self.read(page, off, index, at)?;
                if self.crcs.is_empty() {
                    return Ok(());
                }
                self.verify(page, off, index, at)
            }
        }
    }
}
