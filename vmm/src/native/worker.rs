//! The thread the native repetitions run on, held at each timed part.
//!
//! A native repetition is one call of the row's code (the guest image's
//! entry point, or the VMM's build of it) that times its parts one after
//! another. To alternate guest and native parts, the call must stop after
//! each of its parts until the guest has timed its next one: so it runs
//! on its own thread, and the part callback (`Gate`) hands the part to
//! the vCPU thread and waits there for the next turn. The two threads never
//! run at once (each waits while the other has the turn), and both are
//! held on one CPU (the one the vCPU thread ran on at the first turn), so
//! both sides of a pair see the same core, as when the native side ran on
//! the vCPU thread itself.

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

use guest::protocol::{NativeRowOut, PartRecord, Report, RowKey};
use guest::workloads;

use super::image::GuestImage;
use super::scratch::Scratch;

/// What the vCPU thread tells the native thread.
enum Turn {
    /// Run one repetition of this row up to its first part, on this CPU.
    Start(RowKey, Option<usize>),
    /// Run up to the next part (or the end of the repetition).
    Next,
}

/// What the native thread answers at the end of its turn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    /// A part was timed; the repetition waits for its next turn.
    Part(PartRecord),
    /// The repetition ended.
    Done(NativeRowOut),
}

/// The vCPU thread's end of the native thread.
pub struct Worker {
    turns: Option<Sender<Turn>>,
    steps: Receiver<Step>,
    thread: Option<JoinHandle<()>>,
    /// The CPU both threads are held on, from the first turn on.
    cpu: Cell<Option<usize>>,
}

/// What the native thread runs with.
struct Native {
    image: Option<GuestImage>,
    quick: bool,
    tsc_khz: u64,
    scratch: Scratch,
    report: Box<Report>,
}

/// The part callback's state on the native thread.
struct Gate<'a> {
    steps: &'a Sender<Step>,
    turns: &'a Receiver<Turn>,
    /// Run the rest of the repetition unheld: the vCPU side is gone
    /// (`closed`), or asked for another row while this one was held
    /// (which it never does: it finishes a repetition before starting one).
    free: bool,
    /// The vCPU side is gone: the thread ends after this repetition.
    closed: bool,
}

impl Gate<'_> {
    /// A part is done: hand it over and wait for the next turn.
    fn part(&mut self, p: &PartRecord) {
        if self.free {
            return;
        }
        if self.steps.send(Step::Part(*p)).is_err() {
            (self.free, self.closed) = (true, true);
            return;
        }
        match self.turns.recv() {
            Ok(Turn::Next) => {}
            Ok(Turn::Start(..)) => self.free = true,
            Err(_) => (self.free, self.closed) = (true, true),
        }
    }
}

/// `NativeRowArgs::on_part` for the guest image's code.
///
/// # Safety
/// `ctx` is the `Gate` passed with it, `part` a valid record.
unsafe extern "C" fn gate_part(ctx: *mut c_void, part: *const PartRecord) {
    // SAFETY: the caller's contract above; the gate outlives the call of
    // the entry point that calls back here, on this same thread.
    let (gate, part) = unsafe { (&mut *ctx.cast::<Gate>(), &*part) };
    gate.part(part);
}

/// Move this thread onto `cpu` if it is not there already (best effort:
/// a refusal leaves it where the scheduler puts it).
fn pin(pinned: &mut Option<usize>, cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    if *pinned == Some(cpu) || cpu >= libc::CPU_SETSIZE as usize {
        return;
    }
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET stays inside it
    // (cpu < CPU_SETSIZE); sched_setaffinity only reads it.
    let ok = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    };
    if ok {
        *pinned = Some(cpu);
    }
}

/// The CPU this thread runs on now.
fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes nothing and returns a CPU number or -1.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

impl Native {
    fn run(&mut self, key: RowKey, gate: &mut Gate) -> NativeRowOut {
        match &self.image {
            Some(img) => img.run_row(
                key.encode(),
                self.quick,
                self.tsc_khz,
                self.scratch.as_mut_slice(),
                Some((gate_part, std::ptr::from_mut(gate).cast())),
            ),
            None => {
                *self.report = Report::new();
                workloads::run_row(
                    key,
                    self.quick,
                    self.tsc_khz,
                    self.scratch.as_mut_slice(),
                    &mut self.report,
                    &mut |p| gate.part(p),
                )
            }
        }
    }
}

