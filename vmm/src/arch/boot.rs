//! PVH direct boot: load an ELF kernel with a `XEN_ELFNOTE_PHYS32_ENTRY`
//! note and write `hvm_start_info`, memory map and command line where
//! `super::layout` puts them. (The vCPU's entry state is `super::regs`.)
//!
//! PVH rather than the Linux boot protocol: the guest is our own small ELF
//! kernel, and PVH starts it in 32-bit protected mode with nothing but a
//! start-info pointer, no real-mode setup code and no bzImage header.

use std::io::Cursor;

use linux_loader::configurator::pvh::PvhBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::elf::start_info::{
    hvm_memmap_table_entry, hvm_modlist_entry, hvm_start_info,
};
use linux_loader::loader::elf::Elf;
use linux_loader::loader::KernelLoader;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use super::elf::{check_image, ImagePlan, ELF_MAGIC};
use super::layout::{
    RamRegion, CMDLINE_ADDR, CMDLINE_MAX, EBDA_START, HIGHMEM_START, MEMMAP_ADDR, MEMMAP_MAX,
    MODLIST_ADDR, START_INFO_ADDR,
};
use super::linux::{self, BzImagePlan, LoadedBzImage};
use crate::arch::error::{BootError, MemoryError};

/// `hvm_start_info.magic`: "xEn3" with the top bit of the last byte set.
const XEN_HVM_START_MAGIC: u32 = 0x336e_c578;
/// E820 type of usable RAM.
const E820_RAM: u32 = 1;
/// E820 type of the legacy VGA/BIOS hole.
const E820_RESERVED: u32 = 2;

/// What a kernel image loads and how it starts: a PVH ELF or a bzImage,
/// checked before any VM exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelPlan {
    /// A PVH ELF (the embedded guest, a Linux `vmlinux`).
    Elf(ImagePlan),
    /// A bzImage, booted by the Linux boot protocol.
    BzImage(BzImagePlan),
}

impl KernelPlan {
    /// The platform the image needs.
    pub fn platform(&self) -> Platform {
        match self {
            KernelPlan::Elf(plan) => Platform::for_image(plan),
            KernelPlan::BzImage(_) => Platform::Pc,
        }
    }

    /// The guest ranges the load writes, to fault in first.
    pub fn load_ranges(&self) -> Vec<(u64, u64)> {
        match self {
            KernelPlan::Elf(plan) => plan.segments.iter().map(|s| (s.paddr, s.filesz)).collect(),
            KernelPlan::BzImage(plan) => vec![(HIGHMEM_START, plan.kernel_bytes)],
        }
    }

    /// The first address an initrd may take: past the kernel, and for a
    /// bzImage past the room it decompresses into.
    pub fn kernel_end(&self) -> u64 {
        match self {
            KernelPlan::Elf(plan) => plan.end,
            KernelPlan::BzImage(plan) => plan.end,
        }
    }

    /// The highest address an initrd may end at.
    pub fn initrd_limit(&self) -> u64 {
        match self {
            KernelPlan::Elf(_) => u64::from(u32::MAX) + 1,
            KernelPlan::BzImage(plan) => plan.initrd_limit,
        }
    }
}

/// A loaded kernel: where it lives and where to start it.
#[derive(Clone, Copy, Debug)]
pub struct LoadedKernel {
    /// The PVH entry point (physical, 32-bit).
    pub entry: u64,
    /// vmm's direct 64-bit entry point, when the image declares one.
    pub entry64: Option<u64>,
    /// First byte past the loaded segments.
    pub end: u64,
    /// A bzImage's 64-bit entry and setup header (PVH ELF: none).
    pub bzimage: Option<LoadedBzImage>,
}

/// The machine a kernel gets. The embedded guest (and any other image)
/// needs nothing but RAM, COM1 (polled) and the protocol's ports; a Linux
/// kernel (one whose Xen guest-OS note says "linux") gets a PC: an
/// in-kernel irqchip and PIT, COM1 on IRQ 4, the MP table, the ACPI
/// tables (`super::acpi`) and the i8042 reset, for any vCPU count (see
/// `crate::vstate::pc`). The embedded
/// guest's machine, and so its start-up cost, stays what it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    /// The embedded guest's machine.
    Minimal,
    /// A PC, as Firecracker and Cloud Hypervisor give a Linux guest.
    Pc,
}

impl Platform {
    /// The platform the image `plan` describes needs.
    pub fn for_image(plan: &ImagePlan) -> Platform {
        if plan.linux {
            Platform::Pc
        } else {
            Platform::Minimal
        }
    }

