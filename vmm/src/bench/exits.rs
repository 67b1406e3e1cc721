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
use std::time::Duration;

use guest::protocol::MARK_END;
use serde::Serialize;
use xstate::{Xfeature, XfeatureMask};

use crate::devices::SerialSink;
use crate::error::{Error, Result};
use crate::report::hex;
use crate::report::result_rows;
use crate::report::table::{or_dash, Columns};
use crate::vstate::{self, RunConfig, RunOutcome};
use crate::xstate_manager::SyncPolicy;

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
    /// Wall time per exit seen from the VMM (marker to marker).
    pub ns_per_exit: Option<f64>,
    /// TSC cycles per exit seen from the guest.
    pub guest_cycles_per_exit: f64,
    /// `ns_per_exit` of the raw loop for the same exit, mode, YMM state and XCR0.
    pub raw_ns_per_exit: Option<f64>,
    /// `ns_per_exit / raw_ns_per_exit`.
    pub ratio_to_raw: Option<f64>,
}

/// The whole benchmark.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ExitBench {
    /// The headline limit: raw PIO exit from CPL3, clean YMM, full XCR0.
    pub raw_ns_per_exit: Option<f64>,
    /// Exits per row.
    pub count: u64,
    /// Runs per row; each row reports its best.
    pub rounds: u32,
    /// One row per exit kind, mode, YMM state, policy and XCR0.
    pub rows: Vec<ExitRow>,
    /// What could not be measured, and why.
    pub notes: Vec<String>,
}

/// Run the matrix (see the module doc): for each XCR0 in `masks`, the raw
/// loop and each policy,
/// `rounds` times interleaved; each row keeps its best (lowest) round, so
/// a burst of host noise in one run does not decide a ratio.
pub fn run(
    count: u64,
    rounds: u32,
    masks: &[XfeatureMask],
    policies: &[SyncPolicy],
    timeout: Duration,
) -> Result<ExitBench> {
    let mut best: BTreeMap<(XfeatureMask, String, String, String, String), ExitRow> =
        BTreeMap::new();
    let mut order = Vec::new();
    let mut notes = Vec::new();
    for round in 0..rounds.max(1) {
        for &xcr0 in masks {
            let mut configs: Vec<(String, bool, SyncPolicy)> =
                vec![("raw".into(), true, SyncPolicy::Lazy)];
            configs.extend(policies.iter().map(|p| (p.name().to_string(), false, *p)));
            for (name, raw, policy) in configs {
                // The first round also checks, under every policy, that the
                // guest's registers survive `count` exits of each kind bit
                // for bit and that a VMM-side XMM edit reaches the guest.
                let benches = if round == 0 && !raw {
                    "exits,xstate-check"
                } else {
                    "exits"
                };
                let outcome = vstate::run(RunConfig {
                    xfeatures: Some(format!("{:#x}", xcr0.bits())),
                    cmdline: format!("quiet workload=none bench={benches} exits={count}"),
                    serial: SerialSink::Null,
                    timeout: Some(timeout),
                    xstate_sync: policy,
                    raw_loop: raw,
                    ..RunConfig::default()
                })?;
                check_end(&outcome, &name)?;
                for row in rows_of(&outcome, &name, xcr0, count, &mut notes) {
                    let k = (
                        row.guest_xcr0,
                        row.policy.clone(),
                        row.exit.clone(),
                        row.mode.clone(),
                        row.upper_ymm.clone(),
                    );
                    match best.get_mut(&k) {
                        None => {
                            order.push(k.clone());
                            best.insert(k, row);
                        }
                        Some(b) => {
                            if let Some(ns) = row.ns_per_exit {
                                b.ns_per_exit = Some(b.ns_per_exit.map_or(ns, |x| x.min(ns)));
                            }
                            b.guest_cycles_per_exit =
                                b.guest_cycles_per_exit.min(row.guest_cycles_per_exit);
                        }
                    }
                }
            }
        }
    }
    let mut rows: Vec<ExitRow> = order.iter().filter_map(|k| best.remove(k)).collect();
    // Each row against the raw loop's row for the same conditions.
    let key = |r: &ExitRow| {
        (
            r.exit.clone(),
            r.mode.clone(),
            r.upper_ymm.clone(),
            r.guest_xcr0,
        )
    };
    let raw: BTreeMap<_, f64> = rows
        .iter()
        .filter(|r| r.policy == "raw")
        .filter_map(|r| r.ns_per_exit.map(|ns| (key(r), ns)))
        .collect();
    for r in rows.iter_mut() {
        r.raw_ns_per_exit = raw.get(&key(r)).copied();
        r.ratio_to_raw = match (r.ns_per_exit, r.raw_ns_per_exit) {
            (Some(ns), Some(raw)) if raw > 0.0 => Some(ns / raw),
            _ => None,
        };
    }
    notes.dedup();
    let full = masks.iter().copied().max_by_key(|m| m.bits());
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
        raw_ns_per_exit,
        count,
        rounds: rounds.max(1),
        rows,
        notes,
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
                guest_cycles_per_exit: r.cycles as f64 / n as f64,
                raw_ns_per_exit: None,
                ratio_to_raw: None,
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
    /// The human table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "vCPU exit cost, {} exits per row, best of {} rounds; raw limit (PIO, CPL3, full XCR0): {}",
            self.count,
            self.rounds,
            or_dash(self.raw_ns_per_exit.map(|v| format!("{v:.0} ns")))
        );
        let t = Columns::new()
            .left("", 6)
            .left(" ", 5)
            .left(" ", 6)
            .left(" ", 14)
            .left(" ", 6)
            .right(" ", 10)
            .right(" ", 12)
            .right(" ", 9)
            .right(" ", 7);
        t.push(
            &mut s,
            &[
                "exit",
                "mode",
                "ymm",
                "policy",
                "xcr0",
                "ns/exit",
                "cycles/exit",
                "raw ns",
                "ratio",
            ],
        );
        let ns = |v: Option<f64>| or_dash(v.map(|v| format!("{v:.0}")));
        for r in &self.rows {
            t.push(
                &mut s,
                &[
                    r.exit.clone(),
                    r.mode.clone(),
                    r.upper_ymm.clone(),
                    r.policy.clone(),
                    format!("{:#x}", r.guest_xcr0),
                    ns(r.ns_per_exit),
                    format!("{:.0}", r.guest_cycles_per_exit),
                    ns(r.raw_ns_per_exit),
                    or_dash(r.ratio_to_raw.map(|v| format!("{v:.3}"))),
                ],
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }
}
