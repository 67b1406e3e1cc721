//! XTS-AES-256 (IEEE 1619, NIST SP 800-38E) encryption of whole-block data
//! units, the way disk encryption uses it: one data unit per message, the
//! tweak is the unit's sequence number (the sector), encrypted with the
//! second key, and multiplied by alpha (x in GF(2^128)) for every block.
//!
//! Four variants, as the seed thread on VAES measured them: `aesni`
//! (legacy-SSE `aesenc`), `aesni-avx` (the same code VEX-encoded),
//! `vaes-avx2` (two blocks per YMM register) and `vaes-512` (four per ZMM).
//! Each keeps 8 registers of blocks in flight. The XMM variants double
//! their tweaks in general-purpose registers (integer ALUs, not the vector
//! pipes `aesenc` runs on) and feed them in through memory operands; the
//! VAES variants keep a batch's tweaks in registers and advance them by
//! alpha^(blocks per batch) with shifts and XORs.
//!
//! Data units must be a whole number of blocks (disk sectors are):
//! ciphertext stealing is not implemented, and a partial unit is an error.

use super::key::{RoundKeys256, BLOCK};
use super::soft;
use super::PartialBlock;
use crate::workloads::features::{CpuFeatures, Requirement};
use crate::workloads::text::Reason;

/// An implementation of XTS-AES-256.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XtsVariant {
    /// AES-NI on XMM registers, legacy SSE encoding.
    Aesni,
    /// AES-NI on XMM registers, VEX encoding.
    AesniAvx,
    /// VAES on YMM registers (2 blocks per instruction).
    VaesAvx2,
    /// VAES on ZMM registers (4 blocks per instruction).
    Vaes512,
}

impl XtsVariant {
    /// Every variant, in report order.
    pub const ALL: [XtsVariant; 4] = [
        XtsVariant::Aesni,
        XtsVariant::AesniAvx,
        XtsVariant::VaesAvx2,
        XtsVariant::Vaes512,
    ];

    /// Name in reports (the seed thread's names).
    pub fn name(self) -> &'static str {
        match self {
            XtsVariant::Aesni => "aesni",
            XtsVariant::AesniAvx => "aesni-avx",
            XtsVariant::VaesAvx2 => "vaes-avx2",
            XtsVariant::Vaes512 => "vaes-512",
        }
    }

    /// What the CPU and XCR0 must provide (the XMM variants advance their
    /// tweaks by alpha^8 with one carry-less multiplication).
    pub fn requirements(self) -> &'static [Requirement] {
        use Requirement::*;
        match self {
            XtsVariant::Aesni => &[Sse2, AesNi, Pclmulqdq],
            XtsVariant::AesniAvx => &[Avx, AesNi, Pclmulqdq],
            XtsVariant::VaesAvx2 => &[Avx, AesNi, Avx2, Vaes],
            XtsVariant::Vaes512 => &[Avx, AesNi, Avx2, Vaes, Avx512f],
        }
    }
}

/// The two expanded keys of XTS-AES-256: `data` (Key1) encrypts the
/// blocks, `tweak` (Key2) the sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XtsKeys {
    /// Key1's schedule.
    pub data: RoundKeys256,
    /// Key2's schedule.
    pub tweak: RoundKeys256,
}

impl XtsKeys {
    /// Expand a 64-byte XTS-AES-256 key (Key1 || Key2, as IEEE 1619 writes
    /// it).
    pub fn new(key: &[u8; 64]) -> Self {
        let (k1, k2) = key.split_at(32);
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        a.copy_from_slice(k1);
        b.copy_from_slice(k2);
        XtsKeys {
            data: soft::expand_key_256(&a),
            tweak: soft::expand_key_256(&b),
        }
    }
}

/// XTS-AES-256 with one [`XtsVariant`], constructed only once the CPU is
/// known to run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Xts256 {
    variant: XtsVariant,
}

