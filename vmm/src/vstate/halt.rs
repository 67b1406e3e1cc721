//! A guest that waits where nothing can wake it: found within a second
//! rather than at `--timeout` (600 s by default).
//!
//! With an in-kernel LAPIC, a HLT stays in `KVM_RUN` until KVM has an
//! event for the vCPU, so `cli; hlt` (a kernel's "stop here for good", or
//! a bug) looks from user space like a guest that is still working. The
//! VMM can tell the two apart: a halted vCPU whose RFLAGS.IF is clear
//! wakes only for an NMI, SMI or INIT (SDM vol. 3, "HLT"; KVM's
//! `kvm_vcpu_has_events`), and those come from a short list of places,
//! all of which the VMM can read:
//! - already pending in the vCPU (`KVM_GET_VCPU_EVENTS`);
//! - a local vector table entry of its own LAPIC set to deliver NMI, SMI
//!   or INIT (LINT0 is where KVM's PIT sends its NMI-watchdog ticks,
//!   LINT1 the classic NMI pin, the PMC entry where perf counters
//!   overflow into NMIs);
//! - an IOAPIC redirection entry that delivers NMI, SMI or INIT (with the
//!   full irqchip);
//! - another vCPU's IPI, which needs that vCPU to run.
//!
//! An AP waiting for INIT-SIPI likewise only wakes for another vCPU.
//!
//! A vCPU halted with RFLAGS.IF set (`sti; hlt`, an idle loop) waits for
//! any interrupt, and those too come from places the VMM can read: its
//! LAPIC (a request in the IRR, the timer counting or its TSC deadline
//! set, an unmasked PMC or LINT1 entry), KVM's asynchronous page faults
//! (`MSR_KVM_ASYNC_PF_EN`), and with the full irqchip the IOAPIC and, by
//! LINT0, the PICs, fed by the PIT and COM1 where the VM has them (see
//! [`Lapic::may_interrupt`] and [`chips_may_interrupt`]).
//!
//! So the run is over when every vCPU waits in one of those ways and no
//! place above can wake one. Nothing is judged of a vCPU the VMM cannot
//! read fully, one in SMM, or one that may be running a guest of its own
//! (EFER.SVME or CR4.VMXE: there the gate is not IF).
//!
//! How it is asked: a vCPU thread looks at itself ([`look`], one
//! `KVM_GET_MP_STATE` when it is running) each time the supervisor's
//! watch kicks it out of `KVM_RUN`, every [`WATCH_EVERY`], and tells the
//! run's [`Board`], with its KVM counters ([`super::kvm_stats`]). A
//! waiting vCPU can be woken by another, run, and halt again between two
//! looks; two that wake each other by IPIs can be found halted at every
//! look. Only the counters (HLTs executed, interrupts injected) show it, so
//! a vCPU's wait counts from the first of a series of looks that find it in
//! the same HLT with them unmoved, and the verdict needs every vCPU's
//! series to span two rounds of kicks. With one vCPU halted with IF clear
//! the first look is final; with IF set it is not, as its timer may have
//! been a bus cycle from firing.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kvm_bindings::{
    kvm_ioapic_state, kvm_irqchip, kvm_msr_entry, kvm_pic_state, Msrs, KVM_IRQCHIP_IOAPIC,
    KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE, KVM_MP_STATE_HALTED, KVM_MP_STATE_INIT_RECEIVED,
    KVM_MP_STATE_RUNNABLE, KVM_MP_STATE_UNINITIALIZED,
};
use kvm_ioctls::{VcpuFd, VmFd};

use super::kvm_stats::VcpuStats;

/// How often the supervisor kicks the vCPUs to look. Each kick is one
/// user-space exit (30-45 µs under the development host's nested KVM, a
/// few µs on hardware) and one `KVM_GET_MP_STATE`: under 0.01% of a run,
/// and a guest that stopped for good is named within a second or two.
pub const WATCH_EVERY: Duration = Duration::from_millis(500);

/// RFLAGS.IF.
const RFLAGS_IF: u64 = 1 << 9;
/// EFER.SVME: the guest may run a guest of its own (AMD SVM).
const EFER_SVME: u64 = 1 << 12;
/// CR4.VMXE: the same on Intel.
const CR4_VMXE: u64 = 1 << 13;
/// IA32_APIC_BASE.EN: the LAPIC is on. Off, KVM hands the PIC's
/// interrupts to the vCPU directly, as if LINT0 were ExtINT.
const APIC_BASE_EN: u64 = 1 << 11;

