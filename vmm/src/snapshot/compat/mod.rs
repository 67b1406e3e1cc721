//! Is a snapshot valid, and can this host hold its state? THE validation
//! of a decoded snapshot, shared by `vmm snapshot info` and `vmm restore`
//! ([`validate`]). Both open the file the same way first
//! ([`super::load::open`]: every section's length bounded by its kind
//! before anything is read, the stored pages left in the file), then call
//! this, so they give the same verdict in the same words, and `restore`
//! never creates a VM for a state it would refuse later.
//!
//! Every field of every section is checked against the architecture, the
//! vCPU's own CPUID table and this host, with the rules KVM applies when
//! the restore loads it (`KVM_SET_CPUID2`, `KVM_SET_SREGS`,
//! `KVM_SET_MSRS`, `KVM_SET_VCPU_EVENTS`, `KVM_SET_MP_STATE`,
//! `KVM_SET_DEBUGREGS`, `KVM_SET_XCRS`, `KVM_SET_XSAVE`, `KVM_SET_LAPIC`,
//! `KVM_SET_IRQCHIP`, `KVM_SET_PIT2`) and those a VM entry applies later.
//! The verdict is one of three:
//!
//! - refused, naming one field (`section.field`):
//!   [`SnapshotError::Invalid`] when no host accepts it (a reserved bit, a
//!   state that contradicts itself or its CPUID), or
//!   [`SnapshotError::Incompatible`] when this host lacks what it needs
//!   (a component, an MSR KVM does not list, more vCPUs than KVM allows);
//! - restorable ([`Checked::must_try`] empty);
//! - restore must try ([`Checked::must_try`] lists why): nothing breaks a
//!   rule this vmm can check, but whether KVM takes a field depends on
//!   what only KVM knows (a CR4 or EFER feature the vCPU's CPUID offers
//!   and this KVM's supported CPUID does not report: KVM decides from the
//!   host CPU and its own version).
//!
//! The rules live in one module per section: `meta` (and the vCPU count,
//! the irqchip), `cpu` (the CPUID table), `sregs` (control, segment and
//! general registers), `msrs` (MSRs, XCRs, XFD), `events` (events, MP
//! state, debug registers), `chips` (LAPIC, PICs, IOAPIC, PIT), `xsave`
//! (XCR0 and the xsave image, re-laid out for this host).

use std::path::Path;

use xstate::{InitMode, XfeatureMask, XsaveBuf};

use super::error::SnapshotError;
use super::state::Snapshot;
use crate::cpuid::{resolve_policy, GuestCpuid, Policy};
use crate::kvm::HostKvm;
use crate::vstate::smp::Irqchip;
use crate::xstate_manager::SyncPolicy;

mod chips;
mod cpu;
mod events;
mod fault;
mod host;
mod image;
mod meta;
mod msrs;
mod sregs;
mod xsave;

pub(crate) use fault::Fault;
pub use host::HostFacts;
pub use xsave::VcpuChecked;
#[cfg(test)]
pub(crate) use xsave::CR4_OSXSAVE;

/// What [`check`] established: the state is valid and fits this host.
/// The xstate fields are vCPU 0's; [`Checked::vcpus`] has every vCPU's.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The guest's XCR0 as saved.
    pub xcr0: XfeatureMask,
    /// The components in use in the saved image.
    pub xstate_bv: XfeatureMask,
    /// The xsave image in this host's standard format for the guest's
    /// policy, ready for the xstate manager.
    pub standard: XsaveBuf,
    /// The source's standard offsets differed and the image was re-laid out.
    pub relaid: bool,
    /// The vCPU's initial-xstate mode (`meta.init_xstate`).
    pub init: InitMode,
    /// The xstate sync policy the snapshot was taken with (`meta.xstate_sync`).
    pub sync: SyncPolicy,
    /// Every vCPU's checks, in index order (the fields above are vCPU 0's).
    pub vcpus: Vec<VcpuChecked>,
    /// The interrupt hardware the VM had (`meta.irqchip`), which the
    /// restore rebuilds.
    pub irqchip: Irqchip,
    /// What only KVM can tell, as `field: why` (empty: restorable). The
    /// restore goes ahead and KVM decides.
    pub must_try: Vec<String>,
}

