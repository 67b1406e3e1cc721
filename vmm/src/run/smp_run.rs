//! A run of several vCPUs (`--vcpus N`): one thread and one runner
//! (devices, xstate manager, exit counters) per vCPU under one supervisor;
//! the first vCPU to end the run stops the others, a snapshot pauses them
//! all, and their parts are gathered into one outcome.

use std::time::{Duration, Instant};

use super::outcome::{xcr0_violation, ExitCounts, RunEnd, RunOutcome, VcpuOutcome};
use super::prepared::{keep_last_serial, monotonic_ns, Launch};
use super::runner::{LoopExit, VcpuRunner};
use crate::cpuid::Policy;
use crate::devices::Devices;
use crate::error::{Error, Result};
use crate::snapshot::save::{self, PausedSmp, PausedVcpu, SaveContext, Trigger};
use crate::vstate::dump::RegisterDump;
use crate::vstate::halt::{self, Board, HaltWatch};
use crate::vstate::machine::Machine;
use crate::vstate::smp;
use crate::vstate::stop::{supervise_all_with, Deadlines, StopFlag, StopReason, VcpuBody};
use crate::vstate::vcpu;

/// One vCPU thread's result: its runner (with what it collected), why its
/// loop returned, and whether it was only stopped because another ended
/// the run.
type VcpuResult = (VcpuRunner, Result<LoopExit>, bool);

/// [`execute`] with several vCPUs: one thread and one runner (devices,
/// xstate manager, exit counters) per vCPU; the first vCPU to end the run
/// (the boot processor's exit, any vCPU's crash, exception or protocol
/// violation) stops the others, as does the timeout.
pub(super) fn execute_smp(l: Launch) -> Result<RunOutcome> {
    // The VM stays open until the run's results are read.
    let Machine {
        vm,
        vcpu,
        mem,
        aps,
        irqchip,
    } = l.machine;
    // Shared with the halt watch, which reads the full irqchip's IOAPIC.
    let vm = std::sync::Arc::new(vm);
    let board = Board::new(
        aps.len() + 1,
        (irqchip == smp::Irqchip::Full).then(|| vm.clone()),
    );
    let serial_sink = l.devices.serial.writer().sink();
    let xstate_sync = l.xstate.policy();
    let run_start = Instant::now();
    // With somewhere to write it, a snapshot pauses every vCPU first.
    let pausable = l.snapshot.is_some();
    let clock = (run_start, l.start);
    let runner = |index, vcpu, mut devices: Devices, xstate| {
        devices.snapshots = pausable;
        let mut r = VcpuRunner::new(vcpu, devices, xstate, &mem, clock, l.raw);
        r.pausable = pausable;
        r.pages = l.pages.clone();
        r.halt = Some(HaltWatch::new(&board, index));
        r
    };
    let mut buses = vcpu_buses(l.devices, aps.len(), serial_sink).into_iter();
    let mut runners = vec![runner(
        0,
        vcpu,
        buses.next().expect("the BSP's bus"),
        l.xstate,
    )];
    for (i, (ap, devices)) in aps.into_iter().zip(buses).enumerate() {
        runners.push(runner(i + 1, ap.vcpu, devices, ap.xstate));
    }
    let machine = SmpMachine {
        vm: &vm,
        irqchip,
        mem: &mem,
    };
    let supervised = supervise_smp(
        runners,
        machine,
        l.timeout.and_then(|t| run_start.checked_add(t)),
        l.snapshot_after.filter(|_| pausable),
        l.snapshot.as_ref(),
        &l.policy,
        run_start,
    )?;
    let run_time = run_start.elapsed();
    let ended_by = supervised.ended_by;
    let stopped_by_supervisor = supervised.timed_out && ended_by.is_none();
    let mut results = supervised.results;
    if let Some((bsp, _, _)) = results.first_mut() {
        bsp.devices.unshare_com1();
    }
    let c = collect(
        results,
        ended_by,
        stopped_by_supervisor,
        &supervised.spans,
        l.earlier_serial,
        l.timeout,
        l.policy.xcr0,
        l.start,
    )?;
    let devices = c.devices;
    let end = super::outcome::unless_a_page_failed(l.pages.as_ref(), c.end);
    Ok(RunOutcome {
        policy: l.policy,
        end,
        report: c.report,
        reports_dropped: devices.reports_dropped,
        report_errors_dropped: devices.report_errors.dropped(),
        report_errors: devices.report_errors.into_items(),
        requests_refused: devices.refused_requests.total(),
        refused_requests: devices.refused_requests.into_items(),
        serial: c.serial,
        serial_bytes_dropped: c.serial_bytes_dropped,
        exits: c.exits,
        unhandled_ports: c.vcpus.iter().map(|v| v.unhandled_ports).sum(),
        final_xcr0: c.vcpus.first().and_then(|v| v.final_xcr0),
        tsc_khz: l.tsc_khz as u64,
        marks_dropped: c.marks_dropped,
        marks: c.marks,
        xstate_sync,
        xstate_stats: c.stats,
        setup_time: l.setup_time,
        run_time,
        first_exit: c.first_exit,
        snapshot_time: supervised.snapshot_time,
        snapshot_errors: supervised.snapshot_errors,
        native: devices.native,
        hugepages: None,
        first_instruction: l
            .boot
            .and_then(|b| b.first_instruction(&mem, l.start, l.tsc_khz)),
        boot_entry: l.boot.map(|b| b.entry.name()),
        start_clock_monotonic_ns: monotonic_ns(l.start),
        ended_by: ended_by.unwrap_or(0) as u32,
        vcpus: c.vcpus,
        ap_start: None,
        irqchip,
        stopped_at: c.stopped_at,
        linux_xstate: None,
    })
}

