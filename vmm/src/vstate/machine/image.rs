//! A file's pages put into fresh guest RAM: each run mapped with
//! `mmap(MAP_PRIVATE | MAP_FIXED)` of the file over the anonymous RAM, so
//! a page is read from the file (page cache) only when the guest or the
//! VMM first touches it, and a write copies it, never reaching the file.
//! Start-up then costs one `mmap` per run, not one copy per byte. The
//! embedded kernel is put in this way from the executable
//! ([`super::exe_kernel`]); restores copy a snapshot's pages in instead
//! (`crate::snapshot::pager`), and the snapshot scan's tests map one.
//!
//! Runs are counted in RAM offsets (see [`crate::arch::layout::ram_pieces`]):
//! a run that crosses from the RAM below the 32-bit hole into the RAM above
//! 4 GiB is mapped as two pieces, one into each region's mapping.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use super::ram::{regions_of, write_ram};
use crate::arch::layout::{ram_pieces, PAGE_SIZE};
use crate::error::{MemoryError, Result};

/// Most runs of a snapshot that are mapped one `mmap` each: every mapping
/// is a VMA (and splits the anonymous one around it), and a process has at
/// most `vm.max_map_count` (65530 by default). Past this, the smallest runs
/// are read into RAM instead; a guest's touched memory is normally a few
/// hundred runs.
pub const MAX_MAPPED_RUNS: usize = 8192;

/// The pieces the runs past [`MAX_MAPPED_RUNS`] are read in.
const READ_PIECE: usize = 1 << 20;

/// A snapshot's stored pages as a restore maps them into guest RAM.
pub struct RamImage<'a> {
    /// The snapshot file, open for reading.
    pub file: &'a File,
    /// Each run of pages: (RAM offset, offset in `file`, length in bytes),
    /// page-aligned, inside RAM, not overlapping.
    pub runs: Vec<(u64, u64, u64)>,
}

/// Map `image`'s runs over the fresh RAM `mem` (the largest
/// [`MAX_MAPPED_RUNS`] of them; the rest are read).
pub(super) fn map_image(mem: &GuestMemoryMmap, image: &RamImage<'_>) -> Result<()> {
    let regions = regions_of(mem);
    let page = PAGE_SIZE as u64;
    let need = image.runs.iter().map(|&(_, off, len)| off + len).max();
    let len = image
        .file
        .metadata()
        .map_err(|source| MemoryError::MapImage {
            addr: 0,
            len: 0,
            offset: 0,
            source,
        })?
        .len();
    if let Some(need) = need.filter(|&n| n > len) {
        return Err(MemoryError::ImageShrank { len, need }.into());
    }
    let mut pieces = Vec::with_capacity(image.runs.len());
    for &(at, offset, len) in &image.runs {
        let aligned = [at, offset, len].iter().all(|v| v.is_multiple_of(page));
        let placed = ram_pieces(&regions, at, len).filter(|_| aligned);
        let Some(placed) = placed else {
            return Err(MemoryError::Layout.into());
        };
        pieces.push((offset, placed));
    }
    // The longest runs are mapped; past MAX_MAPPED_RUNS, the rest are read.
    let mut by_len: Vec<usize> = (0..image.runs.len()).collect();
    by_len.sort_by_key(|&i| std::cmp::Reverse(image.runs[i].2));
    let (mapped, read) = by_len.split_at(by_len.len().min(MAX_MAPPED_RUNS));
    for &i in mapped {
        let (mut offset, placed) = &pieces[i];
        for &(addr, len) in placed {
            map_piece(mem, image.file, addr, offset, len)?;
            offset += len;
        }
    }
    let first = |i: usize, at: u64| pieces[i].1.first().map_or(at, |&(addr, _)| addr);
    read_runs(
        mem,
        image,
        read.iter()
            .map(|&i| (image.runs[i], first(i, image.runs[i].0))),
    )
}

/// Read `runs` of `image` into the fresh RAM `mem` (the runs past
/// [`MAX_MAPPED_RUNS`], each with the guest address it starts at, for
/// errors): in pieces of [`READ_PIECE`], and only the pages that hold
/// data. The RAM is zero already, so a run of zeros (or a hole in a
/// sparse file) costs no memory, whatever the page index claims.
fn read_runs(
    mem: &GuestMemoryMmap,
    image: &RamImage<'_>,
    runs: impl Iterator<Item = ((u64, u64, u64), u64)>,
) -> Result<()> {
    let mut buf = vec![0u8; READ_PIECE];
    for ((at, offset, len), addr) in runs {
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(READ_PIECE as u64) as usize;
            let piece = &mut buf[..n];
            image
                .file
                .read_exact_at(piece, offset + done)
                .map_err(|source| MemoryError::MapImage {
                    addr,
                    len,
                    offset,
                    source,
                })?;
            for (k, p) in piece.chunks(PAGE_SIZE).enumerate() {
                if p.iter().any(|&b| b != 0) {
                    write_ram(mem, at + done + (k * PAGE_SIZE) as u64, p)?;
                }
            }
            done += n as u64;
        }
    }
    Ok(())
}

/// Map `len` bytes of `file` from `offset` over guest RAM at `addr`, which
/// lie inside one region (as [`ram_pieces`] cut them), page-aligned.
fn map_piece(mem: &GuestMemoryMmap, file: &File, addr: u64, offset: u64, len: u64) -> Result<()> {
    let map_err = |source| MemoryError::MapImage {
        addr,
        len,
        offset,
        source,
    };
    // vm-memory checks that the whole piece lies in one region's mapping.
    let host = mem
        .get_slice(GuestAddress(addr), len as usize)
        .map_err(MemoryError::HostMapping)?
        .ptr_guard_mut()
        .as_ptr();
    // SAFETY: `host .. + len` lies inside one anonymous mapping `mem` owns
    // (checked by `get_slice`), page-aligned (the region starts on a page
    // and `addr`, `len` are pages); the RAM is fresh and not yet registered
    // with KVM, so no reference to those pages exists. MAP_FIXED replaces
    // them with a private mapping of the file, which `mem`'s munmap of the
    // whole region removes on drop with the rest. The file descriptor is
    // valid for the call; the mapping keeps its own reference.
    let got = unsafe {
        libc::mmap(
            host.cast(),
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_NORESERVE,
            file.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if got == libc::MAP_FAILED {
        return Err(map_err(std::io::Error::last_os_error()).into());
    }
    debug_assert_eq!(got.cast::<u8>(), host);
    Ok(())
}
