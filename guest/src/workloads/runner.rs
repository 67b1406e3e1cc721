//! The workload suite: what runs for a [`Selection`], in which sizes, how
//! each result is checked and timed, and what ends up in the report.
//!
//! - AES-128: every variant first passes [`aes::kat::verify`]; a variant
//!   that fails gets a `check = 0`, untimed result per size plus a skip
//!   record whose reason names the failing vector. CBC (`aesni-sse`,
//!   `aesni-avx`) at 16..8192-byte messages and CTR (all four variants)
//!   encrypt one buffer repeatedly, chaining IV/counter, as `openssl speed
//!   -evp` does. Work unit: bytes.
//! - DGEMM: `C += A B` on random `n x n` matrices; the first product is
//!   checked against dot products on sampled entries (all entries for
//!   n <= 64); `residual` is the worst error divided by `(n + 2) eps
//!   sum|a||b|`, which rounding theory keeps below 1 (the pass bound).
//!   Work: `2 n^3` flops per product.
//! - Linpack: factor + solve timed per repetition (matrix regeneration is
//!   not); `residual` is the scaled residual of the last solve, passing
//!   below [`linpack::RESIDUAL_THRESHOLD`]. Work: `2/3 n^3 + 2 n^2` flops.
//!
//! A variant the CPU or XCR0 does not allow, or a size the scratch region
//! is too small for, gets a skip record with the reason.

use core::fmt::Write;

use super::aes::{self, Aes128, AesVariant};
use super::features::CpuFeatures;
use super::gemm::{Dgemm, GemmVariant, PACK_LEN};
use super::linpack::{self, LuError};
use super::rng::SplitMix64;
use super::scratch::{bytes_for, Scratch};

use super::selection::Selection;
use super::text::Reason;
use super::timing::Budget;
use crate::protocol::{fixed_str, Report, ResultRecord, SkipRecord, WorkUnit};

/// AES-128-CBC message sizes (the `openssl speed` columns).
pub const CBC_SIZES: [usize; 5] = [16, 64, 256, 1024, 8192];
/// AES-128-CTR message sizes.
pub const CTR_SIZES: [usize; 2] = [1024, 8192];
/// AES-128-CTR message sizes in quick runs.
pub const CTR_SIZES_QUICK: [usize; 1] = [8192];
/// DGEMM orders.
pub const GEMM_SIZES: [usize; 4] = [128, 256, 512, 1024];
/// DGEMM orders in quick runs.
pub const GEMM_SIZES_QUICK: [usize; 1] = [256];
/// Linpack orders.
pub const LINPACK_SIZES: [usize; 3] = [256, 512, 1000];
/// Linpack orders in quick runs.
pub const LINPACK_SIZES_QUICK: [usize; 1] = [512];

/// Problem sizes of one run.
#[derive(Clone, Copy, Debug)]
pub struct Sizes<'a> {
    /// AES-128-CBC message bytes (multiples of 16, at most [`AES_BUF`]).
    pub cbc: &'a [usize],
    /// AES-128-CTR message bytes (at most [`AES_BUF`]).
    pub ctr: &'a [usize],
    /// DGEMM orders.
    pub gemm: &'a [usize],
    /// Linpack orders.
    pub linpack: &'a [usize],
}

impl Sizes<'static> {
    /// The sizes [`run`] uses for `sel.quick` or a full run.
    pub fn for_selection(sel: &Selection) -> Self {
        if sel.quick {
            Sizes {
                cbc: &CBC_SIZES,
                ctr: &CTR_SIZES_QUICK,
                gemm: &GEMM_SIZES_QUICK,
                linpack: &LINPACK_SIZES_QUICK,
            }
        } else {
            Sizes {
                cbc: &CBC_SIZES,
                ctr: &CTR_SIZES,
                gemm: &GEMM_SIZES,
                linpack: &LINPACK_SIZES,
            }
        }
    }
}

