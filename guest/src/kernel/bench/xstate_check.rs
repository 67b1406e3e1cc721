//! `bench=xstate-check` and `bench=snapshot-check`: registers loaded with
//! patterns survive exits, edit requests and snapshots, on the BSP and, at
//! the same moments, on every AP.

use core::fmt::Write;

use guest::bench::xcheck::{self, CheckExit};
use guest::bench::Env;
use guest::protocol::{fixed_str, Report, SkipRecord};
use guest::workloads::Reason;
use xstate::XfeatureMask;

use super::rows::{record, scratch, skip, skip_fmt};
use crate::kernel::serial::Console;
use crate::kernel::shared::{self, Work};

/// The XMM register the edit check asks the VMM to change.
pub const EDIT_REG: u32 = 5;

/// The `xstate-check` rows' exits, in order.
pub(super) const XCHECK_KINDS: [(&str, CheckExit); 4] = [
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
pub(super) fn bsp_xstate_checks(
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

/// Registers loaded with patterns survive each exit kind in `kinds` (`count`
/// exits each; one for an edit or a snapshot); one `name` row per kind.
#[allow(clippy::too_many_arguments)]
pub(super) fn register_checks(
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
pub(super) fn register_checks_on(
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

/// Scratch bytes an AP's xstate check needs: enough for every component
/// the CPU supports, whatever XCR0 the AP sets.
pub(super) fn xcheck_scratch_len(env: &Env, supported: u64) -> usize {
    let all = Env {
        info: env.info,
        xcr0: XfeatureMask::from_bits(supported),
    };
    xcheck::scratch_bytes(&all).max(xcheck::scratch_bytes(env))
}
