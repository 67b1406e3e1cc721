//! XTS-AES-256, AES-128-GCM and AES-128-CTR: every variant this host runs
//! against the portable references on random keys, tweaks, IVs, counters,
//! AAD and lengths (proptest, natively); and in the guest under KVM the known answers gate
//! every row (a corrupted key fails the run and names the vector), the
//! register-borrow rows exist, and variants XCR0 forbids say why.

mod common;

use common::{kvm_or_skip, vmm_json};
use guest::workloads::aes::gcm::{self, Gcm128, GcmKey, GcmVariant};
use guest::workloads::aes::soft;
use guest::workloads::aes::xts::{self, Xts256, XtsKeys, XtsVariant};
use guest::workloads::{Aes128, AesVariant, CpuFeatures, Reason};
use proptest::prelude::*;
use serde_json::Value;

/// The instances of every variant in `all` this host runs (`new` refuses
/// the others).
fn on_host<V: Copy, T>(all: &[V], new: impl Fn(V, &CpuFeatures) -> Result<T, Reason>) -> Vec<T> {
    let f = CpuFeatures::detect();
    all.iter().filter_map(|&v| new(v, &f).ok()).collect()
}

fn host_xts() -> Vec<Xts256> {
    on_host(&XtsVariant::ALL, Xts256::new)
}

fn host_aes() -> Vec<Aes128> {
    on_host(&AesVariant::ALL, Aes128::new)
}

fn host_gcm() -> Vec<Gcm128> {
    on_host(&GcmVariant::ALL, Gcm128::new)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn xts_variants_match_reference(
        key in prop::collection::vec(any::<u8>(), 64),
        unit in any::<u128>(),
        data in (0usize..300).prop_flat_map(|blocks| prop::collection::vec(any::<u8>(), 16 * blocks)),
    ) {
        let key: [u8; 64] = key.try_into().unwrap();
        let keys = XtsKeys::new(&key);
        let mut want = data.clone();
        xts::soft_encrypt_unit(&keys, unit, &mut want).unwrap();
        for x in host_xts() {
            let mut got = data.clone();
            x.encrypt_unit(&keys, unit, &mut got).unwrap();
            prop_assert_eq!(&got, &want, "{:?}", x.variant());
        }
    }

    /// Counters near every carry the batched paths treat apart: the last
    /// byte (inside or at the end of an 8- or 16-block batch), the low 32
    /// and 64 bits, and the whole 128 (wrapping to zero).
    #[test]
    fn ctr_variants_match_reference(
        key in any::<[u8; 16]>(),
        high in any::<u128>(),
        carry_bits in prop::sample::select(vec![8u32, 32, 64, 128]),
        below in 0u128..40,
        data in prop::collection::vec(any::<u8>(), 0..1200),
    ) {
        let mask = if carry_bits == 128 { u128::MAX } else { (1u128 << carry_bits) - 1 };
        // `below` blocks before the low `carry_bits` bits wrap.
        let c0 = ((high & !mask) | (mask - below.min(mask))).to_be_bytes();
        let reference = soft::expand_key(&key);
        let (mut want, mut cw) = (data.clone(), c0);
        soft::ctr_xor(&reference, &mut cw, &mut want);
        for aes in host_aes() {
            let rk = aes.expand_key(&key);
            let (mut got, mut cg) = (data.clone(), c0);
            aes.ctr_xor(&rk, &mut cg, &mut got);
            prop_assert_eq!(&got, &want, "{:?} counter {:02x?}", aes.variant(), c0);
            prop_assert_eq!(cg, cw, "{:?} counter after", aes.variant());
        }
    }

    #[test]
    fn gcm_variants_match_reference(
        key in any::<[u8; 16]>(),
        iv in any::<[u8; 12]>(),
        aad in prop::collection::vec(any::<u8>(), 0..70),
        data in prop::collection::vec(any::<u8>(), 0..3000),
    ) {
        let reference = GcmKey::new(soft::expand_key(&key));
        let mut want = data.clone();
        let want_tag = gcm::soft_encrypt(&reference, &iv, &aad, &mut want).unwrap();
        for g in host_gcm() {
            let k = GcmKey::new(g.expand_key(&key));
            let mut got = data.clone();
            let tag = g.encrypt(&k, &iv, &aad, &mut got).unwrap();
            prop_assert_eq!(&got, &want, "{:?}", g.variant());
            prop_assert_eq!(tag, want_tag, "{:?}", g.variant());
        }
    }
}

/// Every unit length from nothing to five batches of eight blocks and
/// their tails, for every variant: the first batch (tweaks in registers),
/// the later ones (tweaks stored a batch ahead, alternating buffers) and
/// the block-by-block tail all meet the reference.
#[test]
fn xts_variants_match_reference_at_every_batch_boundary() {
    let mut key = [0u8; 64];
    for (i, k) in key.iter_mut().enumerate() {
        *k = (i as u8).wrapping_mul(29) ^ 0x5a;
    }
    let keys = XtsKeys::new(&key);
    let unit = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210u128;
    for blocks in 0..=41 {
        let data: Vec<u8> = (0..16 * blocks).map(|i| (i * 7 + blocks) as u8).collect();
        let mut want = data.clone();
        xts::soft_encrypt_unit(&keys, unit, &mut want).unwrap();
        for x in host_xts() {
            let mut got = data.clone();
            x.encrypt_unit(&keys, unit, &mut got).unwrap();
            assert_eq!(got, want, "{:?}, {blocks} blocks", x.variant());
        }
    }
}

