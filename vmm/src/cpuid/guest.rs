//! The guest's CPUID table for a validated xfeature mask, and what KVM
//! made of it.
//!
//! We start from `KVM_GET_SUPPORTED_CPUID` and, for the chosen xfeature mask,
//! hide every instruction-set flag whose register state the mask leaves out
//! (an AVX2 flag with XCR0 lacking AVX would invite the guest to fault), then
//! rewrite leaf 0xD so it describes exactly the mask: 0.EDX:EAX = the mask,
//! 0.ECX = its standard size, subleaves of masked components zeroed. KVM
//! refreshes 0.EBX and 1.EBX as the guest changes XCR0/XSS, but never 0.ECX:
//! a VMM that narrows XCR0 must compute it itself.

use kvm_bindings::{kvm_cpuid_entry2, CpuId};
use xstate::buffer::XSAVE_MIN_SIZE;
use xstate::{Xfeature, XfeatureMask};

use super::flags::{flag_set, AMX, GATED_FLAGS};
use super::leaf::{clear, entry, entry_mut, reg_mut};
use crate::error::PolicyError;
use crate::kvm::KvmXstate;
use xstate::info::leaf_1_ecx;

/// CPUID.0xD.1:EAX.XFD: only meaningful for AMX tile data.
const XSAVE_FEATURE_XFD: u32 = 1 << 4;
/// Hypervisor timing leaf (VMware convention, also used by QEMU): EAX = TSC kHz.
pub const TSC_FREQ_LEAF: u32 = 0x4000_0010;
/// The hypervisor signature leaf; its EAX is the highest hypervisor leaf.
const HYPERVISOR_BASE_LEAF: u32 = 0x4000_0000;
/// KVM's paravirtual feature leaf (EAX: `KVM_FEATURE_*` bits).
const KVM_FEATURES_LEAF: u32 = 0x4000_0001;
/// KVM's asynchronous page faults: `KVM_FEATURE_ASYNC_PF` (bit 4),
/// `KVM_FEATURE_ASYNC_PF_VMEXIT` (10) and `KVM_FEATURE_ASYNC_PF_INT` (14),
/// the one Linux 5.10 and later need before they enable it.
///
/// Never offered. A guest task waiting for an async page fault waits for
/// KVM's "page ready" for its token, and no KVM interface saves the faults
/// in flight: a snapshot taken meanwhile restores a guest that waits for
/// ever (Firecracker issue 3020). And an on-demand restore is exactly where
/// KVM starts them: every first touch of a page the `userfaultfd` pager
/// has not copied in yet. On kvm_amd, restored two-vCPU Linux guests with
/// it hung about one restore in twenty (docs/hw-kvm.md); the vCPU that
/// waits for a page simply blocks until the pager has it.
const KVM_FEATURE_ASYNC_PF_BITS: u32 = (1 << 4) | (1 << 10) | (1 << 14);

/// The CPUID a guest gets for a validated xfeature mask.
#[derive(Clone, Debug)]
pub struct GuestCpuid {
    /// The table for `KVM_SET_CPUID2`.
    pub cpuid: CpuId,
    /// The user-state mask leaf 0xD advertises (what the guest may put in XCR0).
    pub xcr0: XfeatureMask,
    /// Standard-format size for `xcr0` (leaf 0xD.0 ECX).
    pub standard_size: u32,
    /// Compacted-format size for `xcr0` | supported XSS.
    pub compacted_size: u32,
    /// Flags hidden because their state is masked out, by `/proc/cpuinfo` name.
    pub hidden_flags: Vec<&'static str>,
}

