//! Which guest pages the memory scan finds: file-backed mappings, touched
//! anonymous pages, zero pages left out, pages above 4 GiB.

use super::super::sparse::{SparseMemory, PAGE_SIZE};
use super::pages::{file_backed, present, present_by_read, present_by_scan, DataPages};
use super::*;
use vm_memory::Bytes;

fn data_pages(host: usize, size: usize) -> Result<Vec<(usize, usize)>> {
    DataPages::open()?.in_range(host, size)
}

fn encode_memory(mem: &GuestMemoryMmap) -> Result<SparseMemory> {
    Ok(scan_memory(mem)?.to_owned_memory())
}

#[test]
fn anonymous_hugetlb_ram_is_not_file_backed() {
    let maps = "7f0000000000-7f0004000000 rw-p 00000000 00:10 3072  /anon_hugepage (deleted)\n\
                    7f0004000000-7f0004001000 r--p 00000000 08:01 1234  /tmp/guest.snap\n";
    let got: Vec<_> = file_backed(maps).collect();
    assert_eq!(got, [(0x7f00_0400_0000, 0x7f00_0400_1000)]);
}

#[test]
fn file_backed_mappings_from_maps() {
    let maps = "\
7f0000000000-7f0000200000 rw-p 00000000 00:00 0 \n\
7f0000200000-7f0000203000 rw-p 00003000 fd:01 1234                       /tmp/a b.snap\n\
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n";
    let got: Vec<_> = file_backed(maps).collect();
    assert_eq!(got, vec![(0x7f00_0020_0000, 0x7f00_0020_3000)]);
}

/// Pages mapped from a snapshot file (a restored guest's) count even
/// when nothing touched them: their data is in the file, whether or not
/// the file's page cache holds them. A file page the guest then wrote
/// (copied on write into anonymous memory) is stored with what it wrote.
#[test]
fn file_backed_pages_are_scanned_untouched() {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 4 << 20)]).unwrap();
    let mut file = tempfile::tempfile().unwrap();
    let mut pages = vec![0u8; 2 * PAGE_SIZE];
    pages[10] = 0xaa; // page 0 of the file: data
    file.write_all(&pages).unwrap(); // page 1: zeros
    let host = mem.get_host_address(GuestAddress(0)).unwrap();
    // SAFETY: two pages at 1 MiB inside `mem`'s own mapping, which no
    // reference points into; `mem` unmaps the whole range on drop.
    let got = unsafe {
        libc::mmap(
            host.add(1 << 20).cast(),
            2 * PAGE_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_FIXED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(got, libc::MAP_FAILED);
    let found = data_pages(host as usize, 4 << 20).unwrap();
    let page = (1 << 20) / PAGE_SIZE as u64;
    assert!(
        found
            .iter()
            .any(|&(s, e)| s <= 1 << 20 && (1 << 20) + 2 * PAGE_SIZE <= e),
        "{found:x?}"
    );
    let sparse = encode_memory(&mem).unwrap();
    assert_eq!(
        sparse.runs,
        vec![(page, 1)],
        "the zero file page is left out"
    );
    assert_eq!(sparse.data[10], 0xaa);
    // The guest writes the file's zero page: a private copy, not the file.
    let at = GuestAddress((1 << 20) + PAGE_SIZE as u64 + 3);
    mem.write_slice(&[0x55], at).unwrap();
    let sparse = encode_memory(&mem).unwrap();
    assert_eq!(sparse.runs, vec![(page, 2)]);
    assert_eq!(sparse.data[PAGE_SIZE + 3], 0x55);
    let mut in_file = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut in_file, PAGE_SIZE as u64 + 3).unwrap();
    assert_eq!(in_file, [0]);
}

