//! The plan, the rows and the document of `vmm bench exits`.

use std::time::Duration;

use serde::Serialize;
use xstate::XfeatureMask;

use crate::bench::compare::{key_of, num, Comparison, Kind, Sample};
use crate::bench::stats::{Spread, Verdict};
use crate::report::hex;
use crate::xstate_manager::SyncPolicy;

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
pub(super) type Key = (XfeatureMask, String, String, String, String);
