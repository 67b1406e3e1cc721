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

impl Budget {
    /// `target_ms` per measurement at `tsc_khz` (0 = unknown).
    pub fn new(tsc_khz: u64, target_ms: u64) -> Self {
        Budget {
            target_cycles: tsc_khz.saturating_mul(target_ms),
        }
    }

    /// Time `f`, repeated so the measurement lasts about the target, or
    /// `fixed_reps` times when the TSC frequency is unknown. Returns
    /// (repetitions, TSC cycles of the timed repetitions).
    ///
    /// Calibration runs grow 4x until they last 1/16 of the target (which
    /// also warms caches and TLBs); calibration time is not reported.
    pub fn measure(&self, fixed_reps: u64, mut f: impl FnMut()) -> (u64, u64) {
        let mut time = |reps: u64| {
            let t0 = rdtsc_fenced();
            for _ in 0..reps {
                f();
            }
            rdtsc_fenced().wrapping_sub(t0)
        };
        if self.target_cycles == 0 {
            time(1); // warm-up
            let reps = fixed_reps.clamp(1, MAX_REPS);
            return (reps, time(reps));
        }
        let mut r = 1u64;
        let reps = loop {
            let dt = time(r).max(1);
            if dt >= self.target_cycles / 16 || r >= MAX_REPS / 16 {
                break scale_reps(r, dt, self.target_cycles);
            }
            r *= 4;
        };
        // A calibration run slowed by an interrupt or a preempted vCPU
        // under-estimates the rate; top up until the target is reached.
        let (mut total_reps, mut total) = (reps, time(reps));
        while total < self.target_cycles * 3 / 4 && total_reps < MAX_REPS {
            let more = scale_reps(total_reps, total.max(1), self.target_cycles - total)
                .min(MAX_REPS - total_reps);
            total += time(more);
            total_reps += more;
        }
        (total_reps, total)
    }

    /// Like [`Budget::measure`] for work that needs untimed preparation
    /// before every repetition (Linpack regenerates its matrix): only `f`
    /// is timed; both get `state`. The first `prepare` + `f` is an untimed
    /// warm-up that also calibrates the repetition count.
    pub fn measure_with_setup<S>(
        &self,
        fixed_reps: u64,
        state: &mut S,
        mut prepare: impl FnMut(&mut S),
        mut f: impl FnMut(&mut S),
    ) -> (u64, u64) {
        prepare(state);
        let t0 = rdtsc_fenced();
        f(state);
        let first = rdtsc_fenced().wrapping_sub(t0).max(1);
        let reps = if self.target_cycles == 0 {
            fixed_reps.clamp(1, MAX_REPS)
        } else {
            scale_reps(1, first, self.target_cycles)
        };
        let mut cycles = 0u64;
        for _ in 0..reps {
            prepare(state);
            let t0 = rdtsc_fenced();
            f(state);
            cycles += rdtsc_fenced().wrapping_sub(t0);
        }
        (reps, cycles)
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

/// Repetitions so `r` repetitions that took `dt` cycles scale to `target`.
fn scale_reps(r: u64, dt: u64, target: u64) -> u64 {
    let reps = (r as u128 * target as u128).div_ceil(dt as u128);
    (reps as u64).clamp(1, MAX_REPS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_sample_is_the_middle_rate_not_the_middle_time() {
        // Cycles per repetition 10, 30, 20: the median rate is the third
        // sample's, where the median time (300) would pick the second.
        let mut s = [(10, 100), (10, 300), (20, 400)];
        assert_eq!(median_rate(&mut s), (20, 400));
        assert_eq!(median_rate(&mut [(3, 9)]), (3, 9));
        assert_eq!(median_rate(&mut []), (0, 0));
    }

    #[test]
    fn tsc_advances() {
        let a = rdtsc_fenced();
        let b = rdtsc_fenced();
        assert!(b > a);
    }

    #[test]
    fn fixed_reps_when_frequency_unknown() {
        let mut n = 0;
        let (reps, cycles) = Budget::new(0, 20).measure(7, || n += 1);
        assert_eq!(reps, 7);
        assert_eq!(n, 8); // one warm-up
        assert!(cycles > 0);
        let mut counts = (0, 0);
        let (reps, _) =
            Budget::new(0, 20).measure_with_setup(3, &mut counts, |c| c.0 += 1, |c| c.1 += 1);
        assert_eq!((reps, counts), (3, (4, 4)));
    }

    #[test]
    fn calibrates_to_target() {
        // 1 GHz assumed, 1 ms target: 10^6 cycles; each call spins ~10^4.
        let spin = || {
            let t = rdtsc_fenced();
            while rdtsc_fenced() - t < 10_000 {}
        };
        let (reps, cycles) = Budget::new(1_000_000, 1).measure(1, spin);
        // What `measure` promises whatever the machine's load: at least
        // three quarters of the target (the top-up), and every repetition
        // timed (each spins at least 10^4 cycles).
        assert!(cycles >= 750_000, "{cycles}");
        assert!((1..=MAX_REPS).contains(&reps), "{reps}");
        assert!(cycles >= reps * 10_000, "{reps} reps in {cycles} cycles");
        assert_eq!(scale_reps(4, 100, 1000), 40);
        assert_eq!(scale_reps(1, u64::MAX, 10), 1);
    }
}
