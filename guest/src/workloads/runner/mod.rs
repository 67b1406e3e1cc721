//! The workload suite: what runs for a [`Selection`], in which sizes, how
//! each result is checked and timed, and what ends up in the report.
//!
//! - AES-128: every variant first passes [`aes::kat::verify`](crate::workloads::aes::kat::verify); a variant
//!   that fails gets a `check = 0`, untimed result per size plus a skip
//!   record whose reason names the failing vector. CBC (`aesni-sse`,
//!   `aesni-avx`) at 16..8192-byte messages and CTR (all four variants)
//!   encrypt one buffer repeatedly, chaining IV/counter, as `openssl speed
//!   -evp` does. Work unit: bytes.
//! - XTS-AES-256 and AES-128-GCM (`xts`, `gcm`): every variant first
//!   passes [`kat_modes`](crate::workloads::aes::kat_modes) (IEEE 1619
//!   vector 10, GCM test cases 2-4, bulk vs the portable references); each
//!   message is one data unit (XTS tweak = a sector number that advances
//!   per message) or one GCM encryption + tag with a fixed IV. Rows at
//!   512 B, 4 KiB, 64 KiB; at 512 B also `VARIANT +xsave/xmm|ymm|zmm` (an
//!   XRSTOR + XSAVE of that live state around every message, see
//!   [`borrow`](crate::workloads::aes::borrow)) and the portable `soft` row.
//! - DGEMM: `C += A B` on random `n x n` matrices; the first product is
//!   checked against dot products on sampled entries (all entries for
//!   n <= 64); `residual` is the worst error divided by `(n + 2) eps
//!   sum|a||b|`, which rounding theory keeps below 1 (the pass bound).
//!   Work: `2 n^3` flops per product.
//! - Linpack: factor + solve timed per repetition (matrix regeneration is
//!   not); `residual` is the scaled residual of the last solve, passing
//!   below [`linpack::RESIDUAL_THRESHOLD`](crate::workloads::linpack::RESIDUAL_THRESHOLD). Work: `2/3 n^3 + 2 n^2` flops.
//!
//! - AMX (`amx`, only when named): one int8 tile product (TDPBSSD) equal
//!   to the scalar reference, then timed; without AMX-TILE/AMX-INT8 or the
//!   tile components in XCR0 a `not available: ...` skip record.
//!
//! A variant the CPU or XCR0 does not allow, or a size the scratch region
//! is too small for, gets a skip record with the reason.

mod aes_suite;
mod amx_suite;
mod ctx;
mod gemm_suite;
mod linpack_suite;
mod modes_suite;
mod point;
mod reps;
mod sizes;

use aes_suite::aes_suite;
use amx_suite::amx_suite;
use ctx::Ctx;
use gemm_suite::gemm_suite;
use linpack_suite::linpack_suite;
use modes_suite::{gcm_suite, xts_suite};
use sizes::{TARGET_MS_FULL, TARGET_MS_QUICK};

use super::features::CpuFeatures;
use super::selection::Selection;
use super::timing::Budget;
use crate::protocol::{NativeRowOut, PartRecord, Report, RowKey, RowKind};
pub use modes_suite::mode_row_variant;
pub use reps::{NoReps, RepHook};

pub use sizes::{
    leading_dim, scratch_bytes, Sizes, AES_BUF, BORROW_SIZE, CBC_SIZES, CTR_SIZES, CTR_SIZES_QUICK,
    GEMM_SIZES, GEMM_SIZES_QUICK, LINPACK_SIZES, LINPACK_SIZES_QUICK, MODE_BUF, MODE_SIZES,
    MODE_SIZES_QUICK,
};

/// Where a run's rows execute and what receives them, the same for every
/// entry point ([`run`], [`run_sizes`], [`run_with_hook`] and the parallel
/// benchmark's parts).
pub struct Target<'a> {
    /// The caller's view (the guest's CPUID and the XCR0 it set); it is
    /// intersected with [`CpuFeatures::detect`] so a variant never runs on
    /// a CPU or XCR0 that cannot execute it.
    pub feat: &'a CpuFeatures,
    /// The TSC rate (0 = unknown); it sizes the measurements.
    pub tsc_khz: u64,
    /// Where every buffer lives ([`scratch_bytes`] says how much is
    /// enough).
    pub scratch: &'a mut [u8],
    /// Receives the rows and the skip records.
    pub report: &'a mut Report,
}

