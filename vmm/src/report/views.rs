//! Views of what `vmm run` was asked for, as its JSON shows them: the
//! `--xfeatures` resolution and the fate of a requested snapshot.

use serde::Serialize;
use xstate::{Resolution, XfeatureMask};

use super::hex;
use crate::run::{RunEnd, RunOutcome};

/// An `--xfeatures` resolution as JSON (`xfeatures_resolution`): masks as
/// hex strings, plus the result's names.
#[derive(schemars::JsonSchema, Clone, Debug, serde::Serialize)]
pub struct ResolutionView {
    /// The value as given.
    pub spec: String,
    /// Components named to be added (groups expanded), hex.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub requested: XfeatureMask,
    /// Components named to be removed, hex.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub removed: XfeatureMask,
    /// Prerequisites added for the named components, hex.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub implied: XfeatureMask,
    /// Dependents removed along with the named removals, hex.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub dropped: XfeatureMask,
    /// The XCR0 policy, hex.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub result: XfeatureMask,
    /// The policy's component names (`x87,sse,avx`).
    pub result_names: String,
}

impl ResolutionView {
    /// The view of `r`, resolved from `spec`.
    pub fn new(spec: &str, r: &Resolution) -> Self {
        Self {
            spec: spec.to_string(),
            requested: r.requested,
            removed: r.removed,
            implied: r.implied,
            dropped: r.dropped,
            result: r.result,
            result_names: r.result.to_string(),
        }
    }
}

/// What became of a requested snapshot (`snapshot` in the JSON): null when
/// the run asked for none.
#[derive(schemars::JsonSchema, Clone, Debug, Serialize)]
pub struct SnapshotView {
    /// `--snapshot-after`, seconds (null when only the guest may ask).
    pub requested_after_s: Option<f64>,
    /// Whether a snapshot file was written.
    pub written: bool,
    /// The file (whether or not it was written).
    pub path: String,
    /// Why none was written (null when one was).
    pub reason: Option<String>,
    /// Milliseconds from the stopped vCPU to the file written (capture,
    /// encode, write); null when none was written.
    pub save_ms: Option<f64>,
}

impl SnapshotView {
    /// The view for a run of `outcome` that asked for a snapshot into
    /// `path`, after `after` seconds if given. Also the line `vmm` warns
    /// with on stderr when nothing was written.
    pub fn new(outcome: &RunOutcome, after: Option<f64>, path: &std::path::Path) -> Self {
        let written = matches!(outcome.end, RunEnd::Snapshotted(_));
        let ran = outcome.run_time.as_secs_f64();
        let reason = (!written).then(|| {
            let how = match &outcome.end {
                RunEnd::Exited(_) => "exited",
                RunEnd::Crashed { .. } => "crashed",
                RunEnd::TimedOut(_) => "was stopped by --timeout",
                RunEnd::Snapshotted(_) => "stopped",
                RunEnd::ProtocolViolation(_) => "broke the protocol",
                RunEnd::SnapshotMemory(_) => "was stopped (its snapshot's memory failed)",
                RunEnd::Reset => "reset the machine",
                RunEnd::XstateMismatch(_) => "disagreed with vmm's xstate layout",
            };
            if let Some(first) = outcome.snapshot_errors.first() {
                // The write failed and the guest went on: that is what
                // happened, said once on stderr when it did.
                return format!(
                    "the snapshot could not be written ({first}); the guest was resumed and \
                     {how} after {ran:.1} s"
                );
            }
            match after {
                Some(a) => format!(
                    "the guest {how} after {ran:.1} s, before --snapshot-after {a}: \
                     no snapshot written"
                ),
                None => format!(
                    "the guest {how} after {ran:.1} s without asking for a snapshot: \
                     no snapshot written"
                ),
            }
        });
        Self {
            requested_after_s: after,
            written,
            path: path.display().to_string(),
            reason,
            save_ms: outcome
                .snapshot_time
                .filter(|_| written)
                .map(|d| d.as_secs_f64() * 1e3),
        }
    }
}

/// How a restore's stored pages reached guest RAM (`restored_memory` in
/// `vmm restore --json`; absent after `vmm run`).
#[derive(schemars::JsonSchema, Clone, Debug, Serialize)]
pub struct RestoredMemoryView {
    /// `on_demand`: copied in when first touched (a `userfaultfd` pager),
    /// the rest in the background; `up_front`: every page read before the
    /// first `KVM_RUN`.
    pub mode: String,
    /// Why the pages were read up front (`--verify-memory`, or what on
    /// demand lacked); null on demand.
    pub why_up_front: Option<String>,
    /// Page faults the pager served while the guest ran (0 up front).
    pub faults: u64,
    /// From the pages' start to the last page in, ms (up front: before the
    /// first `KVM_RUN`; on demand: while the guest ran).
    pub fill_ms: f64,
}

impl RestoredMemoryView {
    /// The view of `pages` once they are all in (or failed).
    pub fn new(pages: &crate::snapshot::pager::Pages) -> Self {
        use crate::snapshot::pager::PagesMode;
        let (faults, took) = pages.served();
        let (mode, why_up_front) = match pages.mode() {
            PagesMode::OnDemand => ("on_demand", None),
            PagesMode::UpFront { why } => ("up_front", Some(why.clone())),
        };
        Self {
            mode: mode.into(),
            why_up_front,
            faults,
            fill_ms: took.as_secs_f64() * 1e3,
        }
    }
}
