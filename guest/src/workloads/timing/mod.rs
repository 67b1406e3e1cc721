//! Cycle timing with the TSC, and how many repetitions a measurement gets.
//!
//! RDTSC is not ordered with surrounding instructions: an LFENCE before it
//! waits for earlier instructions to complete (on AMD, with the
//! LFENCE-serialising MSR bit Linux and KVM set; on Intel by definition) and
//! one after it keeps the timed code from starting early.

use core::arch::x86_64::{_mm_lfence, _rdtsc};

/// The TSC, fenced on both sides.
#[inline(always)]
pub fn rdtsc_fenced() -> u64 {
    // SAFETY: LFENCE is SSE2 (baseline x86-64) and RDTSC is unprivileged
    // unless CR4.TSD is set, which neither Linux nor our guest kernel does.
    #[allow(unused_unsafe)]
    unsafe {
        _mm_lfence();
        let t = _rdtsc();
        _mm_lfence();
        t
    }
}

/// How long measurements should last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// TSC cycles one measurement should last; 0 when the TSC frequency is
    /// unknown (then every measurement uses its fixed repetition count).
    pub target_cycles: u64,
}

/// The most repetitions one measurement gets, whatever the calibration says.
pub const MAX_REPS: u64 = 1 << 28;

/// Parts a calibrated measurement is timed in (fewer when it has fewer
/// repetitions): 2 ms each at a quick run's 20 ms target. Ten, not five:
/// the VMM pairs each guest part with a native part run right after it
/// ([`crate::protocol::PART_PORT`]), and on a shared host the machine's
/// speed changes within milliseconds. Replaying 60,000 back-to-back
/// 0.4 ms native timings of a busy Zen 3 host under kvm_pvm, rows of an
/// identical twin pair ended under 0.97 in 22% of rows when whole 20 ms
/// repetitions were paired, 1.7% with 4 ms parts and none with 2 ms parts
/// (the row being the median of its part pairs).
pub const PARTS: u64 = 10;

/// Samples kept per measurement: the parts and the top-ups after them (a
/// later top-up joins the last sample).
const MAX_SAMPLES: usize = 16;

/// One measurement: its totals, and the part of it with the median rate.
///
/// Why the part: the measurement is timed in [`PARTS`] back-to-back parts,
/// and an interrupt or a preempted vCPU (under nested KVM, a burst of the
/// host's other work) slows the part it lands in, not the others. The
/// totals average that burst in; the median part leaves it out (the
/// repetition's record carries it: what the VMM compares when the guest
/// signals no parts; with parts, each part is paired itself). The totals
/// stay what the report's throughput is, beside the host's `openssl
/// speed`, which also averages its whole run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measured {
    /// Repetitions timed, all parts together.
    pub reps: u64,
    /// TSC cycles they took.
    pub cycles: u64,
    /// (repetitions, cycles) of the part with the median rate.
    pub median_part: (u64, u64),
}

/// Collects the timed parts of one measurement.
struct Samples {
    parts: [(u64, u64); MAX_SAMPLES],
    len: usize,
    reps: u64,
    cycles: u64,
}

impl Samples {
    fn new() -> Self {
        Samples {
            parts: [(0, 0); MAX_SAMPLES],
            len: 0,
            reps: 0,
            cycles: 0,
        }
    }

    /// `reps` repetitions took `cycles`: a new sample, or (all slots
    /// taken) more of the last one.
    fn push(&mut self, reps: u64, cycles: u64) {
        self.reps += reps;
        self.cycles = self.cycles.saturating_add(cycles);
        if self.len < MAX_SAMPLES {
            self.parts[self.len] = (reps, cycles);
            self.len += 1;
        } else {
            let last = &mut self.parts[MAX_SAMPLES - 1];
            last.0 += reps;
            last.1 = last.1.saturating_add(cycles);
        }
    }

    fn finish(mut self) -> Measured {
        Measured {
            reps: self.reps,
            cycles: self.cycles,
            median_part: median_rate(&mut self.parts[..self.len]),
        }
    }
}

