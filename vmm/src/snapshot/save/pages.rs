//! Which pages of guest RAM can hold data, found without reading them:
//! the present and swapped bits of `/proc/self/pagemap`, and the
//! file-backed mappings of `/proc/self/maps`.

use crate::error::{MemoryError, Result};
use crate::snapshot::sparse::PAGE_SIZE;

/// Pagemap entry bit: the page is present in RAM.
pub(super) const PM_PRESENT: u64 = 1 << 63;

/// Pagemap entry bit: the page is swapped out (it holds data too).
pub(super) const PM_SWAPPED: u64 = 1 << 62;

/// The byte ranges `[start, end)` of the RAM mapped at `host` (`size`
/// bytes) that can hold anything but zeros, ascending and disjoint, found
/// without reading the pages:
/// - a page of the anonymous mapping that was never touched is neither
///   present nor swapped in `/proc/self/pagemap` (the flags are readable
///   without privileges; the frame numbers, zeroed for us, are not used);
/// - a page mapped from a snapshot file (a restored guest's RAM, see
///   [`crate::vstate::machine`]) holds the file's data even when it is not
///   present: every file-backed mapping in `/proc/self/maps` that overlaps
///   RAM counts whole.
pub(super) fn data_pages(host: usize, size: usize) -> Result<Vec<(usize, usize)>> {
    use std::io::Read;
    use std::os::unix::fs::FileExt;
    let page = PAGE_SIZE;
    let pages = size / page;
    let mut wanted = vec![false; pages];
    let pagemap =
        std::fs::File::open("/proc/self/pagemap").map_err(|source| MemoryError::Residency {
            what: "/proc/self/pagemap",
            source,
        })?;
    // 64 Ki entries (512 KiB) at a time.
    let mut buf = vec![0u8; 8 * pages.min(1 << 16)];
    let mut p = 0;
    while p < pages {
        let n = (pages - p).min(1 << 16);
        let bytes = &mut buf[..8 * n];
        pagemap
            .read_exact_at(bytes, ((host / page + p) * 8) as u64)
            .map_err(|source| MemoryError::Residency {
                what: "/proc/self/pagemap",
                source,
            })?;
        for (k, e) in bytes.chunks_exact(8).enumerate() {
            let e = u64::from_le_bytes(e.try_into().expect("8 bytes"));
            wanted[p + k] = e & (PM_PRESENT | PM_SWAPPED) != 0;
        }
        p += n;
    }
    let mut maps = String::new();
    std::fs::File::open("/proc/self/maps")
        .and_then(|mut f| f.read_to_string(&mut maps))
        .map_err(|source| MemoryError::Residency {
            what: "/proc/self/maps",
            source,
        })?;
    for (lo, hi) in file_backed(&maps) {
        let (lo, hi) = (lo.max(host), hi.min(host + size));
        if lo < hi {
            wanted[(lo - host) / page..(hi - host).div_ceil(page)].fill(true);
        }
    }
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, _) in wanted.iter().enumerate().filter(|(_, w)| **w) {
        match out.last_mut() {
            Some((_, end)) if *end == i * page => *end += page,
            _ => out.push((i * page, (i + 1) * page)),
        }
    }
    Ok(out)
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
