//! CPUID (as the VMM presents it, and natively at CPL3) and the TSC.
//! XCR0 has its own module, [`super::xcr0`].
//!
//! CPUID always exits to the hypervisor (a few µs each), so callers read
//! each leaf once and keep the result.

use super::percpu::this_cpu;
use super::syscall::CpuidQuery;
use guest::protocol::record::MAX_CPUS;
use xstate::info::leaf_1_ecx;

/// One CPUID result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    pub eax: u32,
    pub ebx: u32,
    pub ecx: u32,
    pub edx: u32,
}

/// CPUID 0xD.1 EAX bit 2: XGETBV with ECX=1 (XINUSE) is supported.
pub const XSAVE_FEATURE_XGETBV1: u32 = 1 << 2;

/// CPUID as the VMM presents it: executed at CPL0 through the kernel
/// ([`super::syscall::cpuid_cpl0`]), or taken from what [`prefetch`] read
/// for this CPU.
///
/// On hardware KVM CPUID exits to the hypervisor at any CPL. On the
/// development host (kvm_pvm) CPUID at CPL3 runs natively and answers with
/// the host's leaves (e.g. XSAVES and IA32_XSS bits KVM does not expose),
/// while CPUID at CPL0 is emulated by KVM from the VMM's CPUID table, the
/// same table that decided XCR0 at boot. The report must describe the
/// latter, so the kernel reads CPUID at CPL0 (~14 µs per leaf there).
pub fn cpuid(leaf: u32, subleaf: u32) -> Regs {
    if let Some(r) = cache::lookup(leaf, subleaf) {
        return r;
    }
    let (eax, ebx, ecx, edx) = super::syscall::cpuid_cpl0(leaf, subleaf);
    Regs { eax, ebx, ecx, edx }
}

/// The leaves every boot reads (the policy check, the report, the TSC
/// rate), fetched together by [`prefetch`]. A leaf past the CPU's maximum
/// answers harmlessly; callers check the maximum before using it.
pub const BOOT_LEAVES: [(u32, u32); 8] = [
    (0, 0),
    (1, 0),
    (7, 0),
    (7, 1),
    (0xd, 0),
    (0xd, 1),
    (0x4000_0000, 0),
    (0x4000_0010, 0),
];

/// Read `leaves` (leaf, subleaf) at CPL0 in one system call and keep the
/// answers for this CPU's later [`cpuid`] calls, until [`forget`].
///
/// Why: the boot path of a run that does nothing else reads about a dozen
/// leaves; one system call each was most of its emulated CPL0
/// instructions on the development host (~0.7 µs each there).
pub fn prefetch(leaves: &[(u32, u32)]) {
    let mut q = [CpuidQuery::default(); cache::SLOTS];
    let mut n = 0;
    for &(leaf, subleaf) in leaves {
        if n < q.len() && cache::lookup(leaf, subleaf).is_none() {
            q[n].leaf = leaf;
            q[n].subleaf = subleaf;
            n += 1;
        }
    }
    if n == 0 {
        return;
    }
    super::syscall::cpuid_many(&mut q[..n]);
    cache::store(&q[..n]);
}

/// [`prefetch`] of [`BOOT_LEAVES`] and of the 0xD subleaves (2 and up)
/// of the user state components in `xcr0`, in the same system call.
///
/// `xcr0` is what the entry path set XCR0 to: CPUID 0xD.0 EDX:EAX, which
/// it read at CPL0 before any Rust ran (0 without XSAVE). The report's
/// sizes and offsets need those subleaves once 0xD.0 is known; asking for
/// them in this first call saves the second system call the report would
/// otherwise make, an `int3`, a dozen emulated instructions and an `iretq`
/// (about 40 µs under kvm_pvm on Zen 3). A bit that is not a component
/// costs one harmless leaf.
///
/// What this CPU kept before is replaced, not searched: the boot's first
/// touch of the cache is then a write. A read first would map the fresh
/// page read-only and the write after it fault again (shadow paging under
/// kvm_pvm), about 15 µs.
pub fn prefetch_boot(xcr0: u64) {
    let mut q = [CpuidQuery::default(); cache::SLOTS];
    let components = (2..64u32)
        .filter(|i| xcr0 & (1 << i) != 0)
        .map(|i| (0xd, i));
    let mut n = 0;
    for (slot, (leaf, subleaf)) in q.iter_mut().zip(BOOT_LEAVES.into_iter().chain(components)) {
        slot.leaf = leaf;
        slot.subleaf = subleaf;
        n += 1;
    }
    super::syscall::cpuid_many(&mut q[..n]);
    cache::replace(&q[..n]);
}

