//! The guest's workloads on KVM: every implementation the CPU allows passes
//! its known-answer or residual check in the guest, a corrupted AES key
//! schedule fails the run with a clear message, and with XCR0 = x87|SSE no
//! AVX or VAES code is even attempted.

mod common;

use common::{kvm_or_skip, vmm_json};
use serde_json::Value;

fn results(v: &Value) -> &Vec<Value> {
    v["results"].as_array().unwrap()
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn every_allowed_variant_passes_in_the_guest() {
    if !kvm_or_skip("every_allowed_variant_passes_in_the_guest") {
        return;
    }
    let (out, v) = vmm_json(&["run", "--workload", "quick"]);
    assert!(out.status.success(), "{v:#}");
    let rows = results(&v);
    for name in ["aes-128-cbc", "aes-128-ctr", "dgemm", "linpack"] {
        assert!(
            rows.iter().any(|r| r["name"] == name),
            "no {name} row: {v:#}"
        );
    }
    // The legacy-SSE variants need only AES-NI and SSE.
    assert!(rows
        .iter()
        .any(|r| r["name"] == "aes-128-cbc" && r["variant"] == "aesni-sse"));
    assert!(rows
        .iter()
        .any(|r| r["name"] == "dgemm" && r["variant"] == "sse2"));
    for r in rows {
        assert_eq!(r["check"], "pass", "{r}");
        let t = r["mb_per_s"].as_f64().or(r["gflops"].as_f64()).unwrap();
        assert!(t.is_finite() && t > 0.0, "{r}");
        // Guest/native ratio of the same code measured in the same run.
        let ratio = r["native_ratio"].as_f64().unwrap_or_else(|| panic!("{r}"));
        assert!(ratio > 0.0 && ratio.is_finite(), "{r}");
        if r["gflops"].is_number() {
            let res = r["residual"].as_f64().unwrap_or(0.0);
            assert!(res < 16.0, "{r}");
        }
    }
    // Whatever the guest's XCR0 holds, the variants needing it ran.
    let xcr0 = u64::from_str_radix(
        v["guest_xcr0"].as_str().unwrap().trim_start_matches("0x"),
        16,
    )
    .unwrap();
    if xcr0 & 0x4 != 0 {
        assert!(rows.iter().any(|r| r["variant"] == "aesni-avx"), "{v:#}");
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn x87_sse_guest_runs_no_avx_code_and_says_why() {
    if !kvm_or_skip("x87_sse_guest_runs_no_avx_code_and_says_why") {
        return;
    }
    let (out, v) = vmm_json(&["run", "--workload", "quick", "--xfeatures", "x87,sse"]);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["guest_xcr0"], "0x3");
    for r in results(&v) {
        let variant = r["variant"].as_str().unwrap();
        assert!(
            ["aesni-sse", "sse2"].contains(&variant),
            "ran {variant} with XCR0 0x3: {r}"
        );
    }
    let skipped = v["skipped"].as_array().unwrap();
    for variant in ["aesni-avx", "vaes-256", "avx2-fma"] {
        let s = skipped
            .iter()
            .find(|s| s["variant"] == variant)
            .unwrap_or_else(|| panic!("{variant} not reported as skipped: {v:#}"));
        let reason = s["reason"].as_str().unwrap();
        assert!(reason.contains("AVX") && reason.contains("0x3"), "{reason}");
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn corrupted_key_schedule_fails_the_run() {
    if !kvm_or_skip("corrupted_key_schedule_fails_the_run") {
        return;
    }
    let (out, v) = vmm_json(&["run", "--workload", "aes,corrupt-aes-key", "--no-native"]);
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    assert_eq!(v["exit_status"], 1);
    assert!(results(&v).iter().any(|r| r["check"] == "fail"), "{v:#}");
    let reasons: Vec<&str> = v["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("KAT failed") && r.contains("round key")),
        "{reasons:?}"
    );
}

/// `bench=copy` at `--mem 512`: every size of every string method, hot and
/// (where the region is twice the copy and the cache) cold; the SSE2 loop;
/// the borrowing pairs for each live state the guest's XCR0 enables; a
/// measured memcpy policy whose check passed in the guest.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn copy_bench_fills_its_table_and_sets_the_memcpy_policy() {
    if !kvm_or_skip("copy_bench_fills_its_table_and_sets_the_memcpy_policy") {
        return;
    }
    let (out, v) = vmm_json(&[
        "run",
        "--mem",
        "512",
        "--no-native",
        "--cmdline",
        "workload=none bench=copy",
    ]);
    assert!(out.status.success(), "{v:#}");
    let c = &v["copy"];
    let region = c["cold_region_bytes"].as_u64().unwrap();
    let llc = c["llc_bytes"].as_u64().unwrap();
    assert_eq!(region, 128 << 20, "{c:#}");
    let rows = c["rows"].as_array().unwrap();
    let has = |m: &str, data: &str, size: u64| {
        rows.iter()
            .any(|r| r["method"] == m && r["data"] == data && r["size"] == size)
    };
    for i in 0..12 {
        let size = 16u64 << (2 * i);
        for m in ["rep movsb", "rep movsq", "sse2"] {
            assert!(has(m, "hot", size), "{m} hot {size}: {c:#}");
            let cold = region >= 2 * size && region >= 2 * llc;
            assert_eq!(has(m, "cold", size), cold, "{m} cold {size}: {c:#}");
        }
    }
    for r in rows {
        assert!(r["cycles_per_copy"].as_f64().unwrap() > 0.0, "{r}");
    }
    let xcr0 = u64::from_str_radix(
        v["guest_xcr0"].as_str().unwrap().trim_start_matches("0x"),
        16,
    )
    .unwrap();
    let borrow = c["borrow"].as_array().unwrap();
    for (live, bits) in [("xmm", 0x2u64), ("ymm", 0x6), ("zmm", 0xe6)] {
        let measured = borrow
            .iter()
            .any(|b| b["insn"] == "xsave" && b["live"] == live);
        assert_eq!(measured, xcr0 & bits == bits, "{live}: {c:#}");
    }
    if rows.iter().any(|r| r["method"] == "avx512") {
        assert_eq!(xcr0 & 0xe6, 0xe6, "AVX-512 copies under XCR0 {xcr0:#x}");
    }
    assert_eq!(c["policy"]["measured"], true, "{c:#}");
    // What memcpy runs: from 33 B on, in size order, ending in non-temporal
    // stores from their threshold when there is one.
    let steps = c["policy"]["memcpy_steps"].as_array().unwrap();
    assert_eq!(steps[0]["from"], 33, "{c:#}");
    assert!(
        steps
            .windows(2)
            .all(|w| w[0]["from"].as_u64() < w[1]["from"].as_u64()),
        "{c:#}"
    );
    if let Some(nt) = c["policy"]["memcpy_nt_min"].as_u64() {
        let last = steps.last().unwrap();
        assert_eq!(
            (last["from"].as_u64(), &last["method"]),
            (Some(nt.max(33)), &"nt-sse2".into()),
            "{c:#}"
        );
    }
    let policy_row = results(&v)
        .iter()
        .find(|r| r["name"] == "memcpy-policy")
        .unwrap_or_else(|| panic!("no memcpy-policy row: {v:#}"));
    assert_eq!(policy_row["check"], "pass", "{policy_row}");
    // Bytes checked, untimed (issue 38 §5: they were "events" and "0
    // cycles" per op).
    assert_eq!(policy_row["size_unit"], "bytes", "{policy_row}");
    assert_eq!(policy_row["cycles"], 0, "{policy_row}");
}
