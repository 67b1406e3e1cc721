use super::crossover::{crossovers, Policy, SizeSet, MEMCPY_OVERLAP_MAX};
use super::*;
use crate::bench::std::vec::Vec;
use crate::bench::test_scratch;

fn feat() -> CpuFeatures {
    CpuFeatures::detect()
}

/// Every usable method copies exactly its bytes, at every size from 16 B
/// to 64 KiB and with a stride, and touches nothing outside.
#[test]
fn every_method_copies_exactly() {
    let f = feat();
    for m in Method::ALL.into_iter().filter(|m| m.usable(&f)) {
        for len in [
            16usize, 32, 48, 64, 80, 112, 128, 144, 240, 256, 272, 1024, 4096, 65536,
        ] {
            let stride = len.next_multiple_of(64) + 64;
            let reps = 3u64;
            let total = stride * reps as usize + 64;
            let mut src = test_scratch(total);
            let mut dst = test_scratch(total);
            let (s, _) = carve(&mut src, total).unwrap();
            for (i, b) in s.iter_mut().enumerate() {
                *b = (i * 7 + 3) as u8;
            }
            let (d, _) = carve(&mut dst, total).unwrap();
            d.fill(0xee);
            // SAFETY: usable method, 64-aligned buffers of `total` bytes,
            // len a multiple of 16, stride a multiple of 64.
            unsafe { m.run(d.as_mut_ptr(), s.as_ptr(), len, reps, stride) };
            for k in 0..reps as usize {
                let at = k * stride;
                assert_eq!(
                    &d[at..at + len],
                    &s[at..at + len],
                    "{} len {len} copy {k}",
                    m.name()
                );
                assert!(
                    d[at + len..at + stride].iter().all(|&b| b == 0xee),
                    "{} len {len} overran",
                    m.name()
                );
            }
        }
    }
}

/// The sweep fills exactly the cells the scratch and the CPU allow.
#[test]
fn sweep_fills_what_fits() {
    let f = feat();
    let mut scratch = test_scratch(2 * (1 << 20) + 4096);
    let mut r = CopyReport::EMPTY;
    // SAFETY: `f` is this CPU's.
    unsafe { sweep(&f, 256 << 10, &mut scratch, &mut r) };
    assert_eq!(r.valid, 1);
    assert_eq!(r.cold_region, 1 << 20);
    for m in Method::ALL {
        let row = &r.hot[m as usize];
        if !m.usable(&f) {
            assert_eq!(r.methods & (1 << m as u32), 0);
            assert!(row.iter().all(|&c| c == 0.0));
            continue;
        }
        for (i, &hot) in row.iter().enumerate() {
            let size = CopyReport::size(i);
            assert_eq!(hot > 0.0, size <= 1 << 20, "{} hot {size}", m.name());
            let cold = r.cold[m as usize][i];
            assert_eq!(cold > 0.0, size <= 512 << 10, "{} cold {size}", m.name());
        }
    }
}

#[test]
fn region_is_the_largest_power_of_two_that_fits() {
    assert_eq!(region_for(0), 0);
    assert_eq!(region_for(2 * 4096 + 64 + DST_SKEW), 4096);
    assert_eq!(region_for(2 * 4096 + 64 + DST_SKEW - 1), 2048);
    assert_eq!(region_for(usize::MAX / 2), MAX_REGION);
    assert_eq!(region_for(full_scratch_bytes()), MAX_REGION);
    assert!(cold_fits(64 << 20, 128 << 20, 32 << 20));
    assert!(!cold_fits(64 << 20, 128 << 20, 96 << 20));
    assert!(!cold_fits(1 << 20, 1 << 20, 0));
}

/// The borrowing pairs run at CPL3 for every live state the host enables,
/// and for XSAVEC only when CPUID 0xD.1 has it.
#[test]
fn borrow_measures_the_enabled_states() {
    let env = Env::host();
    let mut scratch = test_scratch(borrow_scratch_bytes(&env));
    let mut r = CopyReport::EMPTY;
    // SAFETY: the host's XCR0 is the one in force.
    unsafe { borrow(&env, &mut scratch, &mut r) };
    for live in Live::ALL {
        let on = env.xcr0.contains_all(live.mask());
        assert_eq!(
            r.borrow_cycles[0][live as usize] > 0.0,
            on,
            "{}",
            live.name()
        );
        assert_eq!(
            r.borrow_cycles[1][live as usize] > 0.0,
            on && env.info.has_xsavec(),
            "{} xsavec",
            live.name()
        );
    }
}

/// A made-up table with known answers: SSE2 wins up to 1 KiB, `rep movsb`
/// from 4 KiB; non-temporal SSE2 wins cold from 1 MiB; a 100-cycle pair.
fn table() -> CopyReport {
    let mut r = CopyReport::EMPTY;
    r.valid = 1;
    r.llc_bytes = 4 << 20;
    r.methods =
        1 << Method::RepMovsb as u32 | 1 << Method::Sse2 as u32 | 1 << Method::NtSse2 as u32;
    for i in 0..COPY_SIZES {
        let size = CopyReport::size(i) as f64;
        r.hot[Method::RepMovsb as usize][i] = 30.0 + size / 64.0;
        r.hot[Method::Sse2 as usize][i] = 2.0 + size / 40.0;
        r.cold[Method::RepMovsb as usize][i] = 60.0 + size / 16.0;
        r.cold[Method::Sse2 as usize][i] = 10.0 + size / 15.0;
        r.cold[Method::NtSse2 as usize][i] = if size >= (1 << 20) as f64 {
            size / 20.0
        } else {
            200.0 + size / 10.0
        };
    }
    r.borrow_cycles[0] = [100.0, 0.0, 0.0];
    r
}

