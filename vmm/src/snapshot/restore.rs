//! Restoring a snapshot in a fresh VM.
//!
//! Everything that can be checked is checked before a VM exists: the
//! container (magic, version, checksums, bounds), the decoded sections, and
//! whether this host can hold the state ([`check`]): the saved XCR0 and
//! XSTATE_BV against this KVM's leaf 0xD with
//! [`restorable_on`](xstate::restorable_on) (the logic of
//! `vmm features compare`), the guest's CPUID policy, the xsave image's own
//! consistency, and the component sizes. Only then is the VM built.
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

use kvm_bindings::{
    kvm_debugregs, kvm_mp_state, kvm_msr_entry, kvm_xcr, kvm_xcrs, CpuId, Msrs,
    KVM_MAX_CPUID_ENTRIES,
};
use vm_memory::{Bytes, GuestAddress};
use vm_superio::Serial;
use xstate::{restorable_on, Format, XfeatureMask, XsaveBuf, XsaveInfo};

use super::format::FormatError;
use super::save::{msr_name, SaveContext};
use super::state::{Snapshot, VcpuState};
use crate::cpuid::{self, GuestCpuid};
use crate::devices::{Devices, NoInterrupt, SerialSink};
use crate::error::Error;
use crate::kvm::HostKvm;
use crate::vm::{self, execute, Launch, Machine, RunOutcome};
use crate::xstate_manager::{SyncPolicy, XstateManager};

/// Why a snapshot was not restored (or inspected). Every message names the
/// file.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("cannot read snapshot {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid snapshot: truncated, corrupted, another
    /// format version, or malformed sections.
    #[error("snapshot {}: {source}", path.display())]
    Format {
        path: PathBuf,
        #[source]
        source: FormatError,
    },
    /// The snapshot is valid but this host cannot hold its state.
    #[error("snapshot {} cannot be restored on this host: {reason}", path.display())]
    Incompatible { path: PathBuf, reason: String },
    /// Restoring failed in KVM or the VMM.
    #[error("restoring snapshot {}: {source}", path.display())]
    Vmm {
        path: PathBuf,
        #[source]
        source: Error,
    },
}

/// `vmm restore` options.
pub struct RestoreOptions {
    pub serial: SerialSink,
    pub timeout: Option<Duration>,
    /// `None`: the policy the snapshot was taken with.
    pub xstate_sync: Option<SyncPolicy>,
    /// Snapshot the restored guest again (see `vmm run`).
    pub snapshot_after: Option<Duration>,
    pub snapshot_file: Option<PathBuf>,
}

