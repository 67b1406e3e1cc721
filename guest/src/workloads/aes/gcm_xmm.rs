//! AES-128-GCM encryption on XMM registers (`aesni-pclmul`) with the CTR
//! and GHASH passes stitched into one loop.
//!
//! Run one after the other, the two passes each leave execution units
//! idle: CTR keeps the AES units busy, GHASH the carry-less multiplier and
//! the shuffles. Each batch of [`XMM_BATCH`] counter blocks goes through
//! its rounds while the previous batch's ciphertext is hashed (one
//! aggregated reduction with precomputed key powers, Karatsuba products),
//! so an out-of-order core runs both from one instruction window; the
//! GHASH chain (one reduction per batch) is far shorter than a batch's AES
//! work, so it stays off the critical path.
//!
//! What bounds it on Zen 3 (measured natively): `pclmulqdq` issues once per
//! two cycles and shares the pipes `aesenc` runs on, so a batch's 80
//! `aesenc` and 26 carry-less multiplications cannot take less than ~60
//! cycles even as independent streams (the AES rounds alone ~40). Every
//! other vector instruction competes for the same four pipes and for the
//! scheduler's window, and the loop runs on the overlap between batches
//! that the window allows, so what paid was fewer vector instructions:
//! the counter blocks built as the CTR mode builds them (a byte add to a
//! counter block kept in a register, no `pinsrd`), round keys as memory
//! operands, and the Karatsuba middle factors of two blocks gathered into
//! one register (`stitched_pair!`). Native A/B, 31 interleaved
//! trials: the counter 1.03x at 4 and 64 KiB, the pairs (with the memory
//! operands, 1.02-1.03x of it alone) another 1.05-1.06x; 512 B 1.01x each.
//! The loop now takes ~86 cycles a batch (4.6 GB/s at ~3.1 GHz; openssl's
//! stitched AVX code 4.1-4.2). Moving work to general-purpose registers
//! instead (`movbe` loads of the previous batch's ciphertext, stored
//! byte-reversed with the middle factor, and the counter words stored a
//! batch ahead) ran at 0.90-0.95x: more instructions in flight, less of
//! the next batch in the window. Reducing once per two batches (two
//! multiplications fewer per 16 blocks, the sums carried across
//! iterations) ran at 0.96-0.98x.

use core::arch::x86_64::*;

use super::ghash::{self, Ghash, GhashKey, GhashPath, POWERS, XMM_BATCH};
use super::key::RoundKeys;
use super::ni::{self, round8};

