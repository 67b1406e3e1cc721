//! The CPUID feature flags that extended state concerns, named once: where
//! each bit is (leaf, subleaf, [`Reg`], bit), its name in the Intel SDM and
//! in Linux's `/proc/cpuinfo`, and the XCR0 components its instructions
//! use.
//!
//! [`GATED_FLAGS`] is what a VMM must hide from a guest whose XCR0 leaves a
//! component out; the [`lint`](crate::lint) rules read the named constants
//! (through [`crate::lint::flags`]).
//!
//! # Examples
//! ```
//! use xstate::flags::{AVX512F, GATED_FLAGS};
//! use xstate::info::Reg;
//!
//! assert_eq!((AVX512F.leaf, AVX512F.reg, AVX512F.bit), (7, Reg::Ebx, 16));
//! assert_eq!((AVX512F.name, AVX512F.cpuinfo), ("AVX512F", "avx512f"));
//! // Hiding AVX state (XCR0 bit 2) hides every VEX- and EVEX-encoded flag.
//! assert!(GATED_FLAGS.iter().filter(|f| f.needs & 0x4 != 0).count() > 30);
//! ```

use crate::info::Reg;

/// A CPUID feature bit: where it is and what it is called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flag {
    /// Leaf.
    pub leaf: u32,
    /// Subleaf.
    pub subleaf: u32,
    /// Register holding the flag.
    pub reg: Reg,
    /// Bit number in `reg`.
    pub bit: u32,
    /// Name as the SDM writes it (`AVX512_VBMI2`, `AMX-BF16`).
    pub name: &'static str,
    /// Name as Linux's `/proc/cpuinfo` prints it (`avx512_vbmi2`,
    /// `amx_bf16`); empty for bits that are not feature flags there.
    pub cpuinfo: &'static str,
    /// The flag is only usable when every XCR0 component in this mask is
    /// enabled; 0 for flags whose instructions use no user state beyond
    /// x87/SSE (not in [`GATED_FLAGS`]).
    pub needs: u64,
}

impl Flag {
    /// A bit named `name` that is not a `/proc/cpuinfo` flag and gates no
    /// state: a place to report (a lint violation's subject).
    pub const fn at(leaf: u32, subleaf: u32, reg: Reg, bit: u32, name: &'static str) -> Self {
        flag(leaf, subleaf, reg, bit, name, "", 0)
    }
}

const fn flag(
    leaf: u32,
    subleaf: u32,
    reg: Reg,
    bit: u32,
    name: &'static str,
    cpuinfo: &'static str,
    needs: u64,
) -> Flag {
    Flag {
        leaf,
        subleaf,
        reg,
        bit,
        name,
        cpuinfo,
        needs,
    }
}

/// Components of the flags' `needs`, by XCR0 bit: AVX (YMM_Hi128).
pub const AVX_STATE: u64 = 1 << 2;
/// BNDREGS and BNDCSR.
pub const MPX_STATE: u64 = (1 << 3) | (1 << 4);
/// AVX and the three AVX-512 components (opmask, ZMM_Hi256, Hi16_ZMM).
pub const AVX512_STATE: u64 = AVX_STATE | (1 << 5) | (1 << 6) | (1 << 7);
/// PKRU.
pub const PKRU_STATE: u64 = 1 << 9;
/// XTILECFG and XTILEDATA.
pub const AMX_STATE: u64 = (1 << 17) | (1 << 18);
/// APX (extended GPRs).
pub const APX_STATE: u64 = 1 << 19;

use Reg::{Eax, Ebx, Ecx, Edx};

