//! GHASH (NIST SP 800-38D 6.4), the authenticator of GCM: the portable
//! bit-serial reference straight from the standard, and carry-less
//! multiplication on XMM (PCLMULQDQ), YMM and ZMM (VPCLMULQDQ) registers.
//!
//! The fast paths work on byte-reversed blocks, where GHASH's reflected bit
//! order becomes a product of reciprocal polynomials: with `v = rev(p)`,
//! `v_a * v_b = y^127 * v_(a*b)` modulo `y^128 + y^127 + y^126 + y^121 + 1`
//! (POLYVAL's polynomial). The key is stored pre-multiplied by `y`
//! ([`GhashKey::new`]), so each product needs one Montgomery reduction by
//! `y^-128`: two carry-less multiplications by `0xc2 << 56` (the
//! polynomial's middle terms), no bit shifts. Batches of blocks are
//! multiplied by descending key powers and summed before one reduction.

use core::arch::x86_64::*;

/// Blocks of key powers kept: one ZMM batch (8 registers of 4 blocks).
pub const POWERS: usize = 32;

/// `y^127 + y^126 + y^121 + 1`: `y^128` reduced, for doubling the key.
const POLY_LOW: u128 = (1 << 127) | (1 << 126) | (1 << 121) | 1;
/// The Montgomery constant `y^63 + y^62 + y^57`.
const MONT: u64 = 0xc200_0000_0000_0000;

/// A GHASH key expanded for the carry-less paths: `kd[i]` is the
/// Montgomery power `K_(POWERS - i)` of the doubled, byte-reversed hash key
/// (`K_1 = H*y`, `K_(n+1) = K_n * K_1 * y^-128`), as little-endian bytes.
/// Block `j` of a batch of `n` is multiplied by `kd[POWERS - n + j]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GhashKey {
    /// Descending key powers.
    pub kd: [[u8; 16]; POWERS],
    /// The middle factors of Karatsuba products (3 carry-less
    /// multiplications per block instead of 4), the XOR of a power's two
    /// halves: `kk[i]` holds `kd[i]`'s in its low qword and the next
    /// power's, `kd[i + 1]`'s, in its high qword (zero for the last), so
    /// one register serves a pair of consecutive blocks (`vpclmulqdq`
    /// 0x00 and 0x11) and the low qword a single block.
    pub kk: [[u8; 16]; POWERS],
}

impl GhashKey {
    /// Expand the hash subkey `h` (E_K(0^128)).
    pub fn new(h: &[u8; 16]) -> Self {
        let hr = u128::from_be_bytes(*h);
        let k1 = (hr << 1) ^ ((hr >> 127) * POLY_LOW);
        let mut kd = [[0u8; 16]; POWERS];
        let mut kk = [[0u8; 16]; POWERS];
        let mut k = k1;
        // Descending, so the next index's (the lower power's) half is
        // already known when a power's is.
        let mut next_half = 0u64;
        for n in 1..=POWERS {
            kd[POWERS - n] = k.to_le_bytes();
            let half = (k as u64) ^ ((k >> 64) as u64);
            kk[POWERS - n] = ((next_half as u128) << 64 | half as u128).to_le_bytes();
            next_half = half;
            k = mont_mul(k, k1);
        }
        GhashKey { kd, kk }
    }
}

/// Carry-less 64 x 64 -> 128-bit product (portable; key setup only).
fn clmul64(a: u64, b: u64) -> u128 {
    let mut r = 0u128;
    for i in 0..64 {
        if (b >> i) & 1 != 0 {
            r ^= (a as u128) << i;
        }
    }
    r
}

/// `a * b * y^-128` in the reversed domain, portably (key setup and tests).
pub fn mont_mul(a: u128, b: u128) -> u128 {
    let (a0, a1, b0, b1) = (a as u64, (a >> 64) as u64, b as u64, (b >> 64) as u64);
    let mid = clmul64(a0, b1) ^ clmul64(a1, b0);
    let lo = clmul64(a0, b0) ^ (mid << 64);
    let hi = clmul64(a1, b1) ^ (mid >> 64);
    let (x0, x1) = (lo as u64, (lo >> 64) as u64);
    let a = clmul64(x0, MONT);
    let (u0, u1) = (x1 ^ a as u64, x0 ^ (a >> 64) as u64);
    let b = clmul64(u0, MONT);
    hi ^ (((u0 as u128) << 64) | u1 as u128) ^ b
}

