//! The machine: a KVM VM, its guest RAM, its boot vCPU and, with
//! `--vcpus N`, its application processors. What booting and restoring
//! share before they differ in what they put into it.
//!
//! Guest RAM is one anonymous private mapping per region of the memory
//! map ([`crate::arch::layout::ram_regions`]: below the 32-bit hole, and
//! from 4 GiB for the rest; vm-memory's mappings, unmapped when the
//! machine is dropped). A restore puts the snapshot's stored pages into
//! it before the machine is built on it ([`Machine::create_smp_on`],
//! [`crate::snapshot::pager`]). `image` (tests only) maps a file's page
//! runs privately over fresh RAM, as restores once did: the snapshot
//! scan's tests still build file-backed RAM with it.

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use super::smp::Irqchip;
use crate::arch::layout::ram_regions;
use crate::arch::layout::{KVM_TSS_ADDR, MAX_MEM_MIB, MIN_MEM_MIB};
use crate::error::{Error, MemoryError, Result};
use crate::xstate_manager::XstateManager;

mod exe_kernel;
// Restores copy pages in (`crate::snapshot::pager`); the embedded kernel
// is mapped with it (`exe_kernel`), and the snapshot scan's tests build
// file-backed RAM with it.
mod image;
mod ram;

pub(crate) use exe_kernel::place_from_executable;
#[cfg(test)]
pub use image::RamImage;
pub use ram::{host_ranges, regions_of, write_ram};

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
    /// Guest RAM, the regions of [`ram_regions`].
    pub mem: GuestMemoryMmap,
    /// vCPUs 1.. (empty with one vCPU, and after a restore).
    pub aps: Vec<Ap>,
    /// The VM's interrupt hardware (none with one vCPU).
    pub irqchip: Irqchip,
}

impl Machine {
    /// Create the VM, its RAM (`mem_mib`, one slot per region) and vCPU 0.
    #[cfg(test)]
    pub fn create(kvm: &Kvm, mem_mib: u64) -> Result<Self> {
        Ok(Self::create_smp(kvm, mem_mib, 1, Irqchip::Absent)?.0)
    }

    /// Create the VM for `vcpus` vCPUs: the `irqchip` first (every vCPU
    /// created after it gets a LAPIC; [`Irqchip::for_new_vm`] says which a
    /// new VM gets), then the vCPUs and RAM ([`VmWithVcpus`]); the APs'
    /// fds are returned for the caller to configure (see [`super::smp`]).
    pub fn create_smp(
        kvm: &Kvm,
        mem_mib: u64,
        vcpus: u32,
        irqchip: Irqchip,
    ) -> Result<(Self, Vec<VcpuFd>)> {
        Self::create_smp_on(kvm, allocate_ram(mem_mib)?, vcpus, irqchip)
    }

    /// [`Machine::create_smp`] on RAM the caller allocated
    /// ([`allocate_ram`]) and may be filling meanwhile from another thread.
    pub fn create_smp_on(
        kvm: &Kvm,
        mem: GuestMemoryMmap,
        vcpus: u32,
        irqchip: Irqchip,
    ) -> Result<(Self, Vec<VcpuFd>)> {
        VmWithVcpus::create(kvm, mem, vcpus, irqchip)?.register_ram()
    }
}

/// [`Machine::create_smp_on`] in two steps: the VM with its irqchip and
/// vCPUs, then guest RAM registered with [`VmWithVcpus::register_ram`].
///
/// Why two: `vmm run` creates the VM and its vCPUs while another thread
/// reads KVM's CPUID table (`HostKvm::open_overlapping`), and registers RAM
/// only once that thread is done: `KVM_SET_USER_MEMORY_REGION` waits for an
/// SRCU grace period, and that wait took a median 0.71 ms instead of
/// 0.08 ms while the other thread was in `KVM_GET_SUPPORTED_CPUID`
/// (`perf trace`, 20 runs each, kvm_pvm). KVM needs no RAM to create a
/// vCPU.
pub struct VmWithVcpus {
    machine: Machine,
    aps: Vec<VcpuFd>,
}

