//! Guest physical memory: one anonymous RAM region from address 0, and the
//! fixed addresses the boot protocol uses inside it.
//!
//! ```text
//! 0x0000_0500  boot GDT (PVH asks for flat 32-bit segments)
//! 0x0000_6000  hvm_start_info
//! 0x0000_7000  memory map (hvm_memmap_table_entry[])
//! 0x0002_0000  kernel command line (NUL-terminated, < 4 KiB)
//! 0x0010_0000  kernel image (ELF PT_LOAD segments, at their physical addresses)
//! mem_size     end of RAM (at most 3 GiB: the 3-4 GiB hole stays unbacked
//!              so guest MMIO there exits to the VMM)
//! ```

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::VmFd;
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use crate::error::{Error, Result};

pub const BOOT_GDT_ADDR: u64 = 0x500;
pub const START_INFO_ADDR: u64 = 0x6000;
pub const MEMMAP_ADDR: u64 = 0x7000;
pub const CMDLINE_ADDR: u64 = 0x2_0000;
pub const CMDLINE_MAX: usize = 4096;
/// Where the kernel image may start; also the start of "high" RAM in the map.
pub const HIGHMEM_START: u64 = 0x10_0000;
/// End of conventional memory below the VGA/BIOS hole, as PCs report it.
pub const EBDA_START: u64 = 0x9_fc00;
/// Smallest guest that holds the boot structures and a kernel.
pub const MIN_MEM_MIB: u64 = 4;
/// RAM ends below the 32-bit MMIO hole.
pub const MAX_MEM_MIB: u64 = 3 * 1024;
/// First address of the unbacked hole: guest accesses there are MMIO exits.
pub const MMIO_HOLE_START: u64 = MAX_MEM_MIB << 20;

/// Allocate `mib` MiB of guest RAM and register it with KVM as slot 0.
pub fn create(vm: &VmFd, mib: u64) -> Result<GuestMemoryMmap> {
    if !(MIN_MEM_MIB..=MAX_MEM_MIB).contains(&mib) {
        return Err(Error::Memory(format!(
            "--mem {mib} MiB is out of range ({MIN_MEM_MIB}..={MAX_MEM_MIB})"
        )));
    }
    let size = (mib << 20) as usize;
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), size)])
        .map_err(|e| Error::Memory(format!("cannot allocate {mib} MiB: {e}")))?;
    for (slot, region) in mem.iter().enumerate() {
        let host = mem
            .get_host_address(region.start_addr())
            .map_err(|e| Error::Memory(format!("no host mapping for guest RAM: {e}")))?;
        let kvm_region = kvm_userspace_memory_region {
            slot: slot as u32,
            guest_phys_addr: region.start_addr().0,
            memory_size: region.len(),
            userspace_addr: host as u64,
            flags: 0,
        };
        // SAFETY: the region is a live anonymous mapping owned by `mem`, which
        // the caller keeps alive for as long as the VM can run; KVM only
        // accesses it through the guest.
        unsafe { vm.set_user_memory_region(kvm_region) }
            .map_err(Error::kvm("KVM_SET_USER_MEMORY_REGION"))?;
    }
    Ok(mem)
}
