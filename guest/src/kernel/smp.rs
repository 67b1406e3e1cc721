//! Application processors (APs): how many there are, starting them the
//! standard way, and what each does at CPL3.
//!
//! # Start-up
//!
//! The BSP copies the real-mode trampoline (`boot/ap.s`) to
//! [`AP_TRAMPOLINE`], below 1 MiB as a SIPI vector requires, and sends
//! INIT-SIPI-SIPI to all other CPUs through its LAPIC (ICR at
//! `0xfee00300`). It does so at CPL3: the identity map covers the LAPIC page
//! and is user-accessible, so three stores replace a system call, and no
//! CPL0 instruction is added to the BSP's path. Each AP runs the trampoline
//! (real mode to long mode), takes its LAPIC ID as its CPU index, its own kernel stack,
//! TSS and user stack, and enters [`ap_main`] at CPL3.
//!
//! # What an AP does
//!
//! It sets its own XCR0 (the BSP's policy, or `xfeatures.cpuN=` for CPU N),
//! fills its own [`Report`] (CPUID view, XCR0, XINUSE), does the shared
//! work the BSP asked for (below), hands its report to the VMM through the
//! report port from its own vCPU, says it is done and parks (HLT,
//! interrupts off). The BSP waits for every AP that came up before it
//! reports and exits.
//!
//! # Shared work
//!
//! Two benchmarks run on every CPU at once: `bench=xstate-check` (each CPU
//! its own register pattern, the exits concurrent) and `bench=parallel`
//! (the scaling set of [`guest::bench::parallel`]). The BSP says which
//! before INIT; each AP then waits, spinning at CPL3, until the BSP reaches
//! that benchmark, and every participant holds a barrier in shared memory
//! before each timed or checked step (see [`super::shared`]).

use core::fmt::Write;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use guest::bench::parallel::{self, Part, SMP_SUFFIX};
use guest::firmware::{self, CpuCountSource};
use guest::protocol::record::MAX_CPUS;
use guest::protocol::{Cmdline, Report};

use super::cpu::rdtsc;
use super::report::{self, MaskNames};
use super::serial::Console;
use super::shared::{self, Work};
use super::{bench, percpu, syscall, xcr0};

/// Guest-physical page the trampoline is copied to: SIPI vector 0x08.
pub const AP_TRAMPOLINE: u64 = 0x8000;
/// The LAPIC's MMIO base (the architectural default).
const LAPIC_BASE: u64 = 0xfee0_0000;
/// ICR low dword: writing it sends the IPI.
const LAPIC_ICR_LOW: u64 = LAPIC_BASE + 0x300;
/// ICR high dword: the destination (unused with a shorthand).
const LAPIC_ICR_HIGH: u64 = LAPIC_BASE + 0x310;
/// ICR: destination shorthand "all excluding self", level assert.
const ICR_ALL_BUT_SELF: u32 = (3 << 18) | (1 << 14);
/// ICR delivery mode INIT.
const ICR_INIT: u32 = 5 << 8;
/// ICR delivery mode Start-up (SIPI); the vector is the page number.
const ICR_SIPI: u32 = 6 << 8;
/// How long the BSP waits for the APs to come up, in TSC cycles (a few
/// seconds at any TSC rate this runs on; kvm_pvm emulates the trampoline).
const ONLINE_WAIT_CYCLES: u64 = 1 << 33;
/// How long the BSP waits for the APs to report, in TSC cycles.
const DONE_WAIT_CYCLES: u64 = 1 << 37;

const N: usize = MAX_CPUS as usize;

extern "C" {
    static ap_trampoline: u8;
    static ap_trampoline_end: u8;
}

/// TSC when the BSP sent INIT.
static START_TSC: AtomicU64 = AtomicU64::new(0);
/// Per CPU: the XCR0 it is to set (written by the BSP before INIT).
static TARGET_XCR0: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];
/// Per CPU: 1 + the index in `FAULT_KINDS` of a fault to provoke once up
/// (`fault.cpuN=`), 0 for none.
static FAULT: [AtomicU32; N] = [const { AtomicU32::new(0) }; N];
/// Per CPU: 1 once its report is handed over.
static DONE: [AtomicU32; N] = [const { AtomicU32::new(0) }; N];
/// Per CPU: 1 when one of its own checks failed (APs; read after DONE).
static AP_CHECK_FAILED: [AtomicU32; N] = [const { AtomicU32::new(0) }; N];

