//! The MSRs, XCRs and XFD MSRs of a vCPU, as `KVM_SET_MSRS` and
//! `KVM_SET_XCRS` judge them: only MSRs this vmm saves and this KVM lists,
//! each value within what the architecture (and KVM) accepts, the values
//! that `KVM_SET_SREGS` also loads equal to the special registers; XCR0
//! alone; XFD only on components that can have it.

use xstate::XfeatureMask;

use super::cpu::{self, Cpuid};
use super::fault::{incompatible, invalid, Fault};
use super::host::HostFacts;
use super::sregs::canonical_for;
use crate::snapshot::state::VcpuState;
use crate::vstate::vcpu::{MSR_IA32_XSS, SAVED_MSRS};
use crate::vstate::xfd::{self, RestorePlan};

/// `vcpuN.xcrs`: KVM loads XCR0 and nothing else (and reports nothing
/// else), so any other XCR is not a saved state.
pub(super) fn check_xcrs(v: &VcpuState) -> Result<(), Fault> {
    if let Some(&(n, value)) = v.xcrs.iter().find(|&&(n, _)| n != 0) {
        return Err(invalid(
            format!("vcpu{}.xcrs", v.id),
            format!("XCR{n} = {value:#x}: KVM saves and loads XCR0 only"),
        ));
    }
    Ok(())
}

/// Whether `pat` is a valid IA32_PAT: every byte a memory type (UC, WC,
/// WT, WP, WB, UC-), as KVM requires.
fn pat_valid(pat: u64) -> bool {
    pat.to_le_bytes()
        .iter()
        .all(|b| matches!(b, 0 | 1 | 4 | 5 | 6 | 7))
}

/// Every MSR of `vcpuN.msrs`.
pub(super) fn check_msrs(v: &VcpuState, guest: &Cpuid<'_>, host: &HostFacts) -> Result<(), Fault> {
    for &(index, value) in &v.msrs {
        let Some(&(_, name)) = SAVED_MSRS.iter().find(|&&(i, _)| i == index) else {
            return Err(invalid(
                format!("vcpu{}.msrs", v.id),
                format!("MSR {index:#x} = {value:#x} is not one this vmm saves"),
            ));
        };
        let field = format!("vcpu{}.msrs {name}", v.id);
        if !host.msrs.contains(&index) {
            return Err(incompatible(
                field,
                format!("MSR {index:#x}: this KVM does not list it (KVM_GET_MSR_INDEX_LIST)"),
            ));
        }
        if let Some(why) = msr_fault(v, guest, index, value) {
            return Err(invalid(field, format!("{value:#x} {why}")));
        }
    }
    Ok(())
}

/// What is wrong with `value` in MSR `index` of `v`, if anything.
fn msr_fault(v: &VcpuState, guest: &Cpuid<'_>, index: u32, value: u64) -> Option<String> {
    let s = &v.sregs;
    match index {
        // SYSENTER_CS, SFMASK, TSC_AUX: 32-bit registers.
        0x174 | 0xc000_0084 | 0xc000_0103 if value >> 32 != 0 => {
            Some("sets bits 63:32, which are reserved".into())
        }
        0x277 if !pat_valid(value) => {
            Some("has a byte that is no memory type (0, 1, 4, 5, 6 or 7)".into())
        }
        0xc000_0080 if value != s.efer => Some(format!(
            "disagrees with vcpu{}.sregs EFER {:#x} (both are read at once)",
            v.id, s.efer
        )),
        0xc000_0100 if value != s.fs.base => Some(format!(
            "disagrees with vcpu{}.sregs FS base {:#x} (both are read at once)",
            v.id, s.fs.base
        )),
        0xc000_0101 if value != s.gs.base => Some(format!(
            "disagrees with vcpu{}.sregs GS base {:#x} (both are read at once)",
            v.id, s.gs.base
        )),
        0xc000_0082 | 0xc000_0083 | 0xc000_0100..=0xc000_0102 if !canonical_for(v, value) => {
            Some("is not a canonical address".into())
        }
        MSR_IA32_XSS => {
            let offered = guest.xfeatures().1;
            let extra = XfeatureMask::from_bits(value) - offered;
            if !extra.is_empty() {
                Some(format!(
                    "enables supervisor {}, which the vCPU's CPUID leaf 0xd.1 does not offer",
                    extra.describe()
                ))
            } else if value != 0 && !guest.has(cpu::XSAVES) {
                Some("is set; the vCPU's CPUID does not offer XSAVES".into())
            } else {
                None
            }
        }
        _ => None,
    }
}

/// `vcpuN.xfd`: where this KVM lists no XFD MSRs only their reset values
/// (nothing armed) restore; otherwise they arm only XFD-capable
/// components the vCPU's CPUID offers (AMX tile data), and only where it
/// offers XFD.
pub(super) fn check_xfd(v: &VcpuState, guest: &Cpuid<'_>, host: &HostFacts) -> Result<(), Fault> {
    let Some(x) = v.xfd else {
        return Ok(());
    };
    let field = format!("vcpu{}.xfd", v.id);
    if let RestorePlan::Unsupported(m) = xfd::plan(Some(x), xfd::supported(&host.msrs)) {
        return Err(incompatible(
            field,
            format!(
                "IA32_XFD {:#x} / IA32_XFD_ERR {:#x} arm components; this KVM lists no XFD MSRs",
                m.xfd, m.xfd_err
            ),
        ));
    }
    if x.is_reset() {
        return Ok(());
    }
    if !guest.has(cpu::XFD) {
        return Err(invalid(
            field,
            "XFD MSRs are set; the vCPU's CPUID (leaf 0xd.1 EAX bit 4) does not offer XFD",
        ));
    }
    let allowed = guest.xfeatures().0 & xstate::dynamic::XTILEDATA;
    for (name, value) in [("IA32_XFD", x.xfd), ("IA32_XFD_ERR", x.xfd_err)] {
        let extra = XfeatureMask::from_bits(value) - allowed;
        if !extra.is_empty() {
            return Err(invalid(
                field,
                format!(
                    "{name} {value:#x} names {}; only XFD-capable components the vCPU's CPUID offers ({allowed:#x}) can be",
                    extra.describe()
                ),
            ));
        }
    }
    Ok(())
}
