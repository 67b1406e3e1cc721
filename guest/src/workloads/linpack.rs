//! Linpack: solve `A x = b` for a random dense `A` by LU factorisation with
//! partial pivoting, as the MKL/HPL benchmarks do, and judge the answer by
//! its scaled residual.
//!
//! The factorisation is blocked and right-looking: for each panel of
//! [`NB`] columns, factor the panel, apply its row swaps to the rest of the
//! matrix, solve for the block row of U (`U12 = L11^-1 A12`) and update the
//! trailing matrix `A22 -= L21 U12` with the DGEMM kernels, which is where
//! nearly all of the `2/3 n^3` flops go. Panels are factored recursively
//! (split the columns in half, factor the left half, update and factor the
//! right half) so that even panel work is mostly DGEMM, and the triangular
//! solves recurse the same way; only [`LEAF`]-wide slivers run scalar code.
//!
//! All matrices are column-major with a leading dimension, as in LAPACK.

use super::gemm::{Dgemm, PACK_LEN};
use super::rng::SplitMix64;

/// Panel width of the blocked factorisation (the `k` of the trailing DGEMM).
pub const NB: usize = 128;
/// Column count below which panels and triangular solves run unblocked.
pub const LEAF: usize = 16;

/// Pass threshold for [`scaled_residual`]; HPL uses the same value.
pub const RESIDUAL_THRESHOLD: f64 = 16.0;

/// Why a factorisation or solve could not be done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LuError {
    /// An exact zero pivot at this column: the matrix is singular (the
    /// factorisation was completed, as LAPACK's `info > 0`).
    Singular { col: usize },
    /// `lda` smaller than `n`, or a slice too short for `n`.
    BadDimensions,
    /// A pivot index outside `i..n` at position `i`.
    BadPivot { index: usize, value: usize },
}

impl core::fmt::Display for LuError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            LuError::Singular { col } => {
                write!(f, "matrix is singular: zero pivot in column {col}")
            }
            LuError::BadDimensions => {
                write!(f, "leading dimension or slice length too small for n")
            }
            LuError::BadPivot { index, value } => {
                write!(f, "pivot {index} is {value}, outside {index}..n")
            }
        }
    }
}

/// `|x|` without std.
#[inline(always)]
pub(crate) fn fabs(x: f64) -> f64 {
    f64::from_bits(x.to_bits() & !(1u64 << 63))
}

fn check_square(n: usize, a_len: usize, lda: usize) -> Result<(), LuError> {
    let need = if n == 0 { 0 } else { lda * (n - 1) + n };
    if lda < n.max(1) || a_len < need {
        return Err(LuError::BadDimensions);
    }
    Ok(())
}

/// Factor `P A = L U` in place: `A` is `n x n` with leading dimension
/// `lda`; on return its strict lower triangle holds `L` (unit diagonal
/// implied) and its upper triangle `U`. Row `i` was swapped with row
/// `ipiv[i] >= i` at step `i`. `pack` is DGEMM scratch of [`PACK_LEN`].
pub fn lu_factor(
    d: &Dgemm,
    n: usize,
    a: &mut [f64],
    lda: usize,
    ipiv: &mut [usize],
    pack: &mut [f64],
) -> Result<(), LuError> {
    check_square(n, a.len(), lda)?;
    if ipiv.len() < n || pack.len() < PACK_LEN {
        return Err(LuError::BadDimensions);
    }
    let mut singular = None;
    // SAFETY: the checks above keep every access of the n x n matrix
    // inside `a`, and `ipiv` holds n entries.
    unsafe {
        blocked_lu(
            d,
            n,
            a.as_mut_ptr(),
            lda,
            ipiv.as_mut_ptr(),
            pack,
            &mut singular,
        )
    };
    match singular {
        Some(col) => Err(LuError::Singular { col }),
        None => Ok(()),
    }
}

/// Element (i, j) of a column-major matrix.
#[inline(always)]
unsafe fn at(a: *mut f64, lda: usize, i: usize, j: usize) -> *mut f64 {
    a.add(i + j * lda)
}

