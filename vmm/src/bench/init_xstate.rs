//! `vmm bench init-xstate`: the illumos experiment. The same workloads with
//! the vCPU's initial XSTATE_BV = x87|SSE (correct) and = all of XCR0 (the
//! bug that left AVX upper state looking live, making legacy-SSE AES-NI 3x
//! slower on Skylake), in one command, with their ratio.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use xstate::{InitMode, XfeatureMask};

use super::progress::Progress;
use super::stats::{Spread, Verdict};
use crate::devices::SerialSink;
use crate::error::{Error, Result};
use crate::report::hex;
use crate::report::plot::{Bar, BarChart, BarGroup};
use crate::report::table::{or_dash, Columns};
use crate::report::{ResultRow, RunSummary};
use crate::vstate::{self, RunConfig};

/// One workload row under both initial states.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct InitRow {
    /// Workload name.
    pub name: String,
    /// Variant name.
    pub variant: String,
    /// Problem size.
    pub size: u64,
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
}

/// The whole experiment.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct InitBench {
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
    /// One row per workload variant.
    pub rows: Vec<InitRow>,
}

fn run_one(
    workload: &str,
    xfeatures: Option<&str>,
    init: InitMode,
    timeout: Duration,
) -> Result<RunSummary> {
    let outcome = vstate::run(RunConfig {
        xfeatures: xfeatures.map(str::to_string),
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

/// Run `workload` under both initial states, `rounds` times interleaved.
pub fn run(
    workload: &str,
    xfeatures: Option<&str>,
    rounds: u32,
    timeout: Duration,
    progress: &Progress,
) -> Result<InitBench> {
    let rounds = rounds.max(1);
    let mut minimal = Vec::new();
    let mut all = Vec::new();
    for round in 1..=rounds {
        for (init, name, into) in [
            (InitMode::Minimal, "minimal", &mut minimal),
            (InitMode::AllOfXcr0, "all", &mut all),
        ] {
            progress.step(format!("round {round}/{rounds}, initial XSTATE_BV {name}"));
            into.push(run_one(workload, xfeatures, init, timeout)?);
            progress.inc();
        }
    }
    // The same row of every round's results.
    let samples = |runs: &[RunSummary], m: &ResultRow| -> Vec<f64> {
        runs.iter()
            .filter_map(|s| {
                s.results
                    .iter()
                    .find(|a| a.name == m.name && a.variant == m.variant && a.size == m.size)
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
            InitRow {
                name: m.name.clone(),
                variant: m.variant.clone(),
                size: m.size,
                unit: m.unit(),
                minimal: mv,
                all: av,
                ratio: match (mv, av) {
                    (Some(m), Some(a)) if m > 0.0 => Some(a / m),
                    _ => None,
                },
                minimal_spread: ms,
                all_spread: al,
                within_noise: ms
                    .zip(al)
                    .map(|(m, a)| Verdict::of(&a, &m, rounds).is_noise()),
            }
        })
        .collect();
    let (first_min, first_all) = (&minimal[0], &all[0]);
    Ok(InitBench {
        workload: workload.to_string(),
        guest_xcr0: first_min.guest_xcr0,
        xinuse_minimal: first_min.guest_xinuse,
        xinuse_all: first_all.guest_xinuse,
        rounds,
        rows,
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
            .right(" ", 12)
            .right(" ", 12)
            .left(" ", 7)
            .right(" ", 7)
            .left("  ", 0);
        t.push(
            &mut s,
            &[
                "workload", "variant", "size", "minimal", "all", "unit", "all/min", "note",
            ],
        );
        let f = |v: Option<f64>| or_dash(v.map(|v| format!("{v:.2}")));
        for r in &self.rows {
            t.push(
                &mut s,
                &[
                    r.name.clone(),
                    r.variant.clone(),
                    r.size.to_string(),
                    f(r.minimal),
                    f(r.all),
                    r.unit.to_string(),
                    or_dash(r.ratio.map(|v| format!("{v:.3}"))),
                    match r.within_noise {
                        Some(true) => "within noise".to_string(),
                        _ => String::new(),
                    },
                ],
            );
        }
        let _ = writeln!(
            s,
            "minimal and all are medians of {} rounds; \"within noise\": their min..p90 ranges overlap",
            self.rounds
        );
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
                "faster with all".into(),
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
