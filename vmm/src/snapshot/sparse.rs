//! The sparse encoding of guest RAM (section `memory`): all-zero pages
//! are not stored, so a 64 MiB guest that touched a few MiB costs a few MiB.
//!
//! ```text
//!      0     8  guest memory size in bytes
//!      8     4  page size (4096)
//!     12     4  number of runs
//!     16  16*n  runs: first page (u64), page count (u64), ascending, disjoint
//!          ...  the pages of every run, in run order
//! ```

use std::fmt;

use super::format::{le_u32, le_u64, FormatError};

/// Guest page size of the sparse memory encoding.
pub const PAGE_SIZE: usize = 4096;

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
        }
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

    /// The `memory` section's bytes.
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
    pub fn apply<E>(&self, mut write: impl FnMut(u64, &[u8]) -> Result<(), E>) -> Result<(), E> {
        let mut at = 0usize;
        for &(first, n) in &self.runs {
            let len = n as usize * PAGE_SIZE;
            write(first * PAGE_SIZE as u64, &self.data[at..at + len])?;
            at += len;
        }
        Ok(())
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
