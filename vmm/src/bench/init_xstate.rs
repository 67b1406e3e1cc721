//! `vmm bench init-xstate`: the illumos experiment. The same workloads with
//! the vCPU's initial XSTATE_BV = x87|SSE (correct) and = all of XCR0 (the
//! bug that left AVX upper state looking live, making legacy-SSE AES-NI 3x
//! slower on Skylake), in one command, with their ratio.
//!
//! Each round boots the guest once per initial state (interleaved, so host
//! noise hits both); the rounds are `--rounds`, or as many as fit
//! `--budget` seconds judged by the first round's wall time.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::Serialize;
use xstate::{InitMode, XfeatureMask};

use super::compare::{key_of, num, Comparison, Kind, Sample};
use super::exits::MAX_ROUNDS;
use super::progress::Progress;
use super::stats::{Spread, Verdict};
use crate::devices::SerialSink;
use crate::error::{Error, Result};
use crate::report::hex;
use crate::report::plot::{Bar, BarChart, BarGroup};
use crate::report::table::{or_dash, Columns};
use crate::report::{ResultRow, RunSummary};
use crate::run::{self, RunConfig};

/// The workloads run by default.
pub const DEFAULT_WORKLOAD: &str = "aes,linpack";

/// The workloads of `--quick`: the same at their quick sizes (one boot
/// takes well under a second here, rather than about two).
pub const QUICK_WORKLOAD: &str = "aes,linpack,quick";

/// Seconds the rounds are calibrated to without `--rounds` or `--budget`.
pub const DEFAULT_BUDGET_S: f64 = 60.0;

/// Seconds the rounds of `--quick` are calibrated to.
pub const QUICK_BUDGET_S: f64 = 12.0;

/// The fewest rounds a calibrated run makes, whatever the budget: three
/// rounds are the fewest whose median is a measured round and whose min..p90
/// is a spread.
pub const MIN_CALIBRATED_ROUNDS: u32 = 3;

/// How many rounds run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rounds {
    /// `--rounds N`.
    Given(u32),
    /// As many as fit the budget in seconds, judged by the first round.
    Budget(f64),
}

/// Rounds that fit `budget` seconds when one round took `round` seconds
/// (the first round included), at least [`MIN_CALIBRATED_ROUNDS`] and at
/// most [`MAX_ROUNDS`].
pub fn calibrated_rounds(budget: f64, round: f64) -> u32 {
    let n = (budget / round.max(1e-3)).floor();
    let n = if n.is_finite() && n > 0.0 {
        n.min(f64::from(MAX_ROUNDS)) as u32
    } else {
        0
    };
    n.clamp(MIN_CALIBRATED_ROUNDS, MAX_ROUNDS)
}

/// How `--baseline` / `--compare` read the rows of `vmm bench init-xstate
/// --json` output: each row gives two figures, the throughput under the
/// minimal and under the all-of-XCR0 initial state (more is better).
pub static KIND: Kind = Kind {
    bench: "init-xstate",
    key: &[
        ("name", "workload"),
        ("variant", "variant"),
        ("size", "size"),
        ("initial", "initial"),
    ],
    figure: "throughput",
    unit: None,
    higher_is_better: true,
    samples: samples_of_row,
};

/// A JSON row's two figures, with their spreads where the file has them.
fn samples_of_row(row: &serde_json::Value) -> Vec<Sample> {
    let Some(base) = key_of(row, &KIND.key[..3]) else {
        return Vec::new();
    };
    let unit = row.get("unit").and_then(|u| u.as_str()).map(str::to_string);
    ["minimal", "all"]
        .into_iter()
        .filter_map(|state| {
            let m = num(row, state)?;
            let sp = &row[format!("{state}_spread")];
            let mut key = base.clone();
            key.push(state.into());
            Some(Sample {
                key,
                unit: unit.clone(),
                spread: Spread {
                    min: num(sp, "min").unwrap_or(m),
                    median: m,
                    p90: num(sp, "p90").unwrap_or(m),
                },
            })
        })
        .collect()
}

