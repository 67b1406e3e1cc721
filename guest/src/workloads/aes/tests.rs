//! Known answers for XTS and GCM on every variant this host runs, and the
//! references themselves against the published vectors.

use super::gcm::{self, Gcm128, GcmKey, GcmVariant};
use super::ghash::{self, Ghash, GhashKey, GhashPath};
use super::kat_modes::{self, GCM_VECTORS};
use super::xts::{self, Xts256, XtsKeys, XtsVariant};
use super::{kat, soft};
use crate::workloads::features::CpuFeatures;
use crate::workloads::std::vec::Vec;
use crate::workloads::test_support::host_variants;

#[test]
fn aes256_fips197_c3() {
    // FIPS-197 C.3: AES-256 on 00112233..., key 000102...1f.
    let key: [u8; 32] = core::array::from_fn(|i| i as u8);
    let rk = soft::expand_key_256(&key);
    let mut b: [u8; 16] = core::array::from_fn(|i| (i as u8) * 0x11);
    soft::encrypt_block_256(&rk, &mut b);
    assert_eq!(
        b,
        [
            0x8e, 0xa2, 0xb7, 0xca, 0x51, 0x67, 0x45, 0xbf, 0xea, 0xfc, 0x49, 0x90, 0x4b, 0x49,
            0x60, 0x89
        ]
    );
}

#[test]
fn references_match_published_vectors() {
    let keys = XtsKeys::new(&kat_modes::XTS_V10_KEY);
    let mut d = kat_modes::XTS_V10_PLAINTEXT;
    xts::soft_encrypt_unit(&keys, kat_modes::XTS_V10_UNIT, &mut d).unwrap();
    assert_eq!(d, kat_modes::XTS_V10_CIPHERTEXT);
    for v in &GCM_VECTORS {
        let key = GcmKey::new(soft::expand_key(&v.key));
        let mut d = v.plaintext.to_vec();
        let tag = gcm::soft_encrypt(&key, &v.iv, v.aad, &mut d).unwrap();
        assert_eq!(d, v.ciphertext, "{}", v.name);
        assert_eq!(tag, v.tag, "{}", v.name);
    }
}

#[test]
fn montgomery_ghash_equals_the_standards() {
    // The reversed-domain Horner step with K_1 equals SP 800-38D's
    // multiplication, for a few keys and blocks.
    let mut x = 0x0123_4567_89ab_cdef_u128;
    for _ in 0..50 {
        x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834) ^ (x >> 61);
        let h = x.rotate_left(17).to_be_bytes();
        let k = GhashKey::new(&h);
        let k1 = u128::from_le_bytes(k.kd[ghash::POWERS - 1]);
        let spec = ghash::gf_mul_spec(x, u128::from_be_bytes(h));
        assert_eq!(ghash::mont_mul(x, k1), spec);
    }
}

/// `kk[i]` pairs the folded halves of `kd[i]` (low qword) and `kd[i + 1]`
/// (high qword), the layout the stitched loop multiplies two blocks'
/// middle factors by; the last power has nothing after it.
#[test]
fn ghash_key_pairs_consecutive_middle_factors() {
    let k = GhashKey::new(&[
        0x66, 0xe9, 0x4b, 0xd4, 0xef, 0x8a, 0x2c, 0x3b, 0x88, 0x4c, 0xfa, 0x59, 0xca, 0x34, 0x2b,
        0x2e,
    ]);
    let half = |b: &[u8; 16]| {
        let v = u128::from_le_bytes(*b);
        (v as u64) ^ ((v >> 64) as u64)
    };
    for i in 0..ghash::POWERS {
        let kk = u128::from_le_bytes(k.kk[i]);
        assert_eq!(kk as u64, half(&k.kd[i]), "kk[{i}] low");
        let next = k.kd.get(i + 1).map_or(0, half);
        assert_eq!((kk >> 64) as u64, next, "kk[{i}] high");
    }
}

