//! CTR mode with VAES: the AES round instructions on YMM (2 blocks) and
//! ZMM (4 blocks) registers, 8 registers in flight. Messages that are not a
//! whole number of batches finish with VEX-encoded XMM code.

use core::arch::x86_64::*;

use super::key::RoundKeys;
use super::ni::avx::{ctr_tail, round_keys};

/// Registers in flight per batch.
const REGS: usize = 8;

/// Counter blocks for one batch when the low 64 bits may carry: computed
/// with u128 arithmetic, big-endian, into `out`.
#[inline(always)]
fn counters_slow<const N: usize>(c: u128, out: &mut [[u8; 16]; N]) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = c.wrapping_add(i as u128).to_be_bytes();
    }
}

/// # Safety
/// The CPU must support VAES, AVX2 and AES-NI and XCR0 must enable AVX state.
#[target_feature(enable = "vaes,avx2,aes")]
#[inline(never)]
pub(super) unsafe fn ctr_xor_256(rk: &RoundKeys, ctr: &mut [u8; 16], data: &mut [u8]) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
        const BLOCKS: usize = REGS * 2;
        let k128 = round_keys(rk);
        let mut k = [_mm256_setzero_si256(); 11];
        for (k, k128) in k.iter_mut().zip(k128.iter()) {
            *k = _mm256_broadcastsi128_si256(*k128);
        }
        let bswap = _mm256_broadcastsi128_si256(_mm_set_epi8(
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
        ));
        let mut c = u128::from_be_bytes(*ctr);
        let mut chunks = data.chunks_exact_mut(16 * BLOCKS);
        for chunk in &mut chunks {
            let mut b = [_mm256_setzero_si256(); REGS];
            let lo = c as u64;
            if lo <= u64::MAX - (BLOCKS as u64 - 1) {
                let hi = (c >> 64) as i64;
                let base = _mm256_set_epi64x(hi, (lo + 1) as i64, hi, lo as i64);
                for (i, b) in b.iter_mut().enumerate() {
                    let inc = _mm256_set_epi64x(0, 2 * i as i64, 0, 2 * i as i64);
                    *b = _mm256_shuffle_epi8(_mm256_add_epi64(base, inc), bswap);
                }
            } else {
                let mut cb = [[0u8; 16]; BLOCKS];
                counters_slow(c, &mut cb);
                for (i, b) in b.iter_mut().enumerate() {
                    *b = _mm256_loadu_si256(cb.as_ptr().add(2 * i).cast());
                }
            }
            for b in b.iter_mut() {
                *b = _mm256_xor_si256(*b, k[0]);
            }
            let mut r = 1;
            while r < 10 {
                for b in b.iter_mut() {
                    *b = _mm256_aesenc_epi128(*b, k[r]);
                }
                r += 1;
            }
            let p = chunk.as_mut_ptr().cast::<__m256i>();
            for (i, b) in b.iter().enumerate() {
                let ks = _mm256_aesenclast_epi128(*b, k[10]);
                let d = _mm256_loadu_si256(p.add(i));
                _mm256_storeu_si256(p.add(i), _mm256_xor_si256(d, ks));
            }
            c = c.wrapping_add(BLOCKS as u128);
        }
        ctr_tail(&k128, &mut c, chunks.into_remainder());
        *ctr = c.to_be_bytes();
    }
}

/// # Safety
/// The CPU must support VAES, AVX512F, AVX2 and AES-NI and XCR0 must enable
/// AVX and AVX-512 state.
#[target_feature(enable = "vaes,avx512f,avx2,aes")]
#[inline(never)]
pub(super) unsafe fn ctr_xor_512(rk: &RoundKeys, ctr: &mut [u8; 16], data: &mut [u8]) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
        const BLOCKS: usize = REGS * 4;
        let k128 = round_keys(rk);
        let mut k = [_mm512_setzero_si512(); 11];
        for (k, k128) in k.iter_mut().zip(k128.iter()) {
            *k = _mm512_broadcast_i32x4(*k128);
        }
        // Byte swaps stay 256-bit (AVX2 `vpshufb`): a ZMM `vpshufb` would need
        // AVX512BW on top of AVX512F.
        let bswap = _mm256_broadcastsi128_si256(_mm_set_epi8(
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
        ));
        let mut c = u128::from_be_bytes(*ctr);
        let mut chunks = data.chunks_exact_mut(16 * BLOCKS);
        for chunk in &mut chunks {
            let mut b = [_mm512_setzero_si512(); REGS];
            let lo = c as u64;
            if lo <= u64::MAX - (BLOCKS as u64 - 1) {
                let hi = (c >> 64) as i64;
                let base = _mm256_set_epi64x(hi, (lo + 1) as i64, hi, lo as i64);
                for (i, b) in b.iter_mut().enumerate() {
                    let n = 4 * i as i64;
                    let c01 = _mm256_add_epi64(base, _mm256_set_epi64x(0, n, 0, n));
                    let c23 = _mm256_add_epi64(base, _mm256_set_epi64x(0, n + 2, 0, n + 2));
                    let c01 = _mm256_shuffle_epi8(c01, bswap);
                    let c23 = _mm256_shuffle_epi8(c23, bswap);
                    *b = _mm512_inserti64x4(_mm512_castsi256_si512(c01), c23, 1);
                }
            } else {
                let mut cb = [[0u8; 16]; BLOCKS];
                counters_slow(c, &mut cb);
                for (i, b) in b.iter_mut().enumerate() {
                    *b = _mm512_loadu_si512(cb.as_ptr().add(4 * i).cast());
                }
            }
            for b in b.iter_mut() {
                *b = _mm512_xor_si512(*b, k[0]);
            }
            let mut r = 1;
            while r < 10 {
                for b in b.iter_mut() {
                    *b = _mm512_aesenc_epi128(*b, k[r]);
                }
                r += 1;
            }
            let p = chunk.as_mut_ptr().cast::<__m512i>();
            for (i, b) in b.iter().enumerate() {
                let ks = _mm512_aesenclast_epi128(*b, k[10]);
                let d = _mm512_loadu_si512(p.add(i).cast());
                _mm512_storeu_si512(p.add(i).cast(), _mm512_xor_si512(d, ks));
            }
            c = c.wrapping_add(BLOCKS as u128);
        }
        ctr_tail(&k128, &mut c, chunks.into_remainder());
        *ctr = c.to_be_bytes();
    }
}
