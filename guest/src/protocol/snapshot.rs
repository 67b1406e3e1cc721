//! Snapshot points: `snapshot=PHASE` on the command line makes the guest
//! stop at a fixed phase of its workloads and name it, so that every VMM
//! snapshots the same point of the same work, whatever the machine's
//! speed (a time after boot lands elsewhere on every host and every run).
//!
//! At the point the guest writes the phase to
//! [`SNAPSHOT_PORT`](super::SNAPSHOT_PORT) and then reads the same port:
//!
//! | port | width | direction | meaning |
//! |------|-------|-----------|---------|
//! | 0xe4 | 32 | out | the snapshot request, its value [`point_request`] of the phase: a VMM with a snapshot file saves the VM in this exit (`vmm`, which records the point: a snapshot there spans no timed row); others ignore it |
//! | 0xe4 | 32 | in  | [`SNAPSHOT_SYNC`] from a VMM that acts on the request itself (`vmm`, with or without a snapshot file): the guest goes on at once. Anything else (all-ones, or the stale value of an undecoded port): the guest waits to be released |
//!
//! Waiting is for VMMs that know nothing of our ports (Cloud Hypervisor,
//! Firecracker), which a harness pauses through their own API. The guest
//! prints one line, `guest: snapshot point PHASE: waiting for a byte on
//! COM1 (at most 60 s)` ([`WAITING`]), then polls COM1's line status
//! register until a byte arrives on its serial input, which it reads; the
//! harness pauses the VMM once the line is on the console, so the pause
//! lands in that loop, at the same point every time. The restored guest is
//! still in the loop; the harness sends it one byte, and the guest prints
//! `guest: snapshot point PHASE: released` ([`RELEASED`]) and goes on. No
//! byte within [`WAIT_MAX_S`] seconds: it prints `... : not released within
//! 60 s, going on` ([`NOT_RELEASED`]) and goes on, so a guest run by hand
//! under such a VMM is never stuck.
//!
//! The point is always between two rows, never inside a timed one: the
//! snapshot, the wait and the restore are in no result's cycles.

/// Phases `snapshot=` accepts, in [`SnapshotPhase`] order.
pub const SNAPSHOT_PHASES: &[&str] = &["start", "mid", "end"];

/// Where the guest stops for a snapshot (`snapshot=PHASE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum SnapshotPhase {
    /// Before the first row is timed: the workloads' buffers set up, the
    /// first row's inputs ready.
    Start = 1,
    /// Before the first row timed at the largest size of the run's last
    /// workload (its inputs ready): the run's biggest working set is live
    /// and that workload's largest rows are still to run. With `gemm`:
    /// DGEMM n = 1024 of the first variant the CPU runs, its ~27 MB of
    /// matrices filled and the first product checked.
    Mid = 2,
    /// After the last workload, before `bench=` and the report.
    End = 3,
}

impl SnapshotPhase {
    /// Every phase, in [`SNAPSHOT_PHASES`] order.
    pub const ALL: [SnapshotPhase; 3] = [Self::Start, Self::Mid, Self::End];

    /// The phase `name` names, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Its word on the command line.
    pub fn name(self) -> &'static str {
        SNAPSHOT_PHASES[self as usize - 1]
    }
}

/// The upper 24 bits of a snapshot request made at a point ("PNT"): any
/// other value written to the port is a plain request (`bench=snapshot-check`
/// writes whatever its register holds).
pub const POINT_REQUEST_TAG: u32 = 0x504e_5400;

/// The value the guest writes to the snapshot port at `phase`'s point.
pub const fn point_request(phase: SnapshotPhase) -> u32 {
    POINT_REQUEST_TAG | phase as u32
}

/// The point a snapshot-port write names, if it is a point's request.
pub fn point_of(value: u32) -> Option<SnapshotPhase> {
    SnapshotPhase::ALL
        .into_iter()
        .find(|&p| point_request(p) == value)
}

/// What an `in` from [`SNAPSHOT_PORT`](super::SNAPSHOT_PORT) answers from
/// a VMM that acts on the snapshot request itself ("SYNC" in ASCII,
/// little-endian): never a value the guest writes there, so the stale data
/// of a port nothing decodes cannot pass for it.
pub const SNAPSHOT_SYNC: u32 = u32::from_le_bytes(*b"SYNC");

/// Every snapshot-point line starts so; then the phase's name.
pub const POINT_LINE: &str = "guest: snapshot point ";
/// After [`POINT_LINE`] and the phase: the guest waits to be released.
pub const WAITING: &str = ": waiting for a byte on COM1";
/// After [`POINT_LINE`] and the phase: a byte arrived, the guest goes on.
pub const RELEASED: &str = ": released";
/// After [`POINT_LINE`] and the phase: no byte came, the guest went on.
pub const NOT_RELEASED: &str = ": not released within";
/// The longest the guest waits at a point, in seconds of its TSC.
pub const WAIT_MAX_S: u64 = 60;
/// The TSC frequency the wait assumes when the guest does not know its own
/// (Firecracker gives no frequency leaf), kHz: high, so the wait lasts at
/// least [`WAIT_MAX_S`] on any slower TSC.
pub const WAIT_ASSUMED_TSC_KHZ: u64 = 5_000_000;

/// TSC cycles of the longest wait at a TSC of `tsc_khz` (0: unknown).
pub fn wait_cycles(tsc_khz: u64) -> u64 {
    let khz = if tsc_khz == 0 {
        WAIT_ASSUMED_TSC_KHZ
    } else {
        tsc_khz
    };
    khz.saturating_mul(1000).saturating_mul(WAIT_MAX_S)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::SNAPSHOT_PORT;

    #[test]
    fn phases_round_trip_through_their_names() {
        for (i, name) in SNAPSHOT_PHASES.iter().enumerate() {
            let p = SnapshotPhase::parse(name).unwrap();
            assert_eq!(p.name(), *name);
            assert_eq!(p as usize, i + 1);
            assert_eq!(SnapshotPhase::ALL[i], p);
        }
        for bad in ["", "Mid", "middle", "mid ", "2"] {
            assert_eq!(SnapshotPhase::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_sync_answer_is_no_value_the_guest_writes_or_an_open_bus_reads() {
        for p in SnapshotPhase::ALL {
            assert_ne!(SNAPSHOT_SYNC, p as u32);
            assert_ne!(SNAPSHOT_SYNC, point_request(p));
        }
        assert_ne!(SNAPSHOT_SYNC, u32::MAX);
        assert_ne!(SNAPSHOT_SYNC, 0);
        assert_eq!(SNAPSHOT_PORT, 0xe4);
    }

    #[test]
    fn point_requests_name_their_phase_and_nothing_else_does() {
        for p in SnapshotPhase::ALL {
            assert_eq!(point_of(point_request(p)), Some(p));
        }
        assert_eq!(point_request(SnapshotPhase::Mid), 0x504e_5402);
        for other in [0, 1, 2, 3, 0x504e_5400, 0x504e_5404, u32::MAX, 0x1122_3344] {
            assert_eq!(point_of(other), None, "{other:#x}");
        }
    }

    #[test]
    fn the_wait_is_bounded_in_cycles_of_the_known_or_a_high_tsc() {
        assert_eq!(wait_cycles(2_000_000), 2_000_000_000 * WAIT_MAX_S);
        assert_eq!(wait_cycles(0), 5_000_000_000 * WAIT_MAX_S);
        assert_eq!(wait_cycles(u64::MAX), u64::MAX);
    }
}