/// Drop this CPU's kept answers: some leaves change with XCR0 (0xD.0 EBX
/// and 0xD.1 EBX are sizes for the XCR0 in force), so every XSETBV calls
/// this.
pub fn forget() {
    cache::clear();
}

/// Per CPU, the leaves [`prefetch`] read. Only CPU *i* touches slot *i*
/// (indexed by [`super::percpu::this_cpu`]), like the per-CPU reports.
mod cache {
    use core::cell::UnsafeCell;

    use super::{this_cpu, CpuidQuery, Regs, MAX_CPUS};

    /// Leaves kept per CPU.
    pub const SLOTS: usize = 24;

    struct Kept {
        len: usize,
        q: [CpuidQuery; SLOTS],
    }

    struct PerCpu(UnsafeCell<[Kept; MAX_CPUS as usize]>);
    // SAFETY: CPU i alone reads and writes slot i (this_cpu()).
    unsafe impl Sync for PerCpu {}

    static KEPT: PerCpu = PerCpu(UnsafeCell::new(
        [const {
            Kept {
                len: 0,
                q: [CpuidQuery {
                    leaf: 0,
                    subleaf: 0,
                    eax: 0,
                    ebx: 0,
                    ecx: 0,
                    edx: 0,
                }; SLOTS],
            }
        }; MAX_CPUS as usize],
    ));

    fn with<R>(f: impl FnOnce(&mut Kept) -> R) -> R {
        let cpu = this_cpu().min(MAX_CPUS as usize - 1);
        // SAFETY: slot `cpu` belongs to the running CPU alone (see PerCpu),
        // and no reference to it outlives this call.
        f(unsafe { &mut (*KEPT.0.get())[cpu] })
    }

    pub fn lookup(leaf: u32, subleaf: u32) -> Option<Regs> {
        with(|k| {
            k.q[..k.len]
                .iter()
                .find(|e| e.leaf == leaf && e.subleaf == subleaf)
                .map(|e| Regs {
                    eax: e.eax,
                    ebx: e.ebx,
                    ecx: e.ecx,
                    edx: e.edx,
                })
        })
    }

    pub fn store(answers: &[CpuidQuery]) {
        with(|k| {
            for a in answers {
                if k.len < SLOTS {
                    k.q[k.len] = *a;
                    k.len += 1;
                }
            }
        })
    }

    pub fn clear() {
        with(|k| k.len = 0)
    }

    /// Keep `answers` (up to [`SLOTS`]) instead of what was kept, without
    /// reading the slot first.
    pub fn replace(answers: &[CpuidQuery]) {
        with(|k| {
            let n = answers.len().min(SLOTS);
            k.q[..n].copy_from_slice(&answers[..n]);
            k.len = n;
        })
    }
}

/// CPUID executed directly at CPL3 (see [`cpuid`] for how it can differ).
pub fn cpuid_cpl3(leaf: u32, subleaf: u32) -> Regs {
    let r = xstate::info::cpuid(leaf, subleaf);
    Regs {
        eax: r.eax,
        ebx: r.ebx,
        ecx: r.ecx,
        edx: r.edx,
    }
}

/// The time-stamp counter.
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC is allowed at CPL3 (CR4.TSD is clear) and has no effect.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// TSC frequency in kHz if the platform says, else 0.
///
/// Sources, most exact first: the hypervisor timing leaf 0x40000010 (EAX,
/// kHz), CPUID 0x15 (crystal Hz × EBX / EAX), CPUID 0x16 (base MHz, nominal).
///
/// `cpuid1_ecx` and `max_basic` are CPUID.1:ECX and CPUID.0:EAX, which the
/// caller has already read (each CPUID costs an emulated system call here).
pub fn tsc_khz(cpuid1_ecx: u32, max_basic: u32) -> u64 {
    if cpuid1_ecx & leaf_1_ecx::HYPERVISOR != 0 {
        let max = cpuid(0x4000_0000, 0).eax;
        if (0x4000_0010..0x4000_0100).contains(&max) {
            let khz = cpuid(0x4000_0010, 0).eax;
            if khz != 0 {
                return khz.into();
            }
        }
    }
    if max_basic >= 0x15 {
        let r = cpuid(0x15, 0);
        if r.eax != 0 && r.ebx != 0 && r.ecx != 0 {
            return u64::from(r.ecx) * u64::from(r.ebx) / u64::from(r.eax) / 1000;
        }
    }
    if max_basic >= 0x16 {
        let mhz = cpuid(0x16, 0).eax & 0xffff;
        if mhz != 0 {
            return u64::from(mhz) * 1000;
        }
    }
    0
}
