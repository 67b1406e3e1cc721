//! Known-answer tests every AES implementation passes before it is timed:
//! FIPS-197 Appendix A.1 (key expansion), Appendix B and C.1 (single
//! blocks), NIST SP 800-38A F.2.1 (CBC-AES128.Encrypt) and F.5.1
//! (CTR-AES128.Encrypt), then bulk CBC and CTR messages (odd lengths, a
//! counter that carries out of its low 64 bits) against the portable
//! [`super::soft`] reference, so the interleaved wide paths are checked too.

use core::fmt::Write;

use super::{soft, Aes128, RoundKeys};
use crate::workloads::text::Reason;

/// Decode hex digits at compile time (`N` bytes, no separators): the
/// known answers of this module and of [`super::kat_modes`].
pub(super) const fn hex<const N: usize>(s: &str) -> [u8; N] {
    let b = s.as_bytes();
    assert!(b.len() == 2 * N);
    let mut out = [0u8; N];
    let mut i = 0;
    while i < 2 * N {
        out[i / 2] = (out[i / 2] << 4) | nibble(b[i]);
        i += 1;
    }
    out
}

const fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => panic!("bad hex digit"),
    }
}

/// The key of FIPS-197 Appendix A.1/B and every SP 800-38A AES-128 example.
pub const KEY_2B7E: [u8; 16] = hex("2b7e151628aed2a6abf7158809cf4f3c");
/// FIPS-197 A.1: w[4..8], the first round key after the cipher key.
pub const A1_ROUND_KEY_1: [u8; 16] = hex("a0fafe1788542cb123a339392a6c7605");
/// FIPS-197 A.1: w[40..44], the last round key.
pub const A1_ROUND_KEY_10: [u8; 16] = hex("d014f9a8c9ee2589e13f0cc8b6630ca6");

/// A single-block known answer.
pub struct BlockVector {
    /// Where the vector comes from (for failure messages).
    pub name: &'static str,
    /// AES-128 key.
    pub key: [u8; 16],
    /// One plaintext block.
    pub plaintext: [u8; 16],
    /// Its ciphertext under `key`.
    pub ciphertext: [u8; 16],
}

/// FIPS-197 Appendix C.1 (AES-128) and Appendix B (cipher example).
pub const BLOCK_VECTORS: [BlockVector; 2] = [
    BlockVector {
        name: "FIPS-197 C.1",
        key: hex("000102030405060708090a0b0c0d0e0f"),
        plaintext: hex("00112233445566778899aabbccddeeff"),
        ciphertext: hex("69c4e0d86a7b0430d8cdb78070b4c55a"),
    },
    BlockVector {
        name: "FIPS-197 B",
        key: KEY_2B7E,
        plaintext: hex("3243f6a8885a308d313198a2e0370734"),
        ciphertext: hex("3925841d02dc09fbdc118597196a0b32"),
    },
];

/// SP 800-38A Appendix F: the four plaintext blocks every mode example uses.
pub const SP800_38A_PLAINTEXT: [u8; 64] = hex(
    "6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51\
     30c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710",
);
/// SP 800-38A F.2.1 CBC-AES128.Encrypt: initialization vector.
pub const CBC_IV: [u8; 16] = hex("000102030405060708090a0b0c0d0e0f");
/// SP 800-38A F.2.1 CBC-AES128.Encrypt: ciphertext.
pub const CBC_F21_CIPHERTEXT: [u8; 64] = hex(
    "7649abac8119b246cee98e9b12e9197d5086cb9b507219ee95db113a917678b2\
     73bed6b8e3c1743b7116e69e222295163ff1caa1681fac09120eca307586e1a7",
);
/// SP 800-38A F.5.1 CTR-AES128.Encrypt: initial counter block.
pub const CTR_INITIAL_COUNTER: [u8; 16] = hex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff");
/// SP 800-38A F.5.1 CTR-AES128.Encrypt: ciphertext.
pub const CTR_F51_CIPHERTEXT: [u8; 64] = hex(
    "874d6191b620e3261bef6864990db6ce9806f66b7970fdff8617187bb9fffdff\
     5ae4df3edbd5d35e5b4f09020db03eab1e031dda2fbe03d1792170a0f3009cee",
);

