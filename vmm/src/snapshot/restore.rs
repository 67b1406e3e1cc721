//! Restoring a snapshot in a fresh VM.
//!
//! Everything that can be checked is checked before a VM exists: the
//! container (magic, version, checksums, bounds), the decoded sections, and
//! whether this host can hold the state ([`check`], see [`super::compat`]).
//! Only then is the VM built, and handed to [`crate::vstate`] to run as a
//! booted one would be.
//!
//! The vCPU is loaded in the order KVM needs: CPUID (KVM sizes the guest's
//! xsave state from it), special registers (mode, paging, EFER) before the
//! general registers, XCRs before the xsave image (KVM refuses components
//! the XCR0 in force lacks), MSRs (IA32_XSS before supervisor state; the
//! TSC last), events, MP state, debug registers, and finally the xsave
//! image: the compacted in-use state re-laid out for this host's standard
//! offsets and handed to the xstate manager, which validates it against the
//! guest's XCR0 before `KVM_SET_XSAVE[2]`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kvm_bindings::{kvm_mp_state, CpuId};
use vm_memory::{Bytes, GuestAddress};
use vm_superio::Serial;

pub use super::compat::{check, Checked};
pub use super::error::SnapshotError;
use super::save::SaveContext;
use super::state::{Meta, Snapshot, VcpuState};
use crate::cpuid::{resolve_policy, GuestCpuid, Policy};
use crate::devices::{Devices, NoInterrupt, SerialSink};
use crate::error::{Error, MemoryError, Result, VcpuError};
use crate::kvm::HostKvm;
use crate::vstate::launch::{check_snapshot_options, execute, Launch};
use crate::vstate::machine::Machine;
use crate::vstate::outcome::RunOutcome;
use crate::vstate::vcpu;
use crate::xstate_manager::{SyncPolicy, XstateManager};

/// `vmm restore` options.
pub struct RestoreOptions {
    /// Where the guest's serial output goes from now on.
    pub serial: SerialSink,
    /// Stop the restored guest after this long.
    pub timeout: Option<Duration>,
    /// `None`: the policy the snapshot was taken with.
    pub xstate_sync: Option<SyncPolicy>,
    /// Snapshot the restored guest again (see `vmm run`).
    pub snapshot_after: Option<Duration>,
    /// Where that snapshot goes.
    pub snapshot_file: Option<PathBuf>,
}

impl Default for RestoreOptions {
    fn default() -> Self {
        Self {
            serial: SerialSink::Stdout,
            timeout: Some(Duration::from_secs(600)),
            xstate_sync: None,
            snapshot_after: None,
            snapshot_file: None,
        }
    }
}

