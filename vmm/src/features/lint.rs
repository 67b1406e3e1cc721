//! `vmm features lint`: the consistency rules of [`xstate::lint`] run on
//! every CPUID table the VMM deals with: KVM's supported table
//! (`KVM_GET_SUPPORTED_CPUID`), the table the VMM hands its guest for the
//! default policy ([`crate::cpuid::guest_cpuid`]), this host's CPU (native
//! CPUID), what the booted guest saw (its report), or a recorded profile
//! (its CPU's leaves and, where recorded, its KVM's).
//!
//! A source that does not record a leaf (profiles hold leaves 1, 7 and 0xD;
//! a guest report holds leaves 1, 7, 7.1 and 0xD subleaves 0-19) has the
//! rules needing that leaf listed as not checked, never as violated.
//!
//! # JSON of `vmm features lint --json`
//!
//! | field | meaning |
//! |-------|---------|
//! | `sources` | one per table, see below |
//! | `violations` | total number of violations |
//!
//! Each source: `key` (`kvm`, `vmm_guest_table`, `cpu`, `guest`,
//! `profile_cpu`, `profile_kvm`), `source` (its name), `error` (why it could
//! not be read, else null), `violations` (each: `rule`, `severity`, `leaf`,
//! `subleaf`, `reg`, `bit` (null for a whole register), `location`
//! (`CPUID.(0x1,0).ECX[26]`), `message`), `notes` (findings of
//! [`Severity::Info`] rules, which real CPUs show, in the same shape; not
//! counted), `not_checked` (each: `rule`, `reason`).
//!
//! Exit status: [`EXIT_LINT_VIOLATION`] when any source has a violation, 0
//! when none does (notes alone included), 64 on errors.

use kvm_bindings::CpuId;
use serde::Serialize;
use xstate::lint::{lint_all, Context, LintReport, Osxsave, Severity, Violation};
use xstate::{CpuidRegs, XfeatureMask};

use super::inputs::GuestSeen;
use super::profile::HostProfile;
use crate::cpuid::entry;
use crate::kvm::HostKvm;

/// Exit status of `vmm features lint` when a violation was found.
pub const EXIT_LINT_VIOLATION: i32 = 1;

/// How many violations per source the `vmm features` summary lists.
const SUMMARY_FIRST: usize = 3;

/// One violation, for the table and JSON.
#[derive(schemars::JsonSchema, Clone, Debug, Serialize)]
pub struct ViolationRow {
    /// Rule name (`avx512-state-hidden`).
    pub rule: &'static str,
    /// `error`, `warning` or `info`.
    pub severity: &'static str,
    /// CPUID leaf.
    pub leaf: u32,
    /// Subleaf.
    pub subleaf: u32,
    /// Register (`ECX`).
    pub reg: &'static str,
    /// Bit, or `None` for a whole register.
    pub bit: Option<u32>,
    /// `CPUID.(0x1,0).ECX[26]`.
    pub location: String,
    /// What is wrong.
    pub message: String,
}

/// A rule that could not be checked, and why.
#[derive(schemars::JsonSchema, Clone, Debug, Serialize)]
pub struct SkipRow {
    /// Rule name.
    pub rule: &'static str,
    /// Why.
    pub reason: String,
}

/// The lint of one source.
#[derive(schemars::JsonSchema, Clone, Debug, Serialize)]
pub struct SourceLint {
    /// Stable key (`kvm`, `vmm_guest_table`, `cpu`, `guest`, `profile_cpu`,
    /// `profile_kvm`).
    pub key: &'static str,
    /// Human name (`KVM supported CPUID`).
    pub source: String,
    /// Why the source could not be read, if it could not.
    pub error: Option<String>,
    /// Violations found (errors and warnings).
    pub violations: Vec<ViolationRow>,
    /// Findings of [`Severity::Info`] rules: oddities real processors show
    /// (AMD Zen 2's PKRU state with PKU clear), listed but not counted.
    pub notes: Vec<ViolationRow>,
    /// Rules not checked.
    pub not_checked: Vec<SkipRow>,
}

