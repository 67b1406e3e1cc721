//! The kernel side of `bench=` and of the boot-time context-switch
//! calibration: builds the [`Env`] from the guest's CPUID and XCR0, takes
//! scratch memory from the arena, runs the library benchmarks in
//! [`guest::bench`] at CPL3 (with the ports the TSS bitmap grants and the
//! identity mapping of [`BENCH_MMIO_ADDR`]), the `cpl0` rows through system
//! calls, and turns everything into report rows and serial lines.
//!
//! # Rows
//!
//! | name | variants | size, work | cycles | aux |
//! |------|----------|------------|--------|-----|
//! | `exit-pio`, `exit-mmio`, `exit-cpuid` | `cpl3-clean`, `cpl3-ymm`, `cpl3-zmm`, `cpl3-tiles` (the widths XCR0 has), `cpl0` | exits | TSC cycles of the loop | XINUSE before the first exit \| [`AUX_XINUSE`] (0: unknown) |
//! | `xstate-check` | `pio`, `mmio`, `cpuid`, `edit` | exits (1 for `edit`) | between the saves | 0 |
//! | `snapshot-check` | `snapshot` | 1 | between the saves (a snapshot and restore in between; all 16 GPRs and RFLAGS checked too) | 0 |
//! | `ctxsw` | `STRATEGY-sse`, `STRATEGY-avx`, each also `-initall` | contexts, switches | all switches (fastest of 3 trials) | bytes per save |
//! | `memcpy-policy` | `check` | bytes checked | 0 | 0 |
//!
//! `bench=copy` fills [`guest::protocol::CopyReport`] (its own table in the
//! report, too many cells for rows), sets the libc's copy policy from it
//! and adds the `memcpy-policy` row: `memcpy` under the new policy copied
//! sizes on both sides of each threshold exactly.
//!
//! Every `exit-*` row is bracketed by [`MARK_PORT`] writes of its index
//! and `MARK_END | index`, so the VMM can time it from outside too.

use core::fmt::Write;

use guest::bench::exits::{self, ExitKind};
use guest::bench::parallel::{self, Part, SMP_SUFFIX, SOLO_SUFFIX};
use guest::bench::xcheck::CheckExit;
use guest::bench::{ctxsw, Env};
use guest::workloads::{CpuFeatures, Reason};
use xstate::{CpuidRegs, InitMode, XfeatureMask, XsaveInfo};

use super::serial::Console;
use super::shared::{self, Work};
use super::{arena, cpu, syscall};
use guest::protocol::{
    fixed_str, Cmdline, Report, AUX_XINUSE, BENCH_MMIO_ADDR, BENCH_NAMES, BENCH_PIO_PORT, MARK_END,
    MARK_PORT,
};

mod copy;
mod rows;
mod xstate_check;

pub use xstate_check::{xstate_checks_on, OnCpu};

use copy::copy_rows;
use rows::{record, scratch, skip, skip_fmt, Duration};
use xstate_check::{bsp_xstate_checks, register_checks};

/// Context activations per `ctxsw` row.
const CTXSW_ACTIVATIONS: u64 = 20_000;
/// Trials per `ctxsw` row; the row reports the fastest.
const CTXSW_TRIALS: u32 = 3;

/// The benchmark environment: CPUID leaf 0xD read at CPL0 (the VMM's
/// view) and the XCR0 the kernel set; `None` without XSAVE.
pub fn env(report: &Report) -> Option<Env> {
    if report.xcr0 == 0 {
        return None;
    }
    let info = XsaveInfo::from_leaf_0xd(|sub| {
        let r = cpu::cpuid(0xd, sub);
        CpuidRegs::new(r.eax, r.ebx, r.ecx, r.edx)
    })
    .ok()?;
    Some(Env {
        info,
        xcr0: XfeatureMask::from_bits(report.xcr0),
    })
}

/// Boot-time choice of the context-switch strategy (when the CPU has XSAVE
/// and the run has workloads or benchmarks: see `needs_switch_strategy` in
/// main.rs): fills `switch_*` in the report.
#[inline(never)]
pub fn calibrate_switch(report: &mut Report, env: Option<&Env>, quiet: bool, out: &mut Console) {
    let Some(env) = env else {
        return;
    };
    let Some(buf) = scratch(env) else {
        let _ = writeln!(
            out,
            "guest: no arena memory for the context-switch calibration"
        );
        return;
    };
    let cal = ctxsw::calibrate(env, buf);
    for (slot, c) in report.switch_cycles.iter_mut().zip(cal.cycles) {
        *slot = c.unwrap_or(0);
    }
    report.switch_calibration_cycles = cal.total_cycles;
    if let Some(choice) = cal.choice {
        report.switch_strategy = fixed_str(choice.name());
    }
    if quiet {
        return;
    }
    let _ = write!(out, "guest: context-switch calibration (cycles/switch):");
    for (s, c) in ctxsw::Strategy::ALL.iter().zip(cal.cycles) {
        match c {
            Some(c) => {
                let _ = write!(out, " {} {c}", s.name());
            }
            None => {
                let _ = write!(out, " {} -", s.name());
            }
        }
    }
    let _ = writeln!(
        out,
        "; chose {} in {}",
        cal.choice.map_or("nothing", |s| s.name()),
        Duration(cal.total_cycles, report.tsc_khz)
    );
    out.flush();
}

