//! The plan, the rows and the document of `vmm bench exits`.

use std::time::Duration;

use serde::Serialize;
use xstate::{XfeatureMask, XsaveInfo};

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
    /// KVM's leaf 0xD: the layout of the state KVM hands over, which the
    /// rows' byte figures come from.
    pub info: XsaveInfo,
    /// Bytes of the standard image one `KVM_GET_XSAVE[2]` copies out
    /// (`HostKvm::xsave2_size`).
    pub image_bytes: u64,
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

    /// The boots in units of a boot of the widest XCR0: each weighs its
    /// rows per boot over the widest's (a 0x3 boot has half the rows of a
    /// 0xe7 one). What the calibration divides the budget by.
    pub fn widest_boots(&self) -> f64 {
        let widest = self
            .masks
            .iter()
            .map(|&m| super::plan::rows_per_boot(m))
            .max()
            .unwrap_or(1)
            .max(1);
        let rows: u64 = self
            .masks
            .iter()
            .map(|&m| super::plan::rows_per_boot(m))
            .sum();
        let per_mask = u64::from(self.rounds) * (1 + self.policies.len() as u64);
        (rows * per_mask) as f64 / widest as f64
    }
}

/// One row of the matrix.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ExitRow {
    /// `pio`, `mmio` or `cpuid`.
    pub exit: String,
    /// `cpl3` or `cpl0`: where the guest loop ran.
    pub mode: String,
    /// The vector state above SSE live during the exits: `clean` (none:
    /// every upper component in init state; also every `cpl0` row), `ymm`
    /// (AVX), `zmm` (AVX and the three AVX-512 components), `tiles` (the
    /// AMX tiles on top of the vector widths XCR0 has).
    pub upper: String,
    /// `raw`, `lazy`, `eager` or `eager-compact`.
    pub policy: String,
    /// The guest's XCR0 for the row.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub guest_xcr0: XfeatureMask,
    /// Exits in the timed loop.
    pub count: u64,
    /// XINUSE right before the first exit, as the guest read it (XGETBV
    /// with ECX = 1) and limited to `guest_xcr0`; null where the guest's
    /// CPU cannot read it.
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub xinuse: Option<XfeatureMask>,
    /// The live state in the compacted format (legacy region and header
    /// included; KVM's leaf 0xD layout): of `xinuse`, or where that is
    /// null of x87|SSE and the components `upper` makes live. What the
    /// in-use-only copy of one exit's state takes: `eager-compact` keeps
    /// this much per exit, `eager` moves the whole image twice.
    pub compacted_bytes: Option<u64>,
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
    /// For an `eager-compact` row: `ns_per_exit` of the `eager` row of the
    /// same exit, mode, upper state and XCR0 (its median).
    pub eager_ns_per_exit: Option<f64>,
    /// An `eager-compact` row against the `eager` row of the same exit,
    /// mode, upper state and XCR0: `faster` or `within-noise` is
    /// eager-compact <= eager; null for the other policies. On `cpuid`
    /// rows it only measures noise: KVM answers CPUID without returning to
    /// the VMM, so no policy runs.
    pub vs_eager: Option<Verdict>,
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

    /// Whether state above SSE was live during the exits: by `xinuse` when
    /// the guest read it, else by `upper`.
    pub fn upper_live(&self) -> bool {
        match self.xinuse {
            Some(m) => !(m & guest::bench::exits::UPPER).is_empty(),
            None => self.upper != "clean",
        }
    }

    /// Whether KVM returns to the VMM for this row's exits (PIO, MMIO);
    /// CPUID is answered inside KVM, where no sync policy runs.
    pub fn reaches_vmm(&self) -> bool {
        guest::bench::exits::ExitKind::of_row_name(&format!("exit-{}", self.exit))
            .is_some_and(|k| k.reaches_vmm())
    }

    /// Whether this eager-compact row cost at most what eager did:
    /// cheaper outside the noise or within it; with one round, by the
    /// medians. `None` for other policies, without an eager row, and for
    /// exits that never reach the VMM (the policies do nothing there, so
    /// any difference is noise).
    pub fn at_most_eager(&self) -> Option<bool> {
        if !self.reaches_vmm() {
            return None;
        }
        match self.vs_eager? {
            Verdict::Faster | Verdict::WithinNoise => Some(true),
            Verdict::Slower => Some(false),
            Verdict::NoSpread => Some(self.ns_per_exit? <= self.eager_ns_per_exit?),
        }
    }
}

/// The whole benchmark.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ExitBench {
    /// `exits`: which `vmm bench` made this (baselines are checked by it).
    pub bench: &'static str,
    /// The headline limit: raw PIO exit from CPL3, upper state clean, at
    /// `raw_xcr0` (median of the rounds).
    pub raw_ns_per_exit: Option<f64>,
    /// The XCR0 of the headline limit: the widest measured (with the
    /// default masks, all the user state KVM offers and the host enables).
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub raw_xcr0: Option<XfeatureMask>,
    /// Bytes of the standard image one `KVM_GET_XSAVE[2]` copies out:
    /// what `eager` reads and writes back on every exit.
    pub image_bytes: u64,
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
    /// One row per exit kind, mode, upper state, policy and XCR0.
    pub rows: Vec<ExitRow>,
    /// What could not be measured, and why.
    pub notes: Vec<String>,
    /// This run against `--baseline` / `--compare`, when given.
    pub comparison: Option<Comparison>,
}

/// How `--baseline` / `--compare` read the rows of `vmm bench exits --json`
/// output: by exit, mode, upper state, policy and XCR0, comparing
/// `ns_per_exit` (a cost: lower is better).
pub static KIND: Kind = Kind {
    bench: "exits",
    key: &[
        ("exit", "exit"),
        ("mode", "mode"),
        ("upper", "upper"),
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

/// The rows' identity: XCR0, policy, exit, mode, upper state.
pub(super) type Key = (XfeatureMask, String, String, String, String);
