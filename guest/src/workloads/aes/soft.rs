//! Portable AES-128 straight from FIPS-197: the reference the AES-NI and
//! VAES implementations are compared against on bulk data (their
//! known-answer tests cover only a few blocks). Byte-oriented and slow
//! (tens of MB/s) on purpose: nothing here shares code or tables with the
//! hardware paths.

use super::key::{RoundKeys, RoundKeys256, BLOCK};

/// Multiplication in GF(2^8) modulo x^8 + x^4 + x^3 + x + 1.
const fn gmul(mut a: u8, mut b: u8) -> u8 {
    let mut p = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            p ^= a;
        }
        let hi = a & 0x80;
        a <<= 1;
        if hi != 0 {
            a ^= 0x1b;
        }
        b >>= 1;
    }
    p
}

/// The S-box as FIPS-197 5.1.1 defines it: multiplicative inverse in
/// GF(2^8) (0 maps to 0) followed by the affine transformation.
const fn make_sbox() -> [u8; 256] {
    let mut sbox = [0u8; 256];
    let mut x = 0usize;
    while x < 256 {
        // x^254 is the inverse of x (and 0 for 0).
        let mut inv = 1u8;
        let mut i = 0;
        while i < 254 {
            inv = gmul(inv, x as u8);
            i += 1;
        }
        if x == 0 {
            inv = 0;
        }
        sbox[x] = inv
            ^ inv.rotate_left(1)
            ^ inv.rotate_left(2)
            ^ inv.rotate_left(3)
            ^ inv.rotate_left(4)
            ^ 0x63;
        x += 1;
    }
    sbox
}

/// The AES S-box.
pub const SBOX: [u8; 256] = make_sbox();

/// Round constants for AES-128 key expansion (first byte of Rcon[i]).
const RCON: [u8; 10] = [0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0x1b, 0x36];

/// FIPS-197 5.2 KeyExpansion for Nk = 4.
pub fn expand_key(key: &[u8; 16]) -> RoundKeys {
    let mut rk = RoundKeys([[0; 16]; 11]);
    expand::<4>(key, &mut rk.0);
    rk
}

/// FIPS-197 5.2 KeyExpansion for Nk = 8 (AES-256): the schedule the XTS
/// implementations use (key setup is not what they time).
pub fn expand_key_256(key: &[u8; 32]) -> RoundKeys256 {
    let mut rk = RoundKeys256([[0; 16]; 15]);
    expand::<8>(key, &mut rk.0);
    rk
}

/// KeyExpansion for a key of `NK` words into `out.len()` round keys.
fn expand<const NK: usize>(key: &[u8], out: &mut [[u8; 16]]) {
    let total = 4 * out.len();
    let mut w = [[0u8; 4]; 60];
    for (i, word) in w.iter_mut().take(NK).enumerate() {
        word.copy_from_slice(&key[4 * i..4 * i + 4]);
    }
    for i in NK..total {
        let mut t = w[i - 1];
        if i % NK == 0 {
            t = [
                SBOX[t[1] as usize] ^ RCON[i / NK - 1],
                SBOX[t[2] as usize],
                SBOX[t[3] as usize],
                SBOX[t[0] as usize],
            ];
        } else if NK > 6 && i % NK == 4 {
            t = t.map(|b| SBOX[b as usize]);
        }
        let prev = w[i - NK];
        w[i] = core::array::from_fn(|b| prev[b] ^ t[b]);
    }
    for (r, key) in out.iter_mut().enumerate() {
        for c in 0..4 {
            key[4 * c..4 * c + 4].copy_from_slice(&w[4 * r + c]);
        }
    }
}

fn add_round_key(s: &mut [u8; 16], k: &[u8; 16]) {
    for (a, b) in s.iter_mut().zip(k) {
        *a ^= b;
    }
}

fn sub_bytes(s: &mut [u8; 16]) {
    for b in s.iter_mut() {
        *b = SBOX[*b as usize];
    }
}

/// Row r of the state (bytes r, r+4, r+8, r+12) rotates left by r columns.
fn shift_rows(s: &mut [u8; 16]) {
    let old = *s;
    for r in 0..4 {
        for c in 0..4 {
            s[r + 4 * c] = old[r + 4 * ((c + r) % 4)];
        }
    }
}

