//! Consistency lint of a CPUID table's extended-state enumeration: every
//! rule that links leaves 1, 7, 0xD (subleaves 0 and 1 and the component
//! subleaves), 0x14, 0x19, 0x1D/0x1E and the XCR0/IA32_XSS in force.
//!
//! A CPU's own CPUID is consistent by construction; a table assembled by a
//! hypervisor (KVM's `KVM_GET_SUPPORTED_CPUID`, the table a VMM hands its
//! guest, what a guest sees) need not be. Software reads these leaves
//! together: an OS enables XCR0 bits from leaf 0xD but gates instructions on
//! leaves 1 and 7, so a table that enumerates AVX-512 state while hiding
//! AVX-512F, or XCR0 bits while hiding XSAVE, makes guests (and test suites
//! such as Linux's KVM selftests) skip or fail.
//!
//! The input is any [`CpuidView`]: a function answering `(leaf, subleaf)`
//! with the registers, or `None` when the source does not record that leaf
//! (a profile that holds only leaf 0xD). Rules whose leaves are not recorded
//! are reported as [`Skip::Missing`], never as violations. The [`Context`]
//! adds what the source cannot say itself: CR4.OSXSAVE and the XCR0 and
//! IA32_XSS in force, when known (a guest's view), or that they do not
//! apply (a hypervisor's supported table).
//!
//! Every rule is one function in [`RULES`], with its [`Severity`]:
//! [`Severity::Error`] where the Intel SDM (or AMD APM) makes the
//! combination impossible on a real processor, [`Severity::Warning`] where
//! the combination is architecturally possible but no processor ships it
//! and software treats it as missing state (Linux disables an XSAVE
//! component whose feature flag is clear). The core is `no_std` and does not
//! allocate: violations go to a callback ([`lint`]); [`lint_all`] (feature
//! `std`) collects them.

mod facts;
pub mod flags;
mod rules;
mod violation;

mod avx;
mod state;
mod xsave;

use core::fmt;

use crate::info::{leaf_1_ecx, leaf_d1_eax, CpuidRegs};
use crate::mask::XfeatureMask;

pub use facts::Facts;
pub use rules::{Rule, RuleId, Sink, RULES};
pub use violation::{Detail, Location, Severity, Skip, Violation};

use facts::{XFD, XSAVEC, XSAVEOPT, XSAVES};

/// A CPUID output register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reg {
    /// EAX.
    Eax,
    /// EBX.
    Ebx,
    /// ECX.
    Ecx,
    /// EDX.
    Edx,
}

impl Reg {
    /// The register's value in `r`.
    pub const fn of(self, r: &CpuidRegs) -> u32 {
        match self {
            Reg::Eax => r.eax,
            Reg::Ebx => r.ebx,
            Reg::Ecx => r.ecx,
            Reg::Edx => r.edx,
        }
    }

    /// Upper-case name (`EAX`).
    pub const fn name(self) -> &'static str {
        match self {
            Reg::Eax => "EAX",
            Reg::Ebx => "EBX",
            Reg::Ecx => "ECX",
            Reg::Edx => "EDX",
        }
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A source of CPUID leaves.
///
/// `regs(leaf, subleaf)` is `None` when the source does not record that
/// (sub)leaf, and `Some` of all zeros when it records that the CPU has none
/// (a complete table answers every leaf: an absent entry, or a leaf above
/// the maximum basic leaf, is all zeros). Registers a source does not record
/// within a recorded leaf read as zero; no rule reads EAX/EBX of leaf 1 or
/// EAX of leaf 7.
pub trait CpuidView {
    /// The registers of `leaf`/`subleaf`, or `None` if not recorded.
    fn regs(&self, leaf: u32, subleaf: u32) -> Option<CpuidRegs>;
}

impl<F: Fn(u32, u32) -> Option<CpuidRegs>> CpuidView for F {
    fn regs(&self, leaf: u32, subleaf: u32) -> Option<CpuidRegs> {
        self(leaf, subleaf)
    }
}

/// CR4.OSXSAVE as far as the source's leaf 1 is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Osxsave {
    /// A hypervisor's supported table: OSXSAVE mirrors the guest OS's CR4
    /// at run time and says nothing in the table.
    NotApplicable,
    /// CR4 is not known (e.g. a recorded dump of unknown provenance).
    Unknown,
    /// CR4.OSXSAVE had this value when the leaves were read.
    Cr4(bool),
}

