//! `vmm bench exits`: what one vCPU exit costs, per exit kind, guest mode,
//! guest XCR0, upper-YMM state and xstate sync policy, against the raw
//! limit measured in the same run.
//!
//! The guest (`bench=exits`) runs timed loops of exits and brackets each
//! row with markers; the VMM timestamps the markers, so every row has a
//! guest-side figure (TSC cycles per exit) and a VMM-side one (ns per exit).
//! The raw limit is the same guest under a loop that only re-enters
//! (`RunConfig::raw_loop`): no device model, no xstate handling.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use guest::protocol::MARK_END;
use serde::Serialize;
use xstate::{Xfeature, XfeatureMask};

use super::compare::{key_of, num, Comparison, Kind, Sample};
use super::progress::Progress;
use super::stats::{Spread, Verdict};
use crate::devices::SerialSink;
use crate::error::{Error, Result};
use crate::report::hex;
use crate::report::plot::{short, Bar, BarChart, BarGroup};
use crate::report::result_rows;
use crate::report::table::{or_dash, Columns};
use crate::vstate::{self, RunConfig, RunOutcome};
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

/// How many exits each row runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Count {
    /// `--count N`.
    Given(u64),
    /// As many as fit the budget in seconds, from a calibration run.
    Budget(f64),
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Exits per row.
    pub count: Count,
    /// Interleaved rounds.
    pub rounds: u32,
    /// Guest XCR0 values.
    pub masks: Vec<XfeatureMask>,
    /// Policies besides the raw loop.
    pub policies: Vec<SyncPolicy>,
    /// Per-boot guest timeout.
    pub timeout: Duration,
}

impl Plan {
    /// VM boots of the measurement proper (without calibration).
    pub fn boots(&self) -> u64 {
        u64::from(self.rounds) * self.masks.len() as u64 * (1 + self.policies.len() as u64)
    }
}

/// One row of the matrix.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ExitRow {
    /// `pio`, `mmio` or `cpuid`.
    pub exit: String,
    /// `cpl3` or `cpl0`: where the guest loop ran.
    pub mode: String,
    /// `clean` (after VZEROUPPER) or `dirty` (upper halves live).
    pub upper_ymm: String,
    /// `raw`, `lazy`, `eager` or `eager-compact`.
    pub policy: String,
    /// The guest's XCR0 for the row.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub guest_xcr0: XfeatureMask,
    /// Exits in the timed loop.
    pub count: u64,
    /// Wall time per exit seen from the VMM (marker to marker): the median
    /// of the rounds (`ns_per_exit_median`).
    pub ns_per_exit: Option<f64>,
    /// The fastest round's `ns_per_exit`.
    pub ns_per_exit_min: Option<f64>,
    /// The median round's `ns_per_exit`.
    pub ns_per_exit_median: Option<f64>,
    /// The 90th percentile of the rounds' `ns_per_exit`.
    pub ns_per_exit_p90: Option<f64>,
    /// Every round's `ns_per_exit`, in round order.
    pub ns_per_exit_rounds: Vec<f64>,
    /// `(p90 - min) / median` of `ns_per_exit`, in percent.
    pub spread_pct: Option<f64>,
    /// TSC cycles per exit seen from the guest: the median of the rounds.
    pub guest_cycles_per_exit: f64,
    /// The fastest round's guest cycles per exit.
    pub guest_cycles_per_exit_min: f64,
    /// The 90th percentile of the rounds' guest cycles per exit.
    pub guest_cycles_per_exit_p90: f64,
    /// `ns_per_exit` of the raw loop for the same exit, mode, YMM state and
    /// XCR0 (its median).
    pub raw_ns_per_exit: Option<f64>,
    /// The raw loop's fastest round.
    pub raw_ns_per_exit_min: Option<f64>,
    /// The raw loop's 90th percentile.
    pub raw_ns_per_exit_p90: Option<f64>,
    /// `ns_per_exit / raw_ns_per_exit` (medians).
    pub ratio_to_raw: Option<f64>,
    /// The row against the raw loop: `slower`, `faster` (below the raw
    /// floor: only noise can do that), `within-noise` (the min..p90 ranges
    /// overlap) or `no-spread` (one round); null for raw rows.
    pub vs_raw: Option<Verdict>,
    /// Whether `ratio_to_raw` differs from 1 by less than the noise (null
    /// for raw rows and unmeasured rows).
    pub within_noise: Option<bool>,
}