/// Two AES rounds on the eight blocks `$b` (round keys at `$ka`, `$kb`)
/// with two GHASH blocks' Karatsuba products accumulated on the way: `$x0`
/// and `$x1` (byte-reversed ciphertext) times the key powers at `$h0` and
/// `$h1` into `$lo` / `$hi`, and the middle products `(x0 ^ x1)(h0 ^ h1)`
/// of both blocks into `$mid`. The pair's middle factors are gathered into
/// one register (the low halves of both blocks XOR the high halves) and
/// multiplied by the pair of folded powers at `$kp` (`GhashKey::kk`)
/// with one carry-less multiplication per half: a `vpunpcklqdq`/`vpunpckhqdq`/`vpxor` per pair
/// where each block took a `vpshufd`/`vpxor`.
///
/// One `asm!` block, because the interleaving is the point: emitted as
/// separate intrinsics, LLVM put the whole GHASH batch before or after
/// the AES rounds, the core's scheduler filled with waiting `vaesenc`s,
/// and the two halves ran one after the other (6.5 GB/s here against
/// 12.3 GB/s for the AES half alone). The round keys are memory operands:
/// eight blocks, two data blocks, three sums and two temporaries leave no
/// XMM register for them, and as loads they cost no vector-pipe slot.
macro_rules! stitched_pair {
    (
        $ka:expr, $kb:expr, $b:expr, $x0:expr, $x1:expr, $h0:expr, $h1:expr, $kp:expr,
        $lo:ident, $hi:ident, $mid:ident
    ) => {{
        let b = &mut $b;
        // In the caller's unsafe block (its contract: AES-NI, PCLMULQDQ
        // and AVX): registers, plus 16-byte reads at `$ka` and `$kb`
        // (into the caller's round keys) and at `$h0`, `$h1` and `$kp`
        // (into its `GhashKey`).
        core::arch::asm!(
            "vaesenc {b0}, {b0}, xmmword ptr [{ka}]",
            "vpclmulqdq {t}, {x0}, xmmword ptr [{h0}], 0x00",
            "vaesenc {b1}, {b1}, xmmword ptr [{ka}]",
            "vpxor {lo}, {lo}, {t}",
            "vaesenc {b2}, {b2}, xmmword ptr [{ka}]",
            "vpclmulqdq {t}, {x0}, xmmword ptr [{h0}], 0x11",
            "vaesenc {b3}, {b3}, xmmword ptr [{ka}]",
            "vpxor {hi}, {hi}, {t}",
            "vaesenc {b4}, {b4}, xmmword ptr [{ka}]",
            "vpunpcklqdq {t}, {x0}, {x1}",
            "vaesenc {b5}, {b5}, xmmword ptr [{ka}]",
            "vpunpckhqdq {m}, {x0}, {x1}",
            "vaesenc {b6}, {b6}, xmmword ptr [{ka}]",
            "vpxor {m}, {m}, {t}",
            "vaesenc {b7}, {b7}, xmmword ptr [{ka}]",
            "vpclmulqdq {t}, {x1}, xmmword ptr [{h1}], 0x00",
            "vaesenc {b0}, {b0}, xmmword ptr [{kb}]",
            "vpxor {lo}, {lo}, {t}",
            "vaesenc {b1}, {b1}, xmmword ptr [{kb}]",
            "vpclmulqdq {t}, {x1}, xmmword ptr [{h1}], 0x11",
            "vaesenc {b2}, {b2}, xmmword ptr [{kb}]",
            "vpxor {hi}, {hi}, {t}",
            "vaesenc {b3}, {b3}, xmmword ptr [{kb}]",
            "vpclmulqdq {t}, {m}, xmmword ptr [{kp}], 0x00",
            "vaesenc {b4}, {b4}, xmmword ptr [{kb}]",
            "vpxor {mid}, {mid}, {t}",
            "vaesenc {b5}, {b5}, xmmword ptr [{kb}]",
            "vpclmulqdq {t}, {m}, xmmword ptr [{kp}], 0x11",
            "vaesenc {b6}, {b6}, xmmword ptr [{kb}]",
            "vpxor {mid}, {mid}, {t}",
            "vaesenc {b7}, {b7}, xmmword ptr [{kb}]",
            b0 = inout(xmm_reg) b[0],
            b1 = inout(xmm_reg) b[1],
            b2 = inout(xmm_reg) b[2],
            b3 = inout(xmm_reg) b[3],
            b4 = inout(xmm_reg) b[4],
            b5 = inout(xmm_reg) b[5],
            b6 = inout(xmm_reg) b[6],
            b7 = inout(xmm_reg) b[7],
            ka = in(reg) $ka,
            kb = in(reg) $kb,
            x0 = in(xmm_reg) $x0,
            x1 = in(xmm_reg) $x1,
            h0 = in(reg) $h0,
            h1 = in(reg) $h1,
            kp = in(reg) $kp,
            lo = inout(xmm_reg) $lo,
            hi = inout(xmm_reg) $hi,
            mid = inout(xmm_reg) $mid,
            t = out(xmm_reg) _,
            m = out(xmm_reg) _,
            options(pure, readonly, nostack, preserves_flags),
        );
    }};
}

