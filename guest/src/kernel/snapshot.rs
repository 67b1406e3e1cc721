//! The snapshot point (`snapshot=PHASE`, [`guest::protocol::snapshot`]):
//! ask the VMM for a snapshot, and where the VMM does not take it itself,
//! wait on COM1 until a harness has paused, snapshotted and restored it.

use core::fmt::Write;

use super::cpu::rdtsc;
use super::serial::{read_byte, Console};
use super::syscall::{inl, outl};
use guest::protocol::snapshot::{
    point_request, wait_cycles, NOT_RELEASED, POINT_LINE, RELEASED, WAITING, WAIT_MAX_S,
};
use guest::protocol::{SnapshotPhase, SNAPSHOT_PORT, SNAPSHOT_SYNC};

/// TSC cycles between two polls of COM1: each poll is a VM exit, so the
/// loop does not keep the VMM's device thread busy.
const POLL_CYCLES: u64 = 100_000;

/// The run is at its snapshot point for `phase`. A VMM that acts on
/// [`SNAPSHOT_PORT`] has taken its snapshot (or declined) by the time the
/// `out` returns, and says so: the guest goes on. Under any other VMM the
/// guest prints its waiting line and polls COM1 until a byte arrives or
/// [`WAIT_MAX_S`] pass on its TSC (`tsc_khz`, 0 when unknown), then says
/// which.
pub fn reach(phase: SnapshotPhase, tsc_khz: u64) {
    outl(SNAPSHOT_PORT, point_request(phase));
    if inl(SNAPSHOT_PORT) == SNAPSHOT_SYNC {
        return;
    }
    let name = phase.name();
    let mut out = Console::new();
    let _ = writeln!(out, "{POINT_LINE}{name}{WAITING} (at most {WAIT_MAX_S} s)");
    out.flush();
    let released = wait_for_byte(wait_cycles(tsc_khz));
    if released {
        let _ = writeln!(out, "{POINT_LINE}{name}{RELEASED}");
    } else {
        let _ = writeln!(
            out,
            "{POINT_LINE}{name}{NOT_RELEASED} {WAIT_MAX_S} s, going on"
        );
    }
    out.flush();
}

/// Poll COM1 until a byte arrives (read, true) or `cycles` of the TSC
/// pass (false). Each step between two polls counts at most a second
/// (`cycles / WAIT_MAX_S`): a pause, a snapshot and a restore fall between
/// two polls, and a TSC that jumped across them (or back) neither ends the
/// wait nor stretches it.
fn wait_for_byte(cycles: u64) -> bool {
    let max_step = (cycles / WAIT_MAX_S).max(1);
    let mut waited = 0u64;
    let mut prev = rdtsc();
    loop {
        if read_byte().is_some() {
            return true;
        }
        let now = rdtsc();
        waited = waited.saturating_add(now.wrapping_sub(prev).min(max_step));
        prev = now;
        if waited >= cycles {
            return false;
        }
        while rdtsc().wrapping_sub(now) < POLL_CYCLES {
            core::hint::spin_loop();
        }
    }
}