/// The LAPIC's local vector table entries that have a delivery mode (the
/// timer's and the error entry's are always Fixed): CMCI, thermal, PMC,
/// LINT0, LINT1, by their register offsets.
const LVT_WITH_MODE: [usize; 5] = [0x2f0, 0x330, 0x340, 0x350, 0x360];
/// The PMC entry's, LINT0's and LINT1's places in [`LVT_WITH_MODE`].
const LVT_PMC: usize = 2;
const LINT0: usize = 3;
const LVT_LINT1: usize = 4;
/// The LVT timer entry, the timer's initial and current counts.
const LVT_TIMER: usize = 0x320;
const TIMER_INITIAL: usize = 0x380;
const TIMER_CURRENT: usize = 0x390;
/// The interrupt request register: eight 32-bit words, 16 bytes apart.
const IRR: usize = 0x200;
/// An LVT or IOAPIC entry's mask bit.
const ENTRY_MASKED: u64 = 1 << 16;
/// Delivery modes that wake a halted vCPU whatever its IF: SMI, NMI, INIT.
const WAKING_MODES: [u64; 3] = [0b010, 0b100, 0b101];
/// `IA32_TSC_DEADLINE`: the LAPIC timer's deadline in TSC-deadline mode
/// (0: disarmed; KVM clears it when the timer fires).
const MSR_TSC_DEADLINE: u32 = 0x6e0;
/// `MSR_KVM_ASYNC_PF_EN`: bit 0 set, KVM may interrupt the guest to say a
/// page it waited for is ready.
const MSR_KVM_ASYNC_PF_EN: u32 = 0x4b56_4d02;
/// The ISA lines a PC's devices drive (`crate::vstate::pc`): the PIT on
/// IRQ 0 (IOAPIC pin 0 or 2, by the routing a guest assumes) and COM1 on
/// IRQ 4. Only a VM with the PIT has them; the minimal platform's COM1 is
/// polled.
const PC_LINES: u32 = 1 << 0 | 1 << 2 | 1 << 4;

/// Whether an unmasked LVT or IOAPIC entry delivers NMI, SMI or INIT.
fn entry_wakes(entry: u64) -> bool {
    entry & ENTRY_MASKED == 0 && WAKING_MODES.contains(&((entry >> 8) & 0b111))
}

/// How a vCPU waits for something only outside it can end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// HLT with RFLAGS.IF clear, no NMI, SMI or INIT pending and none from
    /// its LAPIC, at this RIP.
    MaskedHalt { rip: u64 },
    /// HLT with RFLAGS.IF set, at this RIP, with nothing in the vCPU that
    /// can interrupt it: no interrupt pending in its LAPIC, its timer not
    /// armed, every LVT entry but the error entry's and LINT0 masked, no
    /// asynchronous page fault enabled. What is outside it (another
    /// vCPU, the PIC and IOAPIC) is the board's to judge.
    IdleHalt {
        rip: u64,
        /// LINT0 is open (unmasked, or the LAPIC off): the PIC can reach
        /// the vCPU through it.
        lint0: bool,
    },
    /// An AP that has not been started, or is waiting for its SIPI.
    ForSipi,
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wait::MaskedHalt { rip } => {
                write!(
                    f,
                    "halted with interrupts disabled (HLT, to resume at rip {rip:#x})"
                )
            }
            Wait::IdleHalt { rip, .. } => write!(
                f,
                "halted with interrupts enabled and none due (HLT, to resume at rip {rip:#x})"
            ),
            Wait::ForSipi => f.write_str("waits for INIT-SIPI"),
        }
    }
}

/// What the VMM read of a vCPU's LAPIC (`KVM_GET_LAPIC`, with the
/// deadline MSR) to see whether it can interrupt a vCPU with IF set.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lapic {
    /// The [`LVT_WITH_MODE`] entries.
    pub lvt: [u32; 5],
    /// The LVT timer entry.
    pub timer: u32,
    /// The timer's initial count.
    pub initial_count: u32,
    /// The timer's current count, as KVM computes it at the read (0 once
    /// a one-shot count has run out).
    pub current_count: u32,
    /// `IA32_TSC_DEADLINE` (read in TSC-deadline mode only).
    pub tsc_deadline: u64,
    /// An interrupt waits in the IRR.
    pub irr: bool,
    /// `IA32_APIC_BASE.EN`.
    pub enabled: bool,
}

impl Lapic {
    /// The timer will deliver an interrupt: unmasked and counting
    /// (one-shot with count left, periodic with a count, a deadline set).
    fn timer_armed(&self) -> bool {
        if u64::from(self.timer) & ENTRY_MASKED != 0 {
            return false;
        }
        match (self.timer >> 17) & 0b11 {
            0 => self.current_count != 0,
            1 => self.initial_count != 0,
            2 => self.tsc_deadline != 0,
            _ => true,
        }
    }

    /// Something in the LAPIC can interrupt a vCPU with IF set: a pending
    /// request, the timer, or the PMC or LINT1 entry unmasked (a counter's
    /// overflow; LINT1 for caution). Not judged here: LINT0 (the board's,
    /// with the PIC), the error entry (an APIC error needs a vCPU to run),
    /// and the CMCI and thermal entries, which KVM raises only for a
    /// machine check the VMM injects (`KVM_X86_SET_MCE`), as vmm never
    /// does; KVM reads the CMCI entry as 0 where the vCPU has no CMCI. A
    /// disabled LAPIC delivers nothing of its own (KVM checks
    /// IA32_APIC_BASE.EN).
    fn may_interrupt(&self) -> bool {
        let unmasked = |e: u32| u64::from(e) & ENTRY_MASKED == 0;
        self.irr
            || (self.enabled
                && (self.timer_armed()
                    || unmasked(self.lvt[LVT_PMC])
                    || unmasked(self.lvt[LVT_LINT1])))
    }

    /// The PIC reaches the vCPU: LINT0 unmasked (ExtINT, or any mode the
    /// PIT's NMI watchdog uses), or the LAPIC off.
    fn lint0_open(&self) -> bool {
        !self.enabled || u64::from(self.lvt[LINT0]) & ENTRY_MASKED == 0
    }
}

