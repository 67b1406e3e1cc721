//! The benchmark's input and its verdict: HPL's random system and the
//! scaled residual that judges a solution.

use super::{check_square, fabs};
use crate::workloads::rng::SplitMix64;

/// Fill `A` (`n x n`, leading dimension `lda`) and `b` (`n`) with uniform
/// values in [-0.5, 0.5) from `seed`, column by column, as HPL does.
pub fn random_system(seed: u64, n: usize, a: &mut [f64], lda: usize, b: &mut [f64]) {
    let mut r = SplitMix64::new(seed);
    for j in 0..n {
        for v in &mut a[j * lda..j * lda + n] {
            *v = r.next_f64() - 0.5;
        }
    }
    for v in &mut b[..n] {
        *v = r.next_f64() - 0.5;
    }
}

/// `||A x - b||_inf / (||A||_inf ||x||_inf n eps)`: the "norm. resid" of
/// the LINPACK benchmark. A backward-stable solve keeps it O(1); the check
/// passes below [`super::RESIDUAL_THRESHOLD`]. `work` needs `2n` elements.
/// Returns infinity for mismatched sizes (never a pass).
pub fn scaled_residual(
    n: usize,
    a: &[f64],
    lda: usize,
    x: &[f64],
    b: &[f64],
    work: &mut [f64],
) -> f64 {
    if n == 0 {
        return 0.0;
    }
    if check_square(n, a.len(), lda).is_err() || x.len() < n || b.len() < n || work.len() < 2 * n {
        return f64::INFINITY;
    }
    let (r, rowsum) = work.split_at_mut(n);
    for i in 0..n {
        r[i] = -b[i];
        rowsum[i] = 0.0;
    }
    for j in 0..n {
        let col = &a[j * lda..j * lda + n];
        let xj = x[j];
        for ((ri, si), &aij) in r.iter_mut().zip(rowsum[..n].iter_mut()).zip(col) {
            *ri += aij * xj;
            *si += fabs(aij);
        }
    }
    let norm = |v: &[f64]| {
        v.iter()
            .fold(0.0f64, |m, &e| if fabs(e) > m { fabs(e) } else { m })
    };
    let resid = norm(r);
    let anorm = norm(&rowsum[..n]);
    let xnorm = norm(&x[..n]);
    let denom = anorm * xnorm * n as f64 * f64::EPSILON;
    if resid.is_nan() || denom.is_nan() {
        return f64::INFINITY;
    }
    if denom == 0.0 {
        return if resid == 0.0 { 0.0 } else { f64::INFINITY };
    }
    resid / denom
}
