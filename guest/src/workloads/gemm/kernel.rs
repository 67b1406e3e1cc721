//! The blocked DGEMM itself: packing, the `jc`/`pc`/`ic` loops and the
//! register-tile micro-kernel, generic over the vector type and
//! instantiated once per ISA inside a `#[target_feature]` entry point (see
//! the [`super`] module documentation for the structure).

use core::arch::x86_64::{__m128d, __m256d, __m512d, _mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};

use super::simd::F64Vec;

/// Inner-dimension block: one `KC x NR` B micro-panel fits L1.
pub const KC: usize = 256;
/// Rows of A per packed block (a multiple of every `MR`): `MC x KC` fits L2.
pub const MC: usize = 96;
/// Most columns of B per packed panel (a multiple of every `NR`).
pub const NC_MAX: usize = 768;
/// f64 elements of pack buffer [`Dgemm::gemm`](super::Dgemm::gemm) needs: the packed A block,
/// the packed B panel, and slack to align them to 64 bytes (the kernels
/// use aligned loads; the caller's buffer need only be f64-aligned).
pub const PACK_LEN: usize = MC * KC + KC * NC_MAX + 8;

/// k-steps before the end of a tile's k loop at which its C lines are
/// asked into L1 (they were asked into L2 at its start): ~200 cycles,
/// enough for an L2 or L3 hit.
const C_L1_AHEAD: usize = 32;

/// Columns of A ahead of the one being packed whose lines `pack_a` asks
/// for: ~8 columns of 12 lines cover a DRAM miss.
const PACK_A_AHEAD: usize = 8;

/// Largest register tile (AVX-512: 24 x 8), for the edge-tile buffer.
const MAX_TILE: usize = 24 * 8;

/// The operands of one call, passed by reference to the per-ISA entry
/// points (vector types never cross a non-inlined call).
pub(super) struct Args<'a> {
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) alpha: f64,
    pub(super) a: *const f64,
    pub(super) lda: usize,
    pub(super) b: *const f64,
    pub(super) ldb: usize,
    pub(super) c: *mut f64,
    pub(super) ldc: usize,
    pub(super) pack: *mut f64,
    /// Called with the flops done after each `jc`/`pc` block but the last.
    pub(super) after_block: &'a mut dyn FnMut(u64),
}

#[inline(never)]
pub(super) unsafe fn gemm_sse2(x: &mut Args<'_>) {
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
pub(super) unsafe fn gemm_avx2(x: &mut Args<'_>) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe { blocked::<__m256d, 2, 6>(x) }
}

#[target_feature(enable = "avx512f")]
#[inline(never)]
pub(super) unsafe fn gemm_avx512(x: &mut Args<'_>) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe { blocked::<__m512d, 3, 8>(x) }
}

/// The blocked loops around the micro-kernel; `MV` vectors of `V` make the
/// tile's `MR` rows, `NR` is its columns.
#[inline(always)]
unsafe fn blocked<V: F64Vec, const MV: usize, const NR: usize>(x: &mut Args<'_>) {
    // The pack buffer holds whole micro-panels: a block of MC rows packs
    // into MC / MR panels only if MR divides MC, and a column block
    // rounded up to whole NR-wide panels stays within NC_MAX only if NR
    // divides NC_MAX. Otherwise the padding of the last panel runs past
    // its region (A into B, B past PACK_LEN).
    const {
        assert!(
            MC.is_multiple_of(MV * V::LANES),
            "MC must be a multiple of MR"
        );
        assert!(NC_MAX.is_multiple_of(NR), "NC_MAX must be a multiple of NR");
    };
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
        let mut done = 0u64;
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
                    pack_a::<V, MV>(mcb, kcb, x.a.add(ic + pc * x.lda), x.lda, x.alpha, ap);
                    let mut jr = 0;
                    while jr < ncb {
                        let cols = NR.min(ncb - jr);
                        let mut ir = 0;
                        while ir < mcb {
                            let tile = Tile {
                                kc: kcb,
                                a: ap.add(ir * kcb),
                                b: bp.add(jr * kcb),
                                c: x.c.add(ic + ir + (jc + jr) * x.ldc),
                                ldc: x.ldc,
                                m: mr.min(mcb - ir),
                                n: cols,
                            };
                            // A narrow last panel (n not a multiple of NR)
                            // computes the columns it has, rounded up to an
                            // even count, not NR: at n = 512 the 8x6 tiles'
                            // last panel has 2 columns of 6.
                            if cols <= 2 {
                                micro::<V, MV, NR, 2>(tile);
                            } else if cols <= 4 {
                                micro::<V, MV, NR, 4>(tile);
                            } else {
                                micro::<V, MV, NR, NR>(tile);
                            }
                            ir += mr;
                        }
                        jr += NR;
                    }
                    ic += MC;
                }
                pc += KC;
                done += 2 * (x.m * ncb * kcb) as u64;
                if pc < x.k || jc + ncb < x.n {
                    (x.after_block)(done);
                }
            }
            jc += nc;
        }
    }
}

