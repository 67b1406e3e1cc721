//! The guest kernel: PVH entry, a short CPL0 path in assembly, then
//! everything else (report, workloads, benchmarks) as one CPL3 task.
//!
//! Built by `vmm/build.rs` (bin `guest-kernel`, feature `kernel`) with the
//! link arguments of `guest/build.rs` and `guest/linker.ld`; see
//! [`kernel::boot`] for the memory map, descriptor tables and fault handling,
//! [`kernel::syscall`] for the system calls and [`kernel`] for how to add a
//! CPL3 task.
#![no_std]
#![no_main]

mod kernel;

use core::fmt::Write;
use guest::protocol::{
    fixed_str, Cmdline, ExitStatus, NativeRowArgs, NativeRowOut, PartRecord, RepRecord, Report,
    RowKey, SkipRecord, SnapshotPhase, FAULT_KINDS, MAX_ROW_REPS, PARTS_WANTED, PART_PORT,
    REP_PORT, SNAPSHOT_PHASES,
};
use guest::workloads::{self, CpuFeatures, RepHook, Selection};
use kernel::pvh::BootInfo;
use kernel::serial::Console;
use kernel::{arena, boot, report, selftest, syscall, xcr0};

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    kernel::fault::on_panic(info)
}

/// The boot information `user_main` copies out of the VMM's
/// `hvm_start_info`. A static, not a local: its 5.6 KiB (a 4 KiB
/// command-line buffer) on the stack grew `user_main`'s frame past two
/// pages, which the stack probes touch on entry, a guest page fault each
/// (15 µs under kvm_pvm on Zen 3); here it shares the data pages vmm
/// faults in before the boot (guest/linker.ld).
struct BootInfoSlot(core::cell::UnsafeCell<BootInfo>);
// SAFETY: only `user_main`, on the BSP, ever takes the slot.
unsafe impl Sync for BootInfoSlot {}
static BOOT_INFO: BootInfoSlot = BootInfoSlot(core::cell::UnsafeCell::new(BootInfo::EMPTY));

/// First Rust code of the run, at CPL3 on the user stack, entered from the
/// boot assembly with `start_info` = the PVH `hvm_start_info` address and
/// `boot_xcr0` = CPUID 0xD.0 EDX:EAX as the entry path read it at CPL0
/// (the XCR0 it set; 0 when the CPU has no XSAVE).
#[no_mangle]
extern "C" fn user_main(start_info: u32, boot_xcr0: u64) -> ! {
    // SAFETY: this is the only reference to the report while the run goes
    // on; the fault and panic paths take it over only after abandoning
    // this flow of control.
    let report = unsafe { &mut *report::report_ptr() };
    let mut out = Console::new();
    let mut status = ExitStatus::Success;
    // The CPUID leaves this boot reads, in one system call: those of the
    // report and the TSC rate, and the 0xD subleaves of the XCR0 the entry
    // path set (the report's component sizes and offsets).
    kernel::cpu::prefetch_boot(boot_xcr0);

    // SAFETY: user_main runs once, on the BSP, and is the only code that
    // takes this slot; the reference lives as long as the run.
    let slot = unsafe { &mut *BOOT_INFO.0.get() };
    let boot_info = slot.read_into(start_info).map(|()| &*slot);
    let cmdline_text = match &boot_info {
        Ok(info) => core::str::from_utf8(info.cmdline()).unwrap_or_else(|_| {
            let _ = writeln!(out, "guest: command line is not UTF-8; ignored");
            ""
        }),
        Err(e) => {
            let _ = writeln!(out, "guest: setup failed: {e}");
            status = ExitStatus::SetupFailed;
            ""
        }
    };
    let cmdline = Cmdline::parse(cmdline_text);
    // Without `quiet`, also print the record line for VMMs that do not
    // read the report port (the fault and panic paths too).
    report::print_record_too(!cmdline.quiet);

    if let Ok(info) = &boot_info {
        announce_boot_and_arena(info, &cmdline, &mut out);
    }

    // Both, each saying what failed.
    if !(set_up_cpu(report, &cmdline, &mut out) & snapshot_word_ok(&cmdline, &mut out)) {
        status = ExitStatus::SetupFailed;
    }
    // SMP: the other CPUs start now and report on their own.
    let rsdp = boot_info.as_ref().map_or(0, |i| i.rsdp);
    let started = start_aps(report, &cmdline, rsdp, &mut out);
    if boot::boot_xsetbv_faulted() {
        let _ = writeln!(
            out,
            "guest: setup failed: XSETBV refused XCR0 = CPUID 0xD.0 EDX:EAX {:#x} (inconsistent CPUID)",
            report.cpuid_xcr0_supported
        );
        status = ExitStatus::SetupFailed;
    }
    // Measure the XSAVE strategies and pick the cheapest for context
    // switches (see bench::ctxsw), but only for a run that has tasks to
    // switch: workloads or benchmarks. The calibration is about 1 ms under
    // kvm_pvm, most of a boot that runs nothing (`workload=none`), and its
    // answer would go unused there; the report then has no strategy.
    let bench_env = if needs_switch_strategy(&cmdline) {
        let env = kernel::bench::env(report);
        kernel::bench::calibrate_switch(report, env.as_ref(), cmdline.quiet, &mut out);
        env
    } else {
        None
    };
    out.flush();

    // `hostile=`: misbehave on purpose (tests of the VMM's defences).
    if let Some(mode) = cmdline.hostile {
        let s = kernel::hostile::run(mode, report, &mut out);
        if status == ExitStatus::Success {
            status = s;
        }
    }

    if let Some(kind) = cmdline.fault {
        kernel::fault::provoke(kind);
        let _ = writeln!(
            out,
            "guest: unknown fault kind \"{kind}\" (known: {FAULT_KINDS:?})"
        );
        status = ExitStatus::SetupFailed;
    }
    if cmdline.selftest && !selftest::run(report, &mut out) {
        status = ExitStatus::CheckFailed;
    }
    out.flush();

    if !run_workloads(report, &cmdline, &mut out) && status == ExitStatus::Success {
        status = ExitStatus::CheckFailed;
    }
    // `bench=`: exit costs, xstate across exits, context switches.
    if !kernel::bench::run(report, &cmdline, bench_env.as_ref(), &mut out)
        && status == ExitStatus::Success
    {
        status = ExitStatus::CheckFailed;
    }

    let status = end_status(report, status, started, cmdline.quiet, &mut out);
    if !cmdline.quiet {
        report::print_human(report, status, &mut out);
    }
    report::send_everywhere_and_exit(report, status, &mut out)
}

