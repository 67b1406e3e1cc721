//! The JSON documents `--json` prints, versioned, and their JSON Schemas.
//!
//! Every document carries a top-level `schema_version`: a number per kind of
//! document, raised only when a field changes meaning or goes away (fields
//! are only ever added, and adding one does not change the version). The
//! schemas are generated from the Rust types that are serialised
//! (`schemars` derives on them), so they cannot drift from the output;
//! `docs/schema/*.schema.json` holds the generated files, and the test
//! `tests/schema.rs` fails when they differ from what the types give.
//! Regenerate them with `cargo run -p vmm -- schema docs/schema`.
//!
//! This module is the envelope every tool prints through, and knows none of
//! them; which Rust type each document is, and so its schema, is
//! [`crate::catalog`]'s.
//!
//! Saved CPU profiles (`vmm features save`) are not in this list: they are
//! the xstate crate's profile format, versioned by their own fields.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;

/// A kind of JSON document the `vmm` commands print with `--json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Document {
    /// `vmm run --json`: [`crate::report::RunSummary`].
    Run,
    /// `vmm restore --json`: the same summary, for the resumed run.
    Restore,
    /// `vmm features --json`: [`crate::features::view::FeaturesDocument`].
    Features,
    /// `vmm features compare --json`: `crate::features::compare::Comparison`.
    FeaturesCompare,
    /// `vmm bench exits --json`: `crate::bench::exits::ExitBench`.
    BenchExits,
    /// `vmm bench init-xstate --json`: `crate::bench::init_xstate::InitBench`.
    BenchInitXstate,
    /// `vmm snapshot info --json`: `crate::report::snapshot_info::SnapshotInfo`.
    SnapshotInfo,
    /// `vmm features --list-profiles --json`: `crate::features::bundled::ProfileList`.
    ProfileList,
    /// `vmm features lint --json`: `crate::features::lint::LintView`.
    FeaturesLint,
    /// `vmm bench peers --json`: `crate::bench::peers::PeersBench`.
    BenchPeers,
    /// `vmm bench snapshot --json`: `crate::bench::snapshot::SnapshotBench`.
    BenchSnapshot,
    /// `vmm bench startup --json`: `crate::bench::startup::StartupBench`.
    BenchStartup,
}

impl Document {
    /// Every document, in the order the schemas are listed.
    pub const ALL: [Document; 12] = [
        Document::Run,
        Document::Restore,
        Document::Features,
        Document::FeaturesCompare,
        Document::BenchExits,
        Document::BenchInitXstate,
        Document::SnapshotInfo,
        Document::ProfileList,
        Document::FeaturesLint,
        Document::BenchPeers,
        Document::BenchSnapshot,
        Document::BenchStartup,
    ];

    /// The document's name: the schema file is `<name>.schema.json`.
    pub const fn name(self) -> &'static str {
        match self {
            Document::Run => "run",
            Document::Restore => "restore",
            Document::Features => "features",
            Document::FeaturesCompare => "features-compare",
            Document::BenchExits => "bench-exits",
            Document::BenchInitXstate => "bench-init-xstate",
            Document::SnapshotInfo => "snapshot-info",
            Document::ProfileList => "profile-list",
            Document::FeaturesLint => "features-lint",
            Document::BenchPeers => "bench-peers",
            Document::BenchSnapshot => "bench-snapshot",
            Document::BenchStartup => "bench-startup",
        }
    }

    /// The command that prints it.
    pub const fn command(self) -> &'static str {
        match self {
            Document::Run => "vmm run --json",
            Document::Restore => "vmm restore FILE --json",
            Document::Features => "vmm features --json",
            Document::FeaturesCompare => "vmm features compare PROFILE... --json",
            Document::BenchExits => "vmm bench exits --json",
            Document::BenchInitXstate => "vmm bench init-xstate --json",
            Document::SnapshotInfo => "vmm snapshot info FILE --json",
            Document::ProfileList => "vmm features --list-profiles --json",
            Document::FeaturesLint => "vmm features lint --json",
            Document::BenchPeers => "vmm bench peers --json",
            Document::BenchSnapshot => "vmm bench snapshot --json",
            Document::BenchStartup => "vmm bench startup --json",
        }
    }

    /// The value of its `schema_version` field.
    pub const fn version(self) -> u32 {
        match self {
            Document::Run
            | Document::Restore
            | Document::Features
            | Document::FeaturesCompare
            | Document::BenchExits
            | Document::BenchInitXstate
            | Document::SnapshotInfo
            | Document::ProfileList
            | Document::FeaturesLint
            | Document::BenchPeers
            | Document::BenchStartup => 1,
            // 2: `after_s` and `after_auto_run_s` (a time after boot) went
            // away for `point` (the guest's own snapshot point).
            Document::BenchSnapshot => 2,
        }
    }

    /// The schema's file name.
    pub fn file_name(self) -> String {
        format!("{}.schema.json", self.name())
    }
}

/// A document as printed: `schema_version` first, then the body's fields.
#[derive(Serialize, JsonSchema)]
pub struct Versioned<T> {
    /// The version of this document's format.
    pub schema_version: u32,
    /// The document's own fields.
    #[serde(flatten)]
    pub body: T,
}

/// `body` as the pretty-printed JSON document `doc`, with its `schema_version`.
pub fn to_json<T: Serialize>(doc: Document, body: &T) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&Versioned {
        schema_version: doc.version(),
        body,
    })
}

/// The schema of a mask serialised as a `0x`-prefixed hex string
/// (`report::hex`); named in `#[schemars(with = ...)]` on those fields.
pub struct Hex;

impl JsonSchema for Hex {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Hex".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        schemars::json_schema!({
            "description": "A 64-bit mask as a 0x-prefixed hex string, e.g. \"0x2e7\".",
            "type": "string",
            "pattern": "^0x[0-9a-fA-F]+$",
        })
    }
}
