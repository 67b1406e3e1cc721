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
//! component whose feature flag is clear), [`Severity::Info`] where a real
//! processor does it anyway and software copes (AMD Zen 2 enumerates PKRU
//! state without PKU): noted, not a violation. The core is `no_std` and does not
//! allocate: violations go to a callback ([`lint`]); [`lint_all`] (feature
//! `std`) collects them.

mod facts;
pub mod flags;
mod rules;
mod view;
mod violation;

mod avx;
mod state;
mod xsave;

use crate::info::{leaf_1_ecx, leaf_d1_eax};

pub use facts::Facts;
pub use rules::{Rule, RULES};
pub use view::{Context, CpuidView, Flag, Osxsave, Reg};
pub use violation::{Detail, Location, RuleId, Severity, Sink, Skip, Violation};

use facts::{XFD, XSAVEC, XSAVEOPT, XSAVES};

/// Runs every rule on `view`: each violation goes to `violation`, each rule
/// that could not be checked to `skipped`. Allocates nothing (`no_std`).
///
/// # Examples
/// ```
/// use xstate::lint::{lint, Context, RuleId, Severity};
/// use xstate::CpuidRegs;
/// // A hypervisor's table: leaf 0xD offers AVX-512 state (XCR0 0xe7,
/// // Intel offsets) and leaf 7 offers AVX2, but AVX512F (7.0 EBX[16]) is
/// // hidden. Leaves not listed read as zero, as in a complete table.
/// let table = |leaf: u32, subleaf: u32| {
///     Some(match (leaf, subleaf) {
///         (0, 0) => CpuidRegs::new(0xd, 0, 0, 0),
///         (1, 0) => CpuidRegs::new(0, 0, 1 << 26 | 1 << 28, 0), // XSAVE, AVX
///         (7, 0) => CpuidRegs::new(0, 1 << 5, 0, 0),             // AVX2
///         (0xd, 0) => CpuidRegs::new(0xe7, 0, 2688, 0),
///         (0xd, 1) => CpuidRegs::new(0xf, 0, 0, 0),
///         (0xd, 2) => CpuidRegs::new(256, 576, 0, 0),
///         (0xd, 5) => CpuidRegs::new(64, 1088, 0, 0),
///         (0xd, 6) => CpuidRegs::new(512, 1152, 0, 0),
///         (0xd, 7) => CpuidRegs::new(1024, 1664, 0, 0),
///         _ => CpuidRegs::default(),
///     })
/// };
/// // Violations go to a callback: no allocation, as in the guest kernel.
/// let (mut found, mut n) = ([None; 4], 0);
/// let mut sink = |v| {
///     found[n] = Some(v);
///     n += 1;
/// };
/// lint(&table, Context::SUPPORTED_TABLE, &mut sink, &mut |_, _| {});
/// assert_eq!(n, 1);
/// let v = found[0].unwrap();
/// assert_eq!((v.rule, v.severity()), (RuleId::Avx512StateHidden, Severity::Warning));
/// assert_eq!(v.location().to_string(), "CPUID.(0x7,0).EBX[16]");
/// ```
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
///
/// # Examples
/// ```
/// use xstate::lint::{lint_all, Context, RuleId};
/// use xstate::CpuidRegs;
/// // A hypervisor's table: leaf 0xD offers AVX-512 state (XCR0 0xe7,
/// // Intel offsets) and leaf 7 offers AVX2, but AVX512F (7.0 EBX[16]) is
/// // hidden. Leaves not listed read as zero, as in a complete table.
/// let table = |leaf: u32, subleaf: u32| {
///     Some(match (leaf, subleaf) {
///         (0, 0) => CpuidRegs::new(0xd, 0, 0, 0),
///         (1, 0) => CpuidRegs::new(0, 0, 1 << 26 | 1 << 28, 0), // XSAVE, AVX
///         (7, 0) => CpuidRegs::new(0, 1 << 5, 0, 0),             // AVX2
///         (0xd, 0) => CpuidRegs::new(0xe7, 0, 2688, 0),
///         (0xd, 1) => CpuidRegs::new(0xf, 0, 0, 0),
///         (0xd, 2) => CpuidRegs::new(256, 576, 0, 0),
///         (0xd, 5) => CpuidRegs::new(64, 1088, 0, 0),
///         (0xd, 6) => CpuidRegs::new(512, 1152, 0, 0),
///         (0xd, 7) => CpuidRegs::new(1024, 1664, 0, 0),
///         _ => CpuidRegs::default(),
///     })
/// };
/// let report = lint_all(&table, Context::SUPPORTED_TABLE);
/// let rules: Vec<_> = report.violations.iter().map(|v| v.rule.name()).collect();
/// assert_eq!(rules, ["avx512-state-hidden"]);
/// // Sizes in force (0xD.0 EBX, 0xD.1 EBX) mean nothing in a supported table.
/// assert!(report.skipped.iter().any(|(id, _)| *id == RuleId::EnabledStandardSize));
/// ```
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
