//! `selftest` on the command line: every system call once, with the answers
//! checked and printed, so a change to the CPL0 path shows up as a failed
//! run rather than as odd numbers in a benchmark.

use super::serial::Console;
use super::{arena, cpu, syscall, xcr0};
use core::fmt::Write;
use guest::protocol::Report;

/// `selftest`: every system call once, with the answers checked. Returns
/// true when all behaved.
#[inline(never)]
pub fn run(report: &Report, out: &mut Console) -> bool {
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
        let same = unsafe { xcr0::xsetbv(0, report.xcr0) };
        // SAFETY: XCR0 = 0 is architecturally invalid (x87 must be set): the
        // CPU refuses it and nothing changes.
        let invalid = unsafe { xcr0::xsetbv(0, 0) };
        let _ = writeln!(
            out,
            "guest: selftest: xsetbv(XCR0={:#x}) {:?}; xsetbv(XCR0=0) {:?}",
            report.xcr0, same, invalid
        );
        ok &= same.is_ok() && invalid.is_err() && xcr0::xcr0() == report.xcr0;
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
