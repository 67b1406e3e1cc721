//! The JSON Schemas in `docs/schema/` are the ones the Rust types give, and
//! the documents the commands print carry `schema_version` and only the
//! fields their schema lists.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::{kvm_or_skip, run_bare_json, vmm_json};
use vmm::schema::Document;

/// The one command that rewrites the committed schemas.
const REGENERATE: &str = "cargo run -p vmm -- schema docs/schema";

fn schema_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("docs/schema")
}

/// Each committed schema equals the generated one, and there is no other
/// file: CI fails on a type change whose schema was not regenerated.
#[test]
fn committed_schemas_are_current() {
    let dir = schema_dir();
    let mut stale = Vec::new();
    for doc in Document::ALL {
        let path = dir.join(doc.file_name());
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != vmm::catalog::schema_text(doc) {
            stale.push(path.display().to_string());
        }
    }
    let expected: BTreeSet<String> = Document::ALL.iter().map(|d| d.file_name()).collect();
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let extra: Vec<_> = present.difference(&expected).collect();
    assert!(
        stale.is_empty() && extra.is_empty(),
        "docs/schema is not current (stale or missing: {stale:?}; not generated: {extra:?}).\n\
         Regenerate with `{REGENERATE}` (delete files that are not generated) and commit the result."
    );
}

/// Every schema pins `schema_version` and lists it as required.
#[test]
fn schemas_pin_their_version() {
    for doc in Document::ALL {
        let s: serde_json::Value = serde_json::to_value(vmm::catalog::schema(doc)).unwrap();
        assert_eq!(
            s["properties"]["schema_version"]["const"],
            serde_json::json!(doc.version()),
            "{}",
            doc.name()
        );
        let required = s["required"].as_array().expect("required list");
        assert!(
            required.contains(&serde_json::json!("schema_version")),
            "{}",
            doc.name()
        );
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
    }
}

/// The top-level fields of a printed document are exactly those its schema
/// allows, every required one present, and `schema_version` is the constant.
fn check_document(doc: Document, out: &std::process::Output, v: &serde_json::Value) {
    let s: serde_json::Value = serde_json::to_value(vmm::catalog::schema(doc)).unwrap();
    let props: BTreeSet<&str> = s["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let obj = v.as_object().expect("a JSON object");
    for k in obj.keys() {
        assert!(
            props.contains(k.as_str()),
            "{}: field {k} is not in its schema",
            doc.name()
        );
    }
    for r in s["required"].as_array().unwrap() {
        let r = r.as_str().unwrap();
        assert!(obj.contains_key(r), "{}: required {r} missing", doc.name());
    }
    assert_eq!(v["schema_version"], serde_json::json!(doc.version()));
    // schema_version comes first, for readers that peek.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("{\n  \"schema_version\": "),
        "{}: schema_version is not the first field",
        doc.name()
    );
}

#[test]
fn features_profile_json_matches_its_schema() {
    let (out, v) = vmm_json(&["features", "--profile", "sapphire-rapids"]);
    assert!(out.status.success(), "{out:?}");
    check_document(Document::Features, &out, &v);
}

#[test]
fn features_compare_json_matches_its_schema() {
    let (out, v) = vmm_json(&["features", "compare", "zen3-milan", "ice-lake-client"]);
    assert!(out.status.success(), "{out:?}");
    check_document(Document::FeaturesCompare, &out, &v);
}

#[test]
fn profile_list_json_matches_its_schema() {
    let (out, v) = vmm_json(&["features", "--list-profiles"]);
    assert!(out.status.success(), "{out:?}");
    check_document(Document::ProfileList, &out, &v);
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn run_json_matches_its_schema() {
    if !kvm_or_skip("run_json_matches_its_schema") {
        return;
    }
    let (out, v) = run_bare_json("120", &[]);
    assert!(out.status.success(), "{out:?}");
    check_document(Document::Run, &out, &v);
}