#[test]
fn partial_xts_units_are_refused() {
    let keys = XtsKeys::new(&[7; 64]);
    let mut d = [0u8; 33];
    assert_eq!(
        xts::soft_encrypt_unit(&keys, 0, &mut d).unwrap_err().len,
        33
    );
    for x in host_xts() {
        assert_eq!(x.encrypt_unit(&keys, 0, &mut d).unwrap_err().len, 33);
        assert_eq!(d, [0; 33], "{:?} touched a refused unit", x.variant());
    }
}

fn results(v: &Value) -> &Vec<Value> {
    v["results"].as_array().unwrap()
}

fn skipped<'a>(v: &'a Value, name: &str, variant: &str) -> Option<&'a str> {
    v["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name && s["variant"] == variant)
        .map(|s| s["reason"].as_str().unwrap())
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn guest_xts_gcm_rows_pass_known_answers() {
    if !kvm_or_skip("guest_xts_gcm_rows_pass_known_answers") {
        return;
    }
    let (out, v) = vmm_json(&["run", "--workload", "xts,gcm,quick", "--no-native"]);
    assert!(out.status.success(), "{v:#}");
    let rows = results(&v);
    assert!(!rows.is_empty(), "{v:#}");
    for r in rows {
        assert_eq!(r["check"], "pass", "{r}");
        assert!(r["mb_per_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    let has = |name: &str, variant: &str, size: u64| {
        rows.iter()
            .any(|r| r["name"] == name && r["variant"] == variant && r["size"] == size)
    };
    // What the guest may run follows from the guest's XCR0 (the default
    // policy gives it the host's) and this CPU.
    let xcr0 = u64::from_str_radix(
        v["guest_xcr0"].as_str().unwrap().trim_start_matches("0x"),
        16,
    )
    .unwrap();
    let f = CpuFeatures::detect();
    if f.aesni && f.pclmul {
        for size in [512, 4096] {
            assert!(has("aes-256-xts", "aesni", size), "{v:#}");
        }
        assert!(has("aes-256-xts", "aesni +xsave/xmm", 512), "{v:#}");
        assert!(has("aes-256-xts", "soft", 512), "{v:#}");
    }
    let zmm = xcr0 & 0xe6 == 0xe6 && f.avx512f;
    if f.vaes && zmm {
        assert!(has("aes-256-xts", "vaes-512", 4096), "{v:#}");
        assert!(has("aes-256-xts", "vaes-512 +xsave/zmm", 512), "{v:#}");
    }
    if f.vpclmulqdq && f.avx512bw && zmm {
        assert!(
            has("aes-128-gcm", "vaes-vpclmul-512 +xsave/zmm", 512),
            "{v:#}"
        );
    }
    assert!(has("aes-128-gcm", "soft", 512), "{v:#}");
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn guest_xts_gcm_corrupt_key_fails_and_names_the_vector() {
    if !kvm_or_skip("guest_xts_gcm_corrupt_key_fails_and_names_the_vector") {
        return;
    }
    let (out, v) = vmm_json(&[
        "run",
        "--workload",
        "xts,gcm,quick,corrupt-aes-key",
        "--no-native",
    ]);
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    assert!(results(&v).iter().all(|r| r["check"] == "fail"), "{v:#}");
    if CpuFeatures::detect().aesni && CpuFeatures::detect().pclmul {
        assert_eq!(
            skipped(&v, "aes-256-xts", "aesni"),
            Some("KAT failed: IEEE 1619 vector 10 (corrupt-aes-key)")
        );
    }
    let f = CpuFeatures::detect();
    if f.pclmul && f.avx && f.aesni {
        assert_eq!(
            skipped(&v, "aes-128-gcm", "aesni-pclmul"),
            Some("KAT failed: GCM test case 2 (corrupt-aes-key)")
        );
    }
    assert_eq!(
        skipped(&v, "aes-256-xts", "soft"),
        Some("KAT failed: portable reference")
    );
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn guest_without_avx_state_says_which_variants_are_not_available() {
    if !kvm_or_skip("guest_without_avx_state_says_which_variants_are_not_available") {
        return;
    }
    let (out, v) = vmm_json(&[
        "run",
        "--workload",
        "xts,gcm,quick",
        "--xfeatures",
        "x87,sse",
        "--no-native",
    ]);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["guest_xcr0"], "0x3");
    for r in results(&v) {
        let variant = r["variant"].as_str().unwrap();
        assert!(
            ["aesni", "aesni +xsave/xmm", "soft"].contains(&variant),
            "ran {variant} with XCR0 0x3: {r}"
        );
    }
    assert_eq!(
        skipped(&v, "aes-256-xts", "vaes-512"),
        Some("not available: needs AVX: XCR0 0x3 lacks AVX state")
    );
    assert_eq!(
        skipped(&v, "aes-128-gcm", "aesni-pclmul"),
        Some("not available: needs AVX: XCR0 0x3 lacks AVX state")
    );
    if CpuFeatures::detect().aesni && CpuFeatures::detect().pclmul {
        assert_eq!(
            skipped(&v, "aes-256-xts", "aesni +xsave/ymm"),
            Some("not available: ymm state not usable: XCR0 0x3")
        );
    }
}
