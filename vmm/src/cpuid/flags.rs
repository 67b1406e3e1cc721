//! The instruction-set flags whose instructions use extended state, with
//! the XCR0 components each needs: what a policy that leaves a component
//! out must hide from the guest, and what `vmm features` compares.

use kvm_bindings::CpuId;

use super::leaf::{entry, reg, Reg};

/// One CPUID feature bit that depends on extended state being enabled.
#[derive(Clone, Copy, Debug)]
pub struct GatedFlag {
    /// Leaf of the flag.
    pub leaf: u32,
    /// Subleaf of the flag.
    pub subleaf: u32,
    /// Register holding the flag.
    pub reg: Reg,
    /// Bit number in `reg`.
    pub bit: u32,
    /// Feature name as `/proc/cpuinfo` prints it.
    pub name: &'static str,
    /// The flag is only usable when every component in this mask is enabled.
    pub needs: u64,
}

/// Components of the flags' `needs`, by XCR0 bit.
const AVX: u64 = 1 << 2;
const MPX: u64 = (1 << 3) | (1 << 4);
const AVX512: u64 = AVX | (1 << 5) | (1 << 6) | (1 << 7);
const PKRU: u64 = 1 << 9;
/// XTILECFG and XTILEDATA.
pub(crate) const AMX: u64 = (1 << 17) | (1 << 18);
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

/// Read one flag from a CPUID table.
pub fn flag_set(cpuid: &CpuId, f: &GatedFlag) -> bool {
    entry(cpuid, f.leaf, f.subleaf).is_some_and(|e| reg(e, f.reg) & (1 << f.bit) != 0)
}
