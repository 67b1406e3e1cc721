//! Which pages of guest RAM a snapshot should look at, and how to ask the
//! kernel: the measurement behind `PAGEMAP_SCAN` in
//! `vmm::snapshot::save` (issue 38 §3).
//!
//! A mapping of each size is touched as a mid-DGEMM guest touches its RAM
//! (0.5 MB of kernel image at 1 MiB, 27 MB of buffers from 2 MiB, a page in
//! the middle, the last page): the same 27.5 MB at every size. Then the
//! populated pages are found by each candidate, timed alone:
//!
//! - `pagemap`: `/proc/self/pagemap` read, 8 bytes a page (what a
//!   snapshot did before; skipped above 16 GiB, where it takes seconds);
//! - `mincore`: 1 byte a page (it misses swapped-out anonymous pages);
//! - `PAGEMAP_SCAN`: the pagemap ioctl of Linux 6.7, which returns the
//!   present or swapped ranges and skips unpopulated page tables whole;
//! - `dirty log`: `KVM_GET_DIRTY_LOG` of a memory slot over the mapping
//!   with dirty logging on, and its bitmap scanned (the guest wrote nothing
//!   since, so this is its lower bound; it never sees what the VMM wrote);
//! - `memfd SEEK_DATA`: the same RAM as a memfd mapped shared, its data
//!   found with `SEEK_DATA`/`SEEK_HOLE`.
//!
//! `pagemap` and `PAGEMAP_SCAN` are the library's own code
//! (`vmm::snapshot::save::scan`), what a snapshot runs.
//!
//! Each figure is the median of 15 rounds (5 for `pagemap` above 4 GiB).
//! `cargo bench --bench snapshot_scan [-- MiB...]` (default 64, 2048,
//! 16384 and 65536: address space only, `MAP_NORESERVE`).

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

use vmm::internal::snapshot::save::scan::{present_by_read, present_by_scan};

const PAGE: usize = 4096;

/// `size` bytes of private anonymous memory, or of `fd` shared.
fn map(size: usize, fd: Option<i32>) -> *mut u8 {
    let (flags, fd) = match fd {
        Some(fd) => (libc::MAP_SHARED | libc::MAP_NORESERVE, fd),
        None => (
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
        ),
    };
    // SAFETY: a new mapping chosen by the kernel; nothing else is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    p.cast()
}

/// Touch what a mid-DGEMM guest touches; returns the pages touched.
fn touch(base: *mut u8, size: usize) -> usize {
    let offsets = (1 << 20..(1 << 20) + (512 << 10))
        .step_by(PAGE)
        .chain((2 << 20..(2 << 20) + (27 << 20)).step_by(PAGE))
        .chain([size / 2 + 5 * PAGE, size - PAGE]);
    let mut n = 0;
    for off in offsets {
        // SAFETY: `off` is inside the `size` bytes mapped at `base`.
        unsafe { base.add(off).write(1) };
        n += 1;
    }
    n
}

/// Byte ranges from the pages `wanted` says.
fn ranges(wanted: impl Iterator<Item = bool>) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, _) in wanted.enumerate().filter(|(_, w)| *w) {
        match out.last_mut() {
            Some((_, e)) if *e == i * PAGE => *e += PAGE,
            _ => out.push((i * PAGE, (i + 1) * PAGE)),
        }
    }
    out
}

fn mincore(host: usize, size: usize) -> Vec<(usize, usize)> {
    let mut v = vec![0u8; size / PAGE];
    // SAFETY: `host..+size` is one mapping; `v` has a byte per page.
    let r = unsafe { libc::mincore(host as *mut _, size, v.as_mut_ptr()) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    ranges(v.iter().map(|b| b & 1 != 0))
}

fn seek_data(fd: i32, size: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0i64;
    loop {
        // SAFETY: plain system calls on an open memfd.
        let d = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
        if d < 0 {
            break;
        }
        // SAFETY: as above.
        let h = unsafe { libc::lseek(fd, d, libc::SEEK_HOLE) };
        out.push((d as usize, (h as usize).min(size)));
        if h as usize >= size {
            break;
        }
        at = h;
    }
    out
}

fn dirty_log(vm: &kvm_ioctls::VmFd, size: usize) -> Vec<(usize, usize)> {
    let bitmap = vm.get_dirty_log(0, size).unwrap();
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, &word) in bitmap.iter().enumerate() {
        let mut w = word;
        while w != 0 {
            let p = (i * 64 + w.trailing_zeros() as usize) * PAGE;
            w &= w - 1;
            match out.last_mut() {
                Some((_, e)) if *e == p => *e += PAGE,
                _ => out.push((p, p + PAGE)),
            }
        }
    }
    out
}

fn time(mib: usize, name: &str, rounds: usize, mut find: impl FnMut() -> Vec<(usize, usize)>) {
    let mut ms: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(find());
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    let found: usize = find().iter().map(|(s, e)| e - s).sum();
    println!(
        "{mib:>8}  {name:<16} {:>9.3}  {:>9.3}  {:>10}",
        ms[rounds / 2],
        ms[0],
        found >> 10
    );
}

fn main() {
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    if sizes.is_empty() {
        sizes = vec![64, 2048, 16384, 65536];
    }
    let kvm = kvm_ioctls::Kvm::new().ok();
    let pm = File::open("/proc/self/pagemap").expect("/proc/self/pagemap");
    println!("     MiB  method            median ms     min ms  found KiB");
    for mib in sizes {
        let size = mib << 20;
        let base = map(size, None);
        touch(base, size);
        let host = base as usize;
        if mib <= 16384 {
            time(mib, "pagemap", if mib > 4096 { 5 } else { 15 }, || {
                present_by_read(&pm, host, size).expect("pagemap read")
            });
        }
        time(mib, "mincore", 15, || mincore(host, size));
        time(mib, "PAGEMAP_SCAN", 15, || {
            present_by_scan(&pm, host, size).expect("PAGEMAP_SCAN")
        });
        if let Some(vm) = kvm.as_ref().and_then(|k| k.create_vm().ok()) {
            let slot = kvm_bindings::kvm_userspace_memory_region {
                slot: 0,
                guest_phys_addr: 0,
                memory_size: size as u64,
                userspace_addr: host as u64,
                flags: kvm_bindings::KVM_MEM_LOG_DIRTY_PAGES,
            };
            // SAFETY: the slot is the mapping above, which outlives the VM
            // (dropped at the end of this block); no vCPU ever runs.
            match unsafe { vm.set_user_memory_region(slot) } {
                Ok(()) => time(mib, "dirty log", 15, || dirty_log(&vm, size)),
                Err(e) => println!("{mib:>8}  dirty log: {e}"),
            }
        }
        // SAFETY: the mapping made above, unused from here on.
        unsafe { libc::munmap(base.cast(), size) };
        // SAFETY: a new memfd; the name is a C string.
        let fd = unsafe { libc::memfd_create(c"ram".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: `fd` was just created and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sizing our own memfd.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), size as i64) }, 0);
        let base = map(size, Some(fd.as_raw_fd()));
        touch(base, size);
        time(mib, "memfd SEEK_DATA", 15, || {
            seek_data(fd.as_raw_fd(), size)
        });
        // SAFETY: the memfd's mapping made above, unused from here on.
        unsafe { libc::munmap(base.cast(), size) };
    }
}