/// Read, verify and decode a snapshot file. The file is only read.
pub fn load(path: &Path) -> std::result::Result<Snapshot, SnapshotError> {
    let bytes = std::fs::read(path).map_err(|source| SnapshotError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Snapshot::from_bytes(&bytes).map_err(|source| SnapshotError::Format {
        path: path.to_path_buf(),
        source,
    })
}

/// Load, check and run a snapshot in a new VM.
pub fn restore(
    path: &Path,
    opts: RestoreOptions,
) -> std::result::Result<RunOutcome, SnapshotError> {
    let start = Instant::now();
    let snap = load(path)?;
    let vmm_err = |source: Error| SnapshotError::Vmm {
        path: path.to_path_buf(),
        source,
    };
    // System ioctls only (KVM_GET_SUPPORTED_CPUID, ...): no VM yet.
    let host = HostKvm::open().map_err(vmm_err)?;
    let checked = check(path, &snap, &host.xstate.info)?;
    let launch = build(&snap, &checked, &host, &opts, start).map_err(vmm_err)?;
    execute(launch).map_err(vmm_err)
}

/// Build the VM of a checked snapshot, ready to run.
pub(crate) fn build(
    snap: &Snapshot,
    checked: &Checked,
    host: &HostKvm,
    opts: &RestoreOptions,
    start: Instant,
) -> Result<Launch> {
    check_snapshot_options(opts.snapshot_after, opts.snapshot_file.as_deref())?;
    let meta = &snap.meta;
    let v = &snap.vcpus[0];
    let init = if meta.init_xstate == "all" {
        xstate::InitMode::AllOfXcr0
    } else {
        xstate::InitMode::Minimal
    };
    let policy_spec = format!("{:#x}", meta.policy_xcr0);
    let (mut policy, resolved) = resolve_policy(host, Some(&policy_spec), init, meta.tsc_khz)?;

    let machine = Machine::create(host, meta.mem_mib)?;
    snap.memory.apply(|addr, data| {
        machine
            .mem
            .write_slice(data, GuestAddress(addr))
            .map_err(|source| MemoryError::Restore {
                addr,
                len: data.len(),
                source,
            })
    })?;

    let tsc_khz = load_vcpu(&machine, v, meta.tsc_khz, &resolved, &mut policy)?;

    // The xsave image last, through the manager's validation.
    let sync = opts.xstate_sync.unwrap_or(match meta.xstate_sync.as_str() {
        "eager" => SyncPolicy::Eager,
        "eager-compact" => SyncPolicy::EagerCompact,
        _ => SyncPolicy::Lazy,
    });
    let mut xstate = XstateManager::new(sync, host.xstate.info, policy.xcr0, host.xsave2_size);
    xstate.replace_standard(&checked.standard)?;
    xstate.before_run(&machine.vcpu)?;

    let devices = restored_devices(opts.serial, meta)?;
    let snapshot = match &opts.snapshot_file {
        Some(p) => Some(SaveContext::new(
            host,
            p.clone(),
            meta.mem_mib,
            meta.cmdline.clone(),
            &policy,
            sync,
            tsc_khz,
            v.cpuid.clone(),
        )?),
        None => None,
    };
    Ok(Launch {
        machine,
        devices,
        earlier_serial: snap.serial_output.clone(),
        xstate,
        policy,
        tsc_khz,
        timeout: opts.timeout,
        snapshot_after: opts.snapshot_after,
        snapshot,
        raw: false,
        start,
        setup_time: start.elapsed(),
    })
}

/// Load everything but the xsave image into vCPU 0, in KVM's order.
/// Returns the guest's TSC rate.
fn load_vcpu(
    machine: &Machine,
    v: &VcpuState,
    saved_tsc_khz: u32,
    resolved: &GuestCpuid,
    policy: &mut Policy,
) -> Result<u32> {
    let vcpu = &machine.vcpu;
    // The saved table, checked against the policy it was built from.
    let saved = GuestCpuid {
        cpuid: CpuId::from_entries(&v.cpuid).map_err(VcpuError::CpuidTable)?,
        ..resolved.clone()
    };
    policy.cpuid_check = Some(vcpu::set_cpuid(vcpu, &saved)?);

    // The guest converts cycles with the rate it was told: keep it.
    let mut tsc_khz = vcpu.get_tsc_khz().unwrap_or(0);
    if saved_tsc_khz != 0 && tsc_khz != saved_tsc_khz {
        match vcpu.set_tsc_khz(saved_tsc_khz) {
            Ok(()) => tsc_khz = saved_tsc_khz,
            Err(e) => eprintln!(
                "vmm: warning: the guest's TSC ran at {saved_tsc_khz} kHz, this vCPU's at {tsc_khz} kHz \
                 and KVM_SET_TSC_KHZ failed ({e}): the guest's time measurements will be off"
            ),
        }
    }

    vcpu.set_sregs(&v.sregs)
        .map_err(Error::kvm("KVM_SET_SREGS"))?;
    vcpu.set_regs(&v.regs).map_err(Error::kvm("KVM_SET_REGS"))?;
    vcpu::set_xcrs(vcpu, &v.xcrs)?;
    vcpu::set_msrs(vcpu, &v.msrs)?;
    if let Some(events) = &v.events {
        vcpu.set_vcpu_events(events)
            .map_err(Error::kvm("KVM_SET_VCPU_EVENTS"))?;
    }
    if let Some(mp_state) = v.mp_state {
        vcpu.set_mp_state(kvm_mp_state { mp_state })
            .map_err(Error::kvm("KVM_SET_MP_STATE"))?;
    }
    if let Some(d) = &v.debugregs {
        vcpu.set_debug_regs(d)
            .map_err(Error::kvm("KVM_SET_DEBUGREGS"))?;
    }
    Ok(tsc_khz)
}

/// The port bus with COM1 in its saved state.
fn restored_devices(sink: SerialSink, meta: &Meta) -> Result<Devices> {
    let fresh = Devices::new(sink);
    let out = fresh.serial.into_writer();
    let state = vm_superio::serial::SerialState::from(&meta.serial);
    let serial = Serial::from_state(&state, NoInterrupt, vm_superio::serial::NoEvents, out)
        .map_err(|e| VcpuError::UartState(format!("{e:?}")))?;
    Ok(Devices { serial, ..fresh })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::compat::tests::pattern_image;
    use crate::snapshot::save::{self, Trigger};
    use xstate::{Xfeature, XfeatureMask};

    /// Every bit of the vCPU's extended state survives snapshot and
    /// restore into another VM: XCR0 and the KVM_GET_XSAVE image compared
    /// byte for byte over the guest's standard size.
    #[test]
    fn xsave_state_survives_bit_for_bit() {
        let Ok(host) = HostKvm::open() else {
            if std::env::var("VMM_REQUIRE_KVM").as_deref() == Ok("1") {
                panic!("VMM_REQUIRE_KVM=1 but KVM cannot be opened");
            }
            eprintln!("SKIPPED xsave_state_survives_bit_for_bit: KVM unavailable");
            return;
        };
        let xcr0 = host.xstate.supported_xcr0()
            & (XfeatureMask::LEGACY.with(Xfeature::Avx) | XfeatureMask::AVX512);
        let (mut policy, guest) = resolve_policy(
            &host,
            Some(&format!("{:#x}", xcr0.bits())),
            xstate::InitMode::Minimal,
            0,
        )
        .unwrap();
        let mut m = Machine::create(&host, 8).unwrap();
        m.vcpu.set_cpuid2(&guest.cpuid).unwrap();
        vcpu::set_xcr0(&m.vcpu, xcr0.bits()).unwrap();
        let img = pattern_image(&host.xstate.info, xcr0);
        vcpu::set_xsave(&m.vcpu, &img, host.xsave2_size).unwrap();
        // The reference as KVM holds it once the vCPU has been through
        // KVM_RUN (the CPU's own MXCSR_MASK then appears in the image).
        vcpu::complete_pending_io(&mut m.vcpu).unwrap();
        let reference = vcpu::get_xsave(&m.vcpu, host.xsave2_size).unwrap();
        let n = host.xstate.info.standard_size(xcr0).unwrap() as usize;
        assert_eq!(
            reference.xstate_bv(),
            xcr0.bits(),
            "KVM took every component"
        );

        policy.cpuid_check = None;
        let path = std::env::temp_dir().join(format!("vmm-unit-xsave-{}.snap", std::process::id()));
        let ctx = SaveContext::new(
            &host,
            path.clone(),
            8,
            String::new(),
            &policy,
            SyncPolicy::Lazy,
            0,
            guest.cpuid.as_slice().to_vec(),
        )
        .unwrap();
        let mut xm = XstateManager::new(SyncPolicy::Lazy, host.xstate.info, xcr0, host.xsave2_size);
        let devices = Devices::new(SerialSink::Null);
        let snap = save::capture(
            &ctx,
            Trigger::Guest,
            save::Running {
                vcpu: &mut m.vcpu,
                mem: &m.mem,
                xstate: &mut xm,
                devices: &devices,
                exits: 0,
                ran: Duration::ZERO,
            },
        )
        .unwrap();
        // Stored compacted, in use only: every component is live here.
        assert_eq!(
            snap.vcpus[0].xstate.len() as u32,
            host.xstate.info.compacted_size(xcr0).unwrap()
        );
        let bytes = snap.to_bytes();
        let back = Snapshot::from_bytes(&bytes).unwrap();
        let checked = check(&path, &back, &host.xstate.info).unwrap();
        assert_eq!(checked.xstate_bv, xcr0);
        let launch = build(
            &back,
            &checked,
            &host,
            &RestoreOptions::default(),
            Instant::now(),
        )
        .unwrap();
        let vcpu = &launch.machine.vcpu;
        assert_eq!(vcpu::get_xcr0(vcpu).unwrap(), xcr0.bits());
        let restored = vcpu::get_xsave(vcpu, host.xsave2_size).unwrap();
        let (a, b) = (&reference.as_bytes()[..n], &restored.as_bytes()[..n]);
        if let Some(i) = (0..n).find(|&i| a[i] != b[i]) {
            panic!(
                "xsave byte {i} differs after restore: {:#04x} -> {:#04x}",
                a[i], b[i]
            );
        }
    }
}
