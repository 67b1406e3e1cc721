//! Taking a snapshot of a running VM, between two `KVM_RUN`s.
//!
//! Order: write back an edited xsave image, complete pending I/O
//! (`KVM_RUN` with `immediate_exit` set: KVM finishes the last exit's
//! emulation, e.g. loads an `IN`'s data into RAX or steps RIP past an
//! `OUT`, and returns `EINTR` without entering the guest), then read the
//! vCPU (registers, special registers, XCRs, MSRs, events, MP state, debug
//! registers, the xsave state compacted with only the components in use)
//! and RAM, and write the file through [`crate::output`]: private (0600),
//! under a temporary name in the same directory renamed into place, so a
//! crash never leaves a half-written snapshot under the final name, and
//! never through or over anything but a regular file.
//!
//! The destination is checked before the guest is stopped (directory
//! present and writable, nothing but a regular file at the path, and that
//! only with `force`); the free space is checked against the exact encoded
//! size once RAM is encoded, before anything is written. Every failure is
//! an [`Error::SnapshotWrite`], after which the run loop resumes the guest.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use guest::protocol::SnapshotPhase;
use kvm_bindings::{kvm_cpuid_entry2, kvm_irqchip};
use kvm_ioctls::{VcpuFd, VmFd};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};
use xstate::{CpuidProfile, XsaveInfo};

use super::sparse::PagesInPlace;
use super::state::{IrqchipState, Meta, SerialRegs, Snapshot, VcpuState, IRQCHIP_SECTIONS};
use crate::arch::boot::Platform;
use crate::cpuid::Policy;
use crate::devices::Devices;
use crate::error::{Error, MemoryError, Result};
use crate::kvm::HostKvm;
use crate::output as write;
use crate::vstate::smp::Irqchip;
use crate::vstate::vcpu::{self, SAVED_MSRS};
use crate::vstate::xfd;
use crate::xstate_manager::{SyncPolicy, XstateManager};

mod pages;

use pages::DataPages;

/// The two ways a snapshot asks the kernel which pages of a mapping are
/// populated (`PAGEMAP_SCAN`, and `/proc/self/pagemap` read page by page on
/// older kernels), public for `benches/snapshot_scan.rs`, which times them
/// against other methods: the bench measures this code, and the ioctl's
/// structures are declared once.
#[doc(hidden)]
pub mod scan {
    pub use super::pages::{present_by_read, present_by_scan};
}

/// How a snapshot's stored pages reach its file, as the file's meta,
/// `vmm snapshot info` and `vmm bench snapshot` show it: straight from
/// guest memory with `writev` (see `write_in_place`); the one copy left
/// is the kernel's, into the page cache.
///
/// Why not a copy of our own with the method the copy measurements pick
/// for a large cold copy (`rep movsb`, or non-temporal stores past their
/// crossover)? Such a copy has to land in the file's page cache pages,
/// that is through a shared mapping of the file, and the mapping's page
/// faults cost more than the kernel's whole copy. Measured on the host
/// (`benches/snapshot_copy.rs`, one run on a shared machine), `writev` of
/// a cold buffer wrote 1.7-4.3x faster than a shared mapping filled with
/// `memcpy`, `rep movsb` or AVX-512 non-temporal stores at every size
/// from 64 KiB to 27 MB (1.05-2.2x with the fsync), so no size calls for
/// another method. No copy at all (`O_DIRECT`: the device reads guest
/// memory) was measured too: slower than `writev` below 16 MiB, within 10%
/// of it above once the fsync is counted, and it leaves the file out of
/// the page cache a restore maps it from. Before, the pages were also
/// copied into a chunk buffer, then into the pages section, then into a
/// file image.
pub const MEMORY_WRITE: &str = "writev from guest memory";

/// What made the VMM take a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// `--snapshot-after`.
    Time,
    /// The guest wrote `SNAPSHOT_PORT`.
    Guest,
    /// The guest wrote `SNAPSHOT_PORT` at its point of this phase
    /// (`snapshot=PHASE`): between two rows, so no timed row spans it.
    Point(SnapshotPhase),
}

impl Trigger {
    /// The trigger of a guest's snapshot request: at a point or not.
    pub fn guest(point: Option<SnapshotPhase>) -> Self {
        point.map_or(Self::Guest, Self::Point)
    }