/// How many CPUs to run and where that came from: `cpus=N` when given
/// (a user's override), else the ACPI MADT reached through `rsdp` (the
/// PVH start info's `rsdp_paddr`), else the MP table, else 1; at most
/// [`MAX_CPUS`].
pub fn cpu_count(cmdline: &Cmdline, rsdp: u64) -> (u32, CpuCountSource) {
    let (n, source) = match cmdline.cpus {
        Some(n) if n >= 1 => (n, CpuCountSource::Cmdline),
        _ => {
            let ram = |addr: u64, buf: &mut [u8]| read_phys(addr, buf);
            if let Some(n) = firmware::madt_cpus(&ram, rsdp) {
                (n, CpuCountSource::Madt)
            } else if let Some(n) = firmware::mptable_cpus(&ram) {
                (n, CpuCountSource::MpTable)
            } else {
                (1, CpuCountSource::Default)
            }
        }
    };
    (n.min(MAX_CPUS), source)
}

/// Copy guest-physical memory through the identity map (CPL3 may read it
/// all below 4 GiB except the first page).
fn read_phys(addr: u64, buf: &mut [u8]) -> bool {
    let ok = addr >= 0x1000
        && addr
            .checked_add(buf.len() as u64)
            .is_some_and(|end| end <= 0x1_0000_0000);
    if ok {
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: checked above: identity-mapped, user-readable memory
            // (RAM, or the firmware ROM a VMM maps below 1 MiB).
            *b = unsafe { core::ptr::read_volatile((addr as *const u8).add(i)) };
        }
    }
    ok
}

/// What bringing the APs up gave.
#[derive(Clone, Copy, Debug, Default)]
pub struct Started {
    /// CPUs asked for (BSP included).
    pub wanted: u32,
    /// APs that reached CPL3.
    pub online: u32,
}

/// Start CPUs 1..`wanted` (BSP only, after its XCR0 policy is set).
pub fn start_aps(cmdline: &Cmdline, wanted: u32, out: &mut Console) -> Started {
    for (cpu, mask) in cmdline
        .cpu_xfeatures
        .iter()
        .enumerate()
        .filter_map(|(i, m)| m.map(|m| (i, m)))
        .filter(|&(i, _)| !(1..wanted as usize).contains(&i))
    {
        let _ = writeln!(out, "guest: xfeatures.cpu{cpu}={mask:#x}: no such AP");
    }
    if let Some(word) = cmdline.bad_cpu_xfeatures {
        let _ = writeln!(
            out,
            "guest: {word}: no such CPU (at most {MAX_CPUS}) or no hex mask"
        );
    }
    for (cpu, kind) in cmdline
        .cpu_faults
        .iter()
        .enumerate()
        .filter_map(|(i, k)| k.map(|k| (i, k)))
    {
        match guest::protocol::FAULT_KINDS.iter().position(|k| *k == kind) {
            Some(k) if (1..wanted as usize).contains(&cpu) => {
                FAULT[cpu].store(k as u32 + 1, Ordering::Relaxed)
            }
            _ => {
                let _ = writeln!(
                    out,
                    "guest: fault.cpu{cpu}={kind}: no such AP or fault kind (known: {:?})",
                    guest::protocol::FAULT_KINDS
                );
            }
        }
    }
    if let Some(word) = cmdline.bad_cpu_fault {
        let _ = writeln!(out, "guest: {word}: no such CPU (at most {MAX_CPUS})");
    }
    // The per-CPU words above are checked, and named when they name no AP,
    // even when there is none to start.
    if wanted <= 1 {
        return Started { wanted, online: 0 };
    }
    shared::request(wanted, cmdline);
    // `xfeatures.cpuN=` narrows the policy for AP N, never widens it: the
    // policy is the VMM's (CPUID alone does not carry it on kvm_pvm), and
    // the word may come from a user's `--cmdline`.
    let policy = xcr0::xcr0();
    for (i, slot) in TARGET_XCR0.iter().enumerate().take(wanted as usize).skip(1) {
        slot.store(
            cmdline.cpu_xfeatures[i].map_or(policy, |mask| mask & policy),
            Ordering::Relaxed,
        );
    }
    // SAFETY: the two symbols delimit the trampoline in .boot; the page at
    // AP_TRAMPOLINE is identity-mapped RAM nothing else uses (below the
    // VMM's command line, above its start_info and memory map).
    unsafe {
        let from = core::ptr::addr_of!(ap_trampoline);
        let len = core::ptr::addr_of!(ap_trampoline_end) as usize - from as usize;
        core::ptr::copy_nonoverlapping(from, AP_TRAMPOLINE as *mut u8, len);
    }
    START_TSC.store(rdtsc(), Ordering::SeqCst);
    let vector = (AP_TRAMPOLINE >> 12) as u32;
    // SAFETY: the LAPIC page is identity-mapped and user-accessible; these
    // are the architectural ICR writes (INIT, then two SIPIs).
    unsafe {
        icr(ICR_ALL_BUT_SELF | ICR_INIT);
        icr(ICR_ALL_BUT_SELF | ICR_SIPI | vector);
        icr(ICR_ALL_BUT_SELF | ICR_SIPI | vector);
    }
    let begin = rdtsc();
    let online = loop {
        let up = (1..wanted as usize)
            .filter(|&i| shared::online_tsc(i) != 0)
            .count() as u32;
        if up == wanted - 1 || rdtsc().wrapping_sub(begin) > ONLINE_WAIT_CYCLES {
            break up;
        }
        core::hint::spin_loop();
    };
    if online < wanted - 1 {
        let _ = writeln!(
            out,
            "guest: only {online} of {} application processors came up",
            wanted - 1
        );
    }
    Started { wanted, online }
}

