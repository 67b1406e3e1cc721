//! The guest physical memory map: RAM from address 0 up to the 32-bit
//! hole, the rest of it from 4 GiB ([`ram_regions`]), and the fixed
//! addresses the boot protocol uses in the low region. RAM itself is
//! created by `vstate::machine`.
//!
//! As on a PC (and in Firecracker's and Cloud Hypervisor's maps), the top
//! of the 32-bit space is never RAM: the guest's MMIO, ports' tables and
//! KVM's TSS live there, so a guest of more than [`LOW_RAM_END`] bytes gets
//! the rest of its RAM above 4 GiB ([`HIGH_RAM_START`]).
//!
//! ```text
//! 0x0000_0500  boot GDT (PVH asks for flat 32-bit segments; the direct
//!              entry's has a 64-bit code segment instead)
//! 0x0000_5000  the direct entry's boot TSC slot (8 bytes)
//! 0x0000_7000  a bzImage's zero page (`arch::linux`)
//! 0x0000_8000  hvm_start_info, then the memory map
//!              (hvm_memmap_table_entry[]) and the module list
//! 0x0000_9000  the direct entry's page tables: PML4, PDPT, PD (3 pages)
//! 0x0000_c000  kernel command line (NUL-terminated, < 4 KiB)
//! 0x0009_fc00  the MP table (the EBDA: reserved up to 1 MiB)
//! 0x000e_0000  a PC guest's ACPI tables, the RSDP first (`arch::acpi`)
//! 0x0010_0000  kernel image (ELF PT_LOAD segments, at their physical addresses)
//! mem_size     end of the low region: all of RAM up to 3 GiB (LOW_RAM_END);
//!              the 3-4 GiB hole stays unbacked so guest MMIO there exits
//!              to the VMM
//! 0xfffb_d000  three pages for KVM's VMX real-mode TSS (KVM_TSS_ADDR)
//! 0x1_0000_0000  the high region: RAM past 3 GiB, when --mem is larger
//! ```

/// The x86 base page: the unit of guest RAM mappings and of the snapshot's
/// sparse memory.
pub const PAGE_SIZE: usize = 4096;

/// Where the boot GDT lives (PVH asks for flat 32-bit segments).
pub const BOOT_GDT_ADDR: u64 = 0x500;
/// Where a guest started at its direct 64-bit entry writes the TSC of its
/// first instruction (the VMM passes this address in RSI; see
/// `arch::regs`). Zero until the guest writes it.
pub const BOOT_TSC_ADDR: u64 = 0x5000;
/// The direct entry's identity map: PML4 here, then PDPT and PD in the
/// next two pages (see `arch::paging`).
pub const BOOT_PAGE_TABLES_ADDR: u64 = 0x9000;
/// How much the direct entry's identity map covers: the first GiB (one PD
/// of 2 MiB pages), enough for the boot structures and any kernel image
/// `--mem` allows to start there.
pub const DIRECT_MAP_END: u64 = 1 << 30;
/// Where `hvm_start_info` lives; the guest finds it in EBX.
///
/// It, the memory map, the direct entry's page tables and the command line
/// fill the 32 KiB-aligned block at 0x8000, all written by the VMM
/// ([`BOOT_DATA`]). Why: KVM's shadow MMU, on a guest page fault, also maps
/// the present pages of the faulting page's aligned group of eight (its PTE
/// prefetch, which stops at the first page it cannot map). With the start
/// info, the map and the command line on pages 6, 7 and 0x20, a boot took
/// three faults for them under kvm_pvm (page 0 of their group is the
/// unmapped null page); in one group it takes one.
pub const START_INFO_ADDR: u64 = 0x8000;
/// Where the `hvm_memmap_table_entry` array lives: after the start info,
/// room for [`MEMMAP_MAX`] entries before the module list.
pub const MEMMAP_ADDR: u64 = START_INFO_ADDR + 0x100;
/// Where PVH's module list (the initrd) lives, after the memory map.
pub const MODLIST_ADDR: u64 = START_INFO_ADDR + 0x800;
/// The most memory-map entries the room at [`MEMMAP_ADDR`] holds (24 bytes
/// each, up to [`MODLIST_ADDR`]).
pub const MEMMAP_MAX: usize = ((MODLIST_ADDR - MEMMAP_ADDR) / 24) as usize;
/// Where the NUL-terminated kernel command line lives: the page after the
/// direct entry's page tables, in the start info's group of eight pages.
pub const CMDLINE_ADDR: u64 = BOOT_PAGE_TABLES_ADDR + 3 * PAGE_SIZE as u64;
/// Room for the command line, its NUL included.
pub const CMDLINE_MAX: usize = 4096;
/// Where the kernel image may start; also the start of "high" RAM in the map.
pub const HIGHMEM_START: u64 = 0x10_0000;
/// End of conventional memory below the VGA/BIOS hole, as PCs report it.
pub const EBDA_START: u64 = 0x9_fc00;
/// Smallest guest that holds the boot structures and a kernel.
pub const MIN_MEM_MIB: u64 = 4;
/// Where the low RAM region ends at most: the 32-bit MMIO hole starts here.
pub const LOW_RAM_END: u64 = 3 << 30;
/// Where RAM past [`LOW_RAM_END`] continues: above the 32-bit space.
pub const HIGH_RAM_START: u64 = 1 << 32;
/// Largest guest RAM: RAM then ends ([`ram_end`]) at 1 TiB, 40 physical
/// address bits. Guest RAM is mapped `MAP_NORESERVE`, so the host backs
/// only the pages the guest touches and 64 GiB of it fits a 24 GiB host;
/// the other limits are the host's, each refused with an error naming
/// the size: the guest CPU's physical address width (KVM's CPUID leaf
/// 0x8000_0008, checked before the VM is built), the `mmap` and KVM's
/// memory slot.
pub const MAX_MEM_MIB: u64 = ((1 << 40) - (HIGH_RAM_START - LOW_RAM_END)) >> 20;