impl Xts256 {
    /// The variant, if both `feat` and this CPU allow it; otherwise why not.
    pub fn new(variant: XtsVariant, feat: &CpuFeatures) -> Result<Self, Reason> {
        Self::with_detected(variant, &feat.intersect(&CpuFeatures::detect()))
    }

    /// Like [`Xts256::new`] for features already intersected with
    /// [`CpuFeatures::detect`].
    pub(crate) fn with_detected(variant: XtsVariant, usable: &CpuFeatures) -> Result<Self, Reason> {
        usable.check(variant.requirements())?;
        Ok(Xts256 { variant })
    }

    /// The implementation this instance runs.
    pub fn variant(&self) -> XtsVariant {
        self.variant
    }

    /// Encrypt one data unit in place; `unit` is its sequence number (the
    /// tweak, little-endian as IEEE 1619 encodes it).
    pub fn encrypt_unit(
        &self,
        keys: &XtsKeys,
        unit: u128,
        data: &mut [u8],
    ) -> Result<(), PartialBlock> {
        if !data.len().is_multiple_of(BLOCK) {
            return Err(PartialBlock { len: data.len() });
        }
        // SAFETY: `with_detected` checked that the CPU and XCR0 support the
        // variant's instructions; the functions touch only `data` and keys.
        unsafe {
            match self.variant {
                XtsVariant::Aesni => sse::encrypt(keys, unit, data),
                XtsVariant::AesniAvx => avx::encrypt(keys, unit, data),
                XtsVariant::VaesAvx2 => encrypt_256(keys, unit, data),
                XtsVariant::Vaes512 => encrypt_512(keys, unit, data),
            }
        }
        Ok(())
    }
}

/// The portable reference: IEEE 1619 5.3.1 block by block with
/// [`soft::encrypt_block_256`] and the tweak doubled as a u128.
pub fn soft_encrypt_unit(keys: &XtsKeys, unit: u128, data: &mut [u8]) -> Result<(), PartialBlock> {
    if !data.len().is_multiple_of(BLOCK) {
        return Err(PartialBlock { len: data.len() });
    }
    let mut t = unit.to_le_bytes();
    soft::encrypt_block_256(&keys.tweak, &mut t);
    let mut t = u128::from_le_bytes(t);
    for block in data.chunks_exact_mut(BLOCK) {
        let tb = t.to_le_bytes();
        let mut s = [0u8; 16];
        for ((s, d), t) in s.iter_mut().zip(block.iter()).zip(tb) {
            *s = d ^ t;
        }
        soft::encrypt_block_256(&keys.data, &mut s);
        for ((d, s), t) in block.iter_mut().zip(s).zip(tb) {
            *d = s ^ t;
        }
        t = mul_alpha(t);
    }
    Ok(())
}

/// Multiply a tweak by alpha: IEEE 1619 5.2 on the little-endian value.
pub fn mul_alpha(t: u128) -> u128 {
    (t << 1) ^ ((t >> 127) * 0x87)
}

/// Multiply each 128-bit lane of `$t` by alpha^`$k` (1 <= k <= 57): shift
/// the lane left by k bits and fold the k bits shifted out of the top back
/// in times 0x87 (x^7 + x^2 + x + 1), spelled as shifts and XORs. `$p` is
/// the intrinsic prefix (`_mm`, `_mm256`, `_mm512`), `$si` its integer
/// type suffix, `$lo` an all-ones mask on the low qword of every lane.
macro_rules! mul_alpha_k {
    ($p:ident, $t:expr, $k:literal, $lo:expr) => {{
        paste_ops!($p, $t, $k, $lo)
    }};
}