impl ExitRow {
    /// The rounds' spread of `ns_per_exit`.
    pub fn spread(&self) -> Option<Spread> {
        Some(Spread {
            min: self.ns_per_exit_min?,
            median: self.ns_per_exit_median?,
            p90: self.ns_per_exit_p90?,
        })
    }

    /// The note of the table's last column: why a ratio is not a result.
    pub fn note(&self) -> &'static str {
        match self.vs_raw {
            Some(Verdict::WithinNoise) => "within noise",
            Some(Verdict::Faster) => "below raw: noise, not a gain",
            Some(Verdict::NoSpread) => "1 round: noise unknown",
            Some(Verdict::Slower) | None => "",
        }
    }
}

/// The whole benchmark.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ExitBench {
    /// `exits`: which `vmm bench` made this (baselines are checked by it).
    pub bench: &'static str,
    /// The headline limit: raw PIO exit from CPL3, clean YMM, full XCR0
    /// (median of the rounds).
    pub raw_ns_per_exit: Option<f64>,
    /// Exits per row.
    pub count: u64,
    /// `given` (`--count`) or `calibrated` (to `budget_s`).
    pub count_source: &'static str,
    /// The measurement time the count was calibrated to, in seconds.
    pub budget_s: Option<f64>,
    /// Runs per row; each row reports the median and spread over them.
    pub rounds: u32,
    /// The statistic of `ns_per_exit`, `guest_cycles_per_exit`,
    /// `raw_ns_per_exit` and `ratio_to_raw`: `median`.
    pub statistic: &'static str,
    /// Wall time of the whole benchmark (calibration included), seconds.
    pub wall_s: f64,
    /// One row per exit kind, mode, YMM state, policy and XCR0.
    pub rows: Vec<ExitRow>,
    /// What could not be measured, and why.
    pub notes: Vec<String>,
    /// This run against `--baseline` / `--compare`, when given.
    pub comparison: Option<Comparison>,
}

/// How `--baseline` / `--compare` read the rows of `vmm bench exits --json`
/// output: by exit, mode, YMM state, policy and XCR0, comparing
/// `ns_per_exit` (a cost: lower is better).
pub static KIND: Kind = Kind {
    bench: "exits",
    key: &[
        ("exit", "exit"),
        ("mode", "mode"),
        ("upper_ymm", "ymm"),
        ("policy", "policy"),
        ("guest_xcr0", "xcr0"),
    ],
    figure: "ns_per_exit",
    unit: Some("ns/exit"),
    higher_is_better: false,
    samples: samples_of_row,
};

/// A JSON row's `ns_per_exit` with its spread where the file has one
/// (files from before spreads existed have the median only).
fn samples_of_row(row: &serde_json::Value) -> Vec<Sample> {
    let (Some(key), Some(m)) = (key_of(row, KIND.key), num(row, "ns_per_exit")) else {
        return Vec::new();
    };
    vec![Sample {
        key,
        unit: None,
        spread: Spread {
            min: num(row, "ns_per_exit_min").unwrap_or(m),
            median: m,
            p90: num(row, "ns_per_exit_p90").unwrap_or(m),
        },
    }]
}

/// The rows' identity: XCR0, policy, exit, mode, YMM state.
type Key = (XfeatureMask, String, String, String, String);

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
    let outcome = vstate::run(RunConfig {
        xfeatures: Some(format!("{:#x}", xcr0.bits())),
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
                progress.inc();
            }
        }
    }
    let mut rows: Vec<ExitRow> = order
        .iter()
        .filter_map(|k| acc.remove(k))
        .map(summarise)
        .collect();
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

