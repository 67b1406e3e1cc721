//! XCR0: the one register that decides which xfeatures the guest's tasks
//! may use. The boot path sets it to everything CPUID 0xD.0 offers; this
//! module narrows it to the VMM's `xfeatures=` policy, changes it through
//! the XSETBV system call, and remembers what it set, because CPL3 code
//! cannot always read it back (see [`xcr0_given`]).
//!
//! Its own module so that CPUID ([`super::cpu`]) and the system calls
//! ([`super::syscall`]) need not know about each other.

use super::cpu::cpuid;
use super::{boot, syscall};
use core::fmt::Write;
use core::sync::atomic::{AtomicU64, Ordering};
use guest::protocol::Cmdline;
use xstate::info::leaf_1_ecx;
use xstate::XfeatureMask;

/// XGETBV(`index`): 0 is XCR0, 1 is XINUSE (XCR0 & state not in init).
///
/// # Safety
/// CR4.OSXSAVE must be set (CPUID.1:ECX.OSXSAVE) and, for index 1,
/// CPUID 0xD.1 EAX bit 2; otherwise the instruction raises #UD/#GP.
pub unsafe fn xgetbv(index: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: preconditions are the caller's; XGETBV only reads an XCR.
    unsafe {
        core::arch::asm!("xgetbv", in("ecx") index, out("eax") lo, out("edx") hi,
            options(nostack, nomem, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Per CPU: XCR0 written by the last successful XSETBV syscall; 0 = none
/// since boot. XCR0 is per logical processor, so is the record.
static XCR0_SET: [AtomicU64; guest::protocol::record::MAX_CPUS as usize] =
    [const { AtomicU64::new(0) }; guest::protocol::record::MAX_CPUS as usize];

/// Remember an XCR0 the kernel set after boot on this CPU.
pub fn record_xcr0(value: u64) {
    XCR0_SET[super::percpu::this_cpu()].store(value, Ordering::Relaxed);
}

/// XCR0 as the kernel set it, or 0 when the OS has not enabled XSAVE.
pub fn xcr0() -> u64 {
    xcr0_given(cpuid(1, 0).ecx)
}

/// [`xcr0`] with CPUID.1:ECX already read.
///
/// This is the kernel's own record, not XGETBV(0) at CPL3: where CPL3 code
/// runs directly on the host (kvm_pvm) XGETBV there returns the host's
/// XCR0, not the guest's (see [`xcr0_hardware`]). The boot path sets
/// XCR0 to CPUID 0xD.0 EDX:EAX unless that XSETBV faulted.
pub fn xcr0_given(cpuid1_ecx: u32) -> u64 {
    if cpuid1_ecx & leaf_1_ecx::OSXSAVE == 0 {
        return 0;
    }
    let cpu = super::percpu::this_cpu();
    match XCR0_SET[cpu].load(Ordering::Relaxed) {
        // APs leave XCR0 at its reset value until they set their own.
        0 if cpu != 0 => 1,
        0 if boot::boot_xsetbv_faulted() => 1,
        0 => {
            let d0 = cpuid(0xd, 0);
            (u64::from(d0.edx) << 32) | u64::from(d0.eax)
        }
        set => set,
    }
}

/// XGETBV(0) executed at CPL3: the XCR0 the hardware applies to this code.
pub fn xcr0_hardware(cpuid1_ecx: u32) -> u64 {
    if cpuid1_ecx & leaf_1_ecx::OSXSAVE == 0 {
        return 0;
    }
    // SAFETY: CPUID.1:ECX.OSXSAVE is set, so CR4.OSXSAVE is.
    unsafe { xgetbv(0) }
}

/// The CPU refused an XSETBV value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XsetbvRefused {
    pub index: u32,
    pub value: u64,
}

/// XSETBV(index, value) at CPL0.
///
/// # Safety
/// Disabling a state component the running code keeps live values in
/// (e.g. clearing AVX while the compiler holds YMM values) corrupts them.
pub unsafe fn xsetbv(index: u32, value: u64) -> Result<(), XsetbvRefused> {
    // SAFETY: forwarded to the caller's contract.
    let ret = unsafe { syscall::syscall3(syscall::SYS_XSETBV, index.into(), value, 0) };
    debug_assert!(ret == 0 || ret == syscall::SYS_ERR_REFUSED);
    if ret == 0 {
        // Leaf 0xD's sizes follow XCR0.
        super::cpu::forget();
        if index == 0 {
            record_xcr0(value);
        }
        Ok(())
    } else {
        Err(XsetbvRefused { index, value })
    }
}

/// Narrow XCR0 to the VMM's `xfeatures=` policy.
///
/// The boot path set XCR0 to everything CPUID 0xD offers. A VMM's CPUID
/// normally already is its policy, but where KVM answers CPUID from the
/// host (kvm_pvm) only this hint carries it, so the guest takes the
/// intersection and checks it is a valid XCR0 before XSETBV.
pub fn apply_policy(cmdline: &Cmdline, out: &mut impl Write) -> Result<(), &'static str> {
    if let Some(bad) = cmdline.bad_xfeatures {
        let _ = writeln!(out, "guest: xfeatures={bad} is not a hex mask");
        return Err("bad xfeatures= word");
    }
    let Some(policy) = cmdline.xfeatures else {
        return Ok(());
    };
    let current = xcr0();
    if current == 0 {
        return Ok(()); // no XSAVE: nothing to narrow
    }
    // The supported mask (EAX, EDX) does not follow XCR0: the answer the
    // boot's prefetch kept will do (no system call).
    let d0 = cpuid(0xd, 0);
    let supported = (u64::from(d0.edx) << 32) | u64::from(d0.eax);
    let target = supported & policy;
    if target == current {
        return Ok(());
    }
    if let Err(e) =
        XfeatureMask::from_bits(target).validate_xcr0(XfeatureMask::from_bits(supported))
    {
        let _ = writeln!(
            out,
            "guest: xfeatures={policy:#x} & CPUID {supported:#x} = {target:#x} is no valid XCR0: {e}"
        );
        return Err("invalid xfeatures= policy");
    }
    // SAFETY: `target` passed the SDM's XCR0 rules for this CPU's mask; a
    // refusal is returned, not raised.
    unsafe { xsetbv(0, target) }.map_err(|_| "XSETBV refused the xfeatures= policy")
}
