//! The LU factorisation and solve: blocked, right-looking, recursive
//! panels, the trailing updates through the DGEMM kernels (see the
//! [`super`] module documentation). Raw column-major pointers inside, slice
//! checks at the two public entries.

use super::{check_square, fabs, LuError, LEAF, NB};
use crate::workloads::gemm::{Dgemm, PACK_LEN};

/// Factor `P A = L U` in place: `A` is `n x n` with leading dimension
/// `lda`; on return its strict lower triangle holds `L` (unit diagonal
/// implied) and its upper triangle `U`. Row `i` was swapped with row
/// `ipiv[i] >= i` at step `i`. `pack` is DGEMM scratch of [`PACK_LEN`].
/// `after_panel(k)` is called after each panel step but the last, `k`
/// being the columns factored so far (a multiple of [`NB`]): where a timed
/// repetition can be cut into stages
/// ([`crate::workloads::timing::Stages`]).
pub fn lu_factor(
    d: &Dgemm,
    n: usize,
    a: &mut [f64],
    lda: usize,
    ipiv: &mut [usize],
    pack: &mut [f64],
    after_panel: &mut dyn FnMut(usize),
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
            after_panel,
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
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe { a.add(i + j * lda) }
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
    after_panel: &mut dyn FnMut(usize),
) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
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
                    &mut |_| {},
                );
            }
            k += nb;
            if k < n {
                after_panel(k);
            }
        }
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
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
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
            &mut |_| {},
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
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
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
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
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
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
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
            &mut |_| {},
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
