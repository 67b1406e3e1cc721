//! What every bench row shares: its skip and result records, the short
//! duration the console prints, and the arena scratch for the xsave images.

use core::fmt::Write;

use guest::bench::{ctxsw, xcheck, Env};
use guest::protocol::{fixed_str, Report, ResultRecord, SkipRecord, WorkUnit};
use guest::workloads::Reason;

use crate::kernel::arena;

pub(super) fn scratch(env: &Env) -> Option<&'static mut [u8]> {
    arena::alloc_bytes(ctxsw::scratch_bytes(env).max(xcheck::scratch_bytes(env)))
}

pub(super) fn skip(report: &mut Report, name: &str, variant: &str, reason: &str) {
    report.push_skipped(SkipRecord {
        name: fixed_str(name),
        variant: fixed_str(variant),
        reason: Reason::of(reason).field(),
    });
}

pub(super) fn skip_fmt(
    report: &mut Report,
    name: &str,
    variant: &str,
    reason: core::fmt::Arguments<'_>,
) {
    let mut r = Reason::new();
    let _ = r.write_fmt(reason);
    report.push_skipped(SkipRecord {
        name: fixed_str(name),
        variant: fixed_str(variant),
        reason: r.field(),
    });
}

pub(super) fn record(
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
pub(super) struct Duration(pub(super) u64, pub(super) u64);

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
