//! The XMM variants (`aesni`, `aesni-avx`): each batch of eight blocks as
//! one `asm!` block, with the next-but-one batch's tweaks doubled in
//! general-purpose registers between its rounds (why: the module
//! documentation of [`super`]). The asm text is built by macros, one
//! flavour per encoding.
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

/// Batches 0 and 1's tweaks, from the tweak just encrypted (`$t0`), side
/// by side in vector registers: batch 0's stored at `$tweaks` and
/// returned XORed with round key 0 (`$k0x`), for the first batch's
/// registers; batch 1's stored after them (16-byte stores forward). A
/// macro so that it expands into the flavour's `encrypt` as the code it
/// was: the setup before the batch loop, kept in the same function.
macro_rules! xts_first_tweaks {
    ($t0:expr, $k0x:expr, $tweaks:expr) => {{
        let (t0, k0x, tweaks) = ($t0, $k0x, $tweaks);
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
        tk0
    }};
}

macro_rules! xts_xmm_flavor {
    ($name:ident, $features:literal) => {
        pub(super) mod $name {
            use crate::workloads::aes::xts::tweak::{mul_alpha_pow, XtsKeys};
            use crate::workloads::aes::xts::xmm::Tweaks;
            use core::arch::x86_64::*;

            /// Blocks in flight.
            const LANES: usize = 8;

            /// # Safety
            /// The CPU must support the features this is compiled for;
            /// `data.len()` must be a multiple of 16.
            #[target_feature(enable = $features)]
            #[inline(never)]
            pub(crate) unsafe fn encrypt(keys: &XtsKeys, unit: u128, data: &mut [u8]) {
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
                    let mut tweaks = core::mem::MaybeUninit::<[Tweaks; 3]>::uninit();
                    let tweaks = tweaks.as_mut_ptr().cast::<Tweaks>();
                    // Batch 2's first tweak, in general-purpose registers
                    // (see `xts_fill_text`).
                    let t16 = mul_alpha_pow(t, 2 * LANES as u32);
                    let (mut tlo, mut thi) = (t16 as u64, (t16 >> 64) as u64);
                    if let Some(chunk0) = chunks.next() {
                        let tk0 = xts_first_tweaks!(t0, k0x, tweaks);
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