/// One workload row under both initial states.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct InitRow {
    /// Workload name.
    pub name: String,
    /// Variant name.
    pub variant: String,
    /// Problem size.
    pub size: u64,
    /// What `size` counts (`bytes`, `matrix order`).
    pub size_unit: &'static str,
    /// Unit of `minimal` and `all` (`MB/s`, `GFLOPS`, `1/s`).
    pub unit: &'static str,
    /// Throughput with the initial XSTATE_BV = x87|SSE: the median of the
    /// rounds.
    pub minimal: Option<f64>,
    /// Throughput with the initial XSTATE_BV = all of XCR0: the median of
    /// the rounds.
    pub all: Option<f64>,
    /// `all / minimal` (medians): below 1 means the wrong initial state
    /// costs throughput.
    pub ratio: Option<f64>,
    /// Min / median / p90 of `minimal` over the rounds.
    pub minimal_spread: Option<Spread>,
    /// Min / median / p90 of `all` over the rounds.
    pub all_spread: Option<Spread>,
    /// Whether `all` and `minimal` differ by less than their noise (their
    /// min..p90 ranges overlap, or there was one round).
    pub within_noise: Option<bool>,
    /// `all` against `minimal` as a cost: `slower` (the effect: less
    /// throughput with all of XCR0 initially in use), `faster` (more:
    /// never a gain, since marking state in use cannot speed code up; it is
    /// drift or noise the ranges missed), `within-noise` or `no-spread`.
    pub all_vs_minimal: Option<Verdict>,
}

impl InitRow {
    /// The note of the table's last column: what the ratio means.
    pub fn note(&self) -> &'static str {
        match self.all_vs_minimal {
            Some(Verdict::Slower) => "slower with all",
            Some(Verdict::Faster) => "above 1: noise, not a gain",
            Some(Verdict::WithinNoise) => "within noise",
            Some(Verdict::NoSpread) => "1 round: noise unknown",
            None => "",
        }
    }
}

/// The whole experiment.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct InitBench {
    /// `init-xstate`: which `vmm bench` made this (baselines are checked by
    /// it).
    pub bench: &'static str,
    /// The `workload=` selection run under both initial states.
    pub workload: String,
    /// The XCR0 the guest set.
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub guest_xcr0: Option<XfeatureMask>,
    /// XINUSE at the end of each run: what the CPU considered live.
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub xinuse_minimal: Option<XfeatureMask>,
    /// The same with all of XCR0 initially marked in use.
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub xinuse_all: Option<XfeatureMask>,
    /// Runs under each initial state, interleaved.
    pub rounds: u32,
    /// `given` (`--rounds`) or `calibrated` (to `budget_s`).
    pub rounds_source: &'static str,
    /// The time the rounds were calibrated to, in seconds.
    pub budget_s: Option<f64>,
    /// The statistic of `minimal`, `all` and `ratio`: `median`.
    pub statistic: &'static str,
    /// Wall time of the whole benchmark, seconds.
    pub wall_s: f64,
    /// One row per workload variant.
    pub rows: Vec<InitRow>,
    /// This run against `--baseline` / `--compare`, when given.
    pub comparison: Option<Comparison>,
}

fn run_one(
    workload: &str,
    xfeatures: Option<&str>,
    init: InitMode,
    timeout: Duration,
) -> Result<RunSummary> {
    let outcome = run::run(RunConfig {
        xfeatures: run::Xfeatures::request(xfeatures)?,
        init_xstate: init,
        cmdline: format!("quiet workload={workload}"),
        serial: SerialSink::Null,
        timeout: Some(timeout),
        ..RunConfig::default()
    })?;
    if let Some(why) = outcome.end.failure() {
        return Err(Error::Guest(format!("init-xstate benchmark: {why}")));
    }
    Ok(RunSummary::new(&outcome))
}