    /// The trigger as `vmm snapshot info` shows it: `time`, `guest`,
    /// `point-start`, `point-mid`, `point-end`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Time => "time",
            Self::Guest => "guest",
            Self::Point(SnapshotPhase::Start) => "point-start",
            Self::Point(SnapshotPhase::Mid) => "point-mid",
            Self::Point(SnapshotPhase::End) => "point-end",
        }
    }

    /// Whether the snapshot named `name` was taken at a guest's point.
    pub fn is_point(name: &str) -> bool {
        SnapshotPhase::ALL
            .into_iter()
            .any(|p| Self::Point(p).name() == name)
    }
}

/// Everything a snapshot needs that the run loop does not hold: decided
/// when the VM was built.
pub struct SaveContext {
    /// Where the snapshot goes.
    pub path: PathBuf,
    /// Replace a regular file already at `path` (`--force`); false after
    /// [`SaveContext::new`].
    pub force: bool,
    /// Guest RAM in MiB.
    pub mem_mib: u64,
    /// The guest's command line as booted.
    pub cmdline: String,
    /// The guest's CPUID xfeature policy.
    pub policy_xcr0: u64,
    /// The initial XSTATE_BV choice the guest booted with.
    pub init_xstate: xstate::InitMode,
    /// The sync policy in force.
    pub xstate_sync: SyncPolicy,
    /// This KVM's leaf 0xD (a target re-lays the image out from it).
    pub kvm_info: XsaveInfo,
    /// This KVM's xsave image size.
    pub xsave2_size: usize,
    /// The guest's TSC rate.
    pub tsc_khz: u32,
    /// The guest's CPUID table as set.
    pub cpuid: Vec<kvm_cpuid_entry2>,
    /// The MSRs of [`SAVED_MSRS`] this KVM lists.
    pub msrs: Vec<u32>,
    /// This KVM lists the XFD MSRs ([`xfd::supported`]).
    pub xfd: bool,
    /// The platform the VM is, for `meta.platform`: a restore rebuilds its
    /// devices (see [`crate::arch::boot::Platform`]).
    pub platform: Platform,
    /// A one-vCPU VM's interrupt hardware, for `meta.irqchip` and
    /// `vcpu0.lapic`: [`Irqchip::Absent`] after [`SaveContext::new`], the
    /// machine's own once its one-vCPU run starts (`run::execute`); a VM of
    /// several vCPUs is saved with its machine's own.
    pub irqchip: Irqchip,
}

impl SaveContext {
    /// Decide what a snapshot of this machine will hold, and which MSRs
    /// this KVM can save.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        host: &HostKvm,
        path: PathBuf,
        mem_mib: u64,
        cmdline: String,
        policy: &Policy,
        xstate_sync: SyncPolicy,
        tsc_khz: u32,
        cpuid: Vec<kvm_cpuid_entry2>,
    ) -> Result<Self> {
        let listed = host
            .kvm
            .get_msr_index_list()
            .map_err(Error::kvm("KVM_GET_MSR_INDEX_LIST"))?;
        let listed = listed.as_slice();
        let msrs = SAVED_MSRS
            .iter()
            .map(|(i, _)| *i)
            .filter(|i| listed.contains(i))
            .collect();
        let xfd = xfd::supported(listed);
        Ok(Self {
            path,
            force: false,
            mem_mib,
            cmdline,
            policy_xcr0: policy.xcr0.bits(),
            init_xstate: policy.init_xstate,
            xstate_sync,
            kvm_info: host.xstate.info,
            xsave2_size: host.xsave2_size,
            tsc_khz,
            cpuid,
            msrs,
            xfd,
            platform: Platform::Minimal,
            irqchip: Irqchip::Absent,
        })
    }
}

/// The parts of a running machine a snapshot reads, lent by the run loop
/// between two exits.
pub struct Running<'a> {
    /// vCPU 0, between exits.
    pub vcpu: &'a mut VcpuFd,
    /// Guest RAM.
    pub mem: &'a GuestMemoryMmap,
    /// The guest's xsave state.
    pub xstate: &'a mut XstateManager,
    /// The port bus (COM1's registers and output).
    pub devices: &'a Devices,
    /// Exits so far.
    pub exits: u64,
    /// How long the guest has run.
    pub ran: Duration,
}

/// Capture the VM's state (the restore tests build their files so).
#[cfg(test)]
pub fn capture(ctx: &SaveContext, trigger: Trigger, vm: Running<'_>) -> Result<Snapshot> {
    let (mut snap, pages) = capture_in_place(ctx, trigger, vm)?;
    snap.memory = pages.to_owned_memory();
    Ok(snap)
}