/// CPUID.1:ECX.FMA.
pub const FMA: Flag = flag(1, 0, Ecx, 12, "FMA", "fma", AVX_STATE);
/// CPUID.1:ECX.XSAVE.
pub const XSAVE: Flag = flag(1, 0, Ecx, 26, "XSAVE", "xsave", 0);
/// CPUID.1:ECX.OSXSAVE.
pub const OSXSAVE: Flag = flag(1, 0, Ecx, 27, "OSXSAVE", "osxsave", 0);
/// CPUID.1:ECX.AVX.
pub const AVX: Flag = flag(1, 0, Ecx, 28, "AVX", "avx", AVX_STATE);
/// CPUID.1:ECX.F16C.
pub const F16C: Flag = flag(1, 0, Ecx, 29, "F16C", "f16c", AVX_STATE);
/// CPUID.(7,0):EBX.AVX2.
pub const AVX2: Flag = flag(7, 0, Ebx, 5, "AVX2", "avx2", AVX_STATE);
/// CPUID.(7,0):EBX.MPX.
pub const MPX: Flag = flag(7, 0, Ebx, 14, "MPX", "mpx", MPX_STATE);
/// CPUID.(7,0):EBX.AVX512F.
pub const AVX512F: Flag = flag(7, 0, Ebx, 16, "AVX512F", "avx512f", AVX512_STATE);
/// CPUID.(7,0):EBX.AVX512DQ.
pub const AVX512DQ: Flag = flag(7, 0, Ebx, 17, "AVX512DQ", "avx512dq", AVX512_STATE);
/// CPUID.(7,0):EBX.AVX512_IFMA.
pub const AVX512_IFMA: Flag = flag(7, 0, Ebx, 21, "AVX512_IFMA", "avx512ifma", AVX512_STATE);
/// CPUID.(7,0):EBX.Intel PT (supervisor state only).
pub const PT: Flag = flag(7, 0, Ebx, 25, "INTEL_PT", "intel_pt", 0);
/// CPUID.(7,0):EBX.AVX512PF.
pub const AVX512PF: Flag = flag(7, 0, Ebx, 26, "AVX512PF", "avx512pf", AVX512_STATE);
/// CPUID.(7,0):EBX.AVX512ER.
pub const AVX512ER: Flag = flag(7, 0, Ebx, 27, "AVX512ER", "avx512er", AVX512_STATE);
/// CPUID.(7,0):EBX.AVX512CD.
pub const AVX512CD: Flag = flag(7, 0, Ebx, 28, "AVX512CD", "avx512cd", AVX512_STATE);
/// CPUID.(7,0):EBX.AVX512BW.
pub const AVX512BW: Flag = flag(7, 0, Ebx, 30, "AVX512BW", "avx512bw", AVX512_STATE);
/// CPUID.(7,0):EBX.AVX512VL.
pub const AVX512VL: Flag = flag(7, 0, Ebx, 31, "AVX512VL", "avx512vl", AVX512_STATE);
/// CPUID.(7,0):ECX.AVX512_VBMI.
pub const AVX512_VBMI: Flag = flag(7, 0, Ecx, 1, "AVX512_VBMI", "avx512vbmi", AVX512_STATE);
/// CPUID.(7,0):ECX.PKU.
pub const PKU: Flag = flag(7, 0, Ecx, 3, "PKU", "pku", PKRU_STATE);
/// CPUID.(7,0):ECX.OSPKE.
pub const OSPKE: Flag = flag(7, 0, Ecx, 4, "OSPKE", "ospke", PKRU_STATE);
/// CPUID.(7,0):ECX.AVX512_VBMI2.
pub const AVX512_VBMI2: Flag = flag(7, 0, Ecx, 6, "AVX512_VBMI2", "avx512_vbmi2", AVX512_STATE);
/// CPUID.(7,0):ECX.CET_SS (supervisor state only).
pub const CET_SS: Flag = flag(7, 0, Ecx, 7, "CET_SS", "", 0);
/// CPUID.(7,0):ECX.VAES.
pub const VAES: Flag = flag(7, 0, Ecx, 9, "VAES", "vaes", AVX_STATE);
/// CPUID.(7,0):ECX.VPCLMULQDQ.
pub const VPCLMULQDQ: Flag = flag(7, 0, Ecx, 10, "VPCLMULQDQ", "vpclmulqdq", AVX_STATE);
/// CPUID.(7,0):ECX.AVX512_VNNI.
pub const AVX512_VNNI: Flag = flag(7, 0, Ecx, 11, "AVX512_VNNI", "avx512_vnni", AVX512_STATE);
/// CPUID.(7,0):ECX.AVX512_BITALG.
pub const AVX512_BITALG: Flag = flag(
    7,
    0,
    Ecx,
    12,
    "AVX512_BITALG",
    "avx512_bitalg",
    AVX512_STATE,
);
/// CPUID.(7,0):ECX.AVX512_VPOPCNTDQ.
pub const AVX512_VPOPCNTDQ: Flag = flag(
    7,
    0,
    Ecx,
    14,
    "AVX512_VPOPCNTDQ",
    "avx512_vpopcntdq",
    AVX512_STATE,
);
/// CPUID.(7,0):ECX.KL (Key Locker).
pub const KEY_LOCKER: Flag = flag(7, 0, Ecx, 23, "KL", "", 0);
/// CPUID.(7,0):EDX.AVX512_4VNNIW.
pub const AVX512_4VNNIW: Flag = flag(7, 0, Edx, 2, "AVX512_4VNNIW", "avx512_4vnniw", AVX512_STATE);
/// CPUID.(7,0):EDX.AVX512_4FMAPS.
pub const AVX512_4FMAPS: Flag = flag(7, 0, Edx, 3, "AVX512_4FMAPS", "avx512_4fmaps", AVX512_STATE);
/// CPUID.(7,0):EDX.AVX512_VP2INTERSECT.
pub const AVX512_VP2INTERSECT: Flag = flag(
    7,
    0,
    Edx,
    8,
    "AVX512_VP2INTERSECT",
    "avx512_vp2intersect",
    AVX512_STATE,
);
/// CPUID.(7,0):EDX.CET_IBT (supervisor state only).
pub const CET_IBT: Flag = flag(7, 0, Edx, 20, "CET_IBT", "", 0);
/// CPUID.(7,0):EDX.AMX-BF16.
pub const AMX_BF16: Flag = flag(7, 0, Edx, 22, "AMX-BF16", "amx_bf16", AMX_STATE);
/// CPUID.(7,0):EDX.AVX512_FP16.
pub const AVX512_FP16: Flag = flag(7, 0, Edx, 23, "AVX512_FP16", "avx512_fp16", AVX512_STATE);
/// CPUID.(7,0):EDX.AMX-TILE.
pub const AMX_TILE: Flag = flag(7, 0, Edx, 24, "AMX-TILE", "amx_tile", AMX_STATE);
/// CPUID.(7,0):EDX.AMX-INT8.
pub const AMX_INT8: Flag = flag(7, 0, Edx, 25, "AMX-INT8", "amx_int8", AMX_STATE);
/// CPUID.(7,1):EAX.SHA512.
pub const SHA512: Flag = flag(7, 1, Eax, 0, "SHA512", "sha512", AVX_STATE);
/// CPUID.(7,1):EAX.SM3.
pub const SM3: Flag = flag(7, 1, Eax, 1, "SM3", "sm3", AVX_STATE);
/// CPUID.(7,1):EAX.SM4.
pub const SM4: Flag = flag(7, 1, Eax, 2, "SM4", "sm4", AVX_STATE);
/// CPUID.(7,1):EAX.AVX-VNNI.
pub const AVX_VNNI: Flag = flag(7, 1, Eax, 4, "AVX-VNNI", "avx_vnni", AVX_STATE);
/// CPUID.(7,1):EAX.AVX512_BF16.
pub const AVX512_BF16: Flag = flag(7, 1, Eax, 5, "AVX512_BF16", "avx512_bf16", AVX512_STATE);
/// CPUID.(7,1):EAX.AMX-FP16.
pub const AMX_FP16: Flag = flag(7, 1, Eax, 21, "AMX-FP16", "amx_fp16", AMX_STATE);
/// CPUID.(7,1):EAX.AVX-IFMA.
pub const AVX_IFMA: Flag = flag(7, 1, Eax, 23, "AVX-IFMA", "avx_ifma", AVX_STATE);
/// CPUID.(7,1):EDX.AVX-VNNI-INT8.
pub const AVX_VNNI_INT8: Flag = flag(7, 1, Edx, 4, "AVX-VNNI-INT8", "avx_vnni_int8", AVX_STATE);
/// CPUID.(7,1):EDX.AVX-NE-CONVERT.
pub const AVX_NE_CONVERT: Flag = flag(7, 1, Edx, 5, "AVX-NE-CONVERT", "avx_ne_convert", AVX_STATE);
/// CPUID.(7,1):EDX.AMX-COMPLEX.
pub const AMX_COMPLEX: Flag = flag(7, 1, Edx, 8, "AMX-COMPLEX", "amx_complex", AMX_STATE);
/// CPUID.(7,1):EDX.AVX-VNNI-INT16.
pub const AVX_VNNI_INT16: Flag = flag(7, 1, Edx, 10, "AVX-VNNI-INT16", "avx_vnni_int16", AVX_STATE);
/// CPUID.(7,1):EDX.APX_F.
pub const APX_F: Flag = flag(7, 1, Edx, 21, "APX_F", "apx_f", APX_STATE);

