//! One guest run, start to end: boot a kernel into a new machine
//! ([`run`]), or run a machine restore has filled ([`execute`]), under the
//! supervisor, and collect what the guest reported.

use std::path::Path;
use std::time::{Duration, Instant};

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use xstate::XfeatureMask;

use super::config::{RunConfig, Xfeatures};
use super::outcome::{xcr0_violation, ExitCounts, RunEnd, RunOutcome, VcpuOutcome};
use super::runner::{LoopExit, VcpuRunner};
use crate::arch::boot::{self, BootEntry};
use crate::arch::layout::{BOOT_TSC_ADDR, MAX_MEM_MIB, MIN_MEM_MIB};
use crate::arch::mptable;
use crate::cpuid::{validate_policy, Policy};
use crate::devices::{Devices, FirstN, MAX_MARKS, SERIAL_CAPTURE_MAX};
use crate::error::{Error, MemoryError, Result};
use crate::kvm::HostKvm;
use crate::snapshot::save::{self, PausedSmp, PausedVcpu, SaveContext, Trigger};
use crate::vstate::dump::RegisterDump;
use crate::vstate::machine::{Ap, Machine};
use crate::vstate::smp;
use crate::vstate::stop::{
    supervise, supervise_all_with, Deadlines, StopFlag, StopReason, VcpuBody,
};
use crate::vstate::vcpu;
use crate::xstate_manager::XstateManager;

