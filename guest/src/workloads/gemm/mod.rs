//! Double-precision matrix multiply, `C += alpha * A * B` on column-major
//! matrices, in the GotoBLAS/BLIS structure:
//!
//! - the `jc` loop cuts B and C into column blocks of `nc` (B panel in L3),
//! - the `pc` loop cuts the inner dimension into `KC` slices; each B slice
//!   (`KC x nc`) is packed into `NR`-wide micro-panels,
//! - the `ic` loop cuts A into `MC x KC` blocks packed into `MR`-tall
//!   micro-panels (the block stays in L2),
//! - the micro-kernel multiplies one `MR x KC` A micro-panel by one
//!   `KC x NR` B micro-panel (in L1) into an `MR x NR` tile of C held
//!   entirely in registers: SSE2 4x6 (12 XMM accumulators), AVX2+FMA 8x6
//!   (12 YMM), AVX-512 24x8 (24 ZMM).
//!
//! Packing zero-pads partial micro-panels, so the kernel always runs full
//! tiles (a B panel with 1-4 real columns runs a 2- or 4-column tile) and
//! only the write-back of an edge tile is masked. `alpha` is folded into
//! the packed A, which is packed column by column (each column of A read
//! once, front to back, the lines of a column a few ahead asked for
//! meanwhile), and each tile's C lines are asked into L2 before its k loop
//! and into L1 shortly before its end.
//!
//! One generic implementation is instantiated per ISA inside a
//! `#[target_feature]` function, so each variant is compiled (and
//! vectorised, packing included) for exactly its instruction set.

mod kernel;
mod reference;
mod simd;
#[cfg(test)]
mod tests;

use kernel::{gemm_avx2, gemm_avx512, gemm_sse2, Args};

use super::features::{CpuFeatures, Requirement};
use super::text::Reason;

pub use kernel::{KC, MC, NC_MAX, PACK_LEN};
pub use reference::{dgemm_reference, dot};

/// An ISA level of the DGEMM kernels (also used by Linpack).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmVariant {
    /// SSE2: 2 doubles per register, separate multiply and add.
    Sse2,
    /// AVX2 + FMA3: 4 doubles per register, fused multiply-add.
    Avx2Fma,
    /// AVX-512F: 8 doubles per register, fused multiply-add.
    Avx512,
}

impl GemmVariant {
    /// Every variant, in report order.
    pub const ALL: [GemmVariant; 3] =
        [GemmVariant::Sse2, GemmVariant::Avx2Fma, GemmVariant::Avx512];

    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            GemmVariant::Sse2 => "sse2",
            GemmVariant::Avx2Fma => "avx2-fma",
            GemmVariant::Avx512 => "avx512",
        }
    }

    /// What the CPU and XCR0 must provide.
    pub fn requirements(self) -> &'static [Requirement] {
        use Requirement::*;
        match self {
            GemmVariant::Sse2 => &[Sse2],
            GemmVariant::Avx2Fma => &[Avx, Avx2, Fma],
            GemmVariant::Avx512 => &[Avx, Avx512f],
        }
    }

    /// Register tile rows x columns.
    pub fn tile(self) -> (usize, usize) {
        match self {
            GemmVariant::Sse2 => (4, 6),
            GemmVariant::Avx2Fma => (8, 6),
            GemmVariant::Avx512 => (24, 8),
        }
    }
}

/// A bad argument to [`Dgemm::gemm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmError {
    /// A leading dimension smaller than the matrix's row count.
    LeadingDimension {
        /// `A`, `B` or `C`.
        matrix: char,
        /// The leading dimension given.
        ld: usize,
        /// The matrix's row count.
        rows: usize,
    },
    /// A matrix slice shorter than its dimensions and leading dimension need.
    TooShort {
        /// `A`, `B` or `C`.
        matrix: char,
        /// The slice's length.
        len: usize,
        /// Elements the dimensions need.
        need: usize,
    },
    /// The pack buffer is shorter than [`PACK_LEN`].
    PackTooShort {
        /// The pack buffer's length.
        len: usize,
    },
}

impl core::fmt::Display for GemmError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            GemmError::LeadingDimension { matrix, ld, rows } => {
                write!(
                    f,
                    "leading dimension of {matrix} is {ld}, less than its {rows} rows"
                )
            }
            GemmError::TooShort { matrix, len, need } => {
                write!(f, "matrix {matrix} has {len} elements, needs {need}")
            }
            GemmError::PackTooShort { len } => {
                write!(f, "pack buffer has {len} elements, needs {PACK_LEN}")
            }
        }
    }
}