/// Write the ICR (destination first).
///
/// # Safety
/// The LAPIC must be mapped at [`LAPIC_BASE`].
unsafe fn icr(low: u32) {
    // SAFETY: the caller's contract; volatile MMIO stores.
    unsafe {
        core::ptr::write_volatile(LAPIC_ICR_HIGH as *mut u32, 0);
        core::ptr::write_volatile(LAPIC_ICR_LOW as *mut u32, low);
    }
}

/// BSP: wait until every AP that came up has reported, then, unless
/// `quiet`, print one line per CPU (for VMMs that only show serial
/// output). Returns false
/// when an AP failed to come up or to report.
pub fn finish(started: Started, bsp: &Report, quiet: bool, out: &mut Console) -> bool {
    if started.wanted <= 1 {
        return true;
    }
    // Work the BSP never reached (a bad benchmark list, no XSAVE): the
    // APs waiting for it go on.
    shared::cancel_outstanding();
    let begin = rdtsc();
    let up = |i: usize| shared::online_tsc(i) != 0;
    while (1..started.wanted as usize).any(|i| up(i) && DONE[i].load(Ordering::Acquire) == 0) {
        if rdtsc().wrapping_sub(begin) > DONE_WAIT_CYCLES {
            let _ = writeln!(out, "guest: an application processor never reported");
            return false;
        }
        core::hint::spin_loop();
    }
    // `quiet` (what `vmm` passes unless --serial): no line at all. Every
    // CPU's report already went to the VMM through the report port, and
    // each serial byte is one VM exit here (KVM hands `rep outsb` to the
    // VMM a byte at a time): the two short lines this used to print were
    // ~90 exits, most of a quiet 2-vCPU boot's run time. An AP that did
    // not come up is still said, as it is not in any report.
    let start = START_TSC.load(Ordering::Relaxed);
    if !quiet {
        let _ = writeln!(
            out,
            "guest: cpu0 xcr0 {} xinuse {:#x}",
            MaskNames(bsp.xcr0),
            bsp.xinuse
        );
    }
    for i in 1..started.wanted as usize {
        let online = shared::online_tsc(i);
        if online == 0 {
            let _ = writeln!(out, "guest: cpu{i} did not come up");
            continue;
        }
        if quiet {
            continue;
        }
        // SAFETY: DONE[i] (Acquire) says AP i initialised and finished
        // writing its slot.
        let r = unsafe { &*percpu::ap_report_ptr(i) };
        let _ = writeln!(
            out,
            "guest: cpu{i} up {} TSC cycles after INIT, xcr0 {} xinuse {:#x}",
            online.wrapping_sub(start),
            MaskNames(r.xcr0),
            r.xinuse
        );
    }
    out.flush();
    started.online == started.wanted - 1
}

