//! Every stored page read and verified before the first `KVM_RUN`
//! (`--verify-memory`, and wherever on demand is not possible).

use vm_memory::{GuestAddress, GuestMemoryMmap};

use super::keep::Keeper;
use super::shared::{PageError, Pages, PagesMode};
use super::source::PageSource;
use crate::arch::layout::ram_pieces;
use crate::snapshot::sparse::{is_zero, PAGE_SIZE};
use crate::vstate::machine::{populate_for_write, write_ram};

/// Bytes read from the file at a time when pages are copied up front.
const CHUNK: usize = 1 << 20;

impl PageSource {
    /// Read every stored page into `mem`, checking each against its CRC32
    /// (or, in a file without them, the section against the table's).
    pub(super) fn read_up_front(
        self,
        mem: &GuestMemoryMmap,
        why: String,
    ) -> Result<Pages, PageError> {
        let began = std::time::Instant::now();
        let mut whole = crc32fast::Hasher::new();
        let mut keeper = Keeper::default();
        let mut buf = vec![0u8; CHUNK];
        let mut index = 0u64;
        for &(off, at, len) in &self.runs {
            let mut done = 0u64;
            while done < len {
                let n = (len - done).min(CHUNK as u64) as usize;
                let chunk = &mut buf[..n];
                let o = off + done;
                self.read(chunk, o, index, at + done)?;
                if self.crcs.is_empty() {
                    whole.update(chunk);
                } else {
                    self.verify(chunk, o, index, at + done)?;
                }
                keeper.scan(&self, chunk, o);
                self.write_nonzero(mem, chunk, o)?;
                index += (n / PAGE_SIZE) as u64;
                done += n as u64;
            }
        }
        if self.crcs.is_empty() {
            let computed = whole.finalize();
            if computed != self.section.crc32 {
                return Err(PageError::SectionCorrupt {
                    stored: self.section.crc32,
                    computed,
                });
            }
        }
        Ok(Pages::filled(
            PagesMode::UpFront { why },
            keeper.into_kept(),
            began.elapsed(),
        ))
    }

    /// Write the pages of `chunk` (at RAM offset `off`) that are not all
    /// zeros into `mem`, which is zero elsewhere: a crafted file's holes
    /// take no memory. Each group of pages is faulted in with one system
    /// call first (a trap per page otherwise; advice only, so a failure is
    /// ignored).
    fn write_nonzero(
        &self,
        mem: &GuestMemoryMmap,
        chunk: &[u8],
        off: u64,
    ) -> Result<(), PageError> {
        let mut p = 0usize;
        while p < chunk.len() {
            let zero = is_zero(&chunk[p..p + PAGE_SIZE]);
            let mut q = p + PAGE_SIZE;
            while q < chunk.len() && is_zero(&chunk[q..q + PAGE_SIZE]) == zero {
                q += PAGE_SIZE;
            }
            if !zero {
                let o = off + p as u64;
                for (gpa, l) in ram_pieces(&self.regions, o, (q - p) as u64).unwrap_or_default() {
                    let _ = populate_for_write(mem, GuestAddress(gpa), l);
                }
                write_ram(mem, o, &chunk[p..q]).map_err(|e| PageError::Fill {
                    gpa: self.gpa(o),
                    reason: e.to_string(),
                })?;
            }
            p = q;
        }
        Ok(())
    }
}