    /// Its name in a snapshot's `meta.platform`.
    pub fn name(self) -> &'static str {
        match self {
            Platform::Minimal => "minimal",
            Platform::Pc => "pc",
        }
    }

    /// The platform `name` ([`Platform::name`]) names, if any.
    pub fn from_name(name: &str) -> Option<Platform> {
        [Platform::Minimal, Platform::Pc]
            .into_iter()
            .find(|p| p.name() == name)
    }
}

/// Which entry `vmm` may start a kernel at (`vmm run --entry`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EntryChoice {
    /// The direct 64-bit entry when the image declares one (our guest
    /// does), else PVH.
    #[default]
    Auto,
    /// The PVH 32-bit entry, as QEMU, Cloud Hypervisor and Firecracker
    /// start the same image.
    Pvh,
}

/// The entry the boot vCPU starts at, and its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootEntry {
    /// PVH: 32-bit protected mode, paging off (see `super::regs`).
    Pvh(u64),
    /// vmm's direct entry: long mode on the VMM's page tables.
    Direct64(u64),
    /// The Linux boot protocol's 64-bit entry: long mode on the VMM's
    /// page tables, `%rsi` at the zero page.
    Linux64(u64),
}

impl BootEntry {
    /// How reports name it: `pvh` or `direct64`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pvh(_) => "pvh",
            Self::Direct64(_) => "direct64",
            Self::Linux64(_) => "linux64",
        }
    }
}

impl LoadedKernel {
    /// The entry `choice` selects for this kernel.
    pub fn boot_entry(&self, choice: EntryChoice) -> BootEntry {
        if let Some(bz) = &self.bzimage {
            // A bzImage has one entry.
            return BootEntry::Linux64(bz.entry64);
        }
        match (choice, self.entry64) {
            (EntryChoice::Auto, Some(e)) => BootEntry::Direct64(e),
            _ => BootEntry::Pvh(self.entry),
        }
    }
}

/// Load a PVH ELF kernel that [`check_image`] accepted (`plan`) into guest
/// memory. `name` names the image in errors.
///
/// linux-loader copies the segments; the entry point and the end come from
/// the plan, which read the PVH note once under this VMM's rules (the
/// loader keeps the answer of the last `PT_NOTE` segment it sees, whichever
/// holds the note).
pub fn load_kernel(
    mem: &GuestMemoryMmap,
    image: &[u8],
    name: &str,
    plan: &KernelPlan,
) -> Result<LoadedKernel, BootError> {
    let plan = match plan {
        KernelPlan::Elf(plan) => plan,
        KernelPlan::BzImage(_) => {
            let bz = linux::load_bzimage(mem, image, name)?;
            return Ok(LoadedKernel {
                entry: bz.entry64,
                entry64: None,
                end: bz.end,
                bzimage: Some(bz),
            });
        }
    };
    let mut cursor = Cursor::new(image);
    Elf::load(mem, None, &mut cursor, Some(GuestAddress(HIGHMEM_START))).map_err(|source| {
        BootError::ElfLoad {
            image: name.to_string(),
            source,
        }
    })?;
    Ok(placed_kernel(plan))
}

/// The kernel `plan` describes, once its segments are in guest RAM by
/// other means than [`load_kernel`]'s copy (the embedded guest's pages
/// mapped from the executable, see `vstate::machine`).
pub fn placed_kernel(plan: &ImagePlan) -> LoadedKernel {
    LoadedKernel {
        entry: plan.entry,
        entry64: plan.entry64,
        end: plan.end,
        bzimage: None,
    }
}

/// Check a kernel image for a guest with `ram_bytes` of RAM: a PVH ELF
/// (see [`super::elf`]) or a bzImage (see [`super::linux`]), naming the
/// image in the error: done before any VM exists.
pub fn check_kernel(image: &[u8], name: &str, ram_bytes: u64) -> Result<KernelPlan, BootError> {
    if !image.starts_with(ELF_MAGIC) && linux::is_bzimage(image) {
        return linux::check_bzimage(image, ram_bytes)
            .map(KernelPlan::BzImage)
            .map_err(|source| BootError::BzImage {
                image: name.to_string(),
                source,
            });
    }
    check_image(image, ram_bytes)
        .map(KernelPlan::Elf)
        .map_err(|source| BootError::Image {
            image: name.to_string(),
            source,
        })
}

