//! ARCHITECTURE.md as a checked artefact: the modules it lists are the
//! modules `vmm/src/lib.rs` declares, every one of them has a layer, and
//! the files it names as holding `unsafe` are exactly the files that do.
//! (The imports between layers are checked by `scripts/module_cycles.py`,
//! which reads the same layer table; CI runs both.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).to_path_buf()
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

/// The lines of the section under `heading`, up to the next `## `.
fn section<'a>(doc: &'a str, heading: &str) -> Vec<&'a str> {
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no {heading:?}"));
    doc[start..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .collect()
}

/// The backticked words of some text, as written.
fn ticked_raw(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The backticked module names of a table cell (`arch/` is `arch`).
fn ticked(cell: &str) -> Vec<String> {
    ticked_raw(cell)
        .into_iter()
        .map(|w| w.trim_end_matches('/').to_string())
        .collect()
}

/// The table rows of a section, as cells.
fn rows(lines: &[&str]) -> Vec<Vec<String>> {
    lines
        .iter()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
        .skip(1) // the header
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// The top-level modules `vmm/src/lib.rs` declares.
fn declared_modules() -> BTreeSet<String> {
    let lib = std::fs::read_to_string(root().join("vmm/src/lib.rs")).expect("lib.rs");
    lib.lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("pub(crate) mod "))
        })
        .map(|m| m.trim_end_matches(';').to_string())
        .collect()
}

#[test]
fn the_module_table_lists_exactly_the_declared_modules() {
    let doc = architecture();
    let listed: Vec<String> = rows(&section(&doc, "## `vmm` modules"))
        .iter()
        .flat_map(|r| ticked(&r[0]))
        .collect();
    let set: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(
        set.len(),
        listed.len(),
        "a module is listed twice: {listed:?}"
    );
    assert_eq!(
        set,
        declared_modules(),
        "ARCHITECTURE.md's module table vs lib.rs"
    );
}

#[test]
fn every_declared_module_has_one_layer() {
    let doc = architecture();
    let layered: Vec<String> = rows(&section(&doc, "## Layers of `vmm`"))
        .iter()
        .flat_map(|r| ticked(&r[1]))
        .collect();
    let set: BTreeSet<String> = layered.iter().cloned().collect();
    assert_eq!(
        set.len(),
        layered.len(),
        "a module has two layers: {layered:?}"
    );
    assert_eq!(
        set,
        declared_modules(),
        "ARCHITECTURE.md's layers vs lib.rs"
    );
}

/// Whether Rust source holds an `unsafe` block, function or impl (not the
/// word in a comment, nor an `unsafe extern "C" fn` pointer type).
fn has_unsafe(text: &str) -> bool {
    text.lines().any(|l| {
        let code = l.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("unsafe") {
            let before = rest[..i].chars().last();
            let after = rest[i + 6..].trim_start();
            let word = before.is_none_or(|c| !c.is_alphanumeric() && c != '_' && c != '"');
            if word
                && (after.starts_with('{') || after.starts_with("fn") || after.starts_with("impl"))
            {
                return true;
            }
            rest = &rest[i + 6..];
        }
        false
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("source dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_unsafe_list_is_exactly_the_files_with_unsafe() {
    let doc = architecture();
    let lines = section(&doc, "## Invariants");
    let start = lines
        .iter()
        .position(|l| l.contains("**Where `unsafe` lives:**"))
        .expect("the unsafe invariant");
    let end = lines[start + 1..]
        .iter()
        .position(|l| l.starts_with("- **"))
        .map_or(lines.len(), |i| start + 1 + i);
    let named: BTreeSet<String> = lines[start..end]
        .iter()
        .flat_map(|l| ticked_raw(l))
        .filter(|w| {
            ["vmm/src/", "xstate/src/", "guest/src/"]
                .iter()
                .any(|d| w.starts_with(d))
        })
        .collect();
    let root = root();
    let mut files = Vec::new();
    for dir in ["vmm/src", "xstate/src", "guest/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut missing = Vec::new();
    let mut with_unsafe = BTreeSet::new();
    for f in files {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        // Unit-test files (`tests.rs`, `*_tests.rs`) may use what their
        // module does.
        if rel.ends_with("tests.rs") || !has_unsafe(&std::fs::read_to_string(&f).unwrap()) {
            continue;
        }
        with_unsafe.insert(rel.clone());
        let listed = named.contains(&rel)
            || named
                .iter()
                .any(|n| n.ends_with('/') && rel.starts_with(n.as_str()));
        if !listed {
            missing.push(rel);
        }
    }
    assert!(
        missing.is_empty(),
        "files with unsafe that ARCHITECTURE.md does not name: {missing:?}"
    );
    let stale: Vec<&String> = named
        .iter()
        .filter(|n| n.ends_with(".rs") && !with_unsafe.contains(*n))
        .collect();
    assert!(
        stale.is_empty(),
        "ARCHITECTURE.md names files without unsafe: {stale:?}"
    );
}
