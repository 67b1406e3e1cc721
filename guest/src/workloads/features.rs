//! Which ISA variants the workloads may run: CPUID as reported AND the state
//! components the OS (the guest kernel, or Linux for the native run) enabled
//! in XCR0.
//!
//! A CPUID bit alone is not enough: AVX instructions raise #UD unless XCR0
//! enables SSE and AVX state, and AVX-512 ones unless it also enables the
//! opmask, ZMM_Hi256 and Hi16_ZMM components. That is exactly the situation
//! `vmm run --xfeatures x87,sse` creates (CPUID may still list AVX, XCR0 is
//! 0x3), and the workloads must then skip every VEX/EVEX variant and say why.

use core::fmt::Write;

use super::text::Reason;
use xstate::info::leaf_1_ecx;

/// XCR0 bit 1: SSE state (XMM registers, MXCSR).
pub const XCR0_SSE: u64 = 1 << 1;
/// XCR0 bit 2: AVX state (upper halves of YMM0-15).
pub const XCR0_AVX: u64 = 1 << 2;
/// XCR0 bit 5: AVX-512 opmask registers k0-k7.
pub const XCR0_OPMASK: u64 = 1 << 5;
/// XCR0 bit 6: ZMM_Hi256 (upper halves of ZMM0-15).
pub const XCR0_ZMM_HI256: u64 = 1 << 6;
/// XCR0 bit 7: Hi16_ZMM (ZMM16-31).
pub const XCR0_HI16_ZMM: u64 = 1 << 7;

/// XCR0 components every VEX-encoded instruction needs.
pub const XCR0_AVX_STATE: u64 = XCR0_SSE | XCR0_AVX;
/// XCR0 components every EVEX-encoded (AVX-512) instruction needs.
pub const XCR0_AVX512_STATE: u64 = XCR0_AVX_STATE | XCR0_OPMASK | XCR0_ZMM_HI256 | XCR0_HI16_ZMM;

// CPUID.1:ECX
const C1_PCLMULQDQ: u32 = 1 << 1;
const C1_FMA: u32 = 1 << 12;
const C1_SSE41: u32 = 1 << 19;
const C1_AES: u32 = 1 << 25;
const C1_AVX: u32 = 1 << 28;
// CPUID.1:EDX
const D1_SSE2: u32 = 1 << 26;
// CPUID.(EAX=7,ECX=0):EBX
const B7_AVX2: u32 = 1 << 5;
const B7_AVX512F: u32 = 1 << 16;
const B7_AVX512BW: u32 = 1 << 30;
const B7_AVX512VL: u32 = 1 << 31;
// CPUID.(EAX=7,ECX=0):ECX
const C7_VAES: u32 = 1 << 9;
const C7_VPCLMULQDQ: u32 = 1 << 10;

/// Usable CPU features: each flag is set only when CPUID reports the feature
/// and XCR0 enables the state its instructions touch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    /// AES-NI usable.
    pub aesni: bool,
    /// PCLMULQDQ usable.
    pub pclmul: bool,
    /// SSE2 usable.
    pub sse2: bool,
    /// SSE4.1 usable.
    pub sse41: bool,
    /// AVX (and AVX state in XCR0) usable.
    pub avx: bool,
    /// AVX2 usable.
    pub avx2: bool,
    /// FMA3 usable.
    pub fma: bool,
    /// VAES usable.
    pub vaes: bool,
    /// VPCLMULQDQ usable.
    pub vpclmulqdq: bool,
    /// AVX512F (and the AVX-512 state in XCR0) usable.
    pub avx512f: bool,
    /// AVX512VL usable.
    pub avx512vl: bool,
    /// AVX512BW usable.
    pub avx512bw: bool,
    /// XCR0 as the OS enabled it (0 when CPUID.1:ECX.OSXSAVE is clear).
    pub xcr0: u64,
}

impl CpuFeatures {
    /// [`CpuFeatures::from_cpuid`] of the CPUID words and XCR0 a report
    /// recorded (the guest kernel fills them in at boot).
    pub fn from_report(report: &crate::protocol::Report) -> Self {
        Self::from_cpuid(
            report.cpuid1_ecx,
            report.cpuid1_edx,
            report.cpuid7_ebx,
            report.cpuid7_ecx,
            report.xcr0,
        )
    }

