//! `bench=copy`: the borrowing price, the copy sweep and the `memcpy`
//! policy it sets, checked on sizes around each threshold.

use core::fmt::Write;

use guest::bench::copy::{self, crossover::Policy};
use guest::bench::Env;
use guest::protocol::Report;
use guest::workloads::CpuFeatures;

use super::rows::{record, skip, skip_fmt, Duration};
use crate::kernel::serial::Console;
use crate::kernel::{arena, cpu, libc};

/// The largest cache CPUID describes (deterministic cache parameters, leaf
/// 4 on Intel, 0x8000001D on AMD; both have the same format), in bytes; 0
/// when it describes none. Read at CPL0 (the VMM's view), a few leaves.
pub(super) fn llc_bytes() -> u64 {
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
pub(super) fn copy_rows(
    report: &mut Report,
    env: Option<&Env>,
    quiet: bool,
    out: &mut Console,
) -> bool {
    let t0 = cpu::rdtsc();
    let feat = CpuFeatures::from_report(report);
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
        // Bytes checked, untimed: a check, not a measurement.
        let mut row = record("memcpy-policy", "check", checked, checked, 0, good);
        row.unit = guest::protocol::WorkUnit::Bytes as u32;
        report.push_result(row);
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
pub(super) struct Steps(Policy);

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
pub(super) fn check_memcpy(scratch: &mut [u8], region: usize, p: Policy) -> (u64, bool) {
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
