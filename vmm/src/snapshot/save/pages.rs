//! Which pages of guest RAM can hold data, found without reading them
//! and without looking at the pages the guest never touched: the kernel
//! lists the populated ones (`PAGEMAP_SCAN`), and `/proc/self/maps` the
//! file-backed mappings.
//!
//! Why `PAGEMAP_SCAN` (Linux 6.7): it walks the page tables and skips
//! every unpopulated table whole, so its cost follows the memory the guest
//! touched, not `--mem`. `cargo bench --bench snapshot_scan` times the
//! candidates alone with the same 27.5 MB touched at every size; on an AMD
//! EPYC (Zen 4) under kvm_pvm, medians at 64 MiB, 2 GiB, 16 GiB, 64 GiB
//! (docs/measurements.md has the run):
//!
//! | method | 64 MiB | 2 GiB | 16 GiB | 64 GiB |
//! |--------|--------|-------|--------|--------|
//! | `PAGEMAP_SCAN` | 0.08 ms | 0.09 ms | 0.09 ms | 0.09 ms |
//! | pagemap read, 8 bytes a page (before; kernels without the ioctl) | 0.26 ms | 6.8 ms | 42 ms | - |
//! | `mincore`, 1 byte a page (misses swapped-out anonymous pages) | 0.03 ms | 0.43 ms | 7.2 ms | 36 ms |
//! | `SEEK_DATA` on a memfd (RAM moved to shared memory: no THP by default) | 0.18 ms | 0.19 ms | 0.17 ms | 0.18 ms |
//! | KVM dirty log (blind to the VMM's own writes and a restored guest's pages) | 0.001 ms | 0.012 ms | 0.10 ms | 0.37 ms |

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;

use crate::error::{MemoryError, Result};
use crate::snapshot::sparse::PAGE_SIZE;

/// Pagemap entry bit: the page is present in RAM.
pub(super) const PM_PRESENT: u64 = 1 << 63;

/// Pagemap entry bit: the page is swapped out (it holds data too).
pub(super) const PM_SWAPPED: u64 = 1 << 62;

/// `PAGEMAP_SCAN` category: the page is present.
const PAGE_IS_PRESENT: u64 = 1 << 3;
/// `PAGEMAP_SCAN` category: the page is swapped out.
const PAGE_IS_SWAPPED: u64 = 1 << 4;
/// `PAGEMAP_SCAN` category: the page is the shared zero page (read, never
/// written: it holds zeros).
const PAGE_IS_PFNZERO: u64 = 1 << 5;

/// `struct pm_scan_arg` (`include/uapi/linux/fs.h`).
#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

vmm_sys_util::ioctl_iowr_nr!(PAGEMAP_SCAN, b'f' as u32, 16, PmScanArg);

/// Regions one `PAGEMAP_SCAN` call returns at most.
const SCAN_BATCH: usize = 512;

/// Where the pages that can hold data are found: `/proc/self/pagemap`,
/// open, and the file-backed mappings of `/proc/self/maps`, read once per
/// snapshot.
pub(super) struct DataPages {
    pagemap: File,
    file_backed: Vec<(usize, usize)>,
}

fn residency(what: &'static str) -> impl FnOnce(std::io::Error) -> MemoryError {
    move |source| MemoryError::Residency { what, source }
}

impl DataPages {
    /// Open `/proc/self/pagemap` and read the file-backed mappings.
    pub(super) fn open() -> Result<Self> {
        let pagemap = File::open("/proc/self/pagemap").map_err(residency("/proc/self/pagemap"))?;
        let mut maps = String::new();
        File::open("/proc/self/maps")
            .and_then(|mut f| f.read_to_string(&mut maps))
            .map_err(residency("/proc/self/maps"))?;
        Ok(Self {
            pagemap,
            file_backed: file_backed(&maps).collect(),
        })
    }

    /// The byte ranges `[start, end)` of the RAM mapped at `host` (`size`
    /// bytes) that can hold anything but zeros, ascending and disjoint:
    /// - a page of the anonymous mapping the guest (or the VMM) wrote is
    ///   present or swapped ([`present`]); a page never touched is
    ///   neither, and one only read maps the shared zero page;
    /// - a page mapped from a file holds the file's data even when it is
    ///   not present, and its page cache residency says nothing of what
    ///   the guest wrote: every file-backed mapping in `/proc/self/maps`
    ///   that overlaps RAM counts whole (a restored guest's RAM is
    ///   anonymous: its snapshot waits until every page of the one it
    ///   was restored from is in, see [`crate::snapshot::pager`]).
    pub(super) fn in_range(&self, host: usize, size: usize) -> Result<Vec<(usize, usize)>> {
        let mut ranges = present(&self.pagemap, host, size)?;
        for &(lo, hi) in &self.file_backed {
            let (lo, hi) = (lo.max(host), hi.min(host + size));
            if lo < hi {
                let page = PAGE_SIZE;
                ranges.push(((lo - host) / page * page, (hi - host).div_ceil(page) * page));
            }
        }
        Ok(union(ranges))
    }
}