/// Every CPUID flag whose instructions use state outside x87/SSE, with the
/// components it needs (`needs` non-zero), in leaf/register/bit order.
/// VEX-encoded extensions (FMA, F16C, VAES, AVX-VNNI, ...) need AVX state
/// even though their names do not say so.
pub const GATED_FLAGS: &[Flag] = &[
    FMA,
    AVX,
    F16C,
    AVX2,
    MPX,
    AVX512F,
    AVX512DQ,
    AVX512_IFMA,
    AVX512PF,
    AVX512ER,
    AVX512CD,
    AVX512BW,
    AVX512VL,
    AVX512_VBMI,
    PKU,
    OSPKE,
    AVX512_VBMI2,
    VAES,
    VPCLMULQDQ,
    AVX512_VNNI,
    AVX512_BITALG,
    AVX512_VPOPCNTDQ,
    AVX512_4VNNIW,
    AVX512_4FMAPS,
    AVX512_VP2INTERSECT,
    AMX_BF16,
    AVX512_FP16,
    AMX_TILE,
    AMX_INT8,
    SHA512,
    SM3,
    SM4,
    AVX_VNNI,
    AVX512_BF16,
    AMX_FP16,
    AVX_IFMA,
    AVX_VNNI_INT8,
    AVX_NE_CONVERT,
    AMX_COMPLEX,
    AVX_VNNI_INT16,
    APX_F,
];

