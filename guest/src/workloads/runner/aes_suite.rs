//! The AES-128 rows: known answers first, then CBC and CTR throughput per
//! message size.

use core::fmt::Write;

use super::ctx::Ctx;
use super::sizes::{aes_scratch, Sizes, AES_BUF, AES_FIXED_BYTES, AES_KEY};
use crate::protocol::{RowKey, RowKind, WorkUnit};
use crate::workloads::aes::{self, Aes128, AesVariant};
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
            mode_rows(ctx, &CBC_ROWS, vi, cbc_sizes, buf, |iv, msg| {
                // Whole blocks by construction: cannot fail.
                let _ = aes.cbc_encrypt(&rk, iv, msg);
            });
        }
        mode_rows(ctx, &CTR_ROWS, vi, ctr_sizes, buf, |ctr, msg| {
            aes.ctr_xor(&rk, ctr, msg)
        });
    }
}

/// An AES mode's throughput rows: their name and kind, the message sizes
/// they take (`expected` says which), and the IV (or counter) every size
/// starts from.
struct Mode {
    name: &'static str,
    kind: RowKind,
    takes: fn(usize) -> bool,
    expected: &'static str,
    start: [u8; 16],
}

/// CBC: whole blocks only.
const CBC_ROWS: Mode = Mode {
    name: CBC,
    kind: RowKind::AesCbc,
    takes: |size| size <= AES_BUF && size & (aes::BLOCK - 1) == 0,
    expected: "a multiple of 16 up to 8192",
    start: aes::kat::CBC_IV,
};

/// CTR: any length.
const CTR_ROWS: Mode = Mode {
    name: CTR,
    kind: RowKind::AesCtr,
    takes: |size| size <= AES_BUF,
    expected: "at most 8192",
    start: aes::kat::CTR_INITIAL_COUNTER,
};

/// `mode`'s rows of variant `vi`, one per message size: a size the mode
/// (or the buffer) cannot take is skipped, every other one timed as `run`
/// over that many bytes of `buf` from the mode's start.
fn mode_rows(
    ctx: &mut Ctx,
    mode: &Mode,
    vi: usize,
    sizes: &[usize],
    buf: &mut [u8],
    run: impl Fn(&mut [u8; 16], &mut [u8]),
) {
    let v = AesVariant::ALL[vi];
    let fixed_bytes = AES_FIXED_BYTES[ctx.full];
    for &size in sizes {
        if !(mode.takes)(size) {
            ctx.skip(mode.name, v.name(), &bad_size(size, mode.expected));
            continue;
        }
        let msg = &mut buf[..size];
        let mut iv = mode.start;
        let fixed = fixed_bytes / (size as u64 + 64);
        let key = RowKey {
            kind: mode.kind,
            variant: vi as u8,
            size: size as u32,
        };
        let (reps, cycles) = ctx.measure(key, fixed, size as u64, 0, |_| run(&mut iv, msg));
        ctx.bytes_result(mode.name, v.name(), size, reps, cycles);
    }
}
