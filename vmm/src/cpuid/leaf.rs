//! Entries of a `kvm_cpuid2` table: finding a leaf/subleaf the way the CPU
//! would answer it, and reading or editing one output register.

use kvm_bindings::{kvm_cpuid_entry2, CpuId, KVM_CPUID_FLAG_SIGNIFCANT_INDEX};

pub use xstate::info::Reg;

/// Find the entry for `leaf`/`subleaf`; an entry whose subleaf does not
/// matter (no `KVM_CPUID_FLAG_SIGNIFCANT_INDEX`) answers every subleaf.
pub fn entry(cpuid: &CpuId, leaf: u32, subleaf: u32) -> Option<&kvm_cpuid_entry2> {
    cpuid.as_slice().iter().find(|e| matches(e, leaf, subleaf))
}

/// [`entry`], for editing.
pub(crate) fn entry_mut(
    cpuid: &mut CpuId,
    leaf: u32,
    subleaf: u32,
) -> Option<&mut kvm_cpuid_entry2> {
    cpuid
        .as_mut_slice()
        .iter_mut()
        .find(|e| matches(e, leaf, subleaf))
}

fn matches(e: &kvm_cpuid_entry2, leaf: u32, subleaf: u32) -> bool {
    e.function == leaf && (e.index == subleaf || e.flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX == 0)
}

/// One output register of an entry.
pub(crate) fn reg(e: &kvm_cpuid_entry2, reg: Reg) -> u32 {
    match reg {
        Reg::Eax => e.eax,
        Reg::Ebx => e.ebx,
        Reg::Ecx => e.ecx,
        Reg::Edx => e.edx,
    }
}

/// One output register of an entry, for editing.
pub(crate) fn reg_mut(e: &mut kvm_cpuid_entry2, reg: Reg) -> &mut u32 {
    match reg {
        Reg::Eax => &mut e.eax,
        Reg::Ebx => &mut e.ebx,
        Reg::Ecx => &mut e.ecx,
        Reg::Edx => &mut e.edx,
    }
}

/// Zero all four output registers (a leaf describing nothing).
pub(crate) fn clear(e: &mut kvm_cpuid_entry2) {
    e.eax = 0;
    e.ebx = 0;
    e.ecx = 0;
    e.edx = 0;
}
