//! One guest run: build the VM from a validated policy, run the boot vCPU
//! until the guest exits (or crashes, or times out), and collect what it
//! reported.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use guest::protocol::{
    xmm_edit_pattern, Report, DEBUG_EXIT_PORT, MARK_PORT, REPORT_PORT, SNAPSHOT_PORT,
};
use kvm_ioctls::{VcpuExit, VcpuFd, VmFd};
use vm_memory::GuestMemoryMmap;
use vmm_sys_util::signal::{register_signal_handler, Killable, SIGRTMIN};
use xstate::{InitMode, XfeatureMask};

use crate::boot;
use crate::cpuid::{self, CpuidCheck, GuestCpuid};
use crate::devices::{le_value, Devices, PortAction, ReportDelivery, SerialSink};
use crate::error::{Error, Result};
use crate::kvm::HostKvm;
use crate::memory;
use crate::regs::RegisterDump;
use crate::snapshot::save::{SaveContext, Trigger};
use crate::vcpu;
use crate::xstate_manager::{SyncPolicy, SyncStats, XstateManager};

/// A kernel image to boot, with a name for messages.
#[derive(Clone)]
pub struct KernelImage {
    pub name: String,
    pub bytes: std::borrow::Cow<'static, [u8]>,
}

impl KernelImage {
    /// The guest kernel built from `guest/` and embedded at build time.
    pub fn embedded() -> Self {
        Self {
            name: "embedded guest kernel".into(),
            bytes: std::borrow::Cow::Borrowed(crate::GUEST_KERNEL),
        }
    }

    /// A kernel read from a file.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|source| Error::KernelRead {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            name: path.display().to_string(),
            bytes: bytes.into(),
        })
    }
}

/// Everything `vmm run` decides before a VM exists.
pub struct RunConfig {
    pub kernel: KernelImage,
    pub mem_mib: u64,
    /// `--xfeatures`; `None` = everything KVM supports.
    pub xfeatures: Option<String>,
    pub init_xstate: InitMode,
    pub cmdline: String,
    pub serial: SerialSink,
    /// Stop a guest that runs longer than this.
    pub timeout: Option<Duration>,
    /// When the VMM moves the guest's xsave state.
    pub xstate_sync: SyncPolicy,
    /// Benchmark the raw limit: a loop that only re-enters the guest, with
    /// no device model (markers and the exit port excepted).
    pub raw_loop: bool,
    /// Snapshot the guest after this long and stop (needs `snapshot_file`).
    pub snapshot_after: Option<Duration>,
    /// Where a snapshot goes, time-triggered or requested by the guest
    /// through `SNAPSHOT_PORT`. Without it the guest's requests are ignored.
    pub snapshot_file: Option<PathBuf>,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            kernel: KernelImage::embedded(),
            mem_mib: 64,
            xfeatures: None,
            init_xstate: InitMode::Minimal,
            cmdline: String::new(),
            serial: SerialSink::Stdout,
            timeout: Some(Duration::from_secs(600)),
            xstate_sync: SyncPolicy::Lazy,
            raw_loop: false,
            snapshot_after: None,
            snapshot_file: None,
        }
    }
}

/// The xstate policy a run used.
#[derive(Clone, Debug)]
pub struct Policy {
    /// User state KVM can give a guest.
    pub kvm_xcr0: XfeatureMask,
    /// Supervisor state KVM reports in leaf 0xD.1.
    pub kvm_xss: XfeatureMask,
    /// What the guest's CPUID advertises.
    pub xcr0: XfeatureMask,
    pub standard_size: u32,
    pub compacted_size: u32,
    pub hidden_flags: Vec<&'static str>,
    pub init_xstate: InitMode,
    /// What KVM made of the policy's CPUID (set once the vCPU exists).
    pub cpuid_check: Option<CpuidCheck>,
}

