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

/// Multiply a tweak by alpha^`k` (1 <= k <= 120) in one step: the `k` bits
/// shifted out of the top come back times x^7 + x^2 + x + 1. A jump of
/// several doublings costs one doubling's latency.
pub fn mul_alpha_pow(t: u128, k: u32) -> u128 {
    debug_assert!((1..=120).contains(&k));
    let c = t >> (128 - k);
    (t << k) ^ c ^ (c << 1) ^ (c << 2) ^ (c << 7)
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

/// Rounds 1..=13 on xmm0..xmm7, then the eight blocks out (asm text
/// shared by [`xts_batch`] and [`xts_first_batch`]). Rounds 1..=8 each
/// carry one of the next-but-one batch's tweaks ([`xts_fill_text`]), so that
/// integer work is dispatched beside the `aesenc`s instead of queueing
/// behind a whole batch of them.
macro_rules! xts_rounds_and_out_text {
    ($f_:ident) => {
        concat!(
            xts_round_text!($f_, "16"),
            xts_fill_text!("0", "8"),
            xts_round_text!($f_, "32"),
            xts_fill_text!("16", "24"),
            xts_round_text!($f_, "48"),
            xts_fill_text!("32", "40"),
            xts_round_text!($f_, "64"),
            xts_fill_text!("48", "56"),
            xts_round_text!($f_, "80"),
            xts_fill_text!("64", "72"),
            xts_round_text!($f_, "96"),
            xts_fill_text!("80", "88"),
            xts_round_text!($f_, "112"),
            xts_fill_text!("96", "104"),
            xts_round_text!($f_, "128"),
            xts_fill_text!("112", "120"),
            xts_round_text!($f_, "144"),
            xts_round_text!($f_, "160"),
            xts_round_text!($f_, "176"),
            xts_round_text!($f_, "192"),
            xts_round_text!($f_, "208"),
            xts_io_text!($f_, out, "xmm0", "0"),
            xts_io_text!($f_, out, "xmm1", "16"),
            xts_io_text!($f_, out, "xmm2", "32"),
            xts_io_text!($f_, out, "xmm3", "48"),
            xts_io_text!($f_, out, "xmm4", "64"),
            xts_io_text!($f_, out, "xmm5", "80"),
            xts_io_text!($f_, out, "xmm6", "96"),
            xts_io_text!($f_, out, "xmm7", "112"),
        )
    };
}

/// One of the next-but-one batch's tweaks, in general-purpose registers (integer
/// ALUs, not the vector pipes `aesenc` runs on): the tweak `{hi}:{lo}` is
/// stored as it is into `{nf}` at byte offsets `$lo`/`$hi`, then multiplied
/// by alpha: `add`/`adc` carry the low qword's top bit into the high one,
/// and the high qword's top bit selects 0x87. Two stores per tweak and no
/// loads: round keys 0 and 14 are applied from registers instead
/// ([`xts_io_text`]), because store throughput is what varies on these
/// machines (measured natively on Zen 3: a loop of plain 8-byte stores ran
/// at 2.6-5.1 G/s from one 100 ms to the next, a pure ALU chain within
/// 3%).
macro_rules! xts_fill_text {
    ($lo:literal, $hi:literal) => {
        concat!(
            "mov [{nf} + ",
            $lo,
            "], {lo}\n",
            "mov [{nf} + ",
            $hi,
            "], {hi}\n",
            "mov {m}, {hi}\n",
            "sar {m}, 63\n",
            "and {m}, 0x87\n",
            "add {lo}, {lo}\n",
            "adc {hi}, {hi}\n",
            "xor {lo}, {m}\n",
        )
    };
}

/// Block `$i` in for the first batch: the tweak ^ k0 is already in the
/// register; XOR the data block into it.
macro_rules! xts_in_reg_text {
    (sse, $x:literal, $off:literal) => {
        concat!("movdqu xmm8, [{p} + ", $off, "]\n", "pxor ", $x, ", xmm8\n")
    };
    (avx, $x:literal, $off:literal) => {
        concat!("vpxor ", $x, ", ", $x, ", [{p} + ", $off, "]\n")
    };
}

/// [`xts_batch`] for a message's first batch, whose tweaks (^ round key
/// 0) arrive in registers `$t[0..8]` straight from the tweak encryption
/// instead of through memory: one store-to-load trip fewer on the path
/// every message waits on. `$f` holds the same tweaks (without round key
/// 0) for the way out.
macro_rules! xts_first_batch {
    ($f_:ident, $p:expr, $t:expr, $f:expr, $k:expr, $nf:expr, $lo:expr, $hi:expr, $k0:expr, $k14:expr) => {
        core::arch::asm!(
            concat!(
                xts_in_reg_text!($f_, "xmm0", "0"), xts_in_reg_text!($f_, "xmm1", "16"),
                xts_in_reg_text!($f_, "xmm2", "32"), xts_in_reg_text!($f_, "xmm3", "48"),
                xts_in_reg_text!($f_, "xmm4", "64"), xts_in_reg_text!($f_, "xmm5", "80"),
                xts_in_reg_text!($f_, "xmm6", "96"), xts_in_reg_text!($f_, "xmm7", "112"),
                xts_rounds_and_out_text!($f_),
            ),
            p = in(reg) $p, f = in(reg) $f, k = in(reg) $k, nf = in(reg) $nf,
            lo = inout(reg) $lo, hi = inout(reg) $hi, m = out(reg) _,
            inout("xmm0") $t[0] => _, inout("xmm1") $t[1] => _,
            inout("xmm2") $t[2] => _, inout("xmm3") $t[3] => _,
            inout("xmm4") $t[4] => _, inout("xmm5") $t[5] => _,
            inout("xmm6") $t[6] => _, inout("xmm7") $t[7] => _,
            out("xmm8") _, in("xmm9") $k0, in("xmm10") $k14,
            options(nostack),
        )
    };
}

/// A batch's stored tweaks: 16-aligned for legacy-SSE memory operands.
#[repr(C, align(16))]
struct Tweaks([u128; 8]);

/// One AES round on blocks xmm0..xmm7 with the round key at byte offset
/// `$off` of `{k}`, loaded once into xmm8 (asm text for [`xts_batch`]).
macro_rules! xts_round_text {
    (sse, $off:literal) => {
        concat!(
            "movdqa xmm8, [{k} + ",
            $off,
            "]\n",
            "aesenc xmm0, xmm8\n",
            "aesenc xmm1, xmm8\n",
            "aesenc xmm2, xmm8\n",
            "aesenc xmm3, xmm8\n",
            "aesenc xmm4, xmm8\n",
            "aesenc xmm5, xmm8\n",
            "aesenc xmm6, xmm8\n",
            "aesenc xmm7, xmm8\n",
        )
    };
    (avx, $off:literal) => {
        concat!(
            "vmovdqa xmm8, [{k} + ",
            $off,
            "]\n",
            "vaesenc xmm0, xmm0, xmm8\n",
            "vaesenc xmm1, xmm1, xmm8\n",
            "vaesenc xmm2, xmm2, xmm8\n",
            "vaesenc xmm3, xmm3, xmm8\n",
            "vaesenc xmm4, xmm4, xmm8\n",
            "vaesenc xmm5, xmm5, xmm8\n",
            "vaesenc xmm6, xmm6, xmm8\n",
            "vaesenc xmm7, xmm7, xmm8\n",
        )
    };
}

/// Block `$i` in (data at `{p}` XOR stored tweak at `{f}` XOR round key 0
/// in xmm9) and out (`aesenclast` with round key 14 in xmm10, XOR the
/// stored tweak at `{f}`, stored to `{p}`).
macro_rules! xts_io_text {
    (sse, in, $x:literal, $off:literal) => {
        concat!(
            "movdqu ",
            $x,
            ", [{p} + ",
            $off,
            "]\n",
            "pxor ",
            $x,
            ", [{f} + ",
            $off,
            "]\n",
            "pxor ",
            $x,
            ", xmm9\n",
        )
    };
    (avx, in, $x:literal, $off:literal) => {
        concat!(
            "vpxor ",
            $x,
            ", xmm9, [{f} + ",
            $off,
            "]\n",
            "vpxor ",
            $x,
            ", ",
            $x,
            ", [{p} + ",
            $off,
            "]\n",
        )
    };
    (sse, out, $x:literal, $off:literal) => {
        concat!(
            "aesenclast ",
            $x,
            ", xmm10\n",
            "pxor ",
            $x,
            ", [{f} + ",
            $off,
            "]\n",
            "movdqu [{p} + ",
            $off,
            "], ",
            $x,
            "\n",
        )
    };
    (avx, out, $x:literal, $off:literal) => {
        concat!(
            "vaesenclast ",
            $x,
            ", ",
            $x,
            ", xmm10\n",
            "vpxor ",
            $x,
            ", ",
            $x,
            ", [{f} + ",
            $off,
            "]\n",
            "vmovdqu [{p} + ",
            $off,
            "], ",
            $x,
            "\n",
        )
    };
}

/// One whole batch of eight blocks (128 bytes at `$p`, in place) as a
/// single `asm!` block: in with the stored tweaks at `$f` and round key 0
/// (`$k0`), 13 rounds with the 16-aligned round keys at `$k` (each loaded
/// once into xmm8), out with round key 14 (`$k14`) and the stored tweaks
/// again; meanwhile the tweaks of the next-but-one batch go to `$nf`. Why
/// one block: left to the compiler, the batch's eight blocks, round key
/// and stored tweaks exceed the sixteen XMM registers and it shuffles and
/// reloads them between rounds.
macro_rules! xts_batch {
    ($f_:ident, $p:expr, $f:expr, $k:expr, $nf:expr, $lo:expr, $hi:expr, $k0:expr, $k14:expr) => {
        core::arch::asm!(
            concat!(
                xts_io_text!($f_, in, "xmm0", "0"), xts_io_text!($f_, in, "xmm1", "16"),
                xts_io_text!($f_, in, "xmm2", "32"), xts_io_text!($f_, in, "xmm3", "48"),
                xts_io_text!($f_, in, "xmm4", "64"), xts_io_text!($f_, in, "xmm5", "80"),
                xts_io_text!($f_, in, "xmm6", "96"), xts_io_text!($f_, in, "xmm7", "112"),
                xts_rounds_and_out_text!($f_),
            ),
            p = in(reg) $p, f = in(reg) $f, k = in(reg) $k, nf = in(reg) $nf,
            lo = inout(reg) $lo, hi = inout(reg) $hi, m = out(reg) _,
            out("xmm0") _, out("xmm1") _, out("xmm2") _, out("xmm3") _,
            out("xmm4") _, out("xmm5") _, out("xmm6") _, out("xmm7") _, out("xmm8") _,
            in("xmm9") $k0, in("xmm10") $k14,
            options(nostack),
        )
    };
}

macro_rules! xts_xmm_flavor {
    ($name:ident, $features:literal) => {
        mod $name {
            use super::XtsKeys;
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
                    let kt = load_keys_256!(keys.tweak);
                    // The sequence number straight from general-purpose
                    // registers: through memory it would be a 16-byte load
                    // of two 8-byte stores, which cannot be forwarded, at
                    // the head of every message's critical path.
                    let u = _mm_set_epi64x((unit >> 64) as i64, unit as i64);
                    let t0 = encrypt1_256!(kt, u);
                    let mut t0b = [0u8; 16];
                    _mm_storeu_si128(t0b.as_mut_ptr().cast(), t0);
                    let t = u128::from_le_bytes(t0b);
                    let rk = &keys.data.0;
                    let k0x = _mm_loadu_si128(rk[0].as_ptr().cast());
                    let k14x = _mm_loadu_si128(rk[14].as_ptr().cast());
                    let mut chunks = data.chunks_exact_mut(16 * LANES);
                    let n = chunks.len();
                    // Three batches' stored tweaks: each batch stores
                    // the one after next's, so a batch's loads come a
                    // whole batch after the 8-byte stores they read (a
                    // 16-byte load of two 8-byte stores cannot be
                    // forwarded; it waits until they reach the cache).
                    let mut tweaks = core::mem::MaybeUninit::<[super::Tweaks; 3]>::uninit();
                    let tweaks = tweaks.as_mut_ptr().cast::<super::Tweaks>();
                    // Batch 2's first tweak, in general-purpose registers
                    // (see `xts_fill_text`).
                    let t16 = super::mul_alpha_pow(t, 2 * LANES as u32);
                    let (mut tlo, mut thi) = (t16 as u64, (t16 >> 64) as u64);
                    if let Some(chunk0) = chunks.next() {
                        let lo = _mm_set_epi64x(0, -1);
                        // Batches 0 and 1 take their tweaks from the tweak
                        // just encrypted, computed side by side in vector
                        // registers: batch 0's in registers (^ round key
                        // 0) and stored, batch 1's stored (16-byte stores
                        // forward).
                        // Doubling in four vector operations: the carries
                        // out of each qword's top bit, moved to where they
                        // land (0x87 into the low qword, 1 into the high).
                        let carries = _mm_set_epi32(0, 1, 0, 0x87);
                        let double = |t: __m128i| {
                            let c = _mm_srai_epi32::<31>(_mm_shuffle_epi32::<0x13>(t));
                            _mm_xor_si128(_mm_add_epi64(t, t), _mm_and_si128(c, carries))
                        };
                        // A batch's eight tweaks from four jumps two
                        // doublings apart: two levels deep, not a chain of
                        // seven, so the batch's last block starts a few
                        // cycles after its first, with the AES units
                        // waiting on it.
                        let eight = |j: [__m128i; 4]| {
                            [
                                j[0],
                                double(j[0]),
                                j[1],
                                double(j[1]),
                                j[2],
                                double(j[2]),
                                j[3],
                                double(j[3]),
                            ]
                        };
                        let tw = eight([
                            t0,
                            mul_alpha_k!(xmm, t0, 2, lo),
                            mul_alpha_k!(xmm, t0, 4, lo),
                            mul_alpha_k!(xmm, t0, 6, lo),
                        ]);
                        let f0 = tweaks.cast::<__m128i>();
                        let mut tk0 = [_mm_setzero_si128(); LANES];
                        for (i, (tw, tk0)) in tw.iter().zip(tk0.iter_mut()).enumerate() {
                            *tk0 = _mm_xor_si128(*tw, k0x);
                            _mm_store_si128(f0.add(i), *tw);
                        }
                        let tw = eight([
                            mul_alpha_k!(xmm, t0, 8, lo),
                            mul_alpha_k!(xmm, t0, 10, lo),
                            mul_alpha_k!(xmm, t0, 12, lo),
                            mul_alpha_k!(xmm, t0, 14, lo),
                        ]);
                        let f1 = tweaks.add(1).cast::<__m128i>();
                        for (i, tw) in tw.iter().enumerate() {
                            _mm_store_si128(f1.add(i), *tw);
                        }
                        const _: () = assert!(LANES == 8, "xts_first_batch! takes eight blocks");
                        xts_first_batch!(
                            $name,
                            chunk0.as_mut_ptr(),
                            tk0,
                            tweaks,
                            rk.as_ptr(),
                            tweaks.add(2),
                            tlo,
                            thi,
                            k0x,
                            k14x
                        );
                    }
                    // Batch i reads buffer i % 3 and fills (i + 2) % 3.
                    let (mut cur, mut fill) = (1usize, 0usize);
                    for chunk in &mut chunks {
                        // The last two batches fill tweaks nobody reads
                        // but the tail: cheaper than other copies of the
                        // batch.
                        xts_batch!(
                            $name,
                            chunk.as_mut_ptr(),
                            tweaks.add(cur),
                            rk.as_ptr(),
                            tweaks.add(fill),
                            tlo,
                            thi,
                            k0x,
                            k14x
                        );
                        cur = if cur == 2 { 0 } else { cur + 1 };
                        fill = if fill == 2 { 0 } else { fill + 1 };
                    }
                    let rest = chunks.into_remainder();
                    if !rest.is_empty() {
                        let k = load_keys_256!(keys.data);
                        let lo = _mm_set_epi64x(0, -1);
                        // The tail's tweak: the first of batch n's, stored
                        // by batch n - 2 (or before batch 0), or the unit's
                        // own.
                        let tw = if n == 0 {
                            t0
                        } else {
                            _mm_load_si128(tweaks.add(n % 3).cast())
                        };
                        xts_tail!(k, tw, rest, lo);
                    }
                }
            }
        }
    };
}

// No `avx` here: this must stay legacy-SSE-encoded (see `ni`).
xts_xmm_flavor!(sse, "aes,sse2,ssse3,sse4.1");
xts_xmm_flavor!(avx, "aes,avx");

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
