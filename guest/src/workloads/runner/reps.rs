//! Repetitions of a row, and who hears about each one: the guest kernel
//! signals every repetition to its VMM ([`crate::protocol::rep`]), which
//! times the same row natively in between; the native side and tests hear
//! nothing ([`NoReps`]).

use crate::protocol::RepRecord;

/// Told about each timed repetition of a row.
pub trait RepHook {
    /// Repetitions each row gets (at least 1).
    fn reps(&self) -> u32;
    /// One repetition of a row is done.
    fn rep_done(&mut self, record: &RepRecord);
}

/// One repetition per row, nobody told.
pub struct NoReps;

impl RepHook for NoReps {
    fn reps(&self) -> u32 {
        1
    }
    fn rep_done(&mut self, _: &RepRecord) {}
}

/// Keeps the last repetition (the native entry point's answer).
#[derive(Default)]
pub(super) struct LastRep(pub(super) Option<RepRecord>);

impl RepHook for LastRep {
    fn reps(&self) -> u32 {
        1
    }
    fn rep_done(&mut self, record: &RepRecord) {
        self.0 = Some(*record);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;
    use std::vec::Vec;

    use super::*;
    use crate::protocol::{field_str, Report, RowKey, RowKind};
    use crate::workloads::runner::{run_row, run_with_hook, Sizes};
    use crate::workloads::{CpuFeatures, GemmVariant, Selection};

    struct Count(u32, Vec<RepRecord>);
    impl RepHook for Count {
        fn reps(&self) -> u32 {
            self.0
        }
        fn rep_done(&mut self, r: &RepRecord) {
            self.1.push(*r);
        }
    }

    const SIZES: Sizes<'static> = Sizes {
        cbc: &[],
        ctr: &[],
        gemm: &[40],
        linpack: &[],
        modes: &[],
    };

    #[test]
    fn every_row_is_repeated_and_each_repetition_told() {
        let mut scratch = vec![0u8; 1 << 21];
        let mut report = Report::new();
        let mut hook = Count(3, Vec::new());
        let sel = Selection::parse("gemm").unwrap();
        let feat = CpuFeatures::detect();
        assert!(run_with_hook(
            &sel,
            &SIZES,
            &feat,
            100,
            &mut scratch,
            &mut report,
            &mut hook
        ));
        let rows = report.results();
        assert!(!rows.is_empty());
        assert_eq!(hook.1.len(), 3 * rows.len());
        for (i, row) in rows.iter().enumerate() {
            let reps = &hook.1[3 * i..3 * i + 3];
            let variant = GemmVariant::ALL
                .iter()
                .position(|v| v.name() == field_str(&row.variant))
                .unwrap();
            let key = RowKey {
                kind: RowKind::Dgemm,
                variant: variant as u8,
                size: 40,
            };
            for (k, r) in reps.iter().enumerate() {
                assert_eq!((r.key, r.rep), (key.encode(), k as u32));
                assert_eq!(r.digest, reps[0].digest);
                assert_ne!(r.digest, 0);
            }
            // The row is the total of its repetitions.
            assert_eq!(row.work, reps.iter().map(|r| r.work).sum::<u64>());
            assert_eq!(row.cycles, reps.iter().map(|r| r.cycles).sum::<u64>());
            // One repetition of the same row alone computes the same product.
            let mut alone = Report::new();
            let out = run_row(key, true, 100, &mut scratch, &mut alone);
            assert_eq!((out.ran, out.check, out.digest), (1, 1, reps[0].digest));
            assert_eq!(alone.results().len(), 1);
        }
    }

    #[test]
    fn a_row_the_host_cannot_run_did_not_run() {
        let mut scratch = vec![0u8; 1 << 20];
        let mut report = Report::new();
        // Variant 9 of DGEMM does not exist.
        let key = RowKey {
            kind: RowKind::Dgemm,
            variant: 9,
            size: 40,
        };
        let out = run_row(key, true, 100, &mut scratch, &mut report);
        assert_eq!(out.ran, 0);
        assert!(report.results().is_empty());
        // Too little scratch: a skip record, nothing timed.
        let key = RowKey { variant: 0, ..key };
        let out = run_row(key, true, 100, &mut scratch[..64], &mut report);
        assert_eq!(out.ran, 0);
        assert!(!report.skipped().is_empty());
    }
}
