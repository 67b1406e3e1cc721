//! `vmm bench exits`: what one vCPU exit costs, per exit kind, guest mode,
//! guest XCR0, upper-YMM state and xstate sync policy, against the raw
//! limit measured in the same run.
//!
//! The guest (`bench=exits`) runs timed loops of exits and brackets each
//! row with markers; the VMM timestamps the markers, so every row has a
//! guest-side figure (TSC cycles per exit) and a VMM-side one (ns per exit).
//! The raw limit is the same guest under a loop that only re-enters
//! (`RunConfig::raw_loop`): no device model, no xstate handling.
//!
//! - `model`: the plan, the rows and the document (`--json`).
//! - `render`: the table and the charts.
//! - this module: calibration and the interleaved rounds.

mod model;
mod render;

use model::Key;
pub use model::*;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use guest::protocol::MARK_END;
use xstate::{Xfeature, XfeatureMask};

use crate::bench::progress::Progress;
use crate::bench::stats::{Spread, Verdict};
use crate::devices::SerialSink;
use crate::error::{Error, Result};
use crate::report::result_rows;
use crate::run::{self, RunConfig, RunOutcome};
use crate::xstate_manager::SyncPolicy;

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

/// A row's rounds.
struct Samples {
    row: ExitRow,
    ns: Vec<f64>,
    cycles: Vec<f64>,
}

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