/// What the VMM read of a vCPU that is not running, as [`judge`] needs it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Parked {
    /// `KVM_GET_MP_STATE`.
    pub mp_state: u32,
    pub rflags: u64,
    pub rip: u64,
    /// KVM holds an event for it: an exception or interrupt being
    /// injected, an NMI or SMI pending or being injected, or a latched
    /// INIT; or it is in SMM.
    pub event: bool,
    /// EFER.SVME or CR4.VMXE is set.
    pub may_nest: bool,
    /// Its LAPIC; `None` without an in-kernel LAPIC, or when it could not
    /// be read.
    pub lapic: Option<Lapic>,
    /// The guest enabled asynchronous page faults (`MSR_KVM_ASYNC_PF_EN`),
    /// whose "page ready" is an interrupt.
    pub async_pf: bool,
}

/// How `p` waits, when nothing in the vCPU or its LAPIC can end the wait;
/// `None` when it runs, may be woken, or cannot be judged.
pub fn judge(p: &Parked) -> Option<Wait> {
    if p.event || p.may_nest {
        return None;
    }
    match p.mp_state {
        KVM_MP_STATE_UNINITIALIZED | KVM_MP_STATE_INIT_RECEIVED => Some(Wait::ForSipi),
        KVM_MP_STATE_HALTED => {
            let lapic = p.lapic?;
            if p.rflags & RFLAGS_IF == 0 {
                let wakes = lapic.lvt.iter().any(|&e| entry_wakes(u64::from(e)));
                (!wakes).then_some(Wait::MaskedHalt { rip: p.rip })
            } else {
                (!lapic.may_interrupt() && !p.async_pf).then_some(Wait::IdleHalt {
                    rip: p.rip,
                    lint0: lapic.lint0_open(),
                })
            }
        }
        _ => None,
    }
}

/// The 32-bit LAPIC register at `off` of a `KVM_GET_LAPIC` image.
fn lapic_reg(regs: &[std::os::raw::c_char], off: usize) -> u32 {
    let b = |i: usize| regs[off + i] as u8;
    u32::from_le_bytes([b(0), b(1), b(2), b(3)])
}

/// `IA32_TSC_DEADLINE` and whether asynchronous page faults are on, for a
/// vCPU halted with IF set. `None` when not even the deadline could be
/// read; an unreadable `MSR_KVM_ASYNC_PF_EN` is a KVM or guest without
/// the feature (KVM refuses the MSR then), so it is off.
fn read_idle_msrs(vcpu: &VcpuFd) -> Option<(u64, bool)> {
    let entry = |index| kvm_msr_entry {
        index,
        ..Default::default()
    };
    let mut msrs =
        Msrs::from_entries(&[entry(MSR_TSC_DEADLINE), entry(MSR_KVM_ASYNC_PF_EN)]).ok()?;
    let read = vcpu.get_msrs(&mut msrs).ok()?;
    let got = msrs.as_slice();
    if read == 0 {
        return None;
    }
    Some((got[0].data, read >= 2 && got[1].data & 1 != 0))
}

/// Read and [`judge`] `vcpu` (on its own thread, out of `KVM_RUN`): one
/// `KVM_GET_MP_STATE` when it is runnable, five or six ioctls when it
/// waits. A failing ioctl judges nothing.
pub fn look(vcpu: &VcpuFd) -> Option<Wait> {
    let mp_state = vcpu.get_mp_state().ok()?.mp_state;
    if mp_state == KVM_MP_STATE_RUNNABLE {
        return None;
    }
    let regs = vcpu.get_regs().ok()?;
    let sregs = vcpu.get_sregs().ok()?;
    let ev = vcpu.get_vcpu_events().ok()?;
    let idle = mp_state == KVM_MP_STATE_HALTED && regs.rflags & RFLAGS_IF != 0;
    let mut async_pf = false;
    let lapic = match vcpu.get_lapic() {
        Ok(l) => {
            let mut lapic = Lapic {
                lvt: LVT_WITH_MODE.map(|off| lapic_reg(&l.regs, off)),
                timer: lapic_reg(&l.regs, LVT_TIMER),
                initial_count: lapic_reg(&l.regs, TIMER_INITIAL),
                current_count: lapic_reg(&l.regs, TIMER_CURRENT),
                tsc_deadline: 0,
                irr: (0..8).any(|i| lapic_reg(&l.regs, IRR + 0x10 * i) != 0),
                enabled: sregs.apic_base & APIC_BASE_EN != 0,
            };
            if idle {
                let (deadline, apf) = read_idle_msrs(vcpu)?;
                lapic.tsc_deadline = deadline;
                async_pf = apf;
            }
            Some(lapic)
        }
        Err(_) => None,
    };
    let event = ev.exception.injected != 0
        || ev.exception.pending != 0
        || ev.interrupt.injected != 0
        || ev.nmi.pending != 0
        || ev.nmi.injected != 0
        || ev.smi.pending != 0
        || ev.smi.smm != 0
        || ev.smi.latched_init != 0
        || ev.triple_fault.pending != 0;
    judge(&Parked {
        mp_state,
        rflags: regs.rflags,
        rip: regs.rip,
        event,
        may_nest: sregs.efer & EFER_SVME != 0 || sregs.cr4 & CR4_VMXE != 0,
        lapic,
        async_pf,
    })
}

