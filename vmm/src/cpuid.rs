//! The guest CPUID policy: what the guest is told about extended state.
//!
//! We start from `KVM_GET_SUPPORTED_CPUID` and, for the chosen xfeature mask,
//! hide every instruction-set flag whose register state the mask leaves out
//! (an AVX2 flag with XCR0 lacking AVX would invite the guest to fault), then
//! rewrite leaf 0xD so it describes exactly the mask: 0.EDX:EAX = the mask,
//! 0.ECX = its standard size, subleaves of masked components zeroed. KVM
//! refreshes 0.EBX and 1.EBX as the guest changes XCR0/XSS, but never 0.ECX:
//! a VMM that narrows XCR0 must compute it itself.

use kvm_bindings::{kvm_cpuid_entry2, CpuId, KVM_CPUID_FLAG_SIGNIFCANT_INDEX};
use xstate::{Xfeature, XfeatureMask, XsaveInfo};

use crate::error::{Error, Result};

/// One CPUID feature bit that depends on extended state being enabled.
#[derive(Clone, Copy, Debug)]
pub struct GatedFlag {
    /// Leaf and subleaf of the flag.
    pub leaf: u32,
    pub subleaf: u32,
    /// Register holding the flag.
    pub reg: Reg,
    pub bit: u32,
    /// Feature name as `/proc/cpuinfo` prints it.
    pub name: &'static str,
    /// The flag is only usable when every component in this mask is enabled.
    pub needs: u64,
}

/// A CPUID output register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reg {
    Eax,
    Ebx,
    Ecx,
    Edx,
}

const AVX: u64 = 1 << 2;
const MPX: u64 = (1 << 3) | (1 << 4);
const AVX512: u64 = AVX | (1 << 5) | (1 << 6) | (1 << 7);
const PKRU: u64 = 1 << 9;
const AMX: u64 = (1 << 17) | (1 << 18);
const APX: u64 = 1 << 19;

const fn flag(
    leaf: u32,
    subleaf: u32,
    reg: Reg,
    bit: u32,
    name: &'static str,
    needs: u64,
) -> GatedFlag {
    GatedFlag {
        leaf,
        subleaf,
        reg,
        bit,
        name,
        needs,
    }
}

/// Every CPUID flag whose instructions use state outside x87/SSE, with the
/// components it needs. VEX-encoded extensions (FMA, F16C, VAES, AVX-VNNI,
/// ...) need AVX state even though their names do not say so.
pub const GATED_FLAGS: &[GatedFlag] = &[
    flag(1, 0, Reg::Ecx, 12, "fma", AVX),
    flag(1, 0, Reg::Ecx, 28, "avx", AVX),
    flag(1, 0, Reg::Ecx, 29, "f16c", AVX),
    flag(7, 0, Reg::Ebx, 5, "avx2", AVX),
    flag(7, 0, Reg::Ebx, 14, "mpx", MPX),
    flag(7, 0, Reg::Ebx, 16, "avx512f", AVX512),
    flag(7, 0, Reg::Ebx, 17, "avx512dq", AVX512),
    flag(7, 0, Reg::Ebx, 21, "avx512ifma", AVX512),
    flag(7, 0, Reg::Ebx, 26, "avx512pf", AVX512),
    flag(7, 0, Reg::Ebx, 27, "avx512er", AVX512),
    flag(7, 0, Reg::Ebx, 28, "avx512cd", AVX512),
    flag(7, 0, Reg::Ebx, 30, "avx512bw", AVX512),
    flag(7, 0, Reg::Ebx, 31, "avx512vl", AVX512),
    flag(7, 0, Reg::Ecx, 1, "avx512vbmi", AVX512),
    flag(7, 0, Reg::Ecx, 3, "pku", PKRU),
    flag(7, 0, Reg::Ecx, 4, "ospke", PKRU),
    flag(7, 0, Reg::Ecx, 6, "avx512_vbmi2", AVX512),
    flag(7, 0, Reg::Ecx, 9, "vaes", AVX),
    flag(7, 0, Reg::Ecx, 10, "vpclmulqdq", AVX),
    flag(7, 0, Reg::Ecx, 11, "avx512_vnni", AVX512),
    flag(7, 0, Reg::Ecx, 12, "avx512_bitalg", AVX512),
    flag(7, 0, Reg::Ecx, 14, "avx512_vpopcntdq", AVX512),
    flag(7, 0, Reg::Edx, 2, "avx512_4vnniw", AVX512),
    flag(7, 0, Reg::Edx, 3, "avx512_4fmaps", AVX512),
    flag(7, 0, Reg::Edx, 8, "avx512_vp2intersect", AVX512),
    flag(7, 0, Reg::Edx, 22, "amx_bf16", AMX),
    flag(7, 0, Reg::Edx, 23, "avx512_fp16", AVX512),
    flag(7, 0, Reg::Edx, 24, "amx_tile", AMX),
    flag(7, 0, Reg::Edx, 25, "amx_int8", AMX),
    flag(7, 1, Reg::Eax, 0, "sha512", AVX),
    flag(7, 1, Reg::Eax, 1, "sm3", AVX),
    flag(7, 1, Reg::Eax, 2, "sm4", AVX),
    flag(7, 1, Reg::Eax, 4, "avx_vnni", AVX),
    flag(7, 1, Reg::Eax, 5, "avx512_bf16", AVX512),
    flag(7, 1, Reg::Eax, 21, "amx_fp16", AMX),
    flag(7, 1, Reg::Eax, 23, "avx_ifma", AVX),
    flag(7, 1, Reg::Edx, 4, "avx_vnni_int8", AVX),
    flag(7, 1, Reg::Edx, 5, "avx_ne_convert", AVX),
    flag(7, 1, Reg::Edx, 8, "amx_complex", AMX),
    flag(7, 1, Reg::Edx, 10, "avx_vnni_int16", AVX),
    flag(7, 1, Reg::Edx, 21, "apx_f", APX),
];