impl SourceLint {
    fn from_report(key: &'static str, source: String, r: LintReport) -> Self {
        let row = |v: &Violation| ViolationRow {
            rule: v.rule.name(),
            severity: v.severity().name(),
            leaf: v.leaf,
            subleaf: v.subleaf,
            reg: v.reg.name(),
            bit: v.bit,
            location: v.location().to_string(),
            message: v.to_string(),
        };
        let (notes, violations): (Vec<&Violation>, Vec<&Violation>) = r
            .violations
            .iter()
            .partition(|v| v.severity() == Severity::Info);
        Self {
            key,
            source,
            error: None,
            violations: violations.into_iter().map(row).collect(),
            notes: notes.into_iter().map(row).collect(),
            not_checked: r
                .skipped
                .iter()
                .map(|(id, s)| SkipRow {
                    rule: id.name(),
                    reason: s.to_string(),
                })
                .collect(),
        }
    }

    fn failed(key: &'static str, source: &str, error: String) -> Self {
        Self {
            key,
            source: source.into(),
            error: Some(error),
            violations: Vec::new(),
            notes: Vec::new(),
            not_checked: Vec::new(),
        }
    }

    /// `KVM supported CPUID: 5 violations`.
    pub fn summary(&self) -> String {
        match &self.error {
            Some(e) => format!("{}: not linted: {e}", self.source),
            None => {
                let n = self.violations.len();
                let notes = match self.notes.len() {
                    0 => String::new(),
                    1 => ", 1 note".to_string(),
                    k => format!(", {k} notes"),
                };
                format!(
                    "{}: {} violation{}{notes}{}",
                    self.source,
                    n,
                    if n == 1 { "" } else { "s" },
                    if self.not_checked.is_empty() {
                        String::new()
                    } else {
                        format!(" ({} rules not checked)", self.not_checked.len())
                    }
                )
            }
        }
    }
}

/// The lint of every source.
#[derive(schemars::JsonSchema, Clone, Debug, Serialize)]
pub struct LintView {
    /// Per source.
    pub sources: Vec<SourceLint>,
    /// Total violations.
    pub violations: usize,
}

impl LintView {
    fn new(sources: Vec<SourceLint>) -> Self {
        let violations = sources.iter().map(|s| s.violations.len()).sum();
        Self {
            sources,
            violations,
        }
    }

    /// The exit status: [`EXIT_LINT_VIOLATION`] when anything was found.
    pub fn exit_code(&self) -> i32 {
        if self.violations > 0 {
            EXIT_LINT_VIOLATION
        } else {
            0
        }
    }

    /// The full table: a summary line per source, then every violation.
    pub fn to_table(&self) -> String {
        let mut rows = vec![[
            "source".to_string(),
            "rule".to_string(),
            "severity".to_string(),
            "where".to_string(),
            "message".to_string(),
        ]];
        for s in &self.sources {
            for v in s.violations.iter().chain(&s.notes) {
                rows.push([
                    s.key.to_string(),
                    v.rule.to_string(),
                    v.severity.to_string(),
                    v.location.clone(),
                    v.message.clone(),
                ]);
            }
        }
        let mut out = String::new();
        for s in &self.sources {
            out.push_str(&s.summary());
            out.push('\n');
        }
        if rows.len() > 1 {
            out.push('\n');
            let w: Vec<usize> = (0..4)
                .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
                .collect();
            for r in &rows {
                out.push_str(&format!(
                    "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}\n",
                    r[0],
                    r[1],
                    r[2],
                    r[3],
                    r[4],
                    w0 = w[0],
                    w1 = w[1],
                    w2 = w[2],
                    w3 = w[3]
                ));
            }
        }
        out
    }

    /// The short section of `vmm features`: counts per source and the
    /// first few violations of each.
    pub fn to_summary_table(&self) -> String {
        let mut out = String::from("Consistency (vmm features lint):\n");
        for s in &self.sources {
            out.push_str(&format!("  {}\n", s.summary()));
            for v in s.violations.iter().take(SUMMARY_FIRST) {
                // Within 100 columns, as the rest of the `vmm features` table.
                out.push_str(&format!("    {} {} ({})\n", v.location, v.rule, v.severity));
            }
            if s.violations.len() > SUMMARY_FIRST {
                out.push_str(&format!(
                    "    ... {} more (vmm features lint)\n",
                    s.violations.len() - SUMMARY_FIRST
                ));
            }
        }
        out
    }

