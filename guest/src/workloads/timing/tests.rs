//! TSC timing, the repetition calibration and the median-part split of a
//! measurement.

extern crate std;
use std::vec::Vec;

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
    let m = Budget::new(0, 20).measure_with_setup(
        3,
        1,
        &mut counts,
        |c| c.0 += 1,
        |c, _| c.1 += 1,
        |_, _| {},
    );
    assert_eq!((m.reps, counts), (3, (4, 4)));
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

#[test]
fn the_median_part_is_one_timed_part_of_the_measurement() {
    let spin = || {
        let t = rdtsc_fenced();
        while rdtsc_fenced() - t < 10_000 {}
    };
    let mut parts = Vec::new();
    let m = Budget::new(1_000_000, 1).measure_parts(1, 1, |_| spin(), |w, c| parts.push((w, c)));
    let (reps, cycles) = m.median_part;
    // Every timed part was told, and they are the whole measurement.
    assert!(parts.len() as u64 >= PARTS.min(m.reps), "{parts:?}");
    assert_eq!(parts.iter().map(|p| p.0).sum::<u64>(), m.reps);
    assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), m.cycles);
    assert!(parts.contains(&m.median_part), "{parts:?}");
    assert!((1..=m.reps).contains(&reps), "{m:?}");
    assert!(cycles <= m.cycles, "{m:?}");
    assert!(cycles >= reps * 10_000, "{m:?}");
    // Unknown frequency: the fixed repetitions are the one part.
    let mut told = 0;
    let m = Budget::new(0, 20).measure_parts(7, 1, |_| {}, |_, _| told += 1);
    assert_eq!((m.reps, m.median_part, told), (7, (7, m.cycles), 1));
    // With setup: every repetition in some part (5 work units each).
    let mut calls = 0u64;
    let mut parts = Vec::new();
    let m = Budget::new(0, 20).measure_with_setup(
        7,
        5,
        &mut calls,
        |_| {},
        |c, _| *c += 1,
        |w, _| parts.push(w),
    );
    assert_eq!((m.reps, calls), (7, 8));
    assert_eq!(parts, [5; 7]);
    assert_eq!(m.median_part.0, 1, "{m:?}");
}

/// A stage the host preempted does not make a short rest look long: the
/// rest is judged at the fastest stage's rate. (At the average rate, a
/// first stage of 10^7 cycles made the last 1% of the work, 10^3 cycles,
/// look like 10^5 and cut it off as a stage of its own.)
#[test]
fn a_preempted_stage_does_not_cut_off_a_short_rest() {
    let spin = |n: u64| {
        let t = rdtsc_fenced();
        while rdtsc_fenced() - t < n {}
    };
    let mut parts = Vec::new();
    let mut told = |w, c| parts.push((w, c));
    let mut st = Stages::on(100, 50_000, &mut told);
    spin(10_000_000);
    st.split(30);
    spin(100_000);
    st.split(70);
    spin(100_000);
    st.split(99);
    spin(1_000);
    let cycles = st.finish();
    let works: Vec<u64> = parts.iter().map(|p| p.0).collect();
    assert_eq!(works, [30, 40, 30], "{parts:?}");
    assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), cycles);
}

