//! The machine: a KVM VM, its guest RAM and its boot vCPU. What booting
//! and restoring share before they differ in what they put into it.

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::{VcpuFd, VmFd};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use crate::arch::layout::{KVM_TSS_ADDR, MAX_MEM_MIB, MIN_MEM_MIB};
use crate::error::{Error, MemoryError, Result};
use crate::kvm::HostKvm;

/// A VM with guest RAM and its boot vCPU.
pub struct Machine {
    /// Kept open for as long as the vCPU runs.
    pub vm: VmFd,
    /// vCPU 0.
    pub vcpu: VcpuFd,
    /// Guest RAM, one region from address 0.
    pub mem: GuestMemoryMmap,
}

impl Machine {
    /// Create the VM, its RAM (`mem_mib`, slot 0 from address 0) and vCPU 0.
    pub fn create(host: &HostKvm, mem_mib: u64) -> Result<Self> {
        let vm = host.kvm.create_vm().map_err(Error::kvm("KVM_CREATE_VM"))?;
        vm.set_tss_address(KVM_TSS_ADDR as usize)
            .map_err(Error::kvm("KVM_SET_TSS_ADDR"))?;
        let mem = create_ram(&vm, mem_mib)?;
        let vcpu = vm.create_vcpu(0).map_err(Error::kvm("KVM_CREATE_VCPU"))?;
        Ok(Self { vm, vcpu, mem })
    }
}

/// Allocate `mib` MiB of guest RAM and register it with KVM as slot 0.
fn create_ram(vm: &VmFd, mib: u64) -> Result<GuestMemoryMmap> {
    if !(MIN_MEM_MIB..=MAX_MEM_MIB).contains(&mib) {
        return Err(MemoryError::SizeOutOfRange(mib).into());
    }
    let size = (mib << 20) as usize;
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), size)])
        .map_err(|source| MemoryError::Allocate { mib, source })?;
    for (slot, region) in mem.iter().enumerate() {
        let host = mem
            .get_host_address(region.start_addr())
            .map_err(MemoryError::HostMapping)?;
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