/// The port bus of each vCPU, the boot processor's first: a PC guest (the
/// bus decodes the i8042) drives COM1 from any CPU, so every vCPU reaches
/// the boot processor's (see `devices::pc`); the embedded guest's APs get
/// a COM1 each.
fn vcpu_buses(mut bsp: Devices, aps: usize, sink: crate::devices::SerialSink) -> Vec<Devices> {
    let com1 = bsp.i8042.then(|| bsp.share_com1());
    let mut buses = vec![bsp];
    buses.extend((0..aps).map(|_| match &com1 {
        Some(com1) => Devices::pc_ap(sink, com1.clone()),
        None => Devices::new(sink),
    }));
    buses
}

/// What the vCPU threads of a run left behind, and who ended it.
struct Supervised {
    /// Per vCPU, in index order.
    results: Vec<VcpuResult>,
    /// The vCPU that ended the run (`None`: the supervisor stopped them).
    ended_by: Option<usize>,
    /// Whether the time limit passed.
    timed_out: bool,
    /// Per vCPU: when its thread entered and left its loop (see VcpuPhases).
    spans: Vec<(Instant, Instant)>,
    /// How long a snapshot written took.
    snapshot_time: Option<Duration>,
    /// Snapshots that could not be written (the guest went on).
    snapshot_errors: Vec<String>,
}