/// Boot a guest and run it to the end.
pub fn run(mut config: RunConfig) -> Result<RunOutcome> {
    let start = Instant::now();
    // The image is checked first: a bad one never opens KVM, let alone
    // creates a VM it could corrupt.
    let ram_bytes = ram_bytes(config.mem_mib)?;
    let plan = boot::check_kernel(&config.kernel.bytes, &config.kernel.name, ram_bytes)?;
    // Dynamic xfeatures (AMX) need the host's permission before KVM's table
    // and KVM_CAP_XSAVE2 are read and before any vCPU exists; a resolved
    // `--xfeatures` asked for it already.
    if matches!(config.xfeatures, Xfeatures::Kvm) {
        crate::arch::amx::permit_guest(None)?;
    }
    check_snapshot_options(config.snapshot_after, config.snapshot_file.as_deref())?;
    if let Some(path) = &config.snapshot_file {
        save::check_destination(path, config.snapshot_force)?;
    }
    // The policy also travels on the command line: where KVM ignores the
    // CPUID table (kvm_pvm) our guest still limits XCR0 to it. That word is
    // the VMM's alone.
    check_cmdline_words(&config.cmdline)?;
    // The VM and its vCPUs are built on this thread while another reads
    // KVM's CPUID table and then loads the kernel into the RAM: none of it
    // depends on the table, and the two halves take about as long (see
    // `HostKvm::open_overlapping`).
    let ram = crate::vstate::machine::allocate_ram_backed(config.mem_mib, config.hugepages)?;
    // Before anything touches guest RAM, so the kernel load faults in huge
    // pages already (hugetlbfs RAM is huge pages already).
    let hugepages = config.hugepages.map(|b| {
        let advised = match b {
            crate::vstate::RamBacking::Thp => {
                crate::vstate::machine::advise_hugepages(&ram).map_err(|e| e.to_string())
            }
            crate::vstate::RamBacking::Hugetlbfs => Ok(ram_range(&ram)),
        };
        (b, advised)
    });
    let build = |kvm: &kvm_ioctls::Kvm| {
        // Bad counts are refused before any VM exists.
        smp::check_vcpus(config.vcpus, smp::kvm_max_vcpus(kvm))?;
        let irqchip = smp::Irqchip::for_new_vm(kvm, config.vcpus);
        Machine::create_smp_on(kvm, ram.clone(), config.vcpus, irqchip)
    };
    let load = || {
        // Best effort: without it the copy faults the pages in one by
        // one (see `populate_for_write`).
        for seg in &plan.segments {
            let _ = crate::vstate::machine::populate_for_write(
                &ram,
                vm_memory::GuestAddress(seg.paddr),
                seg.filesz,
            );
        }
        Ok(boot::load_kernel(
            &ram,
            &config.kernel.bytes,
            &config.kernel.name,
            &plan,
        )?)
    };
    let (host, (mut machine, ap_fds), kernel, xcr0) =
        match std::mem::replace(&mut config.xfeatures, Xfeatures::Kvm) {
            Xfeatures::Kvm => {
                let (host, built, kernel) = HostKvm::open_overlapping(build, load)?;
                // Validated against KVM's table once it is read: an invalid
                // table never runs a vCPU (the VM built meanwhile is dropped).
                let xcr0 = validate_policy(None, &host.xstate, &host.supported_cpuid)?;
                (host, built, kernel, xcr0)
            }
            Xfeatures::Resolved(r) => {
                let built = build(&r.host.kvm)?;
                let kernel = load()?;
                (r.host, built, kernel, r.resolution.result)
            }
        };
    // The CPU count reaches the guest through the MP table (below), as
    // on a PC; a `cpus=` word of the caller's still overrides it.
    let cmdline = with_xfeatures_hint(&config.cmdline, xcr0);
    boot::write_boot_info(&machine.mem, &cmdline)?;
    let entry = kernel.boot_entry(config.entry);

    // The TSC rate is a vCPU property; it goes into the guest's CPUID so the
    // guest converts cycles to time without calibrating.
    let tsc_khz = machine.vcpu.get_tsc_khz().unwrap_or(0);
    let (mut policy, guest_cpuid) = Policy::resolve(&host, xcr0, config.init_xstate, tsc_khz)?;
    let check = vcpu::configure_boot_vcpu(
        &machine.vcpu,
        &machine.mem,
        entry,
        &guest_cpuid,
        &host.xstate.info,
        config.init_xstate,
        host.xsave2_size,
    )?;
    policy.cpuid_check = Some(check);
    if config.vcpus > 1 {
        let leaf1 = guest_cpuid
            .cpuid
            .as_slice()
            .iter()
            .find(|e| e.function == 1 && e.index == 0)
            .map(|e| mptable::CpuSignature {
                eax: e.eax,
                edx: e.edx,
            })
            .unwrap_or_default();
        mptable::write(
            &machine.mem,
            config.vcpus,
            leaf1,
            machine.irqchip.has_ioapic(),
        )?;
    }
    let mut ap_start = None;
    for (i, vcpu) in ap_fds.into_iter().enumerate() {
        let index = i as u32 + 1;
        vcpu::configure_ap(
            &vcpu,
            index,
            &guest_cpuid,
            &host.xstate.info,
            config.init_xstate,
            host.xsave2_size,
        )?;
        ap_start = Some(smp::hold_for_sipi(&vcpu, index)?);
        machine.aps.push(Ap {
            vcpu,
            xstate: XstateManager::new(
                config.xstate_sync,
                host.xstate.info,
                policy.xcr0,
                host.xsave2_size,
            ),
        });
    }
    let snapshot = match &config.snapshot_file {
        Some(path) => Some(SaveContext {
            force: config.snapshot_force,
            ..SaveContext::new(
                &host,
                path.clone(),
                config.mem_mib,
                cmdline,
                &policy,
                config.xstate_sync,
                tsc_khz,
                guest_cpuid.cpuid.as_slice().to_vec(),
            )?
        }),
        None => None,
    };
    let boot = BootClock::new(entry, &machine.vcpu);
    let mut devices = Devices::new(config.serial);
    if let Some(start_native) = config.interleave.take() {
        devices.native = Some(start_native(u64::from(tsc_khz)).map_err(Error::Argument)?);
    }
    let setup_time = start.elapsed();
    let mut outcome = execute(Launch {
        machine,
        devices,
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
        boot: Some(boot),
    })?;
    outcome.hugepages = hugepages.map(|(backing, advised)| {
        let (host, len) = advised
            .as_ref()
            .copied()
            .unwrap_or_else(|_| ram_range(&ram));
        super::outcome::HugePages {
            backing,
            advised: advised.map(|_| ()),
            ram_kib: config.mem_mib << 10,
            anon_huge_kib: crate::vstate::machine::anon_huge_kib(host, len).ok(),
            hugetlb_kib: (backing == crate::vstate::RamBacking::Hugetlbfs)
                .then(|| crate::vstate::machine::hugetlb_kib(host, len).ok())
                .flatten(),
            // The native side's: the tool that started it reads it.
            native: None,
        }
    });
    outcome.ap_start = ap_start;
    drop(ram);
    Ok(outcome)
}

