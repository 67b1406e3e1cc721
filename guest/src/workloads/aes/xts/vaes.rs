//! The VAES variants (`vaes-avx2`, `vaes-512`): two or four blocks per
//! register, eight registers in flight, each register's tweaks advanced by
//! alpha^(blocks per batch) with shifts and XORs.

use super::tweak::XtsKeys;
use core::arch::x86_64::*;

/// Registers of blocks in flight in the VAES variants.
const REGS: usize = 8;

/// # Safety
/// The CPU must support VAES, AVX2 and AES-NI and XCR0 must enable AVX
/// state; `data.len()` must be a multiple of 16.
#[target_feature(enable = "vaes,avx2,aes")]
#[inline(never)]
pub(super) unsafe fn encrypt_256(keys: &XtsKeys, unit: u128, data: &mut [u8]) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
        let k128 = load_keys_256!(keys.data);
        let kt = load_keys_256!(keys.tweak);
        let mut k = [_mm256_setzero_si256(); 15];
        for (k, k128) in k.iter_mut().zip(k128.iter()) {
            *k = _mm256_broadcastsi128_si256(*k128);
        }
        let lo = _mm_set_epi64x(0, -1);
        let lo256 = _mm256_set_epi64x(0, -1, 0, -1);
        let u = _mm_set_epi64x((unit >> 64) as i64, unit as i64);
        let t0 = encrypt1_256!(kt, u);
        let t1 = mul_alpha_k!(xmm, t0, 1, lo);
        // Register i holds the tweaks of blocks 2i and 2i + 1.
        let base = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(t0), t1);
        let mut tw = [
            base,
            mul_alpha_k!(ymm, base, 2, lo256),
            mul_alpha_k!(ymm, base, 4, lo256),
            mul_alpha_k!(ymm, base, 6, lo256),
            mul_alpha_k!(ymm, base, 8, lo256),
            mul_alpha_k!(ymm, base, 10, lo256),
            mul_alpha_k!(ymm, base, 12, lo256),
            mul_alpha_k!(ymm, base, 14, lo256),
        ];
        let mut chunks = data.chunks_exact_mut(32 * REGS);
        for chunk in &mut chunks {
            let p = chunk.as_mut_ptr().cast::<__m256i>();
            let mut b = [_mm256_setzero_si256(); REGS];
            for (i, b) in b.iter_mut().enumerate() {
                let x = _mm256_xor_si256(_mm256_loadu_si256(p.add(i)), tw[i]);
                *b = _mm256_xor_si256(x, k[0]);
            }
            let mut r = 1;
            while r < 14 {
                for b in b.iter_mut() {
                    *b = _mm256_aesenc_epi128(*b, k[r]);
                }
                r += 1;
            }
            for (i, b) in b.iter().enumerate() {
                let c = _mm256_aesenclast_epi128(*b, k[14]);
                _mm256_storeu_si256(p.add(i), _mm256_xor_si256(c, tw[i]));
                tw[i] = mul_alpha_k!(ymm, tw[i], 16, lo256);
            }
        }
        xts_tail!(
            k128,
            _mm256_castsi256_si128(tw[0]),
            chunks.into_remainder(),
            lo
        );
    }
}

/// # Safety
/// The CPU must support VAES, AVX512F, AVX2 and AES-NI and XCR0 must
/// enable AVX and AVX-512 state; `data.len()` must be a multiple of 16.
#[target_feature(enable = "vaes,avx512f,avx2,aes")]
#[inline(never)]
pub(super) unsafe fn encrypt_512(keys: &XtsKeys, unit: u128, data: &mut [u8]) {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
        let k128 = load_keys_256!(keys.data);
        let kt = load_keys_256!(keys.tweak);
        let mut k = [_mm512_setzero_si512(); 15];
        for (k, k128) in k.iter_mut().zip(k128.iter()) {
            *k = _mm512_broadcast_i32x4(*k128);
        }
        let lo = _mm_set_epi64x(0, -1);
        let lo512 = _mm512_set_epi64(0, -1, 0, -1, 0, -1, 0, -1);
        let u = _mm_set_epi64x((unit >> 64) as i64, unit as i64);
        let t0 = encrypt1_256!(kt, u);
        let t1 = mul_alpha_k!(xmm, t0, 1, lo);
        let t2 = mul_alpha_k!(xmm, t0, 2, lo);
        let t3 = mul_alpha_k!(xmm, t0, 3, lo);
        let t01 = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(t0), t1);
        let t23 = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(t2), t3);
        // Register i holds the tweaks of blocks 4i .. 4i + 3.
        let base = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(t01), t23);
        let mut tw = [
            base,
            mul_alpha_k!(zmm, base, 4, lo512),
            mul_alpha_k!(zmm, base, 8, lo512),
            mul_alpha_k!(zmm, base, 12, lo512),
            mul_alpha_k!(zmm, base, 16, lo512),
            mul_alpha_k!(zmm, base, 20, lo512),
            mul_alpha_k!(zmm, base, 24, lo512),
            mul_alpha_k!(zmm, base, 28, lo512),
        ];
        let mut chunks = data.chunks_exact_mut(64 * REGS);
        for chunk in &mut chunks {
            let p = chunk.as_mut_ptr().cast::<__m512i>();
            let mut b = [_mm512_setzero_si512(); REGS];
            for (i, b) in b.iter_mut().enumerate() {
                let x = _mm512_xor_si512(_mm512_loadu_si512(p.add(i).cast()), tw[i]);
                *b = _mm512_xor_si512(x, k[0]);
            }
            let mut r = 1;
            while r < 14 {
                for b in b.iter_mut() {
                    *b = _mm512_aesenc_epi128(*b, k[r]);
                }
                r += 1;
            }
            for (i, b) in b.iter().enumerate() {
                let c = _mm512_aesenclast_epi128(*b, k[14]);
                _mm512_storeu_si512(p.add(i).cast(), _mm512_xor_si512(c, tw[i]));
                tw[i] = mul_alpha_k!(zmm, tw[i], 32, lo512);
            }
        }
        xts_tail!(
            k128,
            _mm512_castsi512_si128(tw[0]),
            chunks.into_remainder(),
            lo
        );
    }
}