/// Prints what the boot loader handed over (unless `quiet`: the command
/// line and its unknown words; a cut command line always) and sets up
/// the arena from its memory map, saying where it is or why there is none.
fn announce_boot_and_arena(info: &BootInfo, cmdline: &Cmdline, out: &mut Console) {
    if !cmdline.quiet {
        let _ = writeln!(
            out,
            "guest: PVH boot, start_info v{}, {} memory-map entries, command line \"{}\"",
            info.version,
            info.memmap().len(),
            cmdline.raw
        );
        for word in cmdline.unknown_words() {
            let _ = writeln!(out, "guest: ignoring unknown command-line word \"{word}\"");
        }
    }
    if info.cmdline_truncated {
        let _ = writeln!(
            out,
            "guest: command line longer than {} bytes, cut",
            kernel::pvh::MAX_CMDLINE
        );
    }
    match arena::init(info.memmap()) {
        Some((start, end)) if !cmdline.quiet => {
            let (ram, high) =
                guest::firmware::ram_bytes(info.memmap().iter().map(|e| (e.addr, e.size, e.kind)));
            let _ = writeln!(
                out,
                "guest: arena {start:#x}..{end:#x} ({} MiB) of {} MiB of RAM, {} MiB of it \
                 above 4 GiB (not mapped: nothing here needs it)",
                (end - start) >> 20,
                ram >> 20,
                high >> 20
            );
        }
        Some(_) => {}
        None => {
            let _ = writeln!(
                out,
                "guest: no free RAM above the kernel in the memory map: no arena"
            );
        }
    }
}

/// Sets XCR0 as the command line asks and fills the report's CPU fields,
/// printing why either failed; false when one did.
fn set_up_cpu(report: &mut Report, cmdline: &Cmdline, out: &mut Console) -> bool {
    let mut ok = true;
    if let Err(e) = xcr0::apply_policy(cmdline, out) {
        let _ = writeln!(out, "guest: setup failed: {e}");
        ok = false;
    }
    if let Err(e) = report::fill_cpu(report) {
        let _ = writeln!(out, "guest: setup failed: {e}");
        ok = false;
    }
    ok
}

/// Whether `snapshot=` names a phase (or is absent); a harness waiting for
/// a point the guest does not know would wait in vain, so it is a set-up
/// failure, named on the console.
fn snapshot_word_ok(cmdline: &Cmdline, out: &mut Console) -> bool {
    let Some(bad) = cmdline.bad_snapshot else {
        return true;
    };
    let _ = writeln!(
        out,
        "guest: unknown snapshot point \"{bad}\" (known: {SNAPSHOT_PHASES:?})"
    );
    false
}