/// Untouched pages of an anonymous mapping are skipped; written ones
/// (and only those) are found, and a page written with zeros is found
/// but then left out by the zero scan.
#[test]
fn only_touched_pages_are_scanned() {
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 64 << 20)]).unwrap();
    mem.write_slice(&[1], GuestAddress(5 * PAGE_SIZE as u64 + 7))
        .unwrap();
    mem.write_slice(&[0], GuestAddress(40 << 20)).unwrap();
    mem.write_slice(&[2, 3], GuestAddress((64 << 20) - 2))
        .unwrap();
    let host = mem.get_host_address(GuestAddress(0)).unwrap() as usize;
    let found = data_pages(host, 64 << 20).unwrap();
    // Transparent huge pages may widen a touched page to 2 MiB: every
    // range holds a touched page, and all of them are in.
    let total: usize = found.iter().map(|(s, e)| e - s).sum();
    assert!(total <= 3 * (2 << 20), "{found:x?}");
    for at in [5 * PAGE_SIZE + 7, 40 << 20, (64 << 20) - 1] {
        assert!(
            found.iter().any(|&(s, e)| s <= at && at < e),
            "{at:#x}: {found:x?}"
        );
    }
    let sparse = encode_memory(&mem).unwrap();
    assert_eq!(sparse.size, 64 << 20);
    assert_eq!(
        sparse.runs,
        vec![(5, 1), ((64 << 20) / PAGE_SIZE as u64 - 1, 1)]
    );
    let mut back = vec![0u8; 64 << 20];
    sparse
        .apply(|a, d| {
            back[a as usize..a as usize + d.len()].copy_from_slice(d);
            Ok::<(), ()>(())
        })
        .unwrap();
    assert_eq!(back[5 * PAGE_SIZE + 7], 1);
    assert_eq!(&back[(64 << 20) - 2..], &[2, 3]);
}

/// A 64 GiB guest (MAP_NORESERVE: 64 GiB of address space on any host)
/// with a few pages written at known places, high ones included: the
/// scan finds exactly those, counted in RAM offsets through both regions
/// of the memory map, and the stored pages land back where they were.
#[test]
fn touched_pages_are_found_at_high_offsets_of_a_large_guest() {
    const G: u64 = 1 << 30;
    let mem = crate::vstate::machine::allocate_ram(64 << 10).unwrap();
    let writes = [
        (0x1000 + 9, 0x11u8),
        (3 * G - 1, 0x22),
        (4 * G, 0x33),
        (40 * G + 5 * PAGE_SIZE as u64, 0x44),
        (65 * G - 1, 0x55),
    ];
    for (addr, v) in writes {
        mem.write_slice(&[v], GuestAddress(addr)).unwrap();
    }
    // A page only read maps the shared zero page: nothing to store.
    let mut read = [0u8; 8];
    mem.read_slice(&mut read, GuestAddress(20 * G)).unwrap();
    let pages = scan_memory(&mem).unwrap();
    let page = |offset: u64| offset / PAGE_SIZE as u64;
    let want: Vec<(u64, u64)> = vec![
        (1, 1),
        (page(3 * G - 1), 2), // the last page below the hole, the first above
        (page(39 * G + 5 * PAGE_SIZE as u64), 1),
        (page(64 * G - 1), 1),
    ];
    assert_eq!(pages.memory.runs, want);
    assert_eq!(pages.memory.size, 64 * G);
    assert_eq!(
        pages.memory.regions,
        crate::arch::layout::ram_regions(64 * G)
    );
    let sparse = pages.to_owned_memory();
    let back = crate::vstate::machine::allocate_ram(64 << 10).unwrap();
    sparse
        .apply(|offset, data| crate::vstate::machine::write_ram(&back, offset, data))
        .unwrap();
    for (addr, v) in writes {
        let mut got = [0u8];
        back.read_slice(&mut got, GuestAddress(addr)).unwrap();
        assert_eq!(got, [v], "{addr:#x}");
    }
}

