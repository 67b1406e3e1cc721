//! Pending events, the MP state and the debug registers, as
//! `KVM_SET_VCPU_EVENTS`, `KVM_SET_MP_STATE` and `KVM_SET_DEBUGREGS` judge
//! them for a VM of this vmm (which enables neither exception payloads
//! nor triple-fault events, and gives its VMs no SMRAM), and as the next
//! VM entry would deliver them.

use kvm_bindings::{
    KVM_MP_STATE_AP_RESET_HOLD, KVM_MP_STATE_HALTED, KVM_MP_STATE_INIT_RECEIVED,
    KVM_MP_STATE_RUNNABLE, KVM_MP_STATE_SIPI_RECEIVED, KVM_MP_STATE_UNINITIALIZED,
    KVM_VCPUEVENT_VALID_NMI_PENDING, KVM_VCPUEVENT_VALID_PAYLOAD, KVM_VCPUEVENT_VALID_SHADOW,
    KVM_VCPUEVENT_VALID_SIPI_VECTOR, KVM_VCPUEVENT_VALID_SMM, KVM_VCPUEVENT_VALID_TRIPLE_FAULT,
    KVM_X86_SHADOW_INT_MOV_SS, KVM_X86_SHADOW_INT_STI,
};

use super::fault::{invalid, Fault};
use crate::snapshot::state::VcpuState;

/// Exceptions that push an error code (in protected mode): #DF, #TS,
/// #NP, #SS, #GP, #PF, #AC, #CP, #VC, #SX.
const WITH_ERROR_CODE: [u8; 10] = [8, 10, 11, 12, 13, 14, 17, 21, 29, 30];
/// Vectors below 32 that name no exception.
const RESERVED_VECTORS: [u8; 8] = [15, 22, 23, 24, 25, 26, 27, 31];

/// `vcpuN.events`.
pub(super) fn check_events(v: &VcpuState, lapics: bool) -> Result<(), Fault> {
    let Some(e) = &v.events else {
        return Ok(());
    };
    let field = |n: &str| format!("vcpu{}.events.{n}", v.id);
    let known = KVM_VCPUEVENT_VALID_NMI_PENDING
        | KVM_VCPUEVENT_VALID_SIPI_VECTOR
        | KVM_VCPUEVENT_VALID_SHADOW
        | KVM_VCPUEVENT_VALID_SMM;
    let disabled = KVM_VCPUEVENT_VALID_PAYLOAD | KVM_VCPUEVENT_VALID_TRIPLE_FAULT;
    if e.flags & disabled != 0 {
        return Err(invalid(
            field("flags"),
            format!(
                "{:#x} marks exception payloads or triple faults valid; this vmm enables \
                 neither KVM_CAP_EXCEPTION_PAYLOAD nor KVM_CAP_X86_TRIPLE_FAULT_EVENT",
                e.flags
            ),
        ));
    }
    if e.flags & !known != 0 {
        return Err(invalid(
            field("flags"),
            format!("{:#x} has bits KVM does not define", e.flags),
        ));
    }
    check_exception(v, e)?;
    check_interrupt(v, e, lapics)?;
    let n = &e.nmi;
    if [n.injected, n.pending, n.masked].iter().any(|&b| b > 1) || n.pad != 0 {
        return Err(invalid(
            field("nmi"),
            format!(
                "injected {} pending {} masked {} pad {}: flags are 0 or 1, the pad 0",
                n.injected, n.pending, n.masked, n.pad
            ),
        ));
    }
    let sipi_ok = if e.flags & KVM_VCPUEVENT_VALID_SIPI_VECTOR != 0 {
        lapics && e.sipi_vector <= 0xff
    } else {
        e.sipi_vector == 0
    };
    if !sipi_ok {
        return Err(invalid(
            field("sipi_vector"),
            format!(
                "{:#x} (flags {:#x}): an 8-bit vector, set only with KVM_VCPUEVENT_VALID_SIPI_VECTOR in a VM with LAPICs",
                e.sipi_vector, e.flags
            ),
        ));
    }
    let s = &e.smi;
    if [s.smm, s.pending, s.smm_inside_nmi, s.latched_init] != [0; 4] {
        return Err(invalid(
            field("smi"),
            format!(
                "smm {} pending {} inside_nmi {} latched_init {}: this vmm's VMs have no SMRAM, \
                 so no vCPU is in or entering system-management mode",
                s.smm, s.pending, s.smm_inside_nmi, s.latched_init
            ),
        ));
    }
    if e.triple_fault.pending != 0 || e.reserved != [0; 26] {
        return Err(invalid(
            field("reserved"),
            "the triple-fault flag and the reserved bytes are not zero",
        ));
    }
    Ok(())
}

