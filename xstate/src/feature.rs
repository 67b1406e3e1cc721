//! The XSAVE state components ("xfeatures") 0..=19 known to this crate.
//!
//! A state component is one block of processor state that the XSAVE family
//! manages; component `i` corresponds to bit `i` of XCR0 (user state) or of the
//! IA32_XSS MSR (supervisor state). Components with a higher index than
//! [`Xfeature::Apx`] may still be enumerated by a CPU; the rest of the crate
//! handles them by index (see [`crate::XsaveInfo::component_by_index`]).
//!
//! This is the bottom layer of the crate: it knows nothing of masks, CPUID or
//! buffers, so every other module can name a component without a cycle.

use core::fmt;

/// One XSAVE-managed state component, numbered by its XCR0/IA32_XSS bit.
///
/// # Examples
/// ```
/// use xstate::Xfeature;
/// let pkru = Xfeature::from_short_name("pkru").unwrap();
/// assert_eq!((pkru.index(), pkru.bit()), (9, 0x200));
/// assert!(!pkru.is_supervisor()); // XCR0 state, saved by XSAVE
/// assert!(Xfeature::CetU.is_supervisor()); // IA32_XSS state, XSAVES only
/// assert_eq!(Xfeature::from_index(18), Some(Xfeature::XtileData));
/// assert_eq!(Xfeature::ZmmHi256.to_string(), "zmm_hi256");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Xfeature {
    /// x87 FPU state (legacy region bytes 0..24 and 32..160).
    X87 = 0,
    /// SSE state: XMM0-15 (legacy region 160..416) and MXCSR (bytes 24..28).
    Sse = 1,
    /// Upper halves of YMM0-15 (YMM_Hi128).
    Avx = 2,
    /// MPX bound registers BND0-3.
    BndRegs = 3,
    /// MPX BNDCFGU and BNDSTATUS.
    BndCsr = 4,
    /// AVX-512 opmask registers k0-k7.
    Opmask = 5,
    /// Upper 256 bits of ZMM0-15 (ZMM_Hi256).
    ZmmHi256 = 6,
    /// ZMM16-31 (Hi16_ZMM).
    Hi16Zmm = 7,
    /// Intel Processor Trace MSRs (supervisor).
    Pt = 8,
    /// Protection-key rights register for user pages.
    Pkru = 9,
    /// IA32_PASID MSR for ENQCMD (supervisor).
    Pasid = 10,
    /// CET user-mode state: IA32_U_CET and IA32_PL3_SSP (supervisor).
    CetU = 11,
    /// CET supervisor shadow-stack pointers IA32_PL0-2_SSP (supervisor).
    CetS = 12,
    /// Hardware Duty Cycling state: the IA32_PM_CTL1 MSR (supervisor).
    Hdc = 13,
    /// User interrupts (supervisor).
    Uintr = 14,
    /// Architectural last branch records (supervisor).
    Lbr = 15,
    /// Hardware P-states state: the IA32_HWP_REQUEST MSR (supervisor).
    Hwp = 16,
    /// AMX tile configuration (TILECFG), 64 bytes.
    XtileCfg = 17,
    /// AMX tile data TMM0-7, 8 KiB.
    XtileData = 18,
    /// APX extended general-purpose registers R16-R31.
    Apx = 19,
}

impl Xfeature {
    /// Every known component, in ascending bit order.
    pub const ALL: [Xfeature; 20] = [
        Xfeature::X87,
        Xfeature::Sse,
        Xfeature::Avx,
        Xfeature::BndRegs,
        Xfeature::BndCsr,
        Xfeature::Opmask,
        Xfeature::ZmmHi256,
        Xfeature::Hi16Zmm,
        Xfeature::Pt,
        Xfeature::Pkru,
        Xfeature::Pasid,
        Xfeature::CetU,
        Xfeature::CetS,
        Xfeature::Hdc,
        Xfeature::Uintr,
        Xfeature::Lbr,
        Xfeature::Hwp,
        Xfeature::XtileCfg,
        Xfeature::XtileData,
        Xfeature::Apx,
    ];

    /// The component with XCR0/IA32_XSS bit `i`, if this crate knows it.
    pub fn from_index(i: u32) -> Option<Self> {
        Self::ALL.get(i as usize).copied()
    }

