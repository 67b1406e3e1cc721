//! Where a run stops for its snapshot (`snapshot=PHASE`,
//! [`crate::protocol::snapshot`]): which row's timing the point comes
//! before, found from the selection and the sizes alone, so the same
//! command line stops at the same work under every VMM.

use super::sizes::Sizes;
use crate::protocol::{RowKey, RowKind, SnapshotPhase};
use crate::workloads::selection::Selection;

/// The row a phase stops before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Target {
    /// The first row timed.
    FirstRow,
    /// The first row of `kind` timed at `size`.
    Row {
        /// Its kind.
        kind: RowKind,
        /// Its size (bytes, or the matrix order).
        size: usize,
    },
    /// No row: after the last workload.
    AfterRows,
}

/// The snapshot point of one run: where it is, and whether it was reached.
#[derive(Clone, Copy, Debug)]
pub(super) struct Point {
    phase: SnapshotPhase,
    target: Target,
    reached: bool,
}

impl Point {
    /// The point of `phase` in a run of `sel` at `sizes`.
    pub(super) fn new(phase: SnapshotPhase, sel: &Selection, sizes: &Sizes<'_>) -> Self {
        let target = match phase {
            SnapshotPhase::Start => Target::FirstRow,
            SnapshotPhase::Mid => largest_of_last(sel, sizes).unwrap_or(Target::AfterRows),
            SnapshotPhase::End => Target::AfterRows,
        };
        Point {
            phase,
            target,
            reached: false,
        }
    }

    /// Row `key` is about to be timed: the phase, once, when the point is
    /// before it.
    pub(super) fn before_row(&mut self, key: RowKey) -> Option<SnapshotPhase> {
        let here = match self.target {
            Target::FirstRow => true,
            Target::Row { kind, size } => key.kind == kind && key.size as usize == size,
            Target::AfterRows => false,
        };
        self.reach(here)
    }

    /// The last workload is done: the phase, when the point was not
    /// reached before (its phase is `end`, or its row never ran: no
    /// variant at that size, or no row timed at all).
    pub(super) fn after_rows(&mut self) -> Option<SnapshotPhase> {
        self.reach(true)
    }

    fn reach(&mut self, here: bool) -> Option<SnapshotPhase> {
        if here && !self.reached {
            self.reached = true;
            Some(self.phase)
        } else {
            None
        }
    }

    /// Where the point is.
    #[cfg(test)]
    pub(super) fn target(&self) -> Target {
        self.target
    }
}

/// `mid`: the largest size of the last workload the run times, as the
/// suites run (AES CBC then CTR, XTS, GCM, DGEMM, Linpack); `None` when
/// it times none of them (`workload=amx` alone).
fn largest_of_last(sel: &Selection, sizes: &Sizes<'_>) -> Option<Target> {
    let ctr_or_cbc = if sizes.ctr.is_empty() {
        (RowKind::AesCbc, sizes.cbc)
    } else {
        (RowKind::AesCtr, sizes.ctr)
    };
    [
        (sel.aes, ctr_or_cbc),
        (sel.xts, (RowKind::Xts, sizes.modes)),
        (sel.gcm, (RowKind::Gcm, sizes.modes)),
        (sel.gemm, (RowKind::Dgemm, sizes.gemm)),
        (sel.linpack, (RowKind::Linpack, sizes.linpack)),
    ]
    .into_iter()
    .rev()
    .filter(|(on, _)| *on)
    .find_map(|(_, (kind, sizes))| {
        sizes
            .iter()
            .copied()
            .max()
            .map(|size| Target::Row { kind, size })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(list: &str) -> Selection {
        Selection::parse(list).unwrap()
    }

    fn key(kind: RowKind, size: usize) -> RowKey {
        RowKey {
            kind,
            variant: 0,
            size: size as u32,
        }
    }

    #[test]
    fn mid_is_the_largest_size_of_the_last_workload() {
        let mid = |list: &str| {
            let s = sel(list);
            Point::new(SnapshotPhase::Mid, &s, &Sizes::for_selection(&s)).target()
        };
        let row = |kind, size| Target::Row { kind, size };
        assert_eq!(mid("gemm"), row(RowKind::Dgemm, 1024));
        assert_eq!(mid("aes"), row(RowKind::AesCtr, 8192));
        assert_eq!(mid("all"), row(RowKind::Linpack, 1000));
        assert_eq!(mid("quick"), row(RowKind::Linpack, 512));
        assert_eq!(mid("gemm,xts"), row(RowKind::Dgemm, 1024));
        assert_eq!(mid("xts"), row(RowKind::Xts, 65536));
        assert_eq!(mid("amx"), Target::AfterRows);
        assert_eq!(mid("none"), Target::AfterRows);
        let s = sel("aes");
        let cbc_only = Sizes {
            ctr: &[],
            ..Sizes::for_selection(&s)
        };
        assert_eq!(
            Point::new(SnapshotPhase::Mid, &s, &cbc_only).target(),
            row(RowKind::AesCbc, 8192)
        );
    }

    /// Reached once, before its row only; smaller rows and other kinds
    /// pass by, and a point whose row never ran is taken after the rows.
    #[test]
    fn a_point_is_reached_once_before_its_row() {
        let s = sel("gemm");
        let sizes = Sizes::for_selection(&s);
        let mut p = Point::new(SnapshotPhase::Mid, &s, &sizes);
        assert_eq!(p.before_row(key(RowKind::Dgemm, 512)), None);
        assert_eq!(p.before_row(key(RowKind::Linpack, 1024)), None);
        assert_eq!(
            p.before_row(key(RowKind::Dgemm, 1024)),
            Some(SnapshotPhase::Mid)
        );
        assert_eq!(p.before_row(key(RowKind::Dgemm, 1024)), None);
        assert_eq!(p.after_rows(), None);

        let mut never = Point::new(SnapshotPhase::Mid, &s, &sizes);
        assert_eq!(never.before_row(key(RowKind::Dgemm, 128)), None);
        assert_eq!(never.after_rows(), Some(SnapshotPhase::Mid));

        let mut start = Point::new(SnapshotPhase::Start, &s, &sizes);
        assert_eq!(
            start.before_row(key(RowKind::Dgemm, 128)),
            Some(SnapshotPhase::Start)
        );
        assert_eq!(start.before_row(key(RowKind::Dgemm, 256)), None);

        let mut end = Point::new(SnapshotPhase::End, &s, &sizes);
        assert_eq!(end.before_row(key(RowKind::Dgemm, 1024)), None);
        assert_eq!(end.after_rows(), Some(SnapshotPhase::End));
    }
}
