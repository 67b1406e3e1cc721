//! AES-128-GCM encryption with a 96-bit IV (NIST SP 800-38D): CTR from
//! `J0 + 1`, then GHASH over the AAD, the ciphertext and the length block,
//! and the tag `E_K(J0) ^ S`.
//!
//! Three variants: `aesni-pclmul` (VEX AES-NI + PCLMULQDQ on XMM),
//! `vaes-vpclmul-256` and `vaes-vpclmul-512` (VAES + VPCLMULQDQ on YMM and
//! ZMM). `aesni-pclmul` stitches the counter and the hash into one loop
//! (module `gcm_xmm`); the VAES variants run them as two passes over the
//! message (the message sizes here, up to 64 KiB, stay in L2), the CTR
//! pass being the variant's [`Aes128::ctr_xor`], whose 128-bit increment
//! equals GCM's `inc32` because a 96-bit IV starts the low word at 2 and
//! a message is at most `2^32 - 2` blocks.

use super::gcm_xmm;
use super::ghash::{self, Ghash, GhashKey, GhashPath};
use super::key::RoundKeys;
use super::{soft, Aes128, AesVariant};
use crate::workloads::features::{CpuFeatures, Requirement};
use crate::workloads::text::Reason;

/// The longest plaintext GCM allows: `2^32 - 2` blocks (SP 800-38D 5.2.1.1).
pub const MAX_LEN: u64 = ((1u64 << 32) - 2) * 16;

/// An implementation of AES-128-GCM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcmVariant {
    /// AES-NI (VEX) and PCLMULQDQ on XMM registers.
    AesniPclmul,
    /// VAES and VPCLMULQDQ on YMM registers.
    Vaes256,
    /// VAES and VPCLMULQDQ on ZMM registers.
    Vaes512,
}

impl GcmVariant {
    /// Every variant, in report order.
    pub const ALL: [GcmVariant; 3] = [
        GcmVariant::AesniPclmul,
        GcmVariant::Vaes256,
        GcmVariant::Vaes512,
    ];

    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            GcmVariant::AesniPclmul => "aesni-pclmul",
            GcmVariant::Vaes256 => "vaes-vpclmul-256",
            GcmVariant::Vaes512 => "vaes-vpclmul-512",
        }
    }

    /// What the CPU and XCR0 must provide (the ZMM byte swaps need
    /// AVX512BW).
    pub fn requirements(self) -> &'static [Requirement] {
        use Requirement::*;
        match self {
            GcmVariant::AesniPclmul => &[Avx, AesNi, Pclmulqdq],
            GcmVariant::Vaes256 => &[Avx, AesNi, Pclmulqdq, Avx2, Vaes, Vpclmulqdq],
            GcmVariant::Vaes512 => &[
                Avx, AesNi, Pclmulqdq, Avx2, Vaes, Vpclmulqdq, Avx512f, Avx512bw,
            ],
        }
    }

    fn parts(self) -> (AesVariant, GhashPath) {
        match self {
            GcmVariant::AesniPclmul => (AesVariant::AesniAvx, GhashPath::Xmm),
            GcmVariant::Vaes256 => (AesVariant::Vaes256, GhashPath::Ymm),
            GcmVariant::Vaes512 => (AesVariant::Vaes512, GhashPath::Zmm),
        }
    }
}

/// A message longer than GCM allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLong {
    /// The length given.
    pub len: u64,
}

impl TooLong {
    /// `Err` when `data` is longer than [`MAX_LEN`].
    fn check(data: &[u8]) -> Result<(), TooLong> {
        if data.len() as u64 > MAX_LEN {
            return Err(TooLong {
                len: data.len() as u64,
            });
        }
        Ok(())
    }
}

impl core::fmt::Display for TooLong {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} bytes is over GCM's limit of {MAX_LEN}", self.len)
    }
}

/// An AES-128-GCM key: the cipher's schedule and the expanded hash key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcmKey {
    /// The AES-128 schedule.
    pub rk: RoundKeys,
    /// The hash subkey `H = E_K(0^128)`.
    pub h: [u8; 16],
    /// `H` expanded for the carry-less paths.
    pub ghash: GhashKey,
}

impl GcmKey {
    /// From an expanded AES-128 key (key setup is portable code: it is not
    /// what the variants time).
    pub fn new(rk: RoundKeys) -> Self {
        let mut h = [0u8; 16];
        soft::encrypt_block(&rk, &mut h);
        GcmKey {
            rk,
            h,
            ghash: GhashKey::new(&h),
        }
    }
}

