//! What a run produced and how it ended: the results [`super::run`] and
//! restore hand to the report.

use std::path::PathBuf;
use std::time::Duration;

use guest::protocol::{Report, GUEST_STATUS_MAX};
use xstate::XfeatureMask;

use crate::cpuid::Policy;
use crate::devices::NativeSide;
use crate::vstate::dump::RegisterDump;
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
    /// The guest broke the protocol: a debug-exit status outside the guest
    /// range (`guest::protocol::GUEST_STATUS_MAX`), an XCR0 outside the
    /// xstate policy. The sentence names the fault.
    ProtocolViolation(String),
    /// A restored guest was stopped because a page of its snapshot failed
    /// its checksum or could no longer be read
    /// (`crate::snapshot::pager::PageError`): the VMM's loss, not the
    /// guest's doing. The sentence names the page and the section.
    SnapshotMemory(String),
    /// The guest reset the machine (the i8042's reset command: how Linux
    /// reboots a PC without ACPI, and what `panic=N` ends in).
    Reset,
    /// A Linux guest's account of its xstate differs from vmm's layout
    /// for the policy (see `super::linux_xstate`); the sentence names
    /// the fields.
    XstateMismatch(String),
}

impl RunEnd {
    /// The end a debug-exit write of `status` means: the guest's own
    /// status when in `0..=GUEST_STATUS_MAX`, a protocol violation otherwise
    /// (so a guest cannot pass off as a VMM error, crash or timeout).
    pub fn guest_exit(status: u32) -> RunEnd {
        if status <= GUEST_STATUS_MAX {
            RunEnd::Exited(status)
        } else {
            RunEnd::ProtocolViolation(format!(
                "guest wrote out-of-range status {status} to the debug-exit port \
                 (guest statuses are 0..={GUEST_STATUS_MAX})"
            ))
        }
    }

    /// What went wrong, in a sentence; `None` for a clean exit (status 0).
    pub fn failure(&self) -> Option<String> {
        match self {
            RunEnd::Exited(0) => None,
            RunEnd::Exited(s) => Some(format!("the guest exited with status {s}")),
            RunEnd::Crashed { reason, .. } => Some(format!("the guest crashed: {reason}")),
            RunEnd::TimedOut(d) => {
                Some(format!("the guest was stopped after {} s", d.as_secs_f64()))
            }
            RunEnd::Snapshotted(p) => Some(format!("the guest was snapshotted to {}", p.display())),
            RunEnd::ProtocolViolation(why) => Some(format!("the guest broke the protocol: {why}")),
            RunEnd::SnapshotMemory(why) => Some(format!(
                "the restored guest was stopped: its snapshot's memory failed: {why}"
            )),
            RunEnd::Reset => Some("the guest reset the machine".into()),
            RunEnd::XstateMismatch(why) => {
                Some(format!("Linux's xstate differs from vmm's layout: {why}"))
            }
        }
    }
}