/// What the CPUID table alone cannot say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context {
    /// CR4.OSXSAVE.
    pub osxsave: Osxsave,
    /// XCR0 in force when 0xD.0 EBX was read, where known.
    pub xcr0: Option<XfeatureMask>,
    /// IA32_XSS in force when 0xD.1 EBX was read, where known.
    pub xss: Option<XfeatureMask>,
    /// The table is a hypervisor's supported set, not one CPU's view: the
    /// in-force sizes (0xD.0 EBX, 0xD.1 EBX) mean nothing there.
    pub supported_table: bool,
}

impl Context {
    /// A hypervisor's supported-CPUID table (KVM_GET_SUPPORTED_CPUID).
    pub const SUPPORTED_TABLE: Self = Self {
        osxsave: Osxsave::NotApplicable,
        xcr0: None,
        xss: None,
        supported_table: true,
    };
    /// A CPU's view with nothing known beyond the leaves.
    pub const UNKNOWN: Self = Self {
        osxsave: Osxsave::Unknown,
        xcr0: None,
        xss: None,
        supported_table: false,
    };
}

/// A feature flag: where it is and its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flag {
    /// Leaf.
    pub leaf: u32,
    /// Subleaf.
    pub subleaf: u32,
    /// Register.
    pub reg: Reg,
    /// Bit.
    pub bit: u32,
    /// Name as the SDM writes it.
    pub name: &'static str,
}

const fn flag(leaf: u32, subleaf: u32, reg: Reg, bit: u32, name: &'static str) -> Flag {
    Flag {
        leaf,
        subleaf,
        reg,
        bit,
        name,
    }
}

/// Runs every rule on `view`: each violation goes to `violation`, each rule
/// that could not be checked to `skipped`.
pub fn lint(
    view: &dyn CpuidView,
    ctx: Context,
    violation: &mut Sink<'_>,
    skipped: &mut dyn FnMut(RuleId, Skip),
) {
    let facts = Facts::new(view, ctx);
    for r in &RULES {
        if let Err(s) = (r.check)(&facts, violation) {
            skipped(r.id, s);
        }
    }
}

/// Every violation and every unchecked rule (feature `std`).
#[cfg(feature = "std")]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LintReport {
    /// Violations, in rule order.
    pub violations: std::vec::Vec<Violation>,
    /// Rules not checked, and why.
    pub skipped: std::vec::Vec<(RuleId, Skip)>,
}

/// [`lint`], collected.
#[cfg(feature = "std")]
pub fn lint_all(view: &dyn CpuidView, ctx: Context) -> LintReport {
    let mut r = LintReport::default();
    let mut skipped = std::vec::Vec::new();
    lint(view, ctx, &mut |v| r.violations.push(v), &mut |id, s| {
        skipped.push((id, s))
    });
    r.skipped = skipped;
    r
}

// Keep the leaf 1 bit numbers in one place: the flags above must agree.
const _: () = assert!(flags::XSAVE.bit == leaf_1_ecx::XSAVE.trailing_zeros());
const _: () = assert!(flags::OSXSAVE.bit == leaf_1_ecx::OSXSAVE.trailing_zeros());
const _: () = assert!(XSAVEOPT.bit == leaf_d1_eax::XSAVEOPT.trailing_zeros());
const _: () = assert!(XSAVEC.bit == leaf_d1_eax::XSAVEC.trailing_zeros());
const _: () = assert!(XSAVES.bit == leaf_d1_eax::XSAVES.trailing_zeros());
const _: () = assert!(XFD.bit == leaf_d1_eax::XFD.trailing_zeros());

#[cfg(test)]
mod tests;