/// CPUID.1:ECX.XSAVE.
const CPUID1_ECX_XSAVE: u32 = 1 << 26;
/// CPUID.0xD.1:EAX.XFD: only meaningful for AMX tile data.
const XSAVE_FEATURE_XFD: u32 = 1 << 4;
/// Standard size with only the legacy region and header: XCR0 = x87 at reset.
const LEGACY_AREA_SIZE: u32 = 576;
/// Hypervisor timing leaf (VMware convention, also used by QEMU): EAX = TSC kHz.
pub const TSC_FREQ_LEAF: u32 = 0x4000_0010;
const HYPERVISOR_BASE_LEAF: u32 = 0x4000_0000;

/// The extended-state view of KVM's supported CPUID.
#[derive(Clone, Debug)]
pub struct KvmXstate {
    /// Leaf 0xD of `KVM_GET_SUPPORTED_CPUID`, parsed.
    pub info: XsaveInfo,
}

impl KvmXstate {
    pub fn from_supported(supported: &CpuId) -> Result<Self> {
        let info =
            XsaveInfo::from_kvm_cpuid(supported).map_err(|e| Error::KvmCpuid(e.to_string()))?;
        Ok(Self { info })
    }

    /// User state KVM can give a guest.
    pub fn supported_xcr0(&self) -> XfeatureMask {
        self.info.supported_xcr0()
    }
}

/// Find the entry for `leaf`/`subleaf`.
pub fn entry(cpuid: &CpuId, leaf: u32, subleaf: u32) -> Option<&kvm_cpuid_entry2> {
    cpuid
        .as_slice()
        .iter()
        .find(|e| e.function == leaf && (e.index == subleaf || !indexed(e)))
}

fn entry_mut(cpuid: &mut CpuId, leaf: u32, subleaf: u32) -> Option<&mut kvm_cpuid_entry2> {
    cpuid
        .as_mut_slice()
        .iter_mut()
        .find(|e| e.function == leaf && (e.index == subleaf || !indexed(e)))
}

fn indexed(e: &kvm_cpuid_entry2) -> bool {
    e.flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX != 0
}

fn reg_mut(e: &mut kvm_cpuid_entry2, reg: Reg) -> &mut u32 {
    match reg {
        Reg::Eax => &mut e.eax,
        Reg::Ebx => &mut e.ebx,
        Reg::Ecx => &mut e.ecx,
        Reg::Edx => &mut e.edx,
    }
}

