//! The guest physical memory map: one RAM region from address 0, and the
//! fixed addresses the boot protocol uses inside it. Constants only: RAM
//! itself is created by `vstate::machine`.
//!
//! ```text
//! 0x0000_0500  boot GDT (PVH asks for flat 32-bit segments; the direct
//!              entry's has a 64-bit code segment instead)
//! 0x0000_5000  the direct entry's boot TSC slot (8 bytes)
//! 0x0000_6000  hvm_start_info
//! 0x0000_7000  memory map (hvm_memmap_table_entry[])
//! 0x0000_9000  the direct entry's page tables: PML4, PDPT, PD (3 pages)
//! 0x0002_0000  kernel command line (NUL-terminated, < 4 KiB)
//! 0x0010_0000  kernel image (ELF PT_LOAD segments, at their physical addresses)
//! mem_size     end of RAM (at most 3 GiB: the 3-4 GiB hole stays unbacked
//!              so guest MMIO there exits to the VMM)
//! 0xfffb_d000  three pages for KVM's VMX real-mode TSS (KVM_TSS_ADDR)
//! ```

/// The x86 base page: the unit of guest RAM mappings and of the snapshot's
/// sparse memory.
pub const PAGE_SIZE: usize = 4096;

/// Where the boot GDT lives (PVH asks for flat 32-bit segments).
pub const BOOT_GDT_ADDR: u64 = 0x500;
/// Where a guest started at its direct 64-bit entry writes the TSC of its
/// first instruction (the VMM passes this address in RSI; see
/// [`super::regs`]). Zero until the guest writes it.
pub const BOOT_TSC_ADDR: u64 = 0x5000;
/// The direct entry's identity map: PML4 here, then PDPT and PD in the
/// next two pages (see [`super::paging`]).
pub const BOOT_PAGE_TABLES_ADDR: u64 = 0x9000;
/// How much the direct entry's identity map covers: the first GiB (one PD
/// of 2 MiB pages), enough for the boot structures and any kernel image
/// `--mem` allows to start there.
pub const DIRECT_MAP_END: u64 = 1 << 30;
/// Where `hvm_start_info` lives; the guest finds it in EBX.
pub const START_INFO_ADDR: u64 = 0x6000;
/// Where the `hvm_memmap_table_entry` array lives.
pub const MEMMAP_ADDR: u64 = 0x7000;
/// Where the NUL-terminated kernel command line lives.
pub const CMDLINE_ADDR: u64 = 0x2_0000;
/// Room for the command line, its NUL included.
pub const CMDLINE_MAX: usize = 4096;
/// Where the kernel image may start; also the start of "high" RAM in the map.
pub const HIGHMEM_START: u64 = 0x10_0000;
/// End of conventional memory below the VGA/BIOS hole, as PCs report it.
pub const EBDA_START: u64 = 0x9_fc00;
/// Smallest guest that holds the boot structures and a kernel.
pub const MIN_MEM_MIB: u64 = 4;
/// RAM ends below the 32-bit MMIO hole.
pub const MAX_MEM_MIB: u64 = 3 * 1024;
/// The three pages `KVM_SET_TSS_ADDR` reserves for Intel VMX's real-mode
/// emulation (a TSS and the identity-map page after it). They must lie below
/// 4 GiB and outside RAM and any MMIO a guest uses: just under the BIOS ROM
/// at the top of the 32-bit space (0xfffb_d000..0xfffc_0000) is where PC
/// VMMs conventionally put them, inside our unbacked MMIO hole. Other
/// vendors ignore the address.
pub const KVM_TSS_ADDR: u64 = 0xfffb_d000;

/// The guest RAM the VMM writes before a booted guest's first instruction,
/// as (address, length): the boot GDT, the boot TSC slot, `hvm_start_info`,
/// the memory map and the direct entry's page tables in the first 48 KiB,
/// and the command line. `vmm run` faults these pages in with one system
/// call each while KVM's CPUID table is read, instead of a page fault each
/// as the boot writes them (see `vstate::machine::populate_for_write`).
pub const BOOT_DATA: [(u64, u64); 2] = [(0, BOOT_LOW_END), (CMDLINE_ADDR, CMDLINE_MAX as u64)];
/// The end of the boot structures below the command line.
const BOOT_LOW_END: u64 = BOOT_PAGE_TABLES_ADDR + 3 * PAGE_SIZE as u64;
// Every structure above lies in `BOOT_DATA`.
const _: () = assert!(
    BOOT_GDT_ADDR + 5 * 8 <= BOOT_LOW_END
        && BOOT_TSC_ADDR + 8 <= BOOT_LOW_END
        && START_INFO_ADDR + PAGE_SIZE as u64 <= BOOT_LOW_END
        && MEMMAP_ADDR + PAGE_SIZE as u64 <= BOOT_LOW_END
        && BOOT_LOW_END <= CMDLINE_ADDR
);
