//! The rule table: every rule's id, name, severity and rationale, and its
//! check.

use core::fmt;

use super::avx::{
    avx512_needs_f, avx512_state, avx512_state_hidden, avx512_without_avx2, avx_state,
    avx_state_hidden, vex_needs_avx,
};
use super::facts::Facts;
use super::state::{
    amx_leaves, amx_state, amx_state_hidden, cet_state, key_locker_leaf, mpx_state,
    mpx_state_hidden, pku_state, pku_state_hidden, pt_state,
};
use super::violation::{RuleId, Severity, Sink, Skip};
use super::xsave::{
    compacted_size, component_subleaves, enabled_standard_size, max_standard_size, osxsave_cr4,
    osxsave_needs_xsave, supported_xcr0, xfd_flag, xsave_leaf, xsavec_align, xsaveopt_present,
    xsaves_xss,
};

impl RuleId {
    /// The rule's entry in [`RULES`].
    pub fn rule(self) -> &'static Rule {
        // RULES lists every id once, in declaration order (tested).
        &RULES[self as usize]
    }

    /// The rule's kebab-case name.
    pub fn name(self) -> &'static str {
        self.rule().name
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One rule of the lint.
pub struct Rule {
    /// Its id.
    pub id: RuleId,
    /// Kebab-case name (`avx512-state-hidden`), stable for scripts.
    pub name: &'static str,
    /// How bad breaking it is.
    pub severity: Severity,
    /// What it checks, in one line.
    pub summary: &'static str,
    /// Why the architecture links these bits (after the SDM/APM).
    pub why: &'static str,
    /// The check.
    pub check: fn(&Facts<'_>, &mut Sink<'_>) -> Result<(), Skip>,
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule").field("name", &self.name).finish()
    }
}

macro_rules! rule {
    ($id:ident, $name:literal, $sev:ident, $check:ident, $summary:literal, $why:literal) => {
        Rule {
            id: RuleId::$id,
            name: $name,
            severity: Severity::$sev,
            summary: $summary,
            why: $why,
            check: $check,
        }
    };
}