/// Runs what `sel` asks for and `on.feat` allows; pushes a [`ResultRecord`](crate::protocol::ResultRecord)
/// per (workload, variant, size) and a [`SkipRecord`](crate::protocol::SkipRecord) (with a reason like
/// "needs AVX: XCR0 0x3 lacks AVX state") per variant it did not run.
/// Returns true when every check passed.
pub fn run(sel: &Selection, on: Target<'_>) -> bool {
    run_sizes(sel, &Sizes::for_selection(sel), on)
}

/// [`run`] with explicit problem sizes (tests and benchmarks use small or
/// single sizes); sizes out of range are skipped with a reason.
pub fn run_sizes(sel: &Selection, sizes: &Sizes, on: Target<'_>) -> bool {
    run_with_hook(sel, sizes, on, &mut NoReps)
}

/// [`run_sizes`] with every row repeated [`RepHook::reps`] times and each
/// repetition told to `hook` (the guest kernel signals them to its VMM,
/// see [`crate::protocol::rep`]); a row's result is the total of its
/// repetitions.
pub fn run_with_hook(
    sel: &Selection,
    sizes: &Sizes,
    on: Target<'_>,
    hook: &mut dyn RepHook,
) -> bool {
    run_inner(sel, sizes, on, hook, None)
}

/// One repetition of the one row `key` names, measured exactly as a guest
/// run measures it (`quick`: quick-run targets): what the VMM times
/// natively between two guest repetitions, `on_part` told after each timed
/// part (as repetition 0). `ran = 0` when the host cannot run the variant
/// or `scratch` is too small; `report` receives the row or the skip record
/// saying why.
pub fn run_row(
    key: RowKey,
    quick: bool,
    tsc_khz: u64,
    scratch: &mut [u8],
    report: &mut Report,
    on_part: &mut dyn FnMut(&PartRecord),
) -> NativeRowOut {
    let size = [key.size as usize];
    let none: &[usize] = &[];
    let mut sel = Selection::NONE;
    sel.quick = quick;
    let pick = |k: RowKind| if key.kind == k { &size[..] } else { none };
    // A borrow row is at its fixed size whatever the message sizes.
    let modes = match key.kind {
        RowKind::Xts | RowKind::Gcm => &size[..],
        _ => none,
    };
    let sizes = Sizes {
        cbc: pick(RowKind::AesCbc),
        ctr: pick(RowKind::AesCtr),
        gemm: pick(RowKind::Dgemm),
        linpack: pick(RowKind::Linpack),
        modes,
    };
    match key.kind {
        RowKind::AesCbc | RowKind::AesCtr => sel.aes = true,
        RowKind::Dgemm => sel.gemm = true,
        RowKind::Linpack => sel.linpack = true,
        RowKind::Xts | RowKind::XtsBorrow => sel.xts = true,
        RowKind::Gcm | RowKind::GcmBorrow => sel.gcm = true,
    }
    let mut last = reps::LastRep {
        last: None,
        on_part,
    };
    let on = Target {
        feat: &CpuFeatures::detect(),
        tsc_khz,
        scratch,
        report,
    };
    let ok = run_inner(&sel, &sizes, on, &mut last, Some(key));
    match last.last {
        Some(r) => NativeRowOut {
            ran: 1,
            check: u32::from(ok),
            work: r.work,
            cycles: r.cycles,
            digest: r.digest,
        },
        None => NativeRowOut::default(),
    }
}

fn run_inner(
    sel: &Selection,
    sizes: &Sizes,
    on: Target<'_>,
    hook: &mut dyn RepHook,
    only: Option<RowKey>,
) -> bool {
    let Target {
        feat,
        tsc_khz,
        scratch,
        report,
    } = on;
    let usable = feat.intersect(&CpuFeatures::detect());
    let point = hook
        .snapshot_phase()
        .map(|phase| point::Point::new(phase, sel, sizes));
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
        hook,
        only,
        point,
    };
    if sel.aes {
        aes_suite(&mut ctx, &usable, sel, sizes, scratch);
    }
    if sel.xts {
        xts_suite(&mut ctx, &usable, sel, sizes.modes, scratch);
    }
    if sel.gcm {
        gcm_suite(&mut ctx, &usable, sel, sizes.modes, scratch);
    }
    if sel.gemm {
        gemm_suite(&mut ctx, &usable, sizes.gemm, scratch);
    }
    if sel.linpack {
        linpack_suite(&mut ctx, &usable, sizes.linpack, scratch);
    }
    if sel.amx {
        amx_suite(&mut ctx, &usable);
    }
    ctx.after_rows();
    ctx.ok
}
