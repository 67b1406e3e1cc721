//! The native side's scratch memory (every buffer a native row uses),
//! backed like guest RAM.
//!
//! Why: a guest/native ratio should differ only in where the code runs.
//! With `--hugepages` guest RAM gets 2 MiB pages, and a native side on 4 KiB
//! pages then pays TLB misses the guest does not: on Zen 3 under kvm_pvm
//! that moved the DGEMM and Linpack rows' median ratios up by 0.7-1.6%
//! (two batches of 8+8 quick runs); with huge pages on both sides they were
//! within 1% of the default run's, either way. So the native scratch gets the same kind
//! of backing as guest RAM: plain anonymous memory without the option,
//! `MADV_HUGEPAGE` with `thp`, and 2 MiB hugetlb pages with `hugetlbfs`
//! (transparent huge pages instead, and the reason, when the pool has no
//! room for the scratch beyond guest RAM).

use vm_memory::mmap::{MmapRegion, MmapRegionBuilder};

use crate::vstate::machine::{
    anon_huge_kib, hugetlb_kib, madvise_hugepage, HugetlbPool, HUGETLB_PAGE_MIB,
};
use crate::vstate::RamBacking;

/// A 2 MiB huge page, bytes.
const HUGE_PAGE: usize = (HUGETLB_PAGE_MIB as usize) << 20;

/// How the scratch is backed, and where (for reading `/proc/self/smaps`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScratchInfo {
    /// What backs it: `None` plain anonymous memory, else the kind used.
    pub backing: Option<RamBacking>,
    /// Why it is not what guest RAM has (hugetlbfs asked, the pool had no
    /// room, transparent huge pages used instead; or `madvise` refused).
    pub fallback: Option<String>,
    /// Host address of the mapping.
    pub start: u64,
    /// Bytes mapped (a whole number of 2 MiB pages with huge pages).
    pub len: u64,
}

impl ScratchInfo {
    /// KiB of the scratch in huge pages now (`AnonHugePages`, or the
    /// hugetlb fields with hugetlbfs); `None` without huge pages or when
    /// smaps cannot be read. Meaningful while the mapping is alive.
    pub fn huge_kib(&self) -> Option<u64> {
        match self.backing? {
            RamBacking::Thp => anon_huge_kib(self.start, self.len).ok(),
            RamBacking::Hugetlbfs => hugetlb_kib(self.start, self.len).ok(),
        }
    }
}

/// The mapping; the native thread borrows it as one byte slice.
pub struct Scratch {
    region: MmapRegion,
    /// Bytes the rows may use (at most the mapping's size).
    len: usize,
}

impl Scratch {
    /// `len` zeroed bytes backed like guest RAM with `backing`.
    pub fn new(len: usize, backing: Option<RamBacking>) -> std::io::Result<(Self, ScratchInfo)> {
        let len = len.max(1);
        let mut fallback = None;
        let (region, used) = match backing {
            None => (map(len, 0)?, None),
            Some(RamBacking::Hugetlbfs) => {
                let size = len.next_multiple_of(HUGE_PAGE);
                match map(size, libc::MAP_HUGETLB | libc::MAP_HUGE_2MB) {
                    Ok(r) => (r, Some(RamBacking::Hugetlbfs)),
                    Err(e) => {
                        let pool = HugetlbPool::read()
                            .map(|p| format!(" ({} of {} huge pages free)", p.free, p.total))
                            .unwrap_or_default();
                        fallback = Some(format!(
                            "hugetlbfs: {} MiB of scratch beyond guest RAM not mapped from the pool{pool}: {e}; transparent huge pages instead",
                            size >> 20
                        ));
                        (advised(size, &mut fallback)?, Some(RamBacking::Thp))
                    }
                }
            }
            Some(RamBacking::Thp) => (
                advised(len.next_multiple_of(HUGE_PAGE), &mut fallback)?,
                Some(RamBacking::Thp),
            ),
        };
        let info = ScratchInfo {
            backing: used,
            fallback,
            start: region.as_ptr() as u64,
            len: region.size() as u64,
        };
        Ok((Self { region, len }, info))
    }

    /// The scratch as bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the region is a live private read-write mapping of at
        // least `len` bytes owned by `self`, so `&mut self` makes this the
        // only reference to it for the borrow's lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.region.as_ptr(), self.len) }
    }
}

