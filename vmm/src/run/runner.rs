//! The vCPU run loops and exit decoding: re-enter the guest, hand each
//! exit to the devices and the xstate manager, and turn the exits that end
//! a run (exit port, crash, KVM refusing to go on, a stop request) into a
//! [`RunEnd`].
//!
//! Two loops share the exit decoding: the full loop (device model, xstate
//! sync policy, snapshots), and the raw loop that measures the cost of an
//! exit alone (it re-enters at once, looking only at the exit port, the
//! benchmark markers and the final report).

use std::time::{Duration, Instant};

use guest::protocol::{
    split_report_exit, xmm_edit_pattern, DEBUG_EXIT_PORT, EDIT_STATUS_DONE, MARK_PORT,
    REPORT_EXIT_PORT, REPORT_PORT, SNAPSHOT_PORT, XSTATE_EDIT_PORT,
};
use kvm_bindings::{
    KVM_INTERNAL_ERROR_DELIVERY_EV, KVM_INTERNAL_ERROR_EMULATION, KVM_INTERNAL_ERROR_SIMUL_EX,
    KVM_INTERNAL_ERROR_UNEXPECTED_EXIT_REASON,
};
use kvm_ioctls::{VcpuExit, VcpuFd};
use vm_memory::GuestMemoryMmap;

use super::outcome::{xcr0_violation, ExitCounts, RunEnd};
use crate::devices::{le_value, Devices, FirstN, PortAction};
use crate::error::{Error, Result};
use crate::snapshot::save::{self, Running, SaveContext, Trigger};
use crate::vstate::dump::RegisterDump;
use crate::vstate::stop::{StopFlag, StopReason};
use crate::xstate_manager::{EditOutcome, XstateManager};

/// A vCPU and everything its loop touches, owned by the vCPU thread.
pub(crate) struct VcpuRunner {
    pub vcpu: VcpuFd,
    pub mem: GuestMemoryMmap,
    pub devices: Devices,
    pub exits: ExitCounts,
    pub xstate: XstateManager,
    /// Benchmark markers, with when (since `start`): the first
    /// [`MAX_MARKS`](crate::devices::MAX_MARKS).
    pub marks: FirstN<(u32, Duration)>,
    /// When the loop began.
    pub start: Instant,
    /// When the run or restore began (for `first_exit`).
    pub origin: Instant,
    pub first_exit: Option<Duration>,
    pub snapshot_time: Option<Duration>,
    /// Run the raw loop instead of the full one.
    pub raw: bool,
    /// Where and how to write a snapshot, when one may be taken.
    pub snapshot: Option<SaveContext>,
    /// Snapshots that could not be written (the guest went on), at most
    /// [`MAX_SNAPSHOT_ERRORS`] kept.
    pub snapshot_errors: Vec<String>,
    /// One vCPU of several whose machine can be snapshotted: a snapshot
    /// request (the `--snapshot-after` stop, a guest write to
    /// `SNAPSHOT_PORT`) leaves the loop with [`VcpuRunner::paused`] set,
    /// and the machine is saved once every vCPU is out of `KVM_RUN`.
    pub pausable: bool,
    /// Why this vCPU's loop left for a snapshot of the whole machine.
    pub paused: Option<Trigger>,
    /// The guest's XCR0 as [`VcpuRunner::policy_violation`] last read it,
    /// until the vCPU runs again: the run's last check reuses it instead
    /// of asking KVM a second time for a value the guest cannot have
    /// changed (one ioctl, ~6 µs, on every run's end).
    pub xcr0_since_run: Option<u64>,
}

/// Failed snapshot messages kept for the report: a guest asking again and
/// again must not grow the VMM's memory.
pub(crate) const MAX_SNAPSHOT_ERRORS: usize = 16;

/// An exit that ends the run, decoded as far as it can be without the vCPU.
enum Fatal {
    /// `KVM_RUN` itself failed.
    RunFailed(kvm_ioctls::Error),
    /// `KVM_EXIT_INTERNAL_ERROR`: the details are in `kvm_run`.
    Internal,
    /// Any other exit the VMM does not continue from.
    Exit(String),
}

