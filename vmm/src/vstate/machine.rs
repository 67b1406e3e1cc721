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

/// `--hugepages`: ask for transparent huge pages on guest RAM
/// (`MADV_HUGEPAGE` on its anonymous mapping), before the guest touches
/// it. Returns the host range advised.
pub fn advise_hugepages(mem: &GuestMemoryMmap) -> std::io::Result<(u64, u64)> {
    let mut range = (0, 0);
    for region in mem.iter() {
        let host = mem
            .get_host_address(region.start_addr())
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let len = region.len() as usize;
        // SAFETY: advice on a live anonymous mapping owned by `mem`; it
        // changes how pages are backed, never their contents.
        if unsafe { libc::madvise(host.cast(), len, libc::MADV_HUGEPAGE) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        range = (host as u64, len as u64);
    }
    Ok(range)
}

/// KiB of `AnonHugePages` in the `/proc/self/smaps` entries inside
/// `start..start + len`: how much of guest RAM transparent huge pages back.
pub fn anon_huge_kib(start: u64, len: u64) -> std::io::Result<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    Ok(parse_anon_huge_kib(&smaps, start, start + len))
}

/// [`anon_huge_kib`] on the text of a smaps file.
fn parse_anon_huge_kib(smaps: &str, start: u64, end: u64) -> u64 {
    let mut inside = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or_default();
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                inside = a >= start && b <= end;
                continue;
            }
        }
        if let (true, Some(v)) = (inside, line.strip_prefix("AnonHugePages:")) {
            kib += v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap_or(0);
        }
    }
    kib
}

#[cfg(test)]
mod hugepage_tests {
    use super::*;

    #[test]
    fn anon_huge_pages_of_the_ram_range_only() {
        let smaps = "7f0000000000-7f0004000000 rw-p 00000000 00:00 0 \n\
                     Size:              65536 kB\n\
                     AnonHugePages:     61440 kB\n\
                     7f0004000000-7f0004200000 rw-p 00000000 00:00 0 \n\
                     AnonHugePages:      2048 kB\n";
        assert_eq!(
            parse_anon_huge_kib(smaps, 0x7f00_0000_0000, 0x7f00_0400_0000),
            61440
        );
        assert_eq!(
            parse_anon_huge_kib(smaps, 0x7f00_0000_0000, 0x7f00_0420_0000),
            63488
        );
        assert_eq!(parse_anon_huge_kib(smaps, 0x1000, 0x2000), 0);
    }
}