    /// The short JSON section of `vmm features --json`.
    pub fn summary_json(&self) -> ConsistencySummary {
        ConsistencySummary {
            violations: self.violations,
            sources: self
                .sources
                .iter()
                .map(|s| SourceSummary {
                    key: s.key,
                    source: s.source.clone(),
                    error: s.error.clone(),
                    violations: s.violations.len(),
                    first: s.violations.iter().take(SUMMARY_FIRST).cloned().collect(),
                })
                .collect(),
        }
    }
}

/// `consistency` in `vmm features --json`.
#[derive(schemars::JsonSchema, Clone, Debug, Serialize)]
pub struct ConsistencySummary {
    /// Total violations.
    pub violations: usize,
    /// Per source: counts and the first few.
    pub sources: Vec<SourceSummary>,
}

/// One source in [`ConsistencySummary`].
#[derive(schemars::JsonSchema, Clone, Debug, Serialize)]
pub struct SourceSummary {
    /// As [`SourceLint::key`].
    pub key: &'static str,
    /// As [`SourceLint::source`].
    pub source: String,
    /// As [`SourceLint::error`].
    pub error: Option<String>,
    /// Number of violations.
    pub violations: usize,
    /// The first few.
    pub first: Vec<ViolationRow>,
}

/// A `kvm_cpuid2` table as a complete view: an absent entry reads as zero.
fn table_view(cpuid: &CpuId) -> impl Fn(u32, u32) -> Option<CpuidRegs> + '_ {
    move |leaf, subleaf| {
        Some(
            entry(cpuid, leaf, subleaf)
                .map(|e| CpuidRegs::new(e.eax, e.ebx, e.ecx, e.edx))
                .unwrap_or_default(),
        )
    }
}

/// Lints KVM's supported table and the table the VMM hands its guest for
/// `xcr0` (the policy).
fn lint_kvm(kvm: &HostKvm, xcr0: XfeatureMask) -> Vec<SourceLint> {
    let mut out = vec![SourceLint::from_report(
        "kvm",
        "KVM supported CPUID".into(),
        lint_all(&table_view(&kvm.supported_cpuid), Context::SUPPORTED_TABLE),
    )];
    let name = "VMM guest CPUID table";
    out.push(
        match crate::cpuid::guest_cpuid(&kvm.supported_cpuid, &kvm.xstate, xcr0, 0) {
            Ok(g) => {
                // At reset XCR0 holds x87 alone and IA32_XSS is 0: the sizes
                // in force the VMM writes (0.EBX, 1.EBX) are for that.
                let ctx = Context {
                    osxsave: Osxsave::NotApplicable,
                    xcr0: Some(XfeatureMask::from_bits(1)),
                    xss: Some(XfeatureMask::EMPTY),
                    supported_table: false,
                };
                SourceLint::from_report(
                    "vmm_guest_table",
                    format!("{name} (policy {xcr0:#x})"),
                    lint_all(&table_view(&g.cpuid), ctx),
                )
            }
            Err(e) => SourceLint::failed("vmm_guest_table", name, e.to_string()),
        },
    );
    out
}

/// Lints this host's CPU through native CPUID.
fn lint_native() -> SourceLint {
    use xstate::info::cpuid;
    let max_basic = cpuid(0, 0).eax;
    let max_7 = if max_basic >= 7 { cpuid(7, 0).eax } else { 0 };
    let view = move |leaf: u32, subleaf: u32| {
        // Above the maximum (sub)leaf CPUID answers with another leaf's
        // data (Intel) or zeros: read it as absent.
        if leaf > max_basic || (leaf == 7 && subleaf > max_7) {
            return Some(CpuidRegs::default());
        }
        Some(cpuid(leaf, subleaf))
    };
    let xcr0 = super::profile::host_xcr0();
    let ctx = Context {
        // XGETBV(0) worked, so CR4.OSXSAVE is set.
        osxsave: if xcr0.is_some() {
            Osxsave::Cr4(true)
        } else {
            Osxsave::Unknown
        },
        xcr0,
        xss: None,
        supported_table: false,
    };
    SourceLint::from_report("cpu", "this host's CPU".into(), lint_all(&view, ctx))
}