#[allow(clippy::too_many_arguments)]
unsafe fn blocked_lu(
    d: &Dgemm,
    n: usize,
    a: *mut f64,
    lda: usize,
    ipiv: *mut usize,
    pack: &mut [f64],
    singular: &mut Option<usize>,
) {
    let mut k = 0;
    while k < n {
        let nb = NB.min(n - k);
        let m = n - k;
        panel(
            d,
            m,
            nb,
            at(a, lda, k, k),
            lda,
            ipiv.add(k),
            pack,
            singular,
            k,
        );
        // Pivots relative to row k -> absolute; apply them to the columns
        // left and right of the panel.
        for i in k..k + nb {
            *ipiv.add(i) += k;
        }
        swap_rows(k, a, lda, ipiv, k, k + nb);
        let right = n - k - nb;
        if right > 0 {
            swap_rows(right, at(a, lda, 0, k + nb), lda, ipiv, k, k + nb);
            trsm_lower_unit(
                d,
                nb,
                right,
                at(a, lda, k, k),
                lda,
                at(a, lda, k, k + nb),
                lda,
                pack,
            );
            d.gemm_raw(
                right,
                right,
                nb,
                -1.0,
                at(a, lda, k + nb, k),
                lda,
                at(a, lda, k, k + nb),
                lda,
                at(a, lda, k + nb, k + nb),
                lda,
                pack,
            );
        }
        k += nb;
    }
}

/// Recursive LU of an `m x n` panel (`m >= n`), swaps applied across its
/// own `n` columns only; `ipiv` relative to the panel's first row;
/// `row0` is the panel's row in the whole matrix (for error reports).
#[allow(clippy::too_many_arguments)]
unsafe fn panel(
    d: &Dgemm,
    m: usize,
    n: usize,
    a: *mut f64,
    lda: usize,
    ipiv: *mut usize,
    pack: &mut [f64],
    singular: &mut Option<usize>,
    row0: usize,
) {
    if n <= LEAF {
        unblocked(m, n, a, lda, ipiv, singular, row0);
        return;
    }
    let n1 = n / 2;
    let n2 = n - n1;
    panel(d, m, n1, a, lda, ipiv, pack, singular, row0);
    swap_rows(n2, at(a, lda, 0, n1), lda, ipiv, 0, n1);
    trsm_lower_unit(d, n1, n2, a, lda, at(a, lda, 0, n1), lda, pack);
    d.gemm_raw(
        m - n1,
        n2,
        n1,
        -1.0,
        at(a, lda, n1, 0),
        lda,
        at(a, lda, 0, n1),
        lda,
        at(a, lda, n1, n1),
        lda,
        pack,
    );
    panel(
        d,
        m - n1,
        n2,
        at(a, lda, n1, n1),
        lda,
        ipiv.add(n1),
        pack,
        singular,
        row0 + n1,
    );
    for i in n1..n {
        *ipiv.add(i) += n1;
    }
    swap_rows(n1, a, lda, ipiv, n1, n);
}

/// Right-looking unblocked LU (LAPACK's dgetf2) of an `m x n` sliver.
unsafe fn unblocked(
    m: usize,
    n: usize,
    a: *mut f64,
    lda: usize,
    ipiv: *mut usize,
    singular: &mut Option<usize>,
    row0: usize,
) {
    for j in 0..n.min(m) {
        let col = at(a, lda, 0, j);
        let mut p = j;
        let mut best = fabs(*col.add(j));
        for i in j + 1..m {
            let v = fabs(*col.add(i));
            if v > best {
                best = v;
                p = i;
            }
        }
        *ipiv.add(j) = p;
        if best != 0.0 {
            if p != j {
                for c in 0..n {
                    core::ptr::swap(at(a, lda, j, c), at(a, lda, p, c));
                }
            }
            let r = 1.0 / *col.add(j);
            for i in j + 1..m {
                *col.add(i) *= r;
            }
        } else if singular.is_none() {
            *singular = Some(row0 + j);
        }
        for c in j + 1..n {
            let dst = at(a, lda, 0, c);
            let t = *dst.add(j);
            if t != 0.0 {
                for i in j + 1..m {
                    *dst.add(i) -= *col.add(i) * t;
                }
            }
        }
    }
}

/// Apply the swaps `ipiv[k1..k2]` (row `i` <-> row `ipiv[i]`, in order) to
/// `ncols` columns starting at `a` (LAPACK's dlaswp).
unsafe fn swap_rows(
    ncols: usize,
    a: *mut f64,
    lda: usize,
    ipiv: *const usize,
    k1: usize,
    k2: usize,
) {
    for c in 0..ncols {
        let col = at(a, lda, 0, c);
        for i in k1..k2 {
            let p = *ipiv.add(i);
            if p != i {
                core::ptr::swap(col.add(i), col.add(p));
            }
        }
    }
}