/// Target duration of one measurement, quick and full runs.
const TARGET_MS_QUICK: u64 = 20;
const TARGET_MS_FULL: u64 = 50;

/// With the TSC frequency unknown, repetition counts come from a fixed
/// amount of work instead: AES bytes (plus 64 per call for call overhead)
/// and flops, quick and full.
const AES_FIXED_BYTES: [u64; 2] = [8 << 20, 32 << 20];
const FLOPS_FIXED: [u64; 2] = [500_000_000, 2_000_000_000];

const AES_KEY: [u8; 16] = aes::kat::KEY_2B7E;
const MATRIX_SEED: u64 = 0x5eed_0fa1_10a7;

/// Leading dimension for order `n`: padded when `n` is a multiple of 64 so
/// columns do not all map to the same cache sets.
pub fn leading_dim(n: usize) -> usize {
    if n & 63 == 0 {
        n + 8
    } else {
        n
    }
}

fn gemm_scratch(n: usize) -> usize {
    3 * bytes_for::<f64>(leading_dim(n) * n) + bytes_for::<f64>(PACK_LEN)
}

fn linpack_scratch(n: usize) -> usize {
    bytes_for::<f64>(leading_dim(n) * n)
        + 2 * bytes_for::<f64>(n)
        + bytes_for::<usize>(n)
        + bytes_for::<f64>(2 * n)
        + bytes_for::<f64>(PACK_LEN)
}

/// The AES message buffer: the largest message size.
pub const AES_BUF: usize = 8192;

fn aes_scratch() -> usize {
    bytes_for::<u8>(AES_BUF)
}

/// Scratch bytes [`run`] needs so that no size of `sel` is skipped for
/// lack of memory: about 26 MiB for `all` (three padded 1024 x 1024
/// matrices and the 1.7 MiB DGEMM pack buffer), under 4 MiB for `quick`.
pub fn scratch_bytes(sel: &Selection) -> usize {
    let sizes = Sizes::for_selection(sel);
    let mut need = 0;
    if sel.aes {
        need = need.max(aes_scratch());
    }
    if sel.gemm {
        for &n in sizes.gemm {
            need = need.max(gemm_scratch(n));
        }
    }
    if sel.linpack {
        for &n in sizes.linpack {
            need = need.max(linpack_scratch(n));
        }
    }
    need
}

/// Runs what `sel` asks for and `feat` allows; pushes a [`ResultRecord`]
/// per (workload, variant, size) and a [`SkipRecord`] (with a reason like
/// "needs AVX: XCR0 0x3 lacks AVX state") per variant it did not run.
/// Returns true when every check passed.
///
/// `feat` is the caller's view (the guest's CPUID and the XCR0 it set); it
/// is intersected with [`CpuFeatures::detect`] so a variant never runs on
/// a CPU or XCR0 that cannot execute it. `tsc_khz` (0 = unknown) sizes the
/// measurements; `scratch` is where every buffer lives ([`scratch_bytes`]
/// says how much is enough).
pub fn run(
    sel: &Selection,
    feat: &CpuFeatures,
    tsc_khz: u64,
    scratch: &mut [u8],
    report: &mut Report,
) -> bool {
    run_sizes(
        sel,
        &Sizes::for_selection(sel),
        feat,
        tsc_khz,
        scratch,
        report,
    )
}

/// [`run`] with explicit problem sizes (tests and benchmarks use small or
/// single sizes); sizes out of range are skipped with a reason.
pub fn run_sizes(
    sel: &Selection,
    sizes: &Sizes,
    feat: &CpuFeatures,
    tsc_khz: u64,
    scratch: &mut [u8],
    report: &mut Report,
) -> bool {
    let usable = feat.intersect(&CpuFeatures::detect());
    let mut ctx = Ctx {
        report,
        budget: Budget::new(
            tsc_khz,
            if sel.quick {
                TARGET_MS_QUICK
            } else {
                TARGET_MS_FULL
            },
        ),
        full: usize::from(!sel.quick),
        ok: true,
    };
    if sel.aes {
        aes_suite(&mut ctx, &usable, sel, sizes, scratch);
    }
    if sel.gemm {
        gemm_suite(&mut ctx, &usable, sizes.gemm, scratch);
    }
    if sel.linpack {
        linpack_suite(&mut ctx, &usable, sizes.linpack, scratch);
    }
    ctx.ok
}

