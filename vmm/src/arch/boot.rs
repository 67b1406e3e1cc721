//! PVH direct boot: load an ELF kernel with a `XEN_ELFNOTE_PHYS32_ENTRY`
//! note and write `hvm_start_info`, memory map and command line where
//! [`super::layout`] puts them. (The vCPU's entry state is [`super::regs`].)
//!
//! PVH rather than the Linux boot protocol: the guest is our own small ELF
//! kernel, and PVH starts it in 32-bit protected mode with nothing but a
//! start-info pointer, no real-mode setup code and no bzImage header.

use std::io::Cursor;

use linux_loader::configurator::pvh::PvhBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::elf::start_info::{hvm_memmap_table_entry, hvm_start_info};
use linux_loader::loader::elf::{Elf, PvhBootCapability};
use linux_loader::loader::KernelLoader;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use super::layout::{
    CMDLINE_ADDR, CMDLINE_MAX, EBDA_START, HIGHMEM_START, MEMMAP_ADDR, START_INFO_ADDR,
};
use crate::error::{BootError, MemoryError};

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
    /// First byte past the loaded segments.
    pub end: u64,
}

/// Load a PVH ELF kernel into guest memory. `name` names the image in errors.
pub fn load_kernel(
    mem: &GuestMemoryMmap,
    image: &[u8],
    name: &str,
) -> Result<LoadedKernel, BootError> {
    if image.len() < 4 || &image[..4] != b"\x7fELF" {
        return Err(BootError::NotElf {
            image: name.to_string(),
            len: image.len(),
        });
    }
    let mut cursor = Cursor::new(image);
    let result =
        Elf::load(mem, None, &mut cursor, Some(GuestAddress(HIGHMEM_START))).map_err(|source| {
            BootError::ElfLoad {
                image: name.to_string(),
                source,
            }
        })?;
    // linux-loader writes `p_filesz` bytes and only reports `p_memsz`.
    let ram = mem.last_addr().0 + 1;
    if result.kernel_end > ram {
        return Err(BootError::KernelPastRam {
            image: name.to_string(),
            end: result.kernel_end,
            ram,
        });
    }
    match result.pvh_boot_cap {
        PvhBootCapability::PvhEntryPresent(entry) => Ok(LoadedKernel {
            entry: entry.0,
            end: result.kernel_end,
        }),
        found => Err(BootError::NoPvhEntry {
            image: name.to_string(),
            found,
        }),
    }
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