/// Runs what `bench=` asks for. Returns false when a check failed or the
/// list or `exits=` was bad.
pub fn run(report: &mut Report, cmdline: &Cmdline, env: Option<&Env>, out: &mut Console) -> bool {
    if cmdline.bench.is_none() {
        return true;
    }
    run_named(report, cmdline, env, out)
}

/// [`run`] once `bench=` names something. Never inlined, for the reason
/// `run_workload_list` (main.rs) is not: a boot without benchmarks must
/// not probe their stack frames.
#[inline(never)]
fn run_named(report: &mut Report, cmdline: &Cmdline, env: Option<&Env>, out: &mut Console) -> bool {
    let mut ok = true;
    if let Some(bad) = cmdline.unknown_bench() {
        let _ = writeln!(
            out,
            "guest: bench=: unknown benchmark \"{bad}\" (known: {BENCH_NAMES:?})"
        );
        skip(report, bad, "", "unknown benchmark name");
        ok = false;
    }
    if let Some(bad) = cmdline.bad_exits {
        let _ = writeln!(
            out,
            "guest: exits={bad} is not a positive number; using {}",
            cmdline.exit_count()
        );
        skip(report, "exits", bad, "exits= is not a positive number");
        ok = false;
    }
    let count = cmdline.exit_count();
    let quiet = cmdline.quiet;
    if cmdline.wants_bench("exits") {
        exit_rows(report, env, count, quiet, out);
    }
    if cmdline.wants_bench("xstate-check") {
        ok &= bsp_xstate_checks(report, env, count, quiet, out);
    }
    if cmdline.wants_bench("snapshot-check") {
        let kinds = [("snapshot", CheckExit::Snapshot)];
        ok &= register_checks(report, env, "snapshot-check", &kinds, 1, quiet, out);
    }
    if cmdline.wants_bench("ctxsw") {
        ok &= ctxsw_rows(report, env, quiet, out);
    }
    if cmdline.wants_bench("parallel") {
        ok &= parallel_bench(report, quiet, out);
    }
    // Last: it takes what is left of the arena.
    if cmdline.wants_bench("copy") {
        ok &= copy_rows(report, env, quiet, out);
    }
    out.flush();
    ok
}

/// The `exit-*` rows: per exit kind, one CPL3 row per width XCR0 has
/// (`cpl3-clean`, `-ymm`, `-zmm`, `-tiles`), then `cpl0`. Each row's aux
/// figure is XINUSE right before its first exit, or'ed with
/// [`AUX_XINUSE`] (0 where the CPU cannot say).
fn exit_rows(report: &mut Report, env: Option<&Env>, count: u64, quiet: bool, out: &mut Console) {
    let xcr0 = env.map_or(XfeatureMask::EMPTY, |e| e.xcr0);
    let read_xinuse = env.is_some_and(|e| e.info.has_xgetbv1());
    let mut tile_store = tile_store(report, xcr0);
    let setup = |upper| exits::Setup {
        upper,
        xcr0,
        read_xinuse,
    };
    for kind in ExitKind::ALL {
        for upper in exits::Upper::ALL.map(Some).into_iter().chain([None]) {
            if upper.is_some_and(|u| !u.available(xcr0)) {
                continue;
            }
            let variant = upper.map_or("cpl0", exits::Upper::variant);
            let index = report.result_count;
            // Warm-up outside the markers (the first exits of a kind pay
            // for the VMM's and KVM's cold paths).
            let warm = (count / 16).clamp(1, 64);
            if upper.is_none() {
                let _ = cpl0_loop(kind, warm, None, false);
            } else {
                let clean = setup(exits::Upper::Clean);
                // SAFETY: as for the rows below.
                let _ = unsafe { exits::timed_loop(kind, &clean, warm, None, None) };
            }
            let result = match upper {
                Some(exits::Upper::Tiles) if tile_store.is_none() => {
                    skip(report, kind.row_name(), variant, TILES_UNAVAILABLE);
                    continue;
                }
                // SAFETY: the TSS I/O bitmap grants every port at CPL3,
                // BENCH_MMIO_ADDR is identity-mapped (below 4 GiB) and
                // unbacked; the width is one XCR0 enables (`available`),
                // tiles only where CPUID has AMX-TILE (`tile_store`), the
                // kernel never arms XFD, XGETBV1 is checked.
                Some(u) => unsafe {
                    let store = if u == exits::Upper::Tiles {
                        tile_store.as_deref_mut()
                    } else {
                        None
                    };
                    exits::timed_loop(kind, &setup(u), count, Some(index), store)
                },
                None => cpl0_loop(kind, count, Some(index), read_xinuse),
            };
            let check = result.tiles_ok != Some(false);
            let aux = result.xinuse.map_or(0, |x| x | AUX_XINUSE);
            report.push_result_aux(
                record(kind.row_name(), variant, count, count, result.cycles, check),
                aux,
            );
            if !check {
                skip_fmt(
                    report,
                    kind.row_name(),
                    variant,
                    format_args!("TMM0-7 lost their pattern over {count} exits"),
                );
            }
            if !quiet {
                let _ = writeln!(
                    out,
                    "guest: bench {} [{variant}]: {count} exits, {} cycles/exit ({}){}",
                    kind.row_name(),
                    result.cycles / count,
                    Duration(result.cycles / count, report.tsc_khz),
                    if kind == ExitKind::Cpuid && variant != "cpl0" {
                        " (CPUID at CPL3 may run without an exit: kvm_pvm)"
                    } else {
                        ""
                    }
                );
                out.flush();
            }
        }
    }
}