/// Write the command line and, for `kernel`, the zero page (bzImage) or
/// the memory map and `hvm_start_info` (PVH), each naming the initrd at
/// `initrd` (address, size) and the ACPI RSDP at `rsdp` when there are
/// ones.
///
/// # Errors
///
/// A command line too long or holding a NUL, or a write failing.
pub fn write_boot_info(
    mem: &GuestMemoryMmap,
    cmdline: &str,
    kernel: &LoadedKernel,
    initrd: Option<(u64, u64)>,
    rsdp: Option<u64>,
) -> Result<(), MemoryError> {
    if cmdline.len() >= CMDLINE_MAX || cmdline.as_bytes().contains(&0) {
        return Err(MemoryError::Cmdline(cmdline.len()));
    }
    let mut bytes = cmdline.as_bytes().to_vec();
    bytes.push(0);
    mem.write_slice(&bytes, GuestAddress(CMDLINE_ADDR))
        .map_err(|source| MemoryError::Write {
            what: "the command line",
            source,
        })?;

    let regions: Vec<RamRegion> = mem
        .iter()
        .map(|r| RamRegion {
            addr: r.start_addr().0,
            len: r.len(),
        })
        .collect();
    let memmap = memmap(&regions);
    // At most two RAM regions: four entries, far inside their room.
    debug_assert!(memmap.len() <= MEMMAP_MAX);
    if let Some(bz) = &kernel.bzimage {
        let e820: Vec<(u64, u64, u32)> = memmap.iter().map(|e| (e.addr, e.size, e.type_)).collect();
        return linux::write_zero_page(mem, bz, cmdline.len(), initrd, rsdp, &e820);
    }
    let modlist: Vec<hvm_modlist_entry> = initrd
        .map(|(paddr, size)| hvm_modlist_entry {
            paddr,
            size,
            ..Default::default()
        })
        .into_iter()
        .collect();
    let start_info = hvm_start_info {
        magic: XEN_HVM_START_MAGIC,
        version: 1,
        cmdline_paddr: CMDLINE_ADDR,
        memmap_paddr: MEMMAP_ADDR,
        memmap_entries: memmap.len() as u32,
        nr_modules: modlist.len() as u32,
        modlist_paddr: if modlist.is_empty() { 0 } else { MODLIST_ADDR },
        rsdp_paddr: rsdp.unwrap_or(0),
        ..Default::default()
    };
    let mut params = BootParams::new(&start_info, GuestAddress(START_INFO_ADDR));
    params.set_sections(&memmap, GuestAddress(MEMMAP_ADDR));
    if !modlist.is_empty() {
        params.set_modules(&modlist, GuestAddress(MODLIST_ADDR));
    }
    PvhBootConfigurator::write_bootparams::<GuestMemoryMmap>(&params, mem)
        .map_err(MemoryError::BootParams)?;
    Ok(())
}

