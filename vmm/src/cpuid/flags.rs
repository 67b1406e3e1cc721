//! The instruction-set flags whose instructions use extended state, with
//! the XCR0 components each needs: what a policy that leaves a component
//! out must hide from the guest, and what `vmm features` compares. The
//! table is [`xstate::flags`]; this module reads it from a `kvm_cpuid2`
//! table.

use kvm_bindings::CpuId;

use super::leaf::{entry, reg};

pub use xstate::flags::GATED_FLAGS;

/// One CPUID feature bit that depends on extended state being enabled
/// ([`xstate::flags::Flag`]: `name` is the SDM's, `cpuinfo` Linux's).
pub type GatedFlag = xstate::flags::Flag;

/// XTILECFG and XTILEDATA.
pub(crate) const AMX: u64 = xstate::flags::AMX_STATE;

/// Read one flag from a CPUID table.
pub fn flag_set(cpuid: &CpuId, f: &GatedFlag) -> bool {
    entry(cpuid, f.leaf, f.subleaf).is_some_and(|e| reg(e, f.reg) & (1 << f.bit) != 0)
}
