//! The identity page tables of the direct 64-bit entry: long mode needs
//! paging on, so the VMM writes a map of the first GiB
//! ([`DIRECT_MAP_END`]) before the first instruction instead of the guest
//! building one in 32-bit code (each emulated instruction costs ~0.7 µs
//! under kvm_pvm). A guest replaces it with its own once running.

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::layout::{BOOT_PAGE_TABLES_ADDR, DIRECT_MAP_END};
use crate::arch::error::MemoryError;

/// Present.
const PTE_P: u64 = 1 << 0;
/// Writable.
const PTE_RW: u64 = 1 << 1;
/// Page-size: a PD entry maps a 2 MiB page.
const PTE_PS: u64 = 1 << 7;
/// Bytes one PD entry maps.
const PAGE_2M: u64 = 2 << 20;
/// Entries in one paging structure.
const ENTRIES: u64 = 512;

/// The PML4, PDPT and PD, in that order from [`BOOT_PAGE_TABLES_ADDR`],
/// as `(guest address, entries)`: `PML4[0]` and `PDPT[0]` point at the next
/// table, the PD maps 0 up to [`DIRECT_MAP_END`] with 2 MiB pages,
/// read/write, supervisor only.
pub fn identity_map() -> [(u64, Vec<u64>); 3] {
    let pml4 = BOOT_PAGE_TABLES_ADDR;
    let pdpt = pml4 + 0x1000;
    let pd = pdpt + 0x1000;
    let pages = DIRECT_MAP_END / PAGE_2M;
    const _: () = assert!(DIRECT_MAP_END / PAGE_2M <= ENTRIES);
    [
        (pml4, vec![pdpt | PTE_P | PTE_RW]),
        (pdpt, vec![pd | PTE_P | PTE_RW]),
        (
            pd,
            (0..pages)
                .map(|i| (i * PAGE_2M) | PTE_P | PTE_RW | PTE_PS)
                .collect(),
        ),
    ]
}

/// Write [`identity_map`] into guest memory; returns CR3 (the PML4's
/// address). The rest of each table is left as it is: zero in fresh RAM.
pub fn write_identity_map(mem: &GuestMemoryMmap) -> Result<u64, MemoryError> {
    let tables = identity_map();
    for (at, entries) in &tables {
        let bytes: Vec<u8> = entries.iter().flat_map(|e| e.to_le_bytes()).collect();
        mem.write_slice(&bytes, GuestAddress(*at))
            .map_err(|source| MemoryError::Write {
                what: "the direct entry's page tables",
                source,
            })?;
    }
    Ok(tables[0].0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walk the tables as the CPU does for a 2 MiB page: every address
    /// below the map's end translates to itself.
    #[test]
    fn identity_map_translates_to_itself() {
        let tables = identity_map();
        let entry = |table: u64, index: u64| -> u64 {
            let (_, e) = tables.iter().find(|(at, _)| *at == table).unwrap();
            e.get(index as usize).copied().unwrap_or(0)
        };
        for va in [0u64, 0x10_0000, 0x12_3456, DIRECT_MAP_END - 1] {
            let pml4e = entry(BOOT_PAGE_TABLES_ADDR, (va >> 39) & 511);
            assert_eq!(pml4e & PTE_P, PTE_P);
            let pdpte = entry(pml4e & !0xfff, (va >> 30) & 511);
            assert_eq!(pdpte & (PTE_P | PTE_PS), PTE_P);
            let pde = entry(pdpte & !0xfff, (va >> 21) & 511);
            assert_eq!(pde & (PTE_P | PTE_RW | PTE_PS), PTE_P | PTE_RW | PTE_PS);
            assert_eq!((pde & !0x1f_ffff & !(1 << 63)) | (va & 0x1f_ffff), va);
        }
        assert_eq!(tables[2].1.len() as u64, DIRECT_MAP_END / PAGE_2M);
    }
}
