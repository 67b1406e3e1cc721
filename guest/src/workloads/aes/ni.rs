//! AES-NI on XMM registers, generated twice from one body: `sse` compiled
//! without AVX (legacy encoding: `aesenc`), `avx` with it (`vaesenc`). The
//! functions are `inline(never)` so a caller with other target features
//! can never inline (and so re-encode) them.

/// One AES-128 key-expansion step: AESKEYGENASSIST gives
/// SubWord(RotWord(w3)) ^ Rcon in dword 3; broadcast it and XOR it into the
/// running prefix-XOR of the previous round key's words.
macro_rules! expand_step {
    ($k:expr, $rcon:literal) => {{
        let k = $k;
        let t = _mm_shuffle_epi32(_mm_aeskeygenassist_si128(k, $rcon), 0xff);
        let k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
        let k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
        let k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
        _mm_xor_si128(k, t)
    }};
}

/// Encrypt one block held in an XMM register with the round keys `$k`.
macro_rules! encrypt1 {
    ($k:expr, $x:expr) => {{
        let k = &$k;
        let mut x = _mm_xor_si128($x, k[0]);
        let mut r = 1;
        while r < 10 {
            x = _mm_aesenc_si128(x, k[r]);
            r += 1;
        }
        _mm_aesenclast_si128(x, k[10])
    }};
}

