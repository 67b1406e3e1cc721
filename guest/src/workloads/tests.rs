//! Whole-suite tests: AES variants against the reference on many sizes,
//! fault injection, XCR0 gating and the report records `run` produces.

use super::aes::{kat, soft};
use super::runner::{run_sizes, Sizes, Target};
use super::std::{string::String, vec, vec::Vec};
use super::*;
use crate::protocol::{field_str, Report, WorkUnit};
use crate::workloads::test_support::{host_variants, skip_reason};

fn host_aes() -> Vec<Aes128> {
    host_variants(&AesVariant::ALL, Aes128::new)
}

/// Raw CPUID words of this CPU, for building feature sets with another XCR0.
fn host_cpuid() -> (u32, u32, u32, u32) {
    use xstate::info::cpuid;
    // CPUID leaves 1 and 7 exist on every CPU this test runs on.
    let (l1, l7) = (cpuid(1, 0), cpuid(7, 0));
    (l1.ecx, l1.edx, l7.ebx, l7.ecx)
}

fn features_with_xcr0(xcr0: u64) -> CpuFeatures {
    let (c1, d1, b7, c7) = host_cpuid();
    CpuFeatures::from_cpuid(c1, d1, b7, c7, xcr0)
}

#[test]
fn every_host_variant_passes_known_answers() {
    let f = CpuFeatures::detect();
    let all = host_aes();
    for aes in &all {
        kat::verify(aes, false).unwrap_or_else(|r| panic!("{:?}: {r}", aes.variant()));
    }
    // The variants the CPU and XCR0 allow are exactly the ones constructed.
    assert_eq!(
        all.iter().any(|a| a.variant() == AesVariant::AesniSse),
        f.aesni
    );
    assert_eq!(
        all.iter().any(|a| a.variant() == AesVariant::Vaes256),
        f.vaes && f.avx2 && f.aesni
    );
    assert_eq!(
        all.iter().any(|a| a.variant() == AesVariant::Vaes512),
        f.vaes && f.avx512f && f.aesni
    );
}

#[test]
fn modes_match_reference_on_many_sizes() {
    let key = [0x5a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xa5];
    let rk_ref = soft::expand_key(&key);
    let counters = [
        [0u8; 16],
        [0xff; 16], // wraps to zero
        kat::CTR_INITIAL_COUNTER,
        // Low 64 bits carry after 3 blocks.
        [
            1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfd,
        ],
        // The last byte carries inside an 8-block batch (after 13 blocks:
        // the second batch starts at 0xfb), then every 32 batches.
        [
            9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0x10, 0x20, 0x30, 0x40, 0x50, 0xf3,
        ],
    ];
    let mut sizes: Vec<usize> = (0..=80).collect();
    sizes.extend([
        127,
        128,
        129,
        255,
        256,
        257,
        511,
        512,
        513,
        1000,
        1024,
        4096 + 48 + 3,
    ]);
    for aes in host_aes() {
        let rk = aes.expand_key(&key);
        assert_eq!(rk, rk_ref, "{:?}", aes.variant());
        for &len in &sizes {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
            for c0 in counters {
                let (mut got, mut want) = (data.clone(), data.clone());
                let (mut cg, mut cw) = (c0, c0);
                aes.ctr_xor(&rk, &mut cg, &mut got);
                soft::ctr_xor(&rk_ref, &mut cw, &mut want);
                assert!(
                    got == want && cg == cw,
                    "{:?} CTR len {len} ctr {c0:02x?}",
                    aes.variant()
                );
            }
            if len % 16 == 0 {
                let (mut got, mut want) = (data.clone(), data.clone());
                let (mut ig, mut iw) = ([7u8; 16], [7u8; 16]);
                aes.cbc_encrypt(&rk, &mut ig, &mut got).unwrap();
                soft::cbc_encrypt(&rk_ref, &mut iw, &mut want);
                assert!(got == want && ig == iw, "{:?} CBC len {len}", aes.variant());
            } else {
                let mut d = data.clone();
                assert_eq!(
                    aes.cbc_encrypt(&rk, &mut [0; 16], &mut d),
                    Err(aes::PartialBlock { len })
                );
                assert_eq!(d, data, "a rejected message is untouched");
            }
        }
        // Chained calls continue one stream.
        let mut whole = vec![0u8; 320];
        let mut parts = whole.clone();
        let (mut c1, mut c2) = (kat::CTR_INITIAL_COUNTER, kat::CTR_INITIAL_COUNTER);
        aes.ctr_xor(&rk, &mut c1, &mut whole);
        let (a, b) = parts.split_at_mut(256);
        aes.ctr_xor(&rk, &mut c2, a);
        aes.ctr_xor(&rk, &mut c2, b);
        assert_eq!(whole, parts);
    }
}