/// What one `KVM_RUN` came back with, for both loops.
enum Step<'a> {
    /// An exit a loop handles.
    Exit(VcpuExit<'a>),
    /// `KVM_RUN` returned early (the supervisor's kick): look at the stop flag.
    Interrupted,
    /// The run is over.
    Fatal(Fatal),
}

impl<'a> From<std::result::Result<VcpuExit<'a>, kvm_ioctls::Error>> for Step<'a> {
    fn from(r: std::result::Result<VcpuExit<'a>, kvm_ioctls::Error>) -> Self {
        match r {
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => Step::Interrupted,
            Err(e) => Step::Fatal(Fatal::RunFailed(e)),
            Ok(
                exit @ (VcpuExit::IoOut(..)
                | VcpuExit::IoIn(..)
                | VcpuExit::MmioRead(..)
                | VcpuExit::MmioWrite(..)),
            ) => Step::Exit(exit),
            Ok(VcpuExit::InternalError) => Step::Fatal(Fatal::Internal),
            Ok(other) => Step::Fatal(Fatal::Exit(describe_fatal(&other))),
        }
    }
}

impl VcpuRunner {
    /// Run until the guest exits, crashes, or `stop` asks for an end.
    pub fn run_loop(&mut self, stop: &StopFlag) -> Result<RunEnd> {
        if self.raw {
            return self.raw_loop(stop);
        }
        loop {
            match stop.requested() {
                None => {}
                Some(StopReason::Snapshot) if self.snapshot.is_some() => {
                    if let Some(end) = self.snapshot(Trigger::Time)? {
                        return Ok(end);
                    }
                    // Not written: the guest goes on; the request is done.
                    stop.snapshot_done();
                }
                Some(StopReason::Snapshot) if self.pausable => {
                    self.paused = Some(Trigger::Time);
                    return Ok(RunEnd::TimedOut(Duration::ZERO));
                }
                // A snapshot request is only armed with a snapshot file:
                // without one it can only be a plain stop.
                Some(_) => return Ok(RunEnd::TimedOut(Duration::ZERO)),
            }
            self.xstate.before_run(&self.vcpu)?;
            // The guest may change its state from here on.
            self.xcr0_since_run = None;
            let step = Step::from(self.vcpu.run());
            if self.first_exit.is_none() {
                self.first_exit = Some(self.origin.elapsed());
            }
            let mut snapshot_requested = false;
            let mut protocol_exit = false;
            let action = match step {
                Step::Exit(VcpuExit::IoOut(SNAPSHOT_PORT, _)) => {
                    self.exits.io += 1;
                    protocol_exit = true;
                    if self.snapshot.is_some() || self.pausable {
                        snapshot_requested = true;
                    } else {
                        // No snapshot file: nothing decodes the port.
                        self.devices.unhandled_ports += 1;
                    }
                    PortAction::Continue
                }
                Step::Exit(VcpuExit::IoOut(port, data)) => {
                    self.exits.io += 1;
                    protocol_exit = is_protocol_port(port);
                    self.devices.port_write(&self.mem, port, data)
                }
                Step::Exit(VcpuExit::IoIn(port, data)) => {
                    self.exits.io += 1;
                    self.devices.port_read(port, data);
                    PortAction::Continue
                }
                Step::Exit(VcpuExit::MmioRead(_, data)) => {
                    self.exits.mmio += 1;
                    data.fill(0xff);
                    PortAction::Continue
                }
                Step::Exit(_) => {
                    self.exits.mmio += 1;
                    PortAction::Continue
                }
                Step::Interrupted => continue,
                Step::Fatal(f) => return Ok(self.crash(f)),
            };
            self.exits.total += 1;
            self.xstate.on_exit(&self.vcpu)?;
            if protocol_exit {
                if let Some(end) = self.policy_violation()? {
                    return Ok(end);
                }
            }
            match action {
                PortAction::Continue => {}
                PortAction::Exit(status) => return Ok(RunEnd::guest_exit(status)),
                PortAction::Mark(v) => self.marks.push((v, self.start.elapsed())),
                PortAction::EditXmm(reg) => self.edit_xmm(reg)?,
            }
            if snapshot_requested && self.pausable {
                // The machine is saved once every vCPU has stopped.
                self.paused = Some(Trigger::Guest);
                return Ok(RunEnd::TimedOut(Duration::ZERO));
            }
            if snapshot_requested {
                if let Some(end) = self.snapshot(Trigger::Guest)? {
                    return Ok(end);
                }
            }
        }
    }

