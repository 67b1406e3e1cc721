//! End-to-end tests of `vmm features`: exact layouts of recorded CPUs,
//! comparisons and baselines across hosts, restore checks, what a booted
//! guest saw, saved profiles, and clear errors for bad profiles.

mod common;

use std::path::PathBuf;

use common::{data, hex, kvm_or_skip, stderr, temp_file, vmm, vmm_json};
use serde_json::Value;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const SPR: &str = "intel-sapphire-rapids.json";
const ICL: &str = "intel-ice-lake-client.json";
const MILAN: &str = "amd-zen3-milan.json";
const ZEN3_GUEST: &str = "amd-zen3-kvm-guest.json";
const GNR: &str = "intel-granite-rapids.json";
const GENOA: &str = "amd-zen4-genoa.json";

/// A component: (id, size, standard offset, compacted offset in XCR0,
/// compacted offset in XCR0|XSS).
type ComponentExpect = (u64, u64, Option<u64>, Option<u64>, u64);

/// x87, SSE and AVX, the same on every recorded CPU.
const X87_SSE_AVX: [ComponentExpect; 3] = [
    (0, 160, Some(0), Some(0), 0),
    (1, 256, Some(160), Some(160), 160),
    (2, 256, Some(576), Some(576), 576),
];

/// Intel's AVX-512 (5-7) with the MPX hole below it, PT (8) and PKRU (9):
/// the same on every recorded Intel CPU.
const INTEL_AVX512_PT_PKRU: [ComponentExpect; 5] = [
    (5, 64, Some(1088), Some(832), 832),
    (6, 512, Some(1152), Some(896), 896),
    (7, 1024, Some(1664), Some(1408), 1408),
    (8, 128, None, None, 2432),
    (9, 8, Some(2688), Some(2432), 2560),
];

/// Sapphire Rapids' supervisor components from PASID to LBR (10-15).
const SPR_SUPERVISOR: [ComponentExpect; 5] = [
    (10, 8, None, None, 2568),
    (11, 16, None, None, 2576),
    (12, 24, None, None, 2592),
    (14, 48, None, None, 2616),
    (15, 808, None, None, 2664),
];

/// AMX (17-18) after Sapphire Rapids' layout.
const SPR_AMX: [ComponentExpect; 2] = [
    (17, 64, Some(2752), Some(2496), 3520),
    (18, 8192, Some(2816), Some(2560), 3584),
];

/// One recorded CPU: its documented figures and every supported component
/// (in parts, ascending).
struct Expect {
    file: &'static str,
    xcr0: u64,
    xss: u64,
    standard: u64,
    compacted: u64,
    compacted_xss: u64,
    components: &'static [&'static [ComponentExpect]],
}

/// Sapphire Rapids: the layout Granite Rapids extends.
const SAPPHIRE_RAPIDS: Expect = Expect {
    file: SPR,
    xcr0: 0x602e7,
    xss: 0xdd00,
    standard: 11008,
    compacted: 10752,
    compacted_xss: 11776,
    components: &[
        &X87_SSE_AVX,
        &INTEL_AVX512_PT_PKRU,
        &SPR_SUPERVISOR,
        &SPR_AMX,
    ],
};

