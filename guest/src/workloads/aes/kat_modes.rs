//! Known answers for XTS-AES-256 and AES-128-GCM, checked before any
//! variant is timed: IEEE 1619-2007 Annex B vector 10 (XTS-AES-256, a
//! 512-byte data unit), the McGrew–Viega GCM test cases 2, 3 and 4
//! (AES-128; case 4 has AAD and a partial last block), then bulk messages
//! against the portable references ([`xts::soft_encrypt_unit`],
//! [`gcm::soft_encrypt`]) at lengths that exercise every batch width and
//! tail.

use core::fmt::Write;

use super::gcm::{self, Gcm128, GcmKey};
use super::kat::hex;
use super::xts::{self, Xts256, XtsKeys};
use super::{kat, soft};
use crate::workloads::text::Reason;

/// IEEE 1619-2007 Annex B vectors 10-14: Key1 || Key2 (the digits of e,
/// then of pi).
pub const XTS_V10_KEY: [u8; 64] = hex(
    "2718281828459045235360287471352662497757247093699959574966967627\
     3141592653589793238462643383279502884197169399375105820974944592",
);
/// Vector 10: data unit sequence number.
pub const XTS_V10_UNIT: u128 = 0xff;
/// Vectors 10-14: plaintext bytes 00..ff twice.
pub const XTS_V10_PLAINTEXT: [u8; 512] = {
    let mut p = [0u8; 512];
    let mut i = 0;
    while i < 512 {
        p[i] = i as u8;
        i += 1;
    }
    p
};
/// Vector 10: ciphertext.
pub const XTS_V10_CIPHERTEXT: [u8; 512] = hex(
    "1c3b3a102f770386e4836c99e370cf9bea00803f5e482357a4ae12d414a3e63b\
     5d31e276f8fe4a8d66b317f9ac683f44680a86ac35adfc3345befecb4bb188fd\
     5776926c49a3095eb108fd1098baec70aaa66999a72a82f27d848b21d4a741b0\
     c5cd4d5fff9dac89aeba122961d03a757123e9870f8acf1000020887891429ca\
     2a3e7a7d7df7b10355165c8b9a6d0a7de8b062c4500dc4cd120c0f7418dae3d0\
     b5781c34803fa75421c790dfe1de1834f280d7667b327f6c8cd7557e12ac3a0f\
     93ec05c52e0493ef31a12d3d9260f79a289d6a379bc70c50841473d1a8cc81ec\
     583e9645e07b8d9670655ba5bbcfecc6dc3966380ad8fecb17b6ba02469a020a\
     84e18e8f84252070c13e9f1f289be54fbc481457778f616015e1327a02b140f1\
     505eb309326d68378f8374595c849d84f4c333ec4423885143cb47bd71c5edae\
     9be69a2ffeceb1bec9de244fbe15992b11b77c040f12bd8f6a975a44a0f90c29\
     a9abc3d4d893927284c58754cce294529f8614dcd2aba991925fedc4ae74ffac\
     6e333b93eb4aff0479da9a410e4450e0dd7ae4c6e2910900575da401fc07059f\
     645e8b7e9bfdef33943054ff84011493c27b3429eaedb4ed5376441a77ed4385\
     1ad77f16f541dfd269d50d6a5f14fb0aab1cbb4c1550be97f7ab4066193c4caa\
     773dad38014bd2092fa755c824bb5e54c4f36ffda9fcea70b9c6e693e148c151",
);

/// A GCM known answer (96-bit IV, AES-128).
pub struct GcmVector {
    /// Where it comes from.
    pub name: &'static str,
    /// AES-128 key.
    pub key: [u8; 16],
    /// 96-bit IV.
    pub iv: [u8; 12],
    /// Additional authenticated data.
    pub aad: &'static [u8],
    /// Plaintext.
    pub plaintext: &'static [u8],
    /// Ciphertext.
    pub ciphertext: &'static [u8],
    /// Tag.
    pub tag: [u8; 16],
}

const TC3_KEY: [u8; 16] = hex("feffe9928665731c6d6a8f9467308308");
const TC3_IV: [u8; 12] = hex("cafebabefacedbaddecaf888");
const TC3_P: [u8; 64] = hex(
    "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72\
     1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255",
);
const TC3_C: [u8; 64] = hex(
    "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e\
     21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985",
);
const TC4_AAD: [u8; 20] = hex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
const TC2_P: [u8; 16] = [0; 16];
const TC2_C: [u8; 16] = hex("0388dace60b6a392f328c2b971b2fe78");