/// Run every vCPU on its own thread until one ends the run or the time
/// limit passes; a snapshot request pauses them all, the machine is saved,
/// and they go on when it could not be written.
fn supervise_smp(
    mut runners: Vec<VcpuRunner>,
    machine: SmpMachine<'_>,
    deadline: Option<Instant>,
    mut snapshot_after: Option<Duration>,
    snapshot: Option<&SaveContext>,
    policy: &Policy,
    run_start: Instant,
) -> Result<Supervised> {
    let mut snapshot_time = None;
    let mut snapshot_errors = Vec::new();
    // Per vCPU: when its thread entered and left its loop (see VcpuPhases).
    let mut spans: Vec<(Instant, Instant)> = Vec::new();
    let (results, ended_by, timed_out) = loop {
        let bodies: Vec<VcpuBody<(VcpuResult, Instant, Instant)>> = runners
            .into_iter()
            .map(|mut r| {
                Box::new(move |stop: &StopFlag| {
                    let entered = Instant::now();
                    let end = r.run_loop(stop);
                    let left = Instant::now();
                    let stopped = stop.requested() == Some(StopReason::Peer)
                        && matches!(end, Ok(LoopExit::Stopped));
                    ((r, end, stopped), entered, left)
                }) as VcpuBody<(VcpuResult, Instant, Instant)>
            })
            .collect();
        let deadlines = Deadlines {
            timeout: deadline.map(|d| d.saturating_duration_since(Instant::now())),
            snapshot_after,
            // Several vCPUs always have LAPICs, where a HLT stays in KVM.
            watch_every: Some(halt::WATCH_EVERY),
        };
        let (timed, ended_by, timed_out) =
            supervise_all_with(deadlines, bodies, |((_, end, stopped), _, _)| {
                end.is_err() || !*stopped
            })?;
        // The first stretch's start, the last stretch's end.
        for (i, (_, entered, left)) in timed.iter().enumerate() {
            match spans.get_mut(i) {
                Some(span) => span.1 = *left,
                None => spans.push((*entered, *left)),
            }
        }
        let mut results: Vec<VcpuResult> = timed.into_iter().map(|(r, _, _)| r).collect();
        // One snapshot request per run, as with one vCPU.
        snapshot_after = None;
        let paused = results
            .iter()
            .enumerate()
            .find_map(|(i, (_, exit, _))| match exit {
                Ok(LoopExit::Paused(t)) => Some((i, *t)),
                _ => None,
            });
        // A vCPU that ended on its own (exit, crash, error) ends the run.
        let own_end = results.iter().any(|(_, exit, stopped)| {
            !matches!(exit, Ok(LoopExit::Paused(_))) && (exit.is_err() || !*stopped)
        });
        let (Some((who, trigger)), false, false, Some(ctx)) =
            (paused, own_end, timed_out, snapshot)
        else {
            break (results, ended_by, timed_out);
        };
        match snapshot_smp(ctx, trigger, machine, &mut results, policy, run_start)? {
            SmpSaved::Written(path, took) => {
                snapshot_time = Some(took);
                end_with(&mut results, who, RunEnd::Snapshotted(path));
                break (results, Some(who), false);
            }
            SmpSaved::Violation(i, why) => {
                end_with(&mut results, i, RunEnd::ProtocolViolation(why));
                break (results, Some(i), false);
            }
            SmpSaved::PageFailed(why) => {
                end_with(&mut results, 0, RunEnd::SnapshotMemory(why));
                break (results, Some(0), false);
            }
            SmpSaved::NotWritten(e) => {
                // Said and kept up to a bound, and the guest goes on.
                if snapshot_errors.len() < super::runner::MAX_SNAPSHOT_ERRORS {
                    crate::output::terminal::line(format_args!("vmm: {e}; the guest was resumed"));
                    snapshot_errors.push(e.to_string());
                }
                runners = results.into_iter().map(|(r, _, _)| r).collect();
                // The next supervisor counts its watch rounds from 1.
                for h in runners.iter_mut().filter_map(|r| r.halt.as_mut()) {
                    h.restart();
                }
            }
        }
    };
    Ok(Supervised {
        results,
        ended_by,
        timed_out,
        spans,
        snapshot_time,
        snapshot_errors,
    })
}

