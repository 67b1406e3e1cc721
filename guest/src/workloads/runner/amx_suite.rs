//! The AMX row: one int8 tile product (TDPBSSD) checked against the scalar
//! reference, then timed accumulating; or, without AMX, a skip record
//! saying why it is not available.

use super::ctx::Ctx;
use super::sizes::MATRIX_SEED;
use crate::protocol::WorkUnit;
use crate::workloads::amx::{self, Operands, NAME, VARIANT};
use crate::workloads::features::CpuFeatures;

/// TDPBSSDs per timed call (each call also configures, loads, stores and
/// releases the tiles once).
const PER_CALL: u32 = 256;
/// Calls when the TSC rate is unknown: quick, full.
const FIXED_CALLS: [u64; 2] = [200, 2000];

pub(super) fn amx_suite(ctx: &mut Ctx, usable: &CpuFeatures) {
    #[cfg(target_arch = "x86_64")]
    {
        if let Err(why) = amx::availability(amx::cpuid7_edx(), usable.xcr0) {
            ctx.skip(NAME, VARIANT, &why);
            return;
        }
        let o = Operands::random(MATRIX_SEED);
        let bt = amx::pack_vnni(&o.b);
        let want = amx::reference(&o);
        // SAFETY: `availability` checked CPUID (AMX-TILE, AMX-INT8) and that
        // XCR0 enables both tile components; the guest kernel never arms
        // XFD, and the native run asks Linux first (ARCH_REQ_XCOMP_PERM).
        let once = unsafe { amx::tdpbssd_tiles(&o, &bt, 1) };
        // SAFETY: as above.
        let many = unsafe { amx::tdpbssd_tiles(&o, &bt, PER_CALL) };
        let check = once == want && many == amx::scaled(&want, PER_CALL);
        let (calls, cycles) = if check {
            ctx.budget.measure(FIXED_CALLS[ctx.full], || {
                // SAFETY: as above.
                let c = unsafe { amx::tdpbssd_tiles(&o, &bt, PER_CALL) };
                core::hint::black_box(c);
            })
        } else {
            (0, 0)
        };
        ctx.result(
            NAME,
            VARIANT,
            amx::M,
            calls * u64::from(PER_CALL) * amx::OPS_PER_TDPBSSD,
            cycles,
            WorkUnit::Flops,
            check,
            0.0,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = usable;
        ctx.skip(
            NAME,
            VARIANT,
            &crate::workloads::text::Reason::of("not available: not x86_64"),
        );
    }
}