/// The host address and length of guest RAM's (single) mapping.
fn ram_range(mem: &vm_memory::GuestMemoryMmap) -> (u64, u64) {
    use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};
    mem.iter()
        .next()
        .and_then(|r| {
            let host = mem.get_host_address(r.start_addr()).ok()?;
            Some((host as u64, r.len()))
        })
        .unwrap_or((0, 0))
}

/// A TSC anchor read within this is taken as it is ([`BootClock::new`]).
const ANCHOR_WINDOW: Duration = Duration::from_micros(50);
/// Reads of the anchor at most.
const ANCHOR_TRIES: usize = 4;

/// How a booted guest was started, and what places its first instruction
/// on the VMM's clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BootClock {
    /// The entry the vCPU started at.
    entry: BootEntry,
    /// The guest's TSC (`KVM_GET_MSRS` IA32_TSC) and the VMM's clock read
    /// together before the first `KVM_RUN`; `None` when KVM would not say.
    anchor: Option<(Instant, u64)>,
}

impl BootClock {
    /// Read the anchor: the guest TSC runs at `tsc_khz` from here on
    /// whether or not the vCPU runs, so one pair converts any later guest
    /// TSC value into the VMM's time.
    ///
    /// The TSC read is bracketed by two clock reads and placed at their
    /// midpoint: a thread preempted between reading one and the other
    /// (a loaded host) would otherwise put every later guest time late by
    /// the preemption. A bracket wider than [`ANCHOR_WINDOW`] is read again
    /// (a few times at most), keeping the tightest.
    fn new(entry: BootEntry, vcpu: &kvm_ioctls::VcpuFd) -> Self {
        let mut anchor: Option<(Instant, Duration, u64)> = None;
        for _ in 0..ANCHOR_TRIES {
            let before = Instant::now();
            let Ok((values, _)) = vcpu::get_msrs(vcpu, &[MSR_IA32_TSC]) else {
                break;
            };
            let window = before.elapsed();
            let Some(&(_, tsc)) = values.first() else {
                break;
            };
            if anchor.is_none_or(|(_, best, _)| window < best) {
                anchor = Some((before + window / 2, window, tsc));
            }
            if window <= ANCHOR_WINDOW {
                break;
            }
        }
        Self {
            entry,
            anchor: anchor.map(|(at, _, tsc)| (at, tsc)),
        }
    }

    /// When the guest ran its first instruction, after `start`: the TSC
    /// the direct entry wrote at [`BOOT_TSC_ADDR`] (0: not written, or
    /// the PVH entry, which has no slot), on the anchor's clock.
    fn first_instruction(
        &self,
        mem: &GuestMemoryMmap,
        start: Instant,
        tsc_khz: u32,
    ) -> Option<Duration> {
        let BootEntry::Direct64(_) = self.entry else {
            return None;
        };
        let (at, anchor_tsc) = self.anchor?;
        let tsc: u64 = mem.read_obj(GuestAddress(BOOT_TSC_ADDR)).ok()?;
        if tsc == 0 || tsc_khz == 0 {
            return None;
        }
        let ticks = tsc.checked_sub(anchor_tsc)?;
        let after_anchor =
            Duration::from_nanos(ticks.saturating_mul(1_000_000) / u64::from(tsc_khz));
        Some((at + after_anchor).saturating_duration_since(start))
    }
}

/// `--mem` in bytes, refused when outside what the memory map allows.
fn ram_bytes(mem_mib: u64) -> Result<u64> {
    if !(MIN_MEM_MIB..=MAX_MEM_MIB).contains(&mem_mib) {
        return Err(MemoryError::SizeOutOfRange(mem_mib).into());
    }
    Ok(mem_mib << 20)
}

/// A time-triggered snapshot needs somewhere to go: refused before any VM
/// exists.
pub(crate) fn check_snapshot_options(after: Option<Duration>, file: Option<&Path>) -> Result<()> {
    if after.is_some() && file.is_none() {
        return Err(Error::Argument(
            "--snapshot-after needs --snapshot-file".into(),
        ));
    }
    Ok(())
}

