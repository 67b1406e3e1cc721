//! Repetitions of a row, and who hears about each one: the guest kernel
//! signals every repetition to its VMM ([`crate::protocol::rep`]), which
//! times the same row natively in between; the native side and tests hear
//! nothing ([`NoReps`]).

use crate::protocol::{PartRecord, RepRecord, SnapshotPhase};

/// Told about each timed repetition of a row, and each timed part of it.
pub trait RepHook {
    /// Repetitions each row gets (at least 1).
    fn reps(&self) -> u32;
    /// One repetition of a row is done.
    fn rep_done(&mut self, record: &RepRecord);
    /// One timed part of a repetition is done (before the repetition's
    /// [`RepHook::rep_done`]); nobody is told by default.
    fn part_done(&mut self, _record: &PartRecord) {}
    /// Whether someone pairs each signalled repetition with a native one
    /// (a row then needs no other defence against the host's slow
    /// spells); no by default.
    fn paired(&self) -> bool {
        false
    }
    /// Where the run stops for a snapshot (`snapshot=PHASE`); nowhere by
    /// default.
    fn snapshot_phase(&self) -> Option<SnapshotPhase> {
        None
    }
    /// The run is at its snapshot point (once per run, between two rows:
    /// nothing is being timed); nothing happens by default.
    fn snapshot_point(&mut self, _phase: SnapshotPhase) {}
}

/// One repetition per row, nobody told.
pub struct NoReps;

impl RepHook for NoReps {
    fn reps(&self) -> u32 {
        1
    }
    fn rep_done(&mut self, _: &RepRecord) {}
}

/// Keeps the last repetition (the native entry point's answer) and passes
/// each part on to `on_part`.
pub(super) struct LastRep<'a> {
    pub(super) last: Option<RepRecord>,
    pub(super) on_part: &'a mut dyn FnMut(&PartRecord),
}