/// How the run ended.
#[derive(Clone, Debug)]
pub enum RunEnd {
    /// The guest wrote this to the debug-exit port.
    Exited(u32),
    /// The guest crashed or KVM refused to go on.
    Crashed {
        reason: String,
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
    pub total: u64,
    pub io: u64,
    pub mmio: u64,
}

/// Everything a run produced.
pub struct RunOutcome {
    pub policy: Policy,
    pub end: RunEnd,
    /// The last report the guest handed over, if it was valid.
    pub report: Option<Box<Report>>,
    /// Why a report the guest handed over was refused.
    pub report_errors: Vec<String>,
    pub serial: Vec<u8>,
    pub exits: ExitCounts,
    pub unhandled_ports: u64,
    /// XCR0 as KVM holds it at the end of the run.
    pub final_xcr0: Option<u64>,
    /// The guest's TSC rate (`KVM_GET_TSC_KHZ`), 0 when unknown.
    pub tsc_khz: u64,
    /// Benchmark markers the guest wrote, with when (since the run began).
    pub marks: Vec<(u32, Duration)>,
    /// What the xstate manager did.
    pub xstate_sync: SyncPolicy,
    pub xstate_stats: SyncStats,
    /// Process-visible timings.
    pub setup_time: Duration,
    pub run_time: Duration,
    /// From the start of the run (or restore) to the first exit to user
    /// space: an upper bound of the time to the guest's first instruction.
    pub first_exit: Option<Duration>,
    /// How long writing the snapshot took (completing I/O, reading the
    /// vCPU and RAM, encoding, writing the file), when one was taken.
    pub snapshot_time: Option<Duration>,
}

/// Check a policy against KVM without creating a VM.
pub fn resolve_policy(
    host: &HostKvm,
    xfeatures: Option<&str>,
    init: InitMode,
    tsc_khz: u32,
) -> Result<(Policy, GuestCpuid)> {
    let xcr0 = cpuid::validate_policy(xfeatures, &host.xstate, &host.supported_cpuid)?;
    let guest = cpuid::guest_cpuid(&host.supported_cpuid, &host.xstate, xcr0, tsc_khz)?;
    let policy = Policy {
        kvm_xcr0: host.xstate.supported_xcr0(),
        kvm_xss: host.xstate.info.supported_xss(),
        xcr0,
        standard_size: guest.standard_size,
        compacted_size: guest.compacted_size,
        hidden_flags: guest.hidden_flags.clone(),
        init_xstate: init,
        cpuid_check: None,
    };
    Ok((policy, guest))
}

/// Boot a guest and run it to the end.
pub fn run(config: RunConfig) -> Result<RunOutcome> {
    let start = Instant::now();
    let host = HostKvm::open()?;
    // Validate the policy first: an invalid mask never creates a VM.
    let xcr0 = cpuid::validate_policy(
        config.xfeatures.as_deref(),
        &host.xstate,
        &host.supported_cpuid,
    )?;
    if config.snapshot_after.is_some() && config.snapshot_file.is_none() {
        return Err(Error::Policy(
            "--snapshot-after needs --snapshot-file".into(),
        ));
    }
    // The policy also travels on the command line: where KVM ignores the
    // CPUID table (kvm_pvm) our guest still limits XCR0 to it.
    let cmdline = with_xfeatures_hint(&config.cmdline, xcr0);

    let machine = Machine::create(&host, config.mem_mib)?;
    let kernel = boot::load_kernel(&machine.mem, &config.kernel.bytes, &config.kernel.name)?;
    boot::write_boot_info(&machine.mem, &cmdline)?;

    // The TSC rate is a vCPU property; it goes into the guest's CPUID so the
    // guest converts cycles to time without calibrating.
    let tsc_khz = machine.vcpu.get_tsc_khz().unwrap_or(0);
    let (mut policy, guest_cpuid) = resolve_policy(
        &host,
        config.xfeatures.as_deref(),
        config.init_xstate,
        tsc_khz,
    )?;
    let check = vcpu::configure_boot_vcpu(
        &machine.vcpu,
        &machine.mem,
        &kernel,
        &guest_cpuid,
        &host.xstate.info,
        config.init_xstate,
        host.xsave2_size,
    )?;
    policy.cpuid_check = Some(check);
    let snapshot = match &config.snapshot_file {
        Some(path) => Some(SaveContext::new(
            &host,
            path.clone(),
            config.mem_mib,
            cmdline,
            &policy,
            config.xstate_sync,
            tsc_khz,
            guest_cpuid.cpuid.as_slice().to_vec(),
        )?),
        None => None,
    };
    let setup_time = start.elapsed();
    execute(Launch {
        machine,
        devices: Devices::new(config.serial),
        earlier_serial: Vec::new(),
        xstate: XstateManager::new(
            config.xstate_sync,
            host.xstate.info,
            policy.xcr0,
            host.xsave2_size,
        ),
        policy,
        tsc_khz,
        timeout: config.timeout,
        snapshot_after: config.snapshot_after,
        snapshot,
        raw: config.raw_loop,
        start,
        setup_time,
    })
}

/// A VM with guest RAM and its boot vCPU: what booting and restoring share.
pub(crate) struct Machine {
    /// Kept open for as long as the vCPU runs.
    pub vm: VmFd,
    pub vcpu: VcpuFd,
    pub mem: GuestMemoryMmap,
}

impl Machine {
    /// Create the VM, its RAM (`mem_mib`, slot 0 from address 0) and vCPU 0.
    pub fn create(host: &HostKvm, mem_mib: u64) -> Result<Self> {
        let vm = host.kvm.create_vm().map_err(Error::kvm("KVM_CREATE_VM"))?;
        // Intel VMX needs these three pages for real-mode emulation; harmless elsewhere.
        vm.set_tss_address(0xfffb_d000)
            .map_err(Error::kvm("KVM_SET_TSS_ADDR"))?;
        let mem = memory::create(&vm, mem_mib)?;
        let vcpu = vm.create_vcpu(0).map_err(Error::kvm("KVM_CREATE_VCPU"))?;
        Ok(Self { vm, vcpu, mem })
    }
}

/// A configured machine, ready to run.
pub(crate) struct Launch {
    pub machine: Machine,
    pub devices: Devices,
    /// Serial output from before a restore (not printed again).
    pub earlier_serial: Vec<u8>,
    pub xstate: XstateManager,
    pub policy: Policy,
    pub tsc_khz: u32,
    pub timeout: Option<Duration>,
    pub snapshot_after: Option<Duration>,
    pub snapshot: Option<SaveContext>,
    pub raw: bool,
    /// When the run (or restore) began.
    pub start: Instant,
    pub setup_time: Duration,
}

/// Run a configured machine to the end and collect what it produced.
pub(crate) fn execute(l: Launch) -> Result<RunOutcome> {
    // The VM stays open until the run's results are read.
    let Machine { vm: _vm, vcpu, mem } = l.machine;
    let xstate_sync = l.xstate.policy();
    let run_start = Instant::now();
    let runner = VcpuRunner {
        vcpu,
        mem,
        devices: l.devices,
        exits: ExitCounts::default(),
        xstate: l.xstate,
        marks: Vec::new(),
        start: run_start,
        origin: l.start,
        first_exit: None,
        snapshot_time: None,
        raw: l.raw,
        snapshot: l.snapshot,
    };
    let (runner, end) = run_with_timeout(runner, l.timeout, l.snapshot_after)?;
    let run_time = run_start.elapsed();

    let final_xcr0 = vcpu::get_xcr0(&runner.vcpu).ok();
    let mut report = None;
    let mut report_errors = Vec::new();
    for d in runner.devices.reports {
        match d {
            ReportDelivery::Accepted(r) => report = Some(r),
            ReportDelivery::Rejected(e) => report_errors.push(e),
        }
    }
    let mut serial = l.earlier_serial;
    serial.extend_from_slice(&runner.devices.serial.writer().captured);
    Ok(RunOutcome {
        policy: l.policy,
        end,
        report,
        report_errors,
        serial,
        exits: runner.exits,
        unhandled_ports: runner.devices.unhandled_ports,
        final_xcr0,
        tsc_khz: l.tsc_khz as u64,
        marks: runner.marks,
        xstate_sync,
        xstate_stats: runner.xstate.stats(),
        setup_time: l.setup_time,
        run_time,
        first_exit: runner.first_exit,
        snapshot_time: runner.snapshot_time,
    })
}

/// Append `xfeatures=MASK` (see `guest::protocol`) unless the caller set one.
fn with_xfeatures_hint(cmdline: &str, xcr0: XfeatureMask) -> String {
    if cmdline
        .split_whitespace()
        .any(|w| w.starts_with("xfeatures="))
    {
        return cmdline.to_string();
    }
    let hint = format!("xfeatures={:#x}", xcr0.bits());
    if cmdline.is_empty() {
        hint
    } else {
        format!("{cmdline} {hint}")
    }
}

struct VcpuRunner {
    vcpu: VcpuFd,
    mem: GuestMemoryMmap,
    devices: Devices,
    exits: ExitCounts,
    xstate: XstateManager,
    marks: Vec<(u32, Duration)>,
    start: Instant,
    /// When the run or restore began (for `first_exit`).
    origin: Instant,
    first_exit: Option<Duration>,
    snapshot_time: Option<Duration>,
    raw: bool,
    /// Where and how to write a snapshot, when one may be taken.
    snapshot: Option<SaveContext>,
}

extern "C" fn kick_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

fn kick_signal() -> libc::c_int {
    SIGRTMIN()
}

/// Why the VMM interrupts the vCPU thread (`VcpuRunner::run_loop`'s `stop`).
const STOP_NONE: u8 = 0;
const STOP_TIMEOUT: u8 = 1;
const STOP_SNAPSHOT: u8 = 2;

/// Run the vCPU on its own thread; interrupt it with a signal when time is
/// up or a time-triggered snapshot is due.
fn run_with_timeout(
    runner: VcpuRunner,
    timeout: Option<Duration>,
    snapshot_after: Option<Duration>,
) -> Result<(VcpuRunner, RunEnd)> {
    let snapshot_after = snapshot_after.filter(|_| runner.snapshot.is_some());
    if timeout.is_none() && snapshot_after.is_none() {
        let mut runner = runner;
        let end = runner.run_loop(&AtomicU8::new(STOP_NONE))?;
        return Ok((runner, end));
    }
    // The handler does nothing: its only job is to make KVM_RUN return EINTR.
    register_signal_handler(kick_signal(), kick_handler)
        .map_err(|e| Error::Guest(format!("cannot install the vCPU kick signal handler: {e}")))?;
    let stop = Arc::new(AtomicU8::new(STOP_NONE));
    let (tx, rx) = mpsc::channel();
    let thread_stop = stop.clone();
    let handle = std::thread::Builder::new()
        .name("vcpu0".into())
        .spawn(move || {
            let mut runner = runner;
            let end = runner.run_loop(&thread_stop);
            let _ = tx.send(());
            (runner, end)
        })
        .map_err(Error::Io)?;
    let begin = Instant::now();
    // The first deadline to pass decides why the vCPU is stopped.
    let deadline = match (snapshot_after, timeout) {
        (Some(s), Some(t)) if t <= s => Some((t, STOP_TIMEOUT)),
        (Some(s), _) => Some((s, STOP_SNAPSHOT)),
        (None, Some(t)) => Some((t, STOP_TIMEOUT)),
        (None, None) => None,
    };
    let mut timed_out = false;
    if let Some((after, why)) = deadline {
        if rx.recv_timeout(after).is_err() {
            timed_out = why == STOP_TIMEOUT;
            stop.store(why, Ordering::SeqCst);
            // Kick until the thread notices: a signal that lands outside
            // KVM_RUN is simply lost, so repeat. A snapshot being written
            // meanwhile is not disturbed (the handler does nothing and
            // writes retry on EINTR). After a snapshot is due, the timeout
            // still applies to writing it.
            let limit = timeout.map(|t| begin + t);
            loop {
                match rx.recv_timeout(Duration::from_millis(10)) {
                    Ok(()) => break,
                    Err(_) if handle.is_finished() => break,
                    Err(_) => {}
                }
                if why == STOP_SNAPSHOT && limit.is_some_and(|l| Instant::now() >= l) {
                    timed_out = true;
                    stop.store(STOP_TIMEOUT, Ordering::SeqCst);
                }
                let _ = handle.kill(kick_signal());
            }
        }
    } else {
        let _ = rx.recv();
    }
    let (runner, end) = handle
        .join()
        .map_err(|_| Error::Guest("the vCPU thread panicked".into()))?;
    let end = end?;
    if timed_out && !matches!(end, RunEnd::Snapshotted(_)) {
        return Ok((runner, RunEnd::TimedOut(timeout.unwrap_or_default())));
    }
    Ok((runner, end))
}

impl VcpuRunner {
    fn run_loop(&mut self, stop: &AtomicU8) -> Result<RunEnd> {
        if self.raw {
            return self.raw_loop(stop);
        }
        loop {
            match stop.load(Ordering::Relaxed) {
                STOP_NONE => {}
                STOP_SNAPSHOT => return self.snapshot(Trigger::Time),
                _ => return Ok(RunEnd::TimedOut(Duration::ZERO)),
            }
            self.xstate.before_run(&self.vcpu)?;
            let exit = self.vcpu.run();
            if self.first_exit.is_none() {
                self.first_exit = Some(self.origin.elapsed());
            }
            let mut snapshot_requested = false;
            let action = match exit {
                Ok(VcpuExit::IoOut(SNAPSHOT_PORT, _)) => {
                    self.exits.io += 1;
                    if self.snapshot.is_some() {
                        snapshot_requested = true;
                    } else {
                        // No snapshot file: nothing decodes the port.
                        self.devices.unhandled_ports += 1;
                    }
                    PortAction::Continue
                }
                Ok(VcpuExit::IoOut(port, data)) => {
                    self.exits.io += 1;
                    self.devices.port_write(&self.mem, port, data)
                }
                Ok(VcpuExit::IoIn(port, data)) => {
                    self.exits.io += 1;
                    self.devices.port_read(port, data);
                    PortAction::Continue
                }
                Ok(VcpuExit::MmioRead(_, data)) => {
                    self.exits.mmio += 1;
                    data.fill(0xff);
                    PortAction::Continue
                }
                Ok(VcpuExit::MmioWrite(..)) => {
                    self.exits.mmio += 1;
                    PortAction::Continue
                }
                Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => continue,
                Err(e) => return Ok(self.crash(format!("KVM_RUN failed: {e}"))),
                Ok(VcpuExit::InternalError) => {
                    let reason = internal_error(&mut self.vcpu);
                    return Ok(self.crash(reason));
                }
                Ok(other) => {
                    let reason = describe_fatal(&other);
                    return Ok(self.crash(reason));
                }
            };
            self.exits.total += 1;
            self.xstate.on_exit(&self.vcpu)?;
            match action {
                PortAction::Continue => {}
                PortAction::Exit(status) => return Ok(RunEnd::Exited(status)),
                PortAction::Mark(v) => self.marks.push((v, self.start.elapsed())),
                PortAction::EditXmm(reg) => {
                    let reg = (reg & 15) as usize;
                    self.xstate
                        .set_xmm(&self.vcpu, reg, xmm_edit_pattern(reg as u32))?;
                }
            }
            if snapshot_requested {
                return self.snapshot(Trigger::Guest);
            }
        }
    }