/// A configured machine, ready to run: what booting and restoring hand to
/// [`execute`].
pub(crate) struct Launch {
    /// VM, RAM and vCPU, loaded.
    pub machine: Machine,
    /// The port bus.
    pub devices: Devices,
    /// Serial output from before a restore (not printed again).
    pub earlier_serial: Vec<u8>,
    /// The guest's xsave state and its sync policy.
    pub xstate: XstateManager,
    /// The xstate policy, for the outcome.
    pub policy: Policy,
    /// The guest's TSC rate.
    pub tsc_khz: u32,
    /// Stop the guest after this long.
    pub timeout: Option<Duration>,
    /// Snapshot the guest after this long (needs `snapshot`).
    pub snapshot_after: Option<Duration>,
    /// Where and how to write a snapshot, when one may be taken.
    pub snapshot: Option<SaveContext>,
    /// Run the raw benchmark loop.
    pub raw: bool,
    /// When the run (or restore) began.
    pub start: Instant,
    /// How long building the machine took.
    pub setup_time: Duration,
    /// How a booted guest was started (`None` after a restore).
    pub boot: Option<BootClock>,
}

/// Run a configured machine to the end and collect what it produced.
pub(crate) fn execute(l: Launch) -> Result<RunOutcome> {
    if !l.machine.aps.is_empty() {
        return execute_smp(l);
    }
    // The VM stays open until the run's results are read.
    let Machine {
        vm: _vm, vcpu, mem, ..
    } = l.machine;
    let xstate_sync = l.xstate.policy();
    let deadlines = Deadlines {
        timeout: l.timeout,
        // Only armed when a snapshot can be written.
        snapshot_after: l.snapshot_after.filter(|_| l.snapshot.is_some()),
    };
    let run_start = Instant::now();
    let mut devices = l.devices;
    devices.snapshots = l.snapshot.is_some();
    let runner = VcpuRunner {
        vcpu,
        mem,
        devices,
        exits: ExitCounts::default(),
        xstate: l.xstate,
        marks: FirstN::new(MAX_MARKS),
        start: run_start,
        origin: l.start,
        first_exit: None,
        snapshot_time: None,
        raw: l.raw,
        snapshot: l.snapshot,
        snapshot_errors: Vec::new(),
        pausable: false,
        xcr0_since_run: None,
    };
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
    let run_time = run_start.elapsed();

    let first_instruction = l
        .boot
        .and_then(|b| b.first_instruction(&runner.mem, l.start, l.tsc_khz));
    let mut runner = runner;
    let final_xcr0 = runner.xcr0().ok();
    // The last check of the guest's XCR0: a guest that left the policy and
    // then only spun, or exited, still broke it. A crash keeps its own
    // diagnosis (and register dump).
    if let (Some(xcr0), RunEnd::Exited(_) | RunEnd::TimedOut(_)) = (final_xcr0, &end) {
        if let Some(why) = xcr0_violation(xcr0, l.policy.xcr0) {
            end = RunEnd::ProtocolViolation(why);
        }
    }
    // Where the guest was, once the end is known to be the timeout (a
    // violation found above ends it otherwise).
    let stopped_at =
        matches!(end, RunEnd::TimedOut(_)).then(|| Box::new(RegisterDump::capture(&runner.vcpu)));
    let devices = runner.devices;
    let writer = devices.serial.writer();
    let mut serial = l.earlier_serial;
    serial.extend_from_slice(writer.captured());
    let mut serial_bytes_dropped = writer.dropped();
    if serial.len() > SERIAL_CAPTURE_MAX {
        let cut = serial.len() - SERIAL_CAPTURE_MAX;
        serial.drain(..cut);
        serial_bytes_dropped += cut as u64;
    }
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
        irqchip: smp::Irqchip::Absent,
    })
}

/// One vCPU thread's result: its runner (with what it collected), why its
/// loop returned, and whether it was only stopped because another ended
/// the run.
type VcpuResult = (VcpuRunner, Result<LoopExit>, bool);

