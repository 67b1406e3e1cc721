//! The machine: a KVM VM, its guest RAM, its boot vCPU and, with
//! `--vcpus N`, its application processors. What booting and restoring
//! share before they differ in what they put into it.
//!
//! Guest RAM is one anonymous private mapping (vm-memory's, which unmaps
//! it when the machine is dropped). A restore maps the snapshot's stored
//! page runs over parts of it from the snapshot file
//! ([`Machine::create_smp_from_image`]): `mmap(MAP_PRIVATE | MAP_FIXED)` of the
//! file, so a page is read from the file (page cache) only when the guest
//! or the VMM first touches it, and a write copies it, never reaching the
//! file. Start-up then costs one `mmap` per run, not one copy per byte.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::{VcpuFd, VmFd};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

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

/// Most runs of a snapshot that are mapped one `mmap` each: every mapping
/// is a VMA (and splits the anonymous one around it), and a process has at
/// most `vm.max_map_count` (65530 by default). Past this, the smallest runs
/// are read into RAM instead; a guest's touched memory is normally a few
/// hundred runs.
pub const MAX_MAPPED_RUNS: usize = 8192;

/// A snapshot's stored pages as a restore maps them into guest RAM.
pub struct RamImage<'a> {
    /// The snapshot file, open for reading.
    pub file: &'a File,
    /// Each run of pages: (guest address, offset in `file`, length in
    /// bytes), page-aligned, inside RAM, not overlapping.
    pub runs: Vec<(u64, u64, u64)>,
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
    #[cfg(test)]
    pub fn create(host: &HostKvm, mem_mib: u64) -> Result<Self> {
        Self::build(host, mem_mib, None)
    }

    fn build(host: &HostKvm, mem_mib: u64, image: Option<&RamImage<'_>>) -> Result<Self> {
        let vm = host.kvm.create_vm().map_err(Error::kvm("KVM_CREATE_VM"))?;
        vm.set_tss_address(KVM_TSS_ADDR as usize)
            .map_err(Error::kvm("KVM_SET_TSS_ADDR"))?;
        let mem = allocate_ram(mem_mib)?;
        if let Some(image) = image {
            map_image(&mem, image)?;
        }
        register_ram(&vm, &mem)?;
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
    /// (see [`super::smp`]). One vCPU is exactly the VM `vmm` always built (no irqchip).
    pub fn create_smp(host: &HostKvm, mem_mib: u64, vcpus: u32) -> Result<(Self, Vec<VcpuFd>)> {
        Self::build_smp(host, mem_mib, vcpus, None)
    }

    /// [`Machine::create_smp`] with the RAM of a snapshot: zero but for
    /// `image`'s runs, which are mapped privately from its file (see the
    /// module documentation). The file's length is checked to cover every
    /// mapped page right before mapping; a file truncated *after* that is
    /// the user's error: the guest (or the VMM) touching a page past its new
    /// end fails (KVM_RUN returns an error, or the VMM gets SIGBUS). A file
    /// rewritten in place while the guest runs shows its new bytes in the
    /// pages the guest has not yet written: snapshots are written to a new
    /// file and renamed, never rewritten in place, by this vmm.
    pub fn create_smp_from_image(
        host: &HostKvm,
        mem_mib: u64,
        vcpus: u32,
        image: &RamImage<'_>,
    ) -> Result<(Self, Vec<VcpuFd>)> {
        Self::build_smp(host, mem_mib, vcpus, Some(image))
    }

    fn build_smp(
        host: &HostKvm,
        mem_mib: u64,
        vcpus: u32,
        image: Option<&RamImage<'_>>,
    ) -> Result<(Self, Vec<VcpuFd>)> {
        if vcpus <= 1 {
            return Ok((Self::build(host, mem_mib, image)?, Vec::new()));
        }
        let vm = host.kvm.create_vm().map_err(Error::kvm("KVM_CREATE_VM"))?;
        vm.set_tss_address(KVM_TSS_ADDR as usize)
            .map_err(Error::kvm("KVM_SET_TSS_ADDR"))?;
        vm.create_irq_chip()
            .map_err(Error::kvm("KVM_CREATE_IRQCHIP"))?;
        let mem = allocate_ram(mem_mib)?;
        if let Some(image) = image {
            map_image(&mem, image)?;
        }
        register_ram(&vm, &mem)?;
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

/// Allocate `mib` MiB of guest RAM (anonymous, private, not yet touched).
fn allocate_ram(mib: u64) -> Result<GuestMemoryMmap> {
    if !(MIN_MEM_MIB..=MAX_MEM_MIB).contains(&mib) {
        return Err(MemoryError::SizeOutOfRange(mib).into());
    }
    let size = (mib << 20) as usize;
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), size)])
        .map_err(|source| MemoryError::Allocate { mib, source }.into())
}

