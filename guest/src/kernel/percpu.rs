//! Which CPU is running: what per-CPU state (XCR0's record, the SMP
//! slots) is indexed by. Its own module so that `xcr0` and `smp` need not
//! know about each other.

use super::boot::AP_USER_STACK_SHIFT;
use guest::protocol::record::MAX_CPUS;

extern "C" {
    static ap_user_stacks_base: u8;
    static ap_user_stacks_end: u8;
}

/// The index of the CPU running this code: 0 for the BSP; an AP is known
/// by its user stack (each has its own, `boot/ap.s`). Code on the shared
/// fault stack counts as CPU 0.
pub fn this_cpu() -> usize {
    let sp: u64;
    // SAFETY: reads RSP only.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    let base = core::ptr::addr_of!(ap_user_stacks_base) as u64;
    let end = core::ptr::addr_of!(ap_user_stacks_end) as u64;
    if (base..end).contains(&sp) {
        (((sp - base) >> AP_USER_STACK_SHIFT) + 1).min(u64::from(MAX_CPUS) - 1) as usize
    } else {
        0
    }
}