/// [`capture`] with the stored pages left in guest memory: the snapshot's
/// `memory` holds the index only, the pages are `PagesInPlace`'s slices.
fn capture_in_place<'m>(
    ctx: &SaveContext,
    trigger: Trigger,
    vm: Running<'m>,
) -> Result<(Snapshot, PagesInPlace<'m>)> {
    let Running {
        vcpu,
        mem,
        xstate,
        devices,
        exits,
        ran,
    } = vm;
    let (state, unreadable) = capture_vcpu(ctx, 0, vcpu, xstate, ctx.irqchip.has_lapics())?;

    // After the vCPU: completing its pending I/O may write RAM.
    let pages = scan_memory(mem)?;

    let snap = Snapshot {
        meta: Meta {
            msrs_unreadable: unreadable,
            ..meta(ctx, trigger, devices, exits, ran, 1, ctx.irqchip.name())
        },
        memory: pages.memory.clone(),
        serial_output: devices.serial_output().to_vec(),
        vcpus: vec![state],
        irqchip: None,
    };
    Ok((snap, pages))
}

/// Read one vCPU between two `KVM_RUN`s: complete its pending I/O, then
/// every register set, its xsave state compacted with only the components
/// in use, and (`lapic`: the VM has an in-kernel irqchip) its local APIC.
/// Also returns the listed MSRs KVM would not read.
fn capture_vcpu(
    ctx: &SaveContext,
    id: u32,
    vcpu: &mut VcpuFd,
    xstate: &mut XstateManager,
    lapic: bool,
) -> Result<(VcpuState, Vec<u32>)> {
    // An edited xsave image must reach KVM before the guest's state is read.
    xstate.before_run(vcpu)?;
    vcpu::complete_pending_io(vcpu)?;

    // The boot table is vCPU 0's as set; an AP's carries its APIC ID.
    let mut cpuid = ctx.cpuid.clone();
    if id > 0 {
        crate::vstate::smp::set_apic_id(&mut cpuid, id);
    }
    let regs = vcpu.get_regs().map_err(Error::kvm("KVM_GET_REGS"))?;
    let sregs = vcpu.get_sregs().map_err(Error::kvm("KVM_GET_SREGS"))?;
    let xcrs = vcpu::get_xcrs(vcpu)?;
    let (mut msrs, unreadable) = vcpu::get_msrs(vcpu, &ctx.msrs)?;
    msrs.retain(|&(index, value)| value != 0 || !vcpu::zero_is_unused(index));
    // The rest is read in the order written: KVM is asked for each field
    // as the literal reaches it.
    let state = VcpuState {
        id,
        regs,
        sregs,
        xcrs,
        msrs,
        // Optional state: KVMs without it simply have none to restore.
        events: vcpu.get_vcpu_events().ok(),
        mp_state: vcpu.get_mp_state().ok().map(|m| m.mp_state),
        debugregs: vcpu.get_debug_regs().ok(),
        xfd: xfd::save(vcpu, ctx.xfd)?,
        lapic: if lapic {
            Some(vcpu.get_lapic().map_err(Error::kvm("KVM_GET_LAPIC"))?)
        } else {
            None
        },
        xstate: xstate.state(vcpu)?.clone(),
        cpuid,
    };
    Ok((state, unreadable))
}

/// The `meta` section of a snapshot of `vcpus` vCPUs.
fn meta(
    ctx: &SaveContext,
    trigger: Trigger,
    devices: &Devices,
    exits: u64,
    ran: Duration,
    vcpus: u32,
    irqchip: &str,
) -> Meta {
    Meta {
        vmm_version: env!("CARGO_PKG_VERSION").into(),
        created_unix_s: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        trigger: trigger.name().into(),
        mem_mib: ctx.mem_mib,
        cmdline: ctx.cmdline.clone(),
        policy_xcr0: ctx.policy_xcr0,
        init_xstate: match ctx.init_xstate {
            xstate::InitMode::Minimal => "minimal",
            xstate::InitMode::AllOfXcr0 => "all",
        }
        .into(),
        xstate_sync: ctx.xstate_sync.name().into(),
        kvm_xcr0: ctx.kvm_info.supported_xcr0().bits(),
        kvm_xss: ctx.kvm_info.supported_xss().bits(),
        kvm_leaf_0xd: CpuidProfile::entries_of(&ctx.kvm_info),
        xsave2_size: ctx.xsave2_size as u64,
        tsc_khz: ctx.tsc_khz,
        irqchip: irqchip.into(),
        serial: SerialRegs::from(&devices.com1_state()),
        exits,
        guest_ran_ms: ran.as_secs_f64() * 1e3,
        msrs_unreadable: Vec::new(),
        vcpus,
        memory_write: MEMORY_WRITE.into(),
        platform: ctx.platform.name().into(),
    }
}

