//! What a run produced and how it ended: the results [`super::run`] and
//! restore hand to the report.

use std::path::PathBuf;
use std::time::Duration;

use guest::protocol::Report;

use super::dump::RegisterDump;
use crate::cpuid::Policy;
use crate::xstate_manager::{SyncPolicy, SyncStats};

/// How the run ended.
#[derive(Clone, Debug)]
pub enum RunEnd {
    /// The guest wrote this to the debug-exit port.
    Exited(u32),
    /// The guest crashed or KVM refused to go on.
    Crashed {
        /// What happened, in a sentence.
        reason: String,
        /// The vCPU's registers afterwards.
        dump: Box<RegisterDump>,
    },
    /// The run exceeded its time limit.
    TimedOut(Duration),
    /// The VMM wrote a snapshot to this file and stopped the guest.
    Snapshotted(PathBuf),
}

impl RunEnd {
    /// What went wrong, in a sentence; `None` for a clean exit (status 0).
    pub fn failure(&self) -> Option<String> {
        match self {
            RunEnd::Exited(0) => None,
            RunEnd::Exited(s) => Some(format!("the guest exited with status {s}")),
            RunEnd::Crashed { reason, .. } => Some(format!("the guest crashed: {reason}")),
            RunEnd::TimedOut(d) => Some(format!(
                "the guest was stopped after {:.1} s",
                d.as_secs_f64()
            )),
            RunEnd::Snapshotted(p) => Some(format!("the guest was snapshotted to {}", p.display())),
        }
    }
}

/// Exit counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExitCounts {
    /// Exits handled (interruptions by the supervisor's signal excepted).
    pub total: u64,
    /// Port I/O exits.
    pub io: u64,
    /// MMIO exits.
    pub mmio: u64,
}

/// Everything a run produced.
pub struct RunOutcome {
    /// The xstate policy the guest ran with.
    pub policy: Policy,
    /// How the run ended.
    pub end: RunEnd,
    /// The last report the guest handed over, if it was valid.
    pub report: Option<Box<Report>>,
    /// Why a report the guest handed over was refused.
    pub report_errors: Vec<String>,
    /// Everything the guest wrote to COM1 (before a restore included).
    pub serial: Vec<u8>,
    /// Exits by kind.
    pub exits: ExitCounts,
    /// Port accesses nothing decodes.
    pub unhandled_ports: u64,
    /// XCR0 as KVM holds it at the end of the run.
    pub final_xcr0: Option<u64>,
    /// The guest's TSC rate (`KVM_GET_TSC_KHZ`), 0 when unknown.
    pub tsc_khz: u64,
    /// Benchmark markers the guest wrote, with when (since the run began).
    pub marks: Vec<(u32, Duration)>,
    /// What the xstate manager did.
    pub xstate_sync: SyncPolicy,
    /// Fetches, write-backs and bytes moved.
    pub xstate_stats: SyncStats,
    /// From the start of the run (or restore) to the first `KVM_RUN`.
    pub setup_time: Duration,
    /// Wall time of the vCPU loop.
    pub run_time: Duration,
    /// From the start of the run (or restore) to the first exit to user
    /// space: an upper bound of the time to the guest's first instruction.
    pub first_exit: Option<Duration>,
    /// How long writing the snapshot took (completing I/O, reading the
    /// vCPU and RAM, encoding, writing the file), when one was taken.
    pub snapshot_time: Option<Duration>,
    /// Snapshots that could not be written, each naming the file and the
    /// cause; the guest was resumed after each (at most 16 kept).
    pub snapshot_errors: Vec<String>,
}
