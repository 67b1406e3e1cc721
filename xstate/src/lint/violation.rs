//! What the lint reports: violations, where they are, how bad, and why a
//! rule was not checked.

use core::fmt;

use crate::info::InfoError;
use crate::mask::XfeatureMask;
use crate::rules::Xcr0Error;

use super::view::Reg;

/// How bad a violation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    /// A real processor does it (a silicon oddity, e.g. AMD Zen 2
    /// enumerating PKRU state with PKU clear) and software copes: the
    /// finding is noted, never counted as a violation.
    Info,
    /// Possible architecturally, but no processor does it and software
    /// treats the state or feature as absent.
    Warning,
    /// The architecture rules it out: no processor can report this.
    Error,
}

impl Severity {
    /// `error`, `warning` or `info`.
    pub const fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// Extra facts of a violation, printed after its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Nothing more.
    None,
    /// The mask of components concerned.
    Mask(XfeatureMask),
    /// A size the table reports and the size the enumeration implies.
    Size {
        /// As reported.
        found: u32,
        /// As computed from the component subleaves.
        expected: u32,
        /// The mask the size is of.
        mask: XfeatureMask,
    },
    /// Leaf 0xD itself does not parse.
    Info(InfoError),
    /// The enumerated or in-force XCR0 breaks an XCR0 rule.
    Xcr0(XfeatureMask, Xcr0Error),
}

/// One broken rule, located at the register bit (or register) that shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: RuleId,
    /// CPUID leaf.
    pub leaf: u32,
    /// Subleaf.
    pub subleaf: u32,
    /// Register.
    pub reg: Reg,
    /// Bit in `reg`; `None` when the whole register (a size) is at fault.
    pub bit: Option<u32>,
    /// The feature or field at that place (`AVX-512F`, `XSAVE`, `size`).
    pub subject: &'static str,
    /// What is wrong, as a sentence fragment after `subject`.
    pub message: &'static str,
    /// Numbers and masks.
    pub detail: Detail,
}

impl Violation {
    /// The rule's severity.
    pub fn severity(&self) -> Severity {
        self.rule.rule().severity
    }

    /// `CPUID.(7,0).EBX[16]` or `CPUID.(0xD,1).EBX`.
    pub fn location(&self) -> Location {
        Location {
            leaf: self.leaf,
            subleaf: self.subleaf,
            reg: self.reg,
            bit: self.bit,
        }
    }
}

/// A CPUID register or bit, printed as `CPUID.(0x7,0).EBX[16]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// Leaf.
    pub leaf: u32,
    /// Subleaf.
    pub subleaf: u32,
    /// Register.
    pub reg: Reg,
    /// Bit, if one.
    pub bit: Option<u32>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CPUID.({:#x},{}).{}", self.leaf, self.subleaf, self.reg)?;
        if let Some(b) = self.bit {
            write!(f, "[{b}]")?;
        }
        Ok(())
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.subject, self.message)?;
        match self.detail {
            Detail::None => Ok(()),
            Detail::Mask(m) => write!(f, " ({m} = {m:#x})"),
            Detail::Size {
                found,
                expected,
                mask,
            } => write!(
                f,
                " (reported {found}, the component subleaves give {expected} for {mask:#x})"
            ),
            Detail::Info(e) => write!(f, " ({e})"),
            Detail::Xcr0(m, e) => write!(f, " ({m:#x}: {e})"),
        }
    }
}

/// Why a rule was not checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The source does not record this leaf/subleaf.
    Missing {
        /// Leaf.
        leaf: u32,
        /// Subleaf.
        subleaf: u32,
    },
    /// The rule does not apply to this source (why).
    NotApplicable(&'static str),
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::Missing { leaf, subleaf } => {
                write!(f, "CPUID.({leaf:#x},{subleaf}) is not recorded")
            }
            Skip::NotApplicable(why) => f.write_str(why),
        }
    }
}

/// Named rules, one per function in [`RULES`](super::RULES).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleId {
    /// XSAVE (1.ECX.26) ⇔ leaf 0xD enumerates XCR0 bits.
    XsaveLeaf,
    /// OSXSAVE (1.ECX.27) ⇒ XSAVE.
    OsxsaveNeedsXsave,
    /// OSXSAVE (1.ECX.27) = CR4.OSXSAVE, when CR4 is known.
    OsxsaveCr4,
    /// The supported XCR0 is itself a valid XCR0.
    SupportedXcr0,
    /// Leaf 0xD's component subleaves are present and sane.
    ComponentSubleaves,
    /// AVX (1.ECX.28) ⇒ XCR0 bits 1 and 2 supported.
    AvxState,
    /// XCR0 bit 2 supported ⇒ AVX.
    AvxStateHidden,
    /// FMA, F16C, AVX2, VAES, VPCLMULQDQ ⇒ AVX.
    VexNeedsAvx,
    /// AVX-512 flags ⇒ XCR0 bits 5-7 supported.
    Avx512State,
    /// AVX-512 flags other than F ⇒ AVX512F.
    Avx512NeedsF,
    /// XCR0 bits 5-7 supported ⇒ AVX512F.
    Avx512StateHidden,
    /// AVX-512 state or AVX512F ⇒ AVX2.
    Avx512WithoutAvx2,
    /// PKU ⇒ XCR0 bit 9; OSPKE ⇒ PKU.
    PkuState,
    /// XCR0 bit 9 ⇒ PKU.
    PkuStateHidden,
    /// AMX-TILE/BF16/INT8 ⇒ XCR0 bits 17-18; BF16/INT8 ⇒ TILE.
    AmxState,
    /// XCR0 bits 17-18 ⇒ AMX-TILE.
    AmxStateHidden,
    /// AMX-TILE ⇔ leaf 0x1D (palette ≥ 1) and leaf 0x1E.
    AmxLeaves,
    /// MPX ⇒ XCR0 bits 3-4.
    MpxState,
    /// XCR0 bits 3-4 ⇒ MPX.
    MpxStateHidden,
    /// Intel PT ⇔ leaf 0x14; IA32_XSS bit 8 ⇒ PT.
    PtState,
    /// CET_SS/IBT ⇔ IA32_XSS bits 11-12.
    CetState,
    /// Key Locker ⇔ leaf 0x19.
    KeyLockerLeaf,
    /// IA32_XSS bits enumerated ⇒ XSAVES.
    XsavesXss,
    /// A component aligned in the compacted format ⇒ XSAVEC.
    XsavecAlign,
    /// A component with the XFD flag ⇒ 0xD.1 EAX.XFD.
    XfdFlag,
    /// Components beyond AVX enumerated ⇒ XSAVEOPT.
    XsaveoptPresent,
    /// 0xD.0 ECX = standard size of the supported XCR0.
    MaxStandardSize,
    /// 0xD.0 EBX = standard size of the XCR0 in force.
    EnabledStandardSize,
    /// 0xD.1 EBX = compacted size of XCR0 | IA32_XSS in force.
    CompactedSize,
}

/// Where violations go.
pub type Sink<'s> = dyn FnMut(Violation) + 's;