    /// The component's bit number.
    pub const fn index(self) -> u32 {
        self as u32
    }

    /// The component's bit (`1 << index`), usable in constants.
    pub const fn bit(self) -> u64 {
        1u64 << self.index()
    }

    /// Short lower-case name used in mask strings (`x87`, `zmm_hi256`, ...).
    pub fn short_name(self) -> &'static str {
        match self {
            Xfeature::X87 => "x87",
            Xfeature::Sse => "sse",
            Xfeature::Avx => "avx",
            Xfeature::BndRegs => "bndregs",
            Xfeature::BndCsr => "bndcsr",
            Xfeature::Opmask => "opmask",
            Xfeature::ZmmHi256 => "zmm_hi256",
            Xfeature::Hi16Zmm => "hi16_zmm",
            Xfeature::Pt => "pt",
            Xfeature::Pkru => "pkru",
            Xfeature::Pasid => "pasid",
            Xfeature::CetU => "cet_u",
            Xfeature::CetS => "cet_s",
            Xfeature::Hdc => "hdc",
            Xfeature::Uintr => "uintr",
            Xfeature::Lbr => "lbr",
            Xfeature::Hwp => "hwp",
            Xfeature::XtileCfg => "xtilecfg",
            Xfeature::XtileData => "xtiledata",
            Xfeature::Apx => "apx",
        }
    }

    /// What the component holds, in this project's words after the Intel
    /// SDM (Vol. 1, 13.1 "XSAVE-Supported Features and State-Component
    /// Bitmaps" and the per-component sections of 13.5; APX: the Intel APX
    /// architecture specification). Every component 0..=19 has one, the
    /// supervisor ones included (13: HDC state, the IA32_PM_CTL1 MSR; 16: HWP
    /// state, the IA32_HWP_REQUEST MSR). Short enough for one table cell.
    pub fn long_name(self) -> &'static str {
        match self {
            Xfeature::X87 => "x87 FPU: ST0-7 and control words",
            Xfeature::Sse => "SSE registers XMM0-15 and MXCSR",
            Xfeature::Avx => "AVX: upper halves of YMM0-15",
            Xfeature::BndRegs => "MPX bound registers BND0-3",
            Xfeature::BndCsr => "MPX BNDCFGU and BNDSTATUS",
            Xfeature::Opmask => "AVX-512 opmask registers k0-7",
            Xfeature::ZmmHi256 => "AVX-512: upper halves of ZMM0-15",
            Xfeature::Hi16Zmm => "AVX-512 registers ZMM16-31",
            Xfeature::Pt => "Processor Trace MSRs",
            Xfeature::Pkru => "protection-key rights (PKRU)",
            Xfeature::Pasid => "PASID MSR for ENQCMD",
            Xfeature::CetU => "CET user state: U_CET, PL3_SSP",
            Xfeature::CetS => "CET shadow-stack ptrs PL0-2_SSP",
            Xfeature::Hdc => "HDC state (IA32_PM_CTL1)",
            Xfeature::Uintr => "user-interrupt state (UINTR)",
            Xfeature::Lbr => "architectural LBR MSRs",
            Xfeature::Hwp => "HWP state (IA32_HWP_REQUEST)",
            Xfeature::XtileCfg => "AMX tile configuration TILECFG",
            Xfeature::XtileData => "AMX tile data TMM0-7",
            Xfeature::Apx => "APX registers R16-R31",
        }
    }

    /// Whether the component is supervisor state, enabled through IA32_XSS and
    /// saved only by XSAVES (never part of XCR0 or of a standard-format area).
    pub const fn is_supervisor(self) -> bool {
        matches!(
            self,
            Xfeature::Pt
                | Xfeature::Pasid
                | Xfeature::CetU
                | Xfeature::CetS
                | Xfeature::Hdc
                | Xfeature::Uintr
                | Xfeature::Lbr
                | Xfeature::Hwp
        )
    }

    /// Whether the component lives in the 512-byte legacy (FXSAVE) region at a
    /// fixed place rather than in the extended region.
    pub const fn is_legacy(self) -> bool {
        matches!(self, Xfeature::X87 | Xfeature::Sse)
    }

    /// Looks a component up by its short name (ASCII case-insensitive).
    pub fn from_short_name(name: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|f| f.short_name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Xfeature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}
