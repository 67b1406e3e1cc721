//! XTS-AES-256 (IEEE 1619, NIST SP 800-38E) encryption of whole-block data
//! units, the way disk encryption uses it: one data unit per message, the
//! tweak is the unit's sequence number (the sector), encrypted with the
//! second key, and multiplied by alpha (x in GF(2^128)) for every block.
//!
//! Four variants, as the seed thread on VAES measured them: `aesni`
//! (legacy-SSE `aesenc`), `aesni-avx` (the same code VEX-encoded),
//! `vaes-avx2` (two blocks per YMM register) and `vaes-512` (four per ZMM).
//! Each keeps 8 registers of blocks in flight. The XMM variants run each
//! batch of eight blocks as one `asm!` block (the blocks, the round key and
//! the tweaks do not fit sixteen XMM registers, and the compiler shuffled
//! and reloaded them between rounds), double their tweaks in
//! general-purpose registers (integer ALUs, not the vector pipes `aesenc`
//! runs on) two batches ahead, between the rounds of the batch in flight,
//! store them plain (two 8-byte stores each) and read them as memory
//! operands, with round keys 0 and 14 held in registers; a message's
//! first two batches take theirs from the tweak encryption in vector
//! registers. On Zen 3 the tweak work done between batches (not inside
//! them) cost a fifth of the throughput, a batch's loads of stores made
//! one batch earlier a third, and storing each tweak twice (pre-XORed
//! with round keys 0 and 14) made the slow spells, when the core's store
//! throughput halves for seconds at a time, a fifth slower. Doubling in
//! vector registers with one 16-byte store per tweak instead stayed below
//! 5700 MB/s even in quiet spells: it takes the pipes `aesenc` needs (a
//! later try, x^16 per tweak with `pclmulqdq`, ran at 0.83-0.87x of this
//! code). What the in-batch doubling still costs: without it (wrong
//! output, timing only) a batch ran 19-24% faster, near the AES units'
//! own rate of two `aesenc` per cycle.
//! The VAES variants keep a batch's tweaks in registers and advance them
//! by alpha^(blocks per batch) with shifts and XORs.
//!
//! Data units must be a whole number of blocks (disk sectors are):
//! ciphertext stealing is not implemented, and a partial unit is an error.

use super::key::BLOCK;
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

    /// What the CPU and XCR0 must provide.
    pub fn requirements(self) -> &'static [Requirement] {
        use Requirement::*;
        match self {
            XtsVariant::Aesni => &[Sse2, AesNi],
            XtsVariant::AesniAvx => &[Avx, AesNi],
            XtsVariant::VaesAvx2 => &[Avx, AesNi, Avx2, Vaes],
            XtsVariant::Vaes512 => &[Avx, AesNi, Avx2, Vaes, Avx512f],
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

mod tweak;
// After the macros above: both modules expand them.
mod vaes;
mod xmm;

pub use tweak::{mul_alpha, mul_alpha_pow, XtsKeys};

use vaes::{encrypt_256, encrypt_512};
use xmm::{avx, sse};
