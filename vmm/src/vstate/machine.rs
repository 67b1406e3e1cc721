//! The machine: a KVM VM, its guest RAM, its boot vCPU and, with
//! `--vcpus N`, its application processors. What booting and restoring
//! share before they differ in what they put into it.

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::{VcpuFd, VmFd};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use crate::arch::layout::{KVM_TSS_ADDR, MAX_MEM_MIB, MIN_MEM_MIB};
use crate::error::{Error, MemoryError, Result};
use crate::kvm::HostKvm;
use crate::xstate_manager::XstateManager;

/// An application processor (vCPU 1..N) and its own xstate manager.
pub struct Ap {
    /// The vCPU (its index is its position in [`Machine::aps`] plus one).
    pub vcpu: VcpuFd,
    /// Its own policy, cache, dirty flag and statistics.
    pub xstate: XstateManager,
}

/// A VM with guest RAM and its boot vCPU.
pub struct Machine {
    /// Kept open for as long as the vCPU runs.
    pub vm: VmFd,
    /// vCPU 0.
    pub vcpu: VcpuFd,
    /// Guest RAM, one region from address 0.
    pub mem: GuestMemoryMmap,
    /// vCPUs 1.. (empty with one vCPU, and after a restore).
    pub aps: Vec<Ap>,
}

impl Machine {
    /// Create the VM, its RAM (`mem_mib`, slot 0 from address 0) and vCPU 0.
    pub fn create(host: &HostKvm, mem_mib: u64) -> Result<Self> {
        let vm = host.kvm.create_vm().map_err(Error::kvm("KVM_CREATE_VM"))?;
        vm.set_tss_address(KVM_TSS_ADDR as usize)
            .map_err(Error::kvm("KVM_SET_TSS_ADDR"))?;
        let mem = create_ram(&vm, mem_mib)?;
        let vcpu = vm.create_vcpu(0).map_err(Error::kvm("KVM_CREATE_VCPU"))?;
        Ok(Self {
            vm,
            vcpu,
            mem,
            aps: Vec::new(),
        })
    }

    /// Create the VM for `vcpus` vCPUs: with more than one, the in-kernel
    /// irqchip first (every vCPU created after it gets a LAPIC), then RAM
    /// and vCPU 0; the APs' fds are returned for the caller to configure
    /// (see [`super::smp`]). One vCPU is exactly [`Machine::create`].
    pub fn create_smp(host: &HostKvm, mem_mib: u64, vcpus: u32) -> Result<(Self, Vec<VcpuFd>)> {
        if vcpus <= 1 {
            return Ok((Self::create(host, mem_mib)?, Vec::new()));
        }
        let vm = host.kvm.create_vm().map_err(Error::kvm("KVM_CREATE_VM"))?;
        vm.set_tss_address(KVM_TSS_ADDR as usize)
            .map_err(Error::kvm("KVM_SET_TSS_ADDR"))?;
        vm.create_irq_chip()
            .map_err(Error::kvm("KVM_CREATE_IRQCHIP"))?;
        let mem = create_ram(&vm, mem_mib)?;
        let vcpu = vm.create_vcpu(0).map_err(Error::kvm("KVM_CREATE_VCPU"))?;
        let aps = (1..vcpus)
            .map(|i| {
                vm.create_vcpu(u64::from(i))
                    .map_err(Error::kvm("KVM_CREATE_VCPU"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((
            Self {
                vm,
                vcpu,
                mem,
                aps: Vec::new(),
            },
            aps,
        ))
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