/// GHASH state in the reversed domain: `u128::from_be_bytes` of the
/// standard's `Y`. Start from 0; [`Ghash::finish`] gives `Y` as bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ghash(pub u128);

impl Ghash {
    /// The standard's output block.
    pub fn finish(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }
}

/// GF(2^128) multiplication exactly as SP 800-38D Algorithm 1 states it,
/// on big-endian block values.
pub fn gf_mul_spec(x: u128, y: u128) -> u128 {
    let mut z = 0u128;
    let mut v = y;
    for i in 0..128 {
        if (x >> (127 - i)) & 1 != 0 {
            z ^= v;
        }
        v = if v & 1 == 0 {
            v >> 1
        } else {
            (v >> 1) ^ (0xe1 << 120)
        };
    }
    z
}

/// The reference GHASH update: `data` zero-padded to whole blocks,
/// `Y = (Y ^ X) * H` per block.
pub fn soft_update(h: &[u8; 16], acc: Ghash, data: &[u8]) -> Ghash {
    let h = u128::from_be_bytes(*h);
    let mut y = acc.0;
    for chunk in data.chunks(16) {
        let mut b = [0u8; 16];
        b[..chunk.len()].copy_from_slice(chunk);
        y = gf_mul_spec(y ^ u128::from_be_bytes(b), h);
    }
    Ghash(y)
}

/// Which carry-less path [`update`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GhashPath {
    /// PCLMULQDQ on XMM registers (VEX-encoded), 8 blocks per reduction.
    Xmm,
    /// VPCLMULQDQ on YMM registers, 16 blocks per reduction.
    Ymm,
    /// VPCLMULQDQ on ZMM registers, 32 blocks per reduction.
    Zmm,
}

/// GHASH `data`, zero-padded to whole blocks, into `acc`.
///
/// # Safety
/// The CPU must support the path's instructions: PCLMULQDQ and AVX (Xmm);
/// plus AVX2 and VPCLMULQDQ (Ymm); plus AVX512F and AVX512BW (Zmm), with
/// XCR0 enabling the matching state.
pub unsafe fn update(path: GhashPath, key: &GhashKey, acc: Ghash, data: &[u8]) -> Ghash {
    let whole = data.len() & !15;
    // SAFETY: the caller guarantees the path's CPU features.
    let mut acc = unsafe {
        match path {
            GhashPath::Xmm => update_xmm(key, acc.0, &data[..whole]),
            GhashPath::Ymm => update_ymm(key, acc.0, &data[..whole]),
            GhashPath::Zmm => update_zmm(key, acc.0, &data[..whole]),
        }
    };
    if whole < data.len() {
        let mut b = [0u8; 16];
        b[..data.len() - whole].copy_from_slice(&data[whole..]);
        // SAFETY: as above; Xmm needs the least of the three.
        acc = unsafe { update_xmm(key, acc, &b) };
    }
    Ghash(acc)
}

/// Sum of 128 x 128 carry-less products, kept as three parts until the
/// reduction: low (`a0 b0`), high (`a1 b1`), middle (`a0 b1 + a1 b0`).
macro_rules! clmul_acc {
    ($f:ident, $xor:ident, $x:expr, $h:expr, $lo:ident, $hi:ident, $mid:ident) => {{
        let (x, h) = ($x, $h);
        $lo = $xor($lo, $f::<0x00>(x, h));
        $hi = $xor($hi, $f::<0x11>(x, h));
        $mid = $xor($mid, $xor($f::<0x01>(x, h), $f::<0x10>(x, h)));
    }};
}

/// Karatsuba form of [`clmul_acc`]: `$m` collects `(x0 ^ x1)(h0 ^ h1)`,
/// whose sum with the low and high parts is the middle part.
macro_rules! clmul_acc_karatsuba {
    ($f:ident, $xor:ident, $swap:ident, $x:expr, $h:expr, $hk:expr, $lo:ident, $hi:ident, $m:ident) => {{
        let (x, h) = ($x, $h);
        let xs = $xor(x, $swap::<0x4e>(x));
        $lo = $xor($lo, $f::<0x00>(x, h));
        $hi = $xor($hi, $f::<0x11>(x, h));
        $m = $xor($m, $f::<0x00>(xs, $hk));
    }};
}