/// Elements a column-major `rows x cols` matrix with leading dimension `ld`
/// spans.
fn span(rows: usize, cols: usize, ld: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        ld * (cols - 1) + rows
    }
}

fn check_matrix(
    matrix: char,
    rows: usize,
    cols: usize,
    ld: usize,
    len: usize,
) -> Result<(), GemmError> {
    if ld < rows.max(1) {
        return Err(GemmError::LeadingDimension { matrix, ld, rows });
    }
    let need = span(rows, cols, ld);
    if len < need {
        return Err(GemmError::TooShort { matrix, len, need });
    }
    Ok(())
}

/// DGEMM with one [`GemmVariant`], constructed only once the CPU is known
/// to run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dgemm {
    variant: GemmVariant,
}

impl Dgemm {
    /// The variant, if both `feat` (the caller's policy) and this CPU
    /// ([`CpuFeatures::detect`]) allow it; otherwise why not.
    pub fn new(variant: GemmVariant, feat: &CpuFeatures) -> Result<Self, Reason> {
        Self::with_detected(variant, &feat.intersect(&CpuFeatures::detect()))
    }

    /// Like [`Dgemm::new`] for features already intersected with
    /// [`CpuFeatures::detect`].
    pub(crate) fn with_detected(
        variant: GemmVariant,
        usable: &CpuFeatures,
    ) -> Result<Self, Reason> {
        usable.check(variant.requirements())?;
        Ok(Dgemm { variant })
    }

    /// The kernel this instance runs.
    pub fn variant(&self) -> GemmVariant {
        self.variant
    }

    /// `C += alpha * A * B` with `A` `m x k`, `B` `k x n`, `C` `m x n`, all
    /// column-major with leading dimensions `lda`, `ldb`, `ldc`; `pack` is
    /// scratch of at least [`PACK_LEN`] elements. `after_block(flops)` is
    /// called after each block of columns and inner dimension but the last
    /// (`KC` of `k` by up to `NC_MAX` of `n`) with the flops done so far:
    /// where a timed call can be cut into stages
    /// ([`crate::workloads::timing::Stages`]).
    #[allow(clippy::too_many_arguments)] // the BLAS argument list
    pub fn gemm(
        &self,
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
        pack: &mut [f64],
        after_block: &mut dyn FnMut(u64),
    ) -> Result<(), GemmError> {
        check_matrix('A', m, k, lda, a.len())?;
        check_matrix('B', k, n, ldb, b.len())?;
        check_matrix('C', m, n, ldc, c.len())?;
        if pack.len() < PACK_LEN {
            return Err(GemmError::PackTooShort { len: pack.len() });
        }
        // SAFETY: the checks above keep every access inside the slices;
        // `c` is exclusively borrowed so it cannot alias `a` or `b`.
        unsafe {
            self.gemm_raw(
                m,
                n,
                k,
                alpha,
                a.as_ptr(),
                lda,
                b.as_ptr(),
                ldb,
                c.as_mut_ptr(),
                ldc,
                pack,
                after_block,
            )
        };
        Ok(())
    }

    /// [`Dgemm::gemm`] on raw pointers, for callers (LU) whose operands are
    /// blocks of one matrix.
    ///
    /// # Safety
    /// `a`, `b`, `c` must be valid for the spans their dimensions and
    /// leading dimensions describe (`ld >= rows`), `c`'s span must not
    /// overlap the elements of `a` and `b` that are read (other elements
    /// of the same allocation may interleave), and `pack.len() >= PACK_LEN`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gemm_raw(
        &self,
        m: usize,
        n: usize,
        k: usize,
        alpha: f64,
        a: *const f64,
        lda: usize,
        b: *const f64,
        ldb: usize,
        c: *mut f64,
        ldc: usize,
        pack: &mut [f64],
        after_block: &mut dyn FnMut(u64),
    ) {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe {
            if m == 0 || n == 0 || k == 0 {
                return;
            }
            assert!(pack.len() >= PACK_LEN);
            // 64-byte alignment; at most 7 elements of the slack are skipped.
            let skip = pack.as_ptr().align_offset(64).min(8);
            let mut args = Args {
                m,
                n,
                k,
                alpha,
                a,
                lda,
                b,
                ldb,
                c,
                ldc,
                pack: pack.as_mut_ptr().add(skip),
                after_block,
            };
            match self.variant {
                GemmVariant::Sse2 => gemm_sse2(&mut args),
                GemmVariant::Avx2Fma => gemm_avx2(&mut args),
                GemmVariant::Avx512 => gemm_avx512(&mut args),
            }
        }
    }
}