/// Read one flag from a CPUID table.
pub fn flag_set(cpuid: &CpuId, f: &GatedFlag) -> bool {
    entry(cpuid, f.leaf, f.subleaf).is_some_and(|e| {
        let v = match f.reg {
            Reg::Eax => e.eax,
            Reg::Ebx => e.ebx,
            Reg::Ecx => e.ecx,
            Reg::Edx => e.edx,
        };
        v & (1 << f.bit) != 0
    })
}

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
/// `xcr0` must already be valid for `kvm` (see [`validate_policy`]). `tsc_khz`
/// is published in the hypervisor timing leaf when non-zero so the guest can
/// convert cycles to time without calibrating.
pub fn guest_cpuid(
    supported: &CpuId,
    kvm: &KvmXstate,
    xcr0: XfeatureMask,
    tsc_khz: u32,
) -> Result<GuestCpuid> {
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
                hidden_flags.push(f.name);
            }
        }
    }
    if masked & AMX != 0 {
        // AMX tile information leaves describe state the guest cannot enable.
        for e in cpuid.as_mut_slice() {
            if e.function == 0x1d || e.function == 0x1e {
                e.eax = 0;
                e.ebx = 0;
                e.ecx = 0;
                e.edx = 0;
            }
        }
    }

    let xss = kvm.info.supported_xss();
    let standard_size = kvm
        .info
        .standard_size(xcr0)
        .map_err(|e| Error::Policy(format!("standard size of {xcr0:#x}: {e}")))?;
    let compacted_size = kvm
        .info
        .compacted_size(xcr0 | xss)
        .map_err(|e| Error::Policy(format!("compacted size of {:#x}: {e}", (xcr0 | xss).bits())))?;

    for e in cpuid.as_mut_slice() {
        if e.function != 0xd {
            continue;
        }
        match e.index {
            0 => {
                e.eax = xcr0.bits() as u32;
                e.edx = (xcr0.bits() >> 32) as u32;
                // Size for the XCR0 in force; at reset that is x87 alone.
                e.ebx = LEGACY_AREA_SIZE;
                e.ecx = standard_size;
            }
            1 => {
                if !xcr0.contains(Xfeature::XtileData) {
                    e.eax &= !XSAVE_FEATURE_XFD;
                }
                // Size for XCR0 | IA32_XSS as enabled; KVM refreshes it.
                e.ebx = LEGACY_AREA_SIZE;
            }
            i if (2..64).contains(&i) => {
                let bit = 1u64 << i;
                if masked & bit != 0 {
                    e.eax = 0;
                    e.ebx = 0;
                    e.ecx = 0;
                    e.edx = 0;
                }
            }
            _ => {}
        }
    }

    // Leaf 0xD is what says XSAVE exists; keep leaf 1 consistent with it.
    if let Some(e) = entry_mut(&mut cpuid, 1, 0) {
        e.ecx |= CPUID1_ECX_XSAVE;
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
fn publish_tsc_khz(cpuid: &mut CpuId, tsc_khz: u32) -> Result<()> {
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
    cpuid
        .push(timing)
        .map_err(|e| Error::Policy(format!("cannot add CPUID leaf {TSC_FREQ_LEAF:#x}: {e:?}")))
}

/// Parse `--xfeatures` and check it against what KVM supports, before any VM
/// exists. `None` means everything KVM supports.
pub fn validate_policy(
    spec: Option<&str>,
    kvm: &KvmXstate,
    supported: &CpuId,
) -> Result<XfeatureMask> {
    let host = kvm.supported_xcr0();
    // Leaf 0xD is the authority on XSAVE support: some KVMs (kvm_pvm) clear
    // CPUID.1:ECX.XSAVE in the supported table yet enumerate leaf 0xD and
    // give guests XSAVE all the same.
    let xsave = host.contains(Xfeature::X87)
        || entry(supported, 1, 0).is_some_and(|e| e.ecx & CPUID1_ECX_XSAVE != 0);
    if !xsave {
        return Err(Error::Policy(
            "KVM does not offer XSAVE (CPUID.1:ECX.XSAVE clear): no xfeature mask can be set"
                .into(),
        ));
    }
    let mask = match spec {
        None => host,
        Some(s) => XfeatureMask::parse(s, host)
            .map_err(|e| Error::Policy(format!("--xfeatures {s:?}: {e}")))?,
    };
    mask.validate_xcr0(host).map_err(|e| {
        Error::Policy(format!(
            "--xfeatures {}: {e} (KVM supports {host:#x} = {host})",
            spec.unwrap_or("host")
        ))
    })?;
    Ok(mask)
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
        .map(|f| f.name)
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