/// Repetitions of part `i` when `reps` are cut into `parts` parts (the
/// first `reps % parts` get one more).
fn part_reps(reps: u64, parts: u64, i: u64) -> u64 {
    reps / parts + u64::from(i < reps % parts)
}

impl Budget {
    /// `target_ms` per measurement at `tsc_khz` (0 = unknown).
    pub fn new(tsc_khz: u64, target_ms: u64) -> Self {
        Budget {
            target_cycles: tsc_khz.saturating_mul(target_ms),
        }
    }

    /// Time `f`, repeated so the measurement lasts about the target, or
    /// `fixed_reps` times when the TSC frequency is unknown. Returns
    /// (repetitions, TSC cycles of the timed repetitions): the totals of
    /// [`Budget::measure_parts`].
    pub fn measure(&self, fixed_reps: u64, mut f: impl FnMut()) -> (u64, u64) {
        let m = self.measure_parts(fixed_reps, 1, |_| f(), |_, _| {});
        (m.reps, m.cycles)
    }

    /// [`Budget::measure`], with the part of the median rate too, and
    /// `on_part(work, cycles)` called after each timed part (outside the
    /// timing: the guest signals its VMM there, and the VMM times the
    /// native half of the pair before the guest's next part), `work` units
    /// per call of `f`.
    ///
    /// Calibration runs grow 4x until they last 1/16 of the target (which
    /// also warms caches and TLBs); calibration time is not reported. The
    /// calibrated repetitions are then timed in [`PARTS`] parts. With the
    /// frequency unknown, the `fixed_reps` are one part. A part that would
    /// hold a single call is that call's stages, where `f` marks them on
    /// the [`Stages`] it gets (as in [`Budget::measure_with_setup`]).
    pub fn measure_parts<F: FnMut(&mut Stages<'_>)>(
        &self,
        fixed_reps: u64,
        work: u64,
        mut f: F,
        mut on_part: impl FnMut(u64, u64),
    ) -> Measured {
        let least = self.least_stage();
        let mut samples = Samples::new();
        let mut part = |reps: u64, f: &mut F, samples: &mut Samples| {
            let dt = if reps == 1 {
                Stages::timed(work, least, &mut on_part, f)
            } else {
                let dt = time_calls(reps, f);
                on_part(reps * work, dt);
                dt
            };
            samples.push(reps, dt);
        };
        if self.target_cycles == 0 {
            time_calls(1, &mut f); // warm-up
            part(fixed_reps.clamp(1, MAX_REPS), &mut f, &mut samples);
            return samples.finish();
        }
        let mut r = 1u64;
        let reps = loop {
            let dt = time_calls(r, &mut f).max(1);
            if dt >= self.target_cycles / 16 || r >= MAX_REPS / 16 {
                break scale_reps(r, dt, self.target_cycles);
            }
            r *= 4;
        };
        let parts = PARTS.min(reps);
        for i in 0..parts {
            part(part_reps(reps, parts, i), &mut f, &mut samples);
        }
        // A calibration run slowed by an interrupt or a preempted vCPU
        // under-estimates the rate; top up until the target is reached.
        while samples.cycles < self.target_cycles * 3 / 4 && samples.reps < MAX_REPS {
            let more = scale_reps(
                samples.reps,
                samples.cycles.max(1),
                self.target_cycles - samples.cycles,
            )
            .min(MAX_REPS - samples.reps);
            part(more, &mut f, &mut samples);
        }
        samples.finish()
    }

    /// The shortest stage of a cut repetition: half a part of the target
    /// (1 ms in a quick run), the shortest that paired well in the
    /// measurement under [`Stages::split`].
    fn least_stage(&self) -> u64 {
        self.target_cycles / PARTS / 2
    }