/// A private anonymous read-write mapping of `size` bytes, with `flags`
/// added. A hugetlb mapping reserves its pages now (no `MAP_NORESERVE`),
/// so a short pool is `ENOMEM` here, not a `SIGBUS` at the first touch.
fn map(size: usize, flags: i32) -> std::io::Result<MmapRegion> {
    let hugetlb = flags & libc::MAP_HUGETLB != 0;
    let reserve = if hugetlb { 0 } else { libc::MAP_NORESERVE };
    let builder = MmapRegionBuilder::new(size)
        .with_mmap_prot(libc::PROT_READ | libc::PROT_WRITE)
        .with_mmap_flags(libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | reserve | flags)
        .with_hugetlbfs(hugetlb);
    builder.build().map_err(std::io::Error::other)
}

/// [`map`] with `MADV_HUGEPAGE`; a refused advice is noted in `fallback`
/// (the mapping still works, on small pages).
fn advised(size: usize, fallback: &mut Option<String>) -> std::io::Result<MmapRegion> {
    let region = map(size, 0)?;
    // SAFETY: the whole of a live anonymous mapping owned by `region`.
    if let Err(e) = unsafe { madvise_hugepage(region.as_ptr(), region.size()) } {
        fallback.get_or_insert_with(|| format!("madvise(MADV_HUGEPAGE) refused: {e}"));
    }
    Ok(region)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_scratch_is_zeroed_writable_and_unadvised() {
        let (mut s, info) = Scratch::new(3 << 20, None).unwrap();
        assert_eq!(info.backing, None);
        assert_eq!(info.fallback, None);
        assert_eq!(info.huge_kib(), None);
        let b = s.as_mut_slice();
        assert_eq!(b.len(), 3 << 20);
        assert!(b.iter().all(|&x| x == 0));
        b[0] = 1;
        b[(3 << 20) - 1] = 2;
        assert_eq!((b[0], b[(3 << 20) - 1]), (1, 2));
    }

    #[test]
    fn thp_scratch_is_a_whole_number_of_huge_pages_and_advised() {
        let (mut s, info) = Scratch::new(5 << 20, Some(RamBacking::Thp)).unwrap();
        assert_eq!(info.backing, Some(RamBacking::Thp));
        assert_eq!(info.len, 6 << 20);
        // Rows see what they asked for, not the rounding.
        assert_eq!(s.as_mut_slice().len(), 5 << 20);
        s.as_mut_slice().fill(7);
        // madvise cannot refuse an anonymous mapping on a kernel with THP;
        // without THP support (no /sys/kernel/mm/transparent_hugepage) the
        // refusal is the fallback's reason, named.
        if std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            assert_eq!(info.fallback, None);
        } else {
            assert!(info
                .fallback
                .as_deref()
                .unwrap()
                .starts_with("madvise(MADV_HUGEPAGE) refused: "));
        }
        assert!(info.huge_kib().is_some_and(|k| k <= 6 << 10));
    }

    #[test]
    fn hugetlbfs_scratch_uses_the_pool_or_says_why_not() {
        let free = HugetlbPool::read().map(|p| p.free).unwrap_or(0);
        let (mut s, info) = Scratch::new(3 << 20, Some(RamBacking::Hugetlbfs)).unwrap();
        assert_eq!(info.len, 4 << 20);
        s.as_mut_slice().fill(1);
        match info.backing {
            Some(RamBacking::Hugetlbfs) => {
                assert_eq!(info.fallback, None);
                assert_eq!(info.huge_kib(), Some(4 << 10));
            }
            Some(RamBacking::Thp) => {
                // Only when the pool lacked the two pages (it may have
                // changed since it was read: then the reason says so).
                let why = info.fallback.unwrap();
                assert!(
                    why.starts_with(
                        "hugetlbfs: 4 MiB of scratch beyond guest RAM not mapped from the pool"
                    ),
                    "{why}"
                );
                assert!(why.ends_with("; transparent huge pages instead"), "{why}");
                eprintln!("hugetlbfs scratch fell back ({free} pages were free): {why}");
            }
            None => panic!("asked for huge pages, got plain memory: {info:?}"),
        }
    }
}