struct Ctx<'r> {
    report: &'r mut Report,
    budget: Budget,
    /// Index into the fixed-work tables: 0 quick, 1 full.
    full: usize,
    ok: bool,
}

impl Ctx<'_> {
    #[allow(clippy::too_many_arguments)]
    fn result(
        &mut self,
        name: &str,
        variant: &str,
        size: usize,
        work: u64,
        cycles: u64,
        unit: WorkUnit,
        check: bool,
        residual: f64,
    ) {
        self.ok &= check;
        self.report.push_result(ResultRecord {
            name: fixed_str(name),
            variant: fixed_str(variant),
            size: size as u64,
            work,
            cycles,
            unit: unit as u32,
            check: check as u32,
            residual,
        });
    }

    fn skip(&mut self, name: &str, variant: &str, reason: &Reason) {
        self.report.push_skipped(SkipRecord {
            name: fixed_str(name),
            variant: fixed_str(variant),
            reason: reason.field(),
        });
    }

    fn skip_for_scratch(&mut self, name: &str, variant: &str, n: usize, need: usize, have: usize) {
        let mut r = Reason::new();
        let _ = write!(
            r,
            "size {n} needs {} KiB scratch, have {} KiB",
            need.div_ceil(1024),
            have / 1024
        );
        self.skip(name, variant, &r);
    }
}

fn bad_size(size: usize, expected: &str) -> Reason {
    let mut r = Reason::new();
    let _ = write!(r, "message size {size} unsupported: {expected}");
    r
}

const CBC: &str = "aes-128-cbc";
const CTR: &str = "aes-128-ctr";

fn aes_suite(
    ctx: &mut Ctx,
    usable: &CpuFeatures,
    sel: &Selection,
    sizes: &Sizes,
    scratch: &mut [u8],
) {
    let (cbc_sizes, ctr_sizes) = (sizes.cbc, sizes.ctr);
    let mut s = Scratch::new(scratch);
    let have = s.remaining();
    let Some(buf) = s.take::<u8>(AES_BUF) else {
        for v in AesVariant::ALL {
            if matches!(v, AesVariant::AesniSse | AesVariant::AesniAvx) {
                ctx.skip_for_scratch(CBC, v.name(), AES_BUF, aes_scratch(), have);
            }
            ctx.skip_for_scratch(CTR, v.name(), AES_BUF, aes_scratch(), have);
        }
        return;
    };
    for (i, b) in buf.iter_mut().enumerate() {
        *b = i as u8;
    }
    for v in AesVariant::ALL {
        // CBC is serial: only the XMM variants (legacy vs VEX) are timed.
        let cbc = matches!(v, AesVariant::AesniSse | AesVariant::AesniAvx);
        let aes = match Aes128::with_detected(v, usable) {
            Ok(a) => a,
            Err(why) => {
                if cbc {
                    ctx.skip(CBC, v.name(), &why);
                }
                ctx.skip(CTR, v.name(), &why);
                continue;
            }
        };
        if let Err(why) = aes::kat::verify(&aes, sel.corrupt_aes_key) {
            if cbc {
                for &size in cbc_sizes {
                    ctx.result(CBC, v.name(), size, 0, 0, WorkUnit::Bytes, false, 0.0);
                }
                ctx.skip(CBC, v.name(), &why);
            }
            for &size in ctr_sizes {
                ctx.result(CTR, v.name(), size, 0, 0, WorkUnit::Bytes, false, 0.0);
            }
            ctx.skip(CTR, v.name(), &why);
            continue;
        }
        let rk = aes.expand_key(&AES_KEY);
        let fixed_bytes = AES_FIXED_BYTES[ctx.full];
        if cbc {
            for &size in cbc_sizes {
                if size > AES_BUF || size & (aes::BLOCK - 1) != 0 {
                    ctx.skip(
                        CBC,
                        v.name(),
                        &bad_size(size, "a multiple of 16 up to 8192"),
                    );
                    continue;
                }
                let msg = &mut buf[..size];
                let mut iv = aes::kat::CBC_IV;
                let fixed = fixed_bytes / (size as u64 + 64);
                let (reps, cycles) = ctx.budget.measure(fixed, || {
                    // Whole blocks by construction: cannot fail.
                    let _ = aes.cbc_encrypt(&rk, &mut iv, msg);
                });
                ctx.result(
                    CBC,
                    v.name(),
                    size,
                    reps * size as u64,
                    cycles,
                    WorkUnit::Bytes,
                    true,
                    0.0,
                );
            }
        }
        for &size in ctr_sizes {
            if size > AES_BUF {
                ctx.skip(CTR, v.name(), &bad_size(size, "at most 8192"));
                continue;
            }
            let msg = &mut buf[..size];
            let mut ctr = aes::kat::CTR_INITIAL_COUNTER;
            let fixed = fixed_bytes / (size as u64 + 64);
            let (reps, cycles) = ctx
                .budget
                .measure(fixed, || aes.ctr_xor(&rk, &mut ctr, msg));
            ctx.result(
                CTR,
                v.name(),
                size,
                reps * size as u64,
                cycles,
                WorkUnit::Bytes,
                true,
                0.0,
            );
        }
    }
}