/// Exits per row that fit `budget` seconds of `boots` boots, from two raw
/// boots of the largest XCR0 at a small and a larger count: their
/// difference is the cost of one exit of every row, the rest the fixed
/// cost of a boot. Policy boots cost a little more than raw ones (xstate
/// handling, the first round's register checks): 25% is allowed for it.
fn calibrate(
    xcr0: XfeatureMask,
    budget: f64,
    boots: u64,
    timeout: Duration,
    progress: &Progress,
) -> Result<u64> {
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
    let per_boot = left / boots.max(1) as f64;
    let count = ((per_boot - fixed) / (per * 1.25)).floor();
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
            let c = calibrate(xcr0, b, plan.boots(), plan.timeout, progress)?;
            progress.println(format!(
                "calibrated: {c} exits per row for a {b:.0} s budget"
            ));
            (c, "calibrated", Some(b))
        }
    };
    let mut acc: BTreeMap<Key, Samples> = BTreeMap::new();
    let mut order: Vec<Key> = Vec::new();
    let mut notes = Vec::new();
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
                for row in rows_of(&outcome, &name, xcr0, count, &mut notes) {
                    add_sample(&mut acc, &mut order, row);
                }
                progress.inc();
            }
        }
    }
    let mut rows: Vec<ExitRow> = order
        .iter()
        .filter_map(|k| acc.remove(k))
        .map(summarise)
        .collect();
    against_raw(&mut rows, rounds);
    notes.dedup();
    let full = plan.masks.iter().copied().max_by_key(|m| m.bits());
    let raw_ns_per_exit = rows
        .iter()
        .find(|r| {
            r.policy == "raw"
                && r.exit == "pio"
                && r.mode == "cpl3"
                && r.upper_ymm == "clean"
                && Some(r.guest_xcr0) == full
        })
        .and_then(|r| r.ns_per_exit);
    Ok(ExitBench {
        bench: "exits",
        raw_ns_per_exit,
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

/// One boot's row into its accumulated samples; a row seen for the first
/// time also takes its place in the output `order`.
fn add_sample(acc: &mut BTreeMap<Key, Samples>, order: &mut Vec<Key>, row: ExitRow) {
    let k = (
        row.guest_xcr0,
        row.policy.clone(),
        row.exit.clone(),
        row.mode.clone(),
        row.upper_ymm.clone(),
    );
    let s = acc.entry(k.clone()).or_insert_with(|| {
        order.push(k);
        Samples {
            row: row.clone(),
            ns: Vec::new(),
            cycles: Vec::new(),
        }
    });
    s.ns.extend(row.ns_per_exit);
    s.cycles.push(row.guest_cycles_per_exit);
}

/// Each row against the raw loop's row for the same exit, mode, upper
/// state and XCR0: the raw figures beside its own, their ratio, and (for a
/// policy) the verdict over `rounds` whether it is within the noise.
fn against_raw(rows: &mut [ExitRow], rounds: u32) {
    // Each row against the raw loop's row for the same conditions.
    let key = |r: &ExitRow| {
        (
            r.exit.clone(),
            r.mode.clone(),
            r.upper_ymm.clone(),
            r.guest_xcr0,
        )
    };
    let raw: BTreeMap<_, Spread> = rows
        .iter()
        .filter(|r| r.policy == "raw")
        .filter_map(|r| Some((key(r), r.spread()?)))
        .collect();
    for r in rows.iter_mut() {
        let Some(base) = raw.get(&key(r)).copied() else {
            continue;
        };
        r.raw_ns_per_exit = Some(base.median);
        r.raw_ns_per_exit_min = Some(base.min);
        r.raw_ns_per_exit_p90 = Some(base.p90);
        let Some(mine) = r.spread() else {
            continue;
        };
        if base.median > 0.0 {
            r.ratio_to_raw = Some(mine.median / base.median);
        }
        if r.policy != "raw" {
            let v = Verdict::of(&mine, &base, rounds);
            r.vs_raw = Some(v);
            r.within_noise = Some(v.is_noise());
        }
    }
}

/// A row's rounds folded into its median and spread.
fn summarise(s: Samples) -> ExitRow {
    let mut row = s.row;
    let ns = Spread::of(&s.ns);
    row.ns_per_exit = ns.map(|v| v.median);
    row.ns_per_exit_min = ns.map(|v| v.min);
    row.ns_per_exit_median = ns.map(|v| v.median);
    row.ns_per_exit_p90 = ns.map(|v| v.p90);
    row.spread_pct = ns.map(|v| v.relative() * 100.0);
    row.ns_per_exit_rounds = s.ns;
    if let Some(c) = Spread::of(&s.cycles) {
        row.guest_cycles_per_exit = c.median;
        row.guest_cycles_per_exit_min = c.min;
        row.guest_cycles_per_exit_p90 = c.p90;
    }
    row
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
    match outcome.end.failure() {
        None => Ok(()),
        Some(why) => Err(Error::Guest(format!("exit benchmark ({what}): {why}"))),
    }
}

/// Turn a run's `exit-*` results and its markers into rows.
fn rows_of(
    outcome: &RunOutcome,
    policy: &str,
    xcr0: XfeatureMask,
    count: u64,
    notes: &mut Vec<String>,
) -> Vec<ExitRow> {
    let Some(report) = outcome.report.as_deref() else {
        notes.push(format!(
            "{policy} {:#x}: the guest sent no report",
            xcr0.bits()
        ));
        return Vec::new();
    };
    let rows = result_rows(report, outcome.tsc_khz);
    let mut begin = BTreeMap::new();
    let mut end = BTreeMap::new();
    for &(v, t) in &outcome.marks {
        if v & MARK_END != 0 {
            end.insert(v & !MARK_END, t);
        } else {
            begin.insert(v, t);
        }
    }
    for s in report.skipped() {
        let name = guest::protocol::field_str(&s.name);
        if name.starts_with("exit-") {
            let note = format!(
                "{name} {}: {}",
                guest::protocol::field_str(&s.variant),
                guest::protocol::field_str(&s.reason)
            );
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
    }
    rows.iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let exit = r.name.strip_prefix("exit-")?;
            let (mode, ymm) = match r.variant.split_once('-') {
                Some((m, y)) => (m.to_string(), y.to_string()),
                None => (r.variant.clone(), "clean".to_string()),
            };
            let n = r.size.max(1);
            let ns = match (begin.get(&(i as u32)), end.get(&(i as u32))) {
                (Some(b), Some(e)) if e > b => Some((*e - *b).as_nanos() as f64 / n as f64),
                _ => None,
            };
            Some(ExitRow {
                exit: exit.to_string(),
                mode,
                upper_ymm: ymm,
                policy: policy.to_string(),
                guest_xcr0: xcr0,
                count: if r.size == 0 { count } else { r.size },
                ns_per_exit: ns,
                ns_per_exit_min: None,
                ns_per_exit_median: None,
                ns_per_exit_p90: None,
                ns_per_exit_rounds: Vec::new(),
                spread_pct: None,
                guest_cycles_per_exit: r.cycles as f64 / n as f64,
                guest_cycles_per_exit_min: 0.0,
                guest_cycles_per_exit_p90: 0.0,
                raw_ns_per_exit: None,
                raw_ns_per_exit_min: None,
                raw_ns_per_exit_p90: None,
                ratio_to_raw: None,
                vs_raw: None,
                within_noise: None,
            })
        })
        .collect()
}

/// The XCR0 values to compare: x87|SSE, and x87|SSE|AVX where KVM has AVX.
pub fn default_masks(kvm_xcr0: XfeatureMask) -> Vec<XfeatureMask> {
    let legacy = XfeatureMask::LEGACY;
    let mut v = vec![legacy];
    if kvm_xcr0.contains(Xfeature::Avx) {
        v.push(legacy.with(Xfeature::Avx));
    }
    v
}
