//! AES-128 with AES-NI (legacy SSE and VEX encodings) and VAES (256- and
//! 512-bit registers), CBC and CTR.
//!
//! The encodings are the point: illumos marked AVX upper state live in new
//! threads, and legacy-SSE-encoded `aesenc` then ran 3x slower on Skylake
//! (a false dependency on the dirty upper halves). `aesni-sse` is compiled
//! without AVX so it really is `aesenc`/`aeskeygenassist`, the instructions
//! OpenSSL's `aes-128-cbc` uses; `aesni-avx` is the same algorithm as
//! `vaesenc xmm`; `vaes-256`/`vaes-512` run 2 or 4 blocks per instruction.
//!
//! CBC encryption is serial (each block waits for the previous one), so it
//! measures `aesenc` latency; CTR interleaves 8 registers of independent
//! blocks and measures throughput.
//!
//! The modes the seed thread on VAES measures live beside them: [`xts`]
//! (XTS-AES-256, four variants), [`gcm`] with [`ghash`] (AES-128-GCM, three
//! variants), their known answers in [`kat_modes`], and [`borrow`], the
//! XRSTOR + XSAVE pair a kernel pays to borrow the vector registers.

pub mod borrow;
pub mod gcm;
mod gcm_xmm;
pub mod ghash;
pub mod kat;
pub mod kat_modes;
mod key;
mod ni;
pub mod soft;
mod vaes;
pub mod xts;

use super::features::{CpuFeatures, Requirement};
use super::text::Reason;

pub use key::{RoundKeys, RoundKeys256, BLOCK};

/// An implementation of AES-128.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AesVariant {
    /// AES-NI on XMM registers, legacy SSE encoding (`aesenc`).
    AesniSse,
    /// AES-NI on XMM registers, VEX encoding (`vaesenc xmm`).
    AesniAvx,
    /// VAES on YMM registers: 2 blocks per instruction.
    Vaes256,
    /// VAES on ZMM registers: 4 blocks per instruction.
    Vaes512,
}

impl AesVariant {
    /// Every variant, in report order.
    pub const ALL: [AesVariant; 4] = [
        AesVariant::AesniSse,
        AesVariant::AesniAvx,
        AesVariant::Vaes256,
        AesVariant::Vaes512,
    ];

    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            AesVariant::AesniSse => "aesni-sse",
            AesVariant::AesniAvx => "aesni-avx",
            AesVariant::Vaes256 => "vaes-256",
            AesVariant::Vaes512 => "vaes-512",
        }
    }

    /// What the CPU and XCR0 must provide. VAES on YMM needs AVX2 as well
    /// (the counter arithmetic is 256-bit integer code); on ZMM it needs
    /// AVX512F and the AVX-512 state components.
    pub fn requirements(self) -> &'static [Requirement] {
        use Requirement::*;
        match self {
            AesVariant::AesniSse => &[Sse2, AesNi],
            AesVariant::AesniAvx => &[Avx, AesNi],
            AesVariant::Vaes256 => &[Avx, AesNi, Avx2, Vaes],
            AesVariant::Vaes512 => &[Avx, AesNi, Avx2, Vaes, Avx512f],
        }
    }
}

/// `data.len()` was not a multiple of the block size in a mode that needs
/// whole blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialBlock {
    /// The length given.
    pub len: usize,
}

impl core::fmt::Display for PartialBlock {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} bytes is not a whole number of AES blocks", self.len)
    }
}

/// AES-128 with one [`AesVariant`], constructed only once the CPU is known
/// to run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aes128 {
    variant: AesVariant,
}

impl Aes128 {
    /// The variant, if both `feat` (the caller's policy) and this CPU
    /// ([`CpuFeatures::detect`]) allow it; otherwise why not.
    pub fn new(variant: AesVariant, feat: &CpuFeatures) -> Result<Self, Reason> {
        feat.intersect(&CpuFeatures::detect())
            .check(variant.requirements())?;
        Ok(Aes128 { variant })
    }

    /// Like [`Aes128::new`] for features already intersected with
    /// [`CpuFeatures::detect`] (saves the CPUID exits in a guest).
    pub(crate) fn with_detected(variant: AesVariant, usable: &CpuFeatures) -> Result<Self, Reason> {
        usable.check(variant.requirements())?;
        Ok(Aes128 { variant })
    }

    /// The implementation this instance runs.
    pub fn variant(&self) -> AesVariant {
        self.variant
    }

    /// FIPS-197 key expansion with AESKEYGENASSIST (legacy-encoded for
    /// `aesni-sse`, VEX-encoded otherwise).
    pub fn expand_key(&self, key: &[u8; 16]) -> RoundKeys {
        let mut rk = RoundKeys([[0; 16]; 11]);
        // SAFETY: `new` checked that the CPU and XCR0 support the variant's
        // instructions.
        unsafe {
            match self.variant {
                AesVariant::AesniSse => ni::sse::expand_key(key, &mut rk),
                _ => ni::avx::expand_key(key, &mut rk),
            }
        }
        rk
    }

    /// CBC encryption in place; `iv` becomes the last ciphertext block so
    /// consecutive calls continue one stream (as `openssl speed` does).
    /// CBC is serial, so the VAES variants use VEX-encoded XMM code here.
    pub fn cbc_encrypt(
        &self,
        rk: &RoundKeys,
        iv: &mut [u8; 16],
        data: &mut [u8],
    ) -> Result<(), PartialBlock> {
        if data.len() & (BLOCK - 1) != 0 {
            return Err(PartialBlock { len: data.len() });
        }
        // SAFETY: as in `expand_key`; the functions touch only `data`,
        // `iv` and `rk`.
        unsafe {
            match self.variant {
                AesVariant::AesniSse => ni::sse::cbc_encrypt(rk, iv, data),
                _ => ni::avx::cbc_encrypt(rk, iv, data),
            }
        }
        Ok(())
    }

    /// CTR encryption (= decryption) in place with a 128-bit big-endian
    /// counter (SP 800-38A's standard incrementing function over the whole
    /// block). `ctr` advances by one per block, a final partial block
    /// included (its unused keystream is discarded).
    pub fn ctr_xor(&self, rk: &RoundKeys, ctr: &mut [u8; 16], data: &mut [u8]) {
        // SAFETY: as in `expand_key`.
        unsafe {
            match self.variant {
                AesVariant::AesniSse => ni::sse::ctr_xor(rk, ctr, data),
                AesVariant::AesniAvx => ni::avx::ctr_xor(rk, ctr, data),
                AesVariant::Vaes256 => vaes::ctr_xor_256(rk, ctr, data),
                AesVariant::Vaes512 => vaes::ctr_xor_512(rk, ctr, data),
            }
        }
    }
}

#[cfg(test)]
mod tests;
