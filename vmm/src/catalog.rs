//! Every `--json` document with the Rust type it serialises, and so its JSON
//! Schema: the one place that names a type of every tool, above them all.
//! [`crate::schema`] is the envelope (`schema_version`) the tools print
//! through; `vmm schema DIR` writes what this module generates.

use std::path::{Path, PathBuf};

use schemars::{JsonSchema, Schema, SchemaGenerator};

use crate::schema::{Document, Versioned};

/// Its JSON Schema (draft 2020-12), with `schema_version` pinned to
/// [`Document::version`].
pub fn schema(doc: Document) -> Schema {
    let mut gen = SchemaGenerator::default();
    let mut schema = match doc {
        Document::Run | Document::Restore => {
            Versioned::<crate::report::RunSummary>::json_schema(&mut gen)
        }
        Document::Features => {
            Versioned::<crate::features::view::FeaturesDocument<'static>>::json_schema(&mut gen)
        }
        Document::FeaturesCompare => {
            Versioned::<crate::features::compare::Comparison>::json_schema(&mut gen)
        }
        Document::BenchExits => Versioned::<crate::bench::exits::ExitBench>::json_schema(&mut gen),
        Document::BenchInitXstate => {
            Versioned::<crate::bench::init_xstate::InitBench>::json_schema(&mut gen)
        }
        Document::SnapshotInfo => {
            Versioned::<crate::report::snapshot_info::SnapshotInfo>::json_schema(&mut gen)
        }
        Document::ProfileList => {
            Versioned::<crate::features::bundled::ProfileList>::json_schema(&mut gen)
        }
        Document::FeaturesLint => {
            Versioned::<crate::features::lint::LintView>::json_schema(&mut gen)
        }
        Document::BenchPeers => Versioned::<crate::bench::peers::PeersBench>::json_schema(&mut gen),
        Document::BenchSnapshot => {
            Versioned::<crate::bench::snapshot::SnapshotBench>::json_schema(&mut gen)
        }
        Document::BenchStartup => {
            Versioned::<crate::bench::startup::StartupBench>::json_schema(&mut gen)
        }
    };
    let defs = gen.take_definitions(true);
    let version = doc.version();
    if let Some(props) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) {
        props.insert(
            "schema_version".into(),
            serde_json::json!({
                "description": "The version of this document's format; fields are only ever added within one version.",
                "const": version,
            }),
        );
    }
    let mut root = serde_json::Map::new();
    root.insert(
        "$schema".into(),
        "https://json-schema.org/draft/2020-12/schema".into(),
    );
    root.insert(
        "title".into(),
        format!("{} (schema_version {version})", doc.command()).into(),
    );
    root.insert(
        "description".into(),
        format!(
            "The JSON object `{}` prints. Within one schema_version fields are only ever added.",
            doc.command()
        )
        .into(),
    );
    if let Some(obj) = schema.as_object() {
        for (k, v) in obj {
            if !["title", "$schema", "description"].contains(&k.as_str()) {
                root.insert(k.clone(), v.clone());
            }
        }
    }
    if !defs.is_empty() {
        root.insert("$defs".into(), serde_json::Value::Object(defs));
    }
    Schema::from(root)
}

/// The schema as the committed file holds it: pretty JSON, one newline at the end.
pub fn schema_text(doc: Document) -> String {
    let mut s =
        serde_json::to_string_pretty(&schema(doc)).expect("a schema is always serialisable");
    s.push('\n');
    s
}

/// Write every schema into `dir` (created if missing); returns the files.
/// Each is written as every file `vmm` writes
/// (`crate::output::write_atomic`): a regular file of the same name is
/// replaced, anything else there (a symlink, device, FIFO) refused, every
/// destination checked before the first is written.
///
/// # Errors
/// The directory cannot be used or created ([`crate::Error::OutputDir`]), or a
/// destination is refused or cannot be written ([`crate::Error::Output`]).
pub fn write_all(dir: &Path) -> Result<Vec<PathBuf>, crate::Error> {
    crate::output::create_dir(dir).map_err(|source| crate::Error::OutputDir {
        what: "schema directory",
        source,
    })?;
    let files: Vec<(PathBuf, Vec<u8>)> = Document::ALL
        .iter()
        .map(|d| (dir.join(d.file_name()), schema_text(*d).into_bytes()))
        .collect();
    crate::output::write_set(&files)
        .map_err(|(path, source)| crate::Error::Output { path, source })?;
    Ok(files.into_iter().map(|(p, _)| p).collect())
}