/// Lints what a booted guest saw.
pub fn lint_guest(seen: &GuestSeen) -> SourceLint {
    let f = seen.flags;
    let split = |m: XfeatureMask| (m.bits() as u32, (m.bits() >> 32) as u32);
    let (x_lo, x_hi) = split(seen.xcr0_supported);
    let (s_lo, s_hi) = split(seen.xss_supported);
    let view = |leaf: u32, subleaf: u32| match (leaf, subleaf) {
        (1, 0) => Some(CpuidRegs::new(0, 0, f.leaf1_ecx, f.leaf1_edx)),
        (7, 0) => Some(CpuidRegs::new(0, f.leaf7_ebx, f.leaf7_ecx, f.leaf7_edx)),
        (7, 1) => Some(CpuidRegs::new(f.leaf7_1_eax, 0, 0, 0)),
        (0xd, 0) => Some(CpuidRegs::new(x_lo, seen.size_enabled, seen.size_max, x_hi)),
        (0xd, 1) => Some(CpuidRegs::new(
            seen.xsave_features,
            seen.size_compacted,
            s_lo,
            s_hi,
        )),
        (0xd, i) => seen
            .components
            .get(i as usize)
            .map(|&(size, offset, flags, _)| CpuidRegs::new(size, offset, flags, 0)),
        _ => None,
    };
    let ctx = Context {
        // The guest set XCR0 with XSETBV, which needs CR4.OSXSAVE.
        osxsave: if seen.xcr0.is_empty() {
            Osxsave::Unknown
        } else {
            Osxsave::Cr4(true)
        },
        xcr0: (!seen.xcr0.is_empty()).then_some(seen.xcr0),
        xss: None,
        supported_table: false,
    };
    SourceLint::from_report("guest", "what the guest saw".into(), lint_all(&view, ctx))
}

/// Lints this host: KVM's table and the VMM's guest table for the policy
/// `xfeatures` (when KVM opens), the native CPU, and the guest's view when
/// one was booted.
pub fn lint_host(xfeatures: Option<&str>, guest: Option<&GuestSeen>) -> LintView {
    let mut sources = Vec::new();
    match HostKvm::open() {
        Ok(kvm) => {
            let xcr0 =
                crate::cpuid::resolve_xfeatures(xfeatures, kvm.xstate.supported_xcr0(), "KVM")
                    .map(|r| r.result);
            match xcr0 {
                Ok(x) => sources.extend(lint_kvm(&kvm, x)),
                Err(e) => {
                    sources.push(SourceLint::from_report(
                        "kvm",
                        "KVM supported CPUID".into(),
                        lint_all(&table_view(&kvm.supported_cpuid), Context::SUPPORTED_TABLE),
                    ));
                    sources.push(SourceLint::failed(
                        "vmm_guest_table",
                        "VMM guest CPUID table",
                        e.to_string(),
                    ));
                }
            }
        }
        Err(e) => {
            sources.push(SourceLint::failed(
                "kvm",
                "KVM supported CPUID",
                e.to_string(),
            ));
        }
    }
    sources.push(lint_native());
    if let Some(g) = guest {
        sources.push(lint_guest(g));
    }
    LintView::new(sources)
}

/// A recorded profile as a view: the leaves it records, `None` for the rest.
/// Leaf 0xD subleaves it does not list are zero by the format's definition.
fn profile_view(
    leaf_1: Option<CpuidRegs>,
    leaf_7: Option<CpuidRegs>,
    leaf_7_1: Option<CpuidRegs>,
    leaf_d: &[xstate::CpuidEntry],
) -> impl Fn(u32, u32) -> Option<CpuidRegs> + '_ {
    move |leaf, subleaf| match (leaf, subleaf) {
        (1, 0) => leaf_1,
        (7, 0) => leaf_7,
        (7, 1) => leaf_7_1,
        (0xd, i) => Some(
            leaf_d
                .iter()
                .find(|e| e.subleaf == i)
                .map(|e| e.regs())
                .unwrap_or_default(),
        ),
        _ => None,
    }
}

