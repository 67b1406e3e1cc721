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

/// The guest/VMM protocol of the library half, reachable as `crate::protocol`.
use guest::protocol;

use core::fmt::Write;
use guest::workloads::{self, CpuFeatures, Selection};
use kernel::pvh::BootInfo;
use kernel::serial::Console;
use kernel::{arena, boot, cpu, report, syscall};
use protocol::{fixed_str, Cmdline, ExitStatus, Report, SkipRecord, FAULT_KINDS};
use xstate::XfeatureMask;

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    kernel::fault::on_panic(info)
}

/// First Rust code of the run, at CPL3 on the user stack, entered from the
/// boot assembly with `start_info` = the PVH `hvm_start_info` address.
extern "C" fn user_main(start_info: u32) -> ! {
    // SAFETY: this is the only reference to the report while the run goes
    // on; the fault and panic paths take it over only after abandoning
    // this flow of control.
    let report = unsafe { &mut *report::report_ptr() };
    let mut out = Console::new();
    let mut status = ExitStatus::Success;

    let boot_info = BootInfo::read(start_info);
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

    if let Ok(info) = &boot_info {
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
                let _ = writeln!(
                    out,
                    "guest: arena {start:#x}..{end:#x} ({} MiB)",
                    (end - start) >> 20
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

    if let Err(e) = apply_xfeatures(&cmdline, &mut out) {
        let _ = writeln!(out, "guest: setup failed: {e}");
        status = ExitStatus::SetupFailed;
    }
    if let Err(e) = report::fill_cpu(report) {
        let _ = writeln!(out, "guest: setup failed: {e}");
        status = ExitStatus::SetupFailed;
    }
    if boot::boot_xsetbv_faulted() {
        let _ = writeln!(
            out,
            "guest: setup failed: XSETBV refused XCR0 = CPUID 0xD.0 EDX:EAX {:#x} (inconsistent CPUID)",
            report.cpuid_xcr0_supported
        );
        status = ExitStatus::SetupFailed;
    }
    // Every boot: measure the XSAVE strategies and pick the cheapest for
    // context switches (a few milliseconds at most; see bench::ctxsw).
    let bench_env = kernel::bench::env(report);
    kernel::bench::calibrate_switch(report, bench_env.as_ref(), cmdline.quiet, &mut out);
    out.flush();

    if let Some(kind) = cmdline.fault {
        kernel::fault::provoke(kind);
        let _ = writeln!(
            out,
            "guest: unknown fault kind \"{kind}\" (known: {FAULT_KINDS:?})"
        );
        status = ExitStatus::SetupFailed;
    }
    if cmdline.selftest && !selftest(report, &mut out) {
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

    if status == ExitStatus::Success && report.results().iter().any(|r| r.check == 0) {
        status = ExitStatus::CheckFailed;
    }
    report::fill_xinuse(report);
    report::send(report);
    if !cmdline.quiet {
        report::print_human(report, status, &mut out);
    }
    syscall::exit(status)
}

/// Narrow XCR0 to the VMM's `xfeatures=` policy.
///
/// The boot path set XCR0 to everything CPUID 0xD offers. A VMM's CPUID
/// normally already is its policy, but where KVM answers CPUID from the
/// host (kvm_pvm) only this hint carries it, so the guest takes the
/// intersection and checks it is a valid XCR0 before XSETBV.
fn apply_xfeatures(cmdline: &Cmdline, out: &mut Console) -> Result<(), &'static str> {
    if let Some(bad) = cmdline.bad_xfeatures {
        let _ = writeln!(out, "guest: xfeatures={bad} is not a hex mask");
        return Err("bad xfeatures= word");
    }
    let Some(policy) = cmdline.xfeatures else {
        return Ok(());
    };
    let current = cpu::xcr0();
    if current == 0 {
        return Ok(()); // no XSAVE: nothing to narrow
    }
    let (eax, _, _, edx) = syscall::cpuid_cpl0(0xd, 0);
    let supported = (u64::from(edx) << 32) | u64::from(eax);
    let target = supported & policy;
    if target == current {
        return Ok(());
    }
    if let Err(e) =
        XfeatureMask::from_bits(target).validate_xcr0(XfeatureMask::from_bits(supported))
    {
        let _ = writeln!(
            out,
            "guest: xfeatures={policy:#x} & CPUID {supported:#x} = {target:#x} is no valid XCR0: {e}"
        );
        return Err("invalid xfeatures= policy");
    }
    // SAFETY: `target` passed the SDM's XCR0 rules for this CPU's mask; a
    // refusal is returned, not raised.
    unsafe { syscall::xsetbv(0, target) }.map_err(|_| "XSETBV refused the xfeatures= policy")
}

/// Run the workloads `workload=` asks for (the quick set when the word is
/// absent) and record their results, or why a variant was skipped, in
/// `report`. Returns false when a check failed or the list was bad.
///
/// The variants are gated by what the guest's CPUID reports and the XCR0 it
/// set: with XCR0 = x87|SSE no AVX or VAES code is even attempted.
fn run_workloads(report: &mut Report, cmdline: &Cmdline, out: &mut Console) -> bool {
    if cmdline.runs_nothing() {
        return true;
    }
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
    let feat = CpuFeatures::from_cpuid(
        report.cpuid1_ecx,
        report.cpuid1_edx,
        report.cpuid7_ebx,
        report.cpuid7_ecx,
        report.xcr0,
    );
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
    workloads::run(&sel, &feat, report.tsc_khz, scratch, report)
}

/// `selftest`: every system call once, with the answers checked. Returns
/// true when all behaved.
fn selftest(report: &Report, out: &mut Console) -> bool {
    let t0 = cpu::rdtsc();
    syscall::nop();
    let nop_cycles = cpu::rdtsc().wrapping_sub(t0);
    // SAFETY: an unknown number has no effect.
    let unknown = unsafe { syscall::syscall3(0x7fff, 0, 0, 0) };
    // Port 0x80 (POST code) is the conventional harmless sink.
    syscall::port_writes(0x80, 0, 2);
    let mut ok = unknown == syscall::SYS_ERR_UNKNOWN;
    let _ = writeln!(
        out,
        "guest: selftest: nop round trip {nop_cycles} TSC cycles; unknown call -> {unknown:#x}; 2 port writes at CPL0 done"
    );
    if report.xcr0 != 0 {
        // SAFETY: writing back the XCR0 already in force changes nothing.
        let same = unsafe { syscall::xsetbv(0, report.xcr0) };
        // SAFETY: XCR0 = 0 is architecturally invalid (x87 must be set): the
        // CPU refuses it and nothing changes.
        let invalid = unsafe { syscall::xsetbv(0, 0) };
        let _ = writeln!(
            out,
            "guest: selftest: xsetbv(XCR0={:#x}) {:?}; xsetbv(XCR0=0) {:?}",
            report.xcr0, same, invalid
        );
        ok &= same.is_ok() && invalid.is_err() && cpu::xcr0() == report.xcr0;
    }
    if arena::available() >= 4096 {
        let before = arena::used();
        let bytes = arena::alloc_bytes(100).map(|b| (b.as_ptr() as u64, b.iter().all(|&x| x == 0)));
        let floats = arena::alloc_f64(3).map(|f| (f.as_ptr() as u64, f.iter().all(|&x| x == 0.0)));
        let good = matches!((bytes, floats), (Some((a, true)), Some((b, true)))
            if a % arena::ALIGN == 0 && b % arena::ALIGN == 0 && b >= a + 100);
        let _ = writeln!(
            out,
            "guest: selftest: arena allocations at {:#x} and {:#x}, {} bytes used",
            bytes.map_or(0, |b| b.0),
            floats.map_or(0, |f| f.0),
            arena::used() - before
        );
        ok &= good;
    }
    for (leaf, sub) in [(1, 0), (7, 0), (0xd, 0), (0xd, 1)] {
        let r3 = cpu::cpuid_cpl3(leaf, sub);
        let r0 = syscall::cpuid_cpl0(leaf, sub);
        let _ = writeln!(
            out,
            "guest: selftest: CPUID {leaf:#x}.{sub} at CPL3 {:08x} {:08x} {:08x} {:08x}, at CPL0 {:08x} {:08x} {:08x} {:08x}",
            r3.eax, r3.ebx, r3.ecx, r3.edx, r0.0, r0.1, r0.2, r0.3
        );
    }
    let _ = writeln!(
        out,
        "guest: selftest: {}",
        if ok { "pass" } else { "FAILED" }
    );
    ok
}