/// Run `workload` under both initial states, `rounds` times interleaved
/// (with [`Rounds::Budget`], the first round's wall time decides how many).
pub fn run(
    workload: &str,
    xfeatures: Option<&str>,
    rounds: Rounds,
    timeout: Duration,
    progress: &Progress,
) -> Result<InitBench> {
    let started = Instant::now();
    let mut minimal = Vec::new();
    let mut all = Vec::new();
    let (mut total, source, budget_s) = match rounds {
        Rounds::Given(n) => (n.max(1), "given", None),
        // Until the first round is timed: at least the minimum.
        Rounds::Budget(b) => (MIN_CALIBRATED_ROUNDS, "calibrated", Some(b)),
    };
    progress.set_len(2 * u64::from(total));
    let mut round = 1;
    while round <= total {
        let t0 = Instant::now();
        for (init, name, into) in [
            (InitMode::Minimal, "minimal", &mut minimal),
            (InitMode::AllOfXcr0, "all", &mut all),
        ] {
            progress.step(format!("round {round}/{total}, initial XSTATE_BV {name}"));
            into.push(run_one(workload, xfeatures, init, timeout)?);
            progress.inc();
        }
        if let (1, Some(b)) = (round, budget_s) {
            let took = t0.elapsed().as_secs_f64();
            total = calibrated_rounds(b, took);
            progress.set_len(2 * u64::from(total));
            progress.println(format!(
                "calibrated: {total} rounds for a {b:.0} s budget (one round took {took:.1} s)"
            ));
        }
        round += 1;
    }
    let rounds = total;
    // The same row of every round's results.
    let samples = |runs: &[RunSummary], m: &ResultRow| -> Vec<f64> {
        runs.iter()
            .filter_map(|s| {
                s.results
                    .iter()
                    .find(|a| a.id() == m.id())
                    .and_then(ResultRow::throughput)
            })
            .collect()
    };
    let rows = minimal[0]
        .results
        .iter()
        .map(|m| {
            let ms = Spread::of(&samples(&minimal, m));
            let al = Spread::of(&samples(&all, m));
            let (mv, av) = (ms.map(|s| s.median), al.map(|s| s.median));
            // Throughput turned into a cost: `slower` is less throughput.
            let verdict = ms
                .zip(al)
                .map(|(m, a)| Verdict::of(&a.negated(), &m.negated(), rounds));
            InitRow {
                name: m.name.clone(),
                variant: m.variant.clone(),
                size: m.size,
                size_unit: m.size_unit,
                unit: m.unit(),
                minimal: mv,
                all: av,
                ratio: match (mv, av) {
                    (Some(m), Some(a)) if m > 0.0 => Some(a / m),
                    _ => None,
                },
                minimal_spread: ms,
                all_spread: al,
                within_noise: verdict.map(Verdict::is_noise),
                all_vs_minimal: verdict,
            }
        })
        .collect();
    let (first_min, first_all) = (&minimal[0], &all[0]);
    Ok(InitBench {
        bench: "init-xstate",
        workload: workload.to_string(),
        guest_xcr0: first_min.guest_xcr0,
        xinuse_minimal: first_min.guest_xinuse,
        xinuse_all: first_all.guest_xinuse,
        rounds,
        rounds_source: source,
        budget_s,
        statistic: "median",
        wall_s: started.elapsed().as_secs_f64(),
        rows,
        comparison: None,
    })
}

