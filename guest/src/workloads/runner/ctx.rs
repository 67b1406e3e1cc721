//! The suites' view of the report: one [`Ctx`] per run collects results
//! and skip records, keeps the time budget, and tracks whether every check
//! passed.

use core::fmt::Write;

use super::point::Point;
use super::reps::RepHook;
use crate::protocol::{
    fixed_str, PartRecord, RepRecord, Report, ResultRecord, RowKey, RowKind, SkipRecord, WorkUnit,
};
use crate::workloads::features::CpuFeatures;
use crate::workloads::gemm::{Dgemm, GemmVariant};
use crate::workloads::text::Reason;
use crate::workloads::timing::{Budget, Measured, Stages};

/// One run's report, budget and verdict.
pub(super) struct Ctx<'r> {
    /// Where results and skips go.
    pub(super) report: &'r mut Report,
    /// How long one measurement may take.
    pub(super) budget: Budget,
    /// Index into the fixed-work tables: 0 quick, 1 full.
    pub(super) full: usize,
    /// False once a check failed.
    pub(super) ok: bool,
    /// Told about every timed repetition.
    pub(super) hook: &'r mut dyn RepHook,
    /// Run only this row (the native entry point), or every row.
    pub(super) only: Option<RowKey>,
    /// Where the run stops for a snapshot, if the hook asks for one.
    pub(super) point: Option<Point>,
}

