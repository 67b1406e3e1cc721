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
//! | `exit-pio`, `exit-mmio`, `exit-cpuid` | `cpl3-clean`, `cpl3-dirty`, `cpl0` | exits | TSC cycles of the loop | 0 |
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

use guest::bench::copy::{self, crossover::Policy};
use guest::bench::exits::{self, ExitKind};
use guest::bench::parallel::{self, Part, SMP_SUFFIX, SOLO_SUFFIX};
use guest::bench::xcheck::{self, CheckExit};
use guest::bench::{ctxsw, Env};
use guest::workloads::{CpuFeatures, Reason};
use xstate::{CpuidRegs, InitMode, XfeatureMask, XsaveInfo};

use super::serial::Console;
use super::shared::{self, Work};
use super::{arena, cpu, libc, syscall};
use guest::protocol::{
    fixed_str, Cmdline, Report, ResultRecord, SkipRecord, WorkUnit, BENCH_MMIO_ADDR, BENCH_NAMES,
    BENCH_PIO_PORT, MARK_END, MARK_PORT,
};

/// The XMM register the edit check asks the VMM to change.
pub const EDIT_REG: u32 = 5;
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

fn scratch(env: &Env) -> Option<&'static mut [u8]> {
    arena::alloc_bytes(ctxsw::scratch_bytes(env).max(xcheck::scratch_bytes(env)))
}

/// Boot-time choice of the context-switch strategy (when the CPU has XSAVE
/// and the run has workloads or benchmarks: see `needs_switch_strategy` in
/// main.rs): fills `switch_*` in the report.
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

/// The `xstate-check` rows' exits, in order.
const XCHECK_KINDS: [(&str, CheckExit); 4] = [
    ("pio", CheckExit::Pio),
    ("mmio", CheckExit::Mmio),
    ("cpuid", CheckExit::Cpuid),
    ("edit", CheckExit::Edit(EDIT_REG)),
];

/// Where a CPU runs its share of the concurrent xstate check: its index
/// (which salts its register pattern), its scratch, and what to do before
/// each check (hold the barrier with the other CPUs).
pub struct OnCpu<'a> {
    /// The CPU index; 0 is the BSP, whose pattern is the single-CPU one.
    pub cpu: u32,
    /// Memory for the xsave images.
    pub scratch: &'a mut [u8],
    /// Called before each check.
    pub before_each: &'a mut dyn FnMut(),
}

/// `bench=xstate-check` on the BSP: with APs up, they run the same checks
/// at the same moments, each CPU with its own pattern.
fn bsp_xstate_checks(
    report: &mut Report,
    env: Option<&Env>,
    count: u64,
    quiet: bool,
    out: &mut Console,
) -> bool {
    let Some(e) = env else {
        skip(
            report,
            "xstate-check",
            "",
            "CPU has no XSAVE (XCR0 not set)",
        );
        return true;
    };
    let Some(buf) = scratch(e) else {
        skip(
            report,
            "xstate-check",
            "",
            "no arena memory for the xsave images",
        );
        return false;
    };
    let n = shared::publish(
        Work::Xcheck,
        xcheck_scratch_len(e, report.cpuid_xcr0_supported),
    );
    register_checks_on(
        report,
        e,
        "xstate-check",
        &XCHECK_KINDS,
        count,
        quiet,
        out,
        OnCpu {
            cpu: 0,
            scratch: buf,
            before_each: &mut || shared::barrier(Work::Xcheck, n),
        },
    )
}

/// An AP's share of the concurrent `xstate-check` (quiet: the rows and
/// skip reasons go into its own report).
pub fn xstate_checks_on(
    report: &mut Report,
    env: Option<&Env>,
    count: u64,
    out: &mut Console,
    on: OnCpu<'_>,
) -> bool {
    let Some(env) = env else {
        skip(
            report,
            "xstate-check",
            "",
            "CPU has no XSAVE (XCR0 not set)",
        );
        // Still hold the barriers the others wait at.
        for _ in XCHECK_KINDS {
            (on.before_each)();
        }
        return true;
    };
    register_checks_on(
        report,
        env,
        "xstate-check",
        &XCHECK_KINDS,
        count,
        true,
        out,
        on,
    )
}

fn skip(report: &mut Report, name: &str, variant: &str, reason: &str) {
    report.push_skipped(SkipRecord {
        name: fixed_str(name),
        variant: fixed_str(variant),
        reason: Reason::of(reason).field(),
    });
}

