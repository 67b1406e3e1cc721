//! The result row a restored run must not trust: the one whose timed region
//! spans the snapshot it resumed from.

use guest::protocol::Report;

use super::summary::ResultRow;

/// What a restore knows about the snapshot it resumed, to find the row
/// whose timing spans it ([`mark_rows_spanning_snapshot`]).
pub struct SnapshotGap<'a> {
    /// Whether some bytes lie in the snapshot's guest memory, at an
    /// 8-byte aligned address (where the guest keeps its records).
    pub in_memory: &'a dyn Fn(&[u8]) -> bool,
    /// When the snapshot was written (Unix seconds, truncated).
    pub created_unix_s: u64,
    /// When the restore began (Unix time, seconds).
    pub restore_started_unix_s: f64,
}

/// Marks the row whose timed region spans the snapshot a restored run
/// resumed from: its TSC cycles include the time the VM was stopped (on
/// kvm_pvm the guest's TSC follows the host's), so its throughput would be
/// fiction (a few MB/s with `check: pass`).
///
/// Rows whose exact records are already in the snapshot's memory were
/// complete before it; the vCPU runs rows one after another, so at most one
/// row, the first one missing from the snapshot, can have been running when
/// it was taken. It is marked invalid (no throughput, no ratio) unless its
/// cycles are shorter than the gap between snapshot and restore, which is at
/// least `restore start - (created_unix_s + 1 s)` (the timestamp is
/// truncated to seconds): a region that includes the gap lasts longer than
/// it. Returns the index of the marked row.
pub fn mark_rows_spanning_snapshot(
    rows: &mut [ResultRow],
    report: &Report,
    gap: &SnapshotGap<'_>,
    tsc_khz: u64,
) -> Option<usize> {
    use zerocopy::IntoBytes;
    let in_snapshot = |rec: &[u8]| (gap.in_memory)(rec);
    let first_after = report
        .results()
        .iter()
        .position(|r| !in_snapshot(r.as_bytes()))?;
    let row = rows.get_mut(first_after)?;
    let min_gap_s = (gap.restore_started_unix_s - (gap.created_unix_s as f64 + 1.0)).max(0.0);
    let min_gap_cycles = min_gap_s * tsc_khz as f64 * 1e3;
    if (row.cycles as f64) < min_gap_cycles {
        return None;
    }
    row.mb_per_s = None;
    row.gflops = None;
    row.events_per_s = None;
    row.native_ratio = None;
    row.native_spread = None;
    row.ns_per_block = None;
    row.invalid = Some(
        "spans a snapshot: timed across snapshot and restore, so its cycles include \
         the time the VM was stopped"
            .to_string(),
    );
    Some(first_after)
}