    /// Write a snapshot and end the run. Called between exits only: the
    /// save completes pending I/O first (`immediate_exit`).
    fn snapshot(&mut self, trigger: Trigger) -> Result<RunEnd> {
        let ctx = self
            .snapshot
            .as_ref()
            .ok_or_else(|| Error::Guest("a snapshot was due but no snapshot file is set".into()))?;
        let began = Instant::now();
        let path = crate::snapshot::save::save(
            ctx,
            trigger,
            &mut self.vcpu,
            &self.mem,
            &mut self.xstate,
            &self.devices,
            self.exits.total,
            self.start.elapsed(),
        )?;
        self.snapshot_time = Some(began.elapsed());
        Ok(RunEnd::Snapshotted(path))
    }

    /// The raw limit: re-enter at once on every exit. Only the exit port
    /// (to stop), benchmark markers (to time rows) and the report port (once,
    /// at the end) are looked at.
    fn raw_loop(&mut self, stop: &AtomicU8) -> Result<RunEnd> {
        loop {
            match self.vcpu.run() {
                Ok(VcpuExit::IoOut(MARK_PORT, data)) => {
                    self.marks.push((le_value(data), self.start.elapsed()));
                }
                Ok(VcpuExit::IoOut(REPORT_PORT, data)) => {
                    // Once, at the end: the rows are in the report.
                    self.devices.port_write(&self.mem, REPORT_PORT, data);
                }
                Ok(VcpuExit::IoOut(DEBUG_EXIT_PORT, data)) => {
                    return Ok(RunEnd::Exited(le_value(data)));
                }
                Ok(
                    VcpuExit::IoOut(..)
                    | VcpuExit::IoIn(..)
                    | VcpuExit::MmioRead(..)
                    | VcpuExit::MmioWrite(..),
                ) => {}
                Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                    if stop.load(Ordering::Relaxed) != STOP_NONE {
                        return Ok(RunEnd::TimedOut(Duration::ZERO));
                    }
                    continue;
                }
                Err(e) => return Ok(self.crash(format!("KVM_RUN failed: {e}"))),
                Ok(VcpuExit::InternalError) => {
                    let reason = internal_error(&mut self.vcpu);
                    return Ok(self.crash(reason));
                }
                Ok(other) => {
                    let reason = describe_fatal(&other);
                    return Ok(self.crash(reason));
                }
            }
            self.exits.total += 1;
        }
    }

    fn crash(&self, reason: String) -> RunEnd {
        RunEnd::Crashed {
            reason,
            dump: Box::new(RegisterDump::capture(&self.vcpu)),
        }
    }
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
        1 => "emulation failure (an instruction KVM's emulator cannot run, e.g. VEX at emulated CPL0)",
        2 => "simultaneous exceptions",
        3 => "delivery event failure",
        4 => "unexpected exit reason",
        _ => "unknown suberror",
    };
    let n = (internal.ndata as usize).min(internal.data.len());
    format!(
        "KVM_EXIT_INTERNAL_ERROR suberror {}: {what}; data {:x?}",
        internal.suberror,
        &internal.data[..n]
    )
}
