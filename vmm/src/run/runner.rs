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
use crate::vstate::halt::HaltWatch;
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
    /// `SNAPSHOT_PORT`) leaves the loop with [`LoopExit::Paused`], and the
    /// machine is saved once every vCPU is out of `KVM_RUN`.
    pub pausable: bool,
    /// The guest's XCR0 as [`VcpuRunner::policy_violation`] last read it,
    /// until the vCPU runs again: the run's last check reuses it instead
    /// of asking KVM a second time for a value the guest cannot have
    /// changed (one ioctl, ~6 µs, on every run's end).
    pub xcr0_since_run: Option<u64>,
    /// A restore's stored pages: a page that fails stops the loop
    /// ([`RunEnd::SnapshotMemory`]), and a snapshot waits for every page.
    pub pages: Option<crate::snapshot::pager::Pages>,
    /// This vCPU's part in the halt watch (with an in-kernel LAPIC, where
    /// a HLT stays in KVM): each watch kick, it looks whether it waits
    /// with nothing to wake it, and ends the run when every vCPU does.
    pub halt: Option<HaltWatch>,
}

/// Failed snapshot messages kept for the report: a guest asking again and
/// again must not grow the VMM's memory.
pub(crate) const MAX_SNAPSHOT_ERRORS: usize = 16;

/// Why a vCPU's loop returned.
#[derive(Debug)]
pub(crate) enum LoopExit {
    /// The run is over, and this is how it ended (the guest's exit, a
    /// crash, a protocol violation, a snapshot written).
    Ended(RunEnd),
    /// Asked to stop from outside (the timeout, another vCPU's end); the
    /// caller knows which and says how the run ended.
    Stopped,
    /// Left `KVM_RUN` for a snapshot of the whole machine, which the caller
    /// takes once every vCPU is out; the guest may then go on.
    Paused(Trigger),
}

impl LoopExit {
    /// How this vCPU's part of the run ended: its own end, else a stop
    /// (`timeout`: the time limit the run had, when that was the cause).
    pub(crate) fn into_end(self, timeout: Option<Duration>) -> RunEnd {
        match self {
            LoopExit::Ended(end) => end,
            LoopExit::Stopped | LoopExit::Paused(_) => {
                RunEnd::TimedOut(timeout.unwrap_or_default())
            }
        }
    }
}

/// An exit that ends the run, decoded as far as it can be without the vCPU.
#[derive(Debug)]
pub(crate) enum Fatal {
    /// `KVM_RUN` itself failed.
    RunFailed(kvm_ioctls::Error),
    /// `KVM_EXIT_INTERNAL_ERROR`: the details are in `kvm_run`.
    Internal,
    /// Any other exit the VMM does not continue from.
    Exit(String),
}