#[test]
fn ghash_paths_match_reference() {
    let f = CpuFeatures::detect();
    let mut paths = Vec::new();
    if f.pclmul && f.avx {
        paths.push(GhashPath::Xmm);
    }
    if f.vpclmulqdq && f.avx2 && f.pclmul {
        paths.push(GhashPath::Ymm);
    }
    if f.vpclmulqdq && f.avx512bw && f.pclmul {
        paths.push(GhashPath::Zmm);
    }
    let h = *b"0123456789abcdef";
    let key = GhashKey::new(&h);
    let data: Vec<u8> = (0..16 * 80 + 9).map(|i| (i * 31 + 7) as u8).collect();
    for p in paths {
        for n in [0, 5, 16, 16 * 7, 16 * 8, 16 * 33 + 3, data.len()] {
            let want = ghash::soft_update(&h, Ghash(3), &data[..n]);
            // SAFETY: the path was chosen from this CPU's features.
            let got = unsafe { ghash::update(p, &key, Ghash(3), &data[..n]) };
            assert_eq!(got, want, "{p:?} {n}");
        }
    }
}

#[test]
fn every_host_xts_variant_passes_known_answers() {
    let all = host_variants(&XtsVariant::ALL, Xts256::new);
    assert!(!all.is_empty() || !CpuFeatures::detect().aesni);
    for x in &all {
        kat_modes::verify_xts(x, false).unwrap_or_else(|r| panic!("{:?}: {r}", x.variant()));
        let r = kat_modes::verify_xts(x, true).unwrap_err();
        assert_eq!(
            r.as_str(),
            "KAT failed: IEEE 1619 vector 10 (corrupt-aes-key)"
        );
        assert!(x
            .encrypt_unit(&XtsKeys::new(&[0; 64]), 0, &mut [0; 17])
            .is_err());
    }
}

#[test]
fn a_jump_of_k_doublings_is_k_doublings() {
    // Tweaks with the top bits set and clear, so every carry path is taken.
    let tweaks = [
        1u128,
        u128::MAX,
        0x8000_0000_0000_0000_0000_0000_0000_0001,
        0xfedc_ba98_7654_3210_0123_4567_89ab_cdef,
        0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
    ];
    for t in tweaks {
        let mut d = t;
        for k in 1..=120 {
            d = xts::mul_alpha(d);
            assert_eq!(xts::mul_alpha_pow(t, k), d, "{t:#x} * alpha^{k}");
        }
    }
}

#[test]
fn every_host_gcm_variant_passes_known_answers() {
    let all = host_variants(&GcmVariant::ALL, Gcm128::new);
    for g in &all {
        kat_modes::verify_gcm(g, false).unwrap_or_else(|r| panic!("{:?}: {r}", g.variant()));
        let r = kat_modes::verify_gcm(g, true).unwrap_err();
        assert_eq!(r.as_str(), "KAT failed: GCM test case 2 (corrupt-aes-key)");
    }
    let _ = kat::KEY_2B7E;
}

/// The stitched `aesni-pclmul` loop hashes batch n - 1 while it encrypts
/// batch n, and leaves the last whole batch and the tail to the plain
/// GHASH: every boundary of that split (no batch, exactly one, one plus a
/// block, whole batches, a partial last block) and an AAD, against the
/// reference, on every GCM variant this host runs.
#[test]
fn gcm_matches_reference_at_every_batch_boundary() {
    let batch = 16 * ghash::XMM_BATCH;
    let lens = [
        0,
        1,
        15,
        16,
        batch - 1,
        batch,
        batch + 1,
        batch + 16,
        2 * batch - 3,
        2 * batch,
        2 * batch + 17,
        3 * batch,
        11 * batch + 16 * 3 + 5,
        // Past block 255: the batch of counters 250..257 carries out of
        // the last byte (a 96-bit IV starts the count at 2), the one
        // batch in 32 that does not take the byte-add path.
        40 * batch + 7,
    ];
    let reference = GcmKey::new(soft::expand_key(&kat::KEY_2B7E));
    let aad: Vec<u8> = (0..37u8).collect();
    for g in &host_variants(&GcmVariant::ALL, Gcm128::new) {
        let key = GcmKey::new(g.expand_key(&kat::KEY_2B7E));
        for &n in &lens {
            let data: Vec<u8> = (0..n).map(|i| (i * 13 + 5) as u8).collect();
            for a in [0, aad.len()] {
                let (mut got, mut want) = (data.clone(), data.clone());
                let iv = [0xa5; 12];
                let t1 = g.encrypt(&key, &iv, &aad[..a], &mut got).unwrap();
                let t2 = gcm::soft_encrypt(&reference, &iv, &aad[..a], &mut want).unwrap();
                assert_eq!(got, want, "{:?} len {n} aad {a}", g.variant());
                assert_eq!(t1, t2, "{:?} len {n} aad {a}: tag", g.variant());
            }
        }
    }
}