/// Fold the middle part in and reduce: `(hi:lo) * y^-128`.
#[inline(always)]
pub(super) unsafe fn reduce(lo: __m128i, hi: __m128i, mid: __m128i) -> __m128i {
    // SAFETY: SSE2 and PCLMULQDQ, which every caller is compiled for.
    unsafe {
        let lo = _mm_xor_si128(lo, _mm_slli_si128::<8>(mid));
        let hi = _mm_xor_si128(hi, _mm_srli_si128::<8>(mid));
        let poly = _mm_set_epi64x(MONT as i64, 0);
        // [X0 ^ A1 : X1 ^ A0] with A = X0 * c: X0 cancelled.
        let u = _mm_xor_si128(
            _mm_shuffle_epi32::<0x4e>(lo),
            _mm_clmulepi64_si128::<0x10>(lo, poly),
        );
        // Same for the new low qword U0, then drop 128 zero bits.
        let b = _mm_clmulepi64_si128::<0x10>(u, poly);
        _mm_xor_si128(_mm_xor_si128(hi, _mm_shuffle_epi32::<0x4e>(u)), b)
    }
}

/// Byte reversal of a 16-byte lane.
macro_rules! bswap_mask {
    () => {
        _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
    };
}

/// One block at a time (Horner with `K_1`): batch tails and padding.
#[inline(always)]
unsafe fn tail_xmm(key: &GhashKey, mut acc: __m128i, data: &[u8]) -> __m128i {
    // SAFETY: callers are compiled for PCLMULQDQ and SSSE3 (or AVX); every
    // load reads one 16-byte block inside `data` or `key`.
    unsafe {
        let bswap = bswap_mask!();
        let h = _mm_loadu_si128(key.kd[POWERS - 1].as_ptr().cast());
        for block in data.chunks_exact(16) {
            let x = _mm_shuffle_epi8(_mm_loadu_si128(block.as_ptr().cast()), bswap);
            let x = _mm_xor_si128(x, acc);
            let z = _mm_setzero_si128();
            let (mut lo, mut hi, mut mid) = (z, z, z);
            clmul_acc!(_mm_clmulepi64_si128, _mm_xor_si128, x, h, lo, hi, mid);
            acc = reduce(lo, hi, mid);
        }
        acc
    }
}

/// Blocks per reduction on the XMM path (and per batch of the stitched
/// GCM loop, which hashes one batch of ciphertext while it encrypts the
/// next).
pub(super) const XMM_BATCH: usize = 8;

/// Hash the [`XMM_BATCH`] blocks at `p` into `acc` with one reduction:
/// block `i` times `K_(8-i)` (Karatsuba, 3 carry-less multiplications per
/// block), `acc` added to the first. The body of [`update_xmm`] and of the
/// stitched GCM loop ([`super::gcm_xmm`]).
///
/// # Safety
/// The caller is compiled for PCLMULQDQ and SSSE3 (or AVX); `p` points to
/// `16 * XMM_BATCH` readable bytes.
#[inline(always)]
pub(super) unsafe fn batch_xmm(key: &GhashKey, acc: __m128i, p: *const __m128i) -> __m128i {
    // SAFETY: the caller's contract: the features, and `p` readable for
    // the batch; the key loads read blocks inside `key`.
    unsafe {
        let bswap = bswap_mask!();
        let z = _mm_setzero_si128();
        let (mut lo, mut hi, mut mid) = (z, z, z);
        for i in 0..XMM_BATCH {
            let mut x = _mm_shuffle_epi8(_mm_loadu_si128(p.add(i)), bswap);
            if i == 0 {
                x = _mm_xor_si128(x, acc);
            }
            let j = POWERS - XMM_BATCH + i;
            let h = _mm_loadu_si128(key.kd[j].as_ptr().cast());
            let hk = _mm_loadu_si128(key.kk[j].as_ptr().cast());
            clmul_acc_karatsuba!(
                _mm_clmulepi64_si128,
                _mm_xor_si128,
                _mm_shuffle_epi32,
                x,
                h,
                hk,
                lo,
                hi,
                mid
            );
        }
        reduce(lo, hi, _mm_xor_si128(mid, _mm_xor_si128(lo, hi)))
    }
}

/// The accumulator as an XMM register (little-endian bytes of the u128).
#[inline(always)]
pub(super) unsafe fn acc_load(acc: u128) -> __m128i {
    let a = acc.to_le_bytes();
    // SAFETY: SSE2 is part of x86-64; reads the 16 bytes of `a`.
    unsafe { _mm_loadu_si128(a.as_ptr().cast()) }
}