/// The exception being injected: a vector of 0-31 that names an
/// exception (not the NMI), an error code exactly where the CPU would
/// push one. Without `KVM_CAP_EXCEPTION_PAYLOAD` KVM (Linux 6.1 and
/// later) reports a pending exception as pending *and* injected, and
/// `KVM_SET_VCPU_EVENTS` takes it as injected: that is a saved state; a
/// pending one not also injected, or a payload, is not (KVM would drop
/// it).
fn check_exception(v: &VcpuState, e: &kvm_bindings::kvm_vcpu_events) -> Result<(), Fault> {
    let x = &e.exception;
    let field = format!("vcpu{}.events.exception", v.id);
    if [x.injected, x.has_error_code, x.pending]
        .iter()
        .any(|&b| b > 1)
    {
        return Err(invalid(
            field,
            format!(
                "injected {} has_error_code {} pending {}: flags are 0 or 1",
                x.injected, x.has_error_code, x.pending
            ),
        ));
    }
    if (x.pending != 0 && x.injected == 0)
        || e.exception_has_payload != 0
        || e.exception_payload != 0
    {
        return Err(invalid(
            field,
            "a pending exception not also injected, or a payload: KVM reports these only \
             with KVM_CAP_EXCEPTION_PAYLOAD, which this vmm does not enable",
        ));
    }
    if x.injected == 0 {
        return Ok(());
    }
    let bad = if x.nr > 31 {
        Some(format!("vector {} is no exception (0-31)", x.nr))
    } else if x.nr == 2 {
        Some("vector 2 is the NMI, which is not injected as an exception".into())
    } else if RESERVED_VECTORS.contains(&x.nr) {
        Some(format!("vector {} is reserved", x.nr))
    } else {
        let protected = v.sregs.cr0 & 1 != 0;
        let pushes = protected && WITH_ERROR_CODE.contains(&x.nr);
        (pushes != (x.has_error_code != 0)).then(|| {
            format!(
                "vector {} {} error code{}; has_error_code is {}",
                x.nr,
                if pushes { "pushes an" } else { "pushes no" },
                if protected { "" } else { " in real mode" },
                x.has_error_code
            )
        })
    };
    match bad {
        Some(why) => Err(invalid(field, format!("injected: {why}"))),
        None => Ok(()),
    }
}

/// The interrupt being injected and the interrupt shadow: flags in their
/// widths, an external interrupt only where LAPICs deliver one, and the
/// same one `KVM_GET_SREGS` put in `interrupt_bitmap`.
fn check_interrupt(
    v: &VcpuState,
    e: &kvm_bindings::kvm_vcpu_events,
    lapics: bool,
) -> Result<(), Fault> {
    let i = &e.interrupt;
    let field = format!("vcpu{}.events.interrupt", v.id);
    let shadows = KVM_X86_SHADOW_INT_MOV_SS | KVM_X86_SHADOW_INT_STI;
    if i.injected > 1 || i.soft > 1 || u32::from(i.shadow) & !shadows != 0 {
        return Err(invalid(
            field,
            format!(
                "injected {} soft {} shadow {:#x}: flags are 0 or 1, the shadow MOV-SS|STI",
                i.injected, i.soft, i.shadow
            ),
        ));
    }
    let external = i.injected != 0 && i.soft == 0;
    if external && !lapics {
        return Err(invalid(
            field,
            "an external interrupt is being injected in a VM without an interrupt controller",
        ));
    }
    let bitmap = &v.sregs.interrupt_bitmap;
    let in_bitmap = |n: u8| bitmap[usize::from(n / 64)] & (1 << (n % 64)) != 0;
    let pending: u32 = bitmap.iter().map(|w| w.count_ones()).sum();
    if (external && (pending != 1 || !in_bitmap(i.nr))) || (!external && pending != 0) {
        return Err(invalid(
            field,
            format!(
                "injected {} soft {} vector {} disagrees with vcpu{}.sregs.interrupt_bitmap \
                 (both are read at once)",
                i.injected, i.soft, i.nr, v.id
            ),
        ));
    }
    Ok(())
}

/// `vcpuN.mp_state`: one of the x86 states, a waiting or halted one only
/// with an in-kernel LAPIC (KVM refuses it otherwise), "uninitialised"
/// only for an AP.
pub(super) fn check_mp_state(v: &VcpuState, lapics: bool) -> Result<(), Fault> {
    let Some(m) = v.mp_state else {
        return Ok(());
    };
    let name = match m {
        KVM_MP_STATE_RUNNABLE => return Ok(()),
        KVM_MP_STATE_UNINITIALIZED => "UNINITIALIZED",
        KVM_MP_STATE_INIT_RECEIVED => "INIT_RECEIVED",
        KVM_MP_STATE_HALTED => "HALTED",
        KVM_MP_STATE_SIPI_RECEIVED => "SIPI_RECEIVED",
        KVM_MP_STATE_AP_RESET_HOLD => "AP_RESET_HOLD",
        _ => "",
    };
    let field = format!("vcpu{}.mp_state", v.id);
    let why = if name.is_empty() {
        format!("{m} is no x86 MP state (0-4)")
    } else if m == KVM_MP_STATE_AP_RESET_HOLD {
        format!("{m} ({name}) is for SEV-ES guests only")
    } else if !lapics {
        format!("{m} ({name}) needs an in-kernel LAPIC; this VM has none (KVM refuses it)")
    } else if m == KVM_MP_STATE_UNINITIALIZED && v.id == 0 {
        format!("{m} ({name}): the boot vCPU is never waiting for its first INIT")
    } else {
        return Ok(());
    };
    Err(invalid(field, why))
}

/// `vcpuN.debugregs`: DR6 and DR7 within 32 bits, no flags, the reserved
/// words zero (`KVM_SET_DEBUGREGS` refuses the rest).
pub(super) fn check_debugregs(v: &VcpuState) -> Result<(), Fault> {
    let Some(d) = &v.debugregs else {
        return Ok(());
    };
    let field = |n: &str| format!("vcpu{}.debugregs.{n}", v.id);
    for (name, value) in [("dr6", d.dr6), ("dr7", d.dr7)] {
        if value >> 32 != 0 {
            return Err(invalid(
                field(name),
                format!("{value:#x} sets bits 63:32, which are reserved"),
            ));
        }
    }
    if d.flags != 0 || d.reserved != [0; 9] {
        return Err(invalid(
            field("flags"),
            format!("flags {:#x} or the reserved words are not zero", d.flags),
        ));
    }
    Ok(())
}