/// The PVH memory map (E820 types) of guest RAM laid out in `regions`
/// (ascending, the first from address 0): the low region with the legacy
/// VGA/BIOS hole below 1 MiB reserved, then every other region as RAM (the
/// 32-bit hole between them is left out, so the guest sees no RAM there).
fn memmap(regions: &[RamRegion]) -> Vec<hvm_memmap_table_entry> {
    let entry = |addr, size, type_| hvm_memmap_table_entry {
        addr,
        size,
        type_,
        reserved: 0,
    };
    let mut map = Vec::with_capacity(regions.len() + 2);
    for r in regions {
        if r.addr == 0 {
            map.push(entry(0, EBDA_START, E820_RAM));
            map.push(entry(EBDA_START, HIGHMEM_START - EBDA_START, E820_RESERVED));
            map.push(entry(HIGHMEM_START, r.len - HIGHMEM_START, E820_RAM));
        } else {
            map.push(entry(r.addr, r.len, E820_RAM));
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::layout::ram_regions;

    /// A PVH kernel at no address: what `write_boot_info` needs to write
    /// the start info.
    fn no_kernel() -> LoadedKernel {
        LoadedKernel {
            entry: 0,
            entry64: None,
            end: 0,
            bzimage: None,
        }
    }

    /// The map the guest reads for 64 MiB, 3 GiB, 4 GiB and 16 GiB: the
    /// low RAM around the legacy hole, nothing between 3 and 4 GiB, the
    /// rest of RAM from 4 GiB; its RAM adds up to `--mem` less the legacy
    /// hole.
    #[test]
    fn memory_map_for_each_size() {
        const G: u64 = 1 << 30;
        let low = |end: u64| {
            [
                (0, EBDA_START, E820_RAM),
                (EBDA_START, HIGHMEM_START - EBDA_START, E820_RESERVED),
                (HIGHMEM_START, end - HIGHMEM_START, E820_RAM),
            ]
        };
        for (bytes, high) in [
            (64 << 20, None),
            (3 * G, None),
            (4 * G, Some(G)),
            (16 * G, Some(13 * G)),
        ] {
            let got: Vec<(u64, u64, u32)> = memmap(&ram_regions(bytes))
                .iter()
                .map(|e| (e.addr, e.size, e.type_))
                .collect();
            let mut want = low(bytes.min(3 * G)).to_vec();
            want.extend(high.map(|h| (4 * G, h, E820_RAM)));
            assert_eq!(got, want, "{bytes:#x}");
            let ram: u64 = got.iter().filter(|e| e.2 == E820_RAM).map(|e| e.1).sum();
            assert_eq!(ram, bytes - (HIGHMEM_START - EBDA_START));
        }
    }

    /// What the guest finds in its RAM: the map written for a 16 GiB
    /// guest, read back from guest memory.
    #[test]
    fn a_16_gib_guest_gets_its_high_ram_in_the_map() {
        let mem = crate::vstate::machine::allocate_ram(16 << 10).unwrap();
        let kernel = no_kernel();
        write_boot_info(&mem, "quiet", &kernel, None, None).unwrap();
        let n: u32 = mem.read_obj(GuestAddress(START_INFO_ADDR + 0x30)).unwrap();
        assert_eq!(n, 4);
        let last = MEMMAP_ADDR + 3 * 24;
        let addr: u64 = mem.read_obj(GuestAddress(last)).unwrap();
        let size: u64 = mem.read_obj(GuestAddress(last + 8)).unwrap();
        let type_: u32 = mem.read_obj(GuestAddress(last + 16)).unwrap();
        assert_eq!((addr, size, type_), (4 << 30, 13 << 30, E820_RAM));
        // No ACPI tables named: the embedded guest's start info as always.
        let rsdp: u64 = mem.read_obj(GuestAddress(START_INFO_ADDR + 0x20)).unwrap();
        assert_eq!(rsdp, 0);
    }

    /// What a PVH guest reads of the boot data (the start info, the memory
    /// map it names, the command line it names) lies in one aligned group
    /// of eight pages, every page of which up to the last one read is boot
    /// data the VMM writes: KVM's shadow-MMU PTE prefetch then maps them all
    /// with the guest's first fault on any (one fault under kvm_pvm, where
    /// there were three). The largest map fits its room.
    #[test]
    fn what_a_guest_reads_shares_one_prefetch_group() {
        use crate::arch::layout::{BOOT_DATA, PAGE_SIZE};
        let mem = crate::vstate::machine::allocate_ram(64).unwrap();
        let kernel = no_kernel();
        let cmdline = "x".repeat(CMDLINE_MAX - 1);
        write_boot_info(&mem, &cmdline, &kernel, Some((0x40_0000, 4096)), None).unwrap();
        let at = |off: u64| -> u64 { mem.read_obj(GuestAddress(START_INFO_ADDR + off)).unwrap() };
        let entries: u32 = mem.read_obj(GuestAddress(START_INFO_ADDR + 0x30)).unwrap();
        let (cmdline_at, memmap_at, modlist_at) = (at(0x18), at(0x28), at(0x10));
        let read = [
            (START_INFO_ADDR, 0x38),
            (memmap_at, u64::from(entries) * 24),
            (modlist_at, 32),
            (cmdline_at, CMDLINE_MAX as u64),
        ];
        let group = |a: u64| a / (8 * PAGE_SIZE as u64);
        let last = read.iter().map(|(a, len)| a + len - 1).max().unwrap();
        for (a, len) in read {
            assert_eq!(group(a), group(START_INFO_ADDR), "{a:#x}");
            assert_eq!(group(a + len - 1), group(START_INFO_ADDR), "{a:#x}+{len}");
        }
        let group_start = group(START_INFO_ADDR) * 8 * PAGE_SIZE as u64;
        assert!(
            BOOT_DATA
                .iter()
                .any(|&(a, len)| a <= group_start && last < a + len),
            "{group_start:#x}..={last:#x} is not all boot data"
        );
        let largest = memmap(&ram_regions(crate::arch::layout::MAX_MEM_MIB << 20));
        assert!(largest.len() <= MEMMAP_MAX);
    }

    /// A PC guest's start info names the RSDP (`rsdp_paddr`), and the
    /// ACPI tables, at their largest, lie in a range the map reserves:
    /// Linux never takes them for RAM.
    #[test]
    fn the_acpi_tables_are_named_and_reserved() {
        use crate::arch::acpi;
        let mem = crate::vstate::machine::allocate_ram(64).unwrap();
        let kernel = no_kernel();
        write_boot_info(&mem, "quiet", &kernel, None, Some(acpi::RSDP_ADDR)).unwrap();
        let rsdp: u64 = mem.read_obj(GuestAddress(START_INFO_ADDR + 0x20)).unwrap();
        assert_eq!(rsdp, 0xe_0000);
        let end = acpi::ACPI_START + acpi::build(254).unwrap().bytes.len() as u64;
        let map = memmap(&ram_regions(64 << 20));
        assert!(
            map.iter().any(|e| e.type_ == E820_RESERVED
                && e.addr <= acpi::ACPI_START
                && end <= e.addr + e.size),
            "{end:#x}"
        );
    }
}
