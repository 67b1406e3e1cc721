//! The vCPU's saved CPUID table: what `KVM_SET_CPUID2` refuses (too many
//! entries, a virtual-address width other than 48 or 57, a dynamic
//! xfeature this process may not give), what makes it disagree with the
//! rest of the file (leaf 0xD against the policy and the source KVM, the
//! APIC IDs against the vCPU's number) and what this host cannot offer
//! (components, their sizes). Also the feature bits the register rules
//! consult, looked up as KVM looks them up.

use kvm_bindings::{
    kvm_cpuid_entry2, KVM_CPUID_FLAG_SIGNIFCANT_INDEX, KVM_CPUID_FLAG_STATEFUL_FUNC,
    KVM_CPUID_FLAG_STATE_READ_NEXT,
};
use xstate::XfeatureMask;

use super::fault::{incompatible, invalid, Fault};
use super::host::HostFacts;
use crate::snapshot::state::Snapshot;

/// A CPUID register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reg {
    Eax,
    Ebx,
    Ecx,
    Edx,
}

/// A feature flag: leaf, subleaf, register, bit, and its name.
#[derive(Clone, Copy, Debug)]
pub(super) struct Feature(u32, u32, Reg, u8, pub &'static str);

pub(super) const VME: Feature = Feature(1, 0, Reg::Edx, 1, "VME");
pub(super) const DE: Feature = Feature(1, 0, Reg::Edx, 2, "DE");
pub(super) const PSE: Feature = Feature(1, 0, Reg::Edx, 3, "PSE");
pub(super) const TSC: Feature = Feature(1, 0, Reg::Edx, 4, "TSC");
pub(super) const PAE: Feature = Feature(1, 0, Reg::Edx, 6, "PAE");
pub(super) const MCE: Feature = Feature(1, 0, Reg::Edx, 7, "MCE");
pub(super) const PGE: Feature = Feature(1, 0, Reg::Edx, 13, "PGE");
pub(super) const FXSR: Feature = Feature(1, 0, Reg::Edx, 24, "FXSR");
pub(super) const SSE: Feature = Feature(1, 0, Reg::Edx, 25, "SSE");
pub(super) const VMX: Feature = Feature(1, 0, Reg::Ecx, 5, "VMX");
pub(super) const PCID: Feature = Feature(1, 0, Reg::Ecx, 17, "PCID");
pub(super) const X2APIC: Feature = Feature(1, 0, Reg::Ecx, 21, "X2APIC");
pub(super) const XSAVE: Feature = Feature(1, 0, Reg::Ecx, 26, "XSAVE");
pub(super) const FSGSBASE: Feature = Feature(7, 0, Reg::Ebx, 0, "FSGSBASE");
pub(super) const SMEP: Feature = Feature(7, 0, Reg::Ebx, 7, "SMEP");
pub(super) const SMAP: Feature = Feature(7, 0, Reg::Ebx, 20, "SMAP");
pub(super) const UMIP: Feature = Feature(7, 0, Reg::Ecx, 2, "UMIP");
pub(super) const PKU: Feature = Feature(7, 0, Reg::Ecx, 3, "PKU");
pub(super) const CET_SS: Feature = Feature(7, 0, Reg::Ecx, 7, "CET_SS");
pub(super) const LA57: Feature = Feature(7, 0, Reg::Ecx, 16, "LA57");
pub(super) const PKS: Feature = Feature(7, 0, Reg::Ecx, 31, "PKS");
pub(super) const IBT: Feature = Feature(7, 0, Reg::Edx, 20, "IBT");
pub(super) const FRED: Feature = Feature(7, 1, Reg::Eax, 17, "FRED");
pub(super) const LAM: Feature = Feature(7, 1, Reg::Eax, 26, "LAM");
pub(super) const XSAVES: Feature = Feature(0xd, 1, Reg::Eax, 3, "XSAVES");
pub(super) const XFD: Feature = Feature(0xd, 1, Reg::Eax, 4, "XFD");
pub(super) const SVM: Feature = Feature(0x8000_0001, 0, Reg::Ecx, 2, "SVM");
pub(super) const NX: Feature = Feature(0x8000_0001, 0, Reg::Edx, 20, "NX");
pub(super) const FFXSR: Feature = Feature(0x8000_0001, 0, Reg::Edx, 25, "FFXSR");
pub(super) const LM: Feature = Feature(0x8000_0001, 0, Reg::Edx, 29, "LM");
pub(super) const AUTOIBRS: Feature = Feature(0x8000_0021, 0, Reg::Eax, 8, "AUTOIBRS");

/// A CPUID table (a vCPU's, or KVM's supported one), looked up as KVM
/// does: by function, and by index only where the entry says the index
/// matters.
#[derive(Clone, Copy)]
pub(super) struct Cpuid<'a>(pub &'a [kvm_cpuid_entry2]);