impl RestoreOptions {
    fn serial_sink(&self) -> SerialSink {
        match self.serial {
            SerialSink::Stdout => SerialSink::Stdout,
            SerialSink::Stderr => SerialSink::Stderr,
            SerialSink::Capture => SerialSink::Capture,
            SerialSink::Null => SerialSink::Null,
        }
    }
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
pub fn load(path: &Path) -> Result<Snapshot, SnapshotError> {
    let bytes = std::fs::read(path).map_err(|source| SnapshotError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Snapshot::from_bytes(&bytes).map_err(|source| SnapshotError::Format {
        path: path.to_path_buf(),
        source,
    })
}

/// What [`check`] established: the state fits this host.
#[derive(Clone, Debug)]
pub struct Checked {
    pub xcr0: XfeatureMask,
    pub xstate_bv: XfeatureMask,
    /// The xsave image in this host's standard format for the guest's
    /// policy, ready for the xstate manager.
    pub standard: XsaveBuf,
    /// The source's standard offsets differed and the image was re-laid out.
    pub relaid: bool,
}

/// Check a decoded snapshot against a host's KVM leaf 0xD, without KVM.
pub fn check(path: &Path, snap: &Snapshot, host: &XsaveInfo) -> Result<Checked, SnapshotError> {
    let malformed = |m: String| SnapshotError::Format {
        path: path.to_path_buf(),
        source: FormatError::Malformed(m),
    };
    let incompatible = |reason: String| SnapshotError::Incompatible {
        path: path.to_path_buf(),
        reason,
    };
    if snap.vcpus.len() != 1 {
        return Err(incompatible(format!(
            "it holds {} vCPUs; this vmm runs guests with one",
            snap.vcpus.len()
        )));
    }
    let v = &snap.vcpus[0];
    let source = snap
        .meta
        .source_info()
        .map_err(|source| SnapshotError::Format {
            path: path.to_path_buf(),
            source,
        })?;
    let xcr0 = XfeatureMask::from_bits(
        v.xcr0()
            .ok_or_else(|| malformed("section \"vcpu0.xcrs\" holds no XCR0".into()))?,
    );
    let image = &v.xstate;
    if image.len() < xstate::buffer::XSAVE_MIN_SIZE {
        return Err(malformed(format!(
            "section \"vcpu0.xstate\" is {} bytes, shorter than an xsave header",
            image.len()
        )));
    }
    let xstate_bv = image.xstate_bv_mask();
    let xss = XfeatureMask::from_bits(v.msr(0xda0).unwrap_or(0));
    // The precise refusal first: what the saved state needs that this host lacks.
    restorable_on(xcr0, xstate_bv, host).map_err(|e| incompatible(e.to_string()))?;
    let policy = snap.meta.policy();
    let missing = policy - host.supported_xcr0();
    if !missing.is_empty() {
        return Err(incompatible(format!(
            "the guest's CPUID policy {policy:#x} offers {}; this host supports {:#x}",
            missing.describe(),
            host.supported_xcr0()
        )));
    }
    let missing = xss - host.supported_xss();
    if !missing.is_empty() {
        return Err(incompatible(format!(
            "IA32_XSS {xss:#x} enables supervisor {}; this host supports {:#x}",
            missing.describe(),
            host.supported_xss()
        )));
    }
    // The image must be what the saver writes: compacted, in-use only,
    // consistent with the saved XCR0 and the source's layout. (The VMM
    // compacts in software, so the source CPU's XSAVEC support is moot.)
    check_compacted(image, &source, xcr0)
        .map_err(|e| malformed(format!("section \"vcpu0.xstate\": {e}")))?;
    for i in xstate_bv.user().iter_indices().filter(|&i| i >= 2) {
        let (s, t) = (source.component_by_index(i), host.component_by_index(i));
        let (Some(s), Some(t)) = (s, t) else { continue };
        if s.size != t.size {
            return Err(incompatible(format!(
                "{} is {} bytes on this host and {} bytes in the snapshot",
                XfeatureMask::from_bits(1 << i).describe(),
                t.size,
                s.size
            )));
        }
    }
    // The guest's policy covers its XCR0 (the manager's images are sized by
    // the policy); a snapshot whose XCR0 exceeds it is inconsistent.
    let layout_mask = policy | xcr0;
    let standard_src = xstate::expand_to_standard(&source, image, layout_mask)
        .map_err(|e| malformed(format!("section \"vcpu0.xstate\": {e}")))?;
    let (standard, relaid) = relayout(&source, host, &standard_src, layout_mask, xstate_bv)
        .map_err(|e| incompatible(format!("re-laying out the xsave image: {e}")))?;
    Ok(Checked {
        xcr0,
        xstate_bv,
        standard,
        relaid,
    })
}

/// Structural checks of a stored compacted image: the format bit, XCOMP_BV
/// within XCR0, XSTATE_BV within XCOMP_BV, zero reserved header bytes, the
/// length of its layout; then the standard image it expands to is
/// validated as KVM would see it (MXCSR reserved bits included).
fn check_compacted(image: &XsaveBuf, source: &XsaveInfo, xcr0: XfeatureMask) -> Result<(), String> {
    let view = image.view();
    let xcomp_bv = view.xcomp_bv();
    if xcomp_bv & xstate::buffer::XCOMP_BV_COMPACTED == 0 {
        return Err("a standard-format image; snapshots store the compacted format".into());
    }
    let comp = XfeatureMask::from_bits(xcomp_bv & !xstate::buffer::XCOMP_BV_COMPACTED);
    let bv = view.xstate_bv_mask();
    if !(comp - xcr0).is_empty() {
        return Err(format!(
            "XCOMP_BV {comp:#x} has components outside XCR0 {xcr0:#x}"
        ));
    }
    if !(bv - comp).is_empty() {
        return Err(format!(
            "XSTATE_BV {bv:#x} has components outside XCOMP_BV {comp:#x}"
        ));
    }
    if !view.header_reserved_is_zero() {
        return Err("reserved xsave header bytes are not zero".into());
    }
    let need = source
        .compacted_size(comp)
        .map_err(|e| format!("compacted layout of {comp:#x}: {e}"))?;
    if (image.len() as u64) < need as u64 {
        return Err(format!(
            "{} bytes, the compacted layout of {comp:#x} needs {need}",
            image.len()
        ));
    }
    let standard = xstate::expand_to_standard(source, image, xcr0).map_err(|e| e.to_string())?;
    xstate::validate(standard.as_bytes(), source, xcr0, XfeatureMask::EMPTY)
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// A standard-format image of `source`'s layout, moved to `target`'s
/// standard offsets. Legacy region and header are common to both.
pub fn relayout(
    source: &XsaveInfo,
    target: &XsaveInfo,
    image: &XsaveBuf,
    mask: XfeatureMask,
    xstate_bv: XfeatureMask,
) -> Result<(XsaveBuf, bool), String> {
    let from = source
        .layout(mask, Format::Standard)
        .map_err(|e| format!("source layout of {mask:#x}: {e}"))?;
    let to = target
        .layout(mask, Format::Standard)
        .map_err(|e| format!("this host's layout of {mask:#x}: {e}"))?;
    if from == to {
        return Ok((image.clone(), false));
    }
    let mut out = XsaveBuf::standard_for(target, mask).map_err(|e| e.to_string())?;
    let head = xstate::buffer::XSAVE_MIN_SIZE;
    out.as_bytes_mut()[..head].copy_from_slice(&image.as_bytes()[..head]);
    for i in xstate_bv.user().iter_indices().filter(|&i| i >= 2) {
        let (Some(r), Some(w)) = (from.range_by_index(i), to.range_by_index(i)) else {
            return Err(format!(
                "component {i} is in use but has no standard offset"
            ));
        };
        if r.len() != w.len() {
            return Err(format!(
                "component {i} is {} bytes here, {} in the snapshot",
                w.len(),
                r.len()
            ));
        }
        out.as_bytes_mut()[w].copy_from_slice(&image.as_bytes()[r]);
    }
    Ok((out, true))
}

/// Load, check and run a snapshot in a new VM.
pub fn restore(path: &Path, opts: RestoreOptions) -> Result<RunOutcome, SnapshotError> {
    let start = Instant::now();
    let snap = load(path)?;
    let vmm_err = |source: Error| SnapshotError::Vmm {
        path: path.to_path_buf(),
        source,
    };
    // System ioctls only (KVM_GET_SUPPORTED_CPUID, ...): no VM yet.
    let host = HostKvm::open().map_err(vmm_err)?;
    let checked = check(path, &snap, &host.xstate.info)?;
    restore_checked(path, snap, checked, host, opts, start)
}

fn restore_checked(
    path: &Path,
    snap: Snapshot,
    checked: Checked,
    host: HostKvm,
    opts: RestoreOptions,
    start: Instant,
) -> Result<RunOutcome, SnapshotError> {
    let launch = build(path, &snap, &checked, &host, &opts, start)?;
    execute(launch).map_err(|source| SnapshotError::Vmm {
        path: path.to_path_buf(),
        source,
    })
}

/// Build the VM of a checked snapshot, ready to run.
pub(crate) fn build(
    path: &Path,
    snap: &Snapshot,
    checked: &Checked,
    host: &HostKvm,
    opts: &RestoreOptions,
    start: Instant,
) -> Result<Launch, SnapshotError> {
    let vmm_err = |source: Error| SnapshotError::Vmm {
        path: path.to_path_buf(),
        source,
    };
    let meta = &snap.meta;
    let v = &snap.vcpus[0];
    let init = if meta.init_xstate == "all" {
        xstate::InitMode::AllOfXcr0
    } else {
        xstate::InitMode::Minimal
    };
    let policy_spec = format!("{:#x}", meta.policy_xcr0);
    let (mut policy, resolved) =
        vm::resolve_policy(host, Some(&policy_spec), init, meta.tsc_khz).map_err(vmm_err)?;

    let machine = Machine::create(host, meta.mem_mib).map_err(vmm_err)?;
    snap.memory
        .apply(|addr, data| {
            machine
                .mem
                .write_slice(data, GuestAddress(addr))
                .map_err(|e| format!("writing {} bytes at {addr:#x}: {e}", data.len()))
        })
        .map_err(|e| vmm_err(Error::Memory(e)))?;

    let tsc_khz = load_vcpu(&machine, v, meta.tsc_khz, &resolved, &mut policy).map_err(vmm_err)?;

    // The xsave image last, through the manager's validation.
    let sync = opts.xstate_sync.unwrap_or(match meta.xstate_sync.as_str() {
        "eager" => SyncPolicy::Eager,
        "eager-compact" => SyncPolicy::EagerCompact,
        _ => SyncPolicy::Lazy,
    });
    let mut xstate = XstateManager::new(sync, host.xstate.info, policy.xcr0, host.xsave2_size);
    xstate
        .replace_standard(&checked.standard)
        .map_err(vmm_err)?;
    xstate.before_run(&machine.vcpu).map_err(vmm_err)?;

    let devices = restored_devices(opts.serial_sink(), meta).map_err(vmm_err)?;
    let snapshot = match &opts.snapshot_file {
        Some(p) => Some(
            SaveContext::new(
                host,
                p.clone(),
                meta.mem_mib,
                meta.cmdline.clone(),
                &policy,
                sync,
                tsc_khz,
                v.cpuid.clone(),
            )
            .map_err(vmm_err)?,
        ),
        None => None,
    };
    if opts.snapshot_after.is_some() && snapshot.is_none() {
        return Err(vmm_err(Error::Policy(
            "--snapshot-after needs --snapshot-file".into(),
        )));
    }
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
    policy: &mut vm::Policy,
) -> crate::Result<u32> {
    let vcpu = &machine.vcpu;
    let table = CpuId::from_entries(&v.cpuid)
        .map_err(|e| Error::Guest(format!("the saved CPUID table does not fit KVM's: {e:?}")))?;
    vcpu.set_cpuid2(&table)
        .map_err(Error::kvm("KVM_SET_CPUID2"))?;
    let effective = vcpu
        .get_cpuid2(KVM_MAX_CPUID_ENTRIES)
        .map_err(Error::kvm("KVM_GET_CPUID2"))?;
    let saved = GuestCpuid {
        cpuid: table,
        ..resolved.clone()
    };
    policy.cpuid_check = Some(cpuid::verify(&saved, &effective));

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
    let mut xcrs = kvm_xcrs::default();
    if v.xcrs.len() > xcrs.xcrs.len() {
        return Err(Error::Xstate(format!(
            "{} saved XCRs; KVM takes at most {}",
            v.xcrs.len(),
            xcrs.xcrs.len()
        )));
    }
    xcrs.nr_xcrs = v.xcrs.len() as u32;
    for (slot, &(xcr, value)) in xcrs.xcrs.iter_mut().zip(&v.xcrs) {
        *slot = kvm_xcr {
            xcr,
            reserved: 0,
            value,
        };
    }
    vcpu.set_xcrs(&xcrs).map_err(Error::kvm("KVM_SET_XCRS"))?;

    let entries: Vec<kvm_msr_entry> = v
        .msrs
        .iter()
        .map(|&(index, data)| kvm_msr_entry {
            index,
            reserved: 0,
            data,
        })
        .collect();
    let msrs = Msrs::from_entries(&entries)
        .map_err(|e| Error::Guest(format!("allocating kvm_msrs: {e:?}")))?;
    let n = vcpu.set_msrs(&msrs).map_err(Error::kvm("KVM_SET_MSRS"))?;
    if n != entries.len() {
        let e = entries[n];
        return Err(Error::Guest(format!(
            "KVM_SET_MSRS refused {} = {:#x} (MSR {:#x})",
            msr_name(e.index),
            e.data,
            e.index
        )));
    }
    if let Some(events) = &v.events {
        vcpu.set_vcpu_events(events)
            .map_err(Error::kvm("KVM_SET_VCPU_EVENTS"))?;
    }
    if let Some(mp_state) = v.mp_state {
        vcpu.set_mp_state(kvm_mp_state { mp_state })
            .map_err(Error::kvm("KVM_SET_MP_STATE"))?;
    }
    if let Some(d) = &v.debugregs {
        let d: kvm_debugregs = *d;
        vcpu.set_debug_regs(&d)
            .map_err(Error::kvm("KVM_SET_DEBUGREGS"))?;
    }
    Ok(tsc_khz)
}

/// The port bus with COM1 in its saved state.
fn restored_devices(sink: SerialSink, meta: &super::state::Meta) -> crate::Result<Devices> {
    let fresh = Devices::new(sink);
    let out = fresh.serial.into_writer();
    let state = vm_superio::serial::SerialState::from(&meta.serial);
    let serial = Serial::from_state(&state, NoInterrupt, vm_superio::serial::NoEvents, out)
        .map_err(|e| Error::Guest(format!("the saved UART state is invalid: {e:?}")))?;
    Ok(Devices {
        serial,
        reports: fresh.reports,
        unhandled_ports: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::Devices;
    use crate::snapshot::save::{self, Trigger};
    use crate::vcpu;
    use xstate::Xfeature;

    /// A standard image with every register of every component of `xcr0`
    /// holding a distinct pattern (x87 control words valid, MXCSR default).
    fn pattern_image(info: &XsaveInfo, xcr0: XfeatureMask) -> XsaveBuf {
        let mut img = XsaveBuf::standard_for(info, xcr0).unwrap();
        let layout = info.layout(xcr0, Format::Standard).unwrap();
        {
            let mut v = img.view_mut();
            v.set_fcw(0x027f);
            v.set_fsw(0x0100);
            v.set_ftw(0xff);
            v.set_mxcsr(0x1f80 | 0x8000);
            for i in 0..8 {
                v.set_st(i, [0x40 + i as u8; 16].map(|b| b ^ 0x5a));
            }
            for i in 0..16 {
                let mut x = [0u8; 16];
                for (k, b) in x.iter_mut().enumerate() {
                    *b = 0x80 ^ ((i as u8) << 4) ^ k as u8;
                }
                v.set_xmm(i, x);
            }
            for c in xcr0.iter_indices().filter(|&i| i >= 2) {
                if let Some(bytes) = v.component_by_index_mut(c, &layout) {
                    for (k, b) in bytes.iter_mut().enumerate() {
                        *b = (c as u8).wrapping_mul(37) ^ (k as u8).wrapping_mul(3) | 1;
                    }
                }
            }
            v.set_xstate_bv(xcr0.bits());
        }
        img
    }

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
        let (mut policy, guest) = vm::resolve_policy(
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
        save::complete_pending_io(&mut m.vcpu).unwrap();
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
            &mut m.vcpu,
            &m.mem,
            &mut xm,
            &devices,
            0,
            Duration::ZERO,
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
            &path,
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

    #[test]
    fn relayout_moves_components_to_the_target_offsets() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../xstate/tests/data");
        let text = std::fs::read_to_string(dir.join("intel-sapphire-rapids.json")).unwrap();
        let spr = xstate::CpuidProfile::from_json(&text)
            .unwrap()
            .xsave_info()
            .unwrap();
        let xcr0 = XfeatureMask::from_bits(0x2e7); // AVX-512 and PKRU
        let img = pattern_image(&spr, xcr0);
        let (same, relaid) = relayout(&spr, &spr, &img, xcr0, xcr0).unwrap();
        assert!(!relaid);
        assert_eq!(same, img);

        // A target without AMX whose PKRU sits 64 bytes further up (and
        // whose sizes say so).
        let mut raw: [xstate::CpuidRegs; 64] = core::array::from_fn(|i| spr.raw_subleaf(i as u32));
        raw[17] = xstate::CpuidRegs::default();
        raw[18] = xstate::CpuidRegs::default();
        raw[0].eax &= !0x60000;
        raw[9].ebx += 64;
        let end = raw[9].ebx + raw[9].eax;
        raw[0].ebx = end;
        raw[0].ecx = end;
        let target =
            XsaveInfo::from_raw(raw).unwrap_or_else(|e| panic!("synthetic target leaf 0xD: {e}"));
        let (moved, relaid) = relayout(&spr, &target, &img, xcr0, xcr0).unwrap();
        assert!(relaid);
        let (from, to) = (
            spr.layout(xcr0, Format::Standard).unwrap(),
            target.layout(xcr0, Format::Standard).unwrap(),
        );
        assert_eq!(&moved.as_bytes()[..576], &img.as_bytes()[..576]);
        for i in xcr0.iter_indices().filter(|&i| i >= 2) {
            let (r, w) = (
                from.range_by_index(i).unwrap(),
                to.range_by_index(i).unwrap(),
            );
            assert_eq!(&moved.as_bytes()[w], &img.as_bytes()[r], "component {i}");
        }
        assert_ne!(from.offset_by_index(9), to.offset_by_index(9));
    }
}
