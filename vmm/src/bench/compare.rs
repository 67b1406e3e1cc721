//! This run of `vmm bench exits` against a baseline, row by row: the
//! model of the comparison and its table (made by [`super::baseline`]).

use std::fmt::Write as _;

use serde::Serialize;

use super::stats::Change;
use crate::report::table::{or_dash, Columns};

/// One row of this run against the baseline.
#[derive(schemars::JsonSchema, Clone, Debug, Serialize)]
pub struct CompareRow {
    /// Exit kind.
    pub exit: String,
    /// Guest mode.
    pub mode: String,
    /// Upper-YMM state.
    pub upper_ymm: String,
    /// Policy.
    pub policy: String,
    /// XCR0 (hex string).
    pub guest_xcr0: String,
    /// The baseline's `ns_per_exit`.
    pub baseline_ns_per_exit: f64,
    /// This run's `ns_per_exit`.
    pub ns_per_exit: f64,
    /// `(now - baseline) / baseline`, in percent: negative is faster.
    pub change_pct: f64,
    /// `improved`, `regressed` or `no change` (the ranges overlap, or a run
    /// had one round).
    pub verdict: Change,
}

/// This run against a baseline.
#[derive(schemars::JsonSchema, Clone, Debug, Serialize)]
pub struct Comparison {
    /// The baseline's name or file.
    pub baseline: String,
    /// The baseline's rounds.
    pub baseline_rounds: u32,
    /// Rows present in both runs.
    pub rows: Vec<CompareRow>,
    /// Rows of this run the baseline lacks (`policy exit mode ymm xcr0`).
    pub only_now: Vec<String>,
    /// Rows of the baseline this run lacks.
    pub only_baseline: Vec<String>,
}

impl Comparison {
    /// The comparison table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\ncompared with baseline {} ({} rounds): change of the median; significant only where both runs' min..p90 ranges are apart",
            self.baseline,
            or_dash((self.baseline_rounds > 0).then_some(self.baseline_rounds))
        );
        let t = Columns::new()
            .left("", 6)
            .left(" ", 5)
            .left(" ", 6)
            .left(" ", 14)
            .left(" ", 6)
            .right(" ", 9)
            .right(" ", 9)
            .right(" ", 8)
            .left("  ", 0);
        t.push(
            &mut s,
            &[
                "exit", "mode", "ymm", "policy", "xcr0", "then ns", "now ns", "change", "verdict",
            ],
        );
        for r in &self.rows {
            t.push(
                &mut s,
                &[
                    r.exit.clone(),
                    r.mode.clone(),
                    r.upper_ymm.clone(),
                    r.policy.clone(),
                    r.guest_xcr0.clone(),
                    format!("{:.0}", r.baseline_ns_per_exit),
                    format!("{:.0}", r.ns_per_exit),
                    format!("{:+.1}%", r.change_pct),
                    r.verdict.words().to_string(),
                ],
            );
        }
        let count = |c: Change| self.rows.iter().filter(|r| r.verdict == c).count();
        let _ = writeln!(
            s,
            "{} improved, {} regressed, {} no change (within noise)",
            count(Change::Improved),
            count(Change::Regressed),
            count(Change::NoChange)
        );
        if !self.only_now.is_empty() {
            let _ = writeln!(s, "not in the baseline: {}", self.only_now.join(", "));
        }
        if !self.only_baseline.is_empty() {
            let _ = writeln!(s, "not in this run: {}", self.only_baseline.join(", "));
        }
        s
    }
}