/// One region of guest RAM: its guest physical address and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RamRegion {
    /// Guest physical address of its first byte (page-aligned).
    pub addr: u64,
    /// Its length in bytes (whole pages).
    pub len: u64,
}

impl RamRegion {
    /// The first guest address past it.
    pub const fn end(&self) -> u64 {
        self.addr + self.len
    }
}

/// The RAM regions of a guest with `bytes` of RAM, ascending: `[0,
/// bytes)` up to `LOW_RAM_END`, the rest from `HIGH_RAM_START`. RAM
/// offsets (a snapshot's page index counts them) run through the regions
/// in this order.
///
/// # Examples
///
/// ```
/// use vmm::internal::arch::layout::{ram_regions, RamRegion};
/// assert_eq!(ram_regions(64 << 20), [RamRegion { addr: 0, len: 64 << 20 }]);
/// assert_eq!(
///     ram_regions(16 << 30),
///     [
///         RamRegion { addr: 0, len: 3 << 30 },
///         RamRegion { addr: 4 << 30, len: 13 << 30 },
///     ]
/// );
/// ```
pub fn ram_regions(bytes: u64) -> Vec<RamRegion> {
    let low = RamRegion {
        addr: 0,
        len: bytes.min(LOW_RAM_END),
    };
    match bytes.checked_sub(LOW_RAM_END).filter(|&h| h > 0) {
        Some(high) => vec![
            low,
            RamRegion {
                addr: HIGH_RAM_START,
                len: high,
            },
        ],
        None => vec![low],
    }
}

/// The first guest physical address past the RAM of a guest with `bytes`
/// of RAM.
pub fn ram_end(bytes: u64) -> u64 {
    ram_regions(bytes).last().map_or(0, RamRegion::end)
}
/// The three pages `KVM_SET_TSS_ADDR` reserves for Intel VMX's real-mode
/// emulation (a TSS and the identity-map page after it). They must lie below
/// 4 GiB and outside RAM and any MMIO a guest uses: just under the BIOS ROM
/// at the top of the 32-bit space (0xfffb_d000..0xfffc_0000) is where PC
/// VMMs conventionally put them, inside our unbacked MMIO hole. Other
/// vendors ignore the address.
pub const KVM_TSS_ADDR: u64 = 0xfffb_d000;

/// The guest RAM the VMM writes before a booted guest's first instruction,
/// as (address, length): the boot GDT, the boot TSC slot, a bzImage's zero
/// page, `hvm_start_info` with the memory map, the direct entry's page
/// tables and the command line, all in the first 52 KiB. `vmm run` faults
/// these pages in with one system call while KVM's CPUID table is read,
/// instead of a page fault each as the boot writes them (see
/// `vstate::machine::populate_for_write`); present, they are also what
/// KVM's PTE prefetch can map (see [`START_INFO_ADDR`]).
pub const BOOT_DATA: [(u64, u64); 1] = [(0, BOOT_DATA_END)];
/// The end of the boot structures: the command line's room.
const BOOT_DATA_END: u64 = CMDLINE_ADDR + CMDLINE_MAX as u64;
/// Pages in the group KVM's shadow MMU prefetches with a fault.
const PREFETCH_PAGES: u64 = 8;
// Every structure above lies in `BOOT_DATA`, and what a booted guest reads
// (start info, map, module list, command line) in one prefetch group.
const _: () = assert!(
    BOOT_GDT_ADDR + 5 * 8 <= BOOT_TSC_ADDR
        && BOOT_TSC_ADDR + 8 <= START_INFO_ADDR
        && MODLIST_ADDR + 32 <= START_INFO_ADDR + PAGE_SIZE as u64
        && START_INFO_ADDR + PAGE_SIZE as u64 <= BOOT_PAGE_TABLES_ADDR
        && BOOT_PAGE_TABLES_ADDR + 3 * PAGE_SIZE as u64 <= CMDLINE_ADDR
        && START_INFO_ADDR.is_multiple_of(PREFETCH_PAGES * PAGE_SIZE as u64)
        && (BOOT_DATA_END - START_INFO_ADDR) <= PREFETCH_PAGES * PAGE_SIZE as u64
);