impl Ctx<'_> {
    /// Whether variant number `variant` of `kind` runs at all.
    pub(super) fn wants(&self, kind: RowKind, variant: usize) -> bool {
        self.only
            .is_none_or(|k| k.kind == kind && usize::from(k.variant) == variant)
    }

    /// Time `f` like [`Budget::measure_parts`] (a call alone in its part
    /// cut at the marks `f` makes on its [`Stages`]), once per repetition
    /// the hook asks for, telling the hook after each timed part and after
    /// each repetition (`work` units per call of `f`, `digest` of the row's
    /// checked result) with the repetition's median part ([`Measured`]).
    /// Returns the totals.
    pub(super) fn measure(
        &mut self,
        key: RowKey,
        fixed: u64,
        work: u64,
        digest: u64,
        mut f: impl FnMut(&mut Stages<'_>),
    ) -> (u64, u64) {
        let (mut reps, mut cycles) = (0u64, 0u64);
        for rep in 0..self.hook.reps().max(1) {
            // `measure_rep` stops at the snapshot point before rep 0.
            let (r, c) = self.measure_rep(key, rep, fixed, work, digest, &mut f);
            reps += r;
            cycles += c;
        }
        (reps, cycles)
    }

    /// Repetition `rep` alone of [`Ctx::measure`]: for rows measured in
    /// turns (every row's repetition 0, then every row's repetition 1 ...).
    pub(super) fn measure_rep(
        &mut self,
        key: RowKey,
        rep: u32,
        fixed: u64,
        work: u64,
        digest: u64,
        mut f: impl FnMut(&mut Stages<'_>),
    ) -> (u64, u64) {
        if rep == 0 {
            self.before_row(key);
        }
        let hook = &mut *self.hook;
        let mut part = 0;
        let m = self.budget.measure_parts(fixed, work, &mut f, |w, c| {
            hook.part_done(&part_record(key, rep, &mut part, w, c));
        });
        self.hook.rep_done(&rep_record(key, rep, work, m, digest));
        (m.reps, m.cycles)
    }

    /// [`Budget::measure_with_setup`] per repetition, like [`Ctx::measure`]
    /// (its parts can be stages of one call of `f`, marked on the
    /// [`Stages`] `f` gets); the digest is taken from the state after each
    /// repetition.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn measure_with_setup<S>(
        &mut self,
        key: RowKey,
        fixed: u64,
        work: u64,
        state: &mut S,
        mut prepare: impl FnMut(&mut S),
        mut f: impl FnMut(&mut S, &mut Stages<'_>),
        digest: impl Fn(&S) -> u64,
    ) -> (u64, u64) {
        self.before_row(key);
        let (mut reps, mut cycles) = (0u64, 0u64);
        for rep in 0..self.hook.reps().max(1) {
            let hook = &mut *self.hook;
            let mut part = 0;
            let m =
                self.budget
                    .measure_with_setup(fixed, work, state, &mut prepare, &mut f, |w, c| {
                        hook.part_done(&part_record(key, rep, &mut part, w, c));
                    });
            reps += m.reps;
            cycles += m.cycles;
            self.hook
                .rep_done(&rep_record(key, rep, work, m, digest(state)));
        }
        (reps, cycles)
    }

    /// Row `key`'s inputs are ready and its timing is next: the snapshot
    /// point, if it is here.
    fn before_row(&mut self, key: RowKey) {
        if let Some(phase) = self.point.as_mut().and_then(|p| p.before_row(key)) {
            self.hook.snapshot_point(phase);
        }
    }

    /// The last workload is done: the snapshot point, if it was not
    /// reached before.
    pub(super) fn after_rows(&mut self) {
        if let Some(phase) = self.point.as_mut().and_then(Point::after_rows) {
            self.hook.snapshot_point(phase);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn result(
        &mut self,
        name: &str,
        variant: &str,
        size: usize,
        work: u64,
        cycles: u64,
        unit: WorkUnit,
        check: bool,
        residual: f64,
    ) {
        self.ok &= check;
        self.report.push_result(ResultRecord {
            name: fixed_str(name),
            variant: fixed_str(variant),
            size: size as u64,
            work,
            cycles,
            unit: unit as u32,
            check: check as u32,
            residual,
        });
    }

    /// [`Ctx::result`] of `reps` passes over a `size`-byte message that
    /// needs no check of its own (its known answers passed before timing).
    pub(super) fn bytes_result(
        &mut self,
        name: &str,
        variant: &str,
        size: usize,
        reps: u64,
        cycles: u64,
    ) {
        self.result(
            name,
            variant,
            size,
            reps * size as u64,
            cycles,
            WorkUnit::Bytes,
            true,
            0.0,
        );
    }

    pub(super) fn skip(&mut self, name: &str, variant: &str, reason: &Reason) {
        self.report.push_skipped(SkipRecord {
            name: fixed_str(name),
            variant: fixed_str(variant),
            reason: reason.field(),
        });
    }

    pub(super) fn skip_for_scratch(
        &mut self,
        name: &str,
        variant: &str,
        n: usize,
        need: usize,
        have: usize,
    ) {
        let mut r = Reason::new();
        let _ = write!(
            r,
            "size {n} needs {} KiB scratch, have {} KiB",
            need.div_ceil(1024),
            have / 1024
        );
        self.skip(name, variant, &r);
    }

    /// The DGEMM kernel `v` for the `name` rows, or `None` after a skip
    /// record saying why the CPU or XCR0 does not allow it.
    pub(super) fn dgemm(
        &mut self,
        name: &str,
        v: GemmVariant,
        usable: &CpuFeatures,
    ) -> Option<Dgemm> {
        match Dgemm::with_detected(v, usable) {
            Ok(d) => Some(d),
            Err(why) => {
                self.skip(name, v.name(), &why);
                None
            }
        }
    }
}

/// The record of part `*part` (then counted on) of repetition `rep`.
fn part_record(key: RowKey, rep: u32, part: &mut u32, work: u64, cycles: u64) -> PartRecord {
    let record = PartRecord {
        key: key.encode(),
        rep,
        part: *part,
        reserved: 0,
        work,
        cycles,
    };
    *part += 1;
    record
}

/// What the hook hears of repetition `rep` of row `key`: its median part
/// (see [`Measured`]), `work` units per call.
fn rep_record(key: RowKey, rep: u32, work: u64, m: Measured, digest: u64) -> RepRecord {
    let (reps, cycles) = m.median_part;
    RepRecord {
        key: key.encode(),
        rep,
        work: reps * work,
        cycles,
        digest,
    }
}
