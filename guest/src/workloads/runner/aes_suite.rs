//! The AES-128 rows: known answers first, then CBC and CTR throughput per
//! message size.

use core::fmt::Write;

use super::ctx::Ctx;
use super::sizes::{aes_scratch, Sizes, AES_BUF, AES_FIXED_BYTES, AES_KEY};
use crate::protocol::{RowKey, RowKind, WorkUnit};
use crate::workloads::aes::{self, Aes128, AesVariant, RoundKeys};
use crate::workloads::features::CpuFeatures;
use crate::workloads::scratch::Scratch;
use crate::workloads::selection::Selection;
use crate::workloads::text::Reason;

fn bad_size(size: usize, expected: &str) -> Reason {
    let mut r = Reason::new();
    let _ = write!(r, "message size {size} unsupported: {expected}");
    r
}

const CBC: &str = "aes-128-cbc";
const CTR: &str = "aes-128-ctr";

pub(super) fn aes_suite(
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
    for (vi, v) in AesVariant::ALL.into_iter().enumerate() {
        if !(ctx.wants(RowKind::AesCbc, vi) || ctx.wants(RowKind::AesCtr, vi)) {
            continue;
        }
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
        if cbc {
            cbc_rows(ctx, &aes, &rk, vi, cbc_sizes, buf);
        }
        ctr_rows(ctx, &aes, &rk, vi, ctr_sizes, buf);
    }
}

/// The `aes-128-cbc` rows of variant `vi` (an XMM one: CBC is serial),
/// one per message size; a size the buffer cannot take is skipped.
fn cbc_rows(
    ctx: &mut Ctx,
    aes: &Aes128,
    rk: &RoundKeys,
    vi: usize,
    sizes: &[usize],
    buf: &mut [u8],
) {
    let v = AesVariant::ALL[vi];
    let fixed_bytes = AES_FIXED_BYTES[ctx.full];
    let key = |kind, size: usize| RowKey {
        kind,
        variant: vi as u8,
        size: size as u32,
    };
    for &size in sizes {
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
        let (reps, cycles) = ctx.measure(key(RowKind::AesCbc, size), fixed, size as u64, 0, |_| {
            // Whole blocks by construction: cannot fail.
            let _ = aes.cbc_encrypt(rk, &mut iv, msg);
        });
        ctx.bytes_result(CBC, v.name(), size, reps, cycles);
    }
}

/// The `aes-128-ctr` rows of variant `vi`, one per message size; a size
/// the buffer cannot take is skipped.
fn ctr_rows(
    ctx: &mut Ctx,
    aes: &Aes128,
    rk: &RoundKeys,
    vi: usize,
    sizes: &[usize],
    buf: &mut [u8],
) {
    let v = AesVariant::ALL[vi];
    let fixed_bytes = AES_FIXED_BYTES[ctx.full];
    let key = |kind, size: usize| RowKey {
        kind,
        variant: vi as u8,
        size: size as u32,
    };
    for &size in sizes {
        if size > AES_BUF {
            ctx.skip(CTR, v.name(), &bad_size(size, "at most 8192"));
            continue;
        }
        let msg = &mut buf[..size];
        let mut ctr = aes::kat::CTR_INITIAL_COUNTER;
        let fixed = fixed_bytes / (size as u64 + 64);
        let (reps, cycles) = ctx.measure(key(RowKind::AesCtr, size), fixed, size as u64, 0, |_| {
            aes.ctr_xor(rk, &mut ctr, msg)
        });
        ctx.bytes_result(CTR, v.name(), size, reps, cycles);
    }
}
