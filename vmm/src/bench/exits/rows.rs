//! From boots to rows: a boot's `exit-*` results, markers and XINUSE
//! figures into rows, the rounds of each row into its median and spread,
//! and each row against the raw loop and (eager-compact) against eager.
//! No KVM here: the tests feed it reports made up for any CPU, the AMX
//! tiles included.

use std::collections::BTreeMap;
use std::time::Duration;

use guest::protocol::{Report, AUX_XINUSE, MARK_END};
use xstate::{XfeatureMask, XsaveInfo};

use super::model::{ExitRow, Key};
use super::plan;
use crate::bench::stats::{Spread, Verdict};
use crate::report::result_rows;
use crate::xstate_manager::SyncPolicy;

/// What one boot of the exit benchmark handed back.
#[derive(Clone, Copy)]
pub(super) struct Boot<'a> {
    /// The guest's report.
    pub report: &'a Report,
    /// The markers with when the VMM saw them.
    pub marks: &'a [(u32, Duration)],
    /// The guest's TSC rate in kHz (0: unknown).
    pub tsc_khz: u64,
    /// `raw` or the policy's name.
    pub policy: &'a str,
    /// The guest's XCR0.
    pub xcr0: XfeatureMask,
    /// Exits per row asked for.
    pub count: u64,
}

/// Every row of every boot so far, in first-seen order, and the notes.
#[derive(Default)]
pub(super) struct Matrix {
    acc: BTreeMap<Key, Samples>,
    order: Vec<Key>,
    notes: Vec<String>,
}

impl Matrix {
    /// A note for under the table (once).
    pub fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// One boot's rows into their samples.
    pub fn add_boot(&mut self, boot: &Boot<'_>, info: &XsaveInfo) {
        for row in rows_of(boot, info, &mut self.notes) {
            add_sample(&mut self.acc, &mut self.order, row);
        }
    }

    /// The rows, each the median and spread of its `rounds`, against the
    /// raw loop and eager; and the notes.
    pub fn finish(mut self, rounds: u32) -> (Vec<ExitRow>, Vec<String>) {
        let mut rows: Vec<ExitRow> = self
            .order
            .iter()
            .filter_map(|k| self.acc.remove(k))
            .map(summarise)
            .collect();
        against_raw(&mut rows, rounds);
        against_eager(&mut rows, rounds);
        (rows, self.notes)
    }
}

/// The headline: the raw loop's PIO exit from CPL3 with the upper state
/// clean at `xcr0` (the widest measured).
pub(super) fn raw_limit(rows: &[ExitRow], xcr0: Option<XfeatureMask>) -> Option<f64> {
    rows.iter()
        .find(|r| {
            r.policy == "raw"
                && r.exit == "pio"
                && r.mode == "cpl3"
                && r.upper == "clean"
                && Some(r.guest_xcr0) == xcr0
        })
        .and_then(|r| r.ns_per_exit)
}

/// A row's rounds.
struct Samples {
    row: ExitRow,
    ns: Vec<f64>,
    cycles: Vec<f64>,
}

/// One boot's row into its accumulated samples; a row seen for the first
/// time also takes its place in the output `order`.
fn add_sample(acc: &mut BTreeMap<Key, Samples>, order: &mut Vec<Key>, row: ExitRow) {
    let k = (
        row.guest_xcr0,
        row.policy.clone(),
        row.exit.clone(),
        row.mode.clone(),
        row.upper.clone(),
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

/// A row's conditions: exit, mode, upper state and XCR0 (everything but
/// the policy).
type Conditions = (String, String, String, XfeatureMask);

fn conditions(r: &ExitRow) -> Conditions {
    (
        r.exit.clone(),
        r.mode.clone(),
        r.upper.clone(),
        r.guest_xcr0,
    )
}

/// The spreads of `policy`'s rows by their conditions.
fn spreads_of(rows: &[ExitRow], policy: &str) -> BTreeMap<Conditions, Spread> {
    rows.iter()
        .filter(|r| r.policy == policy)
        .filter_map(|r| Some((conditions(r), r.spread()?)))
        .collect()
}

/// Each row against the raw loop's row for the same exit, mode, upper
/// state and XCR0: the raw figures beside its own, their ratio, and (for a
/// policy) the verdict over `rounds` whether it is within the noise.
fn against_raw(rows: &mut [ExitRow], rounds: u32) {
    let raw = spreads_of(rows, "raw");
    for r in rows.iter_mut() {
        let Some(base) = raw.get(&conditions(r)).copied() else {
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

/// Each eager-compact row against the eager row for the same conditions:
/// does keeping only the compacted in-use state cost at most what moving
/// the whole image both ways does.
fn against_eager(rows: &mut [ExitRow], rounds: u32) {
    let eager = spreads_of(rows, SyncPolicy::Eager.name());
    for r in rows
        .iter_mut()
        .filter(|r| r.policy == SyncPolicy::EagerCompact.name())
    {
        let (Some(base), Some(mine)) = (eager.get(&conditions(r)), r.spread()) else {
            continue;
        };
        r.eager_ns_per_exit = Some(base.median);
        r.vs_eager = Some(Verdict::of(&mine, base, rounds));
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

/// Turn a boot's `exit-*` results and its markers into rows, their byte
/// figures by `info`'s layout; its skip records about them into `notes`.
fn rows_of(boot: &Boot<'_>, info: &XsaveInfo, notes: &mut Vec<String>) -> Vec<ExitRow> {
    let Boot {
        report,
        marks,
        tsc_khz,
        policy,
        xcr0,
        count,
    } = *boot;
    let rows = result_rows(report, tsc_khz);
    let mut begin = BTreeMap::new();
    let mut end = BTreeMap::new();
    for &(v, t) in marks {
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
            let upper = plan::upper_of_variant(&r.variant);
            let mode = r.variant.split_once('-').map_or(&*r.variant, |(m, _)| m);
            let aux = report.aux(i);
            let xinuse =
                (aux & AUX_XINUSE != 0).then(|| XfeatureMask::from_bits(aux & !AUX_XINUSE) & xcr0);
            let live = plan::live_state(xinuse, upper, xcr0);
            let n = r.size.max(1);
            let ns = match (begin.get(&(i as u32)), end.get(&(i as u32))) {
                (Some(b), Some(e)) if e > b => Some((*e - *b).as_nanos() as f64 / n as f64),
                _ => None,
            };
            Some(ExitRow {
                exit: exit.to_string(),
                mode: mode.to_string(),
                upper: upper.name().to_string(),
                policy: policy.to_string(),
                guest_xcr0: xcr0,
                count: if r.size == 0 { count } else { r.size },
                xinuse,
                compacted_bytes: plan::compacted_bytes(info, live),
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
                eager_ns_per_exit: None,
                vs_eager: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
