//! The XSAVE-family instructions themselves, one `unsafe fn` each with its
//! contract in `# Safety`, plus the reads of the floating-point control
//! state and the TSC that the checked wrappers and the chooser need.
//!
//! Nothing here checks anything: [`super`] does the checks once and
//! benchmarks call these directly in their loops.

use core::arch::asm;

/// Executes XGETBV.
///
/// # Safety
/// OSXSAVE must be set, and `index` must be 0, or 1 with XGETBV1 support.
pub(crate) unsafe fn xgetbv_raw(index: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: the caller guarantees the index is supported; XGETBV only
    // writes EDX:EAX.
    unsafe {
        asm!("xgetbv", in("ecx") index, out("eax") lo, out("edx") hi,
             options(nomem, nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Executes XSAVE.
///
/// # Safety
/// `area` must be 64-byte aligned and writable for the standard size of
/// `rfbm & XCR0`; OSXSAVE must be set.
#[inline]
pub unsafe fn xsave_raw(area: *mut u8, rfbm: u64) {
    // SAFETY: guaranteed by the caller; XSAVE reads registers and writes memory.
    unsafe {
        asm!("xsave64 [{}]", in(reg) area, in("eax") rfbm as u32, in("edx") (rfbm >> 32) as u32,
             options(nostack, preserves_flags));
    }
}

/// Executes XSAVEOPT.
///
/// # Safety
/// As [`xsave_raw`], and the CPU must support XSAVEOPT.
#[inline]
pub unsafe fn xsaveopt_raw(area: *mut u8, rfbm: u64) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        asm!("xsaveopt64 [{}]", in(reg) area, in("eax") rfbm as u32, in("edx") (rfbm >> 32) as u32,
             options(nostack, preserves_flags));
    }
}

/// Executes XSAVEC.
///
/// # Safety
/// `area` must be 64-byte aligned and writable for the compacted size of
/// `rfbm & XCR0`; the CPU must support XSAVEC.
#[inline]
pub unsafe fn xsavec_raw(area: *mut u8, rfbm: u64) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        asm!("xsavec64 [{}]", in(reg) area, in("eax") rfbm as u32, in("edx") (rfbm >> 32) as u32,
             options(nostack, preserves_flags));
    }
}

/// Executes XGETBV(1) and XSAVEC with RFBM = `rfbm & XINUSE`; returns that mask.
///
/// # Safety
/// As [`xsavec_raw`], and the CPU must support XGETBV with ECX = 1.
#[inline]
pub unsafe fn xsavec_xinuse_raw(area: *mut u8, rfbm: u64) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: guaranteed by the caller.
    unsafe {
        asm!(
            "mov ecx, 1",
            "xgetbv",
            // x87 and SSE are always saved, so MXCSR is never lost.
            "or eax, 3",
            "and eax, {lo:e}",
            "and edx, {hi:e}",
            "xsavec64 [{a}]",
            a = in(reg) area,
            lo = in(reg) rfbm as u32,
            hi = in(reg) (rfbm >> 32) as u32,
            out("ecx") _,
            out("eax") lo,
            out("edx") hi,
            options(nostack),
        );
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Executes XRSTOR.
///
/// # Safety
/// `area` must be 64-byte aligned, readable for its format's size and hold
/// a header XRSTOR accepts; the restored state must not break what the
/// calling code relies on (floating-point control words, x87 stack, PKRU).
/// Every vector and x87 register is clobbered.
#[inline]
pub unsafe fn xrstor_raw(area: *const u8, rfbm: u64) {
    // SAFETY: guaranteed by the caller; the clobbers tell the compiler that
    // all caller-saved (vector, x87, mask) registers change.
    unsafe {
        asm!("xrstor64 [{}]", in(reg) area, in("eax") rfbm as u32, in("edx") (rfbm >> 32) as u32,
             clobber_abi("C"), options(nostack, preserves_flags));
    }
}

/// Reads the time-stamp counter, ordered after earlier instructions.
#[inline]
pub fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: LFENCE and RDTSC only read the TSC into EDX:EAX.
    unsafe {
        asm!("lfence", "rdtsc", "lfence", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// The running x87 control word (FNSTCW).
pub(crate) fn fnstcw() -> u16 {
    let mut cw: u16 = 0;
    // SAFETY: FNSTCW only stores the x87 control word to the given location.
    unsafe {
        asm!("fnstcw word ptr [{}]", in(reg) &mut cw, options(nostack, preserves_flags));
    }
    cw
}

/// The running MXCSR (STMXCSR).
pub(crate) fn stmxcsr() -> u32 {
    let mut v: u32 = 0;
    // SAFETY: STMXCSR only stores MXCSR to the given location.
    unsafe {
        asm!("stmxcsr dword ptr [{}]", in(reg) &mut v, options(nostack, preserves_flags));
    }
    v
}
