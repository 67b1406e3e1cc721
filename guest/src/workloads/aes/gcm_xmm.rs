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

use core::arch::x86_64::*;

use super::ghash::{self, Ghash, GhashKey, GhashPath, XMM_BATCH};
use super::key::RoundKeys;
use super::ni::{self, round8};

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
        // The counter blocks share their first 12 bytes (XORed with round
        // key 0 once); the last word is built in a general-purpose
        // register, big-endian and XORed with the key's last word.
        let k0w = _mm_extract_epi32::<3>(k[0]) as u32;
        let prefix = _mm_xor_si128(_mm_loadu_si128(ctr.as_ptr().cast()), k[0]);
        let c = u128::from_be_bytes(*ctr);
        let lo = c as u32;
        let batches = data.len() / (16 * XMM_BATCH);
        let p = data.as_mut_ptr().cast::<__m128i>();
        let mut acc = ghash::acc_load(acc.0);
        for n in 0..batches {
            let first = lo.wrapping_add((n * XMM_BATCH) as u32);
            const _: () = assert!(XMM_BATCH == 8, "round8! takes eight blocks");
            let mut b = [_mm_setzero_si128(); XMM_BATCH];
            for (i, b) in b.iter_mut().enumerate() {
                let w = first.wrapping_add(i as u32).swap_bytes() ^ k0w;
                *b = _mm_insert_epi32::<3>(prefix, w as i32);
            }
            for kr in &k[1..10] {
                round8!(avx, *kr, b);
            }
            // The previous batch's ciphertext, hashed while this batch's
            // rounds run.
            if n > 0 {
                acc = ghash::batch_xmm(key, acc, p.add((n - 1) * XMM_BATCH));
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
