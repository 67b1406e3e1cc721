//! `vmm bench exits`: what one vCPU exit costs, per exit kind, guest mode,
//! guest XCR0, live vector state (clean, ymm, zmm, tiles) and xstate sync
//! policy, against the raw limit measured in the same run.
//!
//! The guest (`bench=exits`) runs timed loops of exits and brackets each
//! row with markers; the VMM timestamps the markers, so every row has a
//! guest-side figure (TSC cycles per exit) and a VMM-side one (ns per exit).
//! The raw limit is the same guest under a loop that only re-enters
//! (`RunConfig::raw_loop`): no device model, no xstate handling.
//!
//! - `model`: the plan, the rows and the document (`--json`).
//! - `plan`: the XCR0 values measured, and the bytes a row's live state
//!   takes compacted.
//! - `rows`: a boot's results into rows, rounds into medians, the
//!   verdicts against raw and eager.
//! - `render`: the table and the charts.
//! - this module: calibration and the interleaved rounds.

mod model;
mod plan;
mod render;
mod rows;

pub use model::*;
pub use plan::{default_masks, offered_xcr0, quick_masks};

use std::time::{Duration, Instant};

use xstate::XfeatureMask;

use crate::bench::progress::Progress;
use crate::devices::SerialSink;
use crate::error::{Error, Result};
use crate::run::{self, RunConfig, RunEnd, RunOutcome};
use crate::xstate_manager::SyncPolicy;
use rows::{raw_limit, Boot, Matrix};

/// The most exits `--count` accepts per row: at the ~100 µs an exit costs
/// under a nested KVM, 10 million exits x 9 rows is already hours per boot.
pub const MAX_EXITS_PER_ROW: u64 = 10_000_000;

/// The most `--rounds` accepts.
pub const MAX_ROUNDS: u32 = 100;

/// The fewest exits per row a calibrated run uses, whatever the budget:
/// below this the first exits of a kind (page faults, cache misses) weigh
/// in the figure.
pub const MIN_CALIBRATED_COUNT: u64 = 200;

/// Rounds when `--rounds` is not given: the fewest that give a spread.
pub const DEFAULT_ROUNDS: u32 = 3;

/// Seconds of measurement the default run calibrates its count to.
pub const DEFAULT_BUDGET_S: f64 = 120.0;

/// Seconds of measurement `--quick` calibrates its count to.
pub const QUICK_BUDGET_S: f64 = 12.0;

/// Boot the exit benchmark guest once; returns its outcome and wall time.
fn boot(
    xcr0: XfeatureMask,
    count: u64,
    policy: SyncPolicy,
    raw: bool,
    benches: &str,
    timeout: Duration,
) -> Result<(RunOutcome, Duration)> {
    let start = Instant::now();
    let outcome = run::run(RunConfig {
        xfeatures: run::Xfeatures::exact(xcr0)?,
        cmdline: format!("quiet workload=none bench={benches} exits={count}"),
        serial: SerialSink::Null,
        timeout: Some(timeout),
        xstate_sync: policy,
        raw_loop: raw,
        ..RunConfig::default()
    })?;
    Ok((outcome, start.elapsed()))
}

/// Exits per row that fit `budget` seconds of the plan's boots, from two
/// raw boots of the largest XCR0 at a small and a larger count: their
/// difference is the cost of one exit of every row, the rest the fixed
/// cost of a boot. A narrower XCR0 has fewer rows per boot, so its boots
/// weigh in by their share of the widest's rows. Policy boots cost a
/// little more than raw ones (xstate handling, the first round's register
/// checks): 25% is allowed for it.
fn calibrate(plan: &Plan, xcr0: XfeatureMask, budget: f64, progress: &Progress) -> Result<u64> {
    let timeout = plan.timeout;
    const SMALL: u64 = 20;
    const LARGE: u64 = 300;
    let mut t = [0.0; 2];
    for (i, c) in [SMALL, LARGE].into_iter().enumerate() {
        progress.step(format!("calibrating ({c} exits per row)"));
        let (outcome, took) = boot(xcr0, c, SyncPolicy::Lazy, true, "exits", timeout)?;
        check_end(&outcome, "calibration")?;
        t[i] = took.as_secs_f64();
        progress.inc();
    }
    // Per exit of every row; never below a quarter of the large run's
    // average, should noise make the small run the slower one.
    let per = ((t[1] - t[0]) / (LARGE - SMALL) as f64).max(t[1] / LARGE as f64 / 4.0);
    let fixed = (t[0] - per * SMALL as f64).max(0.0);
    let left = (budget - t[0] - t[1]).max(0.0);
    let boots = plan.boots().max(1) as f64;
    let weight = plan.widest_boots().max(1.0);
    let count = ((left - fixed * boots) / (per * 1.25 * weight)).floor();
    let count = if count.is_finite() && count > 0.0 {
        count as u64
    } else {
        0
    };
    Ok(count.clamp(MIN_CALIBRATED_COUNT, MAX_EXITS_PER_ROW))
}

