//! `vmm run` and `vmm restore`, from parsed options to a finished
//! [`RunSummary`]: the one owner of a run's result.
//!
//! The run itself ([`crate::run`]) ends with a [`RunOutcome`], what the
//! machine saw. The summary adds what the tools measure around it, in this
//! order: the rows timed across a snapshot are marked
//! (`crate::report::spanning`), the interleaved native repetitions become
//! ratios, rows the guest did not repeat get a native run after the guest,
//! the openssl yardsticks follow the guest's AES rows, and the parallel
//! rows of several vCPUs get the same set on as many host threads. `main`
//! then only prints it.

use std::path::{Path, PathBuf};

use guest::workloads::Selection;

use crate::error::{Error, Result};
use crate::native;
use crate::report::{ResolutionView, RestoredMemoryView, RunSummary, SnapshotView};
use crate::run::restore::RestoreOptions;
use crate::run::{self, RunConfig, RunOutcome};
use crate::snapshot::SnapshotError;

/// The native side of a run: the guest's workloads timed on the host too.
#[derive(Clone, Copy, Debug)]
pub struct NativePlan {
    /// `--workload`, parsed.
    pub workload: Selection,
    /// Guest/native repetition pairs per row (`--native-reps`).
    pub reps: u32,
}

/// `vmm run`, parsed.
pub struct RunRequest {
    /// The run (its `interleave` is set here from `native`).
    pub config: RunConfig,
    /// `None`: `--no-native`.
    pub native: Option<NativePlan>,
}

/// `vmm restore`, parsed.
pub struct RestoreRequest {
    /// The snapshot file (only read).
    pub file: PathBuf,
    /// How the resumed guest runs.
    pub options: RestoreOptions,
    /// Time the guest's workloads (named on its command line) on the host.
    pub native: bool,
}

/// Why a restore session failed: the snapshot (refused before the guest
/// ran, or by KVM), or what came after it.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The snapshot could not be restored.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// The resumed run's summary could not be made.
    #[error(transparent)]
    Vmm(#[from] Error),
}

/// Boot, run and summarise.
///
/// # Errors
/// Whatever [`run::run`] refuses (a bad image, option or policy, KVM
/// failing), and a native side that cannot run.
pub fn run(request: RunRequest) -> Result<RunSummary> {
    let RunRequest { mut config, native } = request;
    let resolution = config
        .xfeatures
        .resolved()
        .map(|r| ResolutionView::new(&r.spec, &r.resolution));
    let target = config.snapshot_file.clone();
    let after = config.snapshot_after;
    if let Some(plan) = native {
        config.interleave = Some(native::interleave::starter(
            plan.workload,
            plan.reps,
            config.kernel.bytes.clone(),
            config.hugepages,
        ));
    }
    let outcome = run::run(config)?;
    let extras = Extras {
        resolution,
        snapshot: snapshot_view(&outcome, target.as_deref(), after),
        resumed: None,
    };
    finish(&outcome, native.map(|p| p.workload), extras)
}

/// Resume a snapshot, run it and summarise.
///
/// # Errors
/// [`SessionError::Snapshot`] when the file is refused or KVM refuses its
/// state; [`SessionError::Vmm`] when the native side cannot run.
pub fn restore(request: RestoreRequest) -> std::result::Result<RunSummary, SessionError> {
    let RestoreRequest {
        file,
        options,
        native,
    } = request;
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let target = options.snapshot_file.clone();
    let after = options.snapshot_after;
    // Everything the report needs of the snapshot was kept by the restore:
    // the file is never read again (it may have changed meanwhile).
    let restored = run::restore::restore_keeping(&file, options)?;
    let outcome = restored.outcome;
    // A snapshot the guest asked for at its point (`snapshot=PHASE`) came
    // between two rows, so no row spans it.
    let resumed =
        (!crate::snapshot::save::Trigger::is_point(&restored.trigger)).then_some(Resumed {
            memory: restored.memory,
            created_unix_s: restored.created_unix_s,
            restore_started_unix_s: started,
        });
    // The guest's workloads, from the command line it booted with.
    let workload = if native {
        let list = restored
            .cmdline
            .split_whitespace()
            .find_map(|w| w.strip_prefix("workload=").map(str::to_string))
            .unwrap_or_else(|| "quick".into());
        Some(
            Selection::parse(&list)
                .map_err(|e| Error::Argument(format!("--workload {list:?}: {e}")))?,
        )
    } else {
        None
    };
    let extras = Extras {
        resolution: None,
        snapshot: snapshot_view(&outcome, target.as_deref(), after),
        resumed,
    };
    let mut summary = finish(&outcome, workload, extras)?;
    summary.restored_memory = restored.pages.as_ref().map(RestoredMemoryView::new);
    Ok(summary)
}

/// What became of the snapshot a run was asked for (`None`: none asked for).
fn snapshot_view(
    outcome: &RunOutcome,
    target: Option<&Path>,
    after: Option<std::time::Duration>,
) -> Option<SnapshotView> {
    Some(SnapshotView::new(
        outcome,
        after.map(|d| d.as_secs_f64()),
        target?,
    ))
}

