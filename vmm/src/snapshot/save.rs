//! Taking a snapshot of a running VM, between two `KVM_RUN`s.
//!
//! Order: write back an edited xsave image, complete pending I/O
//! (`KVM_RUN` with `immediate_exit` set: KVM finishes the last exit's
//! emulation, e.g. loads an `IN`'s data into RAX or steps RIP past an
//! `OUT`, and returns `EINTR` without entering the guest), then read the
//! vCPU (registers, special registers, XCRs, MSRs, events, MP state, debug
//! registers, the xsave state compacted with only the components in use)
//! and RAM, and write the file under a temporary name renamed into place,
//! so a crash never leaves a half-written snapshot under the final name.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kvm_bindings::{kvm_cpuid_entry2, kvm_msr_entry, Msrs};
use kvm_ioctls::VcpuFd;
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};
use xstate::{CpuidProfile, XsaveInfo};

use super::format::SparseMemory;
use super::state::{Meta, SerialRegs, Snapshot, VcpuState};
use crate::devices::Devices;
use crate::error::{Error, Result};
use crate::kvm::HostKvm;
use crate::vm::Policy;
use crate::xstate_manager::{SyncPolicy, XstateManager};

/// What made the VMM take a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// `--snapshot-after`.
    Time,
    /// The guest wrote `SNAPSHOT_PORT`.
    Guest,
}

impl Trigger {
    pub fn name(self) -> &'static str {
        match self {
            Self::Time => "time",
            Self::Guest => "guest",
        }
    }
}

/// MSRs a 64-bit guest's state lives in, saved where KVM lists them in
/// KVM_GET_MSR_INDEX_LIST. Segment bases FS/GS and EFER also travel in
/// `kvm_sregs`; saving them here too is harmless and keeps the set
/// self-contained. The TSC goes last so it is restored last.
pub const SAVED_MSRS: &[(u32, &str)] = &[
    (0x0000_0174, "IA32_SYSENTER_CS"),
    (0x0000_0175, "IA32_SYSENTER_ESP"),
    (0x0000_0176, "IA32_SYSENTER_EIP"),
    (0x0000_0277, "IA32_PAT"),
    (0x0000_01a0, "IA32_MISC_ENABLE"),
    (0x0000_0da0, "IA32_XSS"),
    (0xc000_0080, "EFER"),
    (0xc000_0081, "STAR"),
    (0xc000_0082, "LSTAR"),
    (0xc000_0083, "CSTAR"),
    (0xc000_0084, "SFMASK"),
    (0xc000_0100, "FS_BASE"),
    (0xc000_0101, "GS_BASE"),
    (0xc000_0102, "KERNEL_GS_BASE"),
    (0xc000_0103, "TSC_AUX"),
    (0x0000_003b, "IA32_TSC_ADJUST"),
    (0x0000_0010, "IA32_TSC"),
];

/// The name of a saved MSR, for messages.
pub fn msr_name(index: u32) -> String {
    SAVED_MSRS
        .iter()
        .find(|(i, _)| *i == index)
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| format!("MSR {index:#x}"))
}

/// Everything a snapshot needs that the run loop does not hold: decided
/// when the VM was built.
pub struct SaveContext {
    pub path: PathBuf,
    pub mem_mib: u64,
    pub cmdline: String,
    pub policy_xcr0: u64,
    pub init_xstate: xstate::InitMode,
    pub xstate_sync: SyncPolicy,
    pub kvm_info: XsaveInfo,
    pub xsave2_size: usize,
    pub tsc_khz: u32,
    pub cpuid: Vec<kvm_cpuid_entry2>,
    /// The MSRs of [`SAVED_MSRS`] this KVM lists.
    pub msrs: Vec<u32>,
}