fn skip_fmt(report: &mut Report, name: &str, variant: &str, reason: core::fmt::Arguments<'_>) {
    let mut r = Reason::new();
    let _ = r.write_fmt(reason);
    report.push_skipped(SkipRecord {
        name: fixed_str(name),
        variant: fixed_str(variant),
        reason: r.field(),
    });
}

fn record(
    name: &str,
    variant: &str,
    size: u64,
    work: u64,
    cycles: u64,
    check: bool,
) -> ResultRecord {
    ResultRecord {
        name: fixed_str(name),
        variant: fixed_str(variant),
        size,
        work,
        cycles,
        unit: WorkUnit::Events as u32,
        check: check as u32,
        residual: 0.0,
    }
}

/// `cycles` at `khz` as a short human duration.
struct Duration(u64, u64);

impl core::fmt::Display for Duration {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (cycles, khz) = (self.0, self.1);
        if khz == 0 {
            return write!(f, "{cycles} cycles");
        }
        let ns = cycles as f64 * 1e6 / khz as f64;
        if ns >= 1e6 {
            write!(f, "{:.2} ms", ns / 1e6)
        } else if ns >= 1e3 {
            write!(f, "{:.2} us", ns / 1e3)
        } else {
            write!(f, "{ns:.0} ns")
        }
    }
}

