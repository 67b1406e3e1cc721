//! Which CPU is running: what per-CPU state (XCR0's record, the SMP
//! slots) is indexed by. Its own module so that `xcr0` and `smp` need not
//! know about each other.

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU32, Ordering};

use super::boot::{AP_FAULT_STACK_SHIFT, AP_USER_STACK_SHIFT};
use guest::protocol::record::MAX_CPUS;
use guest::protocol::Report;

const N: usize = MAX_CPUS as usize;

struct Reports(UnsafeCell<[MaybeUninit<Report>; N]>);
// SAFETY: CPU i alone writes slot i (its `ap_main`, or its fault path);
// the BSP reads it only after that AP says it is finished with it.
unsafe impl Sync for Reports {}
/// Per AP: its report (in .bss; initialised on first use by its CPU).
/// At the end of .bss (linker.ld): a boot with one CPU never touches its
/// 105 KiB, and between the small statics every boot uses it put them on
/// pages of their own, a guest page fault each.
#[link_section = ".bss.z_cold.ap_reports"]
static AP_REPORTS: Reports = Reports(UnsafeCell::new([const { MaybeUninit::uninit() }; N]));
/// Per CPU: 1 once its report slot is initialised.
static REPORT_READY: [AtomicU32; N] = [const { AtomicU32::new(0) }; N];

/// AP `cpu`'s report slot, initialised on the first call (by that AP: its
/// `ap_main`, or its fault path when it faulted before). An index past
/// the slots gets the last slot (the fault stub refuses such CPUs).
///
/// The pointer is for CPU `cpu` alone, and for the BSP once the AP has
/// handed its report over.
pub fn ap_report_ptr(cpu: usize) -> *mut Report {
    let cpu = cpu.min(N - 1);
    // SAFETY: slot `cpu` is only touched through this function, by CPU
    // `cpu` (see `Reports`); initialising writes a whole valid `Report`.
    unsafe {
        let slot = &mut (*AP_REPORTS.0.get())[cpu];
        if REPORT_READY[cpu].load(Ordering::Relaxed) == 0 {
            slot.write(Report::new());
            REPORT_READY[cpu].store(1, Ordering::Release);
        }
        slot.as_mut_ptr()
    }
}

extern "C" {
    static ap_user_stacks_base: u8;
    static ap_user_stacks_end: u8;
    static ap_fault_stacks_base: u8;
    static ap_fault_stacks_end: u8;
}

/// The index of the CPU running this code: 0 for the BSP; an AP is known
/// by its user stack or its fault-reporter stack (each has its own,
/// `boot/ap.s`). Code on the BSP's stacks counts as CPU 0.
pub fn this_cpu() -> usize {
    let sp: u64;
    // SAFETY: reads RSP only.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    let base = core::ptr::addr_of!(ap_user_stacks_base) as u64;
    let end = core::ptr::addr_of!(ap_user_stacks_end) as u64;
    let fault_base = core::ptr::addr_of!(ap_fault_stacks_base) as u64;
    let fault_end = core::ptr::addr_of!(ap_fault_stacks_end) as u64;
    let index = if (base..end).contains(&sp) {
        ((sp - base) >> AP_USER_STACK_SHIFT) + 1
    } else if (fault_base..fault_end).contains(&sp) {
        ((sp - fault_base) >> AP_FAULT_STACK_SHIFT) + 1
    } else {
        0
    };
    index.min(u64::from(MAX_CPUS) - 1) as usize
}
