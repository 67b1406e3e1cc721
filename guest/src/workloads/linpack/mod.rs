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

mod check;
mod lu;
#[cfg(test)]
mod tests;

pub use check::{random_system, scaled_residual};
pub use lu::{lu_factor, lu_solve};

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
    Singular {
        /// The column of the zero pivot.
        col: usize,
    },
    /// `lda` smaller than `n`, or a slice too short for `n`.
    BadDimensions,
    /// A pivot index outside `i..n` at position `i`.
    BadPivot {
        /// Position `i` in `ipiv`.
        index: usize,
        /// The index found there.
        value: usize,
    },
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

/// Linpack flop count: `2/3 n^3 + 2 n^2` (factorisation plus solve).
pub fn flops(n: usize) -> u64 {
    let n = n as u64;
    2 * n * n * n / 3 + 2 * n * n
}

/// The share of [`flops`] done once `k` of the `n` columns are factored:
/// `2/3 (n^3 - (n-k)^3)`, the nominal count less what the trailing
/// `(n-k) x (n-k)` factorisation and the solve still need. Nondecreasing
/// in `k`, and below `flops(n)` for every `k <= n`, so the stages of one
/// factorisation ([`lu_factor`]'s panels) get the same shares on every
/// machine that runs it.
pub fn flops_done(n: usize, k: usize) -> u64 {
    let (n, r) = (n as u64, n.saturating_sub(k) as u64);
    (2 * n * n * n - 2 * r * r * r) / 3
}