    /// From raw CPUID words and the XCR0 the OS enabled: a feature is usable
    /// only when CPUID reports it AND XCR0 enables its state (AVX needs XCR0
    /// bits 1|2; AVX-512 needs 5|6|7 as well).
    ///
    /// `xcr0` is ignored (taken as 0) when CPUID.1:ECX.OSXSAVE is clear: the
    /// OS has then not enabled XSAVE, XGETBV is #UD and no VEX instruction
    /// may run.
    pub fn from_cpuid(
        cpuid1_ecx: u32,
        cpuid1_edx: u32,
        cpuid7_ebx: u32,
        cpuid7_ecx: u32,
        xcr0: u64,
    ) -> Self {
        let xcr0 = if cpuid1_ecx & leaf_1_ecx::OSXSAVE != 0 {
            xcr0
        } else {
            0
        };
        let avx_state = xcr0 & XCR0_AVX_STATE == XCR0_AVX_STATE;
        let avx512_state = xcr0 & XCR0_AVX512_STATE == XCR0_AVX512_STATE;
        let sse2 = cpuid1_edx & D1_SSE2 != 0;
        let avx = avx_state && cpuid1_ecx & C1_AVX != 0;
        let avx512f = avx && avx512_state && cpuid7_ebx & B7_AVX512F != 0;
        CpuFeatures {
            aesni: sse2 && cpuid1_ecx & C1_AES != 0,
            pclmul: sse2 && cpuid1_ecx & C1_PCLMULQDQ != 0,
            sse2,
            sse41: sse2 && cpuid1_ecx & C1_SSE41 != 0,
            avx,
            avx2: avx && cpuid7_ebx & B7_AVX2 != 0,
            fma: avx && cpuid1_ecx & C1_FMA != 0,
            vaes: avx && cpuid7_ecx & C7_VAES != 0,
            vpclmulqdq: avx && cpuid7_ecx & C7_VPCLMULQDQ != 0,
            avx512f,
            avx512vl: avx512f && cpuid7_ebx & B7_AVX512VL != 0,
            avx512bw: avx512f && cpuid7_ebx & B7_AVX512BW != 0,
            xcr0,
        }
    }

    /// The features of the CPU this code runs on, from CPUID and XGETBV.
    ///
    /// Both instructions work at any privilege level (XGETBV once the OS set
    /// CR4.OSXSAVE, which CPUID.1:ECX.OSXSAVE reflects), so the guest's CPL3
    /// tasks and the VMM's native run can both call this.
    pub fn detect() -> Self {
        use xstate::info::cpuid;
        // Leaf 7 is read only when leaf 0 says it exists.
        let (l1, max_leaf) = (cpuid(1, 0), cpuid(0, 0).eax);
        let (b7, c7) = if max_leaf >= 7 {
            let l7 = cpuid(7, 0);
            (l7.ebx, l7.ecx)
        } else {
            (0, 0)
        };
        let xcr0 = if l1.ecx & leaf_1_ecx::OSXSAVE != 0 {
            // SAFETY: CR4.OSXSAVE is set (CPUID.1:ECX.OSXSAVE), so XGETBV
            // with ECX=0 is defined at every privilege level.
            unsafe { read_xcr0() }
        } else {
            0
        };
        Self::from_cpuid(l1.ecx, l1.edx, b7, c7, xcr0)
    }

    /// Features present in both `self` and `other` (XCR0 bits ANDed too):
    /// lets a caller's policy narrow what this CPU can do, never widen it.
    pub fn intersect(&self, other: &Self) -> Self {
        CpuFeatures {
            aesni: self.aesni && other.aesni,
            pclmul: self.pclmul && other.pclmul,
            sse2: self.sse2 && other.sse2,
            sse41: self.sse41 && other.sse41,
            avx: self.avx && other.avx,
            avx2: self.avx2 && other.avx2,
            fma: self.fma && other.fma,
            vaes: self.vaes && other.vaes,
            vpclmulqdq: self.vpclmulqdq && other.vpclmulqdq,
            avx512f: self.avx512f && other.avx512f,
            avx512vl: self.avx512vl && other.avx512vl,
            avx512bw: self.avx512bw && other.avx512bw,
            xcr0: self.xcr0 & other.xcr0,
        }
    }

    /// The first of `reqs` these features do not meet, as a skip reason.
    pub fn check(&self, reqs: &[Requirement]) -> Result<(), Reason> {
        for &r in reqs {
            if !r.met(self) {
                return Err(r.reason(self));
            }
        }
        Ok(())
    }
}

/// XGETBV(0).
///
/// # Safety
/// CR4.OSXSAVE must be set (CPUID.1:ECX.OSXSAVE).
#[target_feature(enable = "xsave")]
unsafe fn read_xcr0() -> u64 {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe { core::arch::x86_64::_xgetbv(0) }
}

