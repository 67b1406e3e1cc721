//! Reporting a CPU exception or a panic, at CPL3.
//!
//! The CPL0 fault stub in [`super::boot`] records the exception in
//! `kernel_fault` and `iretq`s here on a fresh stack (the faulting task's
//! stack may be what broke). From here on the run is over: the fault goes
//! into the report, the report goes to the VMM and the run ends with
//! [`ExitStatus::Exception`]. A second fault while this runs is handled at
//! CPL0 (fixed message, debug exit), so there is no loop.

use super::boot;
use super::report;
use super::serial::Console;
use super::syscall::exit_direct;
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, Ordering};
use guest::protocol::{exception_mnemonic, ExitStatus};

/// True for the vectors that push an error code.
pub fn has_error_code(vector: u32) -> bool {
    matches!(vector, 8 | 10..=14 | 17 | 21 | 29 | 30)
}

/// Entered from the CPL0 fault stub at CPL3, on CPU `cpu`'s own fault
/// stack, with that CPU's fault recorded.
#[no_mangle]
pub extern "C" fn kernel_on_fault(cpu: u32) -> ! {
    let cpu = cpu as usize;
    let fault = boot::recorded_fault(cpu);
    // SAFETY: the faulting flow of control is abandoned for good (the stub
    // never returns to it), so this is now the only reference to this
    // CPU's report (the BSP's, or the AP's own slot).
    let report = unsafe {
        &mut *if cpu == 0 {
            report::report_ptr()
        } else {
            super::percpu::ap_report_ptr(cpu)
        }
    };
    report.fault = fault;
    let mut out = Console::new();
    let _ = write!(out, "guest: ");
    if cpu != 0 {
        let _ = write!(out, "cpu{cpu}: ");
    }
    let _ = write!(out, "exception {}", exception_mnemonic(fault.vector));
    if has_error_code(fault.vector) {
        let _ = write!(out, "({:#x})", fault.error_code);
    }
    let _ = write!(out, " at rip {:#x} (CPL{})", fault.rip, fault.cpl);
    if fault.vector == 14 {
        let _ = write!(out, ", cr2 {:#x}", fault.cr2);
    }
    let _ = writeln!(out);
    out.flush();
    report::send_everywhere(report, &mut out);
    exit_direct(ExitStatus::Exception)
}

static PANICKING: AtomicBool = AtomicBool::new(false);

/// The kernel's panic handler: say where, hand over the report as far as
/// it got, and end the run as a guest exception.
pub fn on_panic(info: &core::panic::PanicInfo<'_>) -> ! {
    if PANICKING.swap(true, Ordering::Relaxed) {
        // Panicked while reporting a panic: just stop.
        exit_direct(ExitStatus::Exception)
    }
    let mut out = Console::new();
    let _ = writeln!(out, "guest: {info}");
    out.flush();
    // SAFETY: the panicking flow of control never resumes (panic=abort
    // semantics), so this is now the only reference to this CPU's report.
    let cpu = super::percpu::this_cpu();
    let report = if cpu == 0 {
        report::report_ptr()
    } else {
        super::percpu::ap_report_ptr(cpu)
    };
    // SAFETY: see above.
    report::send_everywhere(unsafe { &*report }, &mut out);
    exit_direct(ExitStatus::Exception)
}

/// Raise the exception `fault=KIND` asks for (see
/// [`guest::protocol::FAULT_KINDS`]); returns only for an unknown kind.
#[inline(never)]
pub fn provoke(kind: &str) {
    // Each sequence below faults on its first memory or arithmetic access
    // and never completes, so no Rust-visible state changes; the fault
    // handler takes the run over.
    match kind {
        // SAFETY: UD2 raises #UD and touches nothing.
        "ud" => unsafe { core::arch::asm!("ud2", options(nostack)) },
        // SAFETY: a division by zero raises #DE before any register the
        // compiler relies on is written (all three are declared clobbered).
        "de" => unsafe {
            core::arch::asm!("xor edx, edx", "xor eax, eax", "xor ecx, ecx", "div ecx",
                out("eax") _, out("ecx") _, out("edx") _, options(nostack));
        },
        // SAFETY: page 0 is deliberately not mapped: the read raises #PF.
        "pf" => unsafe {
            core::arch::asm!("mov rax, qword ptr [rcx]", in("rcx") 8u64, out("rax") _,
                options(nostack, readonly));
        },
        // SAFETY: a non-canonical address: the read raises #GP.
        "gp" => unsafe {
            core::arch::asm!("mov rax, qword ptr [rcx]", in("rcx") 0x8000_0000_0000_0000u64,
                out("rax") _, options(nostack, readonly));
        },
        _ => {}
    }
}
