//! Which guest pages the memory scan finds: file-backed mappings, touched
//! anonymous pages, zero pages left out.

use super::super::sparse::{SparseMemory, PAGE_SIZE};
use super::pages::{data_pages, file_backed};
use super::*;
use vm_memory::Bytes;

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
/// when nothing touched them: their data is in the file.
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
