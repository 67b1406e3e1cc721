//! Taking a snapshot of a running VM, between two `KVM_RUN`s.
//!
//! Order: write back an edited xsave image, complete pending I/O
//! (`KVM_RUN` with `immediate_exit` set: KVM finishes the last exit's
//! emulation, e.g. loads an `IN`'s data into RAX or steps RIP past an
//! `OUT`, and returns `EINTR` without entering the guest), then read the
//! vCPU (registers, special registers, XCRs, MSRs, events, MP state, debug
//! registers, the xsave state compacted with only the components in use)
//! and RAM, and write the file through [`super::write`]: private (0600),
//! under a temporary name in the same directory renamed into place, so a
//! crash never leaves a half-written snapshot under the final name, and
//! never through or over anything but a regular file.
//!
//! The destination is checked before the guest is stopped (directory
//! present and writable, nothing but a regular file at the path, and that
//! only with `force`); the free space is checked against the exact encoded
//! size once RAM is encoded, before anything is written. Every failure is
//! an [`Error::SnapshotWrite`], after which the run loop resumes the guest.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kvm_bindings::{kvm_cpuid_entry2, kvm_irqchip};
use kvm_ioctls::{VcpuFd, VmFd};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};
use xstate::{CpuidProfile, XsaveInfo};

use super::sparse::SparseMemory;
use super::state::{IrqchipState, Meta, SerialRegs, Snapshot, VcpuState, IRQCHIP_SECTIONS};
use super::write;
use crate::cpuid::Policy;
use crate::devices::Devices;
use crate::error::{Error, MemoryError, Result};
use crate::kvm::HostKvm;
use crate::vstate::vcpu::{self, SAVED_MSRS};
use crate::xstate_manager::{SyncPolicy, XstateManager};

/// How much guest RAM is copied out at a time to be encoded.
const ENCODE_CHUNK: usize = 1 << 20;

/// What made the VMM take a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// `--snapshot-after`.
    Time,
    /// The guest wrote `SNAPSHOT_PORT`.
    Guest,
}

impl Trigger {
    /// The trigger as `vmm snapshot info` shows it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Time => "time",
            Self::Guest => "guest",
        }
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

/// Capture the VM's state.
pub fn capture(ctx: &SaveContext, trigger: Trigger, vm: Running<'_>) -> Result<Snapshot> {
    let Running {
        vcpu,
        mem,
        xstate,
        devices,
        exits,
        ran,
    } = vm;
    let (state, unreadable) = capture_vcpu(ctx, 0, vcpu, xstate, false)?;

    let memory = encode_memory(mem)?;

    Ok(Snapshot {
        meta: Meta {
            msrs_unreadable: unreadable,
            ..meta(ctx, trigger, devices, exits, ran, 1, "none")
        },
        memory,
        serial_output: devices.serial_output().to_vec(),
        vcpus: vec![state],
        irqchip: None,
    })
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

    let regs = vcpu.get_regs().map_err(Error::kvm("KVM_GET_REGS"))?;
    let sregs = vcpu.get_sregs().map_err(Error::kvm("KVM_GET_SREGS"))?;
    let xcrs = vcpu::get_xcrs(vcpu)?;
    let (msrs, unreadable) = vcpu::get_msrs(vcpu, &ctx.msrs)?;
    // Optional state: KVMs without it simply have none to restore.
    let events = vcpu.get_vcpu_events().ok();
    let mp_state = vcpu.get_mp_state().ok().map(|m| m.mp_state);
    let debugregs = vcpu.get_debug_regs().ok();
    let lapic = if lapic {
        Some(vcpu.get_lapic().map_err(Error::kvm("KVM_GET_LAPIC"))?)
    } else {
        None
    };
    let compacted = xstate.state(vcpu)?.clone();
    // The boot table is vCPU 0's as set; an AP's carries its APIC ID.
    let mut cpuid = ctx.cpuid.clone();
    if id > 0 {
        crate::vstate::smp::set_apic_id(&mut cpuid, id);
    }
    let state = VcpuState {
        id,
        cpuid,
        regs,
        sregs,
        xcrs,
        msrs,
        events,
        mp_state,
        debugregs,
        xstate: compacted,
        lapic,
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
        serial: SerialRegs::from(&devices.serial.state()),
        exits,
        guest_ran_ms: ran.as_secs_f64() * 1e3,
        msrs_unreadable: Vec::new(),
        vcpus,
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

/// Capture a paused SMP machine: every vCPU (with its LAPIC), the irqchip
/// (both PICs and the IOAPIC), the PIT when the VM has one, and RAM.
pub fn capture_smp(ctx: &SaveContext, trigger: Trigger, vm: PausedSmp<'_>) -> Result<Snapshot> {
    let PausedSmp {
        vm: vm_fd,
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
    let irqchip = IrqchipState {
        pic_master: chip(IRQCHIP_SECTIONS[0].0)?,
        pic_slave: chip(IRQCHIP_SECTIONS[1].0)?,
        ioapic: chip(IRQCHIP_SECTIONS[2].0)?,
        // No KVM_CREATE_PIT2 here: a VM without a PIT has no state to keep.
        pit: vm_fd.get_pit2().ok(),
    };
    let memory = encode_memory(mem)?;
    Ok(Snapshot {
        meta: Meta {
            msrs_unreadable: unreadable,
            ..meta(ctx, trigger, devices, exits, ran, n, "kvm")
        },
        memory,
        serial_output: devices.serial_output().to_vec(),
        vcpus: states,
        irqchip: Some(irqchip),
    })
}

/// [`save`] for a paused SMP machine ([`capture_smp`]).
pub fn save_smp(ctx: &SaveContext, trigger: Trigger, vm: PausedSmp<'_>) -> Result<PathBuf> {
    check_destination(&ctx.path, ctx.force)?;
    let snap = capture_smp(ctx, trigger, vm)?;
    write::write_atomic(&ctx.path, ctx.force, &snap.to_bytes()).map_err(|source| {
        Error::SnapshotWrite {
            path: ctx.path.clone(),
            source,
        }
    })?;
    Ok(ctx.path.clone())
}

/// Guest RAM, sparsely. RAM is one region from address 0 (see
/// [`crate::arch::layout`]); it is read through vm-memory's bounds-checked
/// accessors a chunk at a time.
fn encode_memory(mem: &GuestMemoryMmap) -> Result<SparseMemory> {
    let mut regions = mem.iter();
    let (Some(region), None) = (regions.next(), regions.next()) else {
        return Err(MemoryError::Layout.into());
    };
    if region.start_addr().0 != 0 {
        return Err(MemoryError::Layout.into());
    }
    let size = region.len() as usize;
    let mut sparse = SparseMemory::empty();
    let mut chunk = vec![0u8; ENCODE_CHUNK.min(size)];
    for addr in (0..size).step_by(ENCODE_CHUNK) {
        let len = ENCODE_CHUNK.min(size - addr);
        let buf = &mut chunk[..len];
        mem.read_slice(buf, GuestAddress(addr as u64))
            .map_err(|source| MemoryError::Read {
                addr: addr as u64,
                len,
                source,
            })?;
        sparse.append(buf);
    }
    Ok(sparse)
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
    let snap = capture(ctx, trigger, vm)?;
    write::write_atomic(&ctx.path, ctx.force, &snap.to_bytes()).map_err(|source| {
        Error::SnapshotWrite {
            path: ctx.path.clone(),
            source,
        }
    })?;
    Ok(ctx.path.clone())
}