/// Every vCPU's part of a finished run, summed where the run reports one
/// figure, and the boot processor's device model.
struct Collected {
    vcpus: Vec<VcpuOutcome>,
    /// How the run ended: the end of the vCPU that ended it, else the
    /// time limit.
    end: RunEnd,
    /// The report of the vCPU that ended the run when it handed one over
    /// (an AP's exception), else the boot processor's.
    report: Option<Box<guest::protocol::Report>>,
    serial: Vec<u8>,
    serial_bytes_dropped: u64,
    exits: ExitCounts,
    stats: crate::xstate_manager::SyncStats,
    marks: Vec<(u32, Duration)>,
    marks_dropped: u64,
    first_exit: Option<Duration>,
    stopped_at: Option<Box<RegisterDump>>,
    devices: Devices,
}

/// Gather what each vCPU's runner collected. `stopped_by_supervisor`: the
/// time limit ended the run (`timeout` it was), not a vCPU.
#[allow(clippy::too_many_arguments)]
fn collect(
    results: Vec<VcpuResult>,
    ended_by: Option<usize>,
    stopped_by_supervisor: bool,
    spans: &[(Instant, Instant)],
    earlier_serial: Vec<u8>,
    timeout: Option<Duration>,
    policy_xcr0: xstate::XfeatureMask,
    start: Instant,
) -> Result<Collected> {
    let mut vcpus = Vec::with_capacity(results.len());
    let mut end = None;
    let mut serial = earlier_serial;
    let mut serial_bytes_dropped = 0;
    let mut exits = ExitCounts::default();
    let mut stats = crate::xstate_manager::SyncStats::default();
    let mut marks = Vec::new();
    let mut marks_dropped = 0;
    let mut first_exit = None;
    let mut bsp_devices = None;
    let mut stopped_at = None;
    let timeout_given = timeout;
    let timeout = stopped_by_supervisor.then_some(timeout).flatten();
    for (i, (mut runner, result, stopped)) in results.into_iter().enumerate() {
        let mut own_end = if stopped {
            None
        } else {
            Some(result?.into_end(timeout))
        };
        let final_xcr0 = runner.xcr0().ok();
        if let (Some(xcr0), Some(RunEnd::Exited(_))) = (final_xcr0, &own_end) {
            if let Some(why) = xcr0_violation(xcr0, policy_xcr0) {
                own_end = Some(RunEnd::ProtocolViolation(why));
            }
        }
        if ended_by == Some(i) {
            end = own_end.clone();
        }
        exits.add(&runner.exits);
        let s = runner.xstate.stats();
        stats.add(&s);
        let writer = runner.devices.serial.writer();
        serial.extend_from_slice(writer.captured());
        serial_bytes_dropped += writer.dropped();
        let own_stop = stopped_by_supervisor.then(|| Box::new(RegisterDump::capture(&runner.vcpu)));
        if i == 0 {
            stopped_at = own_stop.clone();
            first_exit = runner.first_exit;
            marks_dropped = runner.marks.dropped();
            marks = runner.marks.into_items();
        }
        let devices = runner.devices;
        vcpus.push(VcpuOutcome {
            index: i as u32,
            end: own_end,
            report: devices.report.clone(),
            report_errors: devices.report_errors.items().to_vec(),
            exits: runner.exits,
            xstate_stats: s,
            final_xcr0,
            unhandled_ports: devices.unhandled_ports,
            phases: spans
                .get(i)
                .map(|&(entered, left)| {
                    smp::VcpuPhases::new(start, entered, runner.first_exit, left)
                })
                .unwrap_or_default(),
            stopped_at: own_stop,
        });
        if i == 0 {
            bsp_devices = Some(devices);
        }
    }
    let devices = bsp_devices.ok_or(crate::error::VcpuError::ThreadPanicked)?;
    // No vCPU ended the run itself: the supervisor stopped every one.
    let end = match end {
        Some(end) if !stopped_by_supervisor => end,
        _ => RunEnd::TimedOut(timeout_given.unwrap_or_default()),
    };
    serial_bytes_dropped += keep_last_serial(&mut serial);
    let report = vcpus
        .get(ended_by.unwrap_or(0))
        .and_then(|v| v.report.clone())
        .or_else(|| devices.report.clone());
    Ok(Collected {
        vcpus,
        end,
        report,
        serial,
        serial_bytes_dropped,
        exits,
        stats,
        marks,
        marks_dropped,
        first_exit,
        stopped_at,
        devices,
    })
}

