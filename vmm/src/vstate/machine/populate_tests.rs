//! Populating guest RAM faults in exactly the pages asked for, checked
//! with `mincore`.

use super::*;
use vm_memory::Bytes;

/// Which of the `pages` 4 KiB pages from `addr` are resident (`mincore`).
fn resident(mem: &GuestMemoryMmap, addr: u64, pages: usize) -> Vec<bool> {
    let host = mem.get_host_address(GuestAddress(addr)).unwrap();
    let mut vec = vec![0u8; pages];
    // SAFETY: `host` is page-aligned inside `mem`'s live mapping and
    // `vec` holds one byte per page queried.
    let r = unsafe { libc::mincore(host.cast(), pages * 4096, vec.as_mut_ptr()) };
    assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().map(|b| b & 1 == 1).collect()
}

/// Guest RAM in 4 KiB pages whatever the host's THP setting, so
/// residency is per page.
fn small_page_ram() -> GuestMemoryMmap {
    let mem = allocate_ram(MIN_MEM_MIB).unwrap();
    let host = mem.get_host_address(GuestAddress(0)).unwrap();
    // SAFETY: advice on the whole live anonymous mapping `mem` owns.
    let r = unsafe {
        libc::madvise(
            host.cast(),
            (MIN_MEM_MIB << 20) as usize,
            libc::MADV_NOHUGEPAGE,
        )
    };
    assert_eq!(r, 0);
    mem
}

#[test]
fn populating_faults_in_exactly_the_pages_under_the_range() {
    let mem = small_page_ram();
    // 3 bytes before a page boundary up to 5 bytes into the third page
    // after it: pages 17..=20 of the ones queried from page 16.
    let at = GuestAddress(17 * 4096 + 4093);
    match populate_for_write(&mem, at, 3 + 2 * 4096 + 5) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            eprintln!("skipped: this kernel has no MADV_POPULATE_WRITE (Linux 5.14+)");
            return;
        }
        Err(e) => panic!("populate: {e}"),
    }
    let got = resident(&mem, 16 * 4096, 6);
    assert_eq!(got, [false, true, true, true, true, false]);
    // Contents are untouched (zero) and writable.
    let mut buf = [0xffu8; 16];
    mem.read_slice(&mut buf, at).unwrap();
    assert_eq!(buf, [0; 16]);
    mem.write_slice(&[1, 2, 3], at).unwrap();
}

#[test]
fn populating_nothing_or_outside_ram_is_harmless() {
    let mem = small_page_ram();
    populate_for_write(&mem, GuestAddress(4096), 0).unwrap();
    assert_eq!(resident(&mem, 0, 4), [false; 4]);
    let end = MIN_MEM_MIB << 20;
    let e = populate_for_write(&mem, GuestAddress(end - 4096), 8192).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    let e = populate_for_write(&mem, GuestAddress(u64::MAX - 10), 100).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
}