impl InitBench {
    /// The human table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "initial XSTATE_BV: minimal (x87|SSE) vs all of XCR0 {}; XINUSE at end {} vs {}",
            hex::or_dash(self.guest_xcr0),
            hex::or_dash(self.xinuse_minimal),
            hex::or_dash(self.xinuse_all)
        );
        let t = Columns::new()
            .left("", 14)
            .left(" ", 10)
            .right(" ", 7)
            .right(" ", 10)
            .right(" ", 13)
            .right(" ", 10)
            .right(" ", 13)
            .left(" ", 6)
            .right(" ", 11)
            .left("  ", 0);
        t.push(
            &mut s,
            &[
                "workload",
                "variant",
                "size",
                "minimal",
                "min..p90",
                "all",
                "min..p90",
                "unit",
                "all/min (x)",
                "note",
            ],
        );
        // A median and its min..p90 at the same precision, so the median
        // never reads outside its own range after rounding.
        let f = |v: Option<f64>| or_dash(v.map(|v| same_precision(v, v)));
        let range = |v: Option<Spread>| {
            or_dash(v.map(|v| {
                format!(
                    "{}..{}",
                    same_precision(v.min, v.median),
                    same_precision(v.p90, v.median)
                )
            }))
        };
        for r in &self.rows {
            t.push(
                &mut s,
                &[
                    r.name.clone(),
                    r.variant.clone(),
                    match r.size_unit {
                        "bytes" => format!("{} B", r.size),
                        "matrix order" => format!("n={}", r.size),
                        _ => r.size.to_string(),
                    },
                    f(r.minimal),
                    range(r.minimal_spread),
                    f(r.all),
                    range(r.all_spread),
                    r.unit.to_string(),
                    or_dash(r.ratio.map(|v| format!("{v:.3}"))),
                    r.note().to_string(),
                ],
            );
        }
        let source = match self.budget_s {
            Some(b) => format!("calibrated to a {b:.0} s budget"),
            None => "--rounds".to_string(),
        };
        let _ = writeln!(
            s,
            "minimal and all: medians of {} rounds ({source}), throughput in the unit column; size: B = message bytes, n = matrix order",
            self.rounds
        );
        let _ = writeln!(
            s,
            "all/min below 1 is the effect (slower with all of XCR0 initially in use); \"within noise\": the min..p90 ranges overlap; above 1 is never a gain"
        );
        let _ = writeln!(s, "measured in {:.1} s", self.wall_s);
        if let Some(c) = &self.comparison {
            s.push_str(&c.to_table());
        }
        s
    }

    /// The `--plot` chart: `all / minimal` per workload row against the
    /// 1.0 line, with the range the rounds allow (all's min over minimal's
    /// p90 to all's p90 over minimal's min).
    pub fn charts(&self) -> Vec<BarChart> {
        let bars = self
            .rows
            .iter()
            .filter_map(|r| {
                let ratio = r.ratio?;
                let range = match (r.minimal_spread, r.all_spread) {
                    (Some(m), Some(a)) if m.min > 0.0 && m.p90 > 0.0 => {
                        Some((a.min / m.p90, a.p90 / m.min))
                    }
                    _ => None,
                };
                let noise = r.within_noise == Some(true);
                Some(Bar {
                    label: format!("{} {} {}", r.name, r.variant, r.size),
                    series: if noise { 2 } else { usize::from(ratio < 1.0) },
                    value: ratio,
                    range,
                    tick: None,
                    text: Some(format!("{ratio:.2}")),
                })
            })
            .collect();
        vec![BarChart {
            title: format!(
                "Initial XSTATE_BV all of XCR0 vs x87|SSE (workload={}): throughput ratio, median of {} rounds",
                self.workload, self.rounds
            ),
            y_desc: "throughput all / minimal (1.0 = no effect)".into(),
            series: vec![
                "faster with all (not a gain: noise or drift)".into(),
                "slower with all".into(),
                "within noise".into(),
            ],
            groups: vec![BarGroup {
                label: String::new(),
                bars,
            }],
            tick_name: None,
            hline: Some((1.0, "no effect = 1.0".into())),
        }]
    }
}

/// `v` with as many decimals as figures of `scale`'s size carry here: none
/// from 1000, one from 10, two below (1462, 97.3, 4.25).
fn same_precision(v: f64, scale: f64) -> String {
    let a = scale.abs();
    let decimals = if a >= 1000.0 {
        0
    } else if a >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `1462.29  1.5k..1.5k` read as a median outside its range (issue 38
    /// §5): all three now share the median's precision.
    #[test]
    fn a_median_and_its_range_share_one_precision() {
        assert_eq!(same_precision(1462.29, 1462.29), "1462");
        let range = format!(
            "{}..{}",
            same_precision(1455.4, 1462.29),
            same_precision(1470.6, 1462.29)
        );
        assert_eq!(range, "1455..1471");
        assert_eq!(same_precision(97.34, 97.34), "97.3");
        assert_eq!(same_precision(4.251, 4.251), "4.25");
        assert_eq!(same_precision(12.0, 4.251), "12.00");
    }
}
