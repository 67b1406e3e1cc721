//! What `vmm run` prints: a short human table, or one JSON object.
//!
//! The JSON object (`--json`) is stable; fields are only ever added:
//!
//! | field | meaning |
//! |-------|---------|
//! | `exit_status` | the guest's debug-exit value, or null when it crashed or timed out |
//! | `exit_reason` | `exited`, `crashed`, `timed_out` or `snapshotted` (`vmm run --snapshot-after`/`--snapshot-file`; the guest stopped after its state was saved) |
//! | `guest_xcr0` | XCR0 the guest reported it set (hex string) |
//! | `guest_xcr0_hardware` | XGETBV(0) executed at CPL3 in the guest (hex string); differs from `guest_xcr0` where the hypervisor runs guest user code on the host's XCR0 |
//! | `guest_xinuse` | XGETBV(1) at the end of the guest's run (hex string, null without XGETBV1) |
//! | `policy_xfeatures` | the mask the guest's CPUID offered (hex string) |
//! | `policy_xfeatures_names` | the same as component names |
//! | `kvm_xfeatures` | what KVM supports (hex string) |
//! | `kvm_cpuid_honored`, `kvm_cpuid_xfeatures`, `kvm_cpuid_standard_size`, `exposed_despite_policy` | the CPUID table KVM holds after `KVM_SET_CPUID2`, read back: whether it kept the policy (kvm_pvm does not), its leaf 0xD.0 mask and ECX, and the flags the guest sees although the policy masks their state |
//! | `final_xcr0` | XCR0 as KVM holds it at the end of the run (`KVM_GET_XCRS`) |
//! | `init_xstate` | `minimal` or `all` |
//! | `standard_size`, `compacted_size` | xsave sizes for the policy |
//! | `guest_cpuid` | the guest's view of leaf 0xD: supported mask, sizes, per-component size/offset |
//! | `results` | workload results: `name`, `variant`, `size`, `mb_per_s` or `gflops`, `check`, `cycles`, `seconds`, `native_ratio`; `residual` (linear algebra), `bytes_per_save` (`ctxsw`) |
//! | `openssl_aes_128_cbc_mb_per_s` | the host's `openssl speed -evp aes-128-cbc` at 8192 B, when openssl is installed |
//! | `switch_strategy`, `switch_cycles` | the context-switch strategy the guest chose at boot, and the cycles per switch it measured for each candidate |
//! | `skipped` | workload variants not run: `name`, `variant`, `reason` |
//! | `fault` | the CPU exception that ended the run, if any |
//! | `crash` | reason and register dump when the guest crashed |
//! | `exits` | exits to user space |
//! | `xstate_sync`, `xstate_stats` | the xstate sync policy and its `fetches`, `writebacks`, `standard_bytes`, `compacted_bytes` |
//! | `timing_ms` | `setup`, `run`: wall time of VM setup and of the guest's run |

use std::fmt::Write as _;

use guest::protocol::{
    exception_mnemonic, field_str, ExitStatus, Report, WorkUnit, SWITCH_STRATEGIES,
};
use serde::Serialize;
use xstate::info::leaf_d1_eax;
use xstate::{InitMode, Xfeature, XfeatureMask};

use crate::regs::RegisterDump;
use crate::vm::{RunEnd, RunOutcome};
use crate::xstate_manager::{SyncPolicy, SyncStats};

/// Process exit status when the VMM itself failed before or while booting.
pub const EXIT_VMM_ERROR: i32 = 64;
/// Process exit status when the guest crashed (triple fault, internal error, ...).
pub const EXIT_GUEST_CRASH: i32 = 65;
/// Process exit status when the guest exceeded `--timeout`.
pub const EXIT_TIMEOUT: i32 = 66;

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

fn init_name(m: InitMode) -> &'static str {
    match m {
        InitMode::Minimal => "minimal",
        InitMode::AllOfXcr0 => "all",
    }
}

/// One workload result as printed.
#[derive(Clone, Debug, Serialize)]
pub struct ResultRow {
    pub name: String,
    pub variant: String,
    pub size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mb_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gflops: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_per_s: Option<f64>,
    pub check: &'static str,
    pub cycles: u64,
    /// Units of work in the timed region (bytes, flops, events).
    pub work: u64,
    pub seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub residual: Option<f64>,
    /// Bytes written per save (`ctxsw` rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_save: Option<u64>,
    /// Guest throughput / native throughput of the same code, when measured.
    pub native_ratio: Option<f64>,
}