    /// The guest's request to set an XMM register: done, or refused and
    /// answered (`EDIT_STATUS_REFUSED` on the port) and reported; a refusal
    /// never ends the run.
    fn edit_xmm(&mut self, reg: u32) -> Result<()> {
        let reg = (reg & 15) as usize;
        match self
            .xstate
            .guest_edit_xmm(&self.vcpu, reg, xmm_edit_pattern(reg as u32))?
        {
            EditOutcome::Done => self.devices.edit_status = EDIT_STATUS_DONE,
            EditOutcome::Refused(why) => self
                .devices
                .refuse_edit(format!("xstate edit request for XMM{reg} refused: {why}")),
        }
        Ok(())
    }

    /// The run's end when the guest's XCR0 (`KVM_GET_XCRS`, ~6 µs) enables
    /// state outside the xstate policy. Checked at protocol exits (report,
    /// debug exit, edit and snapshot requests), before any snapshot and at
    /// the end of the run, never on the benchmark ports (markers, exit
    /// targets) whose cost `vmm bench exits` measures.
    fn policy_violation(&mut self) -> Result<Option<RunEnd>> {
        let xcr0 = self.xcr0()?;
        Ok(xcr0_violation(xcr0, self.xstate.policy_xcr0()).map(RunEnd::ProtocolViolation))
    }

    /// The guest's XCR0: the value read since the vCPU last ran, else
    /// `KVM_GET_XCRS` (kept until the next `KVM_RUN`).
    pub(crate) fn xcr0(&mut self) -> Result<u64> {
        if let Some(xcr0) = self.xcr0_since_run {
            return Ok(xcr0);
        }
        let xcr0 = crate::vstate::vcpu::get_xcr0(&self.vcpu)?;
        self.xcr0_since_run = Some(xcr0);
        Ok(xcr0)
    }