/// Bulk CBC length: enough blocks for every loop, not a power of two.
const BULK_CBC: usize = 16 * 67;
/// Bulk CTR length: several wide batches, then single blocks and a
/// partial block.
const BULK_CTR: usize = 16 * 91 + 5;
/// Bulk CTR starting counter: the low 64 bits carry within the message.
const BULK_CTR_COUNTER: [u8; 16] = hex("0123456789abcdeffffffffffffffff3");

/// What [`crate::workloads::Selection::corrupt_aes_key`] does to a key schedule:
/// flip one bit of round key 5.
pub fn corrupt(rk: &mut RoundKeys) {
    rk.0[5][0] ^= 0x01;
}

/// Run every known-answer test on `aes`; `inject_fault` corrupts each key
/// schedule after expansion (see [`corrupt`]). The error names the first
/// vector that failed.
pub fn verify(aes: &Aes128, inject_fault: bool) -> Result<(), Reason> {
    let expand = |key: &[u8; 16]| {
        let mut rk = aes.expand_key(key);
        if inject_fault {
            corrupt(&mut rk);
        }
        rk
    };
    let fail = |what: &str| {
        let mut r = Reason::new();
        let _ = write!(r, "KAT failed: {what}");
        if inject_fault {
            r.push(" (corrupt-aes-key)");
        }
        Err(r)
    };

    // FIPS-197 A.1: the whole schedule against the reference, and the two
    // round keys the appendix spells out.
    let rk = expand(&KEY_2B7E);
    let reference = soft::expand_key(&KEY_2B7E);
    if rk.0[1] != A1_ROUND_KEY_1 || rk.0[10] != A1_ROUND_KEY_10 || rk != reference {
        let round = (0..11).find(|&i| rk.0[i] != reference.0[i]).unwrap_or(1);
        let mut what = Reason::new();
        let _ = write!(what, "FIPS-197 A.1 round key {round}");
        return fail(what.as_str());
    }

    for v in &BLOCK_VECTORS {
        let rk = expand(&v.key);
        // Single-block encryption both ways the implementation offers it:
        // CBC with a zero IV, and CTR keystream with the plaintext as counter.
        let mut b = v.plaintext;
        if aes.cbc_encrypt(&rk, &mut [0; 16], &mut b).is_err() || b != v.ciphertext {
            return fail(v.name);
        }
        let mut ctr = v.plaintext;
        let mut z = [0u8; 16];
        aes.ctr_xor(&rk, &mut ctr, &mut z);
        if z != v.ciphertext {
            return fail(v.name);
        }
    }

    let rk = expand(&KEY_2B7E);
    let mut iv = CBC_IV;
    let mut d = SP800_38A_PLAINTEXT;
    if aes.cbc_encrypt(&rk, &mut iv, &mut d).is_err() || d != CBC_F21_CIPHERTEXT || iv != d[48..] {
        return fail("SP 800-38A F.2.1 CBC");
    }
    let mut ctr = CTR_INITIAL_COUNTER;
    let mut d = SP800_38A_PLAINTEXT;
    aes.ctr_xor(&rk, &mut ctr, &mut d);
    if d != CTR_F51_CIPHERTEXT
        || u128::from_be_bytes(ctr) != u128::from_be_bytes(CTR_INITIAL_COUNTER) + 4
    {
        return fail("SP 800-38A F.5.1 CTR");
    }

    // Bulk messages against the reference (computed with the uncorrupted
    // reference schedule, so fault injection shows here as well).
    let mut got = [0u8; BULK_CTR];
    let mut want = [0u8; BULK_CTR];
    for (i, (g, w)) in got.iter_mut().zip(want.iter_mut()).enumerate() {
        *g = (i * 7 + 3) as u8;
        *w = *g;
    }
    let (mut iv_got, mut iv_want) = (CBC_IV, CBC_IV);
    if aes
        .cbc_encrypt(&rk, &mut iv_got, &mut got[..BULK_CBC])
        .is_err()
    {
        return fail("bulk CBC vs reference");
    }
    soft::cbc_encrypt(&reference, &mut iv_want, &mut want[..BULK_CBC]);
    if got[..BULK_CBC] != want[..BULK_CBC] || iv_got != iv_want {
        return fail("bulk CBC vs reference");
    }
    let (mut c_got, mut c_want) = (BULK_CTR_COUNTER, BULK_CTR_COUNTER);
    aes.ctr_xor(&rk, &mut c_got, &mut got);
    soft::ctr_xor(&reference, &mut c_want, &mut want);
    if got != want || c_got != c_want {
        return fail("bulk CTR vs reference");
    }
    Ok(())
}