impl RepHook for LastRep<'_> {
    fn reps(&self) -> u32 {
        1
    }
    fn rep_done(&mut self, record: &RepRecord) {
        self.last = Some(*record);
    }
    fn part_done(&mut self, record: &PartRecord) {
        (self.on_part)(record);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;
    use std::vec::Vec;

    use super::*;
    use crate::protocol::{field_str, Report, RowKey, RowKind};
    use crate::workloads::runner::{run_row, run_with_hook, Sizes, Target};
    use crate::workloads::{linpack, CpuFeatures, GemmVariant, Selection};

    struct Count(u32, Vec<RepRecord>, Vec<PartRecord>);
    impl RepHook for Count {
        fn reps(&self) -> u32 {
            self.0
        }
        fn rep_done(&mut self, r: &RepRecord) {
            self.1.push(*r);
        }
        fn part_done(&mut self, p: &PartRecord) {
            self.2.push(*p);
        }
    }

    const SIZES: Sizes<'static> = Sizes {
        cbc: &[],
        ctr: &[],
        gemm: &[40],
        linpack: &[],
        modes: &[],
    };

    /// Runs `workloads` at `sizes` with `reps` repetitions a row and a
    /// 100 kHz TSC (a 2,000-cycle target: the fewest calls), into
    /// `scratch`; the report and what the hook heard.
    fn run_counted(
        workloads: &str,
        sizes: &Sizes<'_>,
        reps: u32,
        scratch: &mut [u8],
    ) -> (Report, Count) {
        let mut report = Report::new();
        let mut hook = Count(reps, Vec::new(), Vec::new());
        let sel = Selection::parse(workloads).unwrap();
        let on = Target {
            feat: &CpuFeatures::detect(),
            tsc_khz: 100,
            scratch,
            report: &mut report,
        };
        assert!(run_with_hook(&sel, sizes, on, &mut hook));
        (report, hook)
    }

    #[test]
    fn every_row_is_repeated_and_each_repetition_told() {
        let mut scratch = vec![0u8; 1 << 21];
        let (report, hook) = run_counted("gemm", &SIZES, 3, &mut scratch);
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
            // Each repetition's parts were told in order, before it, and
            // the row is the total of all of them; each repetition's
            // record is one of its parts.
            let parts: Vec<&PartRecord> = hook.2.iter().filter(|p| p.key == key.encode()).collect();
            for (k, r) in reps.iter().enumerate() {
                let mine: Vec<_> = parts.iter().filter(|p| p.rep == k as u32).collect();
                assert!(!mine.is_empty());
                for (i, p) in mine.iter().enumerate() {
                    assert_eq!((p.part, p.reserved), (i as u32, 0));
                }
                assert!(
                    mine.iter()
                        .any(|p| (p.work, p.cycles) == (r.work, r.cycles)),
                    "{r:?} {mine:?}"
                );
            }
            assert_eq!(row.work, parts.iter().map(|p| p.work).sum::<u64>());
            assert_eq!(row.cycles, parts.iter().map(|p| p.cycles).sum::<u64>());
            // One repetition of the same row alone computes the same
            // product, and tells its parts as repetition 0.
            let mut alone = Report::new();
            let mut told = Vec::new();
            let out = run_row(key, true, 100, &mut scratch, &mut alone, &mut |p| {
                told.push(*p)
            });
            assert_eq!((out.ran, out.check, out.digest), (1, 1, reps[0].digest));
            assert!(!told.is_empty() && told.iter().all(|p| p.rep == 0 && p.key == key.encode()));
            assert_eq!(
                (out.work, out.cycles),
                told.iter()
                    .find(|p| (p.work, p.cycles) == (out.work, out.cycles))
                    .map(|p| (p.work, p.cycles))
                    .unwrap()
            );
            assert_eq!(alone.results().len(), 1);
        }
    }

    #[test]
    fn a_factorisation_longer_than_a_part_is_told_in_stages() {
        // A target of 2,000 cycles (100 kHz x 20 ms): every factorisation of
        // n = 300 is a part alone, so it is cut where its stages and their
        // rest last at least 100 cycles: after its first two panels.
        let mut scratch = vec![0u8; 1 << 23];
        let sizes = Sizes {
            linpack: &[300],
            ..SIZES
        };
        let (report, hook) = run_counted("linpack", &sizes, 2, &mut scratch);
        let rows = report.results();
        assert!(!rows.is_empty());
        let (n, flops) = (300, linpack::flops(300));
        let stages = [
            linpack::flops_done(n, 128),
            linpack::flops_done(n, 256) - linpack::flops_done(n, 128),
            flops - linpack::flops_done(n, 256),
        ];
        for row in rows {
            let key = hook
                .1
                .iter()
                .map(|r| r.key)
                .find(|&k| RowKey::decode(k).is_some_and(|k| k.variant == variant_of(row)))
                .unwrap();
            let parts: Vec<&PartRecord> = hook.2.iter().filter(|p| p.key == key).collect();
            for r in hook.1.iter().filter(|r| r.key == key) {
                let mine: Vec<_> = parts.iter().filter(|p| p.rep == r.rep).collect();
                assert!(!mine.is_empty() && mine.len() % 3 == 0, "{mine:?}");
                for (i, p) in mine.iter().enumerate() {
                    assert_eq!((p.part, p.work), (i as u32, stages[i % 3]), "{mine:?}");
                }
                // The repetition's record is a whole factorisation.
                assert_eq!(r.work, flops, "{r:?}");
            }
            assert_eq!(row.work, parts.iter().map(|p| p.work).sum::<u64>());
            assert_eq!(row.cycles, parts.iter().map(|p| p.cycles).sum::<u64>());
            assert_eq!(row.check, 1, "residual {}", row.residual);
        }
    }

    /// The Linpack variant index of a result row.
    fn variant_of(row: &crate::protocol::ResultRecord) -> u8 {
        GemmVariant::ALL
            .iter()
            .position(|v| v.name() == field_str(&row.variant))
            .unwrap() as u8
    }

    /// Signalled repetitions, paired (as the guest kernel's are when the
    /// VMM answers) or not.
    struct Turns {
        reps: u32,
        paired: bool,
        told: Vec<RepRecord>,
    }
    impl RepHook for Turns {
        fn reps(&self) -> u32 {
            self.reps
        }
        fn rep_done(&mut self, r: &RepRecord) {
            self.told.push(*r);
        }
        fn paired(&self) -> bool {
            self.paired
        }
    }

    #[test]
    fn xts_and_gcm_rows_take_turns_one_signalled_repetition_each() {
        let mut scratch =
            vec![0u8; crate::workloads::scratch_bytes(&Selection::parse("xts,gcm").unwrap())];
        let sizes = Sizes {
            modes: &[512, 4096],
            ..SIZES
        };
        for (reps, paired, samples) in [(4, true, 4), (4, false, 3), (1, true, 1)] {
            let mut report = Report::new();
            let mut hook = Turns {
                reps,
                paired,
                told: Vec::new(),
            };
            let sel = Selection::parse("xts,gcm,quick").unwrap();
            let feat = CpuFeatures::detect();
            let on = Target {
                feat: &feat,
                tsc_khz: 100,
                scratch: &mut scratch,
                report: &mut report,
            };
            assert!(run_with_hook(&sel, &sizes, on, &mut hook));
            let rows = report.results();
            // Every row but the two portable ones goes round with the
            // others: the first sample of each, then the second ...
            let timed: Vec<u32> = hook.told.iter().map(|r| r.key).collect();
            let mut keys: Vec<u32> = Vec::new();
            for &k in &timed {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            assert_eq!(keys.len(), rows.len(), "{rows:?}");
            for (i, &k) in keys.iter().enumerate() {
                let mine: Vec<&RepRecord> = hook.told.iter().filter(|r| r.key == k).collect();
                // The portable row: its repetitions back to back.
                let soft = field_str(&rows[i].variant) == "soft";
                assert_eq!(
                    mine.len(),
                    if soft { reps as usize } else { samples },
                    "{k:#x}"
                );
                for (rep, r) in mine.iter().enumerate() {
                    assert_eq!(r.rep, rep as u32);
                }
                let key = RowKey::decode(k).unwrap();
                let row = &rows[i];
                assert_eq!(field_str(&row.name), key.kind.name());
                assert_eq!(
                    crate::workloads::mode_row_variant(key)
                        .as_ref()
                        .map(|r| r.as_str()),
                    Some(field_str(&row.variant)),
                    "{key:?}"
                );
                assert_eq!(row.size, u64::from(key.size));
                assert_eq!(row.check, 1);
                // Round the rows of one mode (its portable row is timed
                // alone, after them): this row's first sample comes
                // before the second of the row timed before it.
                let turn = |k, s| timed.iter().enumerate().filter(|(_, &t)| t == k).nth(s);
                let before = keys.get(i.wrapping_sub(1)).copied();
                let same_mode = before
                    .and_then(RowKey::decode)
                    .is_some_and(|b| b.kind.name() == key.kind.name());
                if let (Some(b), true, true, false) = (before, same_mode, samples > 1, soft) {
                    assert!(turn(k, 0).unwrap().0 < turn(b, 1).unwrap().0, "{key:?}");
                }
                // The native entry point times exactly this row.
                let mut alone = Report::new();
                let out = run_row(key, true, 100, &mut scratch, &mut alone, &mut |_| {});
                assert_eq!((out.ran, out.check), (1, 1), "{key:?}");
                let got = alone.results();
                assert_eq!(got.len(), 1, "{key:?}");
                assert_eq!(
                    (
                        field_str(&got[0].name),
                        field_str(&got[0].variant),
                        got[0].size
                    ),
                    (field_str(&row.name), field_str(&row.variant), row.size)
                );
            }
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
        let out = run_row(key, true, 100, &mut scratch, &mut report, &mut |_| {});
        assert_eq!(out.ran, 0);
        assert!(report.results().is_empty());
        // Too little scratch: a skip record, nothing timed.
        let key = RowKey { variant: 0, ..key };
        let out = run_row(key, true, 100, &mut scratch[..64], &mut report, &mut |_| {});
        assert_eq!(out.ran, 0);
        assert!(!report.skipped().is_empty());
    }

    /// What a run with a snapshot point did, in order: `Rep(key)` for each
    /// repetition told, `Point` where the run stopped.
    #[derive(Debug, PartialEq)]
    enum Heard {
        Rep(u32),
        Point(SnapshotPhase),
    }

    struct Stops(SnapshotPhase, Vec<Heard>);
    impl RepHook for Stops {
        fn reps(&self) -> u32 {
            2
        }
        fn rep_done(&mut self, r: &RepRecord) {
            self.1.push(Heard::Rep(r.key));
        }
        fn snapshot_phase(&self) -> Option<SnapshotPhase> {
            Some(self.0)
        }
        fn snapshot_point(&mut self, phase: SnapshotPhase) {
            self.1.push(Heard::Point(phase));
        }
    }

    /// `snapshot=mid` stops once, right before the first repetition of the
    /// first row at the largest size, never inside a row; `end` after
    /// every row; the results are those of a run without a point.
    #[test]
    fn the_snapshot_point_comes_between_rows_once() {
        let sizes = Sizes {
            gemm: &[24, 40],
            ..SIZES
        };
        let sel = Selection::parse("gemm").unwrap();
        let mut scratch = vec![0u8; 1 << 21];
        for phase in SnapshotPhase::ALL {
            let mut report = Report::new();
            let mut hook = Stops(phase, Vec::new());
            let on = Target {
                feat: &CpuFeatures::detect(),
                tsc_khz: 100,
                scratch: &mut scratch,
                report: &mut report,
            };
            assert!(run_with_hook(&sel, &sizes, on, &mut hook));
            let heard = &hook.1;
            let at: Vec<usize> = (0..heard.len())
                .filter(|&i| heard[i] == Heard::Point(phase))
                .collect();
            assert_eq!(at.len(), 1, "{phase:?}: {heard:?}");
            let at = at[0];
            // Two repetitions per row: the point is never between them.
            assert_eq!(at % 2, 0, "{phase:?}: {heard:?}");
            let next = heard.get(at + 1);
            let size_of = |h: Option<&Heard>| match h {
                Some(Heard::Rep(k)) => RowKey::decode(*k).map(|k| k.size),
                _ => None,
            };
            match phase {
                SnapshotPhase::Start => assert_eq!(at, 0),
                SnapshotPhase::Mid => {
                    assert_eq!(size_of(next), Some(40), "{heard:?}");
                    assert!(heard[..at].iter().all(|h| size_of(Some(h)) == Some(24)));
                }
                SnapshotPhase::End => assert_eq!(at, heard.len() - 1),
            }
            assert_eq!(report.results().len() * 2, heard.len() - 1);
        }
    }
}