    /// Write a snapshot and end the run. Called between exits only: the
    /// save completes pending I/O first (`immediate_exit`). When the file
    /// cannot be written (destination refused, directory missing or
    /// read-only, disk full) nothing is lost: the failure is kept for the
    /// report, said on stderr, and `None` lets the guest run on. Other
    /// errors (KVM refusing to hand over the state) still end the run.
    fn snapshot(&mut self, trigger: Trigger) -> Result<Option<RunEnd>> {
        if self.snapshot.is_none() {
            return Ok(Some(RunEnd::TimedOut(Duration::ZERO)));
        }
        // A snapshot of state outside the policy would be declared
        // restorable and refused by restore: the run ends here instead.
        if let Some(end) = self.policy_violation()? {
            return Ok(Some(end));
        }
        let Some(ctx) = self.snapshot.as_ref() else {
            return Ok(Some(RunEnd::TimedOut(Duration::ZERO)));
        };
        let began = Instant::now();
        let saved = save::save(
            ctx,
            trigger,
            Running {
                vcpu: &mut self.vcpu,
                mem: &self.mem,
                xstate: &mut self.xstate,
                devices: &self.devices,
                exits: self.exits.total,
                ran: self.start.elapsed(),
            },
        );
        match saved {
            Ok(path) => {
                self.snapshot_time = Some(began.elapsed());
                Ok(Some(RunEnd::Snapshotted(path)))
            }
            Err(e @ Error::SnapshotWrite { .. }) => {
                // Said and kept up to a bound: a guest asking in a loop
                // must not flood stderr or grow memory.
                if self.snapshot_errors.len() < MAX_SNAPSHOT_ERRORS {
                    eprintln!("vmm: {e}; the guest was resumed");
                    self.snapshot_errors.push(e.to_string());
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The raw limit: re-enter at once on every exit. Only the exit port
    /// (to stop), benchmark markers (to time rows) and the report port (once,
    /// at the end) are looked at.
    fn raw_loop(&mut self, stop: &StopFlag) -> Result<RunEnd> {
        loop {
            self.xcr0_since_run = None;
            match Step::from(self.vcpu.run()) {
                Step::Exit(VcpuExit::IoOut(MARK_PORT, data)) => {
                    self.marks.push((le_value(data), self.start.elapsed()));
                }
                Step::Exit(VcpuExit::IoOut(REPORT_PORT, data)) => {
                    // Once, at the end: the rows are in the report.
                    self.devices.port_write(&self.mem, REPORT_PORT, data);
                    if let Some(end) = self.policy_violation()? {
                        return Ok(end);
                    }
                }
                Step::Exit(VcpuExit::IoOut(REPORT_EXIT_PORT, data)) => {
                    let (addr, status) = split_report_exit(le_value(data));
                    self.devices.take_report(&self.mem, addr);
                    if let Some(end) = self.policy_violation()? {
                        return Ok(end);
                    }
                    return Ok(RunEnd::guest_exit(status));
                }
                Step::Exit(VcpuExit::IoOut(DEBUG_EXIT_PORT, data)) => {
                    let status = le_value(data);
                    if let Some(end) = self.policy_violation()? {
                        return Ok(end);
                    }
                    return Ok(RunEnd::guest_exit(status));
                }
                Step::Exit(_) => {}
                Step::Interrupted => {
                    if stop.requested().is_some() {
                        return Ok(RunEnd::TimedOut(Duration::ZERO));
                    }
                    continue;
                }
                Step::Fatal(f) => return Ok(self.crash(f)),
            }
            self.exits.total += 1;
        }
    }

    /// The run ends with a crash: say why and dump the registers.
    fn crash(&mut self, fatal: Fatal) -> RunEnd {
        let reason = match fatal {
            Fatal::RunFailed(e) => format!("KVM_RUN failed: {e}"),
            Fatal::Internal => internal_error(&mut self.vcpu),
            Fatal::Exit(reason) => reason,
        };
        RunEnd::Crashed {
            reason,
            dump: Box::new(RegisterDump::capture(&self.vcpu)),
        }
    }
}

/// The ports of the guest/VMM protocol proper, where the VMM checks the
/// guest's XCR0 against the policy (see [`VcpuRunner::policy_violation`]).
fn is_protocol_port(port: u16) -> bool {
    matches!(
        port,
        REPORT_PORT | REPORT_EXIT_PORT | DEBUG_EXIT_PORT | XSTATE_EDIT_PORT | SNAPSHOT_PORT
    )
}

/// Describe an exit that ends the run.
fn describe_fatal(exit: &VcpuExit<'_>) -> String {
    match exit {
        VcpuExit::Hlt => "the guest halted (HLT) with no interrupt source to wake it".to_string(),
        VcpuExit::Shutdown => "the guest triple-faulted (KVM_EXIT_SHUTDOWN)".to_string(),
        VcpuExit::FailEntry(reason, cpu) => {
            format!("KVM_EXIT_FAIL_ENTRY: hardware entry failure reason {reason:#x} on cpu {cpu}")
        }
        VcpuExit::SystemEvent(kind, data) => {
            format!("KVM_EXIT_SYSTEM_EVENT type {kind} data {data:x?}")
        }
        other => format!("unexpected exit {other:?}"),
    }
}

/// Describe `KVM_EXIT_INTERNAL_ERROR` with its suberror.
fn internal_error(vcpu: &mut VcpuFd) -> String {
    let run = vcpu.get_kvm_run();
    // SAFETY: the exit reason is KVM_EXIT_INTERNAL_ERROR, so `internal` is
    // the union member KVM filled.
    let internal = unsafe { run.__bindgen_anon_1.internal };
    let what = match internal.suberror {
        KVM_INTERNAL_ERROR_EMULATION => {
            "emulation failure (an instruction KVM's emulator cannot run, e.g. VEX at emulated CPL0)"
        }
        KVM_INTERNAL_ERROR_SIMUL_EX => "simultaneous exceptions",
        KVM_INTERNAL_ERROR_DELIVERY_EV => "delivery event failure",
        KVM_INTERNAL_ERROR_UNEXPECTED_EXIT_REASON => "unexpected exit reason",
        _ => "unknown suberror",
    };
    let n = (internal.ndata as usize).min(internal.data.len());
    format!(
        "KVM_EXIT_INTERNAL_ERROR suberror {}: {what}; data {:x?}",
        internal.suberror,
        &internal.data[..n]
    )
}