impl VmWithVcpus {
    /// Create the VM for `vcpus` vCPUs on `mem` (not yet registered): the
    /// `irqchip` first (every vCPU created after it gets a LAPIC), then
    /// vCPU 0 and the APs.
    ///
    /// # Errors
    /// More than one vCPU without LAPICs; KVM refusing the VM, its irqchip
    /// or a vCPU.
    pub fn create(kvm: &Kvm, mem: GuestMemoryMmap, vcpus: u32, irqchip: Irqchip) -> Result<Self> {
        if vcpus > 1 && !irqchip.has_lapics() {
            return Err(Error::Host(format!(
                "{vcpus} vCPUs need in-kernel LAPICs to start; the VM was to have no irqchip"
            )));
        }
        let vm = kvm.create_vm().map_err(Error::kvm("KVM_CREATE_VM"))?;
        vm.set_tss_address(KVM_TSS_ADDR as usize)
            .map_err(Error::kvm("KVM_SET_TSS_ADDR"))?;
        irqchip.create(&vm)?;
        let vcpu = vm.create_vcpu(0).map_err(Error::kvm("KVM_CREATE_VCPU"))?;
        let aps = (1..vcpus.max(1))
            .map(|i| {
                vm.create_vcpu(u64::from(i))
                    .map_err(Error::kvm("KVM_CREATE_VCPU"))
            })
            .collect::<Result<Vec<_>>>()?;
        let machine = Machine {
            vm,
            vcpu,
            mem,
            aps: Vec::new(),
            irqchip,
        };
        Ok(Self { machine, aps })
    }

    /// Guest RAM, one KVM slot per region: the machine, and the APs' fds
    /// for the caller to configure (see [`super::smp`]).
    ///
    /// # Errors
    /// KVM refusing the RAM.
    pub fn register_ram(self) -> Result<(Machine, Vec<VcpuFd>)> {
        register_ram(&self.machine.vm, &self.machine.mem)?;
        Ok((self.machine, self.aps))
    }
}

/// What backs guest RAM beyond plain anonymous memory (`--hugepages`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RamBacking {
    /// Transparent huge pages: `MADV_HUGEPAGE` on the anonymous mapping
    /// (the kernel may or may not find 2 MiB pages; the report says).
    Thp,
    /// hugetlbfs: the mapping is made of 2 MiB pages from the host's
    /// reserved pool (`MAP_HUGETLB | MAP_HUGE_2MB`), all reserved at
    /// `mmap` time, so a short pool is an error before the guest runs, not
    /// a `SIGBUS` later.
    Hugetlbfs,
}

impl RamBacking {
    /// Its name in the report and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            RamBacking::Thp => "thp",
            RamBacking::Hugetlbfs => "hugetlbfs",
        }
    }
}

/// The huge-page size `--hugepages hugetlbfs` maps, MiB.
pub const HUGETLB_PAGE_MIB: u64 = 2;

/// The host's pool of default-size huge pages, from `/proc/meminfo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HugetlbPool {
    /// `HugePages_Total`.
    pub total: u64,
    /// `HugePages_Free`.
    pub free: u64,
    /// `Hugepagesize`, KiB.
    pub page_kib: u64,
}

impl HugetlbPool {
    /// The pool as `/proc/meminfo` shows it now.
    pub fn read() -> std::io::Result<HugetlbPool> {
        let text = std::fs::read_to_string("/proc/meminfo")?;
        Self::parse(&text).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "/proc/meminfo has no HugePages_Total, HugePages_Free or Hugepagesize",
            )
        })
    }

    /// The pool from the text of `/proc/meminfo`.
    pub fn parse(meminfo: &str) -> Option<HugetlbPool> {
        let field = |name: &str| {
            meminfo.lines().find_map(|l| {
                let v = l.strip_prefix(name)?.strip_prefix(':')?;
                v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
            })
        };
        Some(HugetlbPool {
            total: field("HugePages_Total")?,
            free: field("HugePages_Free")?,
            page_kib: field("Hugepagesize")?,
        })
    }

    /// Refuse `mib` MiB when this pool (of 2 MiB pages) is short of it.
    /// A pool of another default size says nothing about the 2 MiB one:
    /// the `mmap` then decides.
    pub fn check(&self, mib: u64) -> std::result::Result<(), MemoryError> {
        let need = mib / HUGETLB_PAGE_MIB;
        if self.page_kib == HUGETLB_PAGE_MIB << 10 && self.free < need {
            return Err(MemoryError::HugetlbShort {
                mib,
                need,
                free: self.free,
                total: self.total,
            });
        }
        Ok(())
    }
}