const EXPECT: [Expect; 6] = [
    SAPPHIRE_RAPIDS,
    Expect {
        file: ICL,
        xcr0: 0x2e7,
        xss: 0x2100,
        standard: 2696,
        compacted: 2440,
        compacted_xss: 2576,
        components: &[
            &X87_SSE_AVX,
            &INTEL_AVX512_PT_PKRU,
            &[(13, 8, None, None, 2568)],
        ],
    },
    Expect {
        file: MILAN,
        xcr0: 0x207,
        xss: 0x1800,
        standard: 2440,
        compacted: 840,
        compacted_xss: 880,
        components: &[
            &X87_SSE_AVX,
            &[
                (9, 8, Some(2432), Some(832), 832),
                (11, 16, None, None, 840),
                (12, 24, None, None, 856),
            ],
        ],
    },
    Expect {
        file: ZEN3_GUEST,
        xcr0: 0x7,
        xss: 0x1800,
        standard: 832,
        compacted: 832,
        compacted_xss: 872,
        components: &[
            &X87_SSE_AVX,
            &[(11, 16, None, None, 832), (12, 24, None, None, 848)],
        ],
    },
    // Sapphire Rapids' layout, plus HWP (bit 16) in IA32_XSS.
    Expect {
        file: GNR,
        xss: 0x1dd00,
        components: &[
            &X87_SSE_AVX,
            &INTEL_AVX512_PT_PKRU,
            &SPR_SUPERVISOR,
            &[(16, 8, None, None, 3472)],
            &SPR_AMX,
        ],
        ..SAPPHIRE_RAPIDS
    },
    // AMD packs AVX-512 right after AVX (no MPX hole): standard and
    // compacted offsets agree, PKRU at 2432.
    Expect {
        file: GENOA,
        xcr0: 0x2e7,
        xss: 0x1800,
        standard: 2440,
        compacted: 2440,
        compacted_xss: 2480,
        components: &[
            &X87_SSE_AVX,
            &[
                (5, 64, Some(832), Some(832), 832),
                (6, 512, Some(896), Some(896), 896),
                (7, 1024, Some(1408), Some(1408), 1408),
                (9, 8, Some(2432), Some(2432), 2432),
                (11, 16, None, None, 2440),
                (12, 24, None, None, 2456),
            ],
        ],
    },
];

#[test]
fn every_recorded_cpu_has_exact_layouts() {
    let files: Vec<String> = std::fs::read_dir(
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("xstate/tests/data"),
    )
    .unwrap()
    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
    .filter(|n| n.ends_with(".json"))
    .collect();
    for f in &files {
        assert!(
            EXPECT.iter().any(|e| e.file == f),
            "{f} has no expectations in tests/features.rs: add them"
        );
    }
    for e in &EXPECT {
        let args = [
            "features",
            "--profile",
            &data(e.file),
            "--xfeatures",
            "all",
            "--no-boot",
        ];
        let (out, v) = vmm_json(&args);
        assert!(out.status.success(), "{}: {}", e.file, stderr(&out));
        assert_eq!(hex(&v["xcr0"]), e.xcr0, "{}", e.file);
        assert_eq!(hex(&v["xss"]), e.xss, "{}", e.file);
        assert_eq!(v["standard_size"], e.standard, "{}", e.file);
        assert_eq!(v["compacted_size"], e.compacted, "{}", e.file);
        assert_eq!(v["compacted_size_xss"], e.compacted_xss, "{}", e.file);
        assert_eq!(v["layout_from"], "cpu");
        assert!(v["columns"]["kvm"].is_null() && v["columns"]["guest"].is_null());
        assert_eq!(
            v["disagreements"].as_array().unwrap().len(),
            0,
            "{}: {v:#}",
            e.file
        );
        let comps = v["components"].as_array().unwrap();
        assert_eq!(comps.len(), 20);
        for (i, c) in comps.iter().enumerate() {
            assert_eq!(c["id"], i as u64);
            let want = e
                .components
                .iter()
                .flat_map(|p| p.iter())
                .find(|w| w.0 == i as u64);
            let ctx = format!("{} component {i}: {c}", e.file);
            match want {
                None => {
                    assert!(c["size"].is_null(), "{ctx}");
                    assert!(c["standard_offset"].is_null(), "{ctx}");
                    assert!(c["compacted_offset"].is_null(), "{ctx}");
                    assert_eq!(c["cpu"], false, "{ctx}");
                }
                Some(&(_, size, std, cmp, cmp_xss)) => {
                    assert_eq!(c["size"], size, "{ctx}");
                    assert_eq!(c["standard_offset"].as_u64(), std, "{ctx}");
                    assert_eq!(c["compacted_offset"].as_u64(), cmp, "{ctx}");
                    assert_eq!(c["compacted_offset_xss"], cmp_xss, "{ctx}");
                    assert_eq!(c["cpu"], true, "{ctx}");
                    assert_eq!(c["policy"], true, "{ctx}");
                }
            }
        }
        // The table: every row within 100 columns (the two title lines
        // carry the file and CPU names).
        let out = vmm(&["features", "--profile", &data(e.file), "--no-boot"]);
        assert!(out.status.success());
        let t = stdout(&out);
        for l in t.lines().skip(2) {
            assert!(
                l.len() <= 100,
                "{}: line of {} columns:\n{l}",
                e.file,
                l.len()
            );
        }
        assert!(t.contains("xtiledata AMX tile data TMM0-7"), "{t}");
    }
}

