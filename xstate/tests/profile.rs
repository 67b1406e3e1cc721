//! The JSON dump format: every file in tests/data parses, round-trips, and
//! malformed files give clear errors.

mod common;

use xstate::{CpuidProfile, InfoError, ProfileError};

#[test]
fn every_dump_parses_and_round_trips() {
    for file in common::DUMPS {
        let text = common::dump_text(file);
        let p = CpuidProfile::from_json(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(p.xsave_info().unwrap(), common::info(file), "{file}");
        assert!(p.leaf_1.is_none() && p.leaf_7.is_none() && p.kvm_leaf_0xd.is_none());
        // Written back byte for byte (same field order, 8-digit hex).
        assert_eq!(p.to_json(), text, "{file}");
        // The entries of the parsed info are exactly the file's.
        assert_eq!(
            CpuidProfile::entries_of(&p.xsave_info().unwrap()),
            p.leaf_0xd,
            "{file}"
        );
    }
    let spr = CpuidProfile::from_json(&common::dump_text("intel-sapphire-rapids.json")).unwrap();
    assert_eq!(spr.signature.0, 0x806f8);
    assert!(spr.bare_metal);
    assert_eq!(spr.vendor, "GenuineIntel");
}

#[test]
fn optional_fields_round_trip() {
    let mut p = CpuidProfile::from_json(&common::dump_text("amd-zen3-milan.json")).unwrap();
    p.leaf_1 = Some(xstate::CpuidEntry::new(
        0,
        xstate::CpuidRegs::new(0xa00f11, 0x800, 0x7ef8320b, 0x178bfbff),
    ));
    p.kvm_leaf_0xd = Some(CpuidProfile::entries_of(&common::zen3_guest()));
    let text = p.to_json();
    assert!(text.contains("\"kvm_leaf_0xd\""));
    assert!(text.contains("\"0x7ef8320b\""));
    let q = CpuidProfile::from_json(&text).unwrap();
    assert_eq!(p, q);
    assert_eq!(q.kvm_xsave_info().unwrap().unwrap(), common::zen3_guest());
}

fn err(text: &str) -> ProfileError {
    CpuidProfile::from_json(text).unwrap_err()
}

#[test]
fn malformed_dumps() {
    let good = common::dump_text("amd-zen3-milan.json");
    // Bad hex.
    let e = err(&good.replacen("\"0x00000207\"", "\"0x0000020g\"", 1));
    assert!(
        matches!(&e, ProfileError::Json(m) if m.contains("0x0000020g")),
        "{e}"
    );
    let e = err(&good.replacen("\"0x00000207\"", "\"207\"", 1));
    assert!(e.to_string().contains("0x-prefixed"), "{e}");
    let e = err(&good.replacen("\"0x00000207\"", "\"0x1234567890\"", 1));
    assert!(e.to_string().contains("32-bit"), "{e}");
    // Only `0x` and 1-8 hex digits: no sign, spaces, `_` or empty digits.
    for bad in [
        "0x+100",
        "+0x100",
        "0x-1",
        " 0x1",
        "0x1 ",
        "0x",
        "0x_1",
        "0x000000001",
    ] {
        let e = err(&good.replacen("\"0x00000207\"", &format!("{bad:?}"), 1));
        assert!(
            matches!(&e, ProfileError::Json(m) if m.contains("1 to 8 hex digits")),
            "{bad}: {e}"
        );
    }
    // Missing fields.
    let e = err(&good.replacen("\"vendor\": \"AuthenticAMD\",", "", 1));
    assert!(e.to_string().contains("missing field `vendor`"), "{e}");
    let e = err(&good.replacen("\"ecx\": \"0x00000988\",", "", 1));
    assert!(e.to_string().contains("missing field `ecx`"), "{e}");
    // Not JSON.
    assert!(matches!(err("{"), ProfileError::Json(_)));
    // Missing subleaf for a supported component.
    let v: serde_json::Value = serde_json::from_str(&good).unwrap();
    let mut w = v.clone();
    w["leaf_0xd"]
        .as_array_mut()
        .unwrap()
        .retain(|e| e["subleaf"] != 9);
    let e = err(&w.to_string());
    assert_eq!(
        e,
        ProfileError::Info {
            field: "leaf_0xd",
            error: InfoError::MissingSubleaf(9)
        }
    );
    assert!(e.to_string().contains("9 (pkru)"), "{e}");
    // Subleaf 0 missing.
    let mut w = v.clone();
    w["leaf_0xd"]
        .as_array_mut()
        .unwrap()
        .retain(|e| e["subleaf"] != 0);
    assert_eq!(
        err(&w.to_string()),
        ProfileError::Info {
            field: "leaf_0xd",
            error: InfoError::MissingSubleaf(0)
        }
    );
    // Duplicate, out of range, data for an unsupported component.
    let mut w = v.clone();
    let dup = w["leaf_0xd"][2].clone();
    w["leaf_0xd"].as_array_mut().unwrap().push(dup);
    assert_eq!(
        err(&w.to_string()),
        ProfileError::Info {
            field: "leaf_0xd",
            error: InfoError::DuplicateSubleaf(2)
        }
    );
    let mut w = v.clone();
    w["leaf_0xd"][2]["subleaf"] = 64.into();
    assert_eq!(
        err(&w.to_string()),
        ProfileError::Info {
            field: "leaf_0xd",
            error: InfoError::SubleafOutOfRange(64)
        }
    );
    let mut w = v.clone();
    w["leaf_0xd"][2]["subleaf"] = 5.into();
    assert!(matches!(err(&w.to_string()), ProfileError::Info { .. }));
    // Overlapping offsets: PKRU moved into AVX.
    let mut w = v.clone();
    w["leaf_0xd"][3]["ebx"] = "0x00000300".into();
    assert_eq!(
        err(&w.to_string()),
        ProfileError::Info {
            field: "leaf_0xd",
            error: InfoError::Overlap { a: 2, b: 9 }
        }
    );
    // Size past 4 GiB.
    let mut w = v.clone();
    w["leaf_0xd"][3]["eax"] = "0xfffffff0".into();
    assert!(matches!(
        err(&w.to_string()),
        ProfileError::Info {
            error: InfoError::PastAddressSpace { index: 9, .. },
            ..
        }
    ));
    // Errors in the KVM part name it.
    let mut w = v.clone();
    w["kvm_leaf_0xd"] = serde_json::json!([]);
    assert_eq!(
        err(&w.to_string()),
        ProfileError::Info {
            field: "kvm_leaf_0xd",
            error: InfoError::MissingSubleaf(0)
        }
    );
}

#[cfg(feature = "native")]
#[test]
fn host_profile() {
    let p = CpuidProfile::host().unwrap();
    let info = p.xsave_info().unwrap();
    assert_eq!(info, xstate::XsaveInfo::host().unwrap());
    assert!(p.leaf_1.is_some());
    assert_eq!(p.signature.0, p.leaf_1.unwrap().eax.0);
    let back = CpuidProfile::from_json(&p.to_json()).unwrap();
    assert_eq!(back, p);
    eprintln!("{}", p.to_json());
}

#[test]
fn hex_grammar() {
    use xstate::profile::parse_hex;
    assert_eq!(parse_hex("0x0", 8), Some(0));
    assert_eq!(parse_hex("0XfFfFfFfF", 8), Some(0xffff_ffff));
    assert_eq!(parse_hex("0x00000207", 8), Some(0x207));
    assert_eq!(parse_hex("0x123456789", 8), None);
    assert_eq!(parse_hex("0xffffffffffffffff", 16), Some(u64::MAX));
    assert_eq!(parse_hex("0x1ffffffffffffffff", 16), None);
    for bad in ["0x+100", "100", "0x", "0x 1", "0x1_0", "x1", "0xg", "0x١"] {
        assert_eq!(parse_hex(bad, 16), None, "{bad}");
    }
}

#[test]
fn control_characters_in_text_fields_are_refused_naming_the_field() {
    let good = common::dump_text("amd-zen3-milan.json");
    let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
    for (field, text, code, offset) in [
        ("name", "AMD \u{1b}[2J EPYC", 0x1b, 4),
        ("microarchitecture", "Zen\u{7}", 0x7, 3),
        ("vendor", "Authentic\u{9b}AMD", 0x9b, 9),
        ("source", "x\u{202e}y", 0x202e, 1),
        ("name", "tab\there", 0x9, 3),
    ] {
        let mut w = v.clone();
        w[field] = text.into();
        let e = err(&w.to_string());
        assert_eq!(
            e,
            ProfileError::Text {
                field,
                offset,
                code
            },
            "{field}"
        );
        assert!(
            e.to_string()
                .contains(&format!("field `{field}` contains control character")),
            "{e}"
        );
    }
    // Ordinary Unicode is fine.
    v["name"] = "Intel® Xeon® — “Ørsted” 日本".into();
    CpuidProfile::from_json(&v.to_string()).unwrap();
}
