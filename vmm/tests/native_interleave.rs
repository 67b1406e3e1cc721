//! Guest and native repetitions interleaved (issue 16 §4): every workload
//! row gets a median guest/native ratio with its spread, the native side
//! runs the guest kernel's own machine code (and computes its DGEMM
//! product bit for bit), a kernel without the native entry point falls
//! back with a named reason, and `--hugepages` reports what backed RAM.

mod common;

use common::{guest_kernel_file, kvm_or_skip, stderr, temp_file, vmm, vmm_json};
use serde_json::Value;

fn dgemm_rows(v: &Value) -> Vec<&Value> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == "dgemm")
        .collect()
}

/// Each row's spread is consistent with its median and pair count.
fn check_spread(r: &Value, reps: u64) {
    let med = r["native_ratio"].as_f64().unwrap_or_else(|| panic!("{r}"));
    let sp = &r["native_spread"];
    assert_eq!(sp["reps"].as_u64(), Some(reps), "{r}");
    // Every repetition was compared part by part.
    assert!(sp["parts"].as_u64().unwrap() >= reps, "{r}");
    let (min, max) = (sp["min"].as_f64().unwrap(), sp["max"].as_f64().unwrap());
    assert!(min > 0.0 && min <= med && med <= max, "{r}");
    assert_eq!(
        sp["noisy"].as_bool(),
        Some(max - min > (med - 1.0).abs()),
        "{r}"
    );
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn every_row_gets_a_median_ratio_with_its_spread_from_the_guests_own_code() {
    if !kvm_or_skip("every_row_gets_a_median_ratio_with_its_spread_from_the_guests_own_code") {
        return;
    }
    let (out, v) = vmm_json(&["run", "--workload", "gemm,quick", "--native-reps", "3"]);
    assert!(out.status.success(), "{v:#}");
    let rows = dgemm_rows(&v);
    assert!(!rows.is_empty(), "{v:#}");
    for r in &rows {
        check_spread(r, 3);
        // The guest kernel's code, run natively, computed the guest's
        // product bit for bit in every repetition.
        assert_eq!(r["native_spread"]["same_result"], true, "{r}");
    }
    let n = &v["native"];
    assert_eq!(n["code"], "guest-image", "{n}");
    assert!(n["entry"].as_str().unwrap().starts_with("0x"), "{n}");
    assert!(n["fallback_reason"].is_null(), "{n}");
    assert_eq!(n["reps_per_row"], 3, "{n}");
    assert_eq!(n["pairs"].as_u64(), Some(3 * rows.len() as u64), "{n}");
    let parts: u64 = rows
        .iter()
        .map(|r| r["native_spread"]["parts"].as_u64().unwrap())
        .sum();
    assert_eq!(n["part_pairs"].as_u64(), Some(parts), "{n}");
    let noisy = rows
        .iter()
        .filter(|r| r["native_spread"]["noisy"] == true)
        .count();
    assert_eq!(n["noisy_rows"].as_u64(), Some(noisy as u64), "{n}");
    assert!(v["hugepages"].is_null(), "{v:#}");
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_kernel_without_the_native_entry_falls_back_and_says_why() {
    if !kvm_or_skip("a_kernel_without_the_native_entry_falls_back_and_says_why") {
        return;
    }
    let mut kernel = std::fs::read(guest_kernel_file()).unwrap();
    let name = b"vmm_native_row2\0";
    let at = kernel
        .windows(name.len())
        .position(|w| w == name)
        .expect("the guest kernel names its native entry point");
    kernel[at] = b'X';
    let path = temp_file("no-native-entry.elf", &kernel);
    let (out, v) = vmm_json(&[
        "run",
        "--kernel",
        path.to_str().unwrap(),
        "--workload",
        "gemm,quick",
        "--native-reps",
        "2",
    ]);
    assert!(out.status.success(), "{v:#}");
    let n = &v["native"];
    assert_eq!(n["code"], "vmm-build", "{n}");
    assert_eq!(
        n["fallback_reason"], "the guest kernel exports no `vmm_native_row2` function",
        "{n}"
    );
    for r in dgemm_rows(&v) {
        check_spread(r, 2);
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn hugepages_are_advised_and_measured() {
    if !kvm_or_skip("hugepages_are_advised_and_measured") {
        return;
    }
    let (out, v) = vmm_json(&[
        "run",
        "--workload",
        "none",
        "--no-native",
        "--hugepages",
        "--mem",
        "128",
    ]);
    assert!(out.status.success(), "{v:#}");
    let h = &v["hugepages"];
    // MADV_HUGEPAGE exists wherever the kernel has transparent huge pages.
    let thp = std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists();
    assert_eq!(h["advised"].as_bool(), Some(thp), "{h}");
    assert_eq!(h["error"].is_null(), thp, "{h}");
    assert_eq!(h["ram_kib"], 128 * 1024, "{h}");
    let huge = h["anon_huge_kib"].as_u64().unwrap_or_else(|| panic!("{h}"));
    assert!(huge <= 128 * 1024 && huge % 2048 == 0, "{h}");
}

#[test]
fn repetitions_out_of_range_are_refused() {
    for bad in ["0", "16", "x"] {
        let out = vmm(&["run", "--native-reps", bad]);
        assert!(!out.status.success(), "{bad}");
        let err = stderr(&out);
        assert!(err.contains("--native-reps"), "{bad}: {err}");
    }
}

/// The AES yardsticks come with the interleaved rows too: `--workload aes`
/// pairs every row with its native run, and the host's `openssl speed`
/// still stands beside each mode (a figure, or why there is none).
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn paired_aes_rows_still_get_their_openssl_yardsticks() {
    if !kvm_or_skip("paired_aes_rows_still_get_their_openssl_yardsticks") {
        return;
    }
    let (out, v) = vmm_json(&["run", "--workload", "aes,quick", "--native-reps", "1"]);
    assert!(out.status.success(), "{v:#}");
    // One repetition is still paired, part by part, not run after the guest.
    let rows: Vec<&Value> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["native_ratio"].is_number())
        .collect();
    assert!(!rows.is_empty(), "{v:#}");
    for r in rows {
        let sp = &r["native_spread"];
        assert_eq!(sp["reps"], 1, "{r}");
        assert!(sp["parts"].as_u64().is_some_and(|p| p >= 1), "{r}");
    }
    let ys = v["openssl_yardsticks"]
        .as_array()
        .expect("openssl_yardsticks");
    for cipher in ["aes-128-cbc", "aes-128-ctr"] {
        let y: Vec<&Value> = ys.iter().filter(|y| y["cipher"] == cipher).collect();
        // Quick runs keep one size per mode.
        assert_eq!(y.len(), 1, "{cipher}: {ys:#?}");
        let y = y[0];
        match y["openssl_mb_per_s"].as_f64() {
            Some(o) => {
                assert!(o > 0.0, "{y}");
                let guest = y["guest"].as_array().unwrap();
                assert!(!guest.is_empty(), "{y}");
                for g in guest {
                    let ratio = g["vs_openssl"].as_f64().unwrap();
                    let mb = g["mb_per_s"].as_f64().unwrap();
                    assert!((ratio - mb / o).abs() < 1e-9, "{g}");
                }
            }
            None => assert!(y["error"].as_str().is_some_and(|e| !e.is_empty()), "{y}"),
        }
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn xts_and_gcm_rows_are_paired_like_every_other_row() {
    if !kvm_or_skip("xts_and_gcm_rows_are_paired_like_every_other_row") {
        return;
    }
    let (out, v) = vmm_json(&["run", "--workload", "xts,gcm,quick", "--native-reps", "2"]);
    assert!(out.status.success(), "{v:#}");
    let rows: Vec<&Value> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == "aes-256-xts" || r["name"] == "aes-128-gcm")
        .collect();
    // Every variant at both quick sizes, the borrows at 512 B and the two
    // portable rows: whatever this host runs, at least the `aesni` ones.
    for (name, variant, size) in [
        ("aes-256-xts", "aesni", 4096),
        ("aes-256-xts", "aesni +xsave/xmm", 512),
        ("aes-256-xts", "soft", 512),
        ("aes-128-gcm", "aesni-pclmul", 512),
        ("aes-128-gcm", "soft", 512),
    ] {
        assert!(
            rows.iter()
                .any(|r| r["name"] == name && r["variant"] == variant && r["size"] == size),
            "{name} {variant} {size}: {v:#}"
        );
    }
    for r in &rows {
        assert_eq!(r["check"], "pass", "{r}");
        check_spread(r, 2);
    }
    let n = &v["native"];
    assert_eq!(n["code"], "guest-image", "{n}");
    assert_eq!(n["pairs"].as_u64(), Some(2 * rows.len() as u64), "{n}");
}
