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
//! So the run is over when every vCPU waits in one of those two ways and
//! no place above can wake one. Nothing is judged of a vCPU the VMM cannot
//! read fully, one with RFLAGS.IF set (its interrupt may come from a timer
//! the VMM does not model), one in SMM, or one that may be running a guest
//! of its own (EFER.SVME or CR4.VMXE: there the gate is not IF).
//!
//! How it is asked: a vCPU thread looks at itself ([`look`], one
//! `KVM_GET_MP_STATE` when it is running) each time the supervisor's
//! watch kicks it out of `KVM_RUN`, every [`WATCH_EVERY`], and tells the
//! run's [`Board`]. With several vCPUs, a waiting vCPU could have been
//! woken by another between two looks, so the verdict needs every vCPU
//! waiting at two looks in a row (the second round of kicks); with one,
//! the first look is final.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kvm_bindings::{
    kvm_irqchip, KVM_IRQCHIP_IOAPIC, KVM_MP_STATE_HALTED, KVM_MP_STATE_INIT_RECEIVED,
    KVM_MP_STATE_RUNNABLE, KVM_MP_STATE_UNINITIALIZED,
};
use kvm_ioctls::{VcpuFd, VmFd};

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

/// The LAPIC's local vector table entries that have a delivery mode (the
/// timer's and the error entry's are always Fixed): CMCI, thermal, PMC,
/// LINT0, LINT1, by their register offsets.
const LVT_WITH_MODE: [usize; 5] = [0x2f0, 0x330, 0x340, 0x350, 0x360];
/// An LVT or IOAPIC entry's mask bit.
const ENTRY_MASKED: u64 = 1 << 16;
/// Delivery modes that wake a halted vCPU whatever its IF: SMI, NMI, INIT.
const WAKING_MODES: [u64; 3] = [0b010, 0b100, 0b101];

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
            Wait::ForSipi => f.write_str("waits for INIT-SIPI"),
        }
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
    /// The [`LVT_WITH_MODE`] entries; `None` without an in-kernel LAPIC.
    pub lvt: Option<[u32; 5]>,
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
            let lvt = p.lvt?;
            let lapic_wakes = lvt.iter().any(|&e| entry_wakes(u64::from(e)));
            (p.rflags & RFLAGS_IF == 0 && !lapic_wakes).then_some(Wait::MaskedHalt { rip: p.rip })
        }
        _ => None,
    }
}

/// Read and [`judge`] `vcpu` (on its own thread, out of `KVM_RUN`): one
/// `KVM_GET_MP_STATE` when it is runnable, five ioctls when it waits. A
/// failing ioctl judges nothing.
pub fn look(vcpu: &VcpuFd) -> Option<Wait> {
    let mp_state = vcpu.get_mp_state().ok()?.mp_state;
    if mp_state == KVM_MP_STATE_RUNNABLE {
        return None;
    }
    let regs = vcpu.get_regs().ok()?;
    let sregs = vcpu.get_sregs().ok()?;
    let ev = vcpu.get_vcpu_events().ok()?;
    let lvt = vcpu.get_lapic().ok().map(|lapic| {
        LVT_WITH_MODE.map(|off| {
            let b = |i: usize| lapic.regs[off + i] as u8;
            u32::from_le_bytes([b(0), b(1), b(2), b(3)])
        })
    });
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
        lvt,
    })
}

/// Whether an IOAPIC redirection entry can wake a halted vCPU (one that
/// delivers NMI, SMI or INIT and is unmasked). A failing read says yes:
/// nothing is judged that the VMM could not see.
fn ioapic_wakes(vm: &VmFd) -> bool {
    let mut chip = kvm_irqchip {
        chip_id: KVM_IRQCHIP_IOAPIC,
        ..Default::default()
    };
    if vm.get_irqchip(&mut chip).is_err() {
        return true;
    }
    // SAFETY: KVM filled the union as the IOAPIC's state, as asked by
    // `chip_id`; each redirection entry is a plain 64-bit word.
    let entries = unsafe { chip.chip.ioapic.redirtbl };
    // SAFETY: every variant of the entry union is the same 64 bits.
    entries.iter().any(|e| entry_wakes(unsafe { e.bits }))
}

