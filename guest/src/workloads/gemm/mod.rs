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
//! tiles and only the write-back of an edge tile is masked. `alpha` is
//! folded into the packed A.
//!
//! One generic implementation is instantiated per ISA inside a
//! `#[target_feature]` function, so each variant is compiled (and
//! vectorised, packing included) for exactly its instruction set.

mod simd;

use core::arch::x86_64::{__m128d, __m256d, __m512d};

use simd::F64Vec;

use super::features::{CpuFeatures, Requirement};
use super::text::Reason;

/// Inner-dimension block: one `KC x NR` B micro-panel fits L1.
pub const KC: usize = 256;
/// Rows of A per packed block (a multiple of every `MR`): `MC x KC` fits L2.
pub const MC: usize = 96;
/// Most columns of B per packed panel (a multiple of every `NR`).
pub const NC_MAX: usize = 768;
/// f64 elements of pack buffer [`Dgemm::gemm`] needs: the packed A block,
/// the packed B panel, and slack to align them to 64 bytes (the kernels
/// use aligned loads; the caller's buffer need only be f64-aligned).
pub const PACK_LEN: usize = MC * KC + KC * NC_MAX + 8;

/// Largest register tile (AVX-512: 24 x 8), for the edge-tile buffer.
const MAX_TILE: usize = 24 * 8;

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
    /// scratch of at least [`PACK_LEN`] elements.
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
            let args = Args {
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
            };
            match self.variant {
                GemmVariant::Sse2 => gemm_sse2(&args),
                GemmVariant::Avx2Fma => gemm_avx2(&args),
                GemmVariant::Avx512 => gemm_avx512(&args),
            }
        }
    }
}

/// The operands of one call, passed by reference to the per-ISA entry
/// points (vector types never cross a non-inlined call).
struct Args {
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
    pack: *mut f64,
}

#[inline(never)]
unsafe fn gemm_sse2(x: &Args) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
        // SSE2 is part of the x86-64 baseline: no target_feature needed.
        blocked::<__m128d, 2, 6>(x)
    }
}

#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn gemm_avx2(x: &Args) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe { blocked::<__m256d, 2, 6>(x) }
}

#[target_feature(enable = "avx512f")]
#[inline(never)]
unsafe fn gemm_avx512(x: &Args) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe { blocked::<__m512d, 3, 8>(x) }
}

/// The blocked loops around the micro-kernel; `MV` vectors of `V` make the
/// tile's `MR` rows, `NR` is its columns.
#[inline(always)]
unsafe fn blocked<V: F64Vec, const MV: usize, const NR: usize>(x: &Args) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
        let mr = MV * V::LANES;
        let ap = x.pack;
        let bp = x.pack.add(MC * KC);
        // Equal column blocks no wider than NC_MAX, rounded up to whole
        // micro-panels, so no block is a thin remainder.
        let blocks = x.n.div_ceil(NC_MAX);
        let nc = x.n.div_ceil(blocks).div_ceil(NR) * NR;
        let mut jc = 0;
        while jc < x.n {
            let ncb = nc.min(x.n - jc);
            let mut pc = 0;
            while pc < x.k {
                let kcb = KC.min(x.k - pc);
                pack_b::<NR>(kcb, ncb, x.b.add(pc + jc * x.ldb), x.ldb, bp);
                let mut ic = 0;
                while ic < x.m {
                    let mcb = MC.min(x.m - ic);
                    pack_a(mr, mcb, kcb, x.a.add(ic + pc * x.lda), x.lda, x.alpha, ap);
                    let mut jr = 0;
                    while jr < ncb {
                        let mut ir = 0;
                        while ir < mcb {
                            micro::<V, MV, NR>(
                                kcb,
                                ap.add(ir * kcb),
                                bp.add(jr * kcb),
                                x.c.add(ic + ir + (jc + jr) * x.ldc),
                                x.ldc,
                                mr.min(mcb - ir),
                                NR.min(ncb - jr),
                            );
                            ir += mr;
                        }
                        jr += NR;
                    }
                    ic += MC;
                }
                pc += KC;
            }
            jc += nc;
        }
    }
}