/// Allocate `mib` MiB of guest RAM backed as `backing` says (`None` and
/// [`RamBacking::Thp`]: anonymous; THP is advised later by the caller).
pub fn allocate_ram_backed(mib: u64, backing: Option<RamBacking>) -> Result<GuestMemoryMmap> {
    match backing {
        Some(RamBacking::Hugetlbfs) => allocate_hugetlb(mib),
        None | Some(RamBacking::Thp) => allocate_ram(mib),
    }
}

/// `mib` MiB of guest RAM in 2 MiB hugetlb pages, checked against the
/// pool first so the error says how many pages to reserve.
fn allocate_hugetlb(mib: u64) -> Result<GuestMemoryMmap> {
    use vm_memory::GuestRegionMmap;
    if !(MIN_MEM_MIB..=MAX_MEM_MIB).contains(&mib) {
        return Err(MemoryError::SizeOutOfRange(mib).into());
    }
    if !mib.is_multiple_of(HUGETLB_PAGE_MIB) {
        return Err(MemoryError::HugetlbSize { mib }.into());
    }
    let pool = HugetlbPool::read().ok();
    if let Some(p) = pool {
        p.check(mib)?;
    }
    let mut regions = Vec::new();
    for r in ram_regions(mib << 20) {
        let region = hugetlb_region(mib, r.len, pool)?;
        regions
            .push(GuestRegionMmap::new(region, GuestAddress(r.addr)).ok_or(MemoryError::Layout)?);
    }
    GuestMemoryMmap::from_regions(regions).map_err(|_| MemoryError::Layout.into())
}

/// One region of `len` bytes of a `mib` MiB hugetlb guest (`pool`: the
/// pool as read before, for the error).
fn hugetlb_region(
    mib: u64,
    len: u64,
    pool: Option<HugetlbPool>,
) -> Result<vm_memory::mmap::MmapRegion<()>> {
    use vm_memory::mmap::{MmapRegionBuilder, MmapRegionError};
    let region = MmapRegionBuilder::new(len as usize)
        .with_mmap_prot(libc::PROT_READ | libc::PROT_WRITE)
        .with_mmap_flags(
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | libc::MAP_HUGE_2MB,
        )
        .with_hugetlbfs(true)
        .build()
        .map_err(|e| match e {
            // The pool shrank since it was read (or its size is not 2 MiB).
            MmapRegionError::Mmap(source) if source.raw_os_error() == Some(libc::ENOMEM) => {
                let now = HugetlbPool::read().ok().or(pool);
                match now {
                    Some(p) => MemoryError::HugetlbShort {
                        mib,
                        need: mib / HUGETLB_PAGE_MIB,
                        free: p.free,
                        total: p.total,
                    },
                    None => MemoryError::Hugetlb { mib, source },
                }
            }
            MmapRegionError::Mmap(source) => MemoryError::Hugetlb { mib, source },
            other => MemoryError::Hugetlb {
                mib,
                source: std::io::Error::other(other),
            },
        })?;
    Ok(region)
}

/// KiB of hugetlb pages (`Private_Hugetlb` + `Shared_Hugetlb` in
/// `/proc/self/smaps`) inside `start..start + len`: how much of guest RAM
/// 2 MiB pages backed by the end of the run (faulted in).
pub fn hugetlb_kib(start: u64, len: u64) -> std::io::Result<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    Ok(
        parse_smaps_kib(&smaps, start, start + len, "Private_Hugetlb:")
            + parse_smaps_kib(&smaps, start, start + len, "Shared_Hugetlb:"),
    )
}

/// Allocate `mib` MiB of guest RAM (anonymous, private, not yet touched;
/// `MAP_NORESERVE`, so the host backs only the pages the guest touches),
/// one mapping per region of [`ram_regions`].
pub fn allocate_ram(mib: u64) -> Result<GuestMemoryMmap> {
    if !(MIN_MEM_MIB..=MAX_MEM_MIB).contains(&mib) {
        return Err(MemoryError::SizeOutOfRange(mib).into());
    }
    let ranges: Vec<_> = ram_regions(mib << 20)
        .iter()
        .map(|r| (GuestAddress(r.addr), r.len as usize))
        .collect();
    GuestMemoryMmap::from_ranges(&ranges)
        .map_err(|source| MemoryError::Allocate { mib, source }.into())
}