/// Why a `cpl3-tiles` row did not run although XCR0 has the tiles.
const TILES_UNAVAILABLE: &str = "no AMX-TILE in CPUID 7.0:EDX, or no arena memory for the check";

/// The 8 KiB the `tiles` rows store TMM0-7 into, where XCR0 has the tiles
/// and CPUID AMX-TILE.
fn tile_store(
    report: &Report,
    xcr0: XfeatureMask,
) -> Option<&'static mut [u8; exits::TILE_STORE_BYTES]> {
    if !exits::Upper::Tiles.available(xcr0)
        || guest::workloads::amx::availability(guest::workloads::amx::cpuid7_edx(), report.xcr0)
            .is_err()
    {
        return None;
    }
    let bytes = arena::alloc_bytes(exits::TILE_STORE_BYTES)?;
    bytes.get_mut(..exits::TILE_STORE_BYTES)?.try_into().ok()
}

/// A `cpl0` row: markers from CPL3 around the system call, timed at CPL3
/// (the one system-call round trip is included; it is a few emulated
/// instructions against `count` exits).
fn cpl0_loop(
    kind: ExitKind,
    count: u64,
    mark: Option<u32>,
    read_xinuse: bool,
) -> exits::LoopResult {
    // SAFETY: the caller checked XGETBV1.
    let xinuse = read_xinuse.then(|| unsafe { exits::xinuse() });
    if let Some(index) = mark {
        syscall::outl(MARK_PORT, index & !MARK_END);
    }
    let t0 = cpu::rdtsc();
    match kind {
        ExitKind::Pio => syscall::port_writes(BENCH_PIO_PORT, 0, count),
        // SAFETY: BENCH_MMIO_ADDR is identity-mapped and unbacked: each
        // store is an MMIO exit and changes no memory.
        ExitKind::Mmio => unsafe { syscall::mmio_stores(BENCH_MMIO_ADDR, 0, count) },
        ExitKind::Cpuid => syscall::cpuid_loop(0, count),
    }
    let cycles = cpu::rdtsc().wrapping_sub(t0);
    if let Some(index) = mark {
        syscall::outl(MARK_PORT, MARK_END | index);
    }
    exits::LoopResult {
        cycles,
        xinuse,
        tiles_ok: None,
    }
}