/// The AVX-512 flags other than AVX512F (the lint's AVX-512 rules): the
/// [`GATED_FLAGS`] that need the AVX-512 state, in table order.
pub const AVX512_OTHERS: [Flag; 17] = avx512_others();

/// [`AVX512_OTHERS`], picked from [`GATED_FLAGS`] at compile time.
const fn avx512_others<const N: usize>() -> [Flag; N] {
    let mut out = [AVX512F; N];
    let (mut i, mut n) = (0, 0);
    while i < GATED_FLAGS.len() {
        let f = GATED_FLAGS[i];
        let is_f = f.leaf == AVX512F.leaf && f.subleaf == AVX512F.subleaf && f.bit == AVX512F.bit;
        if f.needs == AVX512_STATE && !is_f {
            out[n] = f;
            n += 1;
        }
        i += 1;
    }
    assert!(n == N, "AVX512_OTHERS has the wrong length");
    out
}

/// VEX-encoded extensions that need AVX (and its state) to exist.
pub const VEX: [Flag; 5] = [FMA, F16C, AVX2, VAES, VPCLMULQDQ];
/// The AMX flags of leaf 7.0 (the lint's AMX rules).
pub const AMX: [Flag; 3] = [AMX_TILE, AMX_BF16, AMX_INT8];

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// [`GATED_FLAGS`] is in leaf/subleaf/register/bit order, each bit once,
    /// each with state and a `/proc/cpuinfo` name.
    #[test]
    fn gated_flags_are_ordered_and_gated() {
        let key = |f: &Flag| (f.leaf, f.subleaf, f.reg as u8, f.bit);
        for w in GATED_FLAGS.windows(2) {
            assert!(
                key(&w[0]) < key(&w[1]),
                "{} before {}",
                w[0].name,
                w[1].name
            );
        }
        for f in GATED_FLAGS {
            assert!(f.needs != 0 && !f.cpuinfo.is_empty(), "{}", f.name);
        }
        let names: Vec<&str> = AVX512_OTHERS.iter().map(|f| f.name).collect();
        assert_eq!(
            names.join(" "),
            "AVX512DQ AVX512_IFMA AVX512PF AVX512ER AVX512CD AVX512BW AVX512VL AVX512_VBMI \
             AVX512_VBMI2 AVX512_VNNI AVX512_BITALG AVX512_VPOPCNTDQ AVX512_4VNNIW \
             AVX512_4FMAPS AVX512_VP2INTERSECT AVX512_FP16 AVX512_BF16"
        );
        for f in AVX512_OTHERS.iter().chain(&VEX).chain(&AMX) {
            assert!(GATED_FLAGS.contains(f), "{}", f.name);
        }
    }
}
