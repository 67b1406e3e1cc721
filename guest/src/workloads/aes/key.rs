//! What every AES-128 implementation here shares: the block size and the
//! expanded key. Its own module so that the implementations (`ni`, `vaes`,
//! `soft`) depend on it and not on the dispatcher in `mod.rs`, which
//! depends on them.

/// AES block size in bytes.
pub const BLOCK: usize = 16;

/// An expanded AES-128 key: round keys 0..=10, as bytes in the order the
/// cipher XORs them into the state (FIPS-197 w[4r..4r+4]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundKeys(pub [[u8; 16]; 11]);

/// An expanded AES-256 key: round keys 0..=14 (FIPS-197 5.2 with Nk = 8),
/// the data and tweak keys of XTS-AES-256. 16-aligned: the XTS batch
/// reads the round keys as legacy-SSE memory operands, which must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(16))]
pub struct RoundKeys256(pub [[u8; 16]; 15]);
