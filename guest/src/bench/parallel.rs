//! The SMP scaling set (`bench=parallel`): AES-128-CTR and DGEMM, the same
//! code the workload suite times, run first on one CPU alone and then on
//! every CPU at once, so one run gives both the single-CPU figure and the
//! aggregate, and the VMM can run the very same parts on as many host
//! threads for the native comparison.
//!
//! The set is split into [`Part`]s: the guest (and the native run) holds a
//! barrier before each part so that the CPUs time the same kind of work at
//! the same time. Within a part every CPU runs the variants in the same
//! order with the same time budget per row, so they stay in step.
//!
//! Rows keep the suite's names and sizes; the variant gets a suffix saying
//! which phase measured it: [`SOLO_SUFFIX`] (CPU 0 alone) or
//! [`SMP_SUFFIX`] (every CPU at once; each CPU's own rows in its own
//! report).

use crate::protocol::{field_str, Report, NAME_LEN};
use crate::workloads::runner::{run_sizes, Sizes, Target, CTR_SIZES_QUICK, GEMM_SIZES_QUICK};
use crate::workloads::{scratch_bytes as suite_scratch_bytes, CpuFeatures, Selection};

/// Variant suffix of the rows CPU 0 measured alone.
pub const SOLO_SUFFIX: &str = "/solo";
/// Variant suffix of the rows measured with every CPU running the set.
pub const SMP_SUFFIX: &str = "/smp";

/// One part of the set: run by every CPU between two barriers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// AES-128-CTR on 8192-byte messages, every variant the CPU allows.
    AesCtr,
    /// DGEMM of order 256, every variant the CPU allows.
    Dgemm,
}

impl Part {
    /// The parts in the order they run.
    pub const ALL: [Part; 2] = [Part::AesCtr, Part::Dgemm];

    fn selection(self) -> Selection {
        Selection {
            aes: self == Part::AesCtr,
            gemm: self == Part::Dgemm,
            quick: true,
            ..Selection::NONE
        }
    }

    fn sizes(self) -> Sizes<'static> {
        Sizes {
            cbc: &[],
            ctr: &CTR_SIZES_QUICK,
            gemm: &GEMM_SIZES_QUICK,
            linpack: &[],
            modes: &[],
        }
    }
}

/// Scratch bytes one CPU needs for every part (each CPU needs its own).
pub fn scratch_bytes() -> usize {
    Part::ALL
        .iter()
        .map(|p| suite_scratch_bytes(&p.selection()))
        .max()
        .unwrap_or(0)
}

/// Run `part` and append its rows (unsuffixed) to `report`; returns true
/// when every check passed. `feat`, `tsc_khz` and `scratch` as for
/// [`crate::workloads::run`]'s [`Target`].
pub fn run_part(
    part: Part,
    feat: &CpuFeatures,
    tsc_khz: u64,
    scratch: &mut [u8],
    report: &mut Report,
) -> bool {
    let on = Target {
        feat,
        tsc_khz,
        scratch,
        report,
    };
    run_sizes(&part.selection(), &part.sizes(), on)
}

/// Append `suffix` to the variant of every result from index `from` on
/// (the rows one phase produced). A variant too long for the field keeps
/// its first characters, so the suffix always survives.
pub fn mark_rows(report: &mut Report, from: usize, suffix: &str) {
    let n = report.results().len();
    for r in &mut report.results[from.min(n)..n] {
        let mut text = [0u8; NAME_LEN];
        let base = field_str(&r.variant);
        let keep = base.len().min(NAME_LEN - suffix.len());
        text[..keep].copy_from_slice(&base.as_bytes()[..keep]);
        text[keep..keep + suffix.len()].copy_from_slice(suffix.as_bytes());
        r.variant = text;
    }
}

/// Split a marked variant into the suite's variant and the phase suffix.
pub fn split_variant(variant: &str) -> Option<(&str, &'static str)> {
    [SOLO_SUFFIX, SMP_SUFFIX]
        .into_iter()
        .find_map(|s| variant.strip_suffix(s).map(|base| (base, s)))
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::protocol::{fixed_str, ResultRecord, WorkUnit};

    #[test]
    fn marking_appends_the_phase_and_splits_back() {
        let mut r = Report::new();
        let row = |v: &str| ResultRecord {
            name: fixed_str("aes-128-ctr"),
            variant: fixed_str(v),
            size: 8192,
            work: 1,
            cycles: 1,
            unit: WorkUnit::Bytes as u32,
            check: 1,
            residual: 0.0,
        };
        assert!(r.push_result(row("aesni-sse")));
        assert!(r.push_result(row("vaes-avx512")));
        assert!(r.push_result(row("x".repeat(40).as_str())));
        mark_rows(&mut r, 1, SMP_SUFFIX);
        let v: std::vec::Vec<&str> = r.results().iter().map(|x| field_str(&x.variant)).collect();
        assert_eq!(v[0], "aesni-sse");
        assert_eq!(v[1], "vaes-avx512/smp");
        assert_eq!(v[2].len(), NAME_LEN);
        assert!(v[2].ends_with("/smp"));
        assert_eq!(split_variant(v[1]), Some(("vaes-avx512", SMP_SUFFIX)));
        assert_eq!(split_variant("avx2/solo"), Some(("avx2", SOLO_SUFFIX)));
        assert_eq!(split_variant("avx2"), None);
    }

    #[test]
    fn a_part_runs_natively_and_checks() {
        let mut scratch = std::vec![0u8; scratch_bytes()];
        let mut report = std::boxed::Box::new(Report::new());
        let feat = CpuFeatures::detect();
        // tsc_khz 0: fixed work, independent of the host's speed.
        assert!(run_part(Part::AesCtr, &feat, 0, &mut scratch, &mut report));
        let rows = report.results();
        assert!(!rows.is_empty());
        assert!(rows
            .iter()
            .all(|r| field_str(&r.name) == "aes-128-ctr" && r.size == 8192 && r.check == 1));
    }
}
