//! How a [`RunSummary`] is built from a [`RunOutcome`]: the run's end, the
//! guest's CPUID view, its result, skip and switch rows converted at the
//! guest's TSC rate, its fault, and the per-vCPU section of an SMP run.

use guest::protocol::{
    exception_mnemonic, field_str, ExitStatus, Report, WorkUnit, SWITCH_STRATEGIES,
};
use xstate::info::leaf_d1_eax;
use xstate::{InitMode, Xfeature, XfeatureMask};

use super::{
    ComponentRow, CrashView, FaultView, GuestCpuidView, GuestSupported, GuestXsaveSizes, ResultRow,
    RunSummary, SkipRow, SmpView, SwitchFigure, Timing, VcpuRow,
};
use crate::report::exit::{
    EXIT_GUEST_CRASH, EXIT_GUEST_RESET, EXIT_PROTOCOL_VIOLATION, EXIT_SNAPSHOT_MEMORY,
    EXIT_TIMEOUT, EXIT_XSTATE_MISMATCH,
};
use crate::report::parallel::Measured;
use crate::run::{RunEnd, RunOutcome};

/// The exception a report records, if any.
fn fault_view(r: &Report) -> Option<FaultView> {
    (r.fault.valid != 0).then(|| FaultView {
        vector: r.fault.vector,
        mnemonic: exception_mnemonic(r.fault.vector),
        error_code: r.fault.error_code,
        rip: addr(r.fault.rip),
        cr2: addr(r.fault.cr2),
        cpl: r.fault.cpl,
    })
}

/// The per-vCPU section of an SMP run; `None` with one vCPU.
fn smp_view(outcome: &RunOutcome, tsc_khz: u64) -> Option<SmpView> {
    if outcome.vcpus.is_empty() {
        return None;
    }
    let vcpus: Vec<VcpuRow> = outcome
        .vcpus
        .iter()
        .map(|v| {
            let r = v.report.as_deref();
            VcpuRow {
                index: v.index,
                end: match &v.end {
                    None => "stopped".to_string(),
                    Some(end) => end
                        .failure()
                        .unwrap_or_else(|| "exited with status 0".to_string()),
                },
                guest_xcr0: r.map(|r| XfeatureMask::from_bits(r.xcr0)),
                guest_xinuse: r.and_then(reported_xinuse),
                final_xcr0: v.final_xcr0.map(XfeatureMask::from_bits),
                switch_strategy: r.and_then(reported_strategy),
                results: r.map(|r| result_rows(r, tsc_khz)).unwrap_or_default(),
                fault: r.and_then(fault_view),
                exits: v.exits.total,
                xstate_stats: v.xstate_stats,
                phases: v.phases,
                stopped_at: v.stopped_at.as_deref().cloned(),
            }
        })
        .collect();
    let per_vcpu: Vec<Vec<Measured>> = vcpus
        .iter()
        .map(|v| v.results.iter().map(Measured::from).collect())
        .collect();
    let bsp = outcome.vcpus.first().and_then(|v| v.report.as_deref());
    Some(SmpView {
        ap_start: outcome.ap_start,
        irqchip: outcome.irqchip,
        ended_by: outcome.ended_by,
        parallel: crate::report::parallel::parallel_rows(&per_vcpu),
        vcpus,
        cpus_wanted: bsp.map(|r| r.cpus_wanted).filter(|&n| n > 0),
        cpus_source: bsp
            .and_then(|r| guest::firmware::CPU_COUNT_SOURCES.get(r.cpus_source as usize))
            .filter(|s| !s.is_empty())
            .map(|s| s.to_string()),
    })
}

/// The XINUSE a report carries: XGETBV(1) at the end of the guest's run,
/// only when CPUID says the CPU has it (else the field means nothing).
fn reported_xinuse(r: &Report) -> Option<XfeatureMask> {
    (r.cpuid_xsave_features & leaf_d1_eax::XGETBV1 != 0).then(|| XfeatureMask::from_bits(r.xinuse))
}