/// Pack `alpha * A[0..mc, 0..kc]` into `mr`-row micro-panels (`mr` =
/// `MV` vectors of `V`): panel `i` at `dst + i*mr*kc`, column `p` of it
/// at `+ p*mr`, zero-padded rows. Column by column: each column of A is
/// read once, front to back (consecutive lines of one page, which the
/// hardware prefetcher follows), and its `mr`-row pieces go to every
/// panel. Panel by panel instead reads `mr` elements per column, a
/// stride of `lda` elements apart: on Zen 3 that loop (scalar, too) was
/// 8% of an n = 1024 DGEMM. A column of a block is only `mc` rows (12
/// lines at `MC` = 96), too short a stream for the hardware prefetcher to
/// get ahead of a DRAM miss once A outgrows L3 (n = 2048: packing was 4%
/// of the time on Zen 3, 1.5% with this), so the lines of the column
/// [`PACK_A_AHEAD`] ahead are asked for while one is packed.
#[inline(always)]
unsafe fn pack_a<V: F64Vec, const MV: usize>(
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
        let mr = MV * V::LANES;
        let full = mc - mc % mr;
        let va = V::splat(&alpha);
        for p in 0..kc {
            let src = a.add(p * lda);
            if p + PACK_A_AHEAD < kc {
                prefetch_block::<_MM_HINT_T0>(src.add(PACK_A_AHEAD * lda), lda, mc, 1);
            }
            let mut ir = 0;
            while ir < full {
                let d = dst.add(ir * kc + p * mr);
                for v in 0..MV {
                    let x = V::loadu(src.add(ir + v * V::LANES));
                    V::storeu(d.add(v * V::LANES), V::mul(va, x));
                }
                ir += mr;
            }
            if ir < mc {
                let rows = mc - ir;
                let d = dst.add(ir * kc + p * mr);
                for i in 0..mr {
                    *d.add(i) = if i < rows {
                        alpha * *src.add(ir + i)
                    } else {
                        0.0
                    };
                }
            }
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

/// Four k-steps, advancing the panel pointers `a` and `b` past them.
macro_rules! ksteps4 {
    ($acc:ident, $a:ident, $b:ident, $mr:expr, $mv:expr, $nr:expr, $nx:expr, $lanes:expr) => {{
        kstep!($acc, $a, $b, $mv, $nx, $lanes);
        kstep!($acc, $a.add($mr), $b.add($nr), $mv, $nx, $lanes);
        kstep!($acc, $a.add(2 * $mr), $b.add(2 * $nr), $mv, $nx, $lanes);
        kstep!($acc, $a.add(3 * $mr), $b.add(3 * $nr), $mv, $nx, $lanes);
        $a = $a.add(4 * $mr);
        $b = $b.add(4 * $nr);
    }};
}

/// Ask for the lines of an `m x n` column-major block (a tile of C, or
/// the column of A that `pack_a` will read next) into the cache level
/// `HINT` names: every 8th element of each column and its last, so every
/// line a column touches (3 or 4 for the 24-row AVX-512 tile, not only
/// its first and last).
#[inline(always)]
unsafe fn prefetch_block<const HINT: i32>(c: *const f64, ldc: usize, m: usize, n: usize) {
    // SAFETY: `c` is a block of the caller's matrix (`m, n >= 1` elements
    // inside it); prefetching an address never faults.
    unsafe {
        for j in 0..n {
            let col = c.add(j * ldc);
            let mut i = 0;
            while i < m - 1 {
                _mm_prefetch::<HINT>(col.add(i).cast());
                i += 8;
            }
            _mm_prefetch::<HINT>(col.add(m - 1).cast());
        }
    }
}

/// One call of the micro-kernel: `C[0..m, 0..n] += A panel * B panel`
/// over `kc` k-steps, with C's leading dimension `ldc`.
#[derive(Clone, Copy)]
struct Tile {
    kc: usize,
    a: *const f64,
    b: *const f64,
    c: *mut f64,
    ldc: usize,
    m: usize,
    n: usize,
}

/// `C[0..m, 0..n] += Apanel * Bpanel` for one `MR x NX` tile of a B
/// micro-panel `NR` wide (`NX <= NR` columns of it are computed); `m < MR`
/// or `n < NX` only at the matrix edges (the panels are zero-padded).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // register-tile indexing, fully unrolled
unsafe fn micro<V: F64Vec, const MV: usize, const NR: usize, const NX: usize>(t: Tile) {
    let Tile {
        kc,
        a,
        b,
        c,
        ldc,
        m,
        n,
    } = t;
    const { assert!(NX <= NR, "a tile is at most a micro-panel wide") };
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
        let lanes = V::LANES;
        let mr = MV * lanes;
        // The C tile is read once, after the whole k loop. Its lines are
        // asked for twice: into L2 now, so that read does not wait on
        // memory (once C outgrows the caches, n = 2048: 32 MiB, the
        // write-back otherwise waits on DRAM for every tile: 8% of the
        // time on Zen 3), and into L1 C_L1_AHEAD k-steps before the end,
        // late enough that the A panel streaming through L1 (16 KiB for
        // 8 x 256) does not evict them first.
        prefetch_block::<_MM_HINT_T1>(c, ldc, m, n);
        let mut acc = [[V::zero(); MV]; NX];
        let mut a = a;
        let mut b = b;
        let mut p = 0;
        let near = kc.saturating_sub(C_L1_AHEAD);
        while p + 4 <= near {
            ksteps4!(acc, a, b, mr, MV, NR, NX, lanes);
            p += 4;
        }
        prefetch_block::<_MM_HINT_T0>(c, ldc, m, n);
        while p + 4 <= kc {
            ksteps4!(acc, a, b, mr, MV, NR, NX, lanes);
            p += 4;
        }
        while p < kc {
            kstep!(acc, a, b, MV, NX, lanes);
            a = a.add(mr);
            b = b.add(NR);
            p += 1;
        }
        if m == mr && n == NX {
            for j in 0..NX {
                for v in 0..MV {
                    let cp = c.add(j * ldc + v * lanes);
                    V::storeu(cp, V::add(V::loadu(cp), acc[j][v]));
                }
            }
        } else {
            let mut tile = [0.0f64; MAX_TILE];
            for j in 0..NX {
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