/// Register guest RAM with KVM, one slot per region.
fn register_ram(vm: &VmFd, mem: &GuestMemoryMmap) -> Result<()> {
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
        // SAFETY: the region is a live mapping owned by `mem`, which the
        // caller keeps alive for as long as the VM can run; KVM only
        // accesses it through the guest.
        unsafe { vm.set_user_memory_region(kvm_region) }
            .map_err(Error::kvm("KVM_SET_USER_MEMORY_REGION"))?;
    }
    Ok(())
}

/// Map `image`'s runs over the fresh RAM `mem` (the largest
/// [`MAX_MAPPED_RUNS`] of them; the rest are read).
fn map_image(mem: &GuestMemoryMmap, image: &RamImage<'_>) -> Result<()> {
    let mut regions = mem.iter();
    let (Some(region), None) = (regions.next(), regions.next()) else {
        return Err(MemoryError::Layout.into());
    };
    if region.start_addr().0 != 0 {
        return Err(MemoryError::Layout.into());
    }
    let ram_len = region.len();
    let page = super::super::snapshot::format::PAGE_SIZE as u64;
    let need = image.runs.iter().map(|&(_, off, len)| off + len).max();
    let len = image
        .file
        .metadata()
        .map_err(|source| MemoryError::MapImage {
            addr: 0,
            len: 0,
            offset: 0,
            source,
        })?
        .len();
    if let Some(need) = need.filter(|&n| n > len) {
        return Err(MemoryError::ImageShrank { len, need }.into());
    }
    for &(addr, offset, len) in &image.runs {
        let aligned = [addr, offset, len].iter().all(|v| v.is_multiple_of(page));
        if !aligned || addr.checked_add(len).is_none_or(|end| end > ram_len) {
            return Err(MemoryError::Layout.into());
        }
    }
    let base = mem
        .get_host_address(GuestAddress(0))
        .map_err(MemoryError::HostMapping)?;
    // The longest runs are mapped; past MAX_MAPPED_RUNS, the rest are read.
    let mut by_len: Vec<usize> = (0..image.runs.len()).collect();
    by_len.sort_by_key(|&i| std::cmp::Reverse(image.runs[i].2));
    let (mapped, read) = by_len.split_at(by_len.len().min(MAX_MAPPED_RUNS));
    for &i in mapped {
        let (addr, offset, len) = image.runs[i];
        let map_err = |source| MemoryError::MapImage {
            addr,
            len,
            offset,
            source,
        };
        // SAFETY: `base + addr .. + len` lies inside the anonymous mapping
        // `mem` owns (checked above against the region's length), page-
        // aligned; the RAM is fresh and not yet registered with KVM, so no
        // reference to those pages exists. MAP_FIXED replaces them with a
        // private mapping of the file, which `mem`'s munmap of the whole
        // range removes on drop with the rest. The file descriptor is
        // valid for the call; the mapping keeps its own reference.
        let got = unsafe {
            libc::mmap(
                base.add(addr as usize).cast(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_NORESERVE,
                image.file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if got == libc::MAP_FAILED {
            return Err(map_err(std::io::Error::last_os_error()).into());
        }
        debug_assert_eq!(got.cast::<u8>(), base.wrapping_add(addr as usize));
    }
    for &i in read {
        let (addr, offset, len) = image.runs[i];
        let mut buf = vec![0u8; len as usize];
        image
            .file
            .read_exact_at(&mut buf, offset)
            .map_err(|source| MemoryError::MapImage {
                addr,
                len,
                offset,
                source,
            })?;
        mem.write_slice(&buf, GuestAddress(addr))
            .map_err(|source| MemoryError::Restore {
                addr,
                len: buf.len(),
                source,
            })?;
    }
    Ok(())
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