/// Pack `alpha * A[0..mc, 0..kc]` into `mr`-row micro-panels: panel `i`
/// at `dst + i*mr*kc`, column `p` of it at `+ p*mr`, zero-padded rows.
#[inline(always)]
unsafe fn pack_a(
    mr: usize,
    mc: usize,
    kc: usize,
    a: *const f64,
    lda: usize,
    alpha: f64,
    dst: *mut f64,
) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
        let mut ir = 0;
        while ir < mc {
            let rows = mr.min(mc - ir);
            let panel = dst.add(ir * kc);
            for p in 0..kc {
                let src = a.add(ir + p * lda);
                let d = panel.add(p * mr);
                if rows == mr {
                    for i in 0..mr {
                        *d.add(i) = alpha * *src.add(i);
                    }
                } else {
                    for i in 0..mr {
                        *d.add(i) = if i < rows { alpha * *src.add(i) } else { 0.0 };
                    }
                }
            }
            ir += mr;
        }
    }
}

/// Pack `B[0..kc, 0..nc]` into `NR`-column micro-panels: panel `j` at
/// `dst + j*NR*kc`, row `p` of it at `+ p*NR`, zero-padded columns.
#[inline(always)]
unsafe fn pack_b<const NR: usize>(kc: usize, nc: usize, b: *const f64, ldb: usize, dst: *mut f64) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
        let mut jr = 0;
        while jr < nc {
            let cols = NR.min(nc - jr);
            let panel = dst.add(jr * kc);
            if cols == NR {
                for p in 0..kc {
                    for j in 0..NR {
                        *panel.add(p * NR + j) = *b.add(p + (jr + j) * ldb);
                    }
                }
            } else {
                for p in 0..kc {
                    for j in 0..NR {
                        *panel.add(p * NR + j) = if j < cols {
                            *b.add(p + (jr + j) * ldb)
                        } else {
                            0.0
                        };
                    }
                }
            }
            jr += NR;
        }
    }
}

/// One k-step of the register tile: `MV` vectors of packed A times `NR`
/// broadcast elements of packed B.
macro_rules! kstep {
    ($acc:ident, $a:expr, $b:expr, $mv:expr, $nr:expr, $lanes:expr) => {{
        let a = $a;
        let b = $b;
        let mut av = [V::zero(); MV];
        for v in 0..$mv {
            av[v] = V::load(a.add(v * $lanes));
        }
        for j in 0..$nr {
            let bj = V::splat(b.add(j));
            for v in 0..$mv {
                $acc[j][v] = V::mul_add(av[v], bj, $acc[j][v]);
            }
        }
    }};
}

/// `C[0..m, 0..n] += Apanel * Bpanel` for one `MR x NR` tile; `m < MR` or
/// `n < NR` only at the matrix edges (the panels are zero-padded).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // register-tile indexing, fully unrolled
unsafe fn micro<V: F64Vec, const MV: usize, const NR: usize>(
    kc: usize,
    a: *const f64,
    b: *const f64,
    c: *mut f64,
    ldc: usize,
    m: usize,
    n: usize,
) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
        let lanes = V::LANES;
        let mr = MV * lanes;
        let mut acc = [[V::zero(); MV]; NR];
        let mut a = a;
        let mut b = b;
        let mut p = 0;
        while p + 4 <= kc {
            kstep!(acc, a, b, MV, NR, lanes);
            kstep!(acc, a.add(mr), b.add(NR), MV, NR, lanes);
            kstep!(acc, a.add(2 * mr), b.add(2 * NR), MV, NR, lanes);
            kstep!(acc, a.add(3 * mr), b.add(3 * NR), MV, NR, lanes);
            a = a.add(4 * mr);
            b = b.add(4 * NR);
            p += 4;
        }
        while p < kc {
            kstep!(acc, a, b, MV, NR, lanes);
            a = a.add(mr);
            b = b.add(NR);
            p += 1;
        }
        if m == mr && n == NR {
            for j in 0..NR {
                for v in 0..MV {
                    let cp = c.add(j * ldc + v * lanes);
                    V::storeu(cp, V::add(V::loadu(cp), acc[j][v]));
                }
            }
        } else {
            let mut tile = [0.0f64; MAX_TILE];
            for j in 0..NR {
                for v in 0..MV {
                    V::storeu(tile.as_mut_ptr().add(j * mr + v * lanes), acc[j][v]);
                }
            }
            for j in 0..n {
                for i in 0..m {
                    *c.add(i + j * ldc) += tile[i + j * mr];
                }
            }
        }
    }
}

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

#[cfg(test)]
mod tests;
