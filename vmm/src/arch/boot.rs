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
use linux_loader::loader::elf::start_info::{hvm_memmap_table_entry, hvm_start_info};
use linux_loader::loader::elf::Elf;
use linux_loader::loader::KernelLoader;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use super::elf::{check_image, ImagePlan};
use super::layout::{
    CMDLINE_ADDR, CMDLINE_MAX, EBDA_START, HIGHMEM_START, MEMMAP_ADDR, START_INFO_ADDR,
};
use crate::arch::error::{BootError, MemoryError};

/// `hvm_start_info.magic`: "xEn3" with the top bit of the last byte set.
const XEN_HVM_START_MAGIC: u32 = 0x336e_c578;
/// E820 type of usable RAM.
const E820_RAM: u32 = 1;
/// E820 type of the legacy VGA/BIOS hole.
const E820_RESERVED: u32 = 2;

/// A loaded kernel: where it lives and where to start it.
#[derive(Clone, Copy, Debug)]
pub struct LoadedKernel {
    /// The PVH entry point (physical, 32-bit).
    pub entry: u64,
    /// vmm's direct 64-bit entry point, when the image declares one.
    pub entry64: Option<u64>,
    /// First byte past the loaded segments.
    pub end: u64,
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
}

impl BootEntry {
    /// How reports name it: `pvh` or `direct64`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pvh(_) => "pvh",
            Self::Direct64(_) => "direct64",
        }
    }
}

impl LoadedKernel {
    /// The entry `choice` selects for this kernel.
    pub fn boot_entry(&self, choice: EntryChoice) -> BootEntry {
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
    plan: &ImagePlan,
) -> Result<LoadedKernel, BootError> {
    let mut cursor = Cursor::new(image);
    Elf::load(mem, None, &mut cursor, Some(GuestAddress(HIGHMEM_START))).map_err(|source| {
        BootError::ElfLoad {
            image: name.to_string(),
            source,
        }
    })?;
    Ok(LoadedKernel {
        entry: plan.entry,
        entry64: plan.entry64,
        end: plan.end,
    })
}

/// Check a kernel image for a guest with `ram_bytes` of RAM (see
/// [`super::elf`]), naming the image in the error: done before any VM
/// exists.
pub fn check_kernel(image: &[u8], name: &str, ram_bytes: u64) -> Result<ImagePlan, BootError> {
    check_image(image, ram_bytes).map_err(|source| BootError::Image {
        image: name.to_string(),
        source,
    })
}

/// Write the command line, memory map and `hvm_start_info`.
pub fn write_boot_info(mem: &GuestMemoryMmap, cmdline: &str) -> Result<(), MemoryError> {
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

    let ram_end = mem.last_addr().0 + 1;
    let memmap = [
        hvm_memmap_table_entry {
            addr: 0,
            size: EBDA_START,
            type_: E820_RAM,
            reserved: 0,
        },
        hvm_memmap_table_entry {
            addr: EBDA_START,
            size: HIGHMEM_START - EBDA_START,
            type_: E820_RESERVED,
            reserved: 0,
        },
        hvm_memmap_table_entry {
            addr: HIGHMEM_START,
            size: ram_end - HIGHMEM_START,
            type_: E820_RAM,
            reserved: 0,
        },
    ];
    let start_info = hvm_start_info {
        magic: XEN_HVM_START_MAGIC,
        version: 1,
        cmdline_paddr: CMDLINE_ADDR,
        memmap_paddr: MEMMAP_ADDR,
        memmap_entries: memmap.len() as u32,
        ..Default::default()
    };
    let mut params = BootParams::new(&start_info, GuestAddress(START_INFO_ADDR));
    params.set_sections(&memmap, GuestAddress(MEMMAP_ADDR));
    PvhBootConfigurator::write_bootparams::<GuestMemoryMmap>(&params, mem)
        .map_err(MemoryError::BootParams)?;
    Ok(())
}