fn fill_random(rng: &mut SplitMix64, v: &mut [f64]) {
    for x in v {
        *x = rng.next_f64() - 0.5;
    }
}

/// Worst error of sampled entries of `C = A B` (C was zero), relative to
/// `(n + 2) eps sum_p |a_ip b_pj|`.
fn gemm_error(n: usize, ld: usize, a: &[f64], b: &[f64], c: &[f64]) -> f64 {
    let mut worst = 0.0f64;
    let mut check = |i: usize, j: usize| {
        let mut s = 0.0;
        let mut mag = 0.0;
        for p in 0..n {
            let t = a[i + p * ld] * b[p + j * ld];
            s += t;
            mag += linpack::fabs(t);
        }
        let err = linpack::fabs(c[i + j * ld] - s);
        let rel = if mag == 0.0 {
            if err == 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            err / ((n as f64 + 2.0) * f64::EPSILON * mag)
        };
        // NaN compares false: make it a failure.
        worst = if rel.is_nan() {
            f64::INFINITY
        } else {
            worst.max(rel)
        };
    };
    if n <= 64 {
        for j in 0..n {
            for i in 0..n {
                check(i, j);
            }
        }
    } else {
        for (i, j) in [(0, 0), (n - 1, n - 1), (n - 1, 0), (0, n - 1)] {
            check(i, j);
        }
        let mut rng = SplitMix64::new(n as u64);
        for _ in 0..64 {
            let i = (rng.next_u64() % n as u64) as usize;
            let j = (rng.next_u64() % n as u64) as usize;
            check(i, j);
        }
    }
    worst
}

const DGEMM: &str = "dgemm";