    /// Like [`Budget::measure`] for work that needs untimed preparation
    /// before every repetition (Linpack regenerates its matrix): only `f`
    /// is timed; both get `state`. The first `prepare` + `f` is an untimed
    /// warm-up that also calibrates the repetition count.
    ///
    /// Returns the totals and the part of the median rate, consecutive
    /// repetitions grouped into [`PARTS`] parts (see [`Measured`]).
    /// `on_part(work, cycles)` as in [`Budget::measure_parts`] (`work`
    /// units per repetition), and like it, a part that would hold a single
    /// repetition is that repetition's stages (see [`Stages`]).
    #[allow(clippy::too_many_arguments)]
    pub fn measure_with_setup<S>(
        &self,
        fixed_reps: u64,
        work: u64,
        state: &mut S,
        mut prepare: impl FnMut(&mut S),
        mut f: impl FnMut(&mut S, &mut Stages<'_>),
        mut on_part: impl FnMut(u64, u64),
    ) -> Measured {
        prepare(state);
        let t0 = rdtsc_fenced();
        f(state, &mut Stages::off());
        let first = rdtsc_fenced().wrapping_sub(t0).max(1);
        let reps = if self.target_cycles == 0 {
            fixed_reps.clamp(1, MAX_REPS)
        } else {
            scale_reps(1, first, self.target_cycles)
        };
        let parts = PARTS.min(reps);
        let mut samples = Samples::new();
        let least = self.least_stage();
        for i in 0..parts {
            let n = part_reps(reps, parts, i);
            let cycles = if n == 1 {
                prepare(state);
                Stages::timed(work, least, &mut on_part, &mut |st| f(state, st))
            } else {
                let mut cycles = 0u64;
                let mut off = Stages::off();
                for _ in 0..n {
                    prepare(state);
                    let t0 = rdtsc_fenced();
                    f(state, &mut off);
                    cycles += rdtsc_fenced().wrapping_sub(t0);
                }
                on_part(n * work, cycles);
                cycles
            };
            samples.push(n, cycles);
        }
        samples.finish()
    }
}

/// The stages of one timed call of [`Budget::measure_parts`] or
/// [`Budget::measure_with_setup`] that is a part on its own: each cut
/// [`Stages::split`] makes ends a timed part there (and tells it), so the
/// call is paired stage by stage with its native twin, milliseconds apart
/// rather than the whole call apart. Why: a call can last longer than a
/// part (on Zen 3 a DGEMM of n = 1024 takes 50 to 210 ms and a Linpack
/// factorisation of n = 1000 30 to 70 ms, where a full run's parts are
/// 5 ms), and then a row had 1 or 2 part pairs per repetition. The cut
/// points are the caller's ([`crate::workloads::Dgemm::gemm`]'s blocks,
/// [`crate::workloads::linpack::lu_factor`]'s panels); marks do nothing in
/// calls that share a part, and the median part stays whole calls.
pub struct Stages<'a> {
    /// Where the stages are told (work, cycles); `None` when this
    /// repetition is not cut (the marks do nothing).
    on_part: Option<&'a mut dyn FnMut(u64, u64)>,
    /// The repetition's work.
    work: u64,
    /// Work of the stages told so far.
    done: u64,
    /// Timed cycles of the stages told so far.
    cycles: u64,
    /// TSC at the start of the running stage.
    start: u64,
    /// Cycles the shortest stage lasts.
    least: u64,
    /// (work, cycles) of the fastest stage told so far: the rate the rest
    /// of the repetition is judged at.
    fastest: Option<(u64, u64)>,
}

impl<'a> Stages<'a> {
    /// Marks that do nothing (an uncut repetition, or the warm-up).
    fn off() -> Self {
        Stages {
            on_part: None,
            work: 0,
            done: 0,
            cycles: 0,
            start: 0,
            least: 0,
            fastest: None,
        }
    }

    /// A cut repetition of `work` units whose stages last at least `least`
    /// cycles; its first stage starts now.
    fn on(work: u64, least: u64, on_part: &'a mut dyn FnMut(u64, u64)) -> Self {
        Stages {
            on_part: Some(on_part),
            work,
            done: 0,
            cycles: 0,
            start: rdtsc_fenced(),
            least,
            fastest: None,
        }
    }