/// One vCPU of a paused SMP machine, lent for a snapshot.
pub struct PausedVcpu<'a> {
    /// The vCPU, out of `KVM_RUN`.
    pub vcpu: &'a mut VcpuFd,
    /// Its xsave state.
    pub xstate: &'a mut XstateManager,
}

/// A machine of several vCPUs, every one of them out of `KVM_RUN` (their
/// threads have returned): the consistent point of an SMP snapshot.
pub struct PausedSmp<'a> {
    /// The VM (its irqchip and PIT state).
    pub vm: &'a VmFd,
    /// What interrupt hardware it has.
    pub irqchip: Irqchip,
    /// Every vCPU, in index order.
    pub vcpus: Vec<PausedVcpu<'a>>,
    /// Guest RAM.
    pub mem: &'a GuestMemoryMmap,
    /// The boot processor's port bus (COM1's registers and output).
    pub devices: &'a Devices,
    /// Exits so far (all vCPUs).
    pub exits: u64,
    /// How long the guest has run.
    pub ran: Duration,
}

/// Capture a paused SMP machine: every vCPU (with its LAPIC), with a full
/// irqchip both PICs, the IOAPIC and the PIT when the VM has one, and
/// RAM (the restore tests build their files so).
#[cfg(test)]
pub fn capture_smp(ctx: &SaveContext, trigger: Trigger, vm: PausedSmp<'_>) -> Result<Snapshot> {
    let (mut snap, pages) = capture_smp_in_place(ctx, trigger, vm)?;
    snap.memory = pages.to_owned_memory();
    Ok(snap)
}

/// [`save_smp`]'s capture, with the stored pages left in guest memory (as
/// [`capture_in_place`]).
fn capture_smp_in_place<'m>(
    ctx: &SaveContext,
    trigger: Trigger,
    vm: PausedSmp<'m>,
) -> Result<(Snapshot, PagesInPlace<'m>)> {
    let PausedSmp {
        vm: vm_fd,
        irqchip: kind,
        vcpus,
        mem,
        devices,
        exits,
        ran,
    } = vm;
    let n = vcpus.len() as u32;
    let mut states = Vec::with_capacity(vcpus.len());
    let mut unreadable: Vec<u32> = Vec::new();
    for (id, v) in vcpus.into_iter().enumerate() {
        let (state, missing) = capture_vcpu(ctx, id as u32, v.vcpu, v.xstate, true)?;
        states.push(state);
        for m in missing {
            if !unreadable.contains(&m) {
                unreadable.push(m);
            }
        }
    }
    let chip = |id: u32| -> Result<kvm_irqchip> {
        let mut c = kvm_irqchip {
            chip_id: id,
            ..Default::default()
        };
        vm_fd
            .get_irqchip(&mut c)
            .map_err(Error::kvm("KVM_GET_IRQCHIP"))?;
        Ok(c)
    };
    let irqchip = if kind.has_ioapic() {
        Some(IrqchipState {
            pic_master: chip(IRQCHIP_SECTIONS[0].0)?,
            pic_slave: chip(IRQCHIP_SECTIONS[1].0)?,
            ioapic: chip(IRQCHIP_SECTIONS[2].0)?,
            // No KVM_CREATE_PIT2 here: a VM without a PIT has no state to keep.
            pit: vm_fd.get_pit2().ok(),
            clock: vm_fd.get_clock().ok(),
        })
    } else {
        None
    };
    let pages = scan_memory(mem)?;
    let snap = Snapshot {
        meta: Meta {
            msrs_unreadable: unreadable,
            ..meta(ctx, trigger, devices, exits, ran, n, kind.name())
        },
        memory: pages.memory.clone(),
        serial_output: devices.com1_output(),
        vcpus: states,
        irqchip,
    };
    Ok((snap, pages))
}

/// [`save`] for a paused SMP machine ([`capture_smp_in_place`]).
pub fn save_smp(ctx: &SaveContext, trigger: Trigger, vm: PausedSmp<'_>) -> Result<PathBuf> {
    check_destination(&ctx.path, ctx.force)?;
    let (snap, pages) = capture_smp_in_place(ctx, trigger, vm)?;
    write_in_place(ctx, &snap, &pages)?;
    Ok(ctx.path.clone())
}