/// `J0 = IV || 0^31 || 1` for a 96-bit IV.
fn j0(iv: &[u8; 12]) -> [u8; 16] {
    let mut j = [0u8; 16];
    j[..12].copy_from_slice(iv);
    j[15] = 1;
    j
}

/// The length block: bit lengths of the AAD and the ciphertext.
fn lengths(aad: usize, data: usize) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&(8 * aad as u64).to_be_bytes());
    b[8..].copy_from_slice(&(8 * data as u64).to_be_bytes());
    b
}

/// AES-128-GCM with one [`GcmVariant`], constructed only once the CPU is
/// known to run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gcm128 {
    variant: GcmVariant,
    aes: Aes128,
}

impl Gcm128 {
    /// The variant, if both `feat` and this CPU allow it; otherwise why not.
    pub fn new(variant: GcmVariant, feat: &CpuFeatures) -> Result<Self, Reason> {
        Self::with_detected(variant, &feat.intersect(&CpuFeatures::detect()))
    }

    /// Like [`Gcm128::new`] for features already intersected with
    /// [`CpuFeatures::detect`].
    pub(crate) fn with_detected(variant: GcmVariant, usable: &CpuFeatures) -> Result<Self, Reason> {
        usable.check(variant.requirements())?;
        let aes = Aes128::with_detected(variant.parts().0, usable)?;
        Ok(Gcm128 { variant, aes })
    }

    /// The implementation this instance runs.
    pub fn variant(&self) -> GcmVariant {
        self.variant
    }

    /// The AES-128 key schedule, expanded by the variant's AES-NI code
    /// (build a [`GcmKey`] from it).
    pub fn expand_key(&self, key: &[u8; 16]) -> RoundKeys {
        self.aes.expand_key(key)
    }

    /// Encrypt `data` in place and return the 16-byte tag over `aad` and
    /// the ciphertext.
    pub fn encrypt(
        &self,
        key: &GcmKey,
        iv: &[u8; 12],
        aad: &[u8],
        data: &mut [u8],
    ) -> Result<[u8; 16], TooLong> {
        TooLong::check(data)?;
        let j = j0(iv);
        let mut tag = [0u8; 16];
        let mut ctr = j;
        self.aes.ctr_xor(&key.rk, &mut ctr, &mut tag);
        let path = self.variant.parts().1;
        // SAFETY: `with_detected` checked the requirements of the variant,
        // which include those of its GHASH path (and, for `aesni-pclmul`,
        // everything the stitched loop uses: AES-NI, PCLMULQDQ, AVX).
        let s = unsafe {
            let acc = ghash::update(path, &key.ghash, Ghash::default(), aad);
            let acc = if self.variant == GcmVariant::AesniPclmul {
                gcm_xmm::encrypt(&key.rk, &key.ghash, &mut ctr, acc, data)
            } else {
                self.aes.ctr_xor(&key.rk, &mut ctr, data);
                ghash::update(path, &key.ghash, acc, data)
            };
            ghash::update(path, &key.ghash, acc, &lengths(aad.len(), data.len()))
        };
        for (t, s) in tag.iter_mut().zip(s.finish()) {
            *t ^= s;
        }
        Ok(tag)
    }
}

/// The portable reference: SP 800-38D 7.1 with [`soft`] AES and the
/// bit-serial GHASH.
pub fn soft_encrypt(
    key: &GcmKey,
    iv: &[u8; 12],
    aad: &[u8],
    data: &mut [u8],
) -> Result<[u8; 16], TooLong> {
    TooLong::check(data)?;
    let j = j0(iv);
    let mut ctr = (u128::from_be_bytes(j) + 1).to_be_bytes();
    soft::ctr_xor(&key.rk, &mut ctr, data);
    let acc = ghash::soft_update(&key.h, Ghash::default(), aad);
    let acc = ghash::soft_update(&key.h, acc, data);
    let s = ghash::soft_update(&key.h, acc, &lengths(aad.len(), data.len()));
    let mut tag = j;
    soft::encrypt_block(&key.rk, &mut tag);
    for (t, s) in tag.iter_mut().zip(s.finish()) {
        *t ^= s;
    }
    Ok(tag)
}
