//! What the lint reports: violations, where they are, how bad, and why a
//! rule was not checked.

use core::fmt;

use crate::info::InfoError;
use crate::mask::XfeatureMask;
use crate::rules::Xcr0Error;

use super::{Reg, RuleId};

/// How bad a violation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    /// Possible architecturally, but no processor does it and software
    /// treats the state or feature as absent.
    Warning,
    /// The architecture rules it out: no processor can report this.
    Error,
}

impl Severity {
    /// `error` or `warning`.
    pub const fn name(self) -> &'static str {
        match self {
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