/// The violation when the guest's XCR0 (as KVM holds it) enables state
/// outside the xstate `policy`: a sentence naming the components outside.
pub fn xcr0_violation(xcr0: u64, policy: XfeatureMask) -> Option<String> {
    let xcr0 = XfeatureMask::from_bits(xcr0);
    let outside = xcr0 - policy;
    (!outside.is_empty()).then(|| {
        format!(
            "the guest's XCR0 {xcr0:#x} ({xcr0}) enables {outside:#x} ({outside}), \
             outside the xstate policy {policy:#x} ({policy})"
        )
    })
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

impl ExitCounts {
    /// Add another vCPU's counts.
    pub fn add(&mut self, other: &ExitCounts) {
        self.total += other.total;
        self.io += other.io;
        self.mmio += other.mmio;
    }
}

/// What one vCPU of an SMP run produced (`--vcpus` above 1).
pub struct VcpuOutcome {
    /// The vCPU's index (0 is the boot processor).
    pub index: u32,
    /// How this vCPU's loop ended: `None` when another vCPU ended the run
    /// and this one was stopped.
    pub end: Option<RunEnd>,
    /// The last valid report this vCPU handed over (its own port writes).
    pub report: Option<Box<Report>>,
    /// Why reports it handed over were refused.
    pub report_errors: Vec<String>,
    /// Its exits.
    pub exits: ExitCounts,
    /// What its own xstate manager did.
    pub xstate_stats: SyncStats,
    /// Its XCR0 as KVM holds it at the end.
    pub final_xcr0: Option<u64>,
    /// Port accesses nothing decoded on this vCPU.
    pub unhandled_ports: u64,
    /// When its thread started, first exited and left its loop (the run's
    /// last stretch after a snapshot that could not be written).
    pub phases: crate::vstate::smp::VcpuPhases,
    /// Its registers when `--timeout` stopped the guest (`None` for any
    /// other end): in an SMP guest that hangs, where each CPU was, not
    /// only the boot CPU.
    pub stopped_at: Option<Box<RegisterDump>>,
}

/// Everything a run produced.
pub struct RunOutcome {
    /// The xstate policy the guest ran with.
    pub policy: Policy,
    /// How the run ended.
    pub end: RunEnd,
    /// The last valid report the guest handed over.
    pub report: Option<Box<Report>>,
    /// Valid reports a later one replaced (only the last is kept).
    pub reports_dropped: u64,
    /// Why reports the guest handed over were refused: the first
    /// [`MAX_REPORT_ERRORS`](crate::devices::MAX_REPORT_ERRORS).
    pub report_errors: Vec<String>,
    /// Refused reports beyond those in `report_errors`.
    pub report_errors_dropped: u64,
    /// Guest requests the VMM refused (answered to the guest, the run went
    /// on): the first `MAX_REFUSED_REQUESTS` reasons.
    pub refused_requests: Vec<String>,
    /// How many requests were refused in all.
    pub requests_refused: u64,
    /// The last [`SERIAL_CAPTURE_MAX`](crate::devices::SERIAL_CAPTURE_MAX)
    /// bytes the guest wrote to COM1 (before a restore included).
    pub serial: Vec<u8>,
    /// Bytes of COM1 output not in `serial` (older than its tail).
    pub serial_bytes_dropped: u64,
    /// Exits by kind.
    pub exits: ExitCounts,
    /// Port accesses nothing decodes.
    pub unhandled_ports: u64,
    /// XCR0 as KVM holds it at the end of the run.
    pub final_xcr0: Option<u64>,
    /// The guest's TSC rate (`KVM_GET_TSC_KHZ`), 0 when unknown.
    pub tsc_khz: u64,
    /// Benchmark markers the guest wrote, with when (since the run began):
    /// the first [`MAX_MARKS`](crate::devices::MAX_MARKS).
    pub marks: Vec<(u32, Duration)>,
    /// Markers beyond those in `marks`.
    pub marks_dropped: u64,
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
    /// From the start of the run to the guest's first instruction, as the
    /// guest's TSC there says (direct 64-bit entry only; `None` after the
    /// PVH entry, a restore, or when KVM would not give the TSC).
    pub first_instruction: Option<Duration>,
    /// The entry the guest was started at (`pvh`, `direct64`); `None`
    /// after a restore.
    pub boot_entry: Option<&'static str>,
    /// The start of the run as a `CLOCK_MONOTONIC` reading (ns), to place
    /// the run on another process's clock.
    pub start_clock_monotonic_ns: u64,
    /// How long writing the snapshot took (completing I/O, reading the
    /// vCPU and RAM, encoding, writing the file), when one was taken.
    pub snapshot_time: Option<Duration>,
    /// Snapshots that could not be written, each naming the file and the
    /// cause; the guest was resumed after each (at most 16 kept).
    pub snapshot_errors: Vec<String>,
    /// Per vCPU, with more than one (empty with one: the fields above are
    /// that vCPU's). The fields above are then the totals (exits, xstate
    /// statistics), the boot processor's (report, final XCR0, serial), or
    /// those of the vCPU that ended the run (`end`, and `report` when
    /// that vCPU handed one over).
    pub vcpus: Vec<VcpuOutcome>,
    /// The vCPU whose end is `end` (0 with one vCPU).
    pub ended_by: u32,
    /// How the APs were started (`None` with one vCPU).
    pub ap_start: Option<crate::vstate::smp::ApStart>,
    /// The VM's interrupt hardware.
    pub irqchip: crate::vstate::smp::Irqchip,
    /// A Linux guest's account of its xstate, compared with vmm's (the
    /// PC platform only; null when the console held no `x86/fpu:` line).
    pub linux_xstate: Option<super::linux_xstate::LinuxXstate>,
    /// The interleaved native repetitions, when they were asked for.
    pub native: Option<Box<dyn NativeSide>>,
    /// What `--hugepages` did, when asked for.
    pub hugepages: Option<HugePages>,
    /// The boot vCPU's registers when `--timeout` stopped the guest: where
    /// a guest that never exits was (`None` for any other end).
    pub stopped_at: Option<Box<RegisterDump>>,
}

/// What `--hugepages` did to guest RAM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugePages {
    /// What was asked for.
    pub backing: crate::vstate::RamBacking,
    /// `Err`: why `madvise(MADV_HUGEPAGE)` failed (THP only).
    pub advised: std::result::Result<(), String>,
    /// Guest RAM in KiB.
    pub ram_kib: u64,
    /// `AnonHugePages` of the RAM mapping at the end of the run, KiB (None
    /// when `/proc/self/smaps` could not be read).
    pub anon_huge_kib: Option<u64>,
    /// hugetlbfs: KiB of the RAM mapping in hugetlb pages at the end of
    /// the run (`Private_Hugetlb`, the pages the guest touched); `None`
    /// with THP or when smaps could not be read.
    pub hugetlb_kib: Option<u64>,
    /// The native side's memory, backed like guest RAM (`None`: nothing
    /// ran natively).
    pub native: Option<NativeScratch>,
}