/// The present or swapped pages of `size` bytes at `host` (but the shared
/// zero page), as byte ranges from `host`: `PAGEMAP_SCAN`, or on a kernel
/// without it (before 6.7) the pagemap read page by page
/// ([`present_by_read`]).
pub(super) fn present(pagemap: &File, host: usize, size: usize) -> Result<Vec<(usize, usize)>> {
    match present_by_scan(pagemap, host, size) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTTY | libc::EINVAL)) => {
            present_by_read(pagemap, host, size)
        }
        r => r.map_err(|e| residency("/proc/self/pagemap (PAGEMAP_SCAN)")(e).into()),
    }
}

/// The present or swapped pages of `size` bytes at `host` (but the shared
/// zero page), as byte ranges from `host`, ascending and disjoint, by
/// `PAGEMAP_SCAN` on `pagemap` (an open `/proc/self/pagemap`): the kernel
/// returns the matching ranges (512 at a time) and skips unpopulated page
/// tables whole. A kernel without the ioctl (before 6.7) fails it with
/// `ENOTTY` or `EINVAL`.
pub fn present_by_scan(
    pagemap: &File,
    host: usize,
    size: usize,
) -> std::io::Result<Vec<(usize, usize)>> {
    let mut regions = [PageRegion::default(); SCAN_BATCH];
    let mut out = Vec::new();
    let (mut start, end) = (host as u64, (host + size) as u64);
    while start < end {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            start,
            end,
            vec: regions.as_mut_ptr() as u64,
            vec_len: SCAN_BATCH as u64,
            category_inverted: PAGE_IS_PFNZERO,
            category_mask: PAGE_IS_PFNZERO,
            category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
            return_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
            ..Default::default()
        };
        // SAFETY: `pagemap` is an open /proc/self/pagemap; `arg` is a
        // `pm_scan_arg` of the size it declares, and its `vec` points at
        // `regions`, `SCAN_BATCH` writable `page_region`s that outlive the
        // call. The kernel only reads our page tables for
        // `[start, end)` (guest RAM, mapped) and writes `arg` and `vec`.
        let n =
            unsafe { vmm_sys_util::ioctl::ioctl_with_mut_ref(pagemap, PAGEMAP_SCAN(), &mut arg) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        for r in &regions[..(n as usize).min(SCAN_BATCH)] {
            out.push((r.start as usize - host, r.end as usize - host));
        }
        if arg.walk_end <= start || arg.walk_end > end {
            return Err(std::io::Error::other(format!(
                "PAGEMAP_SCAN stopped at {:#x}, scanning {start:#x}..{end:#x}",
                arg.walk_end
            )));
        }
        start = arg.walk_end;
    }
    Ok(union(out))
}

/// The present or swapped pages of `size` bytes at `host`, as byte ranges
/// from `host`, ascending and disjoint, by reading `pagemap` (an open
/// `/proc/self/pagemap`), 8 bytes a page (64 Ki entries at a time): the
/// flags are readable without privileges; the frame numbers, zeroed for
/// us, are not used.
pub fn present_by_read(pagemap: &File, host: usize, size: usize) -> Result<Vec<(usize, usize)>> {
    let page = PAGE_SIZE;
    let pages = size / page;
    let mut buf = vec![0u8; 8 * pages.min(1 << 16)];
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut p = 0;
    while p < pages {
        let n = (pages - p).min(1 << 16);
        let bytes = &mut buf[..8 * n];
        pagemap
            .read_exact_at(bytes, ((host / page + p) * 8) as u64)
            .map_err(residency("/proc/self/pagemap"))?;
        for (k, e) in bytes.chunks_exact(8).enumerate() {
            let e = u64::from_le_bytes(e.try_into().expect("8 bytes"));
            if e & (PM_PRESENT | PM_SWAPPED) != 0 {
                let at = (p + k) * page;
                match out.last_mut() {
                    Some((_, end)) if *end == at => *end += page,
                    _ => out.push((at, at + page)),
                }
            }
        }
        p += n;
    }
    Ok(out)
}

/// The union of byte ranges: ascending, disjoint, adjacent ones joined.
fn union(mut ranges: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    ranges.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match out.last_mut() {
            Some((_, end)) if lo <= *end => *end = (*end).max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// The address ranges of the file-backed mappings in a `/proc/PID/maps`
/// text (a non-zero inode).
pub(super) fn file_backed(maps: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    maps.lines().filter_map(|line| {
        let mut f = line.split_ascii_whitespace();
        let range = f.next()?;
        let inode = f.nth(3)?;
        // Anonymous hugetlb RAM (`--hugepages hugetlbfs`) has an inode in
        // the kernel's internal hugetlbfs, but no file behind it: pagemap
        // reports its touched pages present, as for anonymous memory.
        if inode == "0" || f.next() == Some("/anon_hugepage") {
            return None;
        }
        let (lo, hi) = range.split_once('-')?;
        Some((
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        ))
    })
}
