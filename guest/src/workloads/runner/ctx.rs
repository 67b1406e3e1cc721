//! The suites' view of the report: one [`Ctx`] per run collects results
//! and skip records, keeps the time budget, and tracks whether every check
//! passed.

use core::fmt::Write;

use crate::protocol::{fixed_str, Report, ResultRecord, SkipRecord, WorkUnit};
use crate::workloads::features::CpuFeatures;
use crate::workloads::gemm::{Dgemm, GemmVariant};
use crate::workloads::text::Reason;
use crate::workloads::timing::Budget;

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
}

impl Ctx<'_> {
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
