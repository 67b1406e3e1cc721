use super::*;
use crate::workloads::rng::SplitMix64;
use crate::workloads::std::{vec, vec::Vec};
use crate::workloads::test_support::host_variants;

fn random(len: usize, seed: u64) -> Vec<f64> {
    let mut r = SplitMix64::new(seed);
    (0..len).map(|_| r.next_f64() - 0.5).collect()
}

/// Checks `variant` against the reference on an m x n x k problem with
/// padded leading dimensions; returns the largest error relative to
/// `k * eps * sum |a||b|` (the classical bound is below 1).
#[allow(clippy::too_many_arguments)]
fn check(d: &Dgemm, m: usize, n: usize, k: usize, alpha: f64, pad: usize, pack: &mut [f64]) -> f64 {
    let (lda, ldb, ldc) = (m + pad, k + pad, m + 2 * pad);
    let a = random(lda * k.max(1), 1 + m as u64);
    let b = random(ldb * n.max(1), 2 + n as u64);
    let c0 = random(ldc * n.max(1), 3 + k as u64);
    let mut c = c0.clone();
    d.gemm(
        m,
        n,
        k,
        alpha,
        &a,
        lda,
        &b,
        ldb,
        &mut c,
        ldc,
        pack,
        &mut |_| {},
    )
    .unwrap();
    let mut r = c0.clone();
    dgemm_reference(m, n, k, alpha, &a, lda, &b, ldb, &mut r, ldc);
    let mut worst = 0.0f64;
    for j in 0..n {
        for i in 0..ldc {
            let idx = i + j * ldc;
            if i >= m {
                assert_eq!(
                    c[idx].to_bits(),
                    c0[idx].to_bits(),
                    "padding row {i} written"
                );
                continue;
            }
            let mut mag = c0[idx].abs();
            for p in 0..k {
                mag += (alpha * a[i + p * lda] * b[p + j * ldb]).abs();
            }
            let err = (c[idx] - r[idx]).abs() / ((k as f64 + 2.0) * f64::EPSILON * mag);
            worst = worst.max(err);
        }
    }
    worst
}

fn available() -> Vec<Dgemm> {
    host_variants(&GemmVariant::ALL, Dgemm::new)
}

#[test]
fn odd_sizes_match_reference() {
    let mut pack = vec![0.0; PACK_LEN];
    let dims = [1, 7, 33, 100, 257];
    let ds = available();
    assert!(!ds.is_empty());
    for d in &ds {
        for &m in &dims {
            for &n in &dims {
                for &k in &[1, 33, 257] {
                    let e = check(d, m, n, k, 1.0, 3, &mut pack);
                    assert!(e < 1.0, "{:?} m={m} n={n} k={k}: error {e}", d.variant());
                }
            }
        }
        for (m, n, k) in [(9, 800, 5), (200, 13, 520), (1, 1, 1000)] {
            let e = check(d, m, n, k, -1.5, 0, &mut pack);
            assert!(e < 1.0, "{:?} m={m} n={n} k={k}: error {e}", d.variant());
        }
    }
}

#[test]
fn empty_dimensions_do_nothing() {
    let mut pack = vec![0.0; PACK_LEN];
    for d in available() {
        let mut c = vec![1.0; 4];
        d.gemm(
            2,
            2,
            0,
            1.0,
            &[],
            2,
            &[],
            1,
            &mut c,
            2,
            &mut pack,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(c, [1.0; 4]);
        d.gemm(
            0,
            2,
            3,
            1.0,
            &[],
            1,
            &[0.0; 6],
            3,
            &mut [],
            1,
            &mut pack,
            &mut |_| {},
        )
        .unwrap();
    }
}

#[test]
fn bad_arguments_are_errors() {
    let d = Dgemm::new(GemmVariant::Sse2, &CpuFeatures::detect()).unwrap();
    let mut pack = vec![0.0; PACK_LEN];
    let a = [0.0; 6];
    let mut c = [0.0; 4];
    // m x 2 x k, A's and B's leading dimensions, `len` elements of pack.
    let mut gemm = |m, k, lda, ldb, len: usize| {
        let pack = &mut pack[..len];
        d.gemm(m, 2, k, 1.0, &a, lda, &a, ldb, &mut c, m, pack, &mut |_| {})
    };
    assert_eq!(
        gemm(3, 2, 2, 2, PACK_LEN),
        Err(GemmError::LeadingDimension {
            matrix: 'A',
            ld: 2,
            rows: 3
        })
    );
    assert_eq!(
        gemm(2, 4, 2, 4, PACK_LEN),
        Err(GemmError::TooShort {
            matrix: 'A',
            len: 6,
            need: 8
        })
    );
    assert_eq!(
        gemm(2, 2, 2, 2, 10),
        Err(GemmError::PackTooShort { len: 10 })
    );
}

#[test]
fn gating_refuses_unusable_variants() {
    let f = CpuFeatures::from_cpuid(u32::MAX, u32::MAX, u32::MAX, u32::MAX, 0x3);
    assert_eq!(
        Dgemm::new(GemmVariant::Avx2Fma, &f).unwrap_err().as_str(),
        "needs AVX: XCR0 0x3 lacks AVX state"
    );
    assert!(Dgemm::new(GemmVariant::Sse2, &f).is_ok());
}

#[test]
fn block_marks_count_the_flops_done_between_blocks() {
    // n = 1000 is two column blocks of 504 and 496 (for 6- and 8-wide
    // panels alike), k = 300 two slices of 256 and 44: marks after three
    // of the four blocks, none after the last.
    let (m, n, k) = (50, 1000, 300);
    let a = random(m * k, 1);
    let b = random(k * n, 2);
    let mut pack = vec![0.0; PACK_LEN];
    let flops = |cols: usize, depth: usize| 2 * (m * cols * depth) as u64;
    let want = [
        flops(504, 256),
        flops(504, 300),
        flops(504, 300) + flops(496, 256),
    ];
    for d in available() {
        let mut c = vec![0.0; m * n];
        let mut marks = Vec::new();
        d.gemm(m, n, k, 1.0, &a, m, &b, k, &mut c, m, &mut pack, &mut |f| {
            marks.push(f)
        })
        .unwrap();
        assert_eq!(marks, want, "{:?}", d.variant());
        assert!(want[2] < flops(n, k));
    }
}
