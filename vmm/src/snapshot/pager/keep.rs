//! What a restored run's report needs of the snapshot's memory, kept while
//! the pages are verified so the file is never read again: the guest's
//! report record as it stood when the snapshot was taken (the rows whose
//! records it holds were complete before the snapshot; see
//! `crate::report::spanning`).
//!
//! The record is found by its header: [`REPORT_MAGIC`] at a 64-byte
//! boundary (`guest::protocol::REPORT_EXIT_ALIGN`), followed by its
//! version and its size. Checking one `u64` in 64 costs far less than the
//! CRC32 the page gets anyway.

use guest::protocol::{REPORT_EXIT_ALIGN, REPORT_MAGIC};

use super::source::PageSource;
use crate::snapshot::format::{le_u32, le_u64};
use crate::snapshot::sparse::PAGE_SIZE;

/// The largest record kept: a report claiming more is not ours.
const MAX_KEPT: usize = 64 << 10;

/// Most records kept: the magic could also appear in the guest's data.
const MAX_RECORDS: usize = 8;

/// The report records found so far.
#[derive(Default)]
pub(super) struct Keeper {
    kept: Vec<(u64, Vec<u8>)>,
}

impl Keeper {
    /// Look for report records in `bytes`, verified pages at RAM offset
    /// `off`. A record that runs past `bytes` is completed from `src` (the
    /// following pages, read and verified on their own).
    pub(super) fn scan(&mut self, src: &PageSource, bytes: &[u8], off: u64) {
        let step = REPORT_EXIT_ALIGN as usize;
        for at in (0..bytes.len().saturating_sub(15)).step_by(step) {
            if le_u64(bytes, at) != REPORT_MAGIC || self.kept.len() >= MAX_RECORDS {
                continue;
            }
            let size = le_u32(bytes, at + 12) as usize;
            if !(16..=MAX_KEPT).contains(&size) {
                continue;
            }
            let mut record = vec![0u8; size];
            let here = size.min(bytes.len() - at);
            record[..here].copy_from_slice(&bytes[at..at + here]);
            if here < size && complete(src, &mut record[here..], off + (at + here) as u64).is_err()
            {
                continue;
            }
            self.kept.push((src.gpa(off + at as u64), record));
        }
    }

    /// The records found, with their guest addresses.
    pub(super) fn into_kept(self) -> Vec<(u64, Vec<u8>)> {
        self.kept
    }
}

/// Fill `rest` with the guest's bytes from page-aligned RAM offset `off`
/// on, each page read and verified by itself.
fn complete(src: &PageSource, rest: &mut [u8], off: u64) -> Result<(), super::shared::PageError> {
    let mut page = vec![0u8; PAGE_SIZE];
    for (k, out) in rest.chunks_mut(PAGE_SIZE).enumerate() {
        src.page(off + (k * PAGE_SIZE) as u64, &mut page)?;
        out.copy_from_slice(&page[..out.len()]);
    }
    Ok(())
}
