//! The Linpack rows: factor and solve timed per repetition, the last
//! solution judged by its scaled residual.

use super::ctx::Ctx;
use super::sizes::{leading_dim, linpack_scratch, FLOPS_FIXED, MATRIX_SEED};
use crate::protocol::{digest_f64, RowKey, RowKind, WorkUnit};
use crate::workloads::features::CpuFeatures;
use crate::workloads::gemm::{GemmVariant, PACK_LEN};
use crate::workloads::linpack::{self, LuError};
use crate::workloads::scratch::Scratch;

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

pub(super) fn linpack_suite(
    ctx: &mut Ctx,
    usable: &CpuFeatures,
    sizes: &[usize],
    scratch: &mut [u8],
) {
    for (vi, v) in GemmVariant::ALL.into_iter().enumerate() {
        if !ctx.wants(RowKind::Linpack, vi) {
            continue;
        }
        let Some(d) = ctx.dgemm(LINPACK, v, usable) else {
            continue;
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
            let key = RowKey {
                kind: RowKind::Linpack,
                variant: vi as u8,
                size: n as u32,
            };
            let (reps, cycles) = ctx.measure_with_setup(
                key,
                fixed,
                flops,
                &mut sys,
                |s| linpack::random_system(seed, s.n, s.a, s.ld, s.b),
                |s, stages| {
                    // Stages end between panels, where the stage and the
                    // rest both last at least half a part (`Stages::split`):
                    // in a quick run on Zen 3, n = 512 with AVX2 was cut
                    // after its first panel (58% of the flops).
                    let n = s.n;
                    let mut after_panel = |k| stages.split(linpack::flops_done(n, k));
                    let r = linpack::lu_factor(&d, n, s.a, s.ld, s.ipiv, s.pack, &mut after_panel)
                        .and_then(|()| linpack::lu_solve(n, s.a, s.ld, s.ipiv, s.b));
                    if s.result.is_ok() {
                        s.result = r;
                    }
                },
                // The last solution, bit for bit.
                |s| digest_f64(&s.b[..s.n]),
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