fn exit_rows(report: &mut Report, env: Option<&Env>, count: u64, quiet: bool, out: &mut Console) {
    let has_avx = env.is_some_and(Env::has_avx);
    let has_avx512 = env.is_some_and(Env::has_avx512);
    for kind in ExitKind::ALL {
        for variant in ["cpl3-clean", "cpl3-dirty", "cpl0"] {
            let index = report.result_count;
            // Warm-up outside the markers (the first exits of a kind pay
            // for the VMM's and KVM's cold paths).
            let warm = (count / 16).clamp(1, 64);
            if variant == "cpl0" {
                let _ = cpl0_loop(kind, warm, None);
            } else {
                // SAFETY: as for the rows below.
                let _ = unsafe { exits::timed_loop(kind, exits::clean_upper(has_avx), warm, None) };
            }
            let cycles = match variant {
                "cpl3-clean" => {
                    // SAFETY: the TSS I/O bitmap grants every port at CPL3,
                    // BENCH_MMIO_ADDR is identity-mapped (below 4 GiB) and
                    // unbacked; `clean_upper` uses AVX only if XCR0 has it.
                    unsafe {
                        exits::timed_loop(kind, exits::clean_upper(has_avx), count, Some(index))
                    }
                }
                "cpl3-dirty" => {
                    let Some(upper) = exits::dirty_upper(has_avx, has_avx512) else {
                        let xcr0 = report.xcr0;
                        skip_fmt(
                            report,
                            kind.row_name(),
                            variant,
                            format_args!("needs AVX: XCR0 {xcr0:#x} has no upper vector state"),
                        );
                        continue;
                    };
                    // SAFETY: as above; `upper` uses only what XCR0 enables.
                    unsafe { exits::timed_loop(kind, upper, count, Some(index)) }
                }
                _ => cpl0_loop(kind, count, Some(index)),
            };
            let rec = record(kind.row_name(), variant, count, count, cycles, true);
            report.push_result(rec);
            if !quiet {
                let _ = writeln!(
                    out,
                    "guest: bench {} [{}{}]: {} exits, {} cycles/exit ({}){}",
                    kind.row_name(),
                    variant,
                    if variant == "cpl3-dirty" && has_avx512 {
                        ", zmm"
                    } else {
                        ""
                    },
                    count,
                    cycles / count,
                    Duration(cycles / count, report.tsc_khz),
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

/// A `cpl0` row: markers from CPL3 around the system call, timed at CPL3
/// (the one system-call round trip is included; it is a few emulated
/// instructions against `count` exits).
fn cpl0_loop(kind: ExitKind, count: u64, mark: Option<u32>) -> u64 {
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
    cycles
}

/// Registers loaded with patterns survive each exit kind in `kinds` (`count`
/// exits each; one for an edit or a snapshot); one `name` row per kind.
#[allow(clippy::too_many_arguments)]
fn register_checks(
    report: &mut Report,
    env: Option<&Env>,
    name: &str,
    kinds: &[(&str, CheckExit)],
    count: u64,
    quiet: bool,
    out: &mut Console,
) -> bool {
    let Some(env) = env else {
        skip(report, name, "", "CPU has no XSAVE (XCR0 not set)");
        return true;
    };
    let Some(buf) = scratch(env) else {
        skip(report, name, "", "no arena memory for the xsave images");
        return false;
    };
    let on = OnCpu {
        cpu: 0,
        scratch: buf,
        before_each: &mut || {},
    };
    register_checks_on(report, env, name, kinds, count, quiet, out, on)
}

#[allow(clippy::too_many_arguments)]
fn register_checks_on(
    report: &mut Report,
    env: &Env,
    name: &str,
    kinds: &[(&str, CheckExit)],
    count: u64,
    quiet: bool,
    out: &mut Console,
    on: OnCpu<'_>,
) -> bool {
    let buf = on.scratch;
    let mut ok = true;
    for &(variant, exit) in kinds {
        (on.before_each)();
        if matches!(exit, CheckExit::Edit(_)) && !env.xcr0.contains(xstate::Xfeature::Sse) {
            skip(
                report,
                name,
                variant,
                "needs SSE: XCR0 lacks the XMM registers",
            );
            continue;
        }
        let n = if matches!(exit, CheckExit::Edit(_) | CheckExit::Snapshot) {
            1
        } else {
            count
        };
        // SAFETY: ports granted by the TSS bitmap, BENCH_MMIO_ADDR mapped
        // and unbacked, and the checked components are in the XCR0 the
        // kernel set (which the hardware XCR0 includes).
        let outcome = match unsafe { xcheck::run_on(env, exit, n, buf, on.cpu) } {
            Ok(o) => o,
            Err(e) => {
                skip_fmt(report, name, variant, format_args!("{e}"));
                ok = false;
                continue;
            }
        };
        let pass = outcome.passed();
        ok &= pass;
        report.push_result(record(name, variant, n, n, outcome.cycles, pass));
        let mut reason = Reason::new();
        if let Some(m) = outcome.load {
            let _ = write!(reason, "pattern did not load: {m}");
        } else if outcome.edit_ignored {
            let _ = write!(
                reason,
                "VMM ignored the edit request: xmm{EDIT_REG} unchanged (port 0xe8)"
            );
        } else if let Some(m) = outcome.after {
            let _ = write!(reason, "{m} after {n} {variant}");
        } else if let Some(g) = outcome.gpr {
            let _ = write!(reason, "{g} after {n} {variant}");
        }
        if !pass {
            report.push_skipped(SkipRecord {
                name: fixed_str(name),
                variant: fixed_str(variant),
                reason: reason.field(),
            });
        }
        if !quiet {
            let _ = writeln!(
                out,
                "guest: bench {name} [{variant}]: {} over {n} {} ({}): {}",
                if pass { "preserved" } else { "FAILED" },
                match exit {
                    CheckExit::Edit(_) => "edit request",
                    CheckExit::Snapshot => "snapshot request",
                    _ => "exits",
                },
                xstate::XfeatureMask::from_bits(outcome.mask.bits()),
                if pass { "ok" } else { reason.as_str() }
            );
            out.flush();
        }
    }
    ok
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

/// Scratch bytes an AP's xstate check needs: enough for every component
/// the CPU supports, whatever XCR0 the AP sets.
fn xcheck_scratch_len(env: &Env, supported: u64) -> usize {
    let all = Env {
        info: env.info,
        xcr0: XfeatureMask::from_bits(supported),
    };
    xcheck::scratch_bytes(&all).max(xcheck::scratch_bytes(env))
}

/// The workloads' view of a CPU from its own report.
pub fn features(report: &Report) -> CpuFeatures {
    CpuFeatures::from_cpuid(
        report.cpuid1_ecx,
        report.cpuid1_edx,
        report.cpuid7_ebx,
        report.cpuid7_ecx,
        report.xcr0,
    )
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

/// The largest cache CPUID describes (deterministic cache parameters, leaf
/// 4 on Intel, 0x8000001D on AMD; both have the same format), in bytes; 0
/// when it describes none. Read at CPL0 (the VMM's view), a few leaves.
fn llc_bytes() -> u64 {
    let mut best = 0u64;
    let mut scan = |leaf: u32| {
        for sub in 0..16 {
            let r = cpu::cpuid(leaf, sub);
            if r.eax & 0x1f == 0 {
                break;
            }
            let ways = u64::from(r.ebx >> 22) + 1;
            let parts = u64::from((r.ebx >> 12) & 0x3ff) + 1;
            let line = u64::from(r.ebx & 0xfff) + 1;
            let sets = u64::from(r.ecx) + 1;
            best = best.max(ways * parts * line * sets);
        }
    };
    if cpu::cpuid(0, 0).eax >= 4 {
        scan(4);
    }
    if cpu::cpuid(0x8000_0000, 0).eax >= 0x8000_001d {
        scan(0x8000_001d);
    }
    best
}

/// `bench=copy`: the borrowing price, the sweep, the policy; see
/// [`guest::bench::copy`].
fn copy_rows(report: &mut Report, env: Option<&Env>, quiet: bool, out: &mut Console) -> bool {
    let t0 = cpu::rdtsc();
    let feat = CpuFeatures::from_cpuid(
        report.cpuid1_ecx,
        report.cpuid1_edx,
        report.cpuid7_ebx,
        report.cpuid7_ecx,
        report.xcr0,
    );
    let mut table = guest::protocol::CopyReport::EMPTY;
    if let Some(env) = env {
        match arena::alloc_bytes(copy::borrow_scratch_bytes(env)) {
            // SAFETY: env.xcr0 is the XCR0 the kernel set.
            Some(buf) => unsafe { copy::borrow(env, buf, &mut table) },
            None => skip(
                report,
                "copy",
                "borrow",
                "no arena memory for the xsave areas",
            ),
        }
    } else {
        skip(report, "copy", "borrow", "CPU has no XSAVE (XCR0 not set)");
    }
    let want = copy::full_scratch_bytes().min(arena::available() as usize);
    let Some(scratch) = arena::alloc_bytes(want) else {
        skip(report, "copy", "", "no arena memory for the copy buffers");
        return false;
    };
    let llc = llc_bytes();
    // SAFETY: `feat` comes from the guest's CPUID and the XCR0 it set.
    unsafe { copy::sweep(&feat, llc, scratch, &mut table) };
    if (table.cold_region as usize) < copy::MAX_REGION {
        skip_fmt(
            report,
            "copy",
            "sizes",
            format_args!(
                "{} MiB of buffers: give --mem 512 for every size",
                scratch.len() >> 20
            ),
        );
    }
    let mut ok = true;
    if let Some(p) = Policy::from_table(&table) {
        libc::set_policy(p);
        table.policy_measured = 1;
        let (checked, good) = check_memcpy(scratch, table.cold_region as usize, p);
        ok &= good;
        report.push_result(record("memcpy-policy", "check", checked, checked, 0, good));
        if !good {
            skip(
                report,
                "memcpy-policy",
                "check",
                "memcpy under the measured policy copied wrong bytes",
            );
        }
    }
    let p = libc::policy();
    table.memcpy_rep_min = p.memcpy_rep_min;
    table.memcpy_nt_min = p.memcpy_nt_min;
    table.memset_rep_min = p.memset_rep_min;
    report.copy = table;
    if !quiet {
        let _ = writeln!(
            out,
            "guest: bench copy: {} methods, region {} MiB, LLC {} KiB, {}; memcpy: {}",
            table.methods.count_ones(),
            table.cold_region >> 20,
            llc >> 10,
            Duration(cpu::rdtsc().wrapping_sub(t0), report.tsc_khz),
            Steps(p),
        );
        out.flush();
    }
    ok
}

/// A policy's `memcpy` steps for the console: `sse2 from 33 B, nt-sse2
/// from 33554432 B` (the methods it runs, not its raw thresholds, one of
/// which may never be reached).
struct Steps(Policy);

impl core::fmt::Display for Steps {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (k, (from, m)) in self.0.memcpy_steps().into_iter().flatten().enumerate() {
            let sep = if k == 0 { "" } else { ", " };
            write!(f, "{sep}{} from {from} B", m.name())?;
        }
        Ok(())
    }
}

/// `memcpy` (through `copy_nonoverlapping`, which the compiler lowers to a
/// call for sizes it does not know) at sizes on both sides of each
/// threshold of `p`, misaligned, inside `scratch`'s two regions of `region`
/// bytes; returns the bytes checked and whether every copy was exact.
fn check_memcpy(scratch: &mut [u8], region: usize, p: Policy) -> (u64, bool) {
    let (src, dst) = scratch.split_at_mut(region);
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(13) ^ (i >> 8) as u8;
    }
    let mut checked = 0u64;
    let mut good = true;
    let edges = [p.memcpy_rep_min, p.memcpy_nt_min];
    for edge in edges.iter().filter(|&&e| e != u64::MAX) {
        for delta in [-17i64, -1, 0, 1, 33] {
            let n = (*edge as i64 + delta).max(33) as usize;
            if n + 8 > region.min(dst.len()) {
                continue;
            }
            let (s, d) = (&src[3..3 + n], &mut dst[5..5 + n]);
            d.fill(0);
            // SAFETY: two distinct slices of `n` bytes.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    core::hint::black_box(s.as_ptr()),
                    d.as_mut_ptr(),
                    core::hint::black_box(n),
                )
            };
            good &= s == &d[..];
            checked += n as u64;
        }
    }
    (checked, good)
}