/// Starts the application processors: as many CPUs as the command line
/// or the firmware tables (`rsdp`) say, recorded in the report with their
/// source.
fn start_aps(
    report: &mut Report,
    cmdline: &Cmdline,
    rsdp: u64,
    out: &mut Console,
) -> kernel::smp::Started {
    let (wanted, source) = kernel::smp::cpu_count(cmdline, rsdp);
    report.cpus_wanted = wanted;
    report.cpus_source = source as u32;
    if !cmdline.quiet && wanted > 1 {
        let _ = writeln!(
            out,
            "guest: {wanted} CPUs (from {})",
            guest::firmware::CPU_COUNT_SOURCES[source as usize]
        );
    }
    kernel::smp::start_aps(cmdline, wanted, out)
}

/// The run's status after its last checks: a failed result row, then
/// (once the report holds the XINUSE bits) the application processors'
/// reports and their checks. An earlier failure stays the status.
fn end_status(
    report: &mut Report,
    mut status: ExitStatus,
    started: kernel::smp::Started,
    quiet: bool,
    out: &mut Console,
) -> ExitStatus {
    if status == ExitStatus::Success && report.results().iter().any(|r| r.check == 0) {
        status = ExitStatus::CheckFailed;
    }
    report::fill_xinuse(report);
    if !kernel::smp::finish(started, report, quiet, out) && status == ExitStatus::Success {
        status = ExitStatus::SetupFailed;
    }
    if !kernel::smp::ap_checks_passed() && status == ExitStatus::Success {
        let _ = writeln!(out, "guest: a check on an application processor failed");
        status = ExitStatus::CheckFailed;
    }
    status
}

/// Whether this run uses a context-switch strategy: it runs workloads or
/// benchmarks (`bench=`), not just the boot and the report.
fn needs_switch_strategy(cmdline: &Cmdline) -> bool {
    !cmdline.runs_nothing() || cmdline.bench.is_some()
}

/// Run the workloads `workload=` asks for (the quick set when the word is
/// absent) and record their results, or why a variant was skipped, in
/// `report`, stopping at the `snapshot=` point among them (a run of no
/// workload stops there all the same). Returns false when a check failed
/// or the list was bad.
///
/// The variants are gated by what the guest's CPUID reports and the XCR0 it
/// set: with XCR0 = x87|SSE no AVX or VAES code is even attempted.
fn run_workloads(report: &mut Report, cmdline: &Cmdline, out: &mut Console) -> bool {
    if cmdline.runs_nothing() {
        if let Some(phase) = cmdline.snapshot {
            kernel::snapshot::reach(phase, report.tsc_khz);
        }
        return true;
    }
    run_workload_list(report, cmdline, out)
}

/// [`run_workloads`] once there is a list to run. Never inlined: its
/// frame (workload buffers, several KiB) is probed page by page on entry,
/// and inlined into `user_main` every boot would touch those stack pages,
/// a guest page fault each, even a boot that runs nothing.
#[inline(never)]
fn run_workload_list(report: &mut Report, cmdline: &Cmdline, out: &mut Console) -> bool {
    let list = cmdline.workload.unwrap_or("quick");
    let sel = match Selection::parse(list) {
        Ok(sel) => sel,
        Err(e) => {
            let _ = writeln!(out, "guest: workload={list}: {e}");
            report.push_skipped(SkipRecord {
                name: fixed_str(list),
                variant: fixed_str(""),
                reason: fixed_str(e),
            });
            return false;
        }
    };
    let feat = CpuFeatures::from_report(report);
    let need = workloads::scratch_bytes(&sel);
    let Some(scratch) = arena::alloc_bytes(need) else {
        let _ = writeln!(
            out,
            "guest: workloads need {} KiB of scratch, the arena has {} KiB: give the guest more --mem",
            need >> 10,
            arena::available() >> 10
        );
        report.push_skipped(SkipRecord {
            name: fixed_str(list),
            variant: fixed_str(""),
            reason: fixed_str("not enough guest RAM for the workloads' buffers"),
        });
        return false;
    };
    let mut hook = PortReps::ask(cmdline.snapshot, report.tsc_khz);
    let on = workloads::Target {
        feat: &feat,
        tsc_khz: report.tsc_khz,
        scratch,
        report,
    };
    let sizes = workloads::runner::Sizes::for_selection(&sel);
    workloads::run_with_hook(&sel, &sizes, on, &mut hook)
}

