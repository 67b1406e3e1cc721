//! The flags the rules read: the constants of [`crate::flags`], the one
//! table of extended-state CPUID flags, under the names the rules use.

pub use crate::flags::{
    AMX, AMX_BF16, AMX_INT8, AMX_TILE, AVX, AVX2, AVX512F, AVX512_OTHERS, CET_IBT, CET_SS, F16C,
    FMA, KEY_LOCKER, MPX, OSPKE, OSXSAVE, PKU, PT, VAES, VEX, VPCLMULQDQ, XSAVE,
};