impl ExitBench {
    /// The human table: per row the median, the min..p90 spread, the ratio
    /// to the raw loop and, where that ratio is not a result, why.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let source = match self.budget_s {
            Some(b) => format!("calibrated to a {b:.0} s budget"),
            None => "--count".to_string(),
        };
        let _ = writeln!(
            s,
            "vCPU exit cost: median of {} rounds (spread min..p90), {} exits per row ({source}); raw limit (PIO, CPL3, full XCR0): {}",
            self.rounds,
            self.count,
            or_dash(self.raw_ns_per_exit.map(|v| format!("{v:.0} ns")))
        );
        let t = Columns::new()
            .left("", 6)
            .left(" ", 5)
            .left(" ", 6)
            .left(" ", 14)
            .left(" ", 6)
            .right(" ", 9)
            .right(" ", 13)
            .right(" ", 11)
            .right(" ", 11)
            .right(" ", 9)
            .left("  ", 0);
        t.push(
            &mut s,
            &[
                "exit",
                "mode",
                "ymm",
                "policy",
                "xcr0",
                "ns/exit",
                "min..p90 ns",
                "cycles/exit",
                "raw ns/exit",
                "ratio (x)",
                "note",
            ],
        );
        let ns = |v: Option<f64>| or_dash(v.map(|v| format!("{v:.0}")));
        for r in &self.rows {
            let spread = match (r.ns_per_exit_min, r.ns_per_exit_p90) {
                (Some(lo), Some(hi)) => format!("{}..{}", short(lo), short(hi)),
                _ => "-".into(),
            };
            t.push(
                &mut s,
                &[
                    r.exit.clone(),
                    r.mode.clone(),
                    r.upper_ymm.clone(),
                    r.policy.clone(),
                    format!("{:#x}", r.guest_xcr0),
                    ns(r.ns_per_exit),
                    spread,
                    format!("{:.0}", r.guest_cycles_per_exit),
                    ns(r.raw_ns_per_exit),
                    or_dash(r.ratio_to_raw.map(|v| format!("{v:.3}"))),
                    r.note().to_string(),
                ],
            );
        }
        let noisy = self
            .rows
            .iter()
            .filter(|r| r.within_noise == Some(true))
            .count();
        if noisy > 0 {
            let _ = writeln!(
                s,
                "{noisy} of {} policy rows are within noise: their min..p90 overlaps the raw loop's, so their ratio is not a measured difference",
                self.rows.iter().filter(|r| r.policy != "raw").count()
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        let _ = writeln!(s, "measured in {:.1} s", self.wall_s);
        if let Some(c) = &self.comparison {
            s.push_str(&c.to_table());
        }
        s
    }

    /// The `--plot` charts: one per XCR0, a bar group per policy, a bar per
    /// exit kind, mode and YMM state (median, with the min..p90 whisker),
    /// the raw KVM limit of the same exit drawn across each bar.
    pub fn charts(&self) -> Vec<BarChart> {
        let mut masks: Vec<XfeatureMask> = self.rows.iter().map(|r| r.guest_xcr0).collect();
        masks.dedup();
        let kinds = ["pio", "mmio", "cpuid"];
        masks
            .iter()
            .map(|&xcr0| {
                let mut policies: Vec<&str> = Vec::new();
                for r in self.rows.iter().filter(|r| r.guest_xcr0 == xcr0) {
                    if r.policy != "raw" && !policies.contains(&r.policy.as_str()) {
                        policies.push(&r.policy);
                    }
                }
                let groups = policies
                    .iter()
                    .map(|&p| BarGroup {
                        label: p.to_string(),
                        bars: self
                            .rows
                            .iter()
                            .filter(|r| r.guest_xcr0 == xcr0 && r.policy == p)
                            .filter_map(|r| {
                                let v = r.ns_per_exit?;
                                Some(Bar {
                                    label: format!("{} {} {}", r.exit, r.mode, r.upper_ymm),
                                    series: kinds.iter().position(|k| *k == r.exit).unwrap_or(0),
                                    value: v,
                                    range: r.ns_per_exit_min.zip(r.ns_per_exit_p90),
                                    tick: r.raw_ns_per_exit,
                                    text: Some(match r.within_noise {
                                        Some(true) => format!("{} ~", short(v)),
                                        _ => short(v),
                                    }),
                                })
                            })
                            .collect(),
                    })
                    .collect();
                BarChart {
                    title: format!(
                        "vCPU exit cost, guest XCR0 {:#x} ({}): median of {} rounds, {} exits per row; ~ = within noise of raw",
                        xcr0, xcr0, self.rounds, self.count
                    ),
                    y_desc: "ns per exit (VMM wall time)".into(),
                    series: kinds.iter().map(|k| format!("{k} exit")).collect(),
                    groups,
                    tick_name: Some("raw KVM limit (same exit)".into()),
                    hline: None,
                }
            })
            .collect()
    }
}