/// Lints a profile: its CPU's leaves and, where recorded, its KVM's.
pub fn lint_profile(p: &HostProfile) -> LintView {
    let regs = |e: Option<xstate::CpuidEntry>| e.map(|e| e.regs());
    let cpu_ctx = Context {
        osxsave: if p.os_xcr0.is_some() {
            Osxsave::Cr4(true)
        } else {
            Osxsave::Unknown
        },
        xcr0: p.os_xcr0,
        xss: None,
        supported_table: false,
    };
    let mut sources = vec![SourceLint::from_report(
        "profile_cpu",
        "the profile's CPU".into(),
        lint_all(
            &profile_view(
                regs(p.profile.leaf_1),
                regs(p.profile.leaf_7),
                regs(p.extras.leaf_7_1),
                &p.profile.leaf_0xd,
            ),
            cpu_ctx,
        ),
    )];
    if let Some(kvm_d) = &p.profile.kvm_leaf_0xd {
        sources.push(SourceLint::from_report(
            "profile_kvm",
            "the profile's KVM supported CPUID".into(),
            lint_all(
                &profile_view(
                    regs(p.extras.kvm_leaf_1),
                    regs(p.extras.kvm_leaf_7),
                    regs(p.extras.kvm_leaf_7_1),
                    kvm_d,
                ),
                Context::SUPPORTED_TABLE,
            ),
        ));
    }
    LintView::new(sources)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    use crate::features::profile::recorded_dump as data;

    /// Bundled bare-metal dumps: no violation, and leaf 1 rules listed as
    /// not checked rather than failed.
    #[test]
    fn bundled_profiles_raise_no_alarm() {
        for name in [
            "intel-sapphire-rapids.json",
            "intel-ice-lake-client.json",
            "amd-zen3-milan.json",
            "amd-zen3-kvm-guest.json",
        ] {
            let p = HostProfile::load(&data(name)).unwrap();
            let v = lint_profile(&p);
            assert_eq!(v.violations, 0, "{name}: {}", v.to_table());
            assert_eq!(v.exit_code(), 0);
            let s = &v.sources[0];
            assert!(
                s.not_checked
                    .iter()
                    .any(|r| r.rule == "xsave-leaf" && r.reason.contains("(0x1,0) is not recorded")),
                "{name}"
            );
        }
    }

    /// A profile whose KVM leaves are inconsistent, as this machine's KVM
    /// is: the KVM source reports them, the CPU source does not.
    #[test]
    fn profile_kvm_leaves_are_linted() {
        let text = std::fs::read_to_string(data("amd-zen3-kvm-guest.json")).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["leaf_1"] = serde_json::json!({"subleaf": 0, "eax": "0x00a00f11", "ebx": "0x0",
            "ecx": "0x1e000000", "edx": "0x0"});
        v["kvm_leaf_0xd"] = v["leaf_0xd"].clone();
        v["kvm_leaf_1"] = serde_json::json!({"subleaf": 0, "eax": "0x00a00f11", "ebx": "0x0",
            "ecx": "0x0", "edx": "0x0"});
        let p = HostProfile::parse(&PathBuf::from("crafted.json"), &v.to_string()).unwrap();
        let view = lint_profile(&p);
        assert_eq!(view.sources[0].violations.len(), 0, "{}", view.to_table());
        let kvm: Vec<(&str, &str)> = view.sources[1]
            .violations
            .iter()
            .map(|v| (v.rule, v.location.as_str()))
            .collect();
        assert_eq!(
            kvm,
            [
                ("xsave-leaf", "CPUID.(0x1,0).ECX[26]"),
                ("avx-state-hidden", "CPUID.(0x1,0).ECX[28]"),
            ]
        );
        assert_eq!(view.exit_code(), EXIT_LINT_VIOLATION);
        let t = view.to_table();
        assert!(
            t.contains("the profile's KVM supported CPUID: 2 violations"),
            "{t}"
        );
    }
}