/// One of the full irqchip's chips, as `KVM_GET_IRQCHIP` gives it.
fn read_chip(vm: &VmFd, chip_id: u32) -> Option<kvm_irqchip> {
    let mut chip = kvm_irqchip {
        chip_id,
        ..Default::default()
    };
    vm.get_irqchip(&mut chip).ok().map(|()| chip)
}

fn read_ioapic(vm: &VmFd) -> Option<kvm_ioapic_state> {
    // SAFETY: KVM filled the union as the IOAPIC's state, as asked by
    // `chip_id`.
    read_chip(vm, KVM_IRQCHIP_IOAPIC).map(|c| unsafe { c.chip.ioapic })
}

fn read_pic(vm: &VmFd, chip_id: u32) -> Option<kvm_pic_state> {
    // SAFETY: KVM filled the union as a PIC's state, as asked by `chip_id`.
    read_chip(vm, chip_id).map(|c| unsafe { c.chip.pic })
}

/// The IOAPIC's redirection entries as plain words.
fn redirections(io: &kvm_ioapic_state) -> impl Iterator<Item = u64> + '_ {
    // SAFETY: every variant of the entry union is the same 64 bits.
    io.redirtbl.iter().map(|e| unsafe { e.bits })
}

/// Whether an IOAPIC redirection entry can wake a halted vCPU (one that
/// delivers NMI, SMI or INIT and is unmasked). A failing read says yes:
/// nothing is judged that the VMM could not see.
fn ioapic_wakes(vm: &VmFd) -> bool {
    read_ioapic(vm).is_none_or(|io| redirections(&io).any(entry_wakes))
}

/// What the full irqchip could still deliver to vCPUs halted with IF set,
/// as read: `pit` (the VM has one, and with it COM1's line), the IOAPIC,
/// and the two PICs when some vCPU's LINT0 is open.
#[derive(Clone, Copy, Debug, Default)]
pub struct Chips {
    pub pit: bool,
    /// The IOAPIC's request register and redirection entries.
    pub ioapic_irr: u32,
    pub redirections: [u64; 24],
    /// Each PIC's (master, slave) request and mask registers.
    pub pic_irr: [u8; 2],
    pub pic_imr: [u8; 2],
}

/// Whether an interrupt can still come from the full irqchip to vCPUs
/// halted with IF set (`lint0`: one of them has LINT0 open): an unmasked
/// IOAPIC entry on a line a device drives or with a request latched, or
/// through LINT0 the PIT (its interrupt or its NMI watchdog) or a request
/// the PICs hold unmasked.
pub fn chips_may_interrupt(c: &Chips, lint0: bool) -> bool {
    let live = if c.pit { PC_LINES } else { 0 };
    let ioapic = c.redirections.iter().enumerate().any(|(pin, &e)| {
        let driven = pin < 32 && ((live | c.ioapic_irr) >> pin) & 1 != 0;
        e & ENTRY_MASKED == 0 && driven
    });
    let [master_irr, slave_irr] = c.pic_irr;
    let [master_imr, slave_imr] = c.pic_imr;
    let cascade_open = master_imr & 0x04 == 0;
    let pic =
        c.pit || master_irr & !master_imr != 0 || (cascade_open && slave_irr & !slave_imr != 0);
    ioapic || (lint0 && pic)
}

/// [`Chips`] as read from `vm`; `None` when a chip could not be read.
fn read_chips(vm: &VmFd) -> Option<Chips> {
    let io = read_ioapic(vm)?;
    let mut redirs = [0u64; 24];
    for (r, e) in redirs.iter_mut().zip(redirections(&io)) {
        *r = e;
    }
    let master = read_pic(vm, KVM_IRQCHIP_PIC_MASTER)?;
    let slave = read_pic(vm, KVM_IRQCHIP_PIC_SLAVE)?;
    Some(Chips {
        pit: vm.get_pit2().is_ok(),
        ioapic_irr: io.irr,
        redirections: redirs,
        pic_irr: [master.irr, slave.irr],
        pic_imr: [master.imr, slave.imr],
    })
}

/// [`Wait`] as the words a [`Slot`] keeps.
const RUNS: u8 = 0;
const MASKED_HALT: u8 = 1;
const FOR_SIPI: u8 = 2;
const IDLE_HALT: u8 = 3;

/// What one vCPU said at its last look.
#[derive(Debug, Default)]
struct Slot {
    /// The round of its last look (0: none yet).
    seen: AtomicU64,
    /// The round since which every look found it waiting, with its
    /// progress counters unmoved (0: it was not waiting at its last look).
    since: AtomicU64,
    /// Its [`Wait`]: `RUNS`, `MASKED_HALT`, `IDLE_HALT` or `FOR_SIPI`.
    wait: AtomicU8,
    rip: AtomicU64,
    /// [`Wait::IdleHalt`]'s `lint0`.
    lint0: AtomicBool,
    /// Its [`crate::vstate::kvm_stats::PROGRESS`] sum at the last look
    /// (`u64::MAX`: unknown).
    progress: AtomicU64,
}

/// The run's vCPUs as their last looks found them; shared by their threads.
#[derive(Debug)]
pub struct Board {
    slots: Vec<Slot>,
    /// The full irqchip's VM, whose IOAPIC (and, for halts with IF set,
    /// PICs and PIT) is asked before a verdict.
    chips: Option<Arc<VmFd>>,
}