/// One AES round (`aesenc` with round key `$k`) on eight blocks `$b[0..8]`
/// held in XMM registers, as one `asm!` block: the legacy encoding for
/// `sse`, VEX for `avx`.
///
/// Why not intrinsics: LLVM's scheduler is free to regroup independent
/// intrinsic calls, and under register pressure it emitted the rounds
/// block by block (ten dependent `aesenc` on one register, then the next
/// block). An out-of-order core then sees one chain per block in its
/// scheduler window instead of eight ready instructions per round, and
/// the two AES units go idle (CTR and the stitched GCM loop ran ~15-30%
/// under the units' rate). One instruction block per round keeps the
/// round-major order the hardware needs.
macro_rules! round8 {
    (sse, $k:expr, $b:expr) => {{
        let b = &mut $b;
        // In the caller's unsafe block (whose contract is that the CPU has
        // AES-NI): `aesenc` on the eight given registers only (no memory,
        // no stack, no flags).
        {
            core::arch::asm!(
                "aesenc {0}, {k}", "aesenc {1}, {k}", "aesenc {2}, {k}", "aesenc {3}, {k}",
                "aesenc {4}, {k}", "aesenc {5}, {k}", "aesenc {6}, {k}", "aesenc {7}, {k}",
                inout(xmm_reg) b[0], inout(xmm_reg) b[1], inout(xmm_reg) b[2],
                inout(xmm_reg) b[3], inout(xmm_reg) b[4], inout(xmm_reg) b[5],
                inout(xmm_reg) b[6], inout(xmm_reg) b[7],
                k = in(xmm_reg) $k,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
    }};
    (avx, $k:expr, $b:expr) => {{
        let b = &mut $b;
        // In the caller's unsafe block (whose contract is that the CPU has
        // AES-NI and AVX): `vaesenc` on the eight given registers only (no
        // memory, no stack, no flags).
        {
            core::arch::asm!(
                "vaesenc {0}, {0}, {k}", "vaesenc {1}, {1}, {k}",
                "vaesenc {2}, {2}, {k}", "vaesenc {3}, {3}, {k}",
                "vaesenc {4}, {4}, {k}", "vaesenc {5}, {5}, {k}",
                "vaesenc {6}, {6}, {k}", "vaesenc {7}, {7}, {k}",
                inout(xmm_reg) b[0], inout(xmm_reg) b[1], inout(xmm_reg) b[2],
                inout(xmm_reg) b[3], inout(xmm_reg) b[4], inout(xmm_reg) b[5],
                inout(xmm_reg) b[6], inout(xmm_reg) b[7],
                k = in(xmm_reg) $k,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
    }};
}
pub(super) use round8;

/// A batch of `N` counter blocks built with one byte add each: `[i]` adds
/// `i` to the last byte of a big-endian counter block, the second value
/// adds `N` (the next batch's first block). Valid where
/// [`last_byte_carries`] says the byte does not carry; CTR and GCM's
/// stitched loop share it.
#[inline(always)]
pub(super) fn byte_increments<const N: usize>() -> (
    [core::arch::x86_64::__m128i; N],
    core::arch::x86_64::__m128i,
) {
    use core::arch::x86_64::_mm_set_epi8;
    let at_last = |i: usize| {
        // SAFETY: SSE2 is part of x86-64; registers only.
        unsafe { _mm_set_epi8(i as i8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) }
    };
    (core::array::from_fn(at_last), at_last(N))
}

/// Whether the last byte of a counter whose low word is `lo` carries when
/// `by` is added to it.
#[inline(always)]
pub(super) const fn last_byte_carries(lo: u32, by: u32) -> bool {
    (lo & 0xff) + by > 0xff
}

macro_rules! aesni_flavor {
    ($name:ident, $features:literal) => {
        pub(super) mod $name {
            use crate::workloads::aes::key::RoundKeys;
            use crate::workloads::aes::ni::{byte_increments, last_byte_carries};
            use core::arch::x86_64::*;

            /// Blocks in flight in CTR mode: enough to cover `aesenc`
            /// latency (4 cycles) at two per cycle on current cores.
            const LANES: usize = 8;

            #[inline(always)]
            unsafe fn load_keys(rk: &RoundKeys) -> [__m128i; 11] {
                // SAFETY: SSE2 is part of x86-64; each load reads one
                // 16-byte round key inside `rk`.
                unsafe {
                    let mut k = [_mm_setzero_si128(); 11];
                    for (k, bytes) in k.iter_mut().zip(rk.0.iter()) {
                        *k = _mm_loadu_si128(bytes.as_ptr().cast());
                    }
                    k
                }
            }

            #[target_feature(enable = $features)]
            #[inline(never)]
            pub unsafe fn expand_key(key: &[u8; 16], out: &mut RoundKeys) {
                // SAFETY: the caller upholds this function's contract (the CPU
                // features it is compiled for, and the pointers and lengths it is
                // given), which is all its intrinsics and pointer accesses rely on.
                unsafe {
                    let mut k = [_mm_loadu_si128(key.as_ptr().cast()); 11];
                    k[1] = expand_step!(k[0], 0x01);
                    k[2] = expand_step!(k[1], 0x02);
                    k[3] = expand_step!(k[2], 0x04);
                    k[4] = expand_step!(k[3], 0x08);
                    k[5] = expand_step!(k[4], 0x10);
                    k[6] = expand_step!(k[5], 0x20);
                    k[7] = expand_step!(k[6], 0x40);
                    k[8] = expand_step!(k[7], 0x80);
                    k[9] = expand_step!(k[8], 0x1b);
                    k[10] = expand_step!(k[9], 0x36);
                    for (bytes, k) in out.0.iter_mut().zip(k) {
                        _mm_storeu_si128(bytes.as_mut_ptr().cast(), k);
                    }
                }
            }

            /// `data.len()` must be a multiple of 16 (checked by the caller).
            ///
            /// The chain C_i -> C_(i+1) is serial, so only its latency
            /// counts: the next plaintext and round key 0 are folded into the
            /// last round key (`aesenclast(t, k10 ^ P_(i+1) ^ k0)` =
            /// `C_i ^ P_(i+1) ^ k0`, the next block's input), which takes the
            /// XOR off the chain: 10 AES latencies per block, not 10 + 1.
            #[target_feature(enable = $features)]
            #[inline(never)]
            pub unsafe fn cbc_encrypt(rk: &RoundKeys, iv: &mut [u8; 16], data: &mut [u8]) {
                // SAFETY: the caller upholds this function's contract (the CPU
                // features it is compiled for, and the pointers and lengths it is
                // given), which is all its intrinsics and pointer accesses rely on.
                unsafe {
                    let n = data.len() / 16;
                    if n == 0 {
                        return;
                    }
                    let k = load_keys(rk);
                    let p = data.as_mut_ptr().cast::<__m128i>();
                    let ivx = _mm_loadu_si128(iv.as_ptr().cast());
                    let mut s = _mm_xor_si128(_mm_xor_si128(_mm_loadu_si128(p), k[0]), ivx);
                    for i in 0..n {
                        let mut t = s;
                        let mut r = 1;
                        while r < 10 {
                            t = _mm_aesenc_si128(t, k[r]);
                            r += 1;
                        }
                        if i + 1 < n {
                            let pk = _mm_xor_si128(_mm_loadu_si128(p.add(i + 1)), k[0]);
                            s = _mm_aesenclast_si128(t, _mm_xor_si128(k[10], pk));
                            _mm_storeu_si128(p.add(i), _mm_xor_si128(s, pk));
                        } else {
                            let c = _mm_aesenclast_si128(t, k[10]);
                            _mm_storeu_si128(p.add(i), c);
                            _mm_storeu_si128(iv.as_mut_ptr().cast(), c);
                        }
                    }
                }
            }

            #[target_feature(enable = $features)]
            #[inline(never)]
            pub unsafe fn ctr_xor(rk: &RoundKeys, ctr: &mut [u8; 16], data: &mut [u8]) {
                // SAFETY: the caller upholds this function's contract (the CPU
                // features it is compiled for, and the pointers and lengths it is
                // given), which is all its intrinsics and pointer accesses rely on.
                unsafe {
                    let k = load_keys(rk);
                    // Round key 0's last dword: XORed into each counter word
                    // in a general-purpose register, off the vector pipes.
                    let k0w = _mm_extract_epi32::<3>(k[0]) as u32;
                    let mut c = u128::from_be_bytes(*ctr);
                    // The counter block as it is encrypted (big-endian),
                    // kept in a vector register from batch to batch: built
                    // from `c` through memory, a 16-byte load of two 8-byte
                    // stores, it cannot be store-forwarded and every batch's
                    // blocks waited on it.
                    let mut pre = _mm_loadu_si128(c.to_be_bytes().as_ptr().cast());
                    let (inc, next) = byte_increments::<LANES>();
                    let mut chunks = data.chunks_exact_mut(16 * LANES);
                    for chunk in &mut chunks {
                        let mut b = [_mm_setzero_si128(); LANES];
                        let lo = c as u32;
                        if !last_byte_carries(lo, LANES as u32 - 1) {
                            // No carry out of the last byte in this batch
                            // (31 batches in 32): one byte add and the XOR
                            // with round key 0 per block, two vector
                            // operations instead of five in two domains.
                            for (b, inc) in b.iter_mut().zip(&inc) {
                                *b = _mm_xor_si128(_mm_add_epi8(pre, *inc), k[0]);
                            }
                        } else if lo <= u32::MAX - (LANES as u32 - 1) {
                            // No carry out of the low 32 bits in this batch:
                            // the blocks share their first 12 bytes (XORed
                            // with round key 0 once) and differ in the last
                            // word, big-endian `lo + i` ^ the key's word.
                            let pk = _mm_xor_si128(pre, k[0]);
                            for (i, b) in b.iter_mut().enumerate() {
                                let w = (lo + i as u32).swap_bytes() ^ k0w;
                                *b = _mm_insert_epi32::<3>(pk, w as i32);
                            }
                        } else {
                            for (i, b) in b.iter_mut().enumerate() {
                                let cb = c.wrapping_add(i as u128).to_be_bytes();
                                *b = _mm_xor_si128(_mm_loadu_si128(cb.as_ptr().cast()), k[0]);
                            }
                        }
                        const _: () = assert!(LANES == 8, "round8! takes eight blocks");
                        for kr in &k[1..10] {
                            round8!($name, *kr, b);
                        }
                        let p = chunk.as_mut_ptr().cast::<__m128i>();
                        for (i, b) in b.iter().enumerate() {
                            let ks = _mm_aesenclast_si128(*b, k[10]);
                            let d = _mm_loadu_si128(p.add(i));
                            _mm_storeu_si128(p.add(i), _mm_xor_si128(d, ks));
                        }
                        c = c.wrapping_add(LANES as u128);
                        pre = if !last_byte_carries(lo, LANES as u32) {
                            _mm_add_epi8(pre, next)
                        } else {
                            _mm_loadu_si128(c.to_be_bytes().as_ptr().cast())
                        };
                    }
                    ctr_tail(&k, &mut c, chunks.into_remainder());
                    *ctr = c.to_be_bytes();
                }
            }

            /// Fewer than a batch of blocks: one at a time, the last one
            /// possibly partial. Used by the VAES variants too.
            #[inline(always)]
            pub(in super::super) unsafe fn ctr_tail(
                k: &[__m128i; 11],
                c: &mut u128,
                data: &mut [u8],
            ) {
                // SAFETY: the caller upholds this function's contract (the CPU
                // features it is compiled for, and the pointers and lengths it is
                // given), which is all its intrinsics and pointer accesses rely on.
                unsafe {
                    for chunk in data.chunks_mut(16) {
                        let cb = c.to_be_bytes();
                        let ks = encrypt1!(k, _mm_loadu_si128(cb.as_ptr().cast()));
                        let mut buf = [0u8; 16];
                        buf[..chunk.len()].copy_from_slice(chunk);
                        let x = _mm_xor_si128(_mm_loadu_si128(buf.as_ptr().cast()), ks);
                        _mm_storeu_si128(buf.as_mut_ptr().cast(), x);
                        chunk.copy_from_slice(&buf[..chunk.len()]);
                        *c = c.wrapping_add(1);
                    }
                }
            }

            #[inline(always)]
            #[allow(dead_code)] // only the VEX flavour's is used (by VAES)
            pub(in super::super) unsafe fn round_keys(rk: &RoundKeys) -> [__m128i; 11] {
                // SAFETY: `load_keys` only needs SSE2, part of x86-64.
                unsafe { load_keys(rk) }
            }
        }
    };
}

// No `avx` here: this must stay legacy-SSE-encoded (see the module docs).
aesni_flavor!(sse, "aes,sse2,ssse3,sse4.1");
aesni_flavor!(avx, "aes,avx");