/// The context-switch strategy a report names (none when the CPU did not
/// calibrate).
fn reported_strategy(r: &Report) -> Option<String> {
    Some(field_str(&r.switch_strategy).to_string()).filter(|s| !s.is_empty())
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
                size_unit: match r.unit {
                    u if u == WorkUnit::Bytes as u32 => "bytes",
                    u if u == WorkUnit::Flops as u32 => "matrix order",
                    _ => "events",
                },
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
                native_spread: None,
                cycles_per_unit: r.cycles as f64 / r.work.max(1) as f64,
                ns_per_block: (r.unit == WorkUnit::Bytes as u32 && r.work >= 16)
                    .then_some(seconds)
                    .flatten()
                    .map(|s| s * 1e9 / (r.work / 16) as f64),
                invalid: None,
            }
        })
        .collect()
}

impl RunSummary {
    /// The summary of a finished run.
    pub fn new(outcome: &RunOutcome) -> Self {
        let p = &outcome.policy;
        let report = outcome.report.as_deref();
        let tsc_khz = report
            .map(|r| r.tsc_khz)
            .filter(|&k| k != 0)
            .unwrap_or(outcome.tsc_khz);
        let (exit_status, exit_reason, exit_description, process_exit, crash) =
            run_end(&outcome.end);
        let guest_cpuid = report.map(guest_cpuid_view);
        let fault = report.and_then(fault_view);
        RunSummary {
            exit_status,
            exit_reason,
            exit_description,
            linux_xstate: outcome.linux_xstate.clone(),
            guest_xcr0: report.map(|r| XfeatureMask::from_bits(r.xcr0)),
            guest_xcr0_hardware: report.map(|r| XfeatureMask::from_bits(r.xcr0_hardware)),
            guest_xinuse: report.and_then(reported_xinuse),
            policy_xfeatures: p.xcr0,
            policy_xfeatures_names: p.xcr0.to_string(),
            kvm_xfeatures: p.kvm_xcr0,
            init_xstate: init_name(p.init_xstate),
            standard_size: p.standard_size,
            compacted_size: p.compacted_size,
            hidden_cpuid_flags: p.hidden_flags.clone(),
            kvm_cpuid_honored: p.cpuid_check.as_ref().map(|c| c.honored),
            kvm_cpuid_xfeatures: p.cpuid_check.as_ref().map(|c| c.effective_xcr0),
            kvm_cpuid_standard_size: p.cpuid_check.as_ref().map(|c| c.effective_standard_size),
            exposed_despite_policy: p
                .cpuid_check
                .as_ref()
                .map(|c| c.exposed_despite_policy.clone())
                .unwrap_or_default(),
            final_xcr0: outcome.final_xcr0.map(XfeatureMask::from_bits),
            guest_cpuid,
            tsc_khz,
            results: report.map(|r| result_rows(r, tsc_khz)).unwrap_or_default(),
            openssl_aes_128_cbc_mb_per_s: None,
            native: None,
            hugepages: None,
            openssl_yardsticks: Vec::new(),
            seed_xts_4k_ice_lake: Vec::new(),
            skipped: report.map(skip_rows).unwrap_or_default(),
            switch_strategy: report.and_then(reported_strategy),
            switch_cycles: report.map(switch_figures).unwrap_or_default(),
            copy: report.and_then(|r| crate::report::copy::CopyView::new(&r.copy, tsc_khz)),
            fault,
            crash,
            stopped_at: outcome.stopped_at.as_deref().cloned(),
            report_errors: outcome.report_errors.clone(),
            snapshot_errors: outcome.snapshot_errors.clone(),
            report_errors_dropped: outcome.report_errors_dropped,
            reports_dropped: outcome.reports_dropped,
            refused_requests: outcome.refused_requests.clone(),
            requests_refused: outcome.requests_refused,
            marks_dropped: outcome.marks_dropped,
            serial_bytes_dropped: outcome.serial_bytes_dropped,
            exits: outcome.exits.total,
            xstate_sync: outcome.xstate_sync,
            xstate_stats: outcome.xstate_stats,
            timing_ms: Timing {
                setup: outcome.setup_time.as_secs_f64() * 1e3,
                run: outcome.run_time.as_secs_f64() * 1e3,
                first_instruction: outcome.first_instruction.map(|d| d.as_secs_f64() * 1e3),
                boot_entry: outcome.boot_entry.map(str::to_string),
                start_clock_monotonic_ns: outcome.start_clock_monotonic_ns,
            },
            xfeatures_resolution: None,
            snapshot: None,
            restored_memory: None,
            smp: smp_view(outcome, tsc_khz),
            process_exit,
        }
    }
}