/// Apply the xfeature policy to KVM's supported CPUID.
///
/// `xcr0` must already be valid for `kvm` (see
/// [`validate_policy`](super::validate_policy)). `tsc_khz`
/// is published in the hypervisor timing leaf when non-zero so the guest can
/// convert cycles to time without calibrating.
pub fn guest_cpuid(
    supported: &CpuId,
    kvm: &KvmXstate,
    xcr0: XfeatureMask,
    tsc_khz: u32,
) -> Result<GuestCpuid, PolicyError> {
    let mut cpuid = supported.clone();
    let masked = kvm.supported_xcr0().bits() & !xcr0.bits();

    // Hide instruction sets whose state is not in the mask. The policy hides
    // what KVM offered; it never adds a flag KVM lacks.
    let mut hidden_flags = Vec::new();
    for f in GATED_FLAGS {
        if f.needs & !xcr0.bits() == 0 {
            continue;
        }
        if let Some(e) = entry_mut(&mut cpuid, f.leaf, f.subleaf) {
            let r = reg_mut(e, f.reg);
            if *r & (1 << f.bit) != 0 {
                *r &= !(1 << f.bit);
                hidden_flags.push(f.cpuinfo);
            }
        }
    }
    if masked & AMX != 0 {
        // AMX tile information leaves describe state the guest cannot enable.
        for e in cpuid.as_mut_slice() {
            if e.function == 0x1d || e.function == 0x1e {
                clear(e);
            }
        }
    }

    let xss = kvm.info.supported_xss();
    let standard_size = kvm
        .info
        .standard_size(xcr0)
        .map_err(|source| PolicyError::StandardSize { xcr0, source })?;
    let compacted_size =
        kvm.info
            .compacted_size(xcr0 | xss)
            .map_err(|source| PolicyError::CompactedSize {
                mask: xcr0 | xss,
                source,
            })?;

    for e in cpuid.as_mut_slice() {
        if e.function != 0xd {
            continue;
        }
        match e.index {
            0 => {
                e.eax = xcr0.bits() as u32;
                e.edx = (xcr0.bits() >> 32) as u32;
                // Size for the XCR0 in force; at reset that is x87 alone.
                e.ebx = XSAVE_MIN_SIZE as u32;
                e.ecx = standard_size;
            }
            1 => {
                if !xcr0.contains(Xfeature::XtileData) {
                    e.eax &= !XSAVE_FEATURE_XFD;
                }
                // Size for XCR0 | IA32_XSS as enabled; KVM refreshes it.
                e.ebx = XSAVE_MIN_SIZE as u32;
            }
            i if (2..64).contains(&i) => {
                let bit = 1u64 << i;
                if masked & bit != 0 {
                    clear(e);
                }
            }
            _ => {}
        }
    }

    // Leaf 0xD is what says XSAVE exists; keep leaf 1 consistent with it.
    // The hypervisor bit is the VMM's to set, as QEMU and Firecracker do:
    // KVM's supported table leaves it clear, and without it a guest does
    // not look for the hypervisor leaves, so it never finds the TSC
    // frequency published below (kvm_pvm showed the host's own leaf 1,
    // which has it, and hid the omission).
    if let Some(e) = entry_mut(&mut cpuid, 1, 0) {
        e.ecx |= leaf_1_ecx::XSAVE | leaf_1_ecx::HYPERVISOR;
    }
    if let Some(e) = entry_mut(&mut cpuid, KVM_FEATURES_LEAF, 0) {
        e.eax &= !KVM_FEATURE_ASYNC_PF_BITS;
    }
    if tsc_khz != 0 {
        publish_tsc_khz(&mut cpuid, tsc_khz)?;
    }

    Ok(GuestCpuid {
        cpuid,
        xcr0,
        standard_size,
        compacted_size,
        hidden_flags,
    })
}

/// Publish the TSC frequency in leaf 0x40000010, raising the hypervisor
/// leaf range to include it when KVM's signature leaf is present.
fn publish_tsc_khz(cpuid: &mut CpuId, tsc_khz: u32) -> Result<(), PolicyError> {
    let Some(base) = entry_mut(cpuid, HYPERVISOR_BASE_LEAF, 0) else {
        return Ok(());
    };
    base.eax = base.eax.max(TSC_FREQ_LEAF);
    let timing = kvm_cpuid_entry2 {
        function: TSC_FREQ_LEAF,
        eax: tsc_khz,
        ..Default::default()
    };
    if let Some(e) = entry_mut(cpuid, TSC_FREQ_LEAF, 0) {
        *e = timing;
        return Ok(());
    }
    cpuid.push(timing).map_err(|source| PolicyError::CpuidFull {
        leaf: TSC_FREQ_LEAF,
        source,
    })
}