mod suite {
    use crate::protocol::{field_str, Report, WorkUnit};
    use crate::workloads::aes::gcm::GcmVariant;
    use crate::workloads::aes::xts::XtsVariant;
    use crate::workloads::features::CpuFeatures;
    use crate::workloads::runner::{run_sizes, Sizes, Target};
    use crate::workloads::selection::Selection;
    use crate::workloads::std::vec;
    use crate::workloads::test_support::skip_reason;

    const SIZES: Sizes<'static> = Sizes {
        cbc: &[],
        ctr: &[],
        modes: &[512, 4096, 100],
        gemm: &[],
        linpack: &[],
    };

    fn run(list: &str) -> (bool, Report) {
        let mut scratch = vec![0u8; 1 << 20];
        let mut report = Report::new();
        let sel = Selection::parse(list).unwrap();
        let f = CpuFeatures::detect();
        let on = Target {
            feat: &f,
            tsc_khz: 100,
            scratch: &mut scratch,
            report: &mut report,
        };
        let ok = run_sizes(&sel, &SIZES, on);
        (ok, report)
    }

    #[test]
    fn rows_per_variant_size_and_borrow() {
        let f = CpuFeatures::detect();
        let (ok, report) = run("xts,gcm");
        assert!(ok);
        let count = |name: &str, variant: &str, size: u64| {
            report
                .results()
                .iter()
                .filter(|r| {
                    field_str(&r.name) == name
                        && field_str(&r.variant) == variant
                        && r.size == size
                        && r.check == 1
                        && r.unit == WorkUnit::Bytes as u32
                        && r.work == r.work / size * size
                        && r.work > 0
                        && r.cycles > 0
                })
                .count()
        };
        let xts_ok = [
            f.aesni,
            f.avx && f.aesni,
            f.vaes && f.avx2,
            f.vaes && f.avx512f,
        ];
        for (v, ok) in XtsVariant::ALL.iter().zip(xts_ok) {
            for size in [512, 4096] {
                assert_eq!(count("aes-256-xts", v.name(), size), ok as usize, "{v:?}");
            }
            // 100 bytes is not a whole number of blocks: skipped, with why.
            if ok {
                let why = skip_reason(&report, "aes-256-xts", v.name()).unwrap();
                assert!(why.contains("message size 100 unsupported"), "{why}");
                let zmm = std::format!("{} +xsave/zmm", v.name());
                assert_eq!(count("aes-256-xts", &zmm, 512), f.avx512f as usize);
                let xmm = std::format!("{} +xsave/xmm", v.name());
                assert_eq!(count("aes-256-xts", &xmm, 512), 1);
            } else {
                assert!(skip_reason(&report, "aes-256-xts", v.name()).is_some());
            }
        }
        for v in GcmVariant::ALL {
            let usable = f.check(v.requirements()).is_ok();
            assert_eq!(
                count("aes-128-gcm", v.name(), 4096),
                usable as usize,
                "{v:?}"
            );
        }
        assert_eq!(count("aes-256-xts", "soft", 512), 1);
        assert_eq!(count("aes-128-gcm", "soft", 512), 1);
    }

    #[test]
    fn corrupt_key_fails_every_variant_and_the_run() {
        let (ok, report) = run("xts,gcm,corrupt-aes-key");
        assert!(!ok);
        assert!(report.results().iter().all(|r| r.check == 0));
        let f = CpuFeatures::detect();
        if f.aesni && f.pclmul {
            assert_eq!(
                skip_reason(&report, "aes-256-xts", "aesni").unwrap(),
                "KAT failed: IEEE 1619 vector 10 (corrupt-aes-key)"
            );
        }
        assert!(report
            .results()
            .iter()
            .any(|r| field_str(&r.variant) == "soft" && r.work == 0));
    }

    use crate::workloads::std;
}