/// [`Wait`] as the two words a [`Slot`] keeps.
const RUNS: u8 = 0;
const MASKED_HALT: u8 = 1;
const FOR_SIPI: u8 = 2;

/// What one vCPU said at its last look.
#[derive(Debug, Default)]
struct Slot {
    /// The round of its last look (0: none yet).
    seen: AtomicU64,
    /// The round since which every look found it waiting (0: it was not
    /// at its last look).
    since: AtomicU64,
    /// Its [`Wait`]: `RUNS`, `MASKED_HALT` or `FOR_SIPI`.
    wait: AtomicU8,
    rip: AtomicU64,
}

/// The run's vCPUs as their last looks found them; shared by their threads.
#[derive(Debug)]
pub struct Board {
    slots: Vec<Slot>,
    /// The full irqchip's VM, whose IOAPIC is asked before a verdict.
    ioapic: Option<Arc<VmFd>>,
}

impl Board {
    /// A board for `vcpus` vCPUs; `ioapic`: the VM when it has KVM's
    /// IOAPIC (the full irqchip).
    pub fn new(vcpus: usize, ioapic: Option<Arc<VmFd>>) -> Arc<Self> {
        Arc::new(Self {
            slots: (0..vcpus.max(1)).map(|_| Slot::default()).collect(),
            ioapic,
        })
    }

    /// vCPU `i`'s look in `round` found `wait`. Returns the run's end, in a
    /// sentence, when every vCPU now waits with nothing to wake it: at
    /// this look with one vCPU, at two looks in a row with several.
    fn tell(&self, i: usize, round: u64, wait: Option<Wait>) -> Option<String> {
        let slot = self.slots.get(i)?;
        let (code, rip) = match wait {
            None => (RUNS, 0),
            Some(Wait::MaskedHalt { rip }) => (MASKED_HALT, rip),
            Some(Wait::ForSipi) => (FOR_SIPI, 0),
        };
        slot.wait.store(code, Ordering::SeqCst);
        slot.rip.store(rip, Ordering::SeqCst);
        if wait.is_none() {
            slot.since.store(0, Ordering::SeqCst);
        } else if slot.since.load(Ordering::SeqCst) == 0 {
            slot.since.store(round, Ordering::SeqCst);
        }
        slot.seen.store(round, Ordering::SeqCst);
        let settled = |s: &Slot| {
            let since = s.since.load(Ordering::SeqCst);
            s.seen.load(Ordering::SeqCst) == round
                && since != 0
                && (self.slots.len() == 1 || since < round)
        };
        if !self.slots.iter().all(settled) || self.ioapic.as_deref().is_some_and(ioapic_wakes) {
            return None;
        }
        Some(self.verdict())
    }