/// Repetitions the VMM asked for on [`REP_PORT`], each signalled there so
/// the VMM can time the same row natively before the next one, and their
/// timed parts on [`PART_PORT`] when it wants them, so it can time a
/// native part after each.
struct PortReps {
    reps: u32,
    /// The VMM decodes [`REP_PORT`] and pairs repetitions: signal each.
    signals: bool,
    /// The VMM answered [`PARTS_WANTED`] on [`PART_PORT`].
    parts: bool,
    record: RepRecord,
    part: PartRecord,
    /// `snapshot=`: where the run stops for a snapshot.
    snapshot: Option<SnapshotPhase>,
    /// The TSC frequency (0: unknown), for the wait at that point.
    tsc_khz: u64,
}

impl PortReps {
    /// Ask the VMM: all-ones (nothing decodes the port, e.g. QEMU) or 0
    /// means one repetition and no signals; any other answer is how many
    /// repetitions it pairs, each signalled (1 included: one pair is
    /// still a pair). `snapshot` and `tsc_khz` are the snapshot point's.
    fn ask(snapshot: Option<SnapshotPhase>, tsc_khz: u64) -> Self {
        let answer = syscall::inl(REP_PORT);
        let signals = answer != u32::MAX && answer != 0;
        let reps = if signals {
            answer.clamp(1, MAX_ROW_REPS)
        } else {
            1
        };
        // Parts are signalled only beside repetitions: ask only then,
        // which spares other VMMs the exit.
        let parts = signals && syscall::inl(PART_PORT) == PARTS_WANTED;
        Self {
            reps,
            signals,
            parts,
            record: RepRecord::default(),
            part: PartRecord::default(),
            snapshot,
            tsc_khz,
        }
    }
}

/// Hand the VMM the guest-physical address of `record` on `port`.
fn signal<T>(port: u16, record: &T) {
    // Identity-mapped: the address is guest-physical (the user stack lies
    // in the first 4 GiB, like all guest RAM).
    let addr = core::ptr::from_ref(record) as usize;
    // The record must be in memory before the `out` (whose asm says it
    // touches none).
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    if let Ok(addr) = u32::try_from(addr) {
        syscall::outl(port, addr);
    }
}

impl RepHook for PortReps {
    fn reps(&self) -> u32 {
        self.reps
    }

    fn rep_done(&mut self, record: &RepRecord) {
        if !self.signals {
            return;
        }
        self.record = *record;
        signal(REP_PORT, &self.record);
    }

    fn part_done(&mut self, record: &PartRecord) {
        if self.parts {
            self.part = *record;
            signal(PART_PORT, &self.part);
        }
    }

    fn paired(&self) -> bool {
        self.signals
    }

    fn snapshot_phase(&self) -> Option<SnapshotPhase> {
        self.snapshot
    }

    fn snapshot_point(&mut self, phase: SnapshotPhase) {
        kernel::snapshot::reach(phase, self.tsc_khz);
    }
}

/// The VMM's native entry point ([`guest::protocol::NATIVE_ROW_SYMBOL`]):
/// never called in the guest; the VMM maps this image into its own process
/// at the link address and calls it, so the native repetition of a row runs
/// these very instructions (the link argument `-u vmm_native_row2` keeps
/// it). Each timed part is passed to `args.on_part`, where the VMM holds
/// this call until the guest's next part is done.
///
/// # Safety
/// `args` and `out` must be valid, and `args.scratch` valid for writes of
/// `args.scratch_len` bytes, for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn vmm_native_row2(args: *const NativeRowArgs, out: *mut NativeRowOut) {
    // SAFETY: the caller's contract above.
    let (args, out) = unsafe { (&*args, &mut *out) };
    // SAFETY: as above.
    let scratch = unsafe { core::slice::from_raw_parts_mut(args.scratch, args.scratch_len) };
    let mut report = Report::new();
    *out = match RowKey::decode(args.key) {
        Some(key) => {
            // The VMM holds the call in `on_part` while the guest runs.
            let mut on_part = |p: &PartRecord| {
                if let Some(f) = args.on_part {
                    // SAFETY: the caller gave this callback and its
                    // context for the duration of the call.
                    unsafe { f(args.on_part_ctx, p) }
                }
            };
            workloads::run_row(
                key,
                args.quick != 0,
                args.tsc_khz,
                scratch,
                &mut report,
                &mut on_part,
            )
        }
        None => NativeRowOut::default(),
    };
}