/// One thing an ISA variant needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// SSE2 (baseline x86-64, but the guest's CPUID could still hide it).
    Sse2,
    /// AES-NI (`aesenc`, `aeskeygenassist`).
    AesNi,
    /// AVX instructions and AVX state in XCR0.
    Avx,
    /// AVX2 (256-bit integer instructions).
    Avx2,
    /// FMA3.
    Fma,
    /// VAES (AES rounds on YMM/ZMM registers).
    Vaes,
    /// AVX512F instructions and the three AVX-512 state components in XCR0.
    Avx512f,
    /// PCLMULQDQ (carry-less multiplication on XMM registers).
    Pclmulqdq,
    /// VPCLMULQDQ (carry-less multiplication on YMM/ZMM registers).
    Vpclmulqdq,
    /// AVX512BW (byte and word operations on ZMM registers).
    Avx512bw,
}

impl Requirement {
    /// Whether `f` satisfies this requirement.
    pub fn met(self, f: &CpuFeatures) -> bool {
        match self {
            Requirement::Sse2 => f.sse2,
            Requirement::AesNi => f.aesni,
            Requirement::Avx => f.avx,
            Requirement::Avx2 => f.avx2,
            Requirement::Fma => f.fma,
            Requirement::Vaes => f.vaes,
            Requirement::Avx512f => f.avx512f,
            Requirement::Pclmulqdq => f.pclmul,
            Requirement::Vpclmulqdq => f.vpclmulqdq,
            Requirement::Avx512bw => f.avx512bw,
        }
    }

    /// Why `f` does not satisfy this requirement: missing OS state (XCR0)
    /// is named before a missing CPUID bit, since a feature whose state is
    /// off is cleared by [`CpuFeatures::from_cpuid`] whatever CPUID says.
    pub fn reason(self, f: &CpuFeatures) -> Reason {
        let mut r = Reason::new();
        let needs_avx_state = !matches!(
            self,
            Requirement::Sse2 | Requirement::AesNi | Requirement::Pclmulqdq
        );
        let avx512 = matches!(self, Requirement::Avx512f | Requirement::Avx512bw);
        let x = f.xcr0;
        // `Reason` truncates instead of failing, so these writes cannot fail.
        let _ = if needs_avx_state && x & XCR0_AVX_STATE != XCR0_AVX_STATE {
            write!(r, "needs {}: XCR0 {x:#x} lacks AVX state", self.name())
        } else if avx512 && x & XCR0_AVX512_STATE != XCR0_AVX512_STATE {
            write!(r, "needs AVX-512: XCR0 {x:#x} lacks opmask/ZMM state")
        } else if needs_avx_state && self != Requirement::Avx && !f.avx {
            write!(r, "needs {}: CPUID.1:ECX.AVX clear", self.name())
        } else {
            write!(r, "needs {}: {} clear", self.name(), self.cpuid_bit())
        };
        r
    }