#[test]
fn profile_policy_narrows_layouts() {
    // AVX-512 removed on Sapphire Rapids: PKRU and AMX move down when compacted.
    let (out, v) = vmm_json(&[
        "features",
        "--profile",
        &data(SPR),
        "--xfeatures",
        "host,-avx512",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(hex(&v["xcr0"]), 0x60207);
    assert_eq!(v["standard_size"], 11008);
    assert_eq!(v["compacted_size"], 576 + 256 + 8 + 56 + 64 + 8192);
    let c = &v["components"];
    assert_eq!(c[9]["compacted_offset"], 832);
    assert_eq!(c[17]["compacted_offset"], 896);
    assert_eq!(c[18]["compacted_offset"], 960);
    assert!(c[5]["compacted_offset"].is_null());
    assert_eq!(c[5]["policy"], false);
    // Invalid for the profile's CPU: the same message as `vmm run`.
    let out = vmm(&[
        "features",
        "--profile",
        &data(MILAN),
        "--xfeatures",
        "x87,sse,avx,avx512",
    ]);
    assert_eq!(out.status.code(), Some(64));
    let e = stderr(&out);
    assert!(
        e.contains("invalid xstate policy") && e.contains("not supported"),
        "{e}"
    );
}

#[test]
fn compare_baselines() {
    let (out, v) = vmm_json(&["features", "compare", &data(SPR), &data(MILAN)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(hex(&v["baseline_xcr0"]), 0x207);
    assert_eq!(v["baseline_xfeatures"], "x87,sse,avx,pkru");
    // PKRU sits at 2688 on Intel, 2432 on Milan.
    let pkru = &v["components"][9];
    assert_eq!(pkru["standard_offsets"], serde_json::json!([2688, 2432]));
    assert_eq!(pkru["offsets_agree"], false);
    assert_eq!(pkru["sizes_agree"], true);
    assert_eq!(pkru["in_baseline"], true);
    let diffs = v["differences"].to_string();
    assert!(
        diffs.contains("pkru: standard offset differs (2688 on A, 2432 on B)"),
        "{diffs}"
    );
    assert!(diffs.contains("avx512"), "{diffs}");
    assert_eq!(v["hosts"][0]["baseline_compacted_size"], 840);
    assert_eq!(v["hosts"][1]["baseline_compacted_size"], 840);
    assert_eq!(v["hosts"][0]["baseline_standard_size"], 2696);
    assert_eq!(v["hosts"][1]["baseline_standard_size"], 2440);

    let (out, v) = vmm_json(&[
        "features",
        "compare",
        &data(SPR),
        &data(MILAN),
        &data(ZEN3_GUEST),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(hex(&v["baseline_xcr0"]), 0x7);

    let (_, v) = vmm_json(&["features", "compare", &data(SPR), &data(ICL)]);
    assert_eq!(hex(&v["baseline_xcr0"]), 0x2e7);

    // The printed value is ready to use.
    let out = vmm(&["features", "compare", &data(SPR), &data(MILAN)]);
    assert!(
        stdout(&out).contains("--xfeatures x87,sse,avx,pkru"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn amx_state_restores_only_on_sapphire_rapids() {
    let all = [data(SPR), data(ICL), data(MILAN), data(ZEN3_GUEST)];
    let mut args = vec!["features", "compare"];
    args.extend(all.iter().map(String::as_str));
    args.extend(["--xstate-bv", "0x60000"]);
    let (out, v) = vmm_json(&args);
    // A report: not restorable everywhere is still exit 0.
    assert!(out.status.success(), "{}", stderr(&out));
    let r = &v["restore"];
    assert_eq!(hex(&r["xstate_bv"]), 0x60000);
    assert_eq!(hex(&r["xcr0"]), 0x60003);
    let hosts = r["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 4);
    assert_eq!(hosts[0]["restorable"], true);
    assert!(hosts[0]["reason"].is_null());
    for (h, supported) in hosts[1..].iter().zip(["0x2e7", "0x207", "0x7"]) {
        assert_eq!(h["restorable"], false, "{h}");
        assert_eq!(
            h["reason"],
            format!("state uses amx (components 17-18); this host supports {supported}")
        );
    }
    // --check turns it into a failing status for scripts.
    args.push("--check");
    let out = vmm(&args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let out = vmm(&[
        "features",
        "compare",
        &data(SPR),
        "--xstate-bv",
        "amx",
        "--check",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // AVX-512 state, with the example message.
    let (_, v) = vmm_json(&[
        "features",
        "compare",
        &data(SPR),
        &data(ZEN3_GUEST),
        "--xstate-bv",
        "0xe7",
    ]);
    assert_eq!(v["restore"]["hosts"][0]["restorable"], true);
    assert_eq!(
        v["restore"]["hosts"][1]["reason"],
        "state uses avx512 (components 5-7); this host supports 0x7"
    );
    // Unused but enabled AVX-512 still blocks restore (KVM would refuse XCR0).
    let (_, v) = vmm_json(&[
        "features",
        "compare",
        &data(SPR),
        &data(ZEN3_GUEST),
        "--xstate-bv",
        "0x3",
        "--xcr0",
        "0xe7",
    ]);
    assert_eq!(v["restore"]["hosts"][0]["restorable"], true);
    let why = v["restore"]["hosts"][1]["reason"].as_str().unwrap();
    assert!(why.contains("guest XCR0 0xe7 enables avx512"), "{why}");

    // Unknown bits and an inconsistent XSTATE_BV are reported, not panics.
    let (_, v) = vmm_json(&["features", "compare", &data(SPR), "--xstate-bv", "bit25"]);
    let why = v["restore"]["hosts"][0]["reason"].as_str().unwrap();
    assert!(why.contains("no known state component"), "{why}");
    let out = vmm(&["features", "compare", &data(SPR), "--xstate-bv", "bogus"]);
    assert_eq!(out.status.code(), Some(68));
    assert!(
        stderr(&out).contains("--xstate-bv \"bogus\""),
        "{}",
        stderr(&out)
    );
}

/// Milan's dump as JSON, edited.
fn milan_edited(f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(data(MILAN)).unwrap()).unwrap();
    f(&mut v);
    v.to_string().into_bytes()
}

fn subleaf(v: &mut Value, i: u64) -> &mut Value {
    v["leaf_0xd"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["subleaf"] == i)
        .unwrap()
}

/// `vmm features --profile F` and `vmm features compare OK F` both fail
/// with exit 64 and a message naming F and containing `fault`.
fn assert_rejected(name: &str, bytes: &[u8], fault: &str) {
    let path = temp_file(name, bytes);
    let p = path.display().to_string();
    for args in [
        vec!["features", "--profile", &p, "--no-boot"],
        vec!["features", "--profile", &p, "--json"],
        vec!["features", "compare", &data(SPR), &p],
    ] {
        let out = vmm(&args);
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(64), "vmm {args:?}: {e}");
        assert!(!e.contains("panicked"), "vmm {args:?} panicked: {e}");
        assert!(
            e.contains(&p),
            "vmm {args:?}: error does not name the file: {e}"
        );
        assert!(
            e.contains(fault),
            "vmm {args:?}: error does not say {fault:?}: {e}"
        );
        assert!(
            out.stdout.is_empty(),
            "vmm {args:?} printed a report for a bad profile"
        );
    }
    let _ = std::fs::remove_file(path);
}

#[test]
fn malformed_profiles_are_named_errors() {
    let out = vmm(&["features", "--profile", "/nonexistent/host.json"]);
    assert_eq!(out.status.code(), Some(64));
    let e = stderr(&out);
    assert!(
        e.contains("/nonexistent/host.json") && e.contains("cannot open"),
        "{e}"
    );

    assert_rejected("not-json.json", b"{ \"name\": ", "EOF");
    assert_rejected("empty.json", b"", "EOF");
    assert_rejected(
        "no-leaf.json",
        &milan_edited(|v| {
            v.as_object_mut().unwrap().remove("leaf_0xd");
        }),
        "leaf_0xd",
    );
    assert_rejected(
        "bad-hex.json",
        &milan_edited(|v| subleaf(v, 2)["eax"] = "0xzz".into()),
        "0xzz",
    );
    // PKRU placed on top of AVX.
    assert_rejected(
        "overlap.json",
        &milan_edited(|v| subleaf(v, 9)["ebx"] = "0x00000300".into()),
        "overlap",
    );
    // A maximum size the components do not add up to.
    assert_rejected(
        "size-sum.json",
        &milan_edited(|v| subleaf(v, 0)["ecx"] = "0x00001000".into()),
        "0xD.0 ECX",
    );
    // PKRU past the maximum size.
    assert_rejected(
        "past-max.json",
        &milan_edited(|v| subleaf(v, 9)["ebx"] = "0x00000a00".into()),
        "past the maximum",
    );
    // A supported component without its subleaf.
    assert_rejected(
        "missing-subleaf.json",
        &milan_edited(|v| {
            v["leaf_0xd"]
                .as_array_mut()
                .unwrap()
                .retain(|e| e["subleaf"] != 9);
        }),
        "0xD.9",
    );
    // A component bit this vmm does not know.
    assert_rejected(
        "unknown-bit.json",
        &milan_edited(|v| {
            subleaf(v, 0)["eax"] = "0x00100207".into();
            subleaf(v, 0)["ecx"] = "0x00000a08".into();
            v["leaf_0xd"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({
                    "subleaf": 20, "eax": "0x00000080", "ebx": "0x00000988",
                    "ecx": "0x00000000", "edx": "0x00000000"
                }));
        }),
        "unknown state component bit(s) 20",
    );
    // A wrong architectural size.
    assert_rejected(
        "avx-size.json",
        &milan_edited(|v| subleaf(v, 2)["eax"] = "0x00000080".into()),
        "avx has size 128",
    );
}

#[test]
fn saved_profile_round_trips() {
    let path = std::env::temp_dir().join(format!("vmm-test-{}-saved.json", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let p = path.display().to_string();
    let out = vmm(&["features", "save", &p, "--microarchitecture", "test host"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Never overwritten silently.
    let again = vmm(&["features", "save", &p]);
    assert_eq!(again.status.code(), Some(64));
    assert!(stderr(&again).contains("--force"), "{}", stderr(&again));

    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(saved["microarchitecture"], "test host");
    assert!(
        saved["leaf_1"].is_object() && saved["leaf_0xd"].is_array(),
        "{saved:#}"
    );
    assert!(saved["xcr0_enabled"].is_string(), "{saved:#}");
    let kvm = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    assert_eq!(saved["kvm_leaf_0xd"].is_array(), kvm, "{saved:#}");

    let (out, v) = vmm_json(&["features", "--profile", &p]);
    assert!(out.status.success(), "{}", stderr(&out));
    let host_xcr0 = hex(&saved["leaf_0xd"][0]["eax"]) | (hex(&saved["leaf_0xd"][0]["edx"]) << 32);
    assert_eq!(hex(&v["columns"]["cpu"]["xcr0"]), host_xcr0);
    assert_eq!(v["columns"]["cpu"]["os_xcr0"], saved["xcr0_enabled"]);
    assert_eq!(v["layout_from"], if kvm { "kvm" } else { "cpu" });

    let (out, v) = vmm_json(&["features", "compare", &p, &data(MILAN)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let base = hex(&v["baseline_xcr0"]);
    assert_eq!(base & !0x207, 0, "baseline {base:#x} beyond Milan");
    assert_eq!(base & 0x3, 0x3);
    let _ = std::fs::remove_file(path);
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn host_view_without_boot() {
    if !kvm_or_skip("host_view_without_boot") {
        return;
    }
    let (out, v) = vmm_json(&["features", "--no-boot"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(v["source"], "this host");
    assert_eq!(v["layout_from"], "kvm");
    // The default policy is everything KVM offers, as for `vmm run`.
    assert_eq!(v["xcr0"], v["columns"]["kvm"]["xcr0"]);
    assert!(v["columns"]["guest"].is_null());
    assert!(v["columns"]["cpu"]["os_xcr0"].is_string());
    let out = vmm(&["features", "--no-boot"]);
    let t = stdout(&out);
    for l in t.lines().skip(2) {
        assert!(l.len() <= 100, "line of {} columns:\n{l}", l.len());
    }
    // Invalid policies are refused as `vmm run` refuses them.
    for bad in ["0x2", "bogus", "avx,-sse", "0x20007"] {
        let out = vmm(&["features", "--no-boot", "--xfeatures", bad]);
        assert_eq!(out.status.code(), Some(68), "--xfeatures {bad}");
        assert!(
            stderr(&out).contains("invalid xstate policy"),
            "{}",
            stderr(&out)
        );
    }
}

/// What the booted guest saw and enabled equals the policy.
fn guest_matches_policy(mask: &str, want: u64) {
    let (out, v) = vmm_json(&["features", "--xfeatures", mask]);
    assert!(
        out.status.success(),
        "--xfeatures {mask}: {}\n{v:#}",
        stderr(&out)
    );
    assert_eq!(hex(&v["xcr0"]), want);
    let g = &v["columns"]["guest"];
    assert!(g.is_object(), "no guest column: {v:#}");
    // Hardware KVM keeps the policy's CPUID; kvm_pvm answers from the host,
    // which the VMM detects (KVM_GET_CPUID2) and reports.
    let honored = g["kvm_cpuid_honored"] != false;
    if honored {
        assert_eq!(hex(&g["xcr0_supported"]), want, "guest CPUID 0xD.0: {v:#}");
        assert_eq!(g["standard_size_max"], v["standard_size"]);
    }
    assert_eq!(hex(&g["xcr0"]), want, "guest XCR0: {v:#}");
    assert_eq!(g["computed_standard_size"], v["standard_size"]);
    assert_eq!(g["computed_compacted_size"], v["compacted_size"]);
    for c in v["components"].as_array().unwrap() {
        if c["supervisor"] == false {
            assert_eq!(c["guest_xcr0"], c["policy"], "{c}");
        }
    }
    let guest_disagreements: Vec<&Value> = v["disagreements"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d.as_str().unwrap().contains("guest"))
        // What follows from KVM ignoring the CPUID table is reported, and
        // expected there; nothing else may disagree.
        .filter(|d| honored || !d.as_str().unwrap().contains("CPUID"))
        .collect();
    assert!(guest_disagreements.is_empty(), "{guest_disagreements:#?}");
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn guest_sees_policy_0x3() {
    if kvm_or_skip("guest_sees_policy_0x3") {
        guest_matches_policy("0x3", 0x3);
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn guest_sees_policy_0x7() {
    if kvm_or_skip("guest_sees_policy_0x7") {
        guest_matches_policy("0x7", 0x7);
    }
}

/// The masks table puts each figure under its heading: the guest's XINUSE
/// is a mask of components, shown on a row of its own under XCR0, never
/// under XSS (the guest's IA32_XSS is not readable at CPL3: `-`).
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn guest_rows_put_xinuse_under_xcr0_not_xss() {
    if !kvm_or_skip("guest_rows_put_xinuse_under_xcr0_not_xss") {
        return;
    }
    let (out, v) = vmm_json(&["features", "--xfeatures", "0x3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let xinuse = v["columns"]["guest"]["xinuse"]
        .as_str()
        .unwrap()
        .to_string();
    let out = vmm(&["features", "--xfeatures", "0x3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let header: Vec<&str> = text
        .lines()
        .find(|l| l.trim_start().starts_with("XCR0") && l.contains("XSS"))
        .unwrap_or_else(|| panic!("no masks header:\n{text}"))
        .split_whitespace()
        .collect();
    assert_eq!(&header[..2], ["XCR0", "XSS"], "{text}");
    let cells = |label: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label:?} row:\n{text}"));
        line[label.len()..]
            .split("   (")
            .next()
            .unwrap()
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let enabled = cells("guest enabled");
    assert_eq!(enabled[0], "0x3", "XCR0 column: {text}");
    assert_eq!(enabled[1], "-", "the XSS column holds no XINUSE: {text}");
    assert_eq!(cells("guest in use"), [xinuse], "{text}");
}