impl Board {
    /// A board for `vcpus` vCPUs; `chips`: the VM when it has KVM's full
    /// irqchip (IOAPIC and PICs).
    pub fn new(vcpus: usize, chips: Option<Arc<VmFd>>) -> Arc<Self> {
        Arc::new(Self {
            slots: (0..vcpus.max(1)).map(|_| Slot::default()).collect(),
            chips,
        })
    }

    /// vCPU `i`'s look in `round` found `wait`, with its progress counters
    /// at `progress` (`None`: unknown). Returns the run's end, in a
    /// sentence, when every vCPU now waits with nothing to wake it.
    ///
    /// A vCPU counts as waiting since the first of an unbroken series of
    /// looks that found it waiting with its counters unmoved: a vCPU that
    /// halted again in between (woken by another's IPI, or by a timer that
    /// was about to fire at the earlier look) starts a new series. The
    /// verdict needs every vCPU's series to span two looks, so that all
    /// waited at once; only one vCPU halted with IF clear is final at its
    /// first look (nothing outside it exists to wake it).
    fn tell(
        &self,
        i: usize,
        round: u64,
        wait: Option<Wait>,
        progress: Option<u64>,
    ) -> Option<String> {
        let slot = self.slots.get(i)?;
        let (code, rip, lint0) = match wait {
            None => (RUNS, 0, false),
            Some(Wait::MaskedHalt { rip }) => (MASKED_HALT, rip, false),
            Some(Wait::IdleHalt { rip, lint0 }) => (IDLE_HALT, rip, lint0),
            Some(Wait::ForSipi) => (FOR_SIPI, 0, false),
        };
        let progress = progress.unwrap_or(u64::MAX);
        let before = slot.progress.swap(progress, Ordering::SeqCst);
        let same_code = slot.wait.swap(code, Ordering::SeqCst) == code;
        let same_wait = slot.rip.swap(rip, Ordering::SeqCst) == rip && same_code;
        slot.lint0.store(lint0, Ordering::SeqCst);
        if wait.is_none() {
            slot.since.store(0, Ordering::SeqCst);
        } else if slot.since.load(Ordering::SeqCst) == 0 || !same_wait || before != progress {
            slot.since.store(round, Ordering::SeqCst);
        }
        slot.seen.store(round, Ordering::SeqCst);
        let single = self.slots.len() == 1;
        let settled = |s: &Slot| {
            let since = s.since.load(Ordering::SeqCst);
            let first_is_final = single && s.wait.load(Ordering::SeqCst) != IDLE_HALT;
            s.seen.load(Ordering::SeqCst) == round
                && since != 0
                && (first_is_final || since < round)
        };
        if !self.slots.iter().all(settled) || self.chips_may_wake() {
            return None;
        }
        Some(self.verdict())
    }

    /// Whether the full irqchip can still wake one of the waiting vCPUs:
    /// an NMI, SMI or INIT from the IOAPIC for any, an interrupt for those
    /// halted with IF set. A chip that cannot be read says yes.
    fn chips_may_wake(&self) -> bool {
        let Some(vm) = self.chips.as_deref() else {
            return false;
        };
        if ioapic_wakes(vm) {
            return true;
        }
        // One pass: is any vCPU in an IF-set halt, and has any of those
        // LINT0 open?
        let (idle, lint0) = self
            .slots
            .iter()
            .filter(|s| s.wait.load(Ordering::SeqCst) == IDLE_HALT)
            .fold((false, false), |(_, l), s| {
                (true, l || s.lint0.load(Ordering::SeqCst))
            });
        if !idle {
            return false;
        }
        read_chips(vm).is_none_or(|c| chips_may_interrupt(&c, lint0))
    }

    /// The sentence for a run whose vCPUs all wait for nothing.
    fn verdict(&self) -> String {
        let wait = |s: &Slot| {
            let rip = s.rip.load(Ordering::SeqCst);
            match s.wait.load(Ordering::SeqCst) {
                MASKED_HALT => Wait::MaskedHalt { rip },
                IDLE_HALT => Wait::IdleHalt {
                    rip,
                    lint0: s.lint0.load(Ordering::SeqCst),
                },
                _ => Wait::ForSipi,
            }
        };
        let idle = self
            .slots
            .iter()
            .any(|s| s.wait.load(Ordering::SeqCst) == IDLE_HALT);
        let chips = match (self.chips.is_some(), idle) {
            (false, _) => "",
            (true, false) => " or the IOAPIC",
            (true, true) => " or the IOAPIC and PICs",
        };
        let what = if idle {
            "no interrupt, NMI, SMI or INIT pending, no LAPIC timer armed, none able to come"
        } else {
            "no NMI, SMI or INIT pending or able to come"
        };
        if let [only] = self.slots.as_slice() {
            return format!(
                "the guest {} and nothing can wake it ({what} from its LAPIC{chips})",
                wait(only)
            );
        }
        let each: Vec<String> = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| format!("vCPU {i} {}", wait(s)))
            .collect();
        format!(
            "every vCPU waits and none can wake another: {} ({what} from a LAPIC{chips})",
            each.join(", "),
        )
    }
}

/// One vCPU's side of the watch: its place on the run's [`Board`].
#[derive(Debug)]
pub struct HaltWatch {
    board: Arc<Board>,
    index: usize,
    /// The watch round of its last look.
    last_round: u64,
    /// Its KVM counters, opened at the first look that finds it waiting
    /// (`Some(None)`: KVM has none to give).
    stats: Option<Option<VcpuStats>>,
}