fn mix_columns(s: &mut [u8; 16]) {
    for c in s.chunks_exact_mut(4) {
        let [a0, a1, a2, a3] = [c[0], c[1], c[2], c[3]];
        c[0] = gmul(a0, 2) ^ gmul(a1, 3) ^ a2 ^ a3;
        c[1] = a0 ^ gmul(a1, 2) ^ gmul(a2, 3) ^ a3;
        c[2] = a0 ^ a1 ^ gmul(a2, 2) ^ gmul(a3, 3);
        c[3] = gmul(a0, 3) ^ a1 ^ a2 ^ gmul(a3, 2);
    }
}

/// FIPS-197 5.1 Cipher on one block, in place.
pub fn encrypt_block(rk: &RoundKeys, s: &mut [u8; 16]) {
    cipher(&rk.0, s);
}

/// FIPS-197 5.1 Cipher with an AES-256 schedule (14 rounds), in place.
pub fn encrypt_block_256(rk: &RoundKeys256, s: &mut [u8; 16]) {
    cipher(&rk.0, s);
}

/// The cipher for any schedule: `rk.len() - 1` rounds.
fn cipher(rk: &[[u8; 16]], s: &mut [u8; 16]) {
    let last = rk.len() - 1;
    add_round_key(s, &rk[0]);
    for key in &rk[1..last] {
        sub_bytes(s);
        shift_rows(s);
        mix_columns(s);
        add_round_key(s, key);
    }
    sub_bytes(s);
    shift_rows(s);
    add_round_key(s, &rk[last]);
}

/// CBC encryption in place (SP 800-38A 6.2); `data.len()` must be a
/// multiple of 16 (a trailing partial block is left untouched). `iv` is
/// updated to the last ciphertext block, so calls chain.
pub fn cbc_encrypt(rk: &RoundKeys, iv: &mut [u8; 16], data: &mut [u8]) {
    for block in data.chunks_exact_mut(BLOCK) {
        let mut s = *iv;
        for (s, b) in s.iter_mut().zip(block.iter()) {
            *s ^= b;
        }
        encrypt_block(rk, &mut s);
        block.copy_from_slice(&s);
        *iv = s;
    }
}

/// CTR encryption/decryption in place (SP 800-38A 6.5) with the whole
/// 128-bit block as a big-endian counter; `ctr` is advanced past every
/// block used, including a final partial one.
pub fn ctr_xor(rk: &RoundKeys, ctr: &mut [u8; 16], data: &mut [u8]) {
    let mut c = u128::from_be_bytes(*ctr);
    for chunk in data.chunks_mut(BLOCK) {
        let mut ks = c.to_be_bytes();
        encrypt_block(rk, &mut ks);
        for (d, k) in chunk.iter_mut().zip(ks) {
            *d ^= k;
        }
        c = c.wrapping_add(1);
    }
    *ctr = c.to_be_bytes();
}

#[cfg(test)]
mod tests {
    use super::super::kat;
    use super::*;

    #[test]
    fn sbox_spot_values() {
        // FIPS-197 Figure 7.
        assert_eq!(SBOX[0x00], 0x63);
        assert_eq!(SBOX[0x01], 0x7c);
        assert_eq!(SBOX[0x53], 0xed);
        assert_eq!(SBOX[0xff], 0x16);
        let mut seen = [false; 256];
        for &s in &SBOX {
            assert!(!seen[s as usize], "S-box is a permutation");
            seen[s as usize] = true;
        }
    }

    #[test]
    fn key_expansion_fips197_a1() {
        let rk = expand_key(&kat::KEY_2B7E);
        assert_eq!(rk.0[1], kat::A1_ROUND_KEY_1);
        assert_eq!(rk.0[10], kat::A1_ROUND_KEY_10);
    }

    #[test]
    fn single_blocks() {
        for v in kat::BLOCK_VECTORS {
            let mut b = v.plaintext;
            encrypt_block(&expand_key(&v.key), &mut b);
            assert_eq!(b, v.ciphertext, "{}", v.name);
        }
    }

    #[test]
    fn sp800_38a_modes() {
        let rk = expand_key(&kat::KEY_2B7E);
        let mut iv = kat::CBC_IV;
        let mut d = kat::SP800_38A_PLAINTEXT;
        cbc_encrypt(&rk, &mut iv, &mut d);
        assert_eq!(d, kat::CBC_F21_CIPHERTEXT);
        assert_eq!(iv, d[48..64]);
        let mut ctr = kat::CTR_INITIAL_COUNTER;
        let mut d = kat::SP800_38A_PLAINTEXT;
        ctr_xor(&rk, &mut ctr, &mut d);
        assert_eq!(d, kat::CTR_F51_CIPHERTEXT);
        assert_eq!(
            u128::from_be_bytes(ctr),
            u128::from_be_bytes(kat::CTR_INITIAL_COUNTER) + 4
        );
    }
}