/// How the native rows' memory was backed under `--hugepages`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeScratch {
    /// What backed it (`None`: plain pages, which `--hugepages` never
    /// leaves it on).
    pub backing: Option<crate::vstate::RamBacking>,
    /// Why it differs from guest RAM's backing, if it does.
    pub fallback: Option<String>,
    /// Its size, KiB.
    pub kib: u64,
    /// KiB of it in huge pages at the end of the run (`None`: unknown).
    pub huge_kib: Option<u64>,
}

/// `end`, unless a page of the snapshot this guest was restored from
/// failed: that explains whatever the guest did after, and one the guest
/// never read still fails the restore (every page is checked, and is in by
/// now unless the run was very short).
pub(super) fn unless_a_page_failed(
    pages: Option<&crate::snapshot::pager::Pages>,
    end: RunEnd,
) -> RunEnd {
    match pages.and_then(|p| p.wait().err()) {
        Some(e) => RunEnd::SnapshotMemory(e.to_string()),
        None => end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_statuses_and_vmm_statuses_are_disjoint() {
        for s in [0, 1, 2, 3, 7, 63] {
            assert!(
                matches!(RunEnd::guest_exit(s), RunEnd::Exited(x) if x == s),
                "{s}"
            );
        }
        for s in [64, 65, 66, 67, 68, 200, u32::MAX] {
            match RunEnd::guest_exit(s) {
                RunEnd::ProtocolViolation(why) => assert!(
                    why.starts_with(&format!("guest wrote out-of-range status {s} ")),
                    "{why}"
                ),
                other => panic!("{s}: {other:?}"),
            }
        }
    }

    /// The timeout is said as given: `{:.1}` printed `--timeout 0.01` as
    /// "stopped after 0.0 s".
    #[test]
    fn a_timeout_is_said_as_given() {
        for (d, says) in [
            (Duration::from_millis(10), "after 0.01 s"),
            (Duration::from_micros(1), "after 0.000001 s"),
            (Duration::from_secs(600), "after 600 s"),
            (Duration::from_millis(2500), "after 2.5 s"),
        ] {
            let f = RunEnd::TimedOut(d).failure().unwrap();
            assert!(f.ends_with(says), "{f}");
        }
    }

    #[test]
    fn xcr0_outside_the_policy_is_named() {
        let policy = XfeatureMask::from_bits(0x3);
        assert_eq!(xcr0_violation(0x3, policy), None);
        assert_eq!(xcr0_violation(0x1, policy), None);
        assert_eq!(
            xcr0_violation(0xe7, policy).unwrap(),
            "the guest's XCR0 0xe7 (x87,sse,avx,opmask,zmm_hi256,hi16_zmm) enables 0xe4 \
             (avx,opmask,zmm_hi256,hi16_zmm), outside the xstate policy 0x3 (x87,sse)"
        );
    }
}