fn gemm_suite(ctx: &mut Ctx, usable: &CpuFeatures, sizes: &[usize], scratch: &mut [u8]) {
    for v in GemmVariant::ALL {
        let d = match Dgemm::with_detected(v, usable) {
            Ok(d) => d,
            Err(why) => {
                ctx.skip(DGEMM, v.name(), &why);
                continue;
            }
        };
        for &n in sizes {
            let ld = leading_dim(n);
            let mut s = Scratch::new(&mut *scratch);
            let have = s.remaining();
            let (Some(a), Some(b), Some(c), Some(pack)) = (
                s.take::<f64>(ld * n),
                s.take::<f64>(ld * n),
                s.take::<f64>(ld * n),
                s.take::<f64>(PACK_LEN),
            ) else {
                ctx.skip_for_scratch(DGEMM, v.name(), n, gemm_scratch(n), have);
                continue;
            };
            let mut rng = SplitMix64::new(MATRIX_SEED ^ n as u64);
            fill_random(&mut rng, a);
            fill_random(&mut rng, b);
            c.fill(0.0);
            let ok = d.gemm(n, n, n, 1.0, a, ld, b, ld, c, ld, pack).is_ok();
            let err = if ok {
                gemm_error(n, ld, a, b, c)
            } else {
                f64::INFINITY
            };
            let flops = 2 * (n as u64).pow(3);
            let fixed = FLOPS_FIXED[ctx.full] / flops;
            let (reps, cycles) = ctx.budget.measure(fixed, || {
                let _ = d.gemm(n, n, n, 1.0, a, ld, b, ld, c, ld, pack);
            });
            ctx.result(
                DGEMM,
                v.name(),
                n,
                reps * flops,
                cycles,
                WorkUnit::Flops,
                err <= 1.0,
                err,
            );
        }
    }
}

const LINPACK: &str = "linpack";

/// The buffers of one Linpack run.
struct System<'a> {
    n: usize,
    ld: usize,
    a: &'a mut [f64],
    b: &'a mut [f64],
    ipiv: &'a mut [usize],
    pack: &'a mut [f64],
    result: Result<(), LuError>,
}

fn linpack_suite(ctx: &mut Ctx, usable: &CpuFeatures, sizes: &[usize], scratch: &mut [u8]) {
    for v in GemmVariant::ALL {
        let d = match Dgemm::with_detected(v, usable) {
            Ok(d) => d,
            Err(why) => {
                ctx.skip(LINPACK, v.name(), &why);
                continue;
            }
        };
        for &n in sizes {
            let ld = leading_dim(n);
            let mut s = Scratch::new(&mut *scratch);
            let have = s.remaining();
            let (Some(a), Some(b), Some(x), Some(ipiv), Some(work), Some(pack)) = (
                s.take::<f64>(ld * n),
                s.take::<f64>(n),
                s.take::<f64>(n),
                s.take::<usize>(n),
                s.take::<f64>(2 * n),
                s.take::<f64>(PACK_LEN),
            ) else {
                ctx.skip_for_scratch(LINPACK, v.name(), n, linpack_scratch(n), have);
                continue;
            };
            let seed = MATRIX_SEED ^ ((n as u64) << 32);
            let mut sys = System {
                n,
                ld,
                a,
                b,
                ipiv,
                pack,
                result: Ok(()),
            };
            let flops = linpack::flops(n);
            let fixed = FLOPS_FIXED[ctx.full] / flops;
            let (reps, cycles) = ctx.budget.measure_with_setup(
                fixed,
                &mut sys,
                |s| linpack::random_system(seed, s.n, s.a, s.ld, s.b),
                |s| {
                    let r = linpack::lu_factor(&d, s.n, s.a, s.ld, s.ipiv, s.pack)
                        .and_then(|()| linpack::lu_solve(s.n, s.a, s.ld, s.ipiv, s.b));
                    if s.result.is_ok() {
                        s.result = r;
                    }
                },
            );
            // The last solution against a fresh copy of the same system.
            x.copy_from_slice(&sys.b[..n]);
            linpack::random_system(seed, n, sys.a, ld, sys.b);
            let resid = if sys.result.is_ok() {
                linpack::scaled_residual(n, sys.a, ld, x, sys.b, work)
            } else {
                f64::INFINITY
            };
            let pass = resid < linpack::RESIDUAL_THRESHOLD;
            ctx.result(
                LINPACK,
                v.name(),
                n,
                reps * flops,
                cycles,
                WorkUnit::Flops,
                pass,
                resid,
            );
        }
    }
}