/// An address as the JSON shows it.
fn addr(v: u64) -> String {
    format!("{v:#x}")
}

fn init_name(m: InitMode) -> &'static str {
    match m {
        InitMode::Minimal => "minimal",
        InitMode::AllOfXcr0 => "all",
    }
}

/// How the run ended, as the summary's exit fields: the guest's status
/// (when it exited), the reason word, the description, the process exit
/// code and, for a crash, the registers.
fn run_end(end: &RunEnd) -> (Option<u32>, &'static str, String, i32, Option<CrashView>) {
    match end {
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
                // As given: `{:.1}` made `--timeout 0.01` "0.0 s".
                "the guest ran longer than {} s and was stopped",
                d.as_secs_f64()
            ),
            EXIT_TIMEOUT,
            None,
        ),
        RunEnd::ProtocolViolation(why) => (
            None,
            "protocol_violation",
            format!("the guest broke the protocol: {why}"),
            EXIT_PROTOCOL_VIOLATION,
            None,
        ),
        RunEnd::SnapshotMemory(why) => (
            None,
            "snapshot_memory",
            format!(
                "the restored guest was stopped: a page of its snapshot failed, not the guest: {why}"
            ),
            EXIT_SNAPSHOT_MEMORY,
            None,
        ),
        RunEnd::Reset => (
            None,
            "reset",
            "the guest reset the machine (i8042 reset command)".to_string(),
            EXIT_GUEST_RESET,
            None,
        ),
        RunEnd::XstateMismatch(why) => (
            None,
            "xstate_mismatch",
            format!("Linux's xstate differs from vmm's layout: {why}"),
            EXIT_XSTATE_MISMATCH,
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
    }
}

/// The guest's view of CPUID leaf 0xD as its report records it: the
/// supported masks, the sizes (reported and computed) and the components.
fn guest_cpuid_view(r: &Report) -> GuestCpuidView {
    let xcr0 = XfeatureMask::from_bits(r.xcr0);
    GuestCpuidView {
        supported: GuestSupported {
            xcr0_supported: XfeatureMask::from_bits(r.cpuid_xcr0_supported),
            xss_supported: XfeatureMask::from_bits(r.cpuid_xss_supported),
        },
        sizes: GuestXsaveSizes {
            standard_size_max: r.cpuid_size_max,
            standard_size_enabled: r.cpuid_size_enabled,
            compacted_size: r.cpuid_size_compacted,
            computed_standard_size: r.computed_standard_size,
            computed_compacted_size: r.computed_compacted_size,
            xsave_variants: guest::protocol::xsave_variants(r.cpuid_xsave_features).collect(),
        },
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
}

/// The report's skip records as rows.
fn skip_rows(r: &Report) -> Vec<SkipRow> {
    r.skipped()
        .iter()
        .map(|s| SkipRow {
            name: field_str(&s.name).to_string(),
            variant: field_str(&s.variant).to_string(),
            reason: field_str(&s.reason).to_string(),
        })
        .collect()
}

/// The context-switch calibration's figures, one per strategy it timed.
fn switch_figures(r: &Report) -> Vec<SwitchFigure> {
    SWITCH_STRATEGIES
        .iter()
        .zip(r.switch_cycles)
        .filter(|(_, c)| *c != 0)
        .map(|(s, cycles)| SwitchFigure {
            strategy: s,
            cycles,
        })
        .collect()
}
