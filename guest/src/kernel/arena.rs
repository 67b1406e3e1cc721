//! Large buffers for workloads: a bump allocator over free RAM.
//!
//! At boot the kernel picks the largest usable-RAM range of the PVH memory
//! map that lies above the kernel image (`__kernel_end`) and below 4 GiB
//! (the end of the identity mapping), and hands it out in 64-byte-aligned,
//! zero-filled pieces that live for the rest of the run. Nothing is ever
//! freed: a run allocates its matrices once. The boot information was
//! copied into kernel buffers before the arena exists, so no allocation can
//! overwrite it.

use super::pvh::{MemmapEntry, MEMMAP_TYPE_RAM};
use core::cell::Cell;

/// Alignment of every allocation: a cache line, and enough for any SSE,
/// AVX or AVX-512 load.
pub const ALIGN: u64 = 64;
/// The identity mapping ends here.
const MAPPED_END: u64 = 0x1_0000_0000;

struct Bump {
    next: Cell<u64>,
    end: Cell<u64>,
    start: Cell<u64>,
}

// SAFETY: the guest has one vCPU, runs no interrupts, and only CPL3 code
// (one flow of control at a time) touches the arena.
unsafe impl Sync for Bump {}

static ARENA: Bump = Bump {
    next: Cell::new(0),
    end: Cell::new(0),
    start: Cell::new(0),
};

extern "C" {
    static __kernel_end: u8;
}

/// First byte after the kernel image (from linker.ld).
pub fn kernel_end() -> u64 {
    // Only the symbol's address is taken; nothing is read.
    core::ptr::addr_of!(__kernel_end) as u64
}

/// The largest RAM range in `[floor, ceiling)` after clipping, aligned to
/// [`ALIGN`], as `(start, end)`.
pub fn choose_region(memmap: &[MemmapEntry], floor: u64, ceiling: u64) -> Option<(u64, u64)> {
    memmap
        .iter()
        .filter(|e| e.kind == MEMMAP_TYPE_RAM)
        .filter_map(|e| {
            let start = e.addr.max(floor).checked_add(ALIGN - 1)? & !(ALIGN - 1);
            let end = e.addr.saturating_add(e.size).min(ceiling);
            (end > start).then_some((start, end))
        })
        .max_by_key(|&(s, e)| e - s)
}

/// Set the arena up from the memory map; returns its range.
pub fn init(memmap: &[MemmapEntry]) -> Option<(u64, u64)> {
    let (start, end) = choose_region(memmap, kernel_end(), MAPPED_END)?;
    ARENA.start.set(start);
    ARENA.next.set(start);
    ARENA.end.set(end);
    Some((start, end))
}

/// Bytes still available.
pub fn available() -> u64 {
    ARENA.end.get() - ARENA.next.get()
}

/// Bytes handed out so far.
pub fn used() -> u64 {
    ARENA.next.get() - ARENA.start.get()
}

/// `len` zero-filled bytes, 64-byte aligned, for the rest of the run; `None`
/// when the arena is exhausted (or the VMM gave no memory map).
pub fn alloc_bytes(len: usize) -> Option<&'static mut [u8]> {
    let start = ARENA.next.get();
    let end = start.checked_add(len as u64)?;
    if end > ARENA.end.get() {
        return None;
    }
    let next = end.checked_add(ALIGN - 1)? & !(ALIGN - 1);
    ARENA.next.set(next.min(ARENA.end.get()));
    let ptr = start as *mut u8;
    // SAFETY: `[start, end)` is identity-mapped RAM above the kernel image
    // that the VMM's memory map lists as usable, and the bump pointer never
    // hands the same bytes out twice, so the slice is unaliased for
    // 'static. It is zero-filled before the slice is formed.
    unsafe {
        core::ptr::write_bytes(ptr, 0, len);
        Some(core::slice::from_raw_parts_mut(ptr, len))
    }
}

/// `len` zeroed `f64`s (0.0), 64-byte aligned.
pub fn alloc_f64(len: usize) -> Option<&'static mut [f64]> {
    let bytes = alloc_bytes(len.checked_mul(8)?)?;
    // SAFETY: the allocation is 64-byte aligned, `8 * len` bytes long and
    // all-zero, which is the valid `f64` 0.0; it is exclusively ours.
    Some(unsafe { core::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), len) })
}