impl ResultRow {
    /// TSC cycles per unit of work (per exit, per switch, per byte...).
    pub fn cycles_per_op(&self) -> f64 {
        self.cycles as f64 / self.work.max(1) as f64
    }

    /// The throughput figure, whatever its unit.
    pub fn throughput(&self) -> Option<f64> {
        self.mb_per_s.or(self.gflops).or(self.events_per_s)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct SkipRow {
    pub name: String,
    pub variant: String,
    pub reason: String,
}

/// One candidate of the guest's boot-time switch-strategy calibration.
#[derive(Clone, Debug, Serialize)]
pub struct SwitchFigure {
    pub strategy: &'static str,
    pub cycles: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ComponentRow {
    pub id: u32,
    pub name: &'static str,
    pub size: u32,
    pub standard_offset: u32,
    pub compacted_offset: Option<u32>,
}

#[derive(Clone, Debug, Serialize)]
pub struct GuestCpuidView {
    pub xcr0_supported: String,
    pub xss_supported: String,
    pub standard_size_max: u32,
    pub standard_size_enabled: u32,
    pub compacted_size: u32,
    pub computed_standard_size: u32,
    pub computed_compacted_size: u32,
    pub xsave_variants: Vec<&'static str>,
    pub components: Vec<ComponentRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FaultView {
    pub vector: u32,
    pub mnemonic: &'static str,
    pub error_code: u64,
    pub rip: String,
    pub cr2: String,
    pub cpl: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct CrashView {
    pub reason: String,
    pub registers: RegisterDump,
}

#[derive(Clone, Debug, Serialize)]
pub struct Timing {
    pub setup: f64,
    pub run: f64,
}

/// Everything `vmm run` prints, in one serialisable value.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub exit_status: Option<u32>,
    pub exit_reason: &'static str,
    pub exit_description: String,
    pub guest_xcr0: Option<String>,
    pub guest_xinuse: Option<String>,
    /// XGETBV(0) at CPL3 in the guest: differs from `guest_xcr0` where the
    /// hypervisor runs guest user code on the host's XCR0 (kvm_pvm).
    pub guest_xcr0_hardware: Option<String>,
    pub policy_xfeatures: String,
    pub policy_xfeatures_names: String,
    pub kvm_xfeatures: String,
    pub init_xstate: &'static str,
    pub standard_size: u32,
    pub compacted_size: u32,
    pub hidden_cpuid_flags: Vec<&'static str>,
    /// Whether KVM kept the policy's CPUID (read back with KVM_GET_CPUID2).
    pub kvm_cpuid_honored: Option<bool>,
    /// Leaf 0xD.0 EDX:EAX as KVM holds it after KVM_SET_CPUID2.
    pub kvm_cpuid_xfeatures: Option<String>,
    /// Leaf 0xD.0 ECX as KVM holds it after KVM_SET_CPUID2.
    pub kvm_cpuid_standard_size: Option<u32>,
    /// Flags the guest sees although the policy masks their state.
    pub exposed_despite_policy: Vec<&'static str>,
    pub final_xcr0: Option<String>,
    pub guest_cpuid: Option<GuestCpuidView>,
    pub tsc_khz: u64,
    pub results: Vec<ResultRow>,
    /// The host's `openssl speed -evp aes-128-cbc` at 8192-byte blocks, MB/s.
    pub openssl_aes_128_cbc_mb_per_s: Option<f64>,
    pub skipped: Vec<SkipRow>,
    /// The context-switch strategy the guest chose by measuring at boot.
    pub switch_strategy: Option<String>,
    /// TSC cycles per switch the guest measured for each candidate.
    pub switch_cycles: Vec<SwitchFigure>,
    pub fault: Option<FaultView>,
    pub crash: Option<CrashView>,
    pub report_errors: Vec<String>,
    pub exits: u64,
    /// The xstate sync policy and what it cost: KVM_GET/SET_XSAVE calls and bytes.
    pub xstate_sync: SyncPolicy,
    pub xstate_stats: SyncStats,
    pub timing_ms: Timing,
    #[serde(skip)]
    pub process_exit: i32,
}

/// Turn a report's result records into rows, converting cycles with `tsc_khz`.
pub fn result_rows(report: &Report, tsc_khz: u64) -> Vec<ResultRow> {
    report
        .results()
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let seconds = (tsc_khz != 0).then(|| r.cycles as f64 / (tsc_khz as f64 * 1e3));
            let rate = seconds.filter(|s| *s > 0.0).map(|s| r.work as f64 / s);
            let (mut mb, mut gf, mut ev) = (None, None, None);
            match r.unit {
                u if u == WorkUnit::Bytes as u32 => mb = rate.map(|x| x / 1e6),
                u if u == WorkUnit::Flops as u32 => gf = rate.map(|x| x / 1e9),
                _ => ev = rate,
            }
            ResultRow {
                name: field_str(&r.name).to_string(),
                variant: field_str(&r.variant).to_string(),
                size: r.size,
                mb_per_s: mb,
                gflops: gf,
                events_per_s: ev,
                check: if r.check == 1 { "pass" } else { "fail" },
                cycles: r.cycles,
                work: r.work,
                seconds,
                residual: (r.unit == WorkUnit::Flops as u32 && r.residual != 0.0)
                    .then_some(r.residual),
                bytes_per_save: (field_str(&r.name) == "ctxsw").then(|| report.aux(i)),
                native_ratio: None,
            }
        })
        .collect()
}

impl RunSummary {
    pub fn new(outcome: &RunOutcome) -> Self {
        let p = &outcome.policy;
        let report = outcome.report.as_deref();
        let tsc_khz = report
            .map(|r| r.tsc_khz)
            .filter(|&k| k != 0)
            .unwrap_or(outcome.tsc_khz);
        let (exit_status, exit_reason, exit_description, process_exit, crash) = match &outcome.end {
            RunEnd::Exited(s) => {
                let desc = ExitStatus::from_u32(*s)
                    .map(|x| x.describe().to_string())
                    .unwrap_or_else(|| format!("guest-defined status {s}"));
                (Some(*s), "exited", desc, (*s).min(255) as i32, None)
            }
            RunEnd::Crashed { reason, dump } => (
                None,
                "crashed",
                reason.clone(),
                EXIT_GUEST_CRASH,
                Some(CrashView {
                    reason: reason.clone(),
                    registers: (**dump).clone(),
                }),
            ),
            RunEnd::TimedOut(d) => (
                None,
                "timed_out",
                format!(
                    "the guest ran longer than {:.1} s and was stopped",
                    d.as_secs_f64()
                ),
                EXIT_TIMEOUT,
                None,
            ),
            RunEnd::Snapshotted(p) => (
                None,
                "snapshotted",
                format!(
                    "snapshot written to {}; resume with `vmm restore`",
                    p.display()
                ),
                0,
                None,
            ),
        };
        let guest_cpuid = report.map(|r| {
            let xcr0 = XfeatureMask::from_bits(r.xcr0);
            GuestCpuidView {
                xcr0_supported: hex(r.cpuid_xcr0_supported),
                xss_supported: hex(r.cpuid_xss_supported),
                standard_size_max: r.cpuid_size_max,
                standard_size_enabled: r.cpuid_size_enabled,
                compacted_size: r.cpuid_size_compacted,
                computed_standard_size: r.computed_standard_size,
                computed_compacted_size: r.computed_compacted_size,
                xsave_variants: guest::protocol::xsave_variants(r.cpuid_xsave_features).collect(),
                components: Xfeature::ALL
                    .iter()
                    .filter(|f| r.cpuid_xcr0_supported & f.bit() != 0 || f.index() < 2)
                    .map(|f| {
                        let c = &r.components[f.index() as usize];
                        ComponentRow {
                            id: f.index(),
                            name: f.short_name(),
                            size: c.size,
                            standard_offset: c.offset,
                            compacted_offset: xcr0.contains(*f).then_some(c.compacted_offset),
                        }
                    })
                    .collect(),
            }
        });
        let fault = report.filter(|r| r.fault.valid != 0).map(|r| FaultView {
            vector: r.fault.vector,
            mnemonic: exception_mnemonic(r.fault.vector),
            error_code: r.fault.error_code,
            rip: hex(r.fault.rip),
            cr2: hex(r.fault.cr2),
            cpl: r.fault.cpl,
        });
        RunSummary {
            exit_status,
            exit_reason,
            exit_description,
            guest_xcr0: report.map(|r| hex(r.xcr0)),
            guest_xcr0_hardware: report.map(|r| hex(r.xcr0_hardware)),
            guest_xinuse: report
                .filter(|r| r.cpuid_xsave_features & leaf_d1_eax::XGETBV1 != 0)
                .map(|r| hex(r.xinuse)),
            policy_xfeatures: hex(p.xcr0.bits()),
            policy_xfeatures_names: p.xcr0.to_string(),
            kvm_xfeatures: hex(p.kvm_xcr0.bits()),
            init_xstate: init_name(p.init_xstate),
            standard_size: p.standard_size,
            compacted_size: p.compacted_size,
            hidden_cpuid_flags: p.hidden_flags.clone(),
            kvm_cpuid_honored: p.cpuid_check.as_ref().map(|c| c.honored),
            kvm_cpuid_xfeatures: p.cpuid_check.as_ref().map(|c| hex(c.effective_xcr0.bits())),
            kvm_cpuid_standard_size: p.cpuid_check.as_ref().map(|c| c.effective_standard_size),
            exposed_despite_policy: p
                .cpuid_check
                .as_ref()
                .map(|c| c.exposed_despite_policy.clone())
                .unwrap_or_default(),
            final_xcr0: outcome.final_xcr0.map(hex),
            guest_cpuid,
            tsc_khz,
            results: report.map(|r| result_rows(r, tsc_khz)).unwrap_or_default(),
            openssl_aes_128_cbc_mb_per_s: None,
            skipped: report
                .map(|r| {
                    r.skipped()
                        .iter()
                        .map(|s| SkipRow {
                            name: field_str(&s.name).to_string(),
                            variant: field_str(&s.variant).to_string(),
                            reason: field_str(&s.reason).to_string(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            switch_strategy: report
                .map(|r| field_str(&r.switch_strategy).to_string())
                .filter(|s| !s.is_empty()),
            switch_cycles: report
                .map(|r| {
                    SWITCH_STRATEGIES
                        .iter()
                        .zip(r.switch_cycles)
                        .filter(|(_, c)| *c != 0)
                        .map(|(s, cycles)| SwitchFigure {
                            strategy: s,
                            cycles,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            fault,
            crash,
            report_errors: outcome.report_errors.clone(),
            exits: outcome.exits.total,
            xstate_sync: outcome.xstate_sync,
            xstate_stats: outcome.xstate_stats,
            timing_ms: Timing {
                setup: outcome.setup_time.as_secs_f64() * 1e3,
                run: outcome.run_time.as_secs_f64() * 1e3,
            },
            process_exit,
        }
    }

    /// The human table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let mask_names = |hexs: &Option<String>| {
            hexs.as_deref()
                .and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok())
                .map(|v| format!("{} ({})", h_or(hexs), XfeatureMask::from_bits(v)))
                .unwrap_or_else(|| "-".into())
        };
        let _ = writeln!(s, "xstate policy");
        let _ = writeln!(
            s,
            "  KVM supports      {} ({})",
            self.kvm_xfeatures,
            mask_of(&self.kvm_xfeatures)
        );
        let _ = writeln!(
            s,
            "  guest CPUID       {} ({})",
            self.policy_xfeatures, self.policy_xfeatures_names
        );
        if !self.hidden_cpuid_flags.is_empty() {
            let _ = writeln!(
                s,
                "  hidden flags      {}",
                self.hidden_cpuid_flags.join(" ")
            );
        }
        if self.kvm_cpuid_honored == Some(false) {
            let _ = writeln!(
                s,
                "  KVM's CPUID       {} (KVM ignored the policy's CPUID; XCR0 limited by the boot hint)",
                self.kvm_cpuid_xfeatures.as_deref().unwrap_or("-")
            );
            if !self.exposed_despite_policy.is_empty() {
                let _ = writeln!(
                    s,
                    "  exposed anyway    {}",
                    self.exposed_despite_policy.join(" ")
                );
            }
        }
        let _ = writeln!(
            s,
            "  xsave size        standard {} B, compacted {} B",
            self.standard_size, self.compacted_size
        );
        let _ = writeln!(s, "  initial xstate    {}", self.init_xstate);
        let _ = writeln!(s, "guest");
        let _ = writeln!(s, "  XCR0 set          {}", mask_names(&self.guest_xcr0));
        if self.guest_xcr0_hardware.is_some() && self.guest_xcr0_hardware != self.guest_xcr0 {
            let _ = writeln!(
                s,
                "  XCR0 in hardware  {} at CPL3 (the hypervisor does not load the guest's XCR0)",
                mask_names(&self.guest_xcr0_hardware)
            );
        }
        let _ = writeln!(s, "  XINUSE at end     {}", mask_names(&self.guest_xinuse));
        if let Some(c) = &self.guest_cpuid {
            let _ = writeln!(
                s,
                "  CPUID 0xD sizes   max {} B, enabled {} B, compacted {} B (xstate crate: {} / {} B)",
                c.standard_size_max,
                c.standard_size_enabled,
                c.compacted_size,
                c.computed_standard_size,
                c.computed_compacted_size
            );
            let _ = writeln!(s, "  XSAVE variants    {}", c.xsave_variants.join(" "));
            if let Some(st) = &self.switch_strategy {
                let figures: Vec<String> = self
                    .switch_cycles
                    .iter()
                    .map(|f| format!("{} {}", f.strategy, f.cycles))
                    .collect();
                let _ = writeln!(
                    s,
                    "  switch strategy   {st} (measured at boot, cycles per switch: {})",
                    figures.join(", ")
                );
            }
            let _ = writeln!(
                s,
                "  {:<3} {:<12} {:>6} {:>9} {:>10}",
                "id", "component", "size", "standard", "compacted"
            );
            for r in &c.components {
                let _ = writeln!(
                    s,
                    "  {:<3} {:<12} {:>6} {:>9} {:>10}",
                    r.id,
                    r.name,
                    r.size,
                    r.standard_offset,
                    r.compacted_offset
                        .map(|o| o.to_string())
                        .unwrap_or_else(|| "-".into())
                );
            }
        }
        if !self.results.is_empty() {
            let _ = writeln!(s, "results");
            let _ = writeln!(
                s,
                "  {:<14} {:<26} {:>7} {:>12} {:<6} {:<5} {:>7}  per op",
                "workload", "variant", "size", "throughput", "unit", "check", "native"
            );
            for r in &self.results {
                let (v, unit) = match (r.mb_per_s, r.gflops, r.events_per_s) {
                    (Some(v), _, _) => (format!("{v:.2}"), "MB/s"),
                    (_, Some(v), _) => (format!("{v:.2}"), "GFLOPS"),
                    (_, _, Some(v)) => (format!("{v:.0}"), "1/s"),
                    _ => ("-".to_string(), "-"),
                };
                // Events (exits, switches): what one costs, in TSC cycles.
                let per_op = match (r.events_per_s, r.bytes_per_save) {
                    (Some(_), Some(b)) => format!("{:.0} cycles, {b} B/save", r.cycles_per_op()),
                    (Some(_), None) => format!("{:.0} cycles", r.cycles_per_op()),
                    _ => String::new(),
                };
                let line = format!(
                    "  {:<14} {:<26} {:>7} {:>12} {:<6} {:<5} {:>7}  {}",
                    r.name,
                    r.variant,
                    r.size,
                    v,
                    unit,
                    r.check,
                    r.native_ratio
                        .map(|x| format!("{x:.3}"))
                        .unwrap_or_else(|| "-".into()),
                    per_op
                );
                let _ = writeln!(s, "{}", line.trim_end());
            }
        }
        if let Some(o) = self.openssl_aes_128_cbc_mb_per_s {
            let _ = writeln!(
                s,
                "  host openssl speed -evp aes-128-cbc (8192 B): {o:.0} MB/s"
            );
        }
        for sk in &self.skipped {
            let _ = writeln!(s, "  skipped {} {}: {}", sk.name, sk.variant, sk.reason);
        }
        if let Some(f) = &self.fault {
            let _ = writeln!(
                s,
                "guest exception {}({:#x}) at rip {} (cr2 {}, cpl {})",
                f.mnemonic, f.error_code, f.rip, f.cr2, f.cpl
            );
        }
        for e in &self.report_errors {
            let _ = writeln!(s, "report refused: {e}");
        }
        if let Some(c) = &self.crash {
            let _ = writeln!(s, "guest crashed: {}", c.reason);
            let _ = write!(s, "{}", c.registers);
        }
        let _ = writeln!(
            s,
            "exit: {} ({}), {} exits, setup {:.1} ms, run {:.1} ms",
            self.exit_status
                .map(|v| v.to_string())
                .unwrap_or_else(|| "-".into()),
            self.exit_description,
            self.exits,
            self.timing_ms.setup,
            self.timing_ms.run
        );
        s
    }
}

fn h_or(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("-")
}

fn mask_of(hexs: &str) -> String {
    u64::from_str_radix(hexs.trim_start_matches("0x"), 16)
        .map(|v| XfeatureMask::from_bits(v).to_string())
        .unwrap_or_default()
}