    /// The feature's usual name.
    pub fn name(self) -> &'static str {
        match self {
            Requirement::Sse2 => "SSE2",
            Requirement::AesNi => "AES-NI",
            Requirement::Avx => "AVX",
            Requirement::Avx2 => "AVX2",
            Requirement::Fma => "FMA",
            Requirement::Vaes => "VAES",
            Requirement::Avx512f => "AVX512F",
            Requirement::Pclmulqdq => "PCLMULQDQ",
            Requirement::Vpclmulqdq => "VPCLMULQDQ",
            Requirement::Avx512bw => "AVX512BW",
        }
    }

    /// Where CPUID reports the feature.
    pub fn cpuid_bit(self) -> &'static str {
        match self {
            Requirement::Sse2 => "CPUID.1:EDX.SSE2",
            Requirement::AesNi => "CPUID.1:ECX.AESNI",
            Requirement::Avx => "CPUID.1:ECX.AVX",
            Requirement::Avx2 => "CPUID.7.0:EBX.AVX2",
            Requirement::Fma => "CPUID.1:ECX.FMA",
            Requirement::Vaes => "CPUID.7.0:ECX.VAES",
            Requirement::Avx512f => "CPUID.7.0:EBX.AVX512F",
            Requirement::Pclmulqdq => "CPUID.1:ECX.PCLMULQDQ",
            Requirement::Vpclmulqdq => "CPUID.7.0:ECX.VPCLMULQDQ",
            Requirement::Avx512bw => "CPUID.7.0:EBX.AVX512BW",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::std;

    const ALL_ECX1: u32 = C1_PCLMULQDQ | C1_FMA | C1_SSE41 | C1_AES | leaf_1_ecx::OSXSAVE | C1_AVX;
    const ALL_EBX7: u32 = B7_AVX2 | B7_AVX512F | B7_AVX512BW | B7_AVX512VL;
    const ALL_ECX7: u32 = C7_VAES | C7_VPCLMULQDQ;

    #[test]
    fn avx_needs_xcr0_avx_state() {
        let f = CpuFeatures::from_cpuid(ALL_ECX1, D1_SSE2, ALL_EBX7, ALL_ECX7, 0x3);
        assert!(f.sse2 && f.aesni && f.sse41 && f.pclmul);
        assert!(!f.avx && !f.avx2 && !f.fma && !f.vaes && !f.vpclmulqdq && !f.avx512f);
        assert_eq!(
            Requirement::Avx.reason(&f).as_str(),
            "needs AVX: XCR0 0x3 lacks AVX state"
        );
        assert_eq!(
            Requirement::Vaes.reason(&f).as_str(),
            "needs VAES: XCR0 0x3 lacks AVX state"
        );
        assert!(f.check(&[Requirement::Sse2, Requirement::AesNi]).is_ok());
    }

    #[test]
    fn avx512_needs_all_three_components() {
        let f = CpuFeatures::from_cpuid(ALL_ECX1, D1_SSE2, ALL_EBX7, ALL_ECX7, 0x7);
        assert!(f.avx && f.avx2 && f.fma && f.vaes && f.vpclmulqdq);
        assert!(!f.avx512f && !f.avx512bw && !f.avx512vl);
        assert_eq!(
            Requirement::Avx512f.reason(&f).as_str(),
            "needs AVX-512: XCR0 0x7 lacks opmask/ZMM state"
        );
        for partial in [0x67, 0xa7, 0xc7] {
            let f = CpuFeatures::from_cpuid(ALL_ECX1, D1_SSE2, ALL_EBX7, ALL_ECX7, partial);
            assert!(!f.avx512f, "xcr0 {partial:#x}");
        }
        let f = CpuFeatures::from_cpuid(ALL_ECX1, D1_SSE2, ALL_EBX7, ALL_ECX7, 0xe7);
        assert!(f.avx512f && f.avx512bw && f.avx512vl);
    }

    #[test]
    fn cpuid_bits_gate_and_name_themselves() {
        let f = CpuFeatures::from_cpuid(leaf_1_ecx::OSXSAVE | C1_AVX | C1_AES, D1_SSE2, 0, 0, 0x7);
        assert!(f.avx && f.aesni && !f.avx2 && !f.vaes && !f.fma);
        assert_eq!(
            Requirement::Vaes.reason(&f).as_str(),
            "needs VAES: CPUID.7.0:ECX.VAES clear"
        );
        assert_eq!(
            f.check(&[Requirement::Avx, Requirement::Avx2, Requirement::Fma])
                .unwrap_err()
                .as_str(),
            "needs AVX2: CPUID.7.0:EBX.AVX2 clear"
        );
        let f = CpuFeatures::from_cpuid(
            leaf_1_ecx::OSXSAVE | C1_AES,
            D1_SSE2,
            ALL_EBX7,
            ALL_ECX7,
            0x7,
        );
        assert!(!f.avx && !f.avx2);
        assert_eq!(
            Requirement::Avx2.reason(&f).as_str(),
            "needs AVX2: CPUID.1:ECX.AVX clear"
        );
        let f = CpuFeatures::from_cpuid(0, D1_SSE2, 0, 0, 0);
        assert_eq!(
            Requirement::AesNi.reason(&f).as_str(),
            "needs AES-NI: CPUID.1:ECX.AESNI clear"
        );
    }

    #[test]
    fn osxsave_clear_means_no_xcr0() {
        let f = CpuFeatures::from_cpuid(
            ALL_ECX1 & !leaf_1_ecx::OSXSAVE,
            D1_SSE2,
            ALL_EBX7,
            ALL_ECX7,
            0xe7,
        );
        assert_eq!(f.xcr0, 0);
        assert!(!f.avx && !f.avx512f && f.aesni);
    }

    #[test]
    fn intersect_only_narrows() {
        let host = CpuFeatures::detect();
        let policy = CpuFeatures::from_cpuid(ALL_ECX1, D1_SSE2, ALL_EBX7, ALL_ECX7, 0x3);
        let both = policy.intersect(&host);
        assert!(!both.avx && !both.vaes);
        assert_eq!(both.xcr0, host.xcr0 & 0x3);
        assert_eq!(host.intersect(&host), host);
    }

    #[test]
    fn detect_matches_std() {
        let f = CpuFeatures::detect();
        assert_eq!(f.sse2, std::is_x86_feature_detected!("sse2"));
        assert_eq!(f.aesni, std::is_x86_feature_detected!("aes"));
        assert_eq!(f.avx, std::is_x86_feature_detected!("avx"));
        assert_eq!(f.avx2, std::is_x86_feature_detected!("avx2"));
        assert_eq!(f.fma, std::is_x86_feature_detected!("fma"));
        assert_eq!(f.avx512f, std::is_x86_feature_detected!("avx512f"));
    }
}
