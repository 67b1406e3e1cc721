//! How big, how long and how much memory: the problem sizes of quick and
//! full runs, the time (or, with the TSC frequency unknown, the fixed work)
//! one measurement aims at, and the scratch bytes each suite needs.

use crate::workloads::aes;
use crate::workloads::gemm::PACK_LEN;
use crate::workloads::scratch::bytes_for;
use crate::workloads::selection::Selection;

/// AES-128-CBC message sizes (the `openssl speed` columns).
pub const CBC_SIZES: [usize; 5] = [16, 64, 256, 1024, 8192];
/// AES-128-CTR message sizes.
pub const CTR_SIZES: [usize; 2] = [1024, 8192];
/// AES-128-CTR message sizes in quick runs.
pub const CTR_SIZES_QUICK: [usize; 1] = [8192];
/// XTS-AES-256 and AES-128-GCM message sizes: a disk sector, a page, and
/// a large I/O (the seed thread's 4 KiB in the middle).
pub const MODE_SIZES: [usize; 3] = [512, 4096, 65536];
/// XTS and GCM message sizes in quick runs.
pub const MODE_SIZES_QUICK: [usize; 2] = [512, 4096];
/// The message size of the register-borrow rows and the portable rows: one
/// 512-byte sector, the seed's question.
pub const BORROW_SIZE: usize = 512;
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
    /// XTS-AES-256 and AES-128-GCM message bytes (at most [`MODE_BUF`];
    /// XTS needs multiples of 16).
    pub modes: &'a [usize],
    /// DGEMM orders.
    pub gemm: &'a [usize],
    /// Linpack orders.
    pub linpack: &'a [usize],
}

impl Sizes<'static> {
    /// The sizes [`super::run`] uses for `sel.quick` or a full run.
    pub fn for_selection(sel: &Selection) -> Self {
        if sel.quick {
            Sizes {
                cbc: &CBC_SIZES,
                ctr: &CTR_SIZES_QUICK,
                modes: &MODE_SIZES_QUICK,
                gemm: &GEMM_SIZES_QUICK,
                linpack: &LINPACK_SIZES_QUICK,
            }
        } else {
            Sizes {
                cbc: &CBC_SIZES,
                ctr: &CTR_SIZES,
                modes: &MODE_SIZES,
                gemm: &GEMM_SIZES,
                linpack: &LINPACK_SIZES,
            }
        }
    }
}

/// Target duration of one measurement, quick and full runs.
pub(super) const TARGET_MS_QUICK: u64 = 20;
/// Target duration of one measurement in full runs.
pub(super) const TARGET_MS_FULL: u64 = 50;
/// Samples per XTS/GCM row (quick, full) where no VMM pairs them with
/// native ones (a paired run takes as many as the VMM's repetitions), of
/// which the row reports the median rate: these rows stand against
/// `openssl speed`, and a single sample of tens of milliseconds carried the
/// host's noise into the ratio.
pub(super) const MODE_SAMPLES: [usize; 2] = [3, 5];
/// Most samples per XTS/GCM row.
pub(super) const MAX_MODE_SAMPLES: usize = 5;
/// Most XTS/GCM message sizes per run.
pub(super) const MAX_MODE_SIZES: usize = 4;
const _: () =
    assert!(MODE_SIZES.len() <= MAX_MODE_SIZES && MODE_SIZES_QUICK.len() <= MAX_MODE_SIZES);
const _: () = assert!(
    MODE_SAMPLES[0] >= 1
        && MODE_SAMPLES[0] <= MAX_MODE_SAMPLES
        && MODE_SAMPLES[1] >= 1
        && MODE_SAMPLES[1] <= MAX_MODE_SAMPLES
);

/// With the TSC frequency unknown, repetition counts come from a fixed
/// amount of work instead: AES bytes (plus 64 per call for call overhead)
/// and flops, quick and full.
pub(super) const AES_FIXED_BYTES: [u64; 2] = [8 << 20, 32 << 20];
/// Flops per measurement with the TSC frequency unknown, quick and full.
pub(super) const FLOPS_FIXED: [u64; 2] = [500_000_000, 2_000_000_000];

/// The key every AES measurement uses.
pub(super) const AES_KEY: [u8; 16] = aes::kat::KEY_2B7E;
/// Seed of the random matrices (mixed with the order).
pub(super) const MATRIX_SEED: u64 = 0x5eed_0fa1_10a7;

/// Leading dimension for order `n`: padded when `n` is a multiple of 64 so
/// columns do not all map to the same cache sets.
pub fn leading_dim(n: usize) -> usize {
    if n & 63 == 0 {
        n + 8
    } else {
        n
    }
}

/// Scratch bytes of a DGEMM of order `n`: A, B, C and the pack buffer.
pub(super) fn gemm_scratch(n: usize) -> usize {
    3 * bytes_for::<f64>(leading_dim(n) * n) + bytes_for::<f64>(PACK_LEN)
}

/// Scratch bytes of a Linpack of order `n`.
pub(super) fn linpack_scratch(n: usize) -> usize {
    bytes_for::<f64>(leading_dim(n) * n)
        + 2 * bytes_for::<f64>(n)
        + bytes_for::<usize>(n)
        + bytes_for::<f64>(2 * n)
        + bytes_for::<f64>(PACK_LEN)
}

/// The AES message buffer: the largest message size.
pub const AES_BUF: usize = 8192;

/// Scratch bytes of the AES suite: one message buffer.
pub(super) fn aes_scratch() -> usize {
    bytes_for::<u8>(AES_BUF)
}

/// The XTS/GCM message buffer: the largest mode message size.
pub const MODE_BUF: usize = 65536;

/// Scratch bytes of the XTS and GCM suites: the message buffer and the
/// XSAVE area of the borrow rows.
pub(super) fn modes_scratch() -> usize {
    bytes_for::<u8>(MODE_BUF) + bytes_for::<u8>(aes::borrow::AREA_BYTES)
}

/// Scratch bytes [`super::run`] needs so that no size of `sel` is skipped for
/// lack of memory: about 26 MiB for `all` (three padded 1024 x 1024
/// matrices and the 1.7 MiB DGEMM pack buffer), under 4 MiB for `quick`.
pub fn scratch_bytes(sel: &Selection) -> usize {
    let sizes = Sizes::for_selection(sel);
    let mut need = 0;
    if sel.aes {
        need = need.max(aes_scratch());
    }
    if sel.xts || sel.gcm {
        need = need.max(modes_scratch());
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