/// [`execute`] with several vCPUs: one thread and one runner (devices,
/// xstate manager, exit counters) per vCPU; the first vCPU to end the run
/// (the boot processor's exit, any vCPU's crash, exception or protocol
/// violation) stops the others, as does the timeout.
fn execute_smp(l: Launch) -> Result<RunOutcome> {
    // The VM stays open until the run's results are read.
    let Machine {
        vm,
        vcpu,
        mem,
        aps,
        irqchip,
    } = l.machine;
    let serial_sink = l.devices.serial.writer().sink();
    let xstate_sync = l.xstate.policy();
    let run_start = Instant::now();
    // With somewhere to write it, a snapshot pauses every vCPU first.
    let pausable = l.snapshot.is_some();
    let runner = |vcpu, mut devices: Devices, xstate| VcpuRunner {
        vcpu,
        mem: mem.clone(),
        devices: {
            devices.snapshots = pausable;
            devices
        },
        exits: ExitCounts::default(),
        xstate,
        marks: FirstN::new(MAX_MARKS),
        start: run_start,
        origin: l.start,
        first_exit: None,
        snapshot_time: None,
        raw: l.raw,
        snapshot: None,
        snapshot_errors: Vec::new(),
        pausable,
        xcr0_since_run: None,
    };
    let mut runners = vec![runner(vcpu, l.devices, l.xstate)];
    for ap in aps {
        runners.push(runner(ap.vcpu, Devices::new(serial_sink), ap.xstate));
    }
    let deadline = l.timeout.and_then(|t| run_start.checked_add(t));
    let mut snapshot_after = l.snapshot_after.filter(|_| pausable);
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
            (paused, own_end, timed_out, l.snapshot.as_ref())
        else {
            break (results, ended_by, timed_out);
        };
        let machine = SmpMachine {
            vm: &vm,
            irqchip,
            mem: &mem,
        };
        match snapshot_smp(ctx, trigger, machine, &mut results, &l.policy, run_start)? {
            SmpSaved::Written(path, took) => {
                snapshot_time = Some(took);
                end_with(&mut results, who, RunEnd::Snapshotted(path));
                break (results, Some(who), false);
            }
            SmpSaved::Violation(i, why) => {
                end_with(&mut results, i, RunEnd::ProtocolViolation(why));
                break (results, Some(i), false);
            }
            SmpSaved::NotWritten(e) => {
                // Said and kept up to a bound, and the guest goes on.
                if snapshot_errors.len() < super::runner::MAX_SNAPSHOT_ERRORS {
                    eprintln!("vmm: {e}; the guest was resumed");
                    snapshot_errors.push(e.to_string());
                }
                runners = results.into_iter().map(|(r, _, _)| r).collect();
            }
        }
    };
    let run_time = run_start.elapsed();

    let mut vcpus = Vec::with_capacity(results.len());
    let mut end = None;
    let mut serial = l.earlier_serial;
    let mut serial_bytes_dropped = 0;
    let mut exits = ExitCounts::default();
    let mut stats = crate::xstate_manager::SyncStats::default();
    let mut marks = Vec::new();
    let mut marks_dropped = 0;
    let mut first_exit = None;
    let mut bsp_devices = None;
    let mut stopped_at = None;
    let timeout = (timed_out && ended_by.is_none())
        .then_some(l.timeout)
        .flatten();
    for (i, (mut runner, result, stopped)) in results.into_iter().enumerate() {
        let mut own_end = if stopped {
            None
        } else {
            Some(result?.into_end(timeout))
        };
        let final_xcr0 = runner.xcr0().ok();
        if let (Some(xcr0), Some(RunEnd::Exited(_))) = (final_xcr0, &own_end) {
            if let Some(why) = xcr0_violation(xcr0, l.policy.xcr0) {
                own_end = Some(RunEnd::ProtocolViolation(why));
            }
        }
        if ended_by == Some(i) {
            end = own_end.clone();
        }
        exits.total += runner.exits.total;
        exits.io += runner.exits.io;
        exits.mmio += runner.exits.mmio;
        let s = runner.xstate.stats();
        stats.fetches += s.fetches;
        stats.writebacks += s.writebacks;
        stats.standard_bytes += s.standard_bytes;
        stats.compacted_bytes += s.compacted_bytes;
        let writer = runner.devices.serial.writer();
        serial.extend_from_slice(writer.captured());
        serial_bytes_dropped += writer.dropped();
        if i == 0 {
            if timed_out && ended_by.is_none() {
                stopped_at = Some(Box::new(RegisterDump::capture(&runner.vcpu)));
            }
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
                    smp::VcpuPhases::new(l.start, entered, runner.first_exit, left)
                })
                .unwrap_or_default(),
        });
        if i == 0 {
            bsp_devices = Some(devices);
        }
    }
    let devices = bsp_devices.ok_or(crate::error::VcpuError::ThreadPanicked)?;
    // No vCPU ended the run itself: the supervisor stopped every one.
    let end = match end {
        Some(end) if !(timed_out && ended_by.is_none()) => end,
        _ => RunEnd::TimedOut(l.timeout.unwrap_or_default()),
    };
    let ended_by = ended_by.unwrap_or(0);
    if serial.len() > SERIAL_CAPTURE_MAX {
        let cut = serial.len() - SERIAL_CAPTURE_MAX;
        serial.drain(..cut);
        serial_bytes_dropped += cut as u64;
    }
    // The report of the vCPU that ended the run when it handed one over
    // (an AP's exception), else the boot processor's.
    let report = vcpus
        .get(ended_by)
        .and_then(|v| v.report.clone())
        .or_else(|| devices.report.clone());
    Ok(RunOutcome {
        policy: l.policy,
        end,
        report,
        reports_dropped: devices.reports_dropped,
        report_errors_dropped: devices.report_errors.dropped(),
        report_errors: devices.report_errors.into_items(),
        requests_refused: devices.refused_requests.total(),
        refused_requests: devices.refused_requests.into_items(),
        serial,
        serial_bytes_dropped,
        exits,
        unhandled_ports: vcpus.iter().map(|v| v.unhandled_ports).sum(),
        final_xcr0: vcpus.first().and_then(|v| v.final_xcr0),
        tsc_khz: l.tsc_khz as u64,
        marks_dropped,
        marks,
        xstate_sync,
        xstate_stats: stats,
        setup_time: l.setup_time,
        run_time,
        first_exit,
        snapshot_time,
        snapshot_errors,
        native: devices.native,
        hugepages: None,
        first_instruction: l
            .boot
            .and_then(|b| b.first_instruction(&mem, l.start, l.tsc_khz)),
        boot_entry: l.boot.map(|b| b.entry.name()),
        start_clock_monotonic_ns: monotonic_ns(l.start),
        ended_by: ended_by as u32,
        vcpus,
        ap_start: None,
        irqchip,
        stopped_at,
    })
}

