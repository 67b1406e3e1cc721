//! Tests of the Linpack solver: residuals for every DGEMM variant, the
//! factors against `P A`, and the refusals.

use super::*;
use crate::workloads::features::CpuFeatures;
use crate::workloads::gemm::GemmVariant;
use crate::workloads::gemm::{Dgemm, PACK_LEN};
use crate::workloads::std::{vec, vec::Vec};
use crate::workloads::test_support::host_variants;

fn solve(d: &Dgemm, n: usize, lda: usize, seed: u64) -> f64 {
    let mut a = vec![0.0; lda * n];
    let mut b = vec![0.0; n];
    random_system(seed, n, &mut a, lda, &mut b);
    let (a0, b0) = (a.clone(), b.clone());
    let mut ipiv = vec![0usize; n];
    let mut pack = vec![0.0; PACK_LEN];
    lu_factor(d, n, &mut a, lda, &mut ipiv, &mut pack, &mut |_| {}).unwrap();
    for (i, &p) in ipiv.iter().enumerate() {
        assert!(p >= i && p < n);
    }
    lu_solve(n, &a, lda, &ipiv, &mut b).unwrap();
    let mut work = vec![0.0; 2 * n];
    scaled_residual(n, &a0, lda, &b, &b0, &mut work)
}

fn available() -> Vec<Dgemm> {
    host_variants(&GemmVariant::ALL, Dgemm::new)
}

#[test]
fn residual_passes_for_every_variant() {
    for d in available() {
        for (n, lda) in [
            (1, 1),
            (2, 2),
            (15, 17),
            (16, 16),
            (17, 20),
            (100, 100),
            (300, 303),
        ] {
            let r = solve(&d, n, lda, n as u64);
            assert!(
                r < RESIDUAL_THRESHOLD,
                "{:?} n={n}: residual {r}",
                d.variant()
            );
        }
    }
}

#[test]
fn factors_reproduce_pa() {
    // Small exact check: P A == L U element by element.
    let d = Dgemm::new(GemmVariant::Sse2, &CpuFeatures::detect()).unwrap();
    let n = 150;
    let mut a = vec![0.0; n * n];
    let mut b = vec![0.0; n];
    random_system(7, n, &mut a, n, &mut b);
    let mut pa = a.clone();
    let mut ipiv = vec![0; n];
    let mut pack = vec![0.0; PACK_LEN];
    lu_factor(&d, n, &mut a, n, &mut ipiv, &mut pack, &mut |_| {}).unwrap();
    for (i, &p) in ipiv.iter().enumerate() {
        for j in 0..n {
            pa.swap(i + j * n, p + j * n);
        }
    }
    for i in 0..n {
        for j in 0..n {
            let mut s = 0.0;
            for k in 0..=i.min(j) {
                let l = if k == i { 1.0 } else { a[i + k * n] };
                s += l * a[k + j * n];
            }
            assert!(
                (s - pa[i + j * n]).abs() < 1e-12,
                "({i},{j}) {s} vs {}",
                pa[i + j * n]
            );
        }
    }
}

#[test]
fn singular_and_bad_input() {
    let d = Dgemm::new(GemmVariant::Sse2, &CpuFeatures::detect()).unwrap();
    let mut pack = vec![0.0; PACK_LEN];
    // Column 1 is twice column 0: zero pivot in column 1.
    let mut a = vec![1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 0.0, 1.0, 5.0];
    let mut ipiv = vec![0; 3];
    assert_eq!(
        lu_factor(&d, 3, &mut a, 3, &mut ipiv, &mut pack, &mut |_| {}),
        Err(LuError::Singular { col: 1 })
    );
    assert_eq!(
        lu_factor(&d, 3, &mut a, 2, &mut ipiv, &mut pack, &mut |_| {}),
        Err(LuError::BadDimensions)
    );
    let mut b = vec![0.0; 3];
    let lu = vec![1.0; 9];
    assert_eq!(
        lu_solve(3, &lu, 3, &[0, 0, 2], &mut b),
        Err(LuError::BadPivot { index: 1, value: 0 })
    );
    assert_eq!(
        lu_solve(3, &lu, 3, &[0, 7, 2], &mut b),
        Err(LuError::BadPivot { index: 1, value: 7 })
    );
    let mut work = vec![0.0; 6];
    assert_eq!(
        scaled_residual(3, &lu, 3, &b, &b[..2], &mut work),
        f64::INFINITY
    );
}

#[test]
fn residual_detects_a_wrong_answer() {
    let n = 50;
    let mut a = vec![0.0; n * n];
    let mut b = vec![0.0; n];
    random_system(1, n, &mut a, n, &mut b);
    let x = vec![1.0; n];
    let mut work = vec![0.0; 2 * n];
    assert!(scaled_residual(n, &a, n, &x, &b, &mut work) > 1e10);
    assert_eq!(flops(1000), 668_666_666);
}

#[test]
fn panel_marks_fall_between_panels_and_change_nothing() {
    let d = available()[0];
    for (n, marks) in [
        (300usize, &[128usize, 256][..]),
        (256, &[128][..]),
        (100, &[][..]),
    ] {
        let lda = n + 3;
        let mut a = vec![0.0; lda * n];
        let mut b = vec![0.0; n];
        random_system(7, n, &mut a, lda, &mut b);
        let mut a2 = a.clone();
        let (mut ipiv, mut ipiv2) = (vec![0usize; n], vec![0usize; n]);
        let mut pack = vec![0.0; PACK_LEN];
        lu_factor(&d, n, &mut a, lda, &mut ipiv, &mut pack, &mut |_| {}).unwrap();
        let mut seen = Vec::new();
        lu_factor(&d, n, &mut a2, lda, &mut ipiv2, &mut pack, &mut |k| {
            seen.push(k)
        })
        .unwrap();
        assert_eq!(seen, marks, "n={n}");
        assert_eq!(ipiv, ipiv2);
        assert!(a.iter().zip(&a2).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}

#[test]
fn flops_done_shares_the_nominal_count() {
    assert_eq!(flops_done(512, 0), 0);
    // 2/3 (512^3 - 384^3), exactly.
    assert_eq!(flops_done(512, 128), 51_729_749);
    let n = 1000;
    let done: Vec<u64> = (0..=n)
        .step_by(NB)
        .chain([n])
        .map(|k| flops_done(n, k))
        .collect();
    assert!(done.windows(2).all(|w| w[0] <= w[1]), "{done:?}");
    // The factorisation's nominal count; the solve's 2 n^2 is left over.
    assert_eq!(flops_done(n, n), 2 * 1000u64.pow(3) / 3);
    assert_eq!(flops(n) - flops_done(n, n), 2 * 1000 * 1000);
    assert_eq!(flops_done(n, n + 5), flops_done(n, n));
}