/// What one `KVM_RUN` came back with, for both loops.
pub(crate) enum Step<'a> {
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
    /// A runner for `vcpu` with its device model and xstate manager, on
    /// guest RAM `mem`; `clock`: when its loop and the whole launch began.
    /// No snapshot is armed and it does not pause for one (see
    /// [`VcpuRunner::snapshot`](field@VcpuRunner::snapshot) and
    /// [`VcpuRunner::pausable`]).
    pub fn new(
        vcpu: VcpuFd,
        devices: Devices,
        xstate: XstateManager,
        mem: &GuestMemoryMmap,
        clock: (Instant, Instant),
        raw: bool,
    ) -> Self {
        Self {
            vcpu,
            mem: mem.clone(),
            devices,
            exits: ExitCounts::default(),
            xstate,
            marks: FirstN::new(crate::devices::MAX_MARKS),
            start: clock.0,
            origin: clock.1,
            first_exit: None,
            snapshot_time: None,
            raw,
            snapshot: None,
            snapshot_errors: Vec::new(),
            pausable: false,
            xcr0_since_run: None,
            pages: None,
            halt: None,
        }
    }

    /// The end a failed snapshot page makes, looked at between exits (one
    /// relaxed load when nothing failed).
    fn page_failure(&self) -> Option<LoopExit> {
        let e = self.pages.as_ref()?.failure()?;
        Some(LoopExit::Ended(RunEnd::SnapshotMemory(e.to_string())))
    }

    /// Run until the guest exits, crashes, or `stop` asks for an end.
    pub fn run_loop(&mut self, stop: &StopFlag) -> Result<LoopExit> {
        // A failing snapshot page kicks this thread out of KVM_RUN.
        let _kickable = self.pages.as_ref().map(|p| p.enter_vcpu());
        if self.raw {
            return self.raw_loop(stop);
        }
        loop {
            if let Some(end) = self.page_failure() {
                return Ok(end);
            }
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
                    return Ok(LoopExit::Paused(Trigger::Time));
                }
                // A snapshot request is only armed with a snapshot file:
                // without one it can only be a plain stop.
                Some(_) => return Ok(LoopExit::Stopped),
            }
            self.xstate.before_run(&self.vcpu)?;
            // The guest may change its state from here on.
            self.xcr0_since_run = None;
            let step = Step::from(self.vcpu.run());
            if self.first_exit.is_none() {
                self.first_exit = Some(self.origin.elapsed());
            }
            let (action, protocol_exit) =
                match handle_exit(step, &mut self.devices, &self.mem, &mut self.exits) {
                    Next::Port(action, protocol) => (action, protocol),
                    Next::Interrupted => match self.stuck(stop) {
                        Some(end) => return Ok(LoopExit::Ended(end)),
                        None => continue,
                    },
                    Next::Fatal(f) => return Ok(LoopExit::Ended(self.crash(f))),
                };
            self.exits.total += 1;
            self.xstate.on_exit(&self.vcpu)?;
            if protocol_exit {
                if let Some(end) = self.policy_violation()? {
                    return Ok(LoopExit::Ended(end));
                }
            }
            match action {
                PortAction::Continue => {}
                PortAction::Exit(status) => return Ok(LoopExit::Ended(RunEnd::guest_exit(status))),
                PortAction::Reset => return Ok(LoopExit::Ended(RunEnd::Reset)),
                PortAction::Mark(v) => self.marks.push((v, self.start.elapsed())),
                PortAction::EditXmm(reg) => self.edit_xmm(reg)?,
                // The machine is saved once every vCPU has stopped.
                PortAction::Snapshot(point) if self.pausable => {
                    return Ok(LoopExit::Paused(Trigger::guest(point)))
                }
                PortAction::Snapshot(point) => {
                    if let Some(end) = self.snapshot(Trigger::guest(point))? {
                        return Ok(end);
                    }
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
    fn snapshot(&mut self, trigger: Trigger) -> Result<Option<LoopExit>> {
        // Only called with somewhere to write; without, a request is a stop.
        if self.snapshot.is_none() {
            return Ok(Some(LoopExit::Stopped));
        }
        // A snapshot of state outside the policy would be declared
        // restorable and refused by restore: the run ends here instead.
        if let Some(end) = self.policy_violation()? {
            return Ok(Some(LoopExit::Ended(end)));
        }
        let Some(ctx) = self.snapshot.as_ref() else {
            return Ok(Some(LoopExit::Stopped));
        };
        let began = Instant::now();
        // The snapshot finds the pages that hold data by their presence:
        // every page of the one restored from must be in first.
        if let Some(Err(e)) = self.pages.as_ref().map(|p| p.wait()) {
            return Ok(Some(LoopExit::Ended(RunEnd::SnapshotMemory(e.to_string()))));
        }
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
                Ok(Some(LoopExit::Ended(RunEnd::Snapshotted(path))))
            }
            Err(e @ Error::SnapshotWrite { .. }) => {
                // Said and kept up to a bound: a guest asking in a loop
                // must not flood stderr or grow memory.
                if self.snapshot_errors.len() < MAX_SNAPSHOT_ERRORS {
                    crate::output::terminal::line(format_args!("vmm: {e}; the guest was resumed"));
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
    fn raw_loop(&mut self, stop: &StopFlag) -> Result<LoopExit> {
        loop {
            self.xcr0_since_run = None;
            let step = Step::from(self.vcpu.run());
            let next = handle_raw_exit(
                step,
                &mut self.devices,
                &self.mem,
                &mut self.marks,
                self.start,
            );
            let status = match next {
                RawNext::Continue => {
                    self.exits.total += 1;
                    continue;
                }
                RawNext::Interrupted if self.page_failure().is_some() => {
                    return Ok(self.page_failure().unwrap_or(LoopExit::Stopped))
                }
                RawNext::Interrupted if stop.requested().is_some() => return Ok(LoopExit::Stopped),
                RawNext::Interrupted => match self.stuck(stop) {
                    Some(end) => return Ok(LoopExit::Ended(end)),
                    None => continue,
                },
                RawNext::Fatal(f) => return Ok(LoopExit::Ended(self.crash(f))),
                RawNext::Report => None,
                RawNext::Exit(status) => Some(status),
            };
            if let Some(end) = self.policy_violation()? {
                return Ok(LoopExit::Ended(end));
            }
            match status {
                Some(status) => return Ok(LoopExit::Ended(RunEnd::guest_exit(status))),
                None => self.exits.total += 1,
            }
        }
    }

    /// After a kick out of `KVM_RUN`: the run's end when the halt watch
    /// finds every vCPU waiting with nothing to wake it (a crash, with this
    /// vCPU's registers). A stop request is dealt with first, at the top
    /// of the loop.
    fn stuck(&mut self, stop: &StopFlag) -> Option<RunEnd> {
        if stop.requested().is_some() {
            return None;
        }
        let why = self
            .halt
            .as_mut()?
            .on_kick(&self.vcpu, stop.watch_round())?;
        Some(self.crash(Fatal::Exit(why)))
    }

    /// The run ends with a crash: say why and dump the registers.
    fn crash(&mut self, fatal: Fatal) -> RunEnd {
        let reason = match fatal {
            Fatal::RunFailed(e) => format!("KVM_RUN failed: {e}"),
            Fatal::Internal => internal_error(&mut self.vcpu),
            Fatal::Exit(reason) => reason,
        };
        let mut dump = RegisterDump::capture(&self.vcpu);
        if dump.is_reset_state() {
            dump.errors.push(
                "these are the vCPU's reset values: KVM reset it at this exit \
                 (kvm_amd does after a triple fault), so they do not show where the guest was"
                    .into(),
            );
        }
        RunEnd::Crashed {
            reason,
            dump: Box::new(dump),
        }
    }
}

/// What one exit asks of the full loop, decided by [`handle_exit`].
#[derive(Debug)]
pub(crate) enum Next {
    /// What the device model asks for, and whether the exit was on a port
    /// of the guest/VMM protocol (where the guest's XCR0 is checked).
    Port(PortAction, bool),
    /// `KVM_RUN` returned early: look at the stop flag.
    Interrupted,
    /// The run is over.
    Fatal(Fatal),
}

/// Decode one exit of the full loop: count it and route port I/O through
/// the device model; MMIO (nothing is mapped there) reads as all ones.
/// Needs no vCPU, so it is tested with synthetic exits.
pub(crate) fn handle_exit(
    step: Step<'_>,
    devices: &mut Devices,
    mem: &GuestMemoryMmap,
    exits: &mut ExitCounts,
) -> Next {
    let next = match step {
        Step::Exit(VcpuExit::IoOut(port, data)) => {
            exits.io += 1;
            Next::Port(devices.port_write(mem, port, data), is_protocol_port(port))
        }
        Step::Exit(VcpuExit::IoIn(port, data)) => {
            exits.io += 1;
            devices.port_read(port, data);
            Next::Port(PortAction::Continue, false)
        }
        Step::Exit(VcpuExit::MmioRead(_, data)) => {
            exits.mmio += 1;
            data.fill(0xff);
            Next::Port(PortAction::Continue, false)
        }
        Step::Exit(_) => {
            exits.mmio += 1;
            Next::Port(PortAction::Continue, false)
        }
        Step::Interrupted => return Next::Interrupted,
        Step::Fatal(f) => return Next::Fatal(f),
    };
    exits.total += 1;
    next
}

/// What one exit asks of the raw loop, decided by [`handle_raw_exit`].
#[derive(Debug)]
pub(crate) enum RawNext {
    /// Re-enter at once.
    Continue,
    /// The report was handed over (once, at the end): check XCR0, go on.
    Report,
    /// The guest ended with this status (its report taken, if any).
    Exit(u32),
    /// `KVM_RUN` returned early: look at the stop flag.
    Interrupted,
    /// The run is over.
    Fatal(Fatal),
}

/// Decode one exit of the raw loop: only the exit ports, the benchmark
/// markers (timestamped since `start`) and the report port are looked at.
pub(crate) fn handle_raw_exit(
    step: Step<'_>,
    devices: &mut Devices,
    mem: &GuestMemoryMmap,
    marks: &mut FirstN<(u32, Duration)>,
    start: Instant,
) -> RawNext {
    match step {
        Step::Exit(VcpuExit::IoOut(MARK_PORT, data)) => {
            marks.push((le_value(data), start.elapsed()));
            RawNext::Continue
        }
        Step::Exit(VcpuExit::IoOut(REPORT_PORT, data)) => {
            devices.port_write(mem, REPORT_PORT, data);
            RawNext::Report
        }
        Step::Exit(VcpuExit::IoOut(REPORT_EXIT_PORT, data)) => {
            let (addr, status) = split_report_exit(le_value(data));
            devices.take_report(mem, addr);
            RawNext::Exit(status)
        }
        Step::Exit(VcpuExit::IoOut(DEBUG_EXIT_PORT, data)) => RawNext::Exit(le_value(data)),
        Step::Exit(_) => RawNext::Continue,
        Step::Interrupted => RawNext::Interrupted,
        Step::Fatal(f) => RawNext::Fatal(f),
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
    let data = &internal.data[..n];
    let mut text = format!(
        "KVM_EXIT_INTERNAL_ERROR suberror {}: {what}",
        internal.suberror
    );
    if internal.suberror == KVM_INTERNAL_ERROR_EMULATION {
        if let Some(bytes) = emulation_failure_bytes(data) {
            text.push_str(&format!("; instruction bytes {bytes}"));
        }
    }
    if let Ok(regs) = vcpu.get_regs() {
        let cpl = vcpu.get_sregs().map(|s| s.cs.dpl).unwrap_or(0);
        text.push_str(&format!(" at rip {:#x} (CPL{cpl})", regs.rip));
    }
    text.push_str(&format!("; data {data:x?}"));
    text
}

/// The instruction bytes of an emulation failure's data, when KVM gave
/// them (`KVM_INTERNAL_ERROR_EMULATION_FLAG_INSTRUCTION_BYTES` in
/// `data[0]`, then `insn_size` and up to 15 bytes packed from `data[1]`,
/// as `struct kvm_run.emulation_failure` lays them out), as hex.
pub(crate) fn emulation_failure_bytes(data: &[u64]) -> Option<String> {
    const FLAG_INSTRUCTION_BYTES: u64 = 1;
    if data.len() < 2 || data[0] & FLAG_INSTRUCTION_BYTES == 0 {
        return None;
    }
    let packed: Vec<u8> = data[1..].iter().flat_map(|w| w.to_le_bytes()).collect();
    let size = usize::from(packed[0]).min(15).min(packed.len() - 1);
    let bytes: Vec<String> = packed[1..=size]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    (!bytes.is_empty()).then(|| bytes.join(" "))
}

#[cfg(test)]
mod tests;