/// `B = L^-1 B` for unit lower-triangular `L` (`m x m`) and `B` (`m x n`),
/// recursively so that most flops are DGEMM.
#[allow(clippy::too_many_arguments)]
unsafe fn trsm_lower_unit(
    d: &Dgemm,
    m: usize,
    n: usize,
    l: *mut f64,
    ldl: usize,
    b: *mut f64,
    ldb: usize,
    pack: &mut [f64],
) {
    if m <= LEAF {
        for j in 0..n {
            let bj = at(b, ldb, 0, j);
            for k in 0..m {
                let t = *bj.add(k);
                if t != 0.0 {
                    let lk = at(l, ldl, 0, k);
                    for i in k + 1..m {
                        *bj.add(i) -= *lk.add(i) * t;
                    }
                }
            }
        }
        return;
    }
    let m1 = m / 2;
    trsm_lower_unit(d, m1, n, l, ldl, b, ldb, pack);
    d.gemm_raw(
        m - m1,
        n,
        m1,
        -1.0,
        at(l, ldl, m1, 0),
        ldl,
        b,
        ldb,
        at(b, ldb, m1, 0),
        ldb,
        pack,
    );
    trsm_lower_unit(
        d,
        m - m1,
        n,
        at(l, ldl, m1, m1),
        ldl,
        at(b, ldb, m1, 0),
        ldb,
        pack,
    );
}

/// Solve `A x = b` with the factors from [`lu_factor`]; `b` becomes `x`.
pub fn lu_solve(
    n: usize,
    lu: &[f64],
    lda: usize,
    ipiv: &[usize],
    b: &mut [f64],
) -> Result<(), LuError> {
    check_square(n, lu.len(), lda)?;
    if ipiv.len() < n || b.len() < n {
        return Err(LuError::BadDimensions);
    }
    for (i, &p) in ipiv[..n].iter().enumerate() {
        if p < i || p >= n {
            return Err(LuError::BadPivot { index: i, value: p });
        }
        b.swap(i, p);
    }
    // L y = P b (unit diagonal), column by column.
    for j in 0..n {
        let t = b[j];
        if t != 0.0 {
            let col = &lu[j * lda..j * lda + n];
            for (bi, &l) in b[j + 1..n].iter_mut().zip(&col[j + 1..]) {
                *bi -= l * t;
            }
        }
    }
    // U x = y.
    for j in (0..n).rev() {
        let col = &lu[j * lda..j * lda + n];
        b[j] /= col[j];
        let t = b[j];
        if t != 0.0 {
            for (bi, &u) in b[..j].iter_mut().zip(&col[..j]) {
                *bi -= u * t;
            }
        }
    }
    Ok(())
}

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
/// passes below [`RESIDUAL_THRESHOLD`]. `work` needs `2n` elements.
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

/// Linpack flop count: `2/3 n^3 + 2 n^2` (factorisation plus solve).
pub fn flops(n: usize) -> u64 {
    let n = n as u64;
    2 * n * n * n / 3 + 2 * n * n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::features::CpuFeatures;
    use crate::workloads::gemm::GemmVariant;
    use crate::workloads::std::{vec, vec::Vec};

    fn solve(d: &Dgemm, n: usize, lda: usize, seed: u64) -> f64 {
        let mut a = vec![0.0; lda * n];
        let mut b = vec![0.0; n];
        random_system(seed, n, &mut a, lda, &mut b);
        let (a0, b0) = (a.clone(), b.clone());
        let mut ipiv = vec![0usize; n];
        let mut pack = vec![0.0; PACK_LEN];
        lu_factor(d, n, &mut a, lda, &mut ipiv, &mut pack).unwrap();
        for (i, &p) in ipiv.iter().enumerate() {
            assert!(p >= i && p < n);
        }
        lu_solve(n, &a, lda, &ipiv, &mut b).unwrap();
        let mut work = vec![0.0; 2 * n];
        scaled_residual(n, &a0, lda, &b, &b0, &mut work)
    }

    fn available() -> Vec<Dgemm> {
        let f = CpuFeatures::detect();
        GemmVariant::ALL
            .iter()
            .filter_map(|&v| Dgemm::new(v, &f).ok())
            .collect()
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
        lu_factor(&d, n, &mut a, n, &mut ipiv, &mut pack).unwrap();
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
            lu_factor(&d, 3, &mut a, 3, &mut ipiv, &mut pack),
            Err(LuError::Singular { col: 1 })
        );
        assert_eq!(
            lu_factor(&d, 3, &mut a, 2, &mut ipiv, &mut pack),
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
}