/// Run the matrix (see the module doc): for each XCR0 in `plan.masks`, the
/// raw loop and each policy, `plan.rounds` times interleaved (so a burst of
/// host noise hits every row a little rather than one row a lot); each row
/// reports the median of its rounds and their spread, and its verdict
/// against the raw loop.
pub fn run(plan: &Plan, progress: &Progress) -> Result<ExitBench> {
    let started = Instant::now();
    let rounds = plan.rounds.max(1);
    let (count, count_source, budget_s) = match plan.count {
        Count::Given(c) => (c, "given", None),
        Count::Budget(b) => {
            let full = plan.masks.iter().copied().max_by_key(|m| m.bits());
            let xcr0 = full.unwrap_or(XfeatureMask::LEGACY);
            progress.set_len(plan.boots() + 2);
            let c = calibrate(plan, xcr0, b, progress)?;
            progress.println(format!(
                "calibrated: {c} exits per row for a {b:.0} s budget"
            ));
            (c, "calibrated", Some(b))
        }
    };
    let mut matrix = Matrix::default();
    for round in 0..rounds {
        for &xcr0 in &plan.masks {
            let mut configs: Vec<(String, bool, SyncPolicy)> =
                vec![("raw".into(), true, SyncPolicy::Lazy)];
            configs.extend(
                plan.policies
                    .iter()
                    .map(|p| (p.name().to_string(), false, *p)),
            );
            for (name, raw, policy) in configs {
                progress.step(format!(
                    "round {}/{rounds}, xcr0 {:#x}, {name}",
                    round + 1,
                    xcr0.bits()
                ));
                // The first round also checks, under every policy, that the
                // guest's registers survive `count` exits of each kind bit
                // for bit and that a VMM-side XMM edit reaches the guest.
                let benches = if round == 0 && !raw {
                    "exits,xstate-check"
                } else {
                    "exits"
                };
                let (outcome, _) = boot(xcr0, count, policy, raw, benches, plan.timeout)?;
                check_end(&outcome, &name)?;
                let Some(report) = outcome.report.as_deref() else {
                    matrix.note(format!("{name} {xcr0:#x}: the guest sent no report"));
                    progress.inc();
                    continue;
                };
                let source = Boot {
                    report,
                    marks: &outcome.marks,
                    tsc_khz: outcome.tsc_khz,
                    policy: &name,
                    xcr0,
                    count,
                };
                matrix.add_boot(&source, &plan.info);
                progress.inc();
            }
        }
    }
    let full = plan.masks.iter().copied().max_by_key(|m| m.bits());
    let (rows, notes) = matrix.finish(rounds);
    let raw_ns_per_exit = raw_limit(&rows, full);
    Ok(ExitBench {
        bench: "exits",
        raw_ns_per_exit,
        raw_xcr0: full,
        image_bytes: plan.image_bytes,
        count,
        count_source,
        budget_s,
        rounds,
        statistic: "median",
        wall_s: started.elapsed().as_secs_f64(),
        rows,
        notes,
        comparison: None,
    })
}

fn check_end(outcome: &RunOutcome, what: &str) -> Result<()> {
    if let Some(r) = outcome.report.as_deref() {
        if let Some(bad) = r.results().iter().find(|r| r.check != 1) {
            let why = r
                .skipped()
                .iter()
                .find(|s| s.name == bad.name && s.variant == bad.variant)
                .map(|s| guest::protocol::field_str(&s.reason).to_string())
                .unwrap_or_default();
            return Err(Error::Guest(format!(
                "exit benchmark ({what}): {} {} failed: {why}",
                guest::protocol::field_str(&bad.name),
                guest::protocol::field_str(&bad.variant)
            )));
        }
    }
    end_ok(&outcome.end, what)
}

/// `Err` naming `what` and why the run ended badly; a crash keeps the
/// registers it left, which is where debugging a crashed benchmark starts.
fn end_ok(end: &RunEnd, what: &str) -> Result<()> {
    let Some(why) = end.failure() else {
        return Ok(());
    };
    let regs = match end {
        RunEnd::Crashed { dump, .. } => format!("; the registers afterwards:\n{dump}"),
        _ => String::new(),
    };
    Err(Error::Guest(format!(
        "exit benchmark ({what}): {why}{regs}"
    )))
}

#[cfg(test)]
mod end_tests {
    use super::*;
    use crate::vstate::dump::RegisterDump;

    /// A crashed run's error carries its register dump; a clean one is Ok.
    #[test]
    fn a_crash_keeps_its_registers() {
        let dump = RegisterDump {
            regs: None,
            sregs: None,
            xcr0: Some(0x207),
            errors: vec!["KVM_GET_REGS: test".into()],
        };
        let shown = dump.to_string();
        let end = RunEnd::Crashed {
            reason: "the guest triple-faulted (KVM_EXIT_SHUTDOWN)".into(),
            dump: Box::new(dump),
        };
        let e = end_ok(&end, "eager-compact").unwrap_err().to_string();
        assert!(
            e.contains(
                "exit benchmark (eager-compact): the guest crashed: the guest triple-faulted"
            ),
            "{e}"
        );
        assert!(e.ends_with(&shown), "{e}");
        assert!(end_ok(&RunEnd::Exited(0), "raw").is_ok());
        let e = end_ok(&RunEnd::Exited(3), "raw").unwrap_err().to_string();
        assert!(!e.contains("registers"), "{e}");
    }
}