/// Encrypt `data` in place with the counter blocks from `ctr` and hash the
/// ciphertext into `acc`; `ctr` ends one past the last block used (a final
/// partial block included).
///
/// The batches advance the counter's low 32 bits (GCM's `inc32`); the
/// last partial batch uses the 128-bit increment of
/// [`ni::avx::ctr_tail`], which equals `inc32` for every message GCM
/// allows with a 96-bit IV (the low word starts at 2 and a message is at
/// most `2^32 - 2` blocks, see [`super::gcm`]).
///
/// # Safety
/// The CPU must support AES-NI, PCLMULQDQ and AVX, with AVX state enabled
/// in XCR0.
#[target_feature(enable = "aes,pclmulqdq,avx")]
#[inline(never)]
pub(super) unsafe fn encrypt(
    rk: &RoundKeys,
    key: &GhashKey,
    ctr: &mut [u8; 16],
    acc: Ghash,
    data: &mut [u8],
) -> Ghash {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for); every pointer access stays inside
    // `data` (whole batches only), `ctr`, `rk` and `key`.
    unsafe {
        let k = ni::avx::round_keys(rk);
        // Where the last byte carries inside a batch (one batch in 32),
        // the counter blocks share their first 12 bytes (XORed with round
        // key 0 once) and the last word is built in a general-purpose
        // register, big-endian and XORed with the key's last word.
        let k0w = _mm_extract_epi32::<3>(k[0]) as u32;
        let prefix = _mm_xor_si128(_mm_loadu_si128(ctr.as_ptr().cast()), k[0]);
        let c = u128::from_be_bytes(*ctr);
        let lo = c as u32;
        // The batch's first counter block as it is encrypted (big-endian),
        // carried in a vector register from batch to batch.
        let ctr0 = _mm_loadu_si128(ctr.as_ptr().cast());
        let mut pre = ctr0;
        let (inc, next) = ni::byte_increments::<XMM_BATCH>();
        let batches = data.len() / (16 * XMM_BATCH);
        let p = data.as_mut_ptr().cast::<__m128i>();
        let mut acc = ghash::acc_load(acc.0);
        let bswap = _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        for n in 0..batches {
            let first = lo.wrapping_add((n * XMM_BATCH) as u32);
            const _: () = assert!(XMM_BATCH == 8, "round8! takes eight blocks");
            let mut b = [_mm_setzero_si128(); XMM_BATCH];
            if !ni::last_byte_carries(first, XMM_BATCH as u32 - 1) {
                // No carry out of the last byte: one byte add and the XOR
                // with round key 0 per block, both on the vector pipes'
                // simple ALUs (`pinsrd` is two uops, one a shuffle).
                for (b, inc) in b.iter_mut().zip(&inc) {
                    *b = _mm_xor_si128(_mm_add_epi8(pre, *inc), k[0]);
                }
            } else {
                for (i, b) in b.iter_mut().enumerate() {
                    let w = first.wrapping_add(i as u32).swap_bytes() ^ k0w;
                    *b = _mm_insert_epi32::<3>(prefix, w as i32);
                }
            }
            pre = if !ni::last_byte_carries(first, XMM_BATCH as u32) {
                _mm_add_epi8(pre, next)
            } else {
                let w = first.wrapping_add(XMM_BATCH as u32).swap_bytes();
                _mm_insert_epi32::<3>(ctr0, w as i32)
            };
            if n == 0 {
                for kr in &k[1..10] {
                    round8!(avx, *kr, b);
                }
            } else {
                // The previous batch's ciphertext, hashed while this
                // batch's rounds run: blocks j and j + 1 ride with rounds
                // j + 1 and j + 2.
                let prev = p.add((n - 1) * XMM_BATCH);
                let z = _mm_setzero_si128();
                let (mut glo, mut ghi, mut gmid) = (z, z, z);
                const _: () = assert!(XMM_BATCH.is_multiple_of(2), "blocks go in pairs");
                for j in (0..XMM_BATCH).step_by(2) {
                    let mut x0 = _mm_shuffle_epi8(_mm_loadu_si128(prev.add(j)), bswap);
                    if j == 0 {
                        x0 = _mm_xor_si128(x0, acc);
                    }
                    let x1 = _mm_shuffle_epi8(_mm_loadu_si128(prev.add(j + 1)), bswap);
                    let i = POWERS - XMM_BATCH + j;
                    let (h0, h1) = (key.kd[i].as_ptr(), key.kd[i + 1].as_ptr());
                    let (ka, kb) = (k.as_ptr().add(j + 1), k.as_ptr().add(j + 2));
                    let kp = key.kk[i].as_ptr();
                    stitched_pair!(ka, kb, b, x0, x1, h0, h1, kp, glo, ghi, gmid);
                }
                round8!(avx, k[9], b);
                acc = ghash::reduce(glo, ghi, _mm_xor_si128(gmid, _mm_xor_si128(glo, ghi)));
            }
            let q = p.add(n * XMM_BATCH);
            for (i, b) in b.iter().enumerate() {
                let ks = _mm_aesenclast_si128(*b, k[10]);
                _mm_storeu_si128(q.add(i), _mm_xor_si128(_mm_loadu_si128(q.add(i)), ks));
            }
        }
        // The last whole batch (not yet hashed) and the tail.
        let done = batches * XMM_BATCH;
        let hashed = done.saturating_sub(XMM_BATCH) * 16;
        let mut c = (c & !u128::from(u32::MAX)) | u128::from(lo.wrapping_add(done as u32));
        ni::avx::ctr_tail(&k, &mut c, &mut data[done * 16..]);
        *ctr = c.to_be_bytes();
        let acc = Ghash(ghash::acc_store(acc));
        ghash::update(GhashPath::Xmm, key, acc, &data[hashed..])
    }
}