/// The pieces of guest memory that `len` bytes of RAM from RAM offset
/// `offset` occupy in `regions` (ascending, as [`ram_regions`] gives
/// them), as (guest address, length): one piece, or more when the range
/// crosses from one region into the next. `None` when the range reaches
/// past the end of RAM.
///
/// # Examples
///
/// ```
/// use vmm::internal::arch::layout::{ram_pieces, ram_regions};
/// let regions = ram_regions(4 << 30);
/// assert_eq!(
///     ram_pieces(&regions, (3 << 30) - 4096, 8192),
///     Some(vec![((3 << 30) - 4096, 4096), (4 << 30, 4096)])
/// );
/// assert_eq!(ram_pieces(&regions, 4 << 30, 1), None);
/// ```
pub fn ram_pieces(regions: &[RamRegion], offset: u64, len: u64) -> Option<Vec<(u64, u64)>> {
    let end = offset.checked_add(len)?;
    let mut pieces = Vec::new();
    let mut base = 0u64;
    for r in regions {
        let (lo, hi) = (offset.max(base), end.min(base + r.len));
        if lo < hi {
            pieces.push((r.addr + (lo - base), hi - lo));
        }
        base += r.len;
    }
    (end <= base).then_some(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The map for 64 MiB, 3 GiB (the most the low region holds), 4, 16
    /// and 64 GiB: low RAM up to the hole, the rest from 4 GiB, nothing in
    /// 3-4 GiB, nothing over KVM's TSS, and the lengths add up to the RAM.
    #[test]
    fn ram_regions_keep_the_32_bit_hole() {
        let low = |len| RamRegion { addr: 0, len };
        let high = |len| RamRegion {
            addr: HIGH_RAM_START,
            len,
        };
        const G: u64 = 1 << 30;
        for (bytes, want) in [
            (64 << 20, vec![low(64 << 20)]),
            (3 * G, vec![low(3 * G)]),
            (4 * G, vec![low(3 * G), high(G)]),
            (16 * G, vec![low(3 * G), high(13 * G)]),
            (64 * G, vec![low(3 * G), high(61 * G)]),
        ] {
            let got = ram_regions(bytes);
            assert_eq!(got, want, "{bytes:#x}");
            assert_eq!(got.iter().map(|r| r.len).sum::<u64>(), bytes);
            for r in &got {
                assert!(r.end() <= LOW_RAM_END || r.addr >= HIGH_RAM_START, "{r:?}");
                assert!(!(r.addr..r.end()).contains(&KVM_TSS_ADDR), "{r:?}");
            }
            assert_eq!(ram_end(bytes), got.last().unwrap().end());
        }
        assert_eq!(ram_end(MAX_MEM_MIB << 20), 1 << 40);
    }

    /// RAM offsets map into the regions in order; a range across the
    /// hole is split at it, one past the end is refused.
    #[test]
    fn ram_offsets_map_across_the_hole() {
        let one = ram_regions(64 << 20);
        assert_eq!(ram_pieces(&one, 4096, 8192), Some(vec![(4096, 8192)]));
        assert_eq!(
            ram_pieces(&one, (64 << 20) - 4096, 4096),
            Some(vec![((64 << 20) - 4096, 4096)])
        );
        assert_eq!(ram_pieces(&one, (64 << 20) - 4096, 8192), None);
        assert_eq!(ram_pieces(&one, u64::MAX, 2), None);
        let two = ram_regions(16 << 30);
        assert_eq!(ram_pieces(&two, 5 << 30, 4096), Some(vec![(6 << 30, 4096)]));
        assert_eq!(
            ram_pieces(&two, LOW_RAM_END - 4096, 3 * 4096),
            Some(vec![(LOW_RAM_END - 4096, 4096), (HIGH_RAM_START, 2 * 4096)])
        );
        assert_eq!(
            ram_pieces(&two, (16 << 30) - 4096, 4096),
            Some(vec![((17 << 30) - 4096, 4096)])
        );
        assert_eq!(ram_pieces(&two, 16 << 30, 4096), None);
        assert_eq!(ram_pieces(&two, 0, 0), Some(vec![]));
    }
}