/// What a session adds to a run's summary: facts about the options rather
/// than the guest.
struct Extras {
    /// How `--xfeatures` was understood.
    resolution: Option<ResolutionView>,
    /// What became of a requested snapshot.
    snapshot: Option<SnapshotView>,
    /// After a restore: the snapshot's memory and times, to mark the row
    /// timed across it.
    resumed: Option<Resumed>,
}

/// What `vmm restore` keeps of the snapshot for
/// [`crate::report::spanning::mark_rows_spanning_snapshot`]: the guest's
/// report record as the snapshot held it, and its times.
struct Resumed {
    /// (guest address, bytes) of what was kept.
    memory: Vec<(u64, Vec<u8>)>,
    created_unix_s: u64,
    restore_started_unix_s: f64,
}

impl Resumed {
    /// Whether `bytes` lie in the snapshot's guest memory as the restore
    /// kept it (the guest's report record), 8-byte aligned.
    fn holds(&self, bytes: &[u8]) -> bool {
        if bytes.is_empty() {
            return false;
        }
        self.memory.iter().any(|(addr, run)| {
            let skip = (addr.next_multiple_of(8) - addr) as usize;
            run.len() >= bytes.len()
                && (skip..=run.len() - bytes.len())
                    .step_by(8)
                    .any(|i| run[i..].starts_with(bytes))
        })
    }
}

/// A run's (or a restored run's) finished summary. `workload`: the rows to
/// run natively for guest/native ratios (`None`: `--no-native`).
fn finish(outcome: &RunOutcome, workload: Option<Selection>, extras: Extras) -> Result<RunSummary> {
    let mut summary = RunSummary::new(outcome);
    // A write that failed was said when it failed ("...; the guest was
    // resumed"): the warning is for a snapshot that was never attempted.
    let said = !outcome.snapshot_errors.is_empty();
    if let Some(reason) = extras.snapshot.as_ref().and_then(|s| s.reason.as_ref()) {
        if !said {
            crate::output::terminal::line(format_args!("vmm: warning: {reason}"));
        }
    }
    summary.xfeatures_resolution = extras.resolution;
    summary.snapshot = extras.snapshot;
    if let (Some(r), Some(report)) = (&extras.resumed, outcome.report.as_deref()) {
        mark_spanning(&mut summary, r, report);
    }
    let carried = native::interleave::of(outcome.native.as_deref());
    let interleaved = carried.filter(|n| !n.pairs.is_empty());
    if let Some(n) = interleaved {
        summary.native = Some(native::attach_interleaved(&mut summary.results, n));
    }
    summary.hugepages = outcome
        .hugepages
        .as_ref()
        .map(|h| native::hugepages_view(h, carried));
    // Rows the guest did not repeat on the port (another kernel, a restored
    // run): the native side runs once, after the guest.
    let unpaired = summary
        .results
        .iter()
        .any(|r| r.native_spread.is_none() && r.is_workload());
    if let Some(sel) = workload.filter(|_| unpaired) {
        let backing = outcome.hugepages.as_ref().map(|h| h.backing);
        let (native, scratch) = native::run_native(sel, summary.tsc_khz, backing)?;
        native::attach_ratios(&mut summary.results, &native);
        // The native side that ran is this one when no row was paired.
        if let (Some(h), None) = (summary.hugepages.as_mut(), interleaved) {
            h.native = Some(native::scratch_view(&scratch));
        }
    }
    // The yardsticks follow the guest's AES rows, paired or not (none
    // without AES rows: `openssl` is not started).
    if let Some(sel) = workload {
        summary.openssl_yardsticks = native::aes_yardsticks(&summary.results, sel.quick);
        summary.openssl_aes_128_cbc_mb_per_s = native::cbc_8192(&summary.openssl_yardsticks);
        summary.seed_xts_4k_ice_lake = native::seed_reference(&summary.results);
    }
    // `bench=parallel` with several vCPUs: the same set on as many host threads.
    if let Some(smp) = summary
        .smp
        .as_mut()
        .filter(|s| workload.is_some() && !s.parallel.is_empty())
    {
        let (solo, threads) = native::run_parallel_native(smp.vcpus.len(), summary.tsc_khz);
        crate::report::parallel::attach_native(&mut smp.parallel, &solo, &threads);
    }
    Ok(summary)
}

/// Mark the row a restored guest timed across the snapshot, and say so.
fn mark_spanning(summary: &mut RunSummary, r: &Resumed, report: &guest::protocol::Report) {
    let holds = |bytes: &[u8]| r.holds(bytes);
    let gap = crate::report::spanning::SnapshotGap {
        in_memory: &holds,
        created_unix_s: r.created_unix_s,
        restore_started_unix_s: r.restore_started_unix_s,
    };
    let tsc_khz = summary.tsc_khz;
    if let Some(i) = crate::report::spanning::mark_rows_spanning_snapshot(
        &mut summary.results,
        report,
        &gap,
        tsc_khz,
    ) {
        let row = &summary.results[i];
        crate::output::terminal::line(format_args!(
            "vmm: {} {} size {}: not a measurement, it {}",
            row.name,
            row.variant,
            row.size,
            row.invalid.as_deref().unwrap_or("spans a snapshot")
        ));
    }
}