impl HaltWatch {
    /// vCPU `index` of the run on `board`.
    pub fn new(board: &Arc<Board>, index: usize) -> Self {
        Self {
            board: board.clone(),
            index,
            last_round: 0,
            stats: None,
        }
    }

    /// The supervisor starts counting rounds again (the run goes on
    /// after a snapshot that could not be written, under a new
    /// supervisor): forget this vCPU's looks.
    pub fn restart(&mut self) {
        self.last_round = 0;
        if let Some(slot) = self.board.slots.get(self.index) {
            slot.since.store(0, Ordering::SeqCst);
            slot.seen.store(0, Ordering::SeqCst);
        }
    }

    /// `KVM_RUN` was interrupted in watch round `round` (the supervisor's
    /// count, [`super::stop::StopFlag::watch_round`]): look at the vCPU,
    /// once a round. With one vCPU every interruption is a look (only the
    /// watch and the deadlines interrupt it, rarely). Returns the run's
    /// end when no vCPU can run again.
    pub fn on_kick(&mut self, vcpu: &VcpuFd, round: u64) -> Option<String> {
        let single = self.board.slots.len() == 1;
        if !single && round == self.last_round {
            return None;
        }
        self.last_round = if single { self.last_round + 1 } else { round };
        let mut wait = look(vcpu);
        let progress = match wait {
            None => None,
            Some(_) => self
                .stats
                .get_or_insert_with(|| VcpuStats::open(vcpu))
                .as_ref()
                .and_then(VcpuStats::progress),
        };
        // A halt with IF set is judged only where KVM shows it was not
        // woken between two looks.
        if matches!(wait, Some(Wait::IdleHalt { .. })) && progress.is_none() {
            wait = None;
        }
        self.board.tell(self.index, self.last_round, wait, progress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LVT entries as KVM resets them: all masked.
    const RESET_LVT: [u32; 5] = [0x1_0000; 5];
    /// A LAPIC as KVM resets it, but enabled: nothing pending or armed.
    const QUIET: Lapic = Lapic {
        lvt: RESET_LVT,
        timer: 0x1_0000,
        initial_count: 0,
        current_count: 0,
        tsc_deadline: 0,
        irr: false,
        enabled: true,
    };

    fn halted(rflags: u64) -> Parked {
        Parked {
            mp_state: KVM_MP_STATE_HALTED,
            rflags,
            rip: 0x1234,
            lapic: Some(QUIET),
            ..Parked::default()
        }
    }

    fn with_lapic(rflags: u64, edit: impl FnOnce(&mut Lapic)) -> Parked {
        let mut lapic = QUIET;
        edit(&mut lapic);
        Parked {
            lapic: Some(lapic),
            ..halted(rflags)
        }
    }

    const IDLE: Option<Wait> = Some(Wait::IdleHalt {
        rip: 0x1234,
        lint0: false,
    });

    #[test]
    fn a_masked_halt_with_nothing_to_wake_it_is_a_wait() {
        assert_eq!(judge(&halted(0x2)), Some(Wait::MaskedHalt { rip: 0x1234 }));
        // Unmasked LVT entries in Fixed or ExtINT mode need IF too, as do
        // a pending request and an armed timer.
        let p = with_lapic(0x2, |l| {
            l.lvt = [0x0030, 0x0031, 0x0032, 0x0700, 0x0033];
            l.irr = true;
            l.timer = 0x0040;
            l.current_count = 5;
        });
        assert!(judge(&p).is_some());
    }

    #[test]
    fn what_can_wake_a_halted_vcpu_is_never_judged() {
        let mut p = halted(0x2);
        p.event = true;
        assert_eq!(judge(&p), None, "a pending event");
        let mut p = halted(0x202);
        p.event = true;
        assert_eq!(judge(&p), None, "a pending event, IF set");
        let mut p = halted(0x2);
        p.may_nest = true;
        assert_eq!(judge(&p), None, "may run a guest of its own");
        for rflags in [0x2, 0x202] {
            let mut p = halted(rflags);
            p.lapic = None;
            assert_eq!(judge(&p), None, "no LAPIC to read");
        }
        // Each entry with a delivery mode, each waking mode, unmasked.
        for slot in 0..5 {
            for mode in [0b010u32, 0b100, 0b101] {
                let p = with_lapic(0x2, |l| l.lvt[slot] = mode << 8);
                assert_eq!(judge(&p), None, "LVT {slot} mode {mode:03b}");
                // The same entry masked wakes nothing.
                let p = with_lapic(0x2, |l| l.lvt[slot] = mode << 8 | 1 << 16);
                assert!(judge(&p).is_some(), "LVT {slot} mode {mode:03b} masked");
            }
        }
    }

    #[test]
    fn an_idle_halt_with_nothing_armed_is_a_wait() {
        assert_eq!(judge(&halted(0x202)), IDLE);
        // The timer masked, whatever it counts; the error entry unmasked
        // (an APIC error needs a vCPU to run); the timer's one-shot count
        // run out; periodic with no count; TSC-deadline with none set.
        for edit in [
            |l: &mut Lapic| {
                l.timer = 0x1_0040;
                l.current_count = 99;
                l.initial_count = 100;
            },
            |l: &mut Lapic| {
                l.timer = 0x0040;
                l.initial_count = 100;
            },
            |l: &mut Lapic| l.timer = 0x2_0040,
            |l: &mut Lapic| l.timer = 0x4_0040,
            // CMCI and thermal entries open (KVM reads CMCI as 0 where the
            // vCPU has none): only an injected machine check raises them.
            |l: &mut Lapic| l.lvt[..2].copy_from_slice(&[0, 0x0050]),
            // A disabled LAPIC delivers nothing of its own; the PIC may
            // reach the vCPU (LINT0 counts as open).
            |l: &mut Lapic| {
                l.enabled = false;
                l.timer = 0x2_0040;
                l.initial_count = 100;
            },
        ] {
            let p = with_lapic(0x202, edit);
            assert!(
                matches!(judge(&p), Some(Wait::IdleHalt { rip: 0x1234, .. })),
                "{p:?}"
            );
        }
        let p = with_lapic(0x202, |l| l.enabled = false);
        assert_eq!(
            judge(&p),
            Some(Wait::IdleHalt {
                rip: 0x1234,
                lint0: true
            })
        );
        // LINT0 unmasked (ExtINT, as KVM resets the boot vCPU's): the PIC
        // is the board's to judge.
        let p = with_lapic(0x202, |l| l.lvt[LINT0] = 0x0700);
        assert_eq!(
            judge(&p),
            Some(Wait::IdleHalt {
                rip: 0x1234,
                lint0: true
            })
        );
    }

    #[test]
    fn an_idle_halt_that_an_interrupt_can_end_is_never_judged() {
        for (why, edit) in [
            (
                "a request in the IRR",
                (|l: &mut Lapic| l.irr = true) as fn(&mut Lapic),
            ),
            ("one-shot counting", |l| {
                l.timer = 0x0040;
                l.initial_count = 100;
                l.current_count = 1;
            }),
            ("periodic", |l| {
                l.timer = 0x2_0040;
                l.initial_count = 1;
            }),
            ("TSC deadline set", |l| {
                l.timer = 0x4_0040;
                l.tsc_deadline = 1;
            }),
            ("reserved timer mode", |l| l.timer = 0x6_0040),
            ("PMC unmasked", |l| l.lvt[2] = 0x0050),
            ("LINT1 unmasked", |l| l.lvt[4] = 0x0050),
            ("a request in the IRR, LAPIC off", |l| {
                l.enabled = false;
                l.irr = true;
            }),
        ] {
            assert_eq!(judge(&with_lapic(0x202, edit)), None, "{why}");
            // With IF clear the same is a masked halt (NMI-free modes).
            assert!(judge(&with_lapic(0x2, edit)).is_some(), "{why}, IF clear");
        }
        let mut p = halted(0x202);
        p.async_pf = true;
        assert_eq!(judge(&p), None, "asynchronous page faults on");
    }

    #[test]
    fn the_full_irqchip_is_asked_for_lines_that_can_fire() {
        let masked = [ENTRY_MASKED; 24];
        let quiet = Chips {
            redirections: masked,
            pic_imr: [0xff, 0xff],
            ..Chips::default()
        };
        assert!(!chips_may_interrupt(&quiet, true));
        // Every IOAPIC entry open, but no device drives a line: the
        // minimal platform's chips after a guest unmasked them all.
        let open = Chips {
            redirections: [0x30; 24],
            pic_imr: [0, 0],
            ..Chips::default()
        };
        assert!(!chips_may_interrupt(&open, true));
        // A PC: the PIT's and COM1's lines.
        for pin in [0, 2, 4] {
            let mut c = quiet;
            c.pit = true;
            c.redirections[pin] = 0x30;
            assert!(chips_may_interrupt(&c, false), "IOAPIC pin {pin}");
        }
        let mut c = quiet;
        c.pit = true;
        c.redirections[5] = 0x30;
        assert!(!chips_may_interrupt(&c, false), "pin 5 has no device");
        assert!(chips_may_interrupt(&c, true), "the PIT through LINT0");
        // A latched request on an open pin.
        let mut c = quiet;
        c.redirections[9] = 0x30;
        c.ioapic_irr = 1 << 9;
        assert!(chips_may_interrupt(&c, false));
        c.redirections[9] |= ENTRY_MASKED;
        assert!(!chips_may_interrupt(&c, false));
        // The PICs matter only through an open LINT0.
        let mut c = quiet;
        c.pic_irr = [0x10, 0];
        c.pic_imr = [0xef, 0xff];
        assert!(chips_may_interrupt(&c, true));
        assert!(!chips_may_interrupt(&c, false));
        c.pic_imr = [0xff, 0xff];
        assert!(!chips_may_interrupt(&c, true), "masked");
        let mut c = quiet;
        c.pic_irr = [0, 0x01];
        c.pic_imr = [0xfb, 0x00];
        assert!(
            chips_may_interrupt(&c, true),
            "the slave through the cascade"
        );
        c.pic_imr = [0xff, 0x00];
        assert!(!chips_may_interrupt(&c, true), "the cascade masked");
    }

    #[test]
    fn only_halted_and_unstarted_vcpus_wait() {
        for (state, wait) in [
            (KVM_MP_STATE_RUNNABLE, None),
            (KVM_MP_STATE_UNINITIALIZED, Some(Wait::ForSipi)),
            (KVM_MP_STATE_INIT_RECEIVED, Some(Wait::ForSipi)),
            (kvm_bindings::KVM_MP_STATE_SIPI_RECEIVED, None),
            (kvm_bindings::KVM_MP_STATE_STOPPED, None),
        ] {
            let p = Parked {
                mp_state: state,
                lapic: Some(QUIET),
                ..Parked::default()
            };
            assert_eq!(judge(&p), wait, "mp_state {state}");
        }
    }

    #[test]
    fn one_vcpu_is_judged_at_its_first_waiting_look() {
        let board = Board::new(1, None);
        assert_eq!(board.tell(0, 1, None, None), None);
        let end = board
            .tell(0, 2, Some(Wait::MaskedHalt { rip: 0x10_0001 }), None)
            .unwrap();
        assert!(
            end.contains("halted with interrupts disabled (HLT, to resume at rip 0x100001)")
                && end.contains("its LAPIC"),
            "{end}"
        );
    }

    #[test]
    fn an_idle_halt_needs_two_looks_with_its_counters_unmoved() {
        let board = Board::new(1, None);
        let idle = Some(Wait::IdleHalt {
            rip: 0x42,
            lint0: false,
        });
        // The first look could have caught a timer about to fire.
        assert_eq!(board.tell(0, 1, idle, Some(7)), None);
        // It halted again since (a HLT or an interrupt counted).
        assert_eq!(board.tell(0, 2, idle, Some(9)), None);
        let end = board.tell(0, 3, idle, Some(9)).unwrap();
        assert!(
            end.contains(
                "the guest halted with interrupts enabled and none due (HLT, to resume at rip \
                 0x42) and nothing can wake it (no interrupt, NMI, SMI or INIT pending, no LAPIC \
                 timer armed, none able to come from its LAPIC)"
            ),
            "{end}"
        );
        // Halted at another place: a new series.
        let board = Board::new(1, None);
        board.tell(0, 1, idle, Some(1));
        let elsewhere = Some(Wait::IdleHalt {
            rip: 0x43,
            lint0: false,
        });
        assert_eq!(board.tell(0, 2, elsewhere, Some(1)), None);
        assert!(board.tell(0, 3, elsewhere, Some(1)).is_some());
    }

    /// Two vCPUs that wake each other with IPIs and halt in between can be
    /// found halted, with nothing of their own armed, at every look: only
    /// their counters show they ran. Without them the watch would end a
    /// guest that works.
    #[test]
    fn vcpus_that_wake_each_other_are_never_judged() {
        let board = Board::new(2, None);
        let idle = Some(Wait::IdleHalt {
            rip: 0x42,
            lint0: false,
        });
        let mut count = [0u64; 2];
        for round in 1..50 {
            for (i, c) in count.iter_mut().enumerate() {
                *c += 2; // each halted again and took an IPI since
                assert_eq!(board.tell(i, round, idle, Some(*c)), None, "round {round}");
            }
        }
        // Once they stop, the next round names them: each was in the same
        // HLT from its look in round 49 to its look in round 50.
        assert_eq!(board.tell(0, 50, idle, Some(count[0])), None);
        let end = board.tell(1, 50, idle, Some(count[1])).unwrap();
        assert!(
            end.contains("vCPU 0 halted with interrupts enabled and none due")
                && end.contains("vCPU 1 halted with interrupts enabled and none due"),
            "{end}"
        );
    }

    #[test]
    fn several_vcpus_need_two_rounds_of_all_waiting() {
        let board = Board::new(2, None);
        let halt = Some(Wait::MaskedHalt { rip: 0x42 });
        // Round 1: all wait, but one of them may have been woken since.
        assert_eq!(board.tell(1, 1, Some(Wait::ForSipi), None), None);
        assert_eq!(board.tell(0, 1, halt, None), None);
        // Round 2: vCPU 1 looked, vCPU 0 not yet.
        assert_eq!(board.tell(1, 2, Some(Wait::ForSipi), None), None);
        let end = board.tell(0, 2, halt, None).unwrap();
        assert!(
            end.contains("vCPU 0 halted with interrupts disabled (HLT, to resume at rip 0x42)")
                && end.contains("vCPU 1 waits for INIT-SIPI"),
            "{end}"
        );
        // A vCPU found running starts the count again.
        let board = Board::new(2, None);
        board.tell(0, 1, halt, None);
        board.tell(1, 1, halt, None);
        board.tell(0, 2, halt, None);
        assert_eq!(board.tell(1, 2, None, None), None);
        board.tell(0, 3, halt, None);
        assert_eq!(
            board.tell(1, 3, halt, None),
            None,
            "waiting since round 3 only"
        );
        board.tell(0, 4, halt, None);
        assert!(board.tell(1, 4, halt, None).is_some());
        // Rounds counted again from 1 (a new supervisor): the old looks
        // are forgotten, and two new rounds are needed.
        let mut watches: Vec<HaltWatch> = (0..2).map(|i| HaltWatch::new(&board, i)).collect();
        for w in &mut watches {
            w.restart();
        }
        assert_eq!(board.tell(0, 1, halt, None), None);
        assert_eq!(board.tell(1, 1, halt, None), None);
        board.tell(0, 2, halt, None);
        assert!(board.tell(1, 2, halt, None).is_some());
        // A vCPU that missed a round's look (a lost kick) holds it back.
        let board = Board::new(2, None);
        board.tell(0, 1, halt, None);
        board.tell(1, 1, halt, None);
        assert_eq!(board.tell(0, 2, halt, None), None);
        assert_eq!(board.tell(0, 3, halt, None), None);
    }
}