/// The IA32_TSC MSR: the guest's time-stamp counter.
const MSR_IA32_TSC: u32 = 0x10;

/// `start` as a `CLOCK_MONOTONIC` reading in nanoseconds (what `Instant`
/// measures on Linux), so another process can place this run on its own
/// clock: `vmm bench startup` subtracts the moment it spawned us.
fn monotonic_ns(start: Instant) -> u64 {
    let now = Instant::now();
    monotonic_now_ns().saturating_sub(now.saturating_duration_since(start).as_nanos() as u64)
}

/// `CLOCK_MONOTONIC` now, in nanoseconds (0 if the clock cannot be read).
pub(crate) fn monotonic_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always
    // exists on Linux.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if r != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// What an attempt to snapshot a paused SMP machine gave.
enum SmpSaved {
    /// Written to this path, in this long.
    Written(std::path::PathBuf, Duration),
    /// vCPU `.0`'s XCR0 left the policy: the run ends there instead.
    Violation(usize, String),
    /// The file could not be written; the guest may go on.
    NotWritten(Error),
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

/// Refuse command-line words the VMM owns (`guest::protocol::VMM_OWNED_WORDS`):
/// a caller's `xfeatures=` would replace the policy hint.
pub fn check_cmdline_words(cmdline: &str) -> Result<()> {
    match guest::protocol::vmm_owned_word(cmdline) {
        Some(word) => Err(Error::Argument(format!(
            "guest command-line word {word:?} is the VMM's own (words the VMM sets: {}); \
             use --xfeatures for the xstate policy",
            guest::protocol::VMM_OWNED_WORDS.join(" ")
        ))),
        None => Ok(()),
    }
}

/// Append `xfeatures=MASK` (see `guest::protocol`); the caller's command
/// line has none ([`check_cmdline_words`]).
fn with_xfeatures_hint(cmdline: &str, xcr0: XfeatureMask) -> String {
    let hint = format!("xfeatures={:#x}", xcr0.bits());
    if cmdline.is_empty() {
        hint
    } else {
        format!("{cmdline} {hint}")
    }
}