/// First Rust code of an AP, at CPL3 on its own stack (`boot/ap.s`).
#[no_mangle]
extern "C" fn ap_main(cpu: u32) -> ! {
    let cpu = cpu as usize;
    if cpu >= N || cpu >= shared::wanted() as usize {
        // An AP nobody asked for: the SIPIs are broadcast (all but self),
        // so with more vCPUs than the kernel has slots, or than `cpus=`
        // wants, the others start too. It parks at once and stays out of
        // every report. (SIPIs by APIC ID, one AP after another, left the
        // second AP down on kvm_pvm in a trial, so the broadcast stays.)
        syscall::park_forever();
    }
    shared::mark_online(cpu, rdtsc());
    // SAFETY: slot `cpu` is this AP's alone; nothing else refers to it
    // until DONE[cpu] says it is finished with it.
    let report = unsafe { &mut *percpu::ap_report_ptr(cpu) };
    let target = TARGET_XCR0[cpu].load(Ordering::Relaxed);
    if super::cpu::cpuid(1, 0).ecx & xstate::info::leaf_1_ecx::OSXSAVE != 0 && target != 0 {
        let (eax, _, _, edx) = syscall::cpuid_cpl0(0xd, 0);
        let supported = (u64::from(edx) << 32) | u64::from(eax);
        let mask = target & supported;
        if xstate::XfeatureMask::from_bits(mask)
            .validate_xcr0(xstate::XfeatureMask::from_bits(supported))
            .is_ok()
        {
            // SAFETY: nothing on this CPU holds state above x87 yet (XCR0
            // was the reset value), and the mask passed the XCR0 rules.
            let _ = unsafe { xcr0::xsetbv(0, mask) };
        }
    }
    if let Some(kind) = FAULT[cpu]
        .load(Ordering::Relaxed)
        .checked_sub(1)
        .and_then(|k| guest::protocol::FAULT_KINDS.get(k as usize))
    {
        // The fault path reports and exits from this vCPU.
        super::fault::provoke(kind);
    }
    let _ = report::fill_cpu(report);
    let mut ok = true;
    for w in Work::ALL {
        if shared::wants(w) {
            ok &= ap_work(w, cpu, report);
        }
    }
    if !ok {
        AP_CHECK_FAILED[cpu].store(1, Ordering::Relaxed);
    }
    report::fill_xinuse(report);
    report::send(report);
    DONE[cpu].store(1, Ordering::Release);
    syscall::park_forever()
}

/// Whether every AP's own checks passed (after [`finish`]).
pub fn ap_checks_passed() -> bool {
    AP_CHECK_FAILED
        .iter()
        .all(|f| f.load(Ordering::Relaxed) == 0)
}

/// AP: wait for `w`, then do this CPU's share. Returns false when one of
/// its checks failed.
fn ap_work(w: Work, cpu: usize, report: &mut Report) -> bool {
    let Some((n, scratch)) = shared::wait_for(w, cpu) else {
        return true;
    };
    match w {
        Work::Parallel => {
            let feat = bench::features(report);
            let start = report.results().len();
            let mut ok = true;
            for part in Part::ALL {
                shared::barrier(w, n);
                ok &= parallel::run_part(part, &feat, report.tsc_khz, scratch, report);
            }
            parallel::mark_rows(report, start, SMP_SUFFIX);
            ok
        }
        Work::Xcheck => {
            let env = bench::env(report);
            let mut out = Console::new();
            bench::xstate_checks_on(
                report,
                env.as_ref(),
                shared::xcheck_count(),
                &mut out,
                bench::OnCpu {
                    cpu: cpu as u32,
                    scratch,
                    before_each: &mut || shared::barrier(w, n),
                },
            )
        }
    }
}
