//! Work every CPU does at once (`bench=xstate-check`, `bench=parallel`):
//! which CPUs are up, what the BSP asked the APs to wait for, the
//! participants and their scratch memory, and the barriers they hold
//! before each step. Shared memory only, spun on at CPL3 (no exits).
//!
//! The BSP says which [`Work`] is coming before INIT ([`request`]); an AP
//! waits for each in turn ([`wait_for`]) until the BSP reaches that
//! benchmark and [`publish`]es the participants (the APs that are up) and
//! their scratch (the arena is the BSP's), or [`cancel_outstanding`] says
//! it never will. An AP that came up too late to be counted is not
//! enlisted and goes on alone.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use guest::protocol::record::MAX_CPUS;
use guest::protocol::Cmdline;

use super::arena;

const N: usize = MAX_CPUS as usize;

/// A benchmark every CPU runs at once, in the order the BSP reaches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// `bench=xstate-check`.
    Xcheck = 0,
    /// `bench=parallel`.
    Parallel = 1,
}

impl Work {
    /// Every kind, in the order the BSP runs them (`kernel::bench::run`).
    pub const ALL: [Work; 2] = [Work::Xcheck, Work::Parallel];
}

/// Per CPU: TSC when it reached CPL3 (0: not up).
static ONLINE_TSC: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];
/// CPUs asked for (BSP included).
static WANTED: AtomicU32 = AtomicU32::new(1);
/// Per [`Work`]: 1 when the APs are to wait for it (set before INIT).
static WANTS: [AtomicU32; 2] = [const { AtomicU32::new(0) }; 2];
/// Per [`Work`]: 0 not yet, [`GO`] published, [`CANCELLED`] never coming.
static STATE: [AtomicU32; 2] = [const { AtomicU32::new(0) }; 2];
/// [`STATE`]: the participants and their scratch are published.
const GO: u32 = 1;
/// [`STATE`]: the BSP did not run the benchmark (the APs go on).
const CANCELLED: u32 = 2;
/// Per [`Work`]: how many CPUs take part (the BSP included).
static PARTICIPANTS: [AtomicU32; 2] = [const { AtomicU32::new(0) }; 2];
/// Per [`Work`] and CPU: its scratch (address; 0 = not enlisted).
static SCRATCH: [[AtomicU64; N]; 2] = [const { [const { AtomicU64::new(0) }; N] }; 2];
/// Per [`Work`]: the length of every participant's scratch.
static SCRATCH_LEN: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
/// `exits=` for the APs' xstate checks.
static XCHECK_COUNT: AtomicU64 = AtomicU64::new(1);
/// Per [`Work`]: the barrier its participants hold before each step.
static BARRIERS: [Barrier; 2] = [const { Barrier::new() }; 2];

/// A reusable barrier in shared memory: the last of `n` arrivals opens
/// the current generation; the others spin at CPL3 (no exits).
pub struct Barrier {
    arrived: AtomicU32,
    generation: AtomicU32,
}

impl Barrier {
    const fn new() -> Self {
        Barrier {
            arrived: AtomicU32::new(0),
            generation: AtomicU32::new(0),
        }
    }

    /// Wait until `n` CPUs (this one included) have arrived.
    pub fn wait(&self, n: u32) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 >= n {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation
                .store(generation.wrapping_add(1), Ordering::Release);
        } else {
            while self.generation.load(Ordering::Acquire) == generation {
                core::hint::spin_loop();
            }
        }
    }
}

/// BSP, before INIT: how many CPUs, and which work the APs wait for.
pub fn request(wanted: u32, cmdline: &Cmdline) {
    WANTED.store(wanted, Ordering::Relaxed);
    let wants = |name| cmdline.wants_bench(name) as u32;
    WANTS[Work::Xcheck as usize].store(wants("xstate-check"), Ordering::Relaxed);
    WANTS[Work::Parallel as usize].store(wants("parallel"), Ordering::Relaxed);
    XCHECK_COUNT.store(cmdline.exit_count(), Ordering::Relaxed);
}

/// How many CPUs the BSP started (itself included): an AP whose index is
/// not below it was not asked for.
pub fn wanted() -> u32 {
    WANTED.load(Ordering::Relaxed)
}

/// Whether the APs are to wait for `w`.
pub fn wants(w: Work) -> bool {
    WANTS[w as usize].load(Ordering::Relaxed) != 0
}

/// `exits=` for the APs' xstate checks.
pub fn xcheck_count() -> u64 {
    XCHECK_COUNT.load(Ordering::Relaxed)
}

/// AP `cpu` reached CPL3 at TSC `tsc`.
pub fn mark_online(cpu: usize, tsc: u64) {
    ONLINE_TSC[cpu].store(tsc.max(1), Ordering::Release);
}

/// TSC when CPU `cpu` came up (0: not up).
pub fn online_tsc(cpu: usize) -> u64 {
    ONLINE_TSC[cpu].load(Ordering::Acquire)
}

/// BSP: the work the APs still wait for is not coming (a bad benchmark
/// list, no XSAVE, the run ending): they go on.
pub fn cancel_outstanding() {
    for w in Work::ALL {
        let _ =
            STATE[w as usize].compare_exchange(0, CANCELLED, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// BSP: `w` is not coming.
pub fn cancel(w: Work) {
    let _ = STATE[w as usize].compare_exchange(0, CANCELLED, Ordering::AcqRel, Ordering::Acquire);
}

/// BSP: enlist every AP that is up for `w`, each with `len` bytes of
/// scratch, and let them go. Returns the number of participants (the BSP
/// included; 1 when no AP could take part).
pub fn publish(w: Work, len: usize) -> u32 {
    let mut n = 1;
    let wanted = WANTED.load(Ordering::Relaxed) as usize;
    for (cpu, slot) in SCRATCH[w as usize].iter().enumerate().take(wanted).skip(1) {
        if online_tsc(cpu) == 0 {
            continue;
        }
        if let Some(buf) = arena::alloc_bytes(len) {
            slot.store(buf.as_mut_ptr() as u64, Ordering::Relaxed);
            n += 1;
        }
    }
    SCRATCH_LEN[w as usize].store(len as u64, Ordering::Relaxed);
    PARTICIPANTS[w as usize].store(n, Ordering::Relaxed);
    STATE[w as usize].store(if n > 1 { GO } else { CANCELLED }, Ordering::Release);
    n
}

/// Hold `w`'s barrier with its `n` participants (nothing when alone).
pub fn barrier(w: Work, n: u32) {
    if n > 1 {
        BARRIERS[w as usize].wait(n);
    }
}

/// AP `cpu`: wait until the BSP publishes or cancels `w`; then, when this
/// CPU is enlisted, the participant count and its scratch.
pub fn wait_for(w: Work, cpu: usize) -> Option<(u32, &'static mut [u8])> {
    let state = loop {
        match STATE[w as usize].load(Ordering::Acquire) {
            0 => core::hint::spin_loop(),
            s => break s,
        }
    };
    if state != GO {
        return None;
    }
    let addr = SCRATCH[w as usize][cpu].load(Ordering::Relaxed);
    let len = SCRATCH_LEN[w as usize].load(Ordering::Relaxed) as usize;
    if addr == 0 {
        return None;
    }
    // SAFETY: the BSP allocated `len` bytes at `addr` from the arena for
    // this CPU alone and published them before GO (Release, read after the
    // Acquire above); nothing else uses them for the rest of the run.
    let scratch = unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len) };
    Some((PARTICIPANTS[w as usize].load(Ordering::Relaxed), scratch))
}