impl Cpuid<'_> {
    /// The entry of leaf `f`, subleaf `i`.
    pub fn entry(&self, f: u32, i: u32) -> Option<&kvm_cpuid_entry2> {
        self.0.iter().find(|e| {
            e.function == f && (e.flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX == 0 || e.index == i)
        })
    }

    /// Whether the table offers `f`.
    pub fn has(&self, f: Feature) -> bool {
        let Feature(leaf, sub, reg, bit, _) = f;
        self.entry(leaf, sub).is_some_and(|e| {
            let r = match reg {
                Reg::Eax => e.eax,
                Reg::Ebx => e.ebx,
                Reg::Ecx => e.ecx,
                Reg::Edx => e.edx,
            };
            r & (1 << bit) != 0
        })
    }

    /// The physical-address width (leaf 0x80000008 EAX[7:0]; 36 without
    /// the leaf, as KVM assumes).
    pub fn maxphyaddr(&self) -> u32 {
        let max_ext = self.entry(0x8000_0000, 0).map_or(0, |e| e.eax);
        match self.entry(0x8000_0008, 0) {
            Some(e) if max_ext >= 0x8000_0008 => e.eax & 0xff,
            _ => 36,
        }
    }

    /// Leaf 0xD.0 EDX:EAX (the user xfeatures offered) and 0xD.1 EDX:ECX
    /// (the supervisor ones).
    pub fn xfeatures(&self) -> (XfeatureMask, XfeatureMask) {
        let join = |lo: u32, hi: u32| XfeatureMask::from_bits(u64::from(lo) | u64::from(hi) << 32);
        (
            self.entry(0xd, 0)
                .map_or(XfeatureMask::EMPTY, |e| join(e.eax, e.edx)),
            self.entry(0xd, 1)
                .map_or(XfeatureMask::EMPTY, |e| join(e.ecx, e.edx)),
        )
    }
}

/// The rules of vCPU `id`'s table `t`.
pub(super) fn check_table(
    id: u32,
    t: &Cpuid<'_>,
    snap: &Snapshot,
    host: &HostFacts,
) -> Result<(), Fault> {
    let field = |what: &str| format!("vcpu{id}.cpuid {what}");
    check_flags(id, t)?;
    if let Some(e) = t.entry(0x8000_0008, 0) {
        let vaddr = (e.eax >> 8) & 0xff;
        if ![0, 48, 57].contains(&vaddr) {
            return Err(invalid(
                field("leaf 0x80000008 EAX"),
                format!(
                    "{:#010x} gives {vaddr}-bit virtual addresses; KVM accepts 48 or 57 (or 0)",
                    e.eax
                ),
            ));
        }
    }
    let phys = t.maxphyaddr();
    if !(32..=52).contains(&phys) {
        return Err(invalid(
            field("leaf 0x80000008 EAX"),
            format!("gives {phys}-bit physical addresses; x86-64 has 32 to 52"),
        ));
    }
    check_xsave_leaf(id, t, snap, host)?;
    check_apic_ids(id, t)
}