#[test]
fn corrupted_round_key_fails_known_answers() {
    for aes in host_aes() {
        let why = kat::verify(&aes, true).unwrap_err();
        assert_eq!(
            why.as_str(),
            "KAT failed: FIPS-197 A.1 round key 5 (corrupt-aes-key)"
        );
    }
}

/// Small problems so the suite runs in well under a second even unoptimised.
const TINY: Sizes<'static> = Sizes {
    cbc: &[16, 1024],
    ctr: &[100, 8192],
    modes: &[512, 4096],
    gemm: &[40, 101],
    linpack: &[60, 150],
};

/// A nominal TSC frequency that makes every measurement a few thousand
/// cycles long (a measurement with a real frequency would last 20 ms).
const TINY_TSC_KHZ: u64 = 100;

fn run_tiny(sel: &str, feat: &CpuFeatures, scratch: &mut [u8]) -> (bool, Report) {
    let mut report = Report::new();
    let sel = Selection::parse(sel).unwrap();
    let on = Target {
        feat,
        tsc_khz: TINY_TSC_KHZ,
        scratch,
        report: &mut report,
    };
    let ok = run_sizes(&sel, &TINY, on);
    (ok, report)
}

fn names(r: &crate::protocol::ResultRecord) -> (String, String) {
    (field_str(&r.name).into(), field_str(&r.variant).into())
}

#[test]
fn run_reports_every_allowed_variant_and_size() {
    let f = CpuFeatures::detect();
    let mut scratch = vec![0u8; 4 << 20];
    let (ok, report) = run_tiny("all", &f, &mut scratch);
    assert!(ok);
    for r in report.results() {
        let (name, variant) = names(r);
        assert_eq!(r.check, 1, "{name}/{variant}/{}", r.size);
        assert!(r.work > 0 && r.cycles > 0, "{name}/{variant}/{}", r.size);
        match name.as_str() {
            "aes-128-cbc" | "aes-128-ctr" => {
                assert_eq!(r.unit, WorkUnit::Bytes as u32);
                assert_eq!(r.work % r.size, 0);
            }
            "dgemm" => {
                assert_eq!(r.unit, WorkUnit::Flops as u32);
                assert_eq!(r.work % (2 * r.size.pow(3)), 0);
                assert!(r.residual <= 1.0);
            }
            "linpack" => {
                assert_eq!(r.unit, WorkUnit::Flops as u32);
                assert!(r.residual < linpack::RESIDUAL_THRESHOLD);
            }
            other => panic!("unexpected workload {other}"),
        }
    }
    let count = |name: &str, variant: &str| {
        report
            .results()
            .iter()
            .filter(|r| names(r) == (name.into(), variant.into()))
            .count()
    };
    // aesni-sse and aesni-avx on every CBC and CTR size, and so on.
    let expect = |usable: bool, n: usize| if usable { n } else { 0 };
    assert_eq!(count("aes-128-cbc", "aesni-sse"), expect(f.aesni, 2));
    assert_eq!(
        count("aes-128-cbc", "aesni-avx"),
        expect(f.aesni && f.avx, 2)
    );
    assert_eq!(count("aes-128-cbc", "vaes-256"), 0);
    assert_eq!(
        count("aes-128-ctr", "vaes-256"),
        expect(f.vaes && f.avx2, 2)
    );
    assert_eq!(
        count("aes-128-ctr", "vaes-512"),
        expect(f.vaes && f.avx512f, 2)
    );
    assert_eq!(count("dgemm", "sse2"), 2);
    assert_eq!(count("dgemm", "avx2-fma"), expect(f.avx2 && f.fma, 2));
    assert_eq!(count("linpack", "avx512"), expect(f.avx512f, 2));
    if !f.avx512f {
        let why = skip_reason(&report, "dgemm", "avx512").unwrap();
        assert!(why.starts_with("needs AVX"), "{why}");
        assert!(skip_reason(&report, "aes-128-ctr", "vaes-512").is_some());
    }
}

#[test]
fn xcr0_without_avx_runs_no_vex_variant_and_says_why() {
    let f = features_with_xcr0(0x3);
    assert!(!f.avx && !f.vaes && !f.avx2 && !f.avx512f);
    let mut scratch = vec![0u8; 4 << 20];
    let (ok, report) = run_tiny("all", &f, &mut scratch);
    assert!(ok);
    for r in report.results() {
        let (_, variant) = names(r);
        assert!(
            variant == "aesni-sse" || variant == "sse2",
            "{variant} ran with XCR0 0x3"
        );
    }
    let why = "needs AVX: XCR0 0x3 lacks AVX state";
    for (name, variant) in [
        ("aes-128-cbc", "aesni-avx"),
        ("aes-128-ctr", "aesni-avx"),
        ("dgemm", "avx2-fma"),
        ("linpack", "avx2-fma"),
    ] {
        assert_eq!(skip_reason(&report, name, variant).as_deref(), Some(why));
    }
    assert_eq!(
        skip_reason(&report, "aes-128-ctr", "vaes-256").as_deref(),
        Some("needs AVX: XCR0 0x3 lacks AVX state")
    );
    assert!(skip_reason(&report, "dgemm", "avx512").is_some());
    assert!(skip_reason(&report, "aes-128-cbc", "aesni-sse").is_none());
}