    /// `done` of the repetition's work units are finished (a running
    /// total, capped at the repetition's work): the stage since the last
    /// cut ends here and is told with its share; the telling is not timed.
    ///
    /// A mark is passed over when the stage it would end has lasted less
    /// than the shortest stage, or the rest of the repetition would (at
    /// the fastest rate of its stages so far, this one included: a stage
    /// the host preempted is slow, never fast, and at the average rate one
    /// preempted stage of 10 ms made a 1% rest look long enough to cut).
    /// Why: short stages measure the exits around them more than their
    /// work. With every Linpack panel of n = 512 a stage
    /// (58%, 30%, 11% and 2% of the work, the last ones well under a
    /// millisecond with AVX2), the `avx2-fma` row ranged 0.906..1.206 over
    /// 12 runs, 5 of them under 0.97, against 0.978..1.004 uncut.
    pub fn split(&mut self, done: u64) {
        let done = done.min(self.work);
        if done <= self.done {
            return;
        }
        let Some(on_part) = self.on_part.as_mut() else {
            return;
        };
        let dt = rdtsc_fenced().wrapping_sub(self.start);
        let stage = (done - self.done, dt);
        // Fewer cycles per unit, compared without division.
        let faster = |a: (u64, u64), b: (u64, u64)| {
            u128::from(a.1) * u128::from(b.0) < u128::from(b.1) * u128::from(a.0)
        };
        let fastest = match self.fastest {
            Some(f) if !faster(stage, f) => f,
            _ => stage,
        };
        let rest = u128::from(self.work - done) * u128::from(fastest.1) / u128::from(fastest.0);
        if dt < self.least || rest < u128::from(self.least) {
            return;
        }
        self.fastest = Some(fastest);
        self.cycles = self.cycles.saturating_add(dt);
        on_part(done - self.done, dt);
        self.done = done;
        self.start = rdtsc_fenced();
    }

    /// Times one call of `f`, a repetition of `work` units, cut at the
    /// marks it makes into stages of at least `least` cycles, each told to
    /// `on_part`; returns the call's timed cycles.
    fn timed(
        work: u64,
        least: u64,
        on_part: &mut dyn FnMut(u64, u64),
        f: &mut dyn FnMut(&mut Stages<'_>),
    ) -> u64 {
        let mut stages = Stages::on(work, least, on_part);
        f(&mut stages);
        stages.finish()
    }

    /// Ends the last stage (the rest of the work) and returns the
    /// repetition's timed cycles, the stages' sum.
    fn finish(mut self) -> u64 {
        let dt = rdtsc_fenced().wrapping_sub(self.start);
        self.cycles = self.cycles.saturating_add(dt);
        if let Some(on_part) = self.on_part.as_mut() {
            on_part(self.work - self.done, dt);
        }
        self.cycles
    }
}

/// The (repetitions, cycles) sample with the median cycles per repetition
/// (the upper one of an even count), compared without division. Why the
/// median: one sample averages in whatever the host did meanwhile (an
/// interrupt, a preempted vCPU), and under nested KVM that moved single
/// figures by 20-40%. An empty slice gives (0, 0).
pub fn median_rate(s: &mut [(u64, u64)]) -> (u64, u64) {
    s.sort_unstable_by(|a, b| {
        (u128::from(a.1) * u128::from(b.0)).cmp(&(u128::from(b.1) * u128::from(a.0)))
    });
    s.get(s.len() / 2).copied().unwrap_or((0, 0))
}

/// TSC cycles of `reps` back-to-back calls of `f`, uncut (generic, so a
/// call of a 16-byte AES message stays inlined in the timed loop).
fn time_calls<F: FnMut(&mut Stages<'_>)>(reps: u64, f: &mut F) -> u64 {
    let mut off = Stages::off();
    let t0 = rdtsc_fenced();
    for _ in 0..reps {
        f(&mut off);
    }
    rdtsc_fenced().wrapping_sub(t0)
}

/// Repetitions so `r` repetitions that took `dt` cycles scale to `target`.
fn scale_reps(r: u64, dt: u64, target: u64) -> u64 {
    let reps = (r as u128 * target as u128).div_ceil(dt as u128);
    (reps as u64).clamp(1, MAX_REPS)
}

#[cfg(test)]
mod tests;