/// The body of [`mul_alpha_k`] per register width.
macro_rules! paste_ops {
    (xmm, $t:expr, $k:literal, $lo:expr) => {{
        let t = $t;
        let sl = _mm_slli_epi64::<$k>(t);
        let sw = _mm_shuffle_epi32::<0x4e>(_mm_srli_epi64::<{ 64 - $k }>(t));
        let red = _mm_xor_si128(
            _mm_xor_si128(_mm_slli_epi64::<1>(sw), _mm_slli_epi64::<2>(sw)),
            _mm_slli_epi64::<7>(sw),
        );
        _mm_xor_si128(_mm_xor_si128(sl, sw), _mm_and_si128(red, $lo))
    }};
    (ymm, $t:expr, $k:literal, $lo:expr) => {{
        let t = $t;
        let sl = _mm256_slli_epi64::<$k>(t);
        let sw = _mm256_shuffle_epi32::<0x4e>(_mm256_srli_epi64::<{ 64 - $k }>(t));
        let red = _mm256_xor_si256(
            _mm256_xor_si256(_mm256_slli_epi64::<1>(sw), _mm256_slli_epi64::<2>(sw)),
            _mm256_slli_epi64::<7>(sw),
        );
        _mm256_xor_si256(_mm256_xor_si256(sl, sw), _mm256_and_si256(red, $lo))
    }};
    (zmm, $t:expr, $k:literal, $lo:expr) => {{
        let t = $t;
        let sl = _mm512_slli_epi64::<$k>(t);
        let sw = _mm512_shuffle_epi32::<0x4e>(_mm512_srli_epi64::<{ 64 - $k }>(t));
        let red = _mm512_xor_si512(
            _mm512_xor_si512(_mm512_slli_epi64::<1>(sw), _mm512_slli_epi64::<2>(sw)),
            _mm512_slli_epi64::<7>(sw),
        );
        _mm512_xor_si512(_mm512_xor_si512(sl, sw), _mm512_and_si512(red, $lo))
    }};
}

/// Load an AES-256 schedule into XMM registers.
macro_rules! load_keys_256 {
    ($rk:expr) => {{
        let mut k = [_mm_setzero_si128(); 15];
        for (k, bytes) in k.iter_mut().zip($rk.0.iter()) {
            *k = _mm_loadu_si128(bytes.as_ptr().cast());
        }
        k
    }};
}

/// Encrypt one XMM block with 14 rounds.
macro_rules! encrypt1_256 {
    ($k:expr, $x:expr) => {{
        let k = &$k;
        let mut x = _mm_xor_si128($x, k[0]);
        let mut r = 1;
        while r < 14 {
            x = _mm_aesenc_si128(x, k[r]);
            r += 1;
        }
        _mm_aesenclast_si128(x, k[14])
    }};
}

/// Blocks left after the wide batches: one at a time with tweak `$t`
/// (an XMM register), doubling it after each block.
macro_rules! xts_tail {
    ($k:expr, $t:expr, $data:expr, $lo:expr) => {{
        let mut t = $t;
        for block in $data.chunks_exact_mut(16) {
            let p = block.as_mut_ptr().cast::<__m128i>();
            let x = _mm_xor_si128(_mm_loadu_si128(p), t);
            let x = encrypt1_256!($k, x);
            _mm_storeu_si128(p, _mm_xor_si128(x, t));
            t = mul_alpha_k!(xmm, t, 1, $lo);
        }
    }};
}

