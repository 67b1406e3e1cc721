//! `hostile=MODE`: the guest misbehaving on purpose, so the tests can show
//! the VMM survives every guest (bounded memory, refusals answered, forged
//! statuses and XCR0 values outside the policy caught). See
//! [`guest::protocol::HOSTILE_MODES`] and the word table in
//! [`guest::protocol`].
//!
//! Runs at CPL3 after setup (XCR0 policy applied, CPU part of the report
//! filled). The floods never return: the VMM's `--timeout` ends them.

use super::report;
use super::serial::{self, Console};
use super::syscall::{self, outl};
use super::xcr0;
use core::fmt::Write;
use guest::protocol::{
    xmm_edit_pattern, ExitStatus, Report, DEBUG_EXIT_PORT, EDIT_STATUS_DONE, EDIT_STATUS_REFUSED,
    HOSTILE_MODES, MARK_PORT, REPORT_PORT, XSTATE_EDIT_PORT,
};
use xstate::Xfeature;

/// A report address in the 32-bit hole below 4 GiB, which is never guest
/// RAM `vmm` gives (RAM past 3 GiB continues at 4 GiB): every handover is
/// refused as "not in guest RAM".
const BAD_REPORT_ADDR: u32 = 0xffff_f000;

/// The register an `edit-xmm` request names.
const EDIT_REG: u32 = 3;

/// Misbehave as `mode` says. Returns the status the run should end with
/// when the mode lets it go on (`edit-xmm`, `xsetbv-all`); the floods and
/// `status-N` never return.
#[inline(never)]
pub fn run(mode: &str, report: &mut Report, out: &mut Console) -> ExitStatus {
    match mode {
        "idle" => loop {
            core::hint::spin_loop();
        },
        "report-flood" => loop {
            report::send(report);
        },
        "bad-report-flood" => {
            let mut i = 0u32;
            loop {
                // Alternate the two refusals: outside RAM, and RAM holding
                // no report (page 0).
                outl(REPORT_PORT, if i & 1 == 0 { BAD_REPORT_ADDR } else { 0 });
                i = i.wrapping_add(1);
            }
        }
        "mark-flood" => {
            let mut i = 0u32;
            loop {
                outl(MARK_PORT, i);
                i = i.wrapping_add(1);
            }
        }
        "serial-flood" => {
            // One exit per 4 KiB: the fastest way to push bytes at COM1.
            let mut block = [0u8; 4096];
            for (i, b) in block.iter_mut().enumerate() {
                *b = if i % 64 == 63 {
                    b'\n'
                } else {
                    b'a' + (i % 26) as u8
                };
            }
            loop {
                serial::write_bytes(&block);
            }
        }
        // `cli; hlt` for good: with the LAPIC the VMM gives this guest, the
        // HLT stays in KVM, and only the VMM's halt watch ends the run.
        "halt" => {
            out.flush();
            syscall::park_forever()
        }
        // `sti; hlt` for good, no timer or device armed: a kernel's idle
        // loop with nothing left to wait for; the halt watch ends it too.
        "idle-halt" => {
            out.flush();
            syscall::idle_forever()
        }
        "edit-xmm" => edit_xmm(out),
        "xsetbv-all" => xsetbv_all(out),
        other => match other.strip_prefix("status-").map(str::parse::<u32>) {
            Some(Ok(status)) => {
                out.flush();
                outl(DEBUG_EXIT_PORT, status);
                syscall::halt_forever()
            }
            _ => {
                let _ = writeln!(
                    out,
                    "guest: unknown hostile mode \"{other}\" (known: {HOSTILE_MODES:?})"
                );
                ExitStatus::SetupFailed
            }
        },
    }
}

/// Ask the VMM to set XMM3 and read its answer back from the same port:
/// done when the guest's XCR0 holds SSE state (XMM3 then holds the
/// pattern), refused otherwise. A wrong answer is a failed check.
fn edit_xmm(out: &mut Console) -> ExitStatus {
    let has_sse = xcr0::xcr0() & Xfeature::Sse.bit() != 0;
    let mut xmm = [0u8; 16];
    let answer: u32;
    // SAFETY: IOPL=3 grants CPL3 the port; the VMM may replace XMM3 at the
    // `out` exit, which is declared clobbered; the store writes 16 bytes
    // into `xmm`. SSE instructions need CR4.OSFXSR, not XCR0.SSE.
    unsafe {
        core::arch::asm!(
            "out dx, eax",
            "movdqu [{p}], xmm3",
            "in eax, dx",
            p = in(reg) xmm.as_mut_ptr(),
            in("dx") XSTATE_EDIT_PORT,
            inout("eax") EDIT_REG => answer,
            out("xmm3") _,
            options(nostack, preserves_flags)
        );
    }
    let expected = if has_sse {
        EDIT_STATUS_DONE
    } else {
        EDIT_STATUS_REFUSED
    };
    let pattern_ok = !has_sse || xmm == xmm_edit_pattern(EDIT_REG);
    let _ = writeln!(
        out,
        "guest: hostile edit-xmm: XCR0 {:#x}, the VMM answered {answer} (expected {expected}), XMM{EDIT_REG} {}",
        xcr0::xcr0(),
        if !has_sse {
            "not checked"
        } else if pattern_ok {
            "holds the pattern"
        } else {
            "does NOT hold the pattern"
        }
    );
    out.flush();
    if answer == expected && pattern_ok {
        ExitStatus::Success
    } else {
        ExitStatus::CheckFailed
    }
}

/// Set XCR0 to everything CPUID 0xD.0 offers, ignoring the `xfeatures=`
/// policy. A KVM that holds the guest to its CPUID refuses the XSETBV;
/// one that does not (kvm_pvm) leaves it to the VMM to notice.
fn xsetbv_all(out: &mut Console) -> ExitStatus {
    let (eax, _, _, edx) = syscall::cpuid_cpl0(0xd, 0);
    let all = (u64::from(edx) << 32) | u64::from(eax);
    // SAFETY: this only enables components (CPUID 0xD.0 is what the boot
    // path set XCR0 to); no live value depends on a disabled one.
    let result = unsafe { xcr0::xsetbv(0, all) };
    let _ = writeln!(
        out,
        "guest: hostile xsetbv-all: XCR0 {all:#x} (policy ignored): {}",
        if result.is_ok() { "set" } else { "refused" }
    );
    out.flush();
    ExitStatus::Success
}