/// Guest RAM's stored pages, found in place, region by region (see
/// [`crate::arch::layout`]), counted in RAM offsets. Only the pages that
/// can hold data are scanned for zeros ([`DataPages`]): the cost follows
/// the memory the guest touched, not its size. They are scanned where they
/// are, in guest memory, and the kept ones are neither copied nor moved:
/// the file is written from them ([`write_in_place`]).
fn scan_memory(mem: &GuestMemoryMmap) -> Result<PagesInPlace<'_>> {
    let finder = DataPages::open()?;
    let mut pages = PagesInPlace::new();
    let mut offset = 0u64;
    for region in mem.iter() {
        let ram = region_bytes(mem, region.start_addr(), region.len())?;
        for (start, end) in finder.in_range(ram.as_ptr() as usize, ram.len())? {
            pages.scan_at(offset + start as u64, &ram[start..end]);
        }
        offset += region.len();
    }
    pages.pad_to(offset);
    pages.memory.regions = crate::vstate::machine::regions_of(mem);
    Ok(pages)
}

/// One region of guest RAM (`len` bytes at `addr`) as a byte slice, for
/// the time of a snapshot.
fn region_bytes(mem: &GuestMemoryMmap, addr: GuestAddress, len: u64) -> Result<&[u8]> {
    let size = usize::try_from(len).map_err(|_| MemoryError::Layout)?;
    // vm-memory checks that the whole range lies in the region's mapping.
    let slice = mem
        .get_slice(addr, size)
        .map_err(MemoryError::HostMapping)?;
    let ptr = slice.ptr_guard().as_ptr();
    // SAFETY: `ptr` is the start of `size` bytes of one region's mapping
    // (checked by `get_slice`), readable (guest RAM is mapped read and
    // write), and mapped as long as `mem` is, which the returned borrow
    // cannot outlive. Nothing writes it while the slice lives: a snapshot
    // is taken with every vCPU out of `KVM_RUN` (this thread's, or every
    // thread returned for SMP), after its pending I/O completed, and the
    // devices that write RAM run on the vCPU threads; the slice is dropped
    // before any vCPU runs again (the save returns first).
    Ok(unsafe { std::slice::from_raw_parts(ptr, size) })
}

/// Write the snapshot file: everything but the stored pages from memory
/// ([`Snapshot::head_bytes`]), then the pages straight from guest memory,
/// through [`write::write_with`] (private temporary file, fsync, rename).
/// The only copy of guest memory left is the kernel's, into the page
/// cache: see [`MEMORY_WRITE`].
fn write_in_place(ctx: &SaveContext, snap: &Snapshot, pages: &PagesInPlace<'_>) -> Result<()> {
    let head = snap.head_bytes(pages.len(), pages.crc());
    let size = head.len() as u64 + pages.len();
    write::write_with(&ctx.path, ctx.force, size, |f| {
        write_all_vectored(f, &head, &pages.slices)
    })
    .map_err(|source| Error::SnapshotWrite {
        path: ctx.path.clone(),
        source,
    })?;
    Ok(())
}

/// Most buffers one `writev` takes (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// `head`, then every slice, in order, with as few `writev` calls as
/// `IOV_MAX` and partial writes allow.
fn write_all_vectored(f: &mut std::fs::File, head: &[u8], slices: &[&[u8]]) -> io::Result<()> {
    use std::io::{IoSlice, Write};
    let mut bufs: Vec<IoSlice<'_>> = std::iter::once(head)
        .chain(slices.iter().copied())
        .filter(|b| !b.is_empty())
        .map(IoSlice::new)
        .collect();
    let mut rest = &mut bufs[..];
    while !rest.is_empty() {
        let upto = rest.len().min(IOV_MAX);
        match f.write_vectored(&rest[..upto]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Check that a snapshot can go to `path` (see [`write::check`]): done
/// before a run starts, so a wrong `--snapshot-file` is refused before any
/// guest runs.
pub fn check_destination(path: &Path, force: bool) -> Result<()> {
    write::check(path, force).map_err(|source| Error::SnapshotWrite {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(())
}

/// Capture the VM and write the snapshot file; returns its path. The
/// destination is checked again before the VM is read; an
/// [`Error::SnapshotWrite`] leaves the VM able to resume.
pub fn save(ctx: &SaveContext, trigger: Trigger, vm: Running<'_>) -> Result<PathBuf> {
    check_destination(&ctx.path, ctx.force)?;
    let (snap, pages) = capture_in_place(ctx, trigger, vm)?;
    write_in_place(ctx, &snap, &pages)?;
    Ok(ctx.path.clone())
}

#[cfg(test)]
mod tests;