fn ctxsw_rows(report: &mut Report, env: Option<&Env>, quiet: bool, out: &mut Console) -> bool {
    let Some(env) = env else {
        skip(report, "ctxsw", "", "CPU has no XSAVE (XCR0 not set)");
        return true;
    };
    let Some(buf) = scratch(env) else {
        skip(report, "ctxsw", "", "no arena memory for the contexts");
        return false;
    };
    let mut ok = true;
    for s in ctxsw::Strategy::ALL {
        if !s.supported(&env.info) {
            skip_fmt(
                report,
                "ctxsw",
                s.name(),
                format_args!("CPUID 0xD.1 lacks {}", s.name()),
            );
            continue;
        }
        for p in [ctxsw::Profile::Sse, ctxsw::Profile::Avx] {
            for start in [InitMode::Minimal, InitMode::AllOfXcr0] {
                let mut variant = Reason::new();
                let _ = write!(variant, "{}-{}", s.name(), p.name());
                if start == InitMode::AllOfXcr0 {
                    variant.push("-initall");
                }
                let v = variant.as_str();
                // Warm-up (caches, TLB, the XSAVEOPT tracking), then the
                // best of a few trials (a vCPU preempted mid-run inflates
                // one); every trial must keep every context's state.
                let _ = ctxsw::run(env, s, p, start, 64, buf);
                let mut best: Option<Result<ctxsw::Measurement, ctxsw::RunError>> = None;
                for _ in 0..CTXSW_TRIALS {
                    let r = ctxsw::run(env, s, p, start, CTXSW_ACTIVATIONS, buf);
                    best = Some(match (best, r) {
                        (Some(Ok(b)), Ok(m)) => Ok(ctxsw::Measurement {
                            state_ok: b.state_ok && m.state_ok,
                            ..if m.cycles < b.cycles { m } else { b }
                        }),
                        (Some(Err(e)), _) | (_, Err(e)) => Err(e),
                        (None, Ok(m)) => Ok(m),
                    });
                }
                match best.unwrap_or(Err(ctxsw::RunError::Image)) {
                    Ok(m) => {
                        ok &= m.state_ok;
                        report.push_result_aux(
                            record(
                                "ctxsw",
                                v,
                                ctxsw::CONTEXTS as u64,
                                m.switches,
                                m.cycles,
                                m.state_ok,
                            ),
                            m.bytes_per_save.into(),
                        );
                        if !quiet {
                            let _ = writeln!(
                                out,
                                "guest: bench ctxsw [{v}]: {} cycles/switch ({}), {} bytes/save{}",
                                m.cycles_per_switch(),
                                Duration(m.cycles_per_switch(), report.tsc_khz),
                                m.bytes_per_save,
                                if m.state_ok { "" } else { ", STATE LOST" }
                            );
                            out.flush();
                        }
                    }
                    Err(ctxsw::RunError::NoAvx) => {
                        let xcr0 = report.xcr0;
                        skip_fmt(
                            report,
                            "ctxsw",
                            v,
                            format_args!("needs AVX: XCR0 {xcr0:#x} lacks AVX state"),
                        );
                    }
                    Err(e @ ctxsw::RunError::NoSse) => {
                        skip_fmt(report, "ctxsw", v, format_args!("{e}"));
                    }
                    Err(e) => {
                        skip_fmt(report, "ctxsw", v, format_args!("{e}"));
                        ok = false;
                    }
                }
            }
        }
    }
    let reason = if env.info.has_xsaves() {
        "CPL0-only: not timed (CPL0 is emulated on kvm_pvm hosts)"
    } else {
        "CPUID 0xD.1 lacks XSAVES; CPL0-only anyway"
    };
    skip(report, "ctxsw", "xsaves", reason);
    ok
}

/// The workloads' view of a CPU from its own report.
pub fn features(report: &Report) -> CpuFeatures {
    CpuFeatures::from_report(report)
}

/// `bench=parallel` on the BSP: the set alone (rows `…/solo`), then on
/// every CPU at once (rows `…/smp`, each CPU's in its own report; the APs
/// run theirs in `kernel::smp`). Returns false when a check failed or
/// there was no memory.
fn parallel_bench(report: &mut Report, quiet: bool, out: &mut Console) -> bool {
    let len = parallel::scratch_bytes();
    let Some(scratch) = arena::alloc_bytes(len) else {
        let _ = writeln!(
            out,
            "guest: bench parallel: no arena memory ({} KiB)",
            len >> 10
        );
        skip(
            report,
            "parallel",
            "",
            "not enough guest RAM for the parallel set",
        );
        shared::cancel(Work::Parallel);
        return false;
    };
    let feat = features(report);
    let mut ok = true;
    let start = report.results().len();
    for part in Part::ALL {
        ok &= parallel::run_part(part, &feat, report.tsc_khz, scratch, report);
    }
    parallel::mark_rows(report, start, SOLO_SUFFIX);
    let n = shared::publish(Work::Parallel, len);
    if n > 1 {
        let start = report.results().len();
        for part in Part::ALL {
            shared::barrier(Work::Parallel, n);
            ok &= parallel::run_part(part, &feat, report.tsc_khz, scratch, report);
        }
        parallel::mark_rows(report, start, SMP_SUFFIX);
    }
    if !quiet {
        let _ = writeln!(
            out,
            "guest: bench parallel: AES-128-CTR and DGEMM on cpu0 alone, then on {n} CPUs at once"
        );
    }
    ok
}