/// `PAGEMAP_SCAN` and the page-by-page pagemap read find the same
/// written pages, at low and high offsets of a 16 GiB mapping; the scan
/// leaves out pages only read (the shared zero page).
///
/// The mapping is advised `MADV_NOHUGEPAGE`: where THP is `always` (the
/// hw-kvm harness's kernel), the first write would fault in a whole 2 MiB
/// page and both methods would rightly report 512 pages for it.
#[test]
fn the_scan_and_the_pagemap_read_agree() {
    let size = 16usize << 30;
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), size)]).unwrap();
    let host = mem.get_host_address(GuestAddress(0)).unwrap() as usize;
    // SAFETY: advice on the whole live anonymous mapping `mem` owns.
    let advised = unsafe { libc::madvise(host as *mut libc::c_void, size, libc::MADV_NOHUGEPAGE) };
    assert_eq!(advised, 0, "{}", std::io::Error::last_os_error());
    for at in [
        0usize,
        7 * PAGE_SIZE,
        8 * PAGE_SIZE,
        9 << 30,
        size - PAGE_SIZE,
    ] {
        mem.write_slice(&[1], GuestAddress(at as u64)).unwrap();
    }
    let mut read = [0u8; 1];
    mem.read_slice(&mut read, GuestAddress(12 << 30)).unwrap();
    let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
    let by_read = present_by_read(&pagemap, host, size).unwrap();
    let written = vec![
        (0, PAGE_SIZE),
        (7 * PAGE_SIZE, 9 * PAGE_SIZE),
        (9 << 30, (9 << 30) + PAGE_SIZE),
        (size - PAGE_SIZE, size),
    ];
    // The read counts the zero page as present where the kernel maps it
    // for a read (Linux 6.1 in the hw-kvm harness did not); the scan never
    // counts it.
    let mut with_zero = written.clone();
    with_zero.insert(3, (12 << 30, (12 << 30) + PAGE_SIZE));
    assert!(by_read == with_zero || by_read == written, "{by_read:x?}");
    match present_by_scan(&pagemap, host, size) {
        Ok(by_scan) => assert_eq!(by_scan, written),
        // A kernel before 6.7: `present` falls back to the read.
        Err(e) => {
            eprintln!("PAGEMAP_SCAN not available ({e}): the fallback is what runs");
            assert_eq!(present(&pagemap, host, size).unwrap(), by_read);
        }
    }
}

/// A restored 16 GiB guest snapshotted again: its RAM is runs mapped
/// privately from the first file, one across the 32-bit hole and one high
/// above 4 GiB, that nothing touched since (not even into the page cache:
/// residency says nothing of them). The second snapshot stores every
/// non-zero page of them, at the same RAM offsets, plus a page the guest
/// wrote since in one of them.
#[test]
fn restored_runs_across_the_hole_are_stored_again() {
    use crate::vstate::machine::{allocate_ram_from_image, RamImage};
    use std::io::Write;
    const G: u64 = 1 << 30;
    let page = PAGE_SIZE as u64;
    // The first file's pages: run A (4 pages, from 3 GiB - 2 pages), run B
    // (2 pages at RAM offset 10 GiB, guest 11 GiB); B's second page zero.
    let mut file = tempfile::tempfile().unwrap();
    let mut bytes = vec![0u8; 6 * PAGE_SIZE];
    for p in 0..5 {
        bytes[p * PAGE_SIZE + 1] = 0x10 + p as u8;
    }
    file.write_all(&bytes).unwrap();
    let (a, b) = (3 * G - 2 * page, 10 * G);
    let image = RamImage {
        file: &file,
        runs: vec![(a, 0, 4 * page), (b, 4 * page, 2 * page)],
    };
    let mem = allocate_ram_from_image(16 << 10, &image).unwrap();
    // The guest sees run A split around the hole, B above 4 GiB.
    let at = |addr: u64| {
        let mut v = [0u8];
        mem.read_slice(&mut v, GuestAddress(addr + 1)).unwrap();
        v[0]
    };
    assert_eq!(
        [
            at(3 * G - 2 * page),
            at(3 * G - page),
            at(4 * G),
            at(4 * G + page),
            at(11 * G)
        ],
        [0x10, 0x11, 0x12, 0x13, 0x14]
    );
    // The guest writes B's zero page.
    mem.write_slice(&[0x77], GuestAddress(11 * G + page + 2))
        .unwrap();
    let sparse = encode_memory(&mem).unwrap();
    assert_eq!(sparse.runs, vec![(a / page, 4), (b / page, 2)]);
    assert_eq!(sparse.data[..4 * PAGE_SIZE], bytes[..4 * PAGE_SIZE]);
    assert_eq!(sparse.data[5 * PAGE_SIZE + 2], 0x77);
    assert_eq!(sparse.regions, crate::arch::layout::ram_regions(16 * G));
}

/// A guest's request at its point names the point; `vmm restore` reads the
/// name back to know no row spans the snapshot, and only point names pass.
#[test]
fn a_point_request_is_its_own_trigger() {
    use guest::protocol::SnapshotPhase;
    assert_eq!(Trigger::guest(None), Trigger::Guest);
    assert_eq!(Trigger::guest(Some(SnapshotPhase::Mid)).name(), "point-mid");
    for p in SnapshotPhase::ALL {
        assert!(Trigger::is_point(Trigger::Point(p).name()));
    }
    for other in ["time", "guest", "point", "point-middle", ""] {
        assert!(!Trigger::is_point(other), "{other}");
    }
}