impl SaveContext {
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

fn kvm_err(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> Error {
    Error::kvm(what)
}

/// Complete the last exit's I/O without entering the guest.
pub fn complete_pending_io(vcpu: &mut VcpuFd) -> Result<()> {
    vcpu.set_kvm_immediate_exit(1);
    let r = vcpu.run().map(|_| ());
    vcpu.set_kvm_immediate_exit(0);
    match r {
        Err(e) if e.errno() == libc::EINTR => Ok(()),
        Err(e) => Err(Error::Kvm {
            what: "KVM_RUN (immediate_exit, completing pending I/O)",
            source: e,
        }),
        Ok(()) => Err(Error::Guest(
            "KVM_RUN with immediate_exit set entered the guest instead of returning EINTR".into(),
        )),
    }
}

/// Read the vCPU's MSRs; those KVM refuses to read are returned apart.
/// (index, value) of the MSRs read, and the indices KVM refused to read.
type MsrValues = (Vec<(u32, u64)>, Vec<u32>);

fn read_msrs(vcpu: &VcpuFd, wanted: &[u32]) -> Result<MsrValues> {
    let mut want: Vec<u32> = wanted.to_vec();
    let mut unreadable = Vec::new();
    loop {
        let entries: Vec<kvm_msr_entry> = want
            .iter()
            .map(|&index| kvm_msr_entry {
                index,
                ..Default::default()
            })
            .collect();
        let mut msrs = Msrs::from_entries(&entries)
            .map_err(|e| Error::Guest(format!("allocating kvm_msrs: {e:?}")))?;
        let n = vcpu.get_msrs(&mut msrs).map_err(kvm_err("KVM_GET_MSRS"))?;
        if n == want.len() {
            let got = msrs.as_slice().iter().map(|e| (e.index, e.data)).collect();
            return Ok((got, unreadable));
        }
        // KVM stops at the first MSR it cannot read: drop it and retry.
        unreadable.push(want.remove(n));
    }
}

/// Capture the VM's state. `vcpu` must be between exits.
#[allow(clippy::too_many_arguments)]
pub fn capture(
    ctx: &SaveContext,
    trigger: Trigger,
    vcpu: &mut VcpuFd,
    mem: &GuestMemoryMmap,
    xstate: &mut XstateManager,
    devices: &Devices,
    exits: u64,
    ran: Duration,
) -> Result<Snapshot> {
    // An edited xsave image must reach KVM before the guest's state is read.
    xstate.before_run(vcpu)?;
    complete_pending_io(vcpu)?;

    let regs = vcpu.get_regs().map_err(kvm_err("KVM_GET_REGS"))?;
    let sregs = vcpu.get_sregs().map_err(kvm_err("KVM_GET_SREGS"))?;
    let xcrs = vcpu.get_xcrs().map_err(kvm_err("KVM_GET_XCRS"))?;
    let xcrs = xcrs
        .xcrs
        .iter()
        .take(xcrs.nr_xcrs as usize)
        .map(|x| (x.xcr, x.value))
        .collect();
    let (msrs, msrs_unreadable) = read_msrs(vcpu, &ctx.msrs)?;
    // Optional state: KVMs without it simply have none to restore.
    let events = vcpu.get_vcpu_events().ok();
    let mp_state = vcpu.get_mp_state().ok().map(|m| m.mp_state);
    let debugregs = vcpu.get_debug_regs().ok();
    let compacted = xstate.state(vcpu)?.clone();

    let memory = encode_memory(mem)?;

    let meta = Meta {
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
        irqchip: "none".into(),
        serial: SerialRegs::from(&devices.serial.state()),
        exits,
        guest_ran_ms: ran.as_secs_f64() * 1e3,
        msrs_unreadable,
    };
    Ok(Snapshot {
        meta,
        memory,
        serial_output: devices.serial_output().to_vec(),
        vcpus: vec![VcpuState {
            id: 0,
            cpuid: ctx.cpuid.clone(),
            regs,
            sregs,
            xcrs,
            msrs,
            events,
            mp_state,
            debugregs,
            xstate: compacted,
        }],
    })
}

/// Guest RAM, sparsely. RAM is one region from address 0 (see
/// [`crate::memory`]); it is read in place, without a copy.
pub fn encode_memory(mem: &GuestMemoryMmap) -> Result<SparseMemory> {
    let mut regions = mem.iter();
    let (Some(region), None) = (regions.next(), regions.next()) else {
        return Err(Error::Memory(
            "snapshots support one RAM region from address 0".into(),
        ));
    };
    if region.start_addr().0 != 0 {
        return Err(Error::Memory(
            "snapshots support one RAM region from address 0".into(),
        ));
    }
    let host = mem
        .get_host_address(region.start_addr())
        .map_err(|e| Error::Memory(format!("no host mapping for guest RAM: {e}")))?;
    // SAFETY: `host` maps the whole region (region.len() bytes) for as long
    // as `mem` lives; the vCPU is stopped, so nothing writes the memory
    // while this shared view exists.
    let bytes = unsafe { std::slice::from_raw_parts(host as *const u8, region.len() as usize) };
    Ok(SparseMemory::encode(bytes))
}

/// Capture the VM and write the snapshot file; returns its path.
#[allow(clippy::too_many_arguments)]
pub fn save(
    ctx: &SaveContext,
    trigger: Trigger,
    vcpu: &mut VcpuFd,
    mem: &GuestMemoryMmap,
    xstate: &mut XstateManager,
    devices: &Devices,
    exits: u64,
    ran: Duration,
) -> Result<PathBuf> {
    let snap = capture(ctx, trigger, vcpu, mem, xstate, devices, exits, ran)?;
    write_file(&ctx.path, &snap.to_bytes())?;
    Ok(ctx.path.clone())
}

/// Write `bytes` to `path` atomically (temporary file, fsync, rename).
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let fail = |e: std::io::Error| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("cannot write snapshot {}: {e}", path.display()),
        ))
    };
    let name = path
        .file_name()
        .ok_or_else(|| fail(std::io::Error::other("the path names no file")))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(())
}
