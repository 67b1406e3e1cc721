//! Running a configured machine (booted by [`super::launch`], or filled by
//! restore) to its end under the supervisor: one vCPU on the embedded
//! guest's machine, or the SMP runner ([`super::smp_run`]) for several
//! vCPUs and for a PC, and collecting what the guest produced.

use std::time::Instant;

use xstate::XfeatureMask;

use super::outcome::{xcr0_violation, RunEnd, RunOutcome};
use super::prepared::{keep_last_serial, monotonic_ns, Launch};
use super::runner::VcpuRunner;
use crate::error::Result;
use crate::snapshot::save::SaveContext;
use crate::vstate::dump::RegisterDump;
use crate::vstate::halt::{self, Board, HaltWatch};
use crate::vstate::machine::Machine;
use crate::vstate::stop::{supervise, Deadlines};

/// Run a configured machine to the end and collect what it produced.
pub(crate) fn execute(l: Launch) -> Result<RunOutcome> {
    // A PC's one vCPU too: its full irqchip, PIT and KVM clock go into a
    // snapshot with it, and its COM1 is shared as with several.
    if !l.machine.aps.is_empty() || l.machine.irqchip == crate::vstate::smp::Irqchip::Full {
        super::smp_run::execute_smp(l)
    } else {
        execute_one(l)
    }
}

/// [`execute`] with one vCPU on the minimal platform (with a LAPIC for
/// the embedded guest, without an irqchip for other kernels): the run
/// loop on a thread of its own under the supervisor.
fn execute_one(l: Launch) -> Result<RunOutcome> {
    // The VM stays open until the run's results are read.
    let Machine {
        vm: _vm,
        vcpu,
        mem,
        irqchip,
        ..
    } = l.machine;
    let xstate_sync = l.xstate.policy();
    // Without a LAPIC a HLT leaves KVM_RUN and ends the run by itself.
    let watched = irqchip.has_lapics();
    let deadlines = Deadlines {
        timeout: l.timeout,
        // Only armed when a snapshot can be written.
        snapshot_after: l.snapshot_after.filter(|_| l.snapshot.is_some()),
        watch_every: watched.then_some(halt::WATCH_EVERY),
    };
    let run_start = Instant::now();
    let mut devices = l.devices;
    devices.snapshots = l.snapshot.is_some();
    let mut runner = VcpuRunner::new(vcpu, devices, l.xstate, &mem, (run_start, l.start), l.raw);
    // Its snapshots name the machine's interrupt hardware (a LAPIC or none).
    runner.snapshot = l.snapshot.map(|ctx| SaveContext { irqchip, ..ctx });
    runner.pages = l.pages.clone();
    runner.halt = watched.then(|| HaltWatch::new(&Board::new(1, None), 0));
    let supervised = supervise(deadlines, move |stop| {
        let mut runner = runner;
        let end = runner.run_loop(stop);
        (runner, end)
    })?;
    let (runner, exit) = supervised.value;
    let timeout = supervised.timed_out.then_some(l.timeout).flatten();
    let mut end = exit?.into_end(timeout);
    if supervised.timed_out && !matches!(end, RunEnd::Snapshotted(_)) {
        end = RunEnd::TimedOut(l.timeout.unwrap_or_default());
    }
    let mut end = super::outcome::unless_a_page_failed(l.pages.as_ref(), end);
    let run_time = run_start.elapsed();

    let first_instruction = l
        .boot
        .and_then(|b| b.first_instruction(&runner.mem, l.start, l.tsc_khz));
    let mut runner = runner;
    let (final_xcr0, stopped_at) = last_checks(&mut runner, &mut end, l.policy.xcr0);
    let devices = runner.devices;
    let writer = devices.serial.writer();
    let mut serial = l.earlier_serial;
    serial.extend_from_slice(writer.captured());
    let mut serial_bytes_dropped = writer.dropped();
    serial_bytes_dropped += keep_last_serial(&mut serial);
    Ok(RunOutcome {
        policy: l.policy,
        end,
        report: devices.report,
        reports_dropped: devices.reports_dropped,
        report_errors_dropped: devices.report_errors.dropped(),
        report_errors: devices.report_errors.into_items(),
        requests_refused: devices.refused_requests.total(),
        refused_requests: devices.refused_requests.into_items(),
        serial,
        serial_bytes_dropped,
        exits: runner.exits,
        unhandled_ports: devices.unhandled_ports,
        final_xcr0,
        tsc_khz: l.tsc_khz as u64,
        marks_dropped: runner.marks.dropped(),
        marks: runner.marks.into_items(),
        xstate_sync,
        xstate_stats: runner.xstate.stats(),
        setup_time: l.setup_time,
        run_time,
        first_exit: runner.first_exit,
        first_instruction,
        boot_entry: l.boot.map(|b| b.entry.name()),
        start_clock_monotonic_ns: monotonic_ns(l.start),
        snapshot_time: runner.snapshot_time,
        snapshot_errors: runner.snapshot_errors,
        native: devices.native,
        hugepages: None,
        stopped_at,
        vcpus: Vec::new(),
        ended_by: 0,
        ap_start: None,
        irqchip,
        linux_xstate: None,
    })
}

/// The guest's XCR0 at the end, checked one last time: a guest that left
/// the policy and then only spun, or exited, still broke it (a crash keeps
/// its own diagnosis and register dump). Then, once the end is known to be
/// the timeout, where the guest was.
fn last_checks(
    runner: &mut VcpuRunner,
    end: &mut RunEnd,
    policy_xcr0: XfeatureMask,
) -> (Option<u64>, Option<Box<RegisterDump>>) {
    let final_xcr0 = runner.xcr0().ok();
    if let (Some(xcr0), RunEnd::Exited(_) | RunEnd::TimedOut(_)) = (final_xcr0, &*end) {
        if let Some(why) = xcr0_violation(xcr0, policy_xcr0) {
            *end = RunEnd::ProtocolViolation(why);
        }
    }
    let stopped_at =
        matches!(end, RunEnd::TimedOut(_)).then(|| Box::new(RegisterDump::capture(&runner.vcpu)));
    (final_xcr0, stopped_at)
}
