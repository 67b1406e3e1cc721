//! How a snapshot's stored pages should reach its file: the measurement
//! behind `vmm::snapshot::save::MEMORY_WRITE` (issue 16 §2).
//!
//! A cold buffer (evicted from the caches by touching 256 MiB first) of
//! each size is written to a new file in the system's temporary directory
//! by four methods, each timed to the data written and to the file synced:
//!
//! - `writev`: one `writev` of the buffer (the kernel copies it into the
//!   page cache; what a snapshot does);
//! - `writev-direct`: the same with `O_DIRECT` set on the file (no copy:
//!   the device reads the buffer; where the file system refuses it, the
//!   row says so);
//! - `mmap-memcpy`, `mmap-rep-movsb`, `mmap-nt`: the file sized with
//!   `ftruncate`, mapped shared, and filled by a copy of our own: the C
//!   library's `memcpy`, `rep movsb`, or AVX-512 non-temporal stores with
//!   their `sfence` (skipped without AVX-512F).
//!
//! Each figure is the fastest of 5 rounds. Not criterion: one file write
//! is milliseconds, and the page cache and the disk carry state between
//! iterations, so each round starts from a new file.
//!
//! `cargo bench --bench snapshot_copy [-- SIZE_KIB...]` (default 64, 1024,
//! 16384 and 27000 KiB, the last a mid-DGEMM snapshot's pages).

use std::fs::OpenOptions;
use std::io::{IoSlice, Write};
use std::os::fd::AsRawFd;
use std::time::Instant;

/// Copies `n` bytes with `rep movsb`.
///
/// # Safety
/// `d` and `s` valid for `n` bytes, not overlapping.
unsafe fn rep_movsb(d: *mut u8, s: *const u8, n: usize) {
    // SAFETY: per the contract; `rep movsb` moves exactly RCX bytes
    // forward (DF is clear by the ABI).
    unsafe {
        std::arch::asm!("rep movsb", inout("rcx") n => _, inout("rdi") d => _,
            inout("rsi") s => _, options(nostack, preserves_flags));
    }
}

/// Copies `n` bytes (a multiple of 256) with non-temporal 64-byte stores,
/// then `sfence`.
///
/// # Safety
/// `d` and `s` valid for `n` bytes, not overlapping, `d` 64-byte aligned;
/// the CPU and XCR0 allow AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn nt_copy(d: *mut u8, s: *const u8, n: usize) {
    use std::arch::x86_64::*;
    // SAFETY: every access is inside [0, n), per the contract.
    unsafe {
        let mut i = 0;
        while i + 256 <= n {
            let v = [0, 64, 128, 192].map(|k| _mm512_loadu_si512(s.add(i + k).cast()));
            for (k, x) in [0, 64, 128, 192].into_iter().zip(v) {
                _mm512_stream_si512(d.add(i + k).cast(), x);
            }
            i += 256;
        }
        _mm_sfence();
    }
}

fn main() {
    let mut sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse::<usize>().ok())
        .map(|k| k << 10)
        .collect();
    if sizes.is_empty() {
        sizes = [64, 1024, 16384, 27000].map(|k| k << 10).to_vec();
    }
    let nt = std::arch::is_x86_feature_detected!("avx512f");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut junk = vec![1u8; 256 << 20];
    println!("size KiB  method           write ms  with fsync ms  write GB/s");
    for &n in &sizes {
        let n = n.next_multiple_of(4096);
        let src = Aligned::new(n);
        let src = src.fill(|i| (i as u8).wrapping_mul(7) | 1);
        for method in [
            "writev",
            "writev-direct",
            "mmap-memcpy",
            "mmap-rep-movsb",
            "mmap-nt",
        ] {
            if method == "mmap-nt" && !nt {
                println!("{:>8}  {method:<15} skipped: no AVX-512F", n >> 10);
                continue;
            }
            let (mut write, mut synced) = (f64::MAX, f64::MAX);
            for round in 0..5 {
                for b in junk.iter_mut().step_by(64) {
                    *b = b.wrapping_add(1);
                }
                let path = dir.path().join(format!("f{round}"));
                let mut f = OpenOptions::new()
                    .create_new(true)
                    .read(true)
                    .write(true)
                    .open(&path)
                    .expect("a new file");
                let t = Instant::now();
                if method == "writev-direct" && !set_direct(&f) {
                    write = f64::NAN;
                    synced = f64::NAN;
                    break;
                }
                if method.starts_with("writev") {
                    let mut bufs = [IoSlice::new(src)];
                    f.write_all_vectored_compat(&mut bufs);
                } else {
                    // SAFETY: the file is ours and `n` bytes long after the
                    // ftruncate; the shared mapping covers exactly it and
                    // is unmapped before the file is closed; `src` is `n`
                    // bytes and does not overlap the new mapping.
                    unsafe {
                        assert_eq!(libc::ftruncate(f.as_raw_fd(), n as i64), 0);
                        let m = libc::mmap(
                            std::ptr::null_mut(),
                            n,
                            libc::PROT_READ | libc::PROT_WRITE,
                            libc::MAP_SHARED,
                            f.as_raw_fd(),
                            0,
                        );
                        assert_ne!(m, libc::MAP_FAILED);
                        let d = m.cast::<u8>();
                        match method {
                            "mmap-memcpy" => std::ptr::copy_nonoverlapping(src.as_ptr(), d, n),
                            "mmap-rep-movsb" => rep_movsb(d, src.as_ptr(), n),
                            _ => nt_copy(d, src.as_ptr(), n),
                        }
                        libc::munmap(m, n);
                    }
                }
                write = write.min(t.elapsed().as_secs_f64() * 1e3);
                f.sync_all().expect("fsync");
                synced = synced.min(t.elapsed().as_secs_f64() * 1e3);
                drop(f);
                std::fs::remove_file(&path).expect("remove");
            }
            println!(
                "{:>8}  {method:<15} {write:>9.3} {synced:>14.3} {:>11.2}",
                n >> 10,
                n as f64 / write / 1e6
            );
        }
    }
}

/// Sets `O_DIRECT` on `f`; false where the file system refuses it.
fn set_direct(f: &std::fs::File) -> bool {
    // SAFETY: F_GETFL/F_SETFL on an open descriptor we own.
    unsafe {
        let flags = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        flags >= 0 && libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags | libc::O_DIRECT) == 0
    }
}

/// A page-aligned buffer (what `O_DIRECT` needs; guest RAM is one).
struct Aligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Aligned {
    fn new(n: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(n, 4096).expect("a layout");
        // SAFETY: `n` is not zero (the sizes are at least 1 KiB).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        Self { ptr, layout }
    }

    fn fill(&self, f: impl Fn(usize) -> u8) -> &[u8] {
        // SAFETY: `ptr` holds `layout.size()` initialised bytes, borrowed
        // for as long as `self` is; this is the only mutable view.
        let b = unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) };
        for (i, x) in b.iter_mut().enumerate() {
            *x = f(i);
        }
        b
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// `write_all` over `writev` (std's vectored `write_all` is not stable).
trait WriteAllVectored {
    fn write_all_vectored_compat(&mut self, bufs: &mut [IoSlice<'_>]);
}

impl WriteAllVectored for std::fs::File {
    fn write_all_vectored_compat(&mut self, mut bufs: &mut [IoSlice<'_>]) {
        while !bufs.is_empty() {
            let n = self.write_vectored(bufs).expect("writev");
            assert!(n > 0, "writev wrote nothing");
            IoSlice::advance_slices(&mut bufs, n);
        }
    }
}