#[test]
fn a_repetition_alone_in_its_part_is_cut_at_its_stages() {
    // 1 GHz assumed, 1 ms target: each call spins 3 x 10^5 cycles in
    // three stages of 10^5 (a part would hold one call, so the stages
    // are the parts; the shortest stage is 5 x 10^4 cycles). Passed
    // over: a mark that adds no work, one right after a cut, one that
    // would leave too short a rest, and one past the end.
    let spin = || {
        let t = rdtsc_fenced();
        while rdtsc_fenced() - t < 100_000 {}
    };
    let mut f = |calls: &mut u64, st: &mut Stages<'_>| {
        *calls += 1;
        spin();
        st.split(30);
        st.split(30);
        st.split(35);
        spin();
        st.split(70);
        spin();
        st.split(99);
        st.split(500);
    };
    let budget = Budget::new(1_000_000, 1);
    for with_setup in [true, false] {
        let mut parts = Vec::new();
        let mut calls = 0u64;
        let told = |w, c| parts.push((w, c));
        let m = if with_setup {
            budget.measure_with_setup(1, 100, &mut calls, |_| {}, &mut f, told)
        } else {
            budget.measure_parts(1, 100, |st| f(&mut calls, st), told)
        };
        assert!(m.reps >= 1 && calls == m.reps + 1, "{m:?} {calls}");
        // Cuts at 30 and 70: 30, 40, 30 per call, each stage's spin in
        // it. (A top-up after a preempted calibration may add a batch
        // of calls, uncut.)
        let works: Vec<u64> = parts.iter().map(|p| p.0).collect();
        let cut = works.iter().take_while(|&&w| w < 100).count();
        assert!(cut > 0 && cut % 3 == 0, "{parts:?}");
        for call in works[..cut].chunks(3) {
            assert_eq!(call, [30, 40, 30], "{parts:?}");
        }
        assert!(works[cut..].iter().all(|w| w % 100 == 0), "{parts:?}");
        assert_eq!(works.iter().sum::<u64>(), 100 * m.reps);
        assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), m.cycles);
        assert!(parts[..cut].iter().all(|s| s.1 >= 100_000), "{parts:?}");
        // The median part is still whole calls, not a stage: one call,
        // or the top-up's batch when that part has the median rate (a
        // calibration slowed 3x or more leaves one part and a top-up of
        // two calls, and the median of two parts may be either).
        let (reps, cycles) = m.median_part;
        assert!(reps >= 1 && cycles >= 300_000 * reps, "{m:?}");
        assert!(reps == 1 || cut < works.len(), "{m:?} {parts:?}");
    }

    // Several calls a part: the marks do nothing, each part is whole
    // calls (the frequency unknown: 25 fixed calls in 10 parts).
    let mut parts = Vec::new();
    let mut calls = 0u64;
    let m = Budget::new(0, 20).measure_with_setup(
        25,
        100,
        &mut calls,
        |_| {},
        |c, st| {
            *c += 1;
            st.split(50);
        },
        |w, c| parts.push((w, c)),
    );
    let works: Vec<u64> = parts.iter().map(|p| p.0).collect();
    assert_eq!(works, [300, 300, 300, 300, 300, 200, 200, 200, 200, 200]);
    assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), m.cycles);
}

#[test]
fn a_burst_in_one_part_moves_the_totals_not_the_median_part() {
    // PARTS parts of 80 repetitions at 10^4 cycles each; a preempted
    // vCPU adds 4 * 10^6 cycles to the fourth.
    let mut s = Samples::new();
    for i in 0..PARTS {
        let burst = if i == 3 { 4_000_000 } else { 0 };
        s.push(80, 800_000 + burst);
    }
    let m = s.finish();
    assert_eq!(
        (m.reps, m.cycles),
        (80 * PARTS, 800_000 * PARTS + 4_000_000)
    );
    assert_eq!(m.median_part, (80, 800_000));
}

#[test]
fn parts_share_the_repetitions_and_samples_past_the_last_slot_join_it() {
    assert_eq!(
        core::array::from_fn(|i| part_reps(7, 5, i as u64)),
        [2, 2, 1, 1, 1]
    );
    assert_eq!((0..3).map(|i| part_reps(3, 3, i)).sum::<u64>(), 3);
    let mut s = Samples::new();
    for _ in 0..MAX_SAMPLES {
        s.push(10, 100);
    }
    // Two slow top-ups: into the last slot, which becomes the slowest.
    s.push(10, 1000);
    s.push(10, 1000);
    let n = MAX_SAMPLES as u64;
    assert_eq!(
        (s.len, s.reps, s.cycles),
        (MAX_SAMPLES, 10 * n + 20, 100 * n + 2000)
    );
    assert_eq!(s.parts[MAX_SAMPLES - 1], (30, 2100));
    assert_eq!(s.finish().median_part, (10, 100));
}
