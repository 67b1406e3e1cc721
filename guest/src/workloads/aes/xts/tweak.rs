//! What every XTS variant shares, vector or portable: the two expanded
//! keys, and the tweak's multiplication by alpha (x in GF(2^128)).

use crate::workloads::aes::key::RoundKeys256;
use crate::workloads::aes::soft;

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