#[test]
fn crossovers_of_a_known_table() {
    let r = table();
    let c = crossovers(&r);
    // hot: 2 + s/40 < 30 + s/64  <=>  s < 2986.7: 16 B .. 1 KiB
    let sse_hot = c.beats_movsb_hot[Method::Sse2 as usize];
    assert_eq!(sse_hot.bounds(), Some((16, 1024)));
    assert_eq!(sse_hot.runs().collect::<Vec<_>>(), [(16, 1024)]);
    assert_eq!(c.beats_movsb_hot[Method::Avx2 as usize], SizeSet::EMPTY);
    assert_eq!(c.beats_movsb_hot[Method::Avx2 as usize].bounds(), None);
    // cold: 10 + s/15 < 60 + s/16  <=>  s < 12000: 16 B .. 4 KiB
    assert_eq!(
        c.beats_movsb_cold[Method::Sse2 as usize].bounds(),
        Some((16, 4096))
    );
    assert_eq!(c.beats_cached_cold[Method::NtSse2 as usize], Some(1 << 20));
    // borrowing with xmm live, cold: the cached loop never pays
    // (10 + s/15 + 100 < 60 + s/16 never holds), the non-temporal one from
    // 1 MiB on (s/20 + 100 < 60 + s/16); hot: 102 + s/40 < 30 + s/64 never.
    assert_eq!(c.borrow_pays_cold[0], Some(1 << 20));
    assert_eq!(c.borrow_pays_hot[0], None);
    // Not measured: no crossover.
    assert_eq!(c.borrow_pays_cold[2], None);
}

/// A set's runs are its stretches of consecutive grid sizes, in order.
#[test]
fn size_set_runs() {
    assert_eq!(SizeSet::EMPTY.runs().count(), 0);
    // 16 B, 256 B..1 KiB, 64 MiB (the last index).
    let s = SizeSet(1 | 0b1100 | 1 << (COPY_SIZES - 1));
    assert_eq!(
        s.runs().collect::<Vec<_>>(),
        [(16, 16), (256, 1024), (64 << 20, 64 << 20)]
    );
    assert_eq!(s.bounds(), Some((16, 64 << 20)));
    assert!(s.contains(2) && !s.contains(1) && !s.contains(COPY_SIZES));
    let all = SizeSet((1 << COPY_SIZES) - 1);
    assert_eq!(all.runs().collect::<Vec<_>>(), [(16, 64 << 20)]);
}

/// `memcpy_steps` follows the assembly's order of tests: non-temporal
/// first, then `rep movsb`, else SSE2; thresholds it never reaches are not
/// steps.
#[test]
fn policy_steps() {
    let first = MEMCPY_OVERLAP_MAX + 1;
    let p = |rep, nt| Policy {
        memcpy_rep_min: rep,
        memcpy_nt_min: nt,
        memset_rep_min: rep,
    };
    let steps = |p: Policy| p.memcpy_steps().into_iter().flatten().collect::<Vec<_>>();
    assert_eq!(
        steps(Policy::DEFAULT),
        [(first, Method::Sse2), (257, Method::RepMovsb)]
    );
    assert_eq!(
        steps(p(64 << 20, 32 << 20)),
        [(first, Method::Sse2), (32 << 20, Method::NtSse2)]
    );
    assert_eq!(
        steps(p(4096, 32 << 20)),
        [
            (first, Method::Sse2),
            (4096, Method::RepMovsb),
            (32 << 20, Method::NtSse2)
        ]
    );
    assert_eq!(steps(p(17, u64::MAX)), [(first, Method::RepMovsb)]);
    assert_eq!(steps(p(u64::MAX, u64::MAX)), [(first, Method::Sse2)]);
    let q = p(64 << 20, 32 << 20);
    assert_eq!(q.memcpy_method(64 << 20), Method::NtSse2);
    assert_eq!(q.memcpy_method((32 << 20) - 1), Method::Sse2);
}

#[test]
fn policy_of_a_known_table() {
    let p = Policy::from_table(&table()).unwrap();
    assert_eq!(p.memcpy_rep_min, 4096);
    assert_eq!(p.memset_rep_min, 4096);
    // NT from 1 MiB on, but not below the 4 MiB cache.
    assert_eq!(p.memcpy_nt_min, 4 << 20);
    let mut r = table();
    r.llc_bytes = 0;
    assert_eq!(Policy::from_table(&r).unwrap().memcpy_nt_min, u64::MAX);
    r.methods = 1;
    assert_eq!(Policy::from_table(&r), None);
    assert_eq!(Policy::from_table(&CopyReport::EMPTY), None);
}