/// What KVM actually holds after `KVM_SET_CPUID2`, compared with the policy.
///
/// Hardware KVM stores the table it is given. Some KVMs do not: kvm_pvm
/// answers the guest's CPUID from the host's own leaves whatever the VMM set,
/// so a narrowed XCR0 is not visible to the guest through CPUID. The VMM
/// reads the table back (`KVM_GET_CPUID2`) and says so instead of trusting it.
#[derive(Clone, Debug)]
pub struct CpuidCheck {
    /// Leaf 0xD.0 EDX:EAX as KVM holds it.
    pub effective_xcr0: XfeatureMask,
    /// Leaf 0xD.0 ECX as KVM holds it.
    pub effective_standard_size: u32,
    /// KVM kept the policy's leaf 0xD and feature flags.
    pub honored: bool,
    /// Flags the guest sees although the policy masks their state.
    pub exposed_despite_policy: Vec<&'static str>,
}

/// Compare the table KVM holds with the one the VMM set.
pub fn verify(policy: &GuestCpuid, effective: &CpuId) -> CpuidCheck {
    let d0 = entry(effective, 0xd, 0).copied().unwrap_or_default();
    let effective_xcr0 = XfeatureMask::from_bits(((d0.edx as u64) << 32) | d0.eax as u64);
    let exposed_despite_policy: Vec<&'static str> = GATED_FLAGS
        .iter()
        .filter(|f| f.needs & !policy.xcr0.bits() != 0 && flag_set(effective, f))
        .map(|f| f.cpuinfo)
        .collect();
    CpuidCheck {
        effective_xcr0,
        effective_standard_size: d0.ecx,
        honored: effective_xcr0 == policy.xcr0
            && d0.ecx == policy.standard_size
            && exposed_despite_policy.is_empty(),
        exposed_despite_policy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xstate::XsaveInfo;

    fn leaf(function: u32, index: u32, eax: u32, ebx: u32, ecx: u32) -> kvm_cpuid_entry2 {
        kvm_cpuid_entry2 {
            function,
            index,
            eax,
            ebx,
            ecx,
            ..Default::default()
        }
    }

    /// A supported table as hardware KVM returns it: leaf 1 without the
    /// hypervisor bit, KVM's signature leaf, x87|SSE in leaf 0xD.
    fn kvm_amd_like() -> CpuId {
        CpuId::from_entries(&[
            leaf(0, 0, 0xd, 0, 0),
            leaf(1, 0, 0, 0, leaf_1_ecx::XSAVE),
            leaf(0xd, 0, 0x3, 576, 576),
            leaf(0xd, 1, 0, 0, 0),
            leaf(0x4000_0000, 0, 0x4000_0001, 0, 0),
        ])
        .unwrap()
    }

    /// KVM offers async page faults (and its clock, bits 3 and 24); the
    /// guest gets the rest of the leaf, never async page faults.
    #[test]
    fn async_page_faults_are_never_offered() {
        let mut entries = kvm_amd_like().as_slice().to_vec();
        let offered = (1 << 3) | (1 << 4) | (1 << 10) | (1 << 14) | (1 << 24);
        entries.push(leaf(KVM_FEATURES_LEAF, 0, offered, 0, 0));
        let supported = CpuId::from_entries(&entries).unwrap();
        let kvm = KvmXstate {
            info: XsaveInfo::from_kvm_cpuid(&supported).unwrap(),
        };
        let g = guest_cpuid(&supported, &kvm, XfeatureMask::LEGACY, 0).unwrap();
        let e = entry(&g.cpuid, KVM_FEATURES_LEAF, 0).unwrap();
        assert_eq!(e.eax, (1 << 3) | (1 << 24), "{:#x}", e.eax);
    }

    #[test]
    fn guest_is_told_it_runs_under_a_hypervisor_and_its_tsc_rate() {
        let supported = kvm_amd_like();
        let kvm = KvmXstate {
            info: XsaveInfo::from_kvm_cpuid(&supported).unwrap(),
        };
        let g = guest_cpuid(&supported, &kvm, XfeatureMask::LEGACY, 2_596_145).unwrap();
        let l1 = entry(&g.cpuid, 1, 0).unwrap();
        assert_ne!(l1.ecx & leaf_1_ecx::HYPERVISOR, 0, "CPUID.1:ECX.hypervisor");
        assert_ne!(l1.ecx & leaf_1_ecx::XSAVE, 0);
        let base = entry(&g.cpuid, HYPERVISOR_BASE_LEAF, 0).unwrap();
        assert!(base.eax >= TSC_FREQ_LEAF);
        assert_eq!(entry(&g.cpuid, TSC_FREQ_LEAF, 0).unwrap().eax, 2_596_145);
    }
}
