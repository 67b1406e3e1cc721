//! `vmm features lint`: on this host's KVM (every inconsistency of its
//! supported table reported, derived from the table itself), on bundled
//! profiles (no alarm), and the consistency section of `vmm features`.

mod common;

use common::{data, hex, kvm_or_skip, vmm, vmm_json};
use serde_json::Value;

fn reg(entry: &Value, r: &str) -> u64 {
    hex(&entry[r])
}

/// The inconsistencies of KVM's supported table, found from the recorded
/// leaves by this test's own reading of the rules: (rule, location).
fn expected_kvm_violations(profile: &Value) -> Vec<(&'static str, &'static str)> {
    let l1 = &profile["kvm_leaf_1"];
    let l7 = &profile["kvm_leaf_7"];
    let d: &Vec<Value> = profile["kvm_leaf_0xd"].as_array().expect("kvm_leaf_0xd");
    let sub = |i: u64| d.iter().find(|e| e["subleaf"].as_u64() == Some(i));
    let d0 = sub(0).expect("0xD.0");
    let xcr0 = reg(d0, "eax") | (reg(d0, "edx") << 32);
    let d1_eax = sub(1).map_or(0, |e| reg(e, "eax"));
    let bit = |v: u64, b: u32| v & (1 << b) != 0;
    let (ecx1, ebx7) = (reg(l1, "ecx"), reg(l7, "ebx"));
    let mut want = Vec::new();
    if xcr0 != 0 && !bit(ecx1, 26) {
        want.push(("xsave-leaf", "CPUID.(0x1,0).ECX[26]"));
    }
    if bit(xcr0, 2) && !bit(ecx1, 28) {
        want.push(("avx-state-hidden", "CPUID.(0x1,0).ECX[28]"));
    }
    if bit(ecx1, 28) && xcr0 & 0x6 != 0x6 {
        want.push(("avx-state", "CPUID.(0x1,0).ECX[28]"));
    }
    if xcr0 & 0xe0 != 0 && !bit(ebx7, 16) {
        want.push(("avx512-state-hidden", "CPUID.(0x7,0).EBX[16]"));
    }
    if bit(ebx7, 16) && xcr0 & 0xe4 != 0xe4 {
        want.push(("avx512-state", "CPUID.(0x7,0).EBX[16]"));
    }
    if (xcr0 & 0xe0 != 0 || bit(ebx7, 16)) && !bit(ebx7, 5) {
        want.push(("avx512-without-avx2", "CPUID.(0x7,0).EBX[5]"));
    }
    if xcr0 & !0x7 != 0 && !bit(d1_eax, 0) {
        want.push(("xsaveopt-present", "CPUID.(0xd,1).EAX[0]"));
    }
    want
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn kvm_supported_table_inconsistencies_are_reported() {
    if !kvm_or_skip("kvm_supported_table_inconsistencies_are_reported") {
        return;
    }
    let saved = vmm(&["features", "save", "-"]);
    assert!(saved.status.success(), "{}", common::stderr(&saved));
    let profile: Value = serde_json::from_slice(&saved.stdout).unwrap();
    let want = expected_kvm_violations(&profile);

    let (out, v) = vmm_json(&["features", "lint", "--timeout", "120"]);
    let sources = v["sources"].as_array().unwrap();
    let kvm = sources
        .iter()
        .find(|s| s["key"] == "kvm")
        .expect("kvm source");
    assert_eq!(kvm["error"], Value::Null);
    let got: Vec<(String, String)> = kvm["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["rule"].as_str().unwrap().to_string(),
                x["location"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (rule, at) in &want {
        assert!(
            got.iter().any(|(r, l)| r == rule && l == at),
            "{rule} at {at} not reported; got {got:?}"
        );
    }
    // Every violation names leaf, register and bit or register.
    for x in kvm["violations"].as_array().unwrap() {
        assert!(x["leaf"].is_u64() && x["reg"].is_string() && x["message"].is_string());
    }
    for key in ["vmm_guest_table", "cpu", "guest"] {
        assert!(sources.iter().any(|s| s["key"] == key), "no {key} source");
    }
    let total = v["violations"].as_u64().unwrap();
    assert_eq!(
        total,
        sources
            .iter()
            .map(|s| s["violations"].as_array().unwrap().len() as u64)
            .sum::<u64>()
    );
    assert_eq!(out.status.code(), Some(if total > 0 { 1 } else { 0 }));
    if !want.is_empty() {
        assert_eq!(out.status.code(), Some(1));
    }
    // The table says the same, with a summary line per source.
    let out = vmm(&["features", "lint", "--no-boot"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = format!("KVM supported CPUID: {} violation", got.len());
    assert!(text.contains(&summary), "{text}");
    for (rule, at) in &want {
        assert!(text.contains(rule) && text.contains(at), "{text}");
    }
}

#[test]
fn bundled_profiles_lint_clean() {
    for name in [
        "intel-sapphire-rapids.json",
        "intel-ice-lake-client.json",
        "amd-zen3-milan.json",
        "amd-zen3-kvm-guest.json",
    ] {
        let (out, v) = vmm_json(&["features", "lint", "--profile", &data(name)]);
        assert_eq!(out.status.code(), Some(0), "{name}: {v}");
        assert_eq!(v["violations"], 0);
        assert_eq!(v["sources"][0]["key"], "profile_cpu");
        assert!(!v["sources"][0]["not_checked"]
            .as_array()
            .unwrap()
            .is_empty());
    }
}

#[test]
fn features_view_has_a_consistency_section() {
    let (out, v) = vmm_json(&["features", "--profile", &data("amd-zen3-milan.json")]);
    assert!(out.status.success());
    assert_eq!(v["consistency"]["violations"], 0);
    assert_eq!(v["consistency"]["sources"][0]["key"], "profile_cpu");
    let out = vmm(&["features", "--profile", &data("amd-zen3-milan.json")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Consistency (vmm features lint):"), "{text}");
}

/// Zen 2's 64-byte PKRU with PKU clear, by bundled name: loads, exits 0,
/// and the oddity is a note, not a violation.
#[test]
fn zen2_pkru_oddity_is_a_note() {
    for name in ["zen2-rome", "zen2-matisse"] {
        let (out, v) = vmm_json(&["features", "lint", "--profile", name]);
        assert_eq!(out.status.code(), Some(0), "{name}: {v}");
        assert_eq!(v["violations"], 0, "{name}");
        let src = &v["sources"][0];
        assert_eq!(src["violations"].as_array().unwrap().len(), 0, "{name}");
        let notes = src["notes"].as_array().unwrap();
        assert_eq!(notes.len(), 1, "{name}: {v}");
        assert_eq!(notes[0]["rule"], "pku-state-hidden");
        assert_eq!(notes[0]["severity"], "info");
        assert_eq!(notes[0]["location"], "CPUID.(0x7,0).ECX[3]");
        let out = vmm(&["features", "lint", "--profile", name]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("the profile's CPU: 0 violations, 1 note"),
            "{text}"
        );
    }
}