/// Entry flags KVM defines, and an index only where it matters.
fn check_flags(id: u32, t: &Cpuid<'_>) -> Result<(), Fault> {
    let known = KVM_CPUID_FLAG_SIGNIFCANT_INDEX
        | KVM_CPUID_FLAG_STATEFUL_FUNC
        | KVM_CPUID_FLAG_STATE_READ_NEXT;
    for e in t.0 {
        let at = format!("vcpu{id}.cpuid leaf {:#x}.{}", e.function, e.index);
        if e.flags & !known != 0 {
            return Err(invalid(
                at,
                format!("flags {:#x} has bits KVM does not define", e.flags),
            ));
        }
        let indexed = e.flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX != 0;
        let siblings = t.0.iter().filter(|o| o.function == e.function);
        if !indexed && (e.index != 0 || siblings.count() > 1) {
            return Err(invalid(
                at,
                "a leaf without KVM_CPUID_FLAG_SIGNIFCANT_INDEX has one entry, subleaf 0 \
                 (KVM ignores its index)",
            ));
        }
    }
    Ok(())
}

/// Leaf 0xD: the user xfeatures offered are the policy's, within this
/// host's; the supervisor ones the source KVM's, within this host's; and
/// every component offered has its subleaf, of this host's size.
fn check_xsave_leaf(
    id: u32,
    t: &Cpuid<'_>,
    snap: &Snapshot,
    host: &HostFacts,
) -> Result<(), Fault> {
    let (user, sup) = t.xfeatures();
    let policy = snap.meta.policy();
    let f0 = format!("vcpu{id}.cpuid leaf 0xd.0 EDX:EAX");
    let f1 = format!("vcpu{id}.cpuid leaf 0xd.1 EDX:ECX");
    if t.entry(0xd, 0).is_some() && user != policy {
        return Err(invalid(
            f0,
            format!("{user:#x} is not the guest's xfeature policy (meta.policy_xcr0 {policy:#x})"),
        ));
    }
    let source_xss = XfeatureMask::from_bits(snap.meta.kvm_xss);
    if !(sup - source_xss).is_empty() {
        return Err(invalid(
            f1,
            format!("{sup:#x} offers more than the source KVM had (meta.kvm_xss {source_xss:#x})"),
        ));
    }
    for (field, mask, have) in [
        (&f0, user, host.info.supported_xcr0()),
        (&f1, sup, host.info.supported_xss()),
    ] {
        let missing = mask - have;
        if !missing.is_empty() {
            return Err(incompatible(
                field.as_str(),
                format!(
                    "{mask:#x} offers {}; this KVM offers {have:#x} (KVM_SET_CPUID2 refuses a \
                     dynamic xfeature it may not give)",
                    missing.describe()
                ),
            ));
        }
    }
    for i in (user | sup).iter_indices().filter(|&i| i >= 2) {
        let field = format!("vcpu{id}.cpuid leaf 0xd.{i} EAX");
        let size = t.entry(0xd, i).map_or(0, |e| e.eax);
        let want = host.info.component_by_index(i).map_or(0, |c| c.size);
        if size != want {
            return Err(incompatible(
                field,
                format!(
                    "{} is {size} bytes in the vCPU's CPUID, {want} bytes on this host",
                    XfeatureMask::from_bits(1 << i).describe()
                ),
            ));
        }
    }
    Ok(())
}

/// An AP `id` is APIC ID `id`: leaf 1 EBX[31:24] and the x2APIC ID of
/// leaves 0xB and 0x1F, as this vmm writes them into an AP's table. (The
/// boot vCPU's table is KVM's supported one as it came, whose IDs are
/// those of the host CPU that answered; KVM and the guest go by the
/// LAPIC's.)
fn check_apic_ids(id: u32, t: &Cpuid<'_>) -> Result<(), Fault> {
    if id == 0 {
        return Ok(());
    }
    for e in t.0 {
        let (reg, got) = match e.function {
            1 => ("EBX[31:24]", e.ebx >> 24),
            0xb | 0x1f => ("EDX", e.edx),
            _ => continue,
        };
        if got != id {
            return Err(invalid(
                format!("vcpu{id}.cpuid leaf {:#x}.{} {reg}", e.function, e.index),
                format!("APIC ID {got}; vcpu{id} is APIC ID {id}"),
            ));
        }
    }
    Ok(())
}
