//! DGEMM by the definition: the slow, obviously right reference the
//! blocked kernels are checked against (and the dot product Linpack's
//! residual uses).

/// `C += alpha * A * B` by the definition, one dot product per element:
/// the reference the blocked kernels are checked against.
#[allow(clippy::too_many_arguments)]
pub fn dgemm_reference(
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    a: &[f64],
    lda: usize,
    b: &[f64],
    ldb: usize,
    c: &mut [f64],
    ldc: usize,
) {
    for j in 0..n {
        for i in 0..m {
            c[i + j * ldc] += alpha * dot(k, &a[i..], lda, &b[j * ldb..], 1);
        }
    }
}

/// `sum_p x[p*incx] * y[p*incy]` for `p < n`.
pub fn dot(n: usize, x: &[f64], incx: usize, y: &[f64], incy: usize) -> f64 {
    let mut s = 0.0;
    for p in 0..n {
        s += x[p * incx] * y[p * incy];
    }
    s
}