/// McGrew and Viega, "The Galois/Counter Mode of Operation (GCM)", test
/// cases 2-4 (the AES-128 cases with a plaintext).
pub const GCM_VECTORS: [GcmVector; 3] = [
    GcmVector {
        name: "GCM test case 2",
        key: [0; 16],
        iv: [0; 12],
        aad: &[],
        plaintext: &TC2_P,
        ciphertext: &TC2_C,
        tag: hex("ab6e47d42cec13bdf53a67b21257bddf"),
    },
    GcmVector {
        name: "GCM test case 3",
        key: TC3_KEY,
        iv: TC3_IV,
        aad: &[],
        plaintext: &TC3_P,
        ciphertext: &TC3_C,
        tag: hex("4d5c2af327cd64a62cf35abd2ba6fab4"),
    },
    GcmVector {
        name: "GCM test case 4",
        key: TC3_KEY,
        iv: TC3_IV,
        aad: &TC4_AAD,
        plaintext: TC3_P.split_at(60).0,
        ciphertext: TC3_C.split_at(60).0,
        tag: hex("5bc94fbc3221a5db94fae95ae7121a47"),
    },
];

/// Bulk XTS lengths (blocks): every tail length of every batch width,
/// and several whole batches of the widest.
const BULK_XTS_BLOCKS: [usize; 4] = [1, 7, 67, 2 * 32 + 31];
/// Bulk GCM: plaintext and AAD lengths (partial blocks on purpose).
const BULK_GCM: [(usize, usize); 3] = [(16 * 91 + 5, 20), (16 * 32, 0), (3, 17)];
/// The largest bulk message.
const BULK_MAX: usize = 16 * 95 + 5;

fn fail(what: &str, inject_fault: bool) -> Reason {
    let mut r = Reason::new();
    let _ = write!(r, "KAT failed: {what}");
    if inject_fault {
        r.push(" (corrupt-aes-key)");
    }
    r
}

fn pattern(buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
}

/// The XTS keys of `key`, corrupted as [`kat::corrupt`] does when
/// `inject_fault` (one bit of the data key's round key 5).
pub fn xts_keys(key: &[u8; 64], inject_fault: bool) -> XtsKeys {
    let mut k = XtsKeys::new(key);
    if inject_fault {
        k.data.0[5][0] ^= 0x01;
    }
    k
}

/// Vector 10 and bulk messages against the reference; the error names the
/// first that failed.
pub fn verify_xts(x: &Xts256, inject_fault: bool) -> Result<(), Reason> {
    let keys = xts_keys(&XTS_V10_KEY, inject_fault);
    let mut d = XTS_V10_PLAINTEXT;
    if x.encrypt_unit(&keys, XTS_V10_UNIT, &mut d).is_err() || d != XTS_V10_CIPHERTEXT {
        return Err(fail("IEEE 1619 vector 10", inject_fault));
    }
    let reference = XtsKeys::new(&XTS_V10_KEY);
    let mut got = [0u8; BULK_MAX];
    let mut want = [0u8; BULK_MAX];
    for (i, &blocks) in BULK_XTS_BLOCKS.iter().enumerate() {
        let n = 16 * blocks;
        pattern(&mut got[..n]);
        pattern(&mut want[..n]);
        let unit = 0x0123_4567_89ab_cdef_u128 << (40 * i);
        let ok = x.encrypt_unit(&keys, unit, &mut got[..n]).is_ok()
            && xts::soft_encrypt_unit(&reference, unit, &mut want[..n]).is_ok()
            && got[..n] == want[..n];
        if !ok {
            return Err(fail("bulk XTS vs reference", inject_fault));
        }
    }
    Ok(())
}

/// The GCM key of `key` as this variant expands it, corrupted as
/// [`kat::corrupt`] does when `inject_fault`.
pub fn gcm_key(g: &Gcm128, key: &[u8; 16], inject_fault: bool) -> GcmKey {
    let mut rk = g.expand_key(key);
    if inject_fault {
        kat::corrupt(&mut rk);
    }
    GcmKey::new(rk)
}

/// Test cases 2-4 and bulk messages against the reference.
pub fn verify_gcm(g: &Gcm128, inject_fault: bool) -> Result<(), Reason> {
    for v in &GCM_VECTORS {
        let key = gcm_key(g, &v.key, inject_fault);
        let mut d = [0u8; 64];
        let n = v.plaintext.len();
        d[..n].copy_from_slice(v.plaintext);
        match g.encrypt(&key, &v.iv, v.aad, &mut d[..n]) {
            Ok(tag) if d[..n] == *v.ciphertext && tag == v.tag => {}
            _ => return Err(fail(v.name, inject_fault)),
        }
    }
    let key = gcm_key(g, &kat::KEY_2B7E, inject_fault);
    let reference = GcmKey::new(soft::expand_key(&kat::KEY_2B7E));
    let mut got = [0u8; BULK_MAX];
    let mut want = [0u8; BULK_MAX];
    let mut aad = [0u8; 32];
    pattern(&mut aad);
    for (n, a) in BULK_GCM {
        pattern(&mut got[..n]);
        pattern(&mut want[..n]);
        let iv = [0x5a; 12];
        let t1 = g.encrypt(&key, &iv, &aad[..a], &mut got[..n]);
        let t2 = gcm::soft_encrypt(&reference, &iv, &aad[..a], &mut want[..n]);
        if t1.is_err() || t1 != t2 || got[..n] != want[..n] {
            return Err(fail("bulk GCM vs reference", inject_fault));
        }
    }
    Ok(())
}