/// Every rule, in [`RuleId`] order.
pub static RULES: [Rule; 29] =
    [
        rule!(
            XsaveLeaf,
            "xsave-leaf",
            Error,
            xsave_leaf,
            "XSAVE (1.ECX[26]) <=> leaf 0xD enumerates XCR0 bits",
            "SDM Vol. 1 13.2: CPUID.1:ECX.XSAVE enumerates the XSAVE feature set (XSAVE/XRSTOR, \
         XSETBV/XGETBV, XCR0) and leaf 0DH enumerates its state components; one is not \
         defined without the other."
        ),
        rule!(
            OsxsaveNeedsXsave,
            "osxsave-needs-xsave",
            Error,
            osxsave_needs_xsave,
            "OSXSAVE (1.ECX[27]) => XSAVE",
            "SDM Vol. 3A 2.5: CR4.OSXSAVE can only be set on a processor that supports XSAVE \
         (setting it otherwise faults), and CPUID.1:ECX.OSXSAVE reflects CR4.OSXSAVE."
        ),
        rule!(
            OsxsaveCr4,
            "osxsave-cr4",
            Error,
            osxsave_cr4,
            "OSXSAVE (1.ECX[27]) = CR4.OSXSAVE",
            "SDM Vol. 2A CPUID: bit 27 of ECX is a copy of CR4.OSXSAVE; software tests it before \
         XGETBV, which faults when CR4.OSXSAVE is clear."
        ),
        rule!(
            SupportedXcr0,
            "supported-xcr0",
            Error,
            supported_xcr0,
            "0xD.0 EDX:EAX is a valid XCR0",
            "SDM Vol. 1 13.3: XSETBV faults for an XCR0 without x87, with AVX but not SSE, with \
         part of AVX-512 (5-7), part of MPX (3-4) or part of AMX (17-18); a processor \
         supports whole groups, so its full supported mask is always settable."
        ),
        rule!(
            ComponentSubleaves,
            "component-subleaves",
            Error,
            component_subleaves,
            "each supported component's subleaf 0xD.i is present and sane",
            "SDM Vol. 1 13.2: for each supported component i >= 2, CPUID.(0DH,i) gives a non-zero \
         size, user components an offset past the 576-byte legacy region and header inside \
         the maximum size, and ECX[0] whether it is IA32_XSS state."
        ),
        rule!(
            AvxState,
            "avx-state",
            Error,
            avx_state,
            "AVX (1.ECX[28]) => XCR0 bits 1 and 2 supported",
            "SDM Vol. 1 14.3: AVX instructions need XCR0[2:1] = 11b; a processor with AVX \
         enumerates SSE and AVX state in leaf 0DH."
        ),
        rule!(
            AvxStateHidden,
            "avx-state-hidden",
            Warning,
            avx_state_hidden,
            "XCR0 bit 2 supported => AVX (1.ECX[28])",
            "AVX state exists for the AVX instructions; an OS (Linux) drops XSAVE components \
         whose feature flag is clear, so state enumerated with its feature hidden is unusable."
        ),
        rule!(
            VexNeedsAvx,
            "vex-needs-avx",
            Error,
            vex_needs_avx,
            "FMA, F16C, AVX2, VAES, VPCLMULQDQ => AVX",
            "SDM Vol. 1 14.5-14.7: the detection procedure of the VEX-encoded extensions checks \
         AVX (and XCR0 through OSXSAVE) first; they operate on the YMM state of AVX."
        ),
        rule!(
            Avx512State,
            "avx512-state",
            Error,
            avx512_state,
            "AVX-512 flags (7.0 EBX/ECX/EDX, 7.1 EAX[5]) => XCR0 bits 2 and 5-7 supported",
            "SDM Vol. 1 15.2: AVX-512 instructions need XCR0[7:5] = 111b and XCR0[2:1] = 11b \
         (opmask, ZMM_Hi256, Hi16_ZMM state)."
        ),
        rule!(
            Avx512NeedsF,
            "avx512-needs-f",
            Error,
            avx512_needs_f,
            "every AVX-512 flag => AVX512F (7.0.EBX[16])",
            "SDM Vol. 1 15.2: software checks AVX512F before any other AVX-512 subset; every \
         subset extends the foundation instructions."
        ),
        rule!(
            Avx512StateHidden,
            "avx512-state-hidden",
            Warning,
            avx512_state_hidden,
            "XCR0 bits 5-7 supported => AVX512F",
            "AVX-512 state exists for the AVX-512 instructions; Linux drops the opmask and ZMM \
         components when AVX512F is clear, so the enumerated state is unusable."
        ),
        rule!(
            Avx512WithoutAvx2,
            "avx512-without-avx2",
            Warning,
            avx512_without_avx2,
            "AVX-512 state or AVX512F => AVX2 (7.0.EBX[5])",
            "No processor implements AVX-512 without AVX2; software (compilers' x86-64-v4, \
         Linux's KVM selftests) assumes the AVX2 subset below it."
        ),
        rule!(
            PkuState,
            "pku-state",
            Error,
            pku_state,
            "PKU (7.0.ECX[3]) => XCR0 bit 9; OSPKE (7.0.ECX[4]) => PKU",
            "SDM Vol. 1 13.5.7: PKRU is XSAVE state component 9 on processors with PKU; OSPKE \
         copies CR4.PKE, which only exists with PKU."
        ),
        rule!(
            PkuStateHidden,
            "pku-state-hidden",
            Info,
            pku_state_hidden,
            "XCR0 bit 9 supported => PKU",
            "PKRU state exists for protection keys; Linux drops component 9 when PKU is clear. \
             Real CPUs do it: every AMD Zen 2 enumerates a 64-byte PKRU component with PKU \
             clear, so it is noted, not counted."
        ),
        rule!(
            AmxState,
            "amx-state",
            Error,
            amx_state,
            "AMX-TILE/BF16/INT8 (7.0.EDX[24,22,25]) => XCR0 bits 17-18; BF16/INT8 => TILE",
            "SDM Vol. 1 18.2: AMX instructions need XCR0[18:17] = 11b (XTILECFG, XTILEDATA); \
         AMX-BF16 and AMX-INT8 operate on the tiles of AMX-TILE."
        ),
        rule!(
            AmxStateHidden,
            "amx-state-hidden",
            Warning,
            amx_state_hidden,
            "XCR0 bits 17-18 supported => AMX-TILE",
            "Tile state exists for AMX; Linux drops components 17-18 when AMX-TILE is clear."
        ),
        rule!(
            AmxLeaves,
            "amx-leaves",
            Error,
            amx_leaves,
            "AMX-TILE <=> leaf 0x1D (max palette >= 1) and leaf 0x1E present",
            "SDM Vol. 2A CPUID: leaf 1DH enumerates the tile palettes and leaf 1EH the TMUL \
         limits of AMX; software sizes TILECFG from them."
        ),
        rule!(
            MpxState,
            "mpx-state",
            Error,
            mpx_state,
            "MPX (7.0.EBX[14]) => XCR0 bits 3-4",
            "SDM Vol. 1 17.3: MPX needs XCR0[4:3] = 11b (BNDREGS, BNDCSR)."
        ),
        rule!(
            MpxStateHidden,
            "mpx-state-hidden",
            Warning,
            mpx_state_hidden,
            "XCR0 bits 3-4 supported => MPX",
            "MPX state exists for MPX; Linux drops components 3-4 when MPX is clear."
        ),
        rule!(
            PtState,
            "pt-state",
            Error,
            pt_state,
            "Intel PT (7.0.EBX[25]) <=> leaf 0x14; IA32_XSS bit 8 => PT",
            "SDM Vol. 3C 33.3: leaf 14H enumerates Intel PT capabilities and is defined when \
         CPUID.(07H,0):EBX[25] is set; PT state (component 8) is the state of Intel PT."
        ),
        rule!(
            CetState,
            "cet-state",
            Error,
            cet_state,
            "CET_SS (7.0.ECX[7]) / CET_IBT (7.0.EDX[20]) <=> IA32_XSS bits 11-12",
            "SDM Vol. 1 17.2 and 13.5.9: CET user and supervisor state are XSAVES components 11 \
         and 12 on processors with CET; without CET they have nothing to hold."
        ),
        rule!(
            KeyLockerLeaf,
            "key-locker-leaf",
            Error,
            key_locker_leaf,
            "Key Locker (7.0.ECX[23]) <=> leaf 0x19 present",
            "Key Locker specification: CPUID.19H enumerates Key Locker features and exists when \
         CPUID.(07H,0):ECX[23] is set."
        ),
        rule!(
            XsavesXss,
            "xsaves-xss",
            Error,
            xsaves_xss,
            "IA32_XSS bits in 0xD.1 ECX/EDX => XSAVES (0xD.1 EAX[3])",
            "SDM Vol. 1 13.3: IA32_XSS exists and is used only with XSAVES/XRSTORS; supervisor \
         components cannot be saved without them."
        ),
        rule!(XsavecAlign, "xsavec-align", Warning, xsavec_align,
        "a component with 0xD.i ECX[1] (64-byte aligned when compacted) => XSAVEC (0xD.1 EAX[1])",
        "SDM Vol. 1 13.4.3: ECX[1] describes the compacted format of XSAVEC/XSAVES; \
         processors that report it have XSAVEC."),
        rule!(
            XfdFlag,
            "xfd-flag",
            Error,
            xfd_flag,
            "a component with 0xD.i ECX[2] (XFD) => XFD (0xD.1 EAX[4])",
            "SDM Vol. 1 13.14: ECX[2] says IA32_XFD can disable the component, which needs \
         extended feature disable itself."
        ),
        rule!(
            XsaveoptPresent,
            "xsaveopt-present",
            Warning,
            xsaveopt_present,
            "components newer than AVX (XCR0 bits >= 3) => XSAVEOPT (0xD.1 EAX[0])",
            "XSAVEOPT predates every component above AVX: no processor that enumerates MPX, \
         AVX-512, PKRU or AMX state lacks it, so 0xD.1 EAX = 0 with such state means the \
         subleaf was not filled in."
        ),
        rule!(
            MaxStandardSize,
            "max-standard-size",
            Error,
            max_standard_size,
            "0xD.0 ECX = standard size of all supported user components",
            "SDM Vol. 2A CPUID: 0DH.0 ECX is the size of the XSAVE area for every component \
         XCR0 supports, i.e. the end of the highest one."
        ),
        rule!(
            EnabledStandardSize,
            "enabled-standard-size",
            Error,
            enabled_standard_size,
            "0xD.0 EBX = standard size of the XCR0 in force",
            "SDM Vol. 2A CPUID: 0DH.0 EBX is the XSAVE area size for the features currently \
         enabled in XCR0 (and that XCR0 is within the supported mask)."
        ),
        rule!(
            CompactedSize,
            "compacted-size",
            Error,
            compacted_size,
            "0xD.1 EBX = compacted size of XCR0 | IA32_XSS in force",
            "SDM Vol. 2A CPUID: 0DH.1 EBX is the size of the XSAVE area containing all states \
         enabled by XCR0 | IA32_XSS, in the compacted format of XSAVES."
        ),
    ];