    /// The sentence for a run whose vCPUs all wait for nothing.
    fn verdict(&self) -> String {
        let wait = |s: &Slot| match s.wait.load(Ordering::SeqCst) {
            MASKED_HALT => Wait::MaskedHalt {
                rip: s.rip.load(Ordering::SeqCst),
            },
            _ => Wait::ForSipi,
        };
        let ioapic = if self.ioapic.is_some() {
            " or the IOAPIC"
        } else {
            ""
        };
        if let [only] = self.slots.as_slice() {
            return format!(
                "the guest {} and nothing can wake it (no NMI, SMI or INIT \
                 pending or able to come from its LAPIC{ioapic})",
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
            "every vCPU waits and none can wake another: {} (no NMI, SMI or \
             INIT pending or able to come from a LAPIC{ioapic})",
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
}

impl HaltWatch {
    /// vCPU `index` of the run on `board`.
    pub fn new(board: &Arc<Board>, index: usize) -> Self {
        Self {
            board: board.clone(),
            index,
            last_round: 0,
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
        self.board.tell(self.index, self.last_round, look(vcpu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LVT entries as KVM resets them: all masked.
    const RESET_LVT: [u32; 5] = [0x1_0000; 5];

    fn halted(rflags: u64) -> Parked {
        Parked {
            mp_state: KVM_MP_STATE_HALTED,
            rflags,
            rip: 0x1234,
            lvt: Some(RESET_LVT),
            ..Parked::default()
        }
    }

    #[test]
    fn a_masked_halt_with_nothing_to_wake_it_is_a_wait() {
        assert_eq!(judge(&halted(0x2)), Some(Wait::MaskedHalt { rip: 0x1234 }));
        // Unmasked LVT entries in Fixed or ExtINT mode need IF too.
        let mut p = halted(0x2);
        p.lvt = Some([0x0030, 0x0031, 0x0032, 0x0700, 0x0033]);
        assert!(judge(&p).is_some());
    }

    #[test]
    fn what_can_wake_a_halted_vcpu_is_never_judged() {
        assert_eq!(judge(&halted(0x202)), None, "IF set");
        let mut p = halted(0x2);
        p.event = true;
        assert_eq!(judge(&p), None, "a pending event");
        let mut p = halted(0x2);
        p.may_nest = true;
        assert_eq!(judge(&p), None, "may run a guest of its own");
        let mut p = halted(0x2);
        p.lvt = None;
        assert_eq!(judge(&p), None, "no LAPIC to read");
        // Each entry with a delivery mode, each waking mode, unmasked.
        for slot in 0..5 {
            for mode in [0b010u32, 0b100, 0b101] {
                let mut lvt = RESET_LVT;
                lvt[slot] = mode << 8;
                let mut p = halted(0x2);
                p.lvt = Some(lvt);
                assert_eq!(judge(&p), None, "LVT {slot} mode {mode:03b}");
                // The same entry masked wakes nothing.
                lvt[slot] |= 1 << 16;
                p.lvt = Some(lvt);
                assert!(judge(&p).is_some(), "LVT {slot} mode {mode:03b} masked");
            }
        }
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
                lvt: Some(RESET_LVT),
                ..Parked::default()
            };
            assert_eq!(judge(&p), wait, "mp_state {state}");
        }
    }

    #[test]
    fn one_vcpu_is_judged_at_its_first_waiting_look() {
        let board = Board::new(1, None);
        assert_eq!(board.tell(0, 1, None), None);
        let end = board
            .tell(0, 2, Some(Wait::MaskedHalt { rip: 0x10_0001 }))
            .unwrap();
        assert!(
            end.contains("halted with interrupts disabled (HLT, to resume at rip 0x100001)")
                && end.contains("its LAPIC"),
            "{end}"
        );
    }

    #[test]
    fn several_vcpus_need_two_rounds_of_all_waiting() {
        let board = Board::new(2, None);
        let halt = Some(Wait::MaskedHalt { rip: 0x42 });
        // Round 1: all wait, but one of them may have been woken since.
        assert_eq!(board.tell(1, 1, Some(Wait::ForSipi)), None);
        assert_eq!(board.tell(0, 1, halt), None);
        // Round 2: vCPU 1 looked, vCPU 0 not yet.
        assert_eq!(board.tell(1, 2, Some(Wait::ForSipi)), None);
        let end = board.tell(0, 2, halt).unwrap();
        assert!(
            end.contains("vCPU 0 halted with interrupts disabled (HLT, to resume at rip 0x42)")
                && end.contains("vCPU 1 waits for INIT-SIPI"),
            "{end}"
        );
        // A vCPU found running starts the count again.
        let board = Board::new(2, None);
        board.tell(0, 1, halt);
        board.tell(1, 1, halt);
        board.tell(0, 2, halt);
        assert_eq!(board.tell(1, 2, None), None);
        board.tell(0, 3, halt);
        assert_eq!(board.tell(1, 3, halt), None, "waiting since round 3 only");
        board.tell(0, 4, halt);
        assert!(board.tell(1, 4, halt).is_some());
        // Rounds counted again from 1 (a new supervisor): the old looks
        // are forgotten, and two new rounds are needed.
        let mut watches: Vec<HaltWatch> = (0..2).map(|i| HaltWatch::new(&board, i)).collect();
        for w in &mut watches {
            w.restart();
        }
        assert_eq!(board.tell(0, 1, halt), None);
        assert_eq!(board.tell(1, 1, halt), None);
        board.tell(0, 2, halt);
        assert!(board.tell(1, 2, halt).is_some());
        // A vCPU that missed a round's look (a lost kick) holds it back.
        let board = Board::new(2, None);
        board.tell(0, 1, halt);
        board.tell(1, 1, halt);
        assert_eq!(board.tell(0, 2, halt), None);
        assert_eq!(board.tell(0, 3, halt), None);
    }
}
