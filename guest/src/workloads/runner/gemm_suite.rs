//! The DGEMM rows: each kernel checked against dot products, then timed.

use super::ctx::Ctx;
use super::sizes::{gemm_scratch, leading_dim, FLOPS_FIXED, MATRIX_SEED};
use crate::protocol::{digest_f64, RowKey, RowKind, WorkUnit};
use crate::workloads::features::CpuFeatures;
use crate::workloads::gemm::{GemmVariant, PACK_LEN};
use crate::workloads::linpack;
use crate::workloads::rng::SplitMix64;
use crate::workloads::scratch::Scratch;

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

pub(super) fn gemm_suite(ctx: &mut Ctx, usable: &CpuFeatures, sizes: &[usize], scratch: &mut [u8]) {
    for (vi, v) in GemmVariant::ALL.into_iter().enumerate() {
        if !ctx.wants(RowKind::Dgemm, vi) {
            continue;
        }
        let Some(d) = ctx.dgemm(DGEMM, v, usable) else {
            continue;
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
            let ok = d
                .gemm(n, n, n, 1.0, a, ld, b, ld, c, ld, pack, &mut |_| {})
                .is_ok();
            let err = if ok {
                gemm_error(n, ld, a, b, c)
            } else {
                f64::INFINITY
            };
            let flops = 2 * (n as u64).pow(3);
            let fixed = FLOPS_FIXED[ctx.full] / flops;
            // The checked product, bit for bit (guest and native compare it).
            let digest = digest_f64(c);
            let key = RowKey {
                kind: RowKind::Dgemm,
                variant: vi as u8,
                size: n as u32,
            };
            // A call longer than a part (n = 1024 in a full run) is cut
            // between its blocks (8 at n = 1024: 2 of columns x 4 of k).
            let (reps, cycles) = ctx.measure(key, fixed, flops, digest, |st| {
                let _ = d.gemm(n, n, n, 1.0, a, ld, b, ld, c, ld, pack, &mut |done| {
                    st.split(done)
                });
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