macro_rules! xts_xmm_flavor {
    ($name:ident, $features:literal) => {
        mod $name {
            use super::XtsKeys;
            use crate::workloads::aes::ni::round8;
            use core::arch::x86_64::*;

            /// Blocks in flight.
            const LANES: usize = 8;

            /// # Safety
            /// The CPU must support the features this is compiled for;
            /// `data.len()` must be a multiple of 16.
            #[target_feature(enable = $features)]
            #[inline(never)]
            pub(super) unsafe fn encrypt(keys: &XtsKeys, unit: u128, data: &mut [u8]) {
                // SAFETY: the caller upholds this function's contract (the CPU
                // features it is compiled for, and the pointers and lengths it is
                // given), which is all its intrinsics and pointer accesses rely on.
                unsafe {
                    let k = load_keys_256!(keys.data);
                    let kt = load_keys_256!(keys.tweak);
                    let lo = _mm_set_epi64x(0, -1);
                    let u = unit.to_le_bytes();
                    let t0 = encrypt1_256!(kt, _mm_loadu_si128(u.as_ptr().cast()));
                    let mut t0b = [0u8; 16];
                    _mm_storeu_si128(t0b.as_mut_ptr().cast(), t0);
                    // The tweaks live in general-purpose registers: their
                    // doubling (shift, carry times 0x87) runs on the integer
                    // ALUs, and they reach the blocks through memory
                    // operands (load ports), so the vector pipes that run
                    // `aesenc` see one XOR per block besides the rounds.
                    let mut t = u128::from_le_bytes(t0b);
                    // Round keys 0 and 14 are folded into the stored
                    // tweaks: the input XOR and the first AddRoundKey are
                    // one XOR, and the output XOR rides in `aesenclast`
                    // (`aesenclast(x, k14 ^ T) = aesenclast(x, k14) ^ T`).
                    let k0 = u128::from_le_bytes(keys.data.0[0]);
                    let k14 = u128::from_le_bytes(keys.data.0[14]);
                    let mut chunks = data.chunks_exact_mut(16 * LANES);
                    for chunk in &mut chunks {
                        let p = chunk.as_mut_ptr().cast::<__m128i>();
                        let mut first = [0u128; LANES];
                        let mut last = [0u128; LANES];
                        for (f, l) in first.iter_mut().zip(last.iter_mut()) {
                            *f = t ^ k0;
                            *l = t ^ k14;
                            t = super::mul_alpha(t);
                        }
                        let mut b = [_mm_setzero_si128(); LANES];
                        for (i, b) in b.iter_mut().enumerate() {
                            let f = _mm_loadu_si128(first.as_ptr().add(i).cast());
                            *b = _mm_xor_si128(_mm_loadu_si128(p.add(i)), f);
                        }
                        const _: () = assert!(LANES == 8, "round8! takes eight blocks");
                        for kr in &k[1..14] {
                            round8!($name, *kr, b);
                        }
                        for (i, b) in b.iter().enumerate() {
                            let l = _mm_loadu_si128(last.as_ptr().add(i).cast());
                            _mm_storeu_si128(p.add(i), _mm_aesenclast_si128(*b, l));
                        }
                    }
                    let tb = t.to_le_bytes();
                    let tw = _mm_loadu_si128(tb.as_ptr().cast());
                    xts_tail!(k, tw, chunks.into_remainder(), lo);
                }
            }
        }
    };
}

// No `avx` here: this must stay legacy-SSE-encoded (see `ni`).
xts_xmm_flavor!(sse, "aes,pclmulqdq,sse2,ssse3,sse4.1");
xts_xmm_flavor!(avx, "aes,pclmulqdq,avx");

use core::arch::x86_64::*;

/// Registers of blocks in flight in the VAES variants.
const REGS: usize = 8;

/// # Safety
/// The CPU must support VAES, AVX2 and AES-NI and XCR0 must enable AVX
/// state; `data.len()` must be a multiple of 16.
#[target_feature(enable = "vaes,avx2,aes")]
#[inline(never)]
unsafe fn encrypt_256(keys: &XtsKeys, unit: u128, data: &mut [u8]) {
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
        let u = unit.to_le_bytes();
        let t0 = encrypt1_256!(kt, _mm_loadu_si128(u.as_ptr().cast()));
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
unsafe fn encrypt_512(keys: &XtsKeys, unit: u128, data: &mut [u8]) {
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
        let u = unit.to_le_bytes();
        let t0 = encrypt1_256!(kt, _mm_loadu_si128(u.as_ptr().cast()));
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