/// The inverse of [`acc_load`].
#[inline(always)]
pub(super) unsafe fn acc_store(acc: __m128i) -> u128 {
    let mut out = [0u8; 16];
    // SAFETY: SSE2 is part of x86-64; writes the 16 bytes of `out`.
    unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), acc) };
    u128::from_le_bytes(out)
}

/// # Safety
/// PCLMULQDQ and AVX; `data.len()` a multiple of 16.
#[target_feature(enable = "pclmulqdq,avx")]
#[inline(never)]
pub(super) unsafe fn update_xmm(key: &GhashKey, acc: u128, data: &[u8]) -> u128 {
    // SAFETY: the caller upholds this function's contract (the CPU
    // features it is compiled for, and the pointers and lengths it is
    // given), which is all its intrinsics and pointer accesses rely on.
    unsafe {
        let mut acc = acc_load(acc);
        let mut chunks = data.chunks_exact(16 * XMM_BATCH);
        for chunk in &mut chunks {
            acc = batch_xmm(key, acc, chunk.as_ptr().cast());
        }
        acc_store(tail_xmm(key, acc, chunks.remainder()))
    }
}

/// One wide GHASH path: `$regs` registers of `$lanes` blocks per
/// reduction. The YMM and ZMM paths differ only in their intrinsics: the
/// type, load, byte shuffle, XOR, carry-less multiplication, placing the
/// accumulator in lane 0, and folding the lanes of a product part into
/// one XMM register.
macro_rules! wide_update {
    (
        $(#[$doc:meta])*
        $name:ident, $features:literal, $lanes:literal, $bcast:expr,
        |$p:ident| $load:expr, $shuffle:ident, $xor:ident, $clmul:ident, $zero:ident, $acc0:expr,
        |$v:ident| $fold:expr
    ) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        #[inline(never)]
        unsafe fn $name(key: &GhashKey, acc: u128, data: &[u8]) -> u128 {
            // SAFETY: the caller upholds this function's contract (the CPU
            // features it is compiled for, and the pointers and lengths it is
            // given), which is all its intrinsics and pointer accesses rely on.
            unsafe {
                const REGS: usize = 8;
                const N: usize = $lanes * REGS;
                let bswap = $bcast(bswap_mask!());
                let mut acc = acc_load(acc);
                let mut chunks = data.chunks_exact(16 * N);
                for chunk in &mut chunks {
                    let p = chunk.as_ptr();
                    let z = $zero();
                    let (mut lo, mut hi, mut mid) = (z, z, z);
                    for i in 0..REGS {
                        let $p = p.add(16 * $lanes * i);
                        let mut x = $shuffle($load, bswap);
                        if i == 0 {
                            x = $xor(x, $acc0(z, acc));
                        }
                        let $p = key.kd[POWERS - N + $lanes * i].as_ptr();
                        let h = $load;
                        clmul_acc!($clmul, $xor, x, h, lo, hi, mid);
                    }
                    let (lo, hi, mid) = (
                        { let $v = lo; $fold },
                        { let $v = hi; $fold },
                        { let $v = mid; $fold },
                    );
                    acc = reduce(lo, hi, mid);
                }
                acc_store(tail_xmm(key, acc, chunks.remainder()))
            }
        }
    };
}

wide_update!(
    /// # Safety
    /// VPCLMULQDQ, PCLMULQDQ and AVX2; `data.len()` a multiple of 16.
    update_ymm,
    "vpclmulqdq,pclmulqdq,avx2",
    2,
    _mm256_broadcastsi128_si256,
    |p| _mm256_loadu_si256(p.cast()),
    _mm256_shuffle_epi8,
    _mm256_xor_si256,
    _mm256_clmulepi64_epi128,
    _mm256_setzero_si256,
    _mm256_inserti128_si256::<0>,
    |v| _mm_xor_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v))
);

wide_update!(
    /// # Safety
    /// VPCLMULQDQ, PCLMULQDQ, AVX512F, AVX512BW and AVX2; `data.len()` a
    /// multiple of 16.
    update_zmm,
    "vpclmulqdq,pclmulqdq,avx512f,avx512bw,avx2",
    4,
    _mm512_broadcast_i32x4,
    |p| _mm512_loadu_si512(p.cast()),
    _mm512_shuffle_epi8,
    _mm512_xor_si512,
    _mm512_clmulepi64_epi128,
    _mm512_setzero_si512,
    _mm512_inserti32x4::<0>,
    |v| {
        let v = _mm256_xor_si256(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v));
        _mm_xor_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v))
    }
);