#[test]
fn corrupt_aes_key_fails_the_run_with_a_reason() {
    let f = CpuFeatures::detect();
    let mut scratch = vec![0u8; 64 << 10];
    let (ok, report) = run_tiny("aes,corrupt-aes-key", &f, &mut scratch);
    assert!(!ok);
    assert!(!report.results().is_empty());
    for r in report.results() {
        assert_eq!(r.check, 0);
        assert_eq!((r.work, r.cycles), (0, 0), "failed variants are not timed");
    }
    let why = skip_reason(&report, "aes-128-cbc", "aesni-sse").unwrap();
    assert!(
        why.starts_with("KAT failed: ") && why.contains("corrupt-aes-key"),
        "{why}"
    );
    // Without the fault the same run passes.
    let (ok, _) = run_tiny("aes", &f, &mut scratch);
    assert!(ok);
}

#[test]
fn short_scratch_skips_sizes_with_a_reason() {
    let f = features_with_xcr0(0x3);
    let mut scratch = vec![0u8; 600 << 10];
    let (ok, report) = run_tiny("gemm", &f, &mut scratch);
    assert!(ok);
    let results: Vec<u64> = report.results().iter().map(|r| r.size).collect();
    assert!(
        results.is_empty(),
        "pack buffer alone needs > 600 KiB: {results:?}"
    );
    let why = skip_reason(&report, "dgemm", "sse2").unwrap();
    assert!(
        why.starts_with("size 40 needs ") && why.contains("KiB scratch, have 600 KiB"),
        "{why}"
    );
    let (ok, report) = run_tiny("none", &f, &mut scratch);
    assert!(ok && report.results().is_empty() && report.skipped().is_empty());
}

#[test]
fn scratch_estimate_covers_the_default_sets() {
    assert!(scratch_bytes(&Selection::ALL) >= 3 * 1032 * 1024 * 8);
    assert!(scratch_bytes(&Selection::ALL) < 28 << 20);
    assert!(scratch_bytes(&Selection::QUICK) < 8 << 20);
    assert_eq!(scratch_bytes(&Selection::NONE), 0);
}

/// The legacy-SSE variant really is legacy-encoded and the AVX one VEX
/// (what the illumos slowdown depends on). Only meaningful in optimised
/// builds: unoptimised code calls the intrinsics out of line, where
/// stdarch compiled them with its own (non-AVX) features.
#[cfg(not(debug_assertions))]
#[test]
fn instruction_encodings() {
    use super::std;
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("objdump")
        .args(["-d", "-C", "--no-show-raw-insn"])
        .arg(&exe)
        .output()
        .expect("objdump (binutils) is needed to check instruction encodings");
    let text = String::from_utf8_lossy(&out.stdout);
    let body = |symbol: &str| -> String {
        let start = text
            .find(&std::format!("{symbol}>:"))
            .unwrap_or_else(|| panic!("{symbol} not in the test binary"));
        let rest = &text[start..];
        rest[..rest.find("\n\n").unwrap_or(rest.len())].into()
    };
    let count = |body: &str, mnemonic: &str| {
        body.lines()
            .filter(|l| l.split_whitespace().nth(1) == Some(mnemonic))
            .count()
    };
    for f in ["sse::cbc_encrypt", "sse::ctr_xor", "sse::expand_key"] {
        let b = body(&std::format!("aes::ni::{f}"));
        assert!(
            count(&b, "aesenc") + count(&b, "aeskeygenassist") >= 9,
            "{f}:\n{b}"
        );
        assert!(
            !b.contains("vaes") && !b.contains("%ymm"),
            "{f} has VEX code:\n{b}"
        );
        assert!(
            !b.lines().any(|l| l
                .split_whitespace()
                .nth(1)
                .is_some_and(|m| m.starts_with('v'))),
            "{f} has VEX code:\n{b}"
        );
    }
    for f in ["avx::cbc_encrypt", "avx::ctr_xor", "avx::expand_key"] {
        let b = body(&std::format!("aes::ni::{f}"));
        assert!(
            count(&b, "vaesenc") + count(&b, "vaeskeygenassist") >= 9,
            "{f}:\n{b}"
        );
        assert_eq!(count(&b, "aesenc"), 0, "{f} has legacy AES-NI:\n{b}");
    }
    let b = body("aes::vaes::ctr_xor_256");
    assert!(
        b.lines()
            .any(|l| l.contains("vaesenc") && l.contains("%ymm")),
        "{b}"
    );
}