/// What [`validate`] established, consumed by the restore: the checked state
/// and the guest CPUID its policy resolves to on this KVM.
#[derive(Clone, Debug)]
pub struct Validated {
    /// The state checks.
    pub checked: Checked,
    /// The guest's xstate policy on this host.
    pub policy: Policy,
    /// The CPUID table that policy resolves to (the saved table is loaded;
    /// this one is what KVM's answer is compared with).
    pub guest: GuestCpuid,
}

/// THE validation of a decoded snapshot against this host, without a VM:
/// `vmm snapshot info` reports its answer, `vmm restore` consumes it.
///
/// # Errors
///
/// [`SnapshotError::Invalid`] or [`SnapshotError::Incompatible`] naming
/// the field; [`SnapshotError::Vmm`] when KVM cannot be asked.
pub fn validate(path: &Path, snap: &Snapshot, host: &HostKvm) -> Result<Validated, SnapshotError> {
    let facts = HostFacts::of(host).map_err(|source| SnapshotError::Vmm {
        path: path.to_path_buf(),
        source,
    })?;
    let checked = check(path, snap, &facts)?;
    let spec = format!("{:#x}", snap.meta.policy_xcr0);
    let (policy, guest) = resolve_policy(host, Some(&spec), checked.init, snap.meta.tsc_khz)
        .map_err(|e| SnapshotError::Incompatible {
            path: path.to_path_buf(),
            reason: format!("meta.policy_xcr0: the guest's CPUID policy: {e}"),
        })?;
    Ok(Validated {
        checked,
        policy,
        guest,
    })
}

/// Check a decoded snapshot against a host's facts, without KVM: the
/// `meta` fields and the VM's shape, then every vCPU (its xstate first,
/// then its CPUID table, registers, MSRs, events and LAPIC), then the
/// VM's interrupt controllers. A pure function (no ioctl).
///
/// # Errors
///
/// [`SnapshotError::Invalid`] or [`SnapshotError::Incompatible`] naming
/// the first field that breaks a rule.
pub fn check(path: &Path, snap: &Snapshot, host: &HostFacts) -> Result<Checked, SnapshotError> {
    let mut must_try = Vec::new();
    let shape = meta::check(snap, host).map_err(|f| f.at(path))?;
    let mut vcpus = Vec::with_capacity(snap.vcpus.len());
    for v in &snap.vcpus {
        let c = xsave::check_vcpu(v, &shape.source, snap.meta.policy(), host)
            .map_err(|f| f.at(path))?;
        check_vcpu_state(v, snap, shape.irqchip, host, &mut must_try).map_err(|f| f.at(path))?;
        vcpus.push(c);
    }
    meta::check_unreadable(snap).map_err(|f| f.at(path))?;
    if let Some(irq) = &snap.irqchip {
        chips::check_irqchip(irq).map_err(|f| f.at(path))?;
    }
    let first = vcpus[0].clone();
    Ok(Checked {
        xcr0: first.xcr0,
        xstate_bv: first.xstate_bv,
        standard: first.standard,
        relaid: first.relaid,
        init: shape.init,
        sync: shape.sync,
        vcpus,
        irqchip: shape.irqchip,
        must_try,
    })
}

/// Everything of one vCPU but its xstate, in the order the restore loads
/// it: CPUID, special and general registers, XCRs and MSRs, XFD, LAPIC,
/// events, MP state, debug registers.
fn check_vcpu_state(
    v: &crate::snapshot::state::VcpuState,
    snap: &Snapshot,
    irqchip: Irqchip,
    host: &HostFacts,
    must_try: &mut Vec<String>,
) -> Result<(), Fault> {
    let guest = cpu::Cpuid(&v.cpuid);
    cpu::check_table(v.id, &guest, snap, host)?;
    let lapics = irqchip.has_lapics();
    sregs::check_sregs(v, &guest, host, must_try)?;
    sregs::check_regs(v)?;
    sregs::check_interrupt_bitmap(v, lapics)?;
    msrs::check_xcrs(v)?;
    msrs::check_msrs(v, &guest, host)?;
    msrs::check_xfd(v, &guest, host)?;
    if let Some(l) = &v.lapic {
        chips::check_lapic(v.id, l)?;
    }
    events::check_events(v, lapics)?;
    events::check_mp_state(v, lapics)?;
    events::check_debugregs(v)
}

#[cfg(test)]
pub(crate) mod tests;