/// [`allocate_ram`] with `image`'s runs mapped into it (see `image`): RAM
/// backed by a file, as a restored guest's once was.
#[cfg(test)]
pub fn allocate_ram_from_image(mib: u64, image: &RamImage<'_>) -> Result<GuestMemoryMmap> {
    let mem = allocate_ram(mib)?;
    image::map_image(&mem, image)?;
    Ok(mem)
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

/// `--hugepages`: ask for transparent huge pages on guest RAM
/// (`MADV_HUGEPAGE` on its anonymous mappings), before the guest touches
/// it.
pub fn advise_hugepages(mem: &GuestMemoryMmap) -> std::io::Result<()> {
    for region in mem.iter() {
        let host = mem
            .get_host_address(region.start_addr())
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let len = region.len() as usize;
        // SAFETY: a live anonymous mapping owned by `mem`.
        unsafe { madvise_hugepage(host, len)? };
    }
    Ok(())
}

/// `MADV_HUGEPAGE` on `len` bytes at `addr`: ask for transparent huge
/// pages there, before they are touched. Advice only: contents never change.
///
/// # Safety
/// `addr..addr + len` must be a live anonymous mapping the caller owns.
pub unsafe fn madvise_hugepage(addr: *mut u8, len: usize) -> std::io::Result<()> {
    // SAFETY: the caller's contract; the advice changes how pages are
    // backed, never their contents.
    if unsafe { libc::madvise(addr.cast(), len, libc::MADV_HUGEPAGE) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `MADV_POPULATE_WRITE` (Linux 5.14): fault in the guest RAM pages
/// under `addr..addr + len` for writing with one system call, before the
/// VMM writes them itself (the kernel image).
///
/// Why: here every first touch of an anonymous page is a trap that costs
/// ~1.3 µs (a nested hypervisor takes it), and the kernel image's ~450 KB
/// are ~110 of them, about a tenth of `vmm run`'s start-up. Populating the
/// range allocates and zeroes the same pages without the traps. Advice
/// only: contents are unchanged, and a kernel without it (`EINVAL`) or a
/// range outside RAM is an error the caller may ignore (the copy then
/// faults the pages in as before).
pub fn populate_for_write(
    mem: &GuestMemoryMmap,
    addr: GuestAddress,
    len: u64,
) -> std::io::Result<()> {
    const PAGE: u64 = 4096;
    if len == 0 {
        return Ok(());
    }
    let first = addr.0 & !(PAGE - 1);
    let end = addr
        .0
        .checked_add(len)
        .and_then(|e| e.checked_next_multiple_of(PAGE))
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let span = (end - first) as usize;
    let host = mem
        .get_slice(GuestAddress(first), span)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?
        .ptr_guard_mut()
        .as_ptr();
    // SAFETY: advice on `span` bytes of a live anonymous mapping owned by
    // `mem` (get_slice checked the range lies in one region); populating
    // never changes page contents.
    if unsafe { libc::madvise(host.cast(), span, libc::MADV_POPULATE_WRITE) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// KiB of `AnonHugePages` in the `/proc/self/smaps` entries inside
/// `start..start + len`: how much of guest RAM transparent huge pages back.
pub fn anon_huge_kib(start: u64, len: u64) -> std::io::Result<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    Ok(parse_anon_huge_kib(&smaps, start, start + len))
}

/// [`anon_huge_kib`] on the text of a smaps file.
fn parse_anon_huge_kib(smaps: &str, start: u64, end: u64) -> u64 {
    parse_smaps_kib(smaps, start, end, "AnonHugePages:")
}

/// The `field` (KiB) of the smaps entries inside `start..end`, added.
fn parse_smaps_kib(smaps: &str, start: u64, end: u64, field: &str) -> u64 {
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
        if let (true, Some(v)) = (inside, line.strip_prefix(field)) {
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
mod hugepage_tests;

#[cfg(test)]
mod populate_tests;
