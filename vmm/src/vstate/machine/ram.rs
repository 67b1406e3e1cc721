//! Guest RAM by region and by RAM offset: where each region lies, its host
//! mapping, and writes at the RAM offsets a snapshot's page index counts.

use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use crate::arch::layout::{ram_pieces, RamRegion};
use crate::error::{MemoryError, Result};

/// The regions of guest RAM `mem`, ascending (vm-memory keeps them so).
pub fn regions_of(mem: &GuestMemoryMmap) -> Vec<RamRegion> {
    mem.iter()
        .map(|r| RamRegion {
            addr: r.start_addr().0,
            len: r.len(),
        })
        .collect()
}

/// Each region of guest RAM as its host mapping: (host address, length).
pub fn host_ranges(mem: &GuestMemoryMmap) -> Vec<(u64, u64)> {
    mem.iter()
        .filter_map(|r| {
            let host = mem.get_host_address(r.start_addr()).ok()?;
            Some((host as u64, r.len()))
        })
        .collect()
}

/// Write `data` into guest RAM at RAM offset `offset` (see
/// [`ram_pieces`]: the offsets a snapshot's page index counts, which run
/// across the hole below 4 GiB without a gap).
pub fn write_ram(mem: &GuestMemoryMmap, offset: u64, data: &[u8]) -> Result<()> {
    let restore_err = |source| MemoryError::Restore {
        addr: offset,
        len: data.len(),
        source,
    };
    let pieces = ram_pieces(&regions_of(mem), offset, data.len() as u64).ok_or_else(|| {
        restore_err(vm_memory::GuestMemoryError::InvalidGuestAddress(
            GuestAddress(offset),
        ))
    })?;
    let mut at = 0usize;
    for (addr, len) in pieces {
        let part = &data[at..at + len as usize];
        mem.write_slice(part, GuestAddress(addr))
            .map_err(restore_err)?;
        at += len as usize;
    }
    Ok(())
}