/// What an attempt to snapshot a paused SMP machine gave.
enum SmpSaved {
    /// Written to this path, in this long.
    Written(std::path::PathBuf, Duration),
    /// vCPU `.0`'s XCR0 left the policy: the run ends there instead.
    Violation(usize, String),
    /// The file could not be written; the guest may go on.
    NotWritten(Error),
    /// A page of the snapshot this guest was restored from failed before
    /// every page was in: the run ends.
    PageFailed(String),
}

/// The machine-wide half of a paused SMP guest, which a snapshot saves
/// beside its vCPUs: borrowed from the run for the length of one save.
#[derive(Clone, Copy)]
struct SmpMachine<'a> {
    /// The VM (its irqchip and PIT state).
    vm: &'a kvm_ioctls::VmFd,
    /// What interrupt hardware it has.
    irqchip: smp::Irqchip,
    /// Guest RAM.
    mem: &'a vm_memory::GuestMemoryMmap,
}

/// Save a machine whose vCPU threads have all returned (`results`, in
/// index order): every vCPU's XCR0 is checked against the policy first (a
/// snapshot of state outside it would be refused by restore).
fn snapshot_smp(
    ctx: &SaveContext,
    trigger: Trigger,
    machine: SmpMachine<'_>,
    results: &mut [VcpuResult],
    policy: &Policy,
    run_start: Instant,
) -> Result<SmpSaved> {
    for (i, (r, _, _)) in results.iter().enumerate() {
        let xcr0 = vcpu::get_xcr0(&r.vcpu)?;
        if let Some(why) = xcr0_violation(xcr0, policy.xcr0) {
            return Ok(SmpSaved::Violation(i, why));
        }
    }
    // The snapshot finds the pages that hold data by their presence:
    // every page of the one restored from must be in first.
    if let Some(Err(e)) = results[0].0.pages.as_ref().map(|p| p.wait()) {
        return Ok(SmpSaved::PageFailed(e.to_string()));
    }
    let began = Instant::now();
    let exits = results.iter().map(|(r, _, _)| r.exits.total).sum();
    let (first, rest) = results.split_at_mut(1);
    let VcpuRunner {
        vcpu: bsp,
        xstate: bsp_xstate,
        devices,
        ..
    } = &mut first[0].0;
    let mut vcpus = vec![PausedVcpu {
        vcpu: bsp,
        xstate: bsp_xstate,
    }];
    for (r, _, _) in rest.iter_mut() {
        vcpus.push(PausedVcpu {
            vcpu: &mut r.vcpu,
            xstate: &mut r.xstate,
        });
    }
    let SmpMachine { vm, irqchip, mem } = machine;
    let paused = PausedSmp {
        vm,
        irqchip,
        vcpus,
        mem,
        devices,
        exits,
        ran: run_start.elapsed(),
    };
    match save::save_smp(ctx, trigger, paused) {
        Ok(path) => Ok(SmpSaved::Written(path, began.elapsed())),
        Err(e @ Error::SnapshotWrite { .. }) => Ok(SmpSaved::NotWritten(e)),
        Err(e) => Err(e),
    }
}

/// vCPU `who` ended the run with `end`; every other one was stopped.
fn end_with(results: &mut [VcpuResult], who: usize, end: RunEnd) {
    for (i, (_, e, stopped)) in results.iter_mut().enumerate() {
        if i == who {
            *e = Ok(LoopExit::Ended(end.clone()));
            *stopped = false;
        } else {
            *e = Ok(LoopExit::Stopped);
            *stopped = true;
        }
    }
}
