//! The flags the rules read, named once.

use super::view::{flag, Flag, Reg};

/// CPUID.1:ECX.FMA.
pub const FMA: Flag = flag(1, 0, Reg::Ecx, 12, "FMA");
/// CPUID.1:ECX.XSAVE.
pub const XSAVE: Flag = flag(1, 0, Reg::Ecx, 26, "XSAVE");
/// CPUID.1:ECX.OSXSAVE.
pub const OSXSAVE: Flag = flag(1, 0, Reg::Ecx, 27, "OSXSAVE");
/// CPUID.1:ECX.AVX.
pub const AVX: Flag = flag(1, 0, Reg::Ecx, 28, "AVX");
/// CPUID.1:ECX.F16C.
pub const F16C: Flag = flag(1, 0, Reg::Ecx, 29, "F16C");
/// CPUID.(7,0):EBX.AVX2.
pub const AVX2: Flag = flag(7, 0, Reg::Ebx, 5, "AVX2");
/// CPUID.(7,0):EBX.MPX.
pub const MPX: Flag = flag(7, 0, Reg::Ebx, 14, "MPX");
/// CPUID.(7,0):EBX.AVX512F.
pub const AVX512F: Flag = flag(7, 0, Reg::Ebx, 16, "AVX512F");
/// CPUID.(7,0):EBX.Intel PT.
pub const PT: Flag = flag(7, 0, Reg::Ebx, 25, "INTEL_PT");
/// CPUID.(7,0):ECX.PKU.
pub const PKU: Flag = flag(7, 0, Reg::Ecx, 3, "PKU");
/// CPUID.(7,0):ECX.OSPKE.
pub const OSPKE: Flag = flag(7, 0, Reg::Ecx, 4, "OSPKE");
/// CPUID.(7,0):ECX.CET_SS.
pub const CET_SS: Flag = flag(7, 0, Reg::Ecx, 7, "CET_SS");
/// CPUID.(7,0):ECX.VAES.
pub const VAES: Flag = flag(7, 0, Reg::Ecx, 9, "VAES");
/// CPUID.(7,0):ECX.VPCLMULQDQ.
pub const VPCLMULQDQ: Flag = flag(7, 0, Reg::Ecx, 10, "VPCLMULQDQ");
/// CPUID.(7,0):ECX.KL (Key Locker).
pub const KEY_LOCKER: Flag = flag(7, 0, Reg::Ecx, 23, "KL");
/// CPUID.(7,0):EDX.CET_IBT.
pub const CET_IBT: Flag = flag(7, 0, Reg::Edx, 20, "CET_IBT");
/// CPUID.(7,0):EDX.AMX-BF16.
pub const AMX_BF16: Flag = flag(7, 0, Reg::Edx, 22, "AMX-BF16");
/// CPUID.(7,0):EDX.AMX-TILE.
pub const AMX_TILE: Flag = flag(7, 0, Reg::Edx, 24, "AMX-TILE");
/// CPUID.(7,0):EDX.AMX-INT8.
pub const AMX_INT8: Flag = flag(7, 0, Reg::Edx, 25, "AMX-INT8");

/// The AVX-512 flags other than AVX512F.
pub const AVX512_OTHERS: [Flag; 17] = [
    flag(7, 0, Reg::Ebx, 17, "AVX512DQ"),
    flag(7, 0, Reg::Ebx, 21, "AVX512_IFMA"),
    flag(7, 0, Reg::Ebx, 26, "AVX512PF"),
    flag(7, 0, Reg::Ebx, 27, "AVX512ER"),
    flag(7, 0, Reg::Ebx, 28, "AVX512CD"),
    flag(7, 0, Reg::Ebx, 30, "AVX512BW"),
    flag(7, 0, Reg::Ebx, 31, "AVX512VL"),
    flag(7, 0, Reg::Ecx, 1, "AVX512_VBMI"),
    flag(7, 0, Reg::Ecx, 6, "AVX512_VBMI2"),
    flag(7, 0, Reg::Ecx, 11, "AVX512_VNNI"),
    flag(7, 0, Reg::Ecx, 12, "AVX512_BITALG"),
    flag(7, 0, Reg::Ecx, 14, "AVX512_VPOPCNTDQ"),
    flag(7, 0, Reg::Edx, 2, "AVX512_4VNNIW"),
    flag(7, 0, Reg::Edx, 3, "AVX512_4FMAPS"),
    flag(7, 0, Reg::Edx, 8, "AVX512_VP2INTERSECT"),
    flag(7, 0, Reg::Edx, 23, "AVX512_FP16"),
    flag(7, 1, Reg::Eax, 5, "AVX512_BF16"),
];
/// VEX-encoded extensions that need AVX (and its state) to exist.
pub const VEX: [Flag; 5] = [FMA, F16C, AVX2, VAES, VPCLMULQDQ];
/// The AMX flags.
pub const AMX: [Flag; 3] = [AMX_TILE, AMX_BF16, AMX_INT8];