impl Worker {
    /// The native thread, running `image`'s code (or the VMM's build
    /// without it) on `scratch`.
    pub fn spawn(
        image: Option<GuestImage>,
        quick: bool,
        tsc_khz: u64,
        scratch: Scratch,
    ) -> std::io::Result<Self> {
        let (turn_tx, turn_rx) = channel::<Turn>();
        let (step_tx, step_rx) = channel::<Step>();
        let mut native = Native {
            image,
            quick,
            tsc_khz,
            scratch,
            report: Box::new(Report::new()),
        };
        let thread = std::thread::Builder::new()
            .name("native".into())
            .spawn(move || {
                let mut pinned = None;
                while let Ok(turn) = turn_rx.recv() {
                    let Turn::Start(key, cpu) = turn else {
                        // No repetition is running: nothing to continue.
                        // Every turn gets one answer, so the vCPU side
                        // never waits for one that will not come.
                        if step_tx.send(Step::Done(NativeRowOut::default())).is_err() {
                            break;
                        }
                        continue;
                    };
                    pin(&mut pinned, cpu);
                    let mut gate = Gate {
                        steps: &step_tx,
                        turns: &turn_rx,
                        free: false,
                        closed: false,
                    };
                    let out = native.run(key, &mut gate);
                    let closed = gate.closed;
                    if step_tx.send(Step::Done(out)).is_err() || closed {
                        break;
                    }
                }
                // The mapping at the link address goes with the thread.
                drop(native);
            })?;
        Ok(Self {
            turns: Some(turn_tx),
            steps: step_rx,
            thread: Some(thread),
            cpu: Cell::new(None),
        })
    }

    /// Start a repetition of `key`; returns its first step (`None`: the
    /// native thread is gone).
    pub fn start(&self, key: RowKey) -> Option<Step> {
        self.turn(Turn::Start(key, self.hold_cpu()))
    }

    /// Let the running repetition go on to its next step.
    pub fn next(&self) -> Option<Step> {
        self.turn(Turn::Next)
    }

    /// The CPU both threads run on. At the first start, the calling (vCPU)
    /// thread is held on the CPU it is on, and the native thread follows
    /// it there. Unheld, the scheduler woke each thread on the other,
    /// idle, CPU at nearly every turn (849 moves in 865 turns of a default
    /// run), so every part started on a core whose caches held the other
    /// side's data, and the run took 8% longer than with one thread.
    fn hold_cpu(&self) -> Option<usize> {
        if self.cpu.get().is_none() {
            let mut held = None;
            pin(&mut held, current_cpu());
            self.cpu.set(held.or_else(current_cpu));
        }
        self.cpu.get()
    }

    fn turn(&self, t: Turn) -> Option<Step> {
        self.turns.as_ref()?.send(t).ok()?;
        self.steps.recv().ok()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing the channel frees a repetition held at a part, and ends
        // the thread after it; joining it unmaps the guest image before
        // anyone may map it again.
        self.turns = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_turn_gets_one_answer() {
        // The VMM's build (no image), a row the host can always run.
        let (scratch, _) = Scratch::new(4 << 20, None).unwrap();
        let w = Worker::spawn(None, true, 1_000_000, scratch).unwrap();
        // Nothing running: a stray turn ends at once, with nothing run.
        assert_eq!(w.next(), Some(Step::Done(NativeRowOut::default())));
        let key = RowKey::decode(0x3000_0028).unwrap(); // dgemm sse2 n=40
        let mut parts = 0;
        let mut step = w.start(key);
        let out = loop {
            match step {
                Some(Step::Part(p)) => {
                    assert_eq!((p.key, p.rep, p.part), (key.encode(), 0, parts));
                    parts += 1;
                    step = w.next();
                }
                Some(Step::Done(out)) => break out,
                None => panic!("the native thread is gone"),
            }
        };
        assert!(
            parts >= 1 && out.ran == 1 && out.check == 1,
            "{parts} {out:?}"
        );
        // Dropped while a repetition is held: the thread ends.
        assert!(matches!(w.start(key), Some(Step::Part(_))));
        drop(w);
    }
}
