//! `vmm bench snapshot`: what a snapshot and a restore cost as the guest's
//! RAM grows, for the same guest work.
//!
//! Per `--mem` size and run: the guest boots with the workload (default
//! `gemm`) and `snapshot=PHASE` (`--at`, default `mid`: before the first
//! DGEMM n = 1024, its matrices filled; [`guest::protocol::snapshot`]), is
//! snapshotted in this process when it asks at that point, and is then
//! restored by a child `vmm restore` that runs it to its normal end. The
//! point is the guest's, not a time: the same work is done at the snapshot
//! on every CPU, in every run and under every VMM (a time after boot,
//! taken from one timing boot, was missed by later runs on a busy host:
//! "no snapshot: the guest exited before 1.52 s"). Measured:
//!
//! - **snapshot**: from the guest's pause (the vCPU back in the VMM) to the
//!   file renamed into place and its directory synced (the run's
//!   `snapshot_time`);
//! - **file**: its length and the disk space it takes;
//! - **write floor**: right after each snapshot, as many bytes as its file
//!   written from a buffer in memory by the same atomic write
//!   ([`write_atomic`](crate::output::write_atomic): private temporary file, `write`, fsync, rename,
//!   directory sync) into the same directory, then removed: what the
//!   host's file system charges for the file's bytes at that moment. The
//!   snapshot over it, run by run, is what `vmm` adds to a plain write of
//!   its file. Why it is measured: on the VMs these runs were measured on
//!   (free page reporting to their host), writing the same 27 MB takes
//!   25 ms or 75-100 ms from one minute to the next, in plain Python as in
//!   `vmm`; a snapshot median alone cannot tell that from a snapshot that
//!   grew with the guest, the ratio can;
//! - **restore**: the child's own setup time, from `restore()`'s start
//!   (file opened) to the VM ready for its first `KVM_RUN`, plus the
//!   process start (spawn to exit of `vmm --version`, measured in the same
//!   run): process start to the first `KVM_RUN`, as `vmm restore` pays it;
//! - whether the restored guest exited 0 with every workload check passing
//!   (its exit status is `vmm`'s), and how long that run took.
//!
//! Figures are medians with min..p90 over `--runs` (rounds interleave the
//! sizes, so drift on a shared machine spreads over every size alike).
//!
//! With `--peers`, Cloud Hypervisor and Firecracker (executables from
//! `VMM_PEER_CLOUD_HYPERVISOR` / `VMM_PEER_FIRECRACKER`, as `vmm bench
//! peers`; unset: the column says so) run the same embedded guest with the
//! same words and RAM after `vmm`, in the same round, and are paused
//! through their API sockets while the guest waits at the same point
//! (its waiting line on their console), then their restored guest is
//! released ([`super::peers::snapshot`]). Their columns:
//!
//! - **snapshot**: the pause request sent to the snapshot request answered
//!   (files complete: both peers answer after writing);
//! - **file / disk**: the snapshot's files (Cloud Hypervisor's directory;
//!   Firecracker's state and memory files), deleted as soon as the cycle
//!   ends; the sweep refuses a peer's snapshot (`NoSpace`) when the disk
//!   cannot hold its RAM;
//! - **restore**: the restoring process spawned to its resume request
//!   answered (the peers' own "running again"; Cloud Hypervisor with
//!   `memory_restore_mode=ondemand`, its fastest);
//! - **checks**: the restored guest was released at its point and exited
//!   0 with its record on the serial console and every result's check
//!   passing. A failed cycle names its VMM and why.
//!
//! Then per size, the goals of issue 16: `vmm`'s snapshot median over the
//! best (lowest) peer's (≤ 0.2 at 512 MiB and above), and `vmm`'s restore to
//! its first `KVM_RUN` below every measured peer's restore.

use std::path::PathBuf;
use std::time::Duration;

use guest::protocol::SnapshotPhase;
use serde::Serialize;

use super::peers::Vmm;
use super::stats::Spread;
use crate::arch::layout::{MAX_MEM_MIB, MIN_MEM_MIB};

mod measure;

pub use measure::run;

/// Sizes swept without `--mem`.
pub const DEFAULT_MEM_MIB: &[u64] = &[64, 512, 2048];
/// Runs per size without `--runs`.
pub const DEFAULT_RUNS: u32 = 3;
/// Most runs per size.
pub const MAX_RUNS: u32 = 50;

/// What `vmm bench snapshot` was asked for.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Guest RAM sizes, MiB.
    pub mem_mib: Vec<u64>,
    /// Runs per size.
    pub runs: u32,
    /// The guest's workload list.
    pub workload: String,
    /// Where the guest stops for its snapshot (`--at`).
    pub point: SnapshotPhase,
    /// Limit of one boot or restore.
    pub timeout: Duration,
    /// Where the snapshots go (a private temporary directory).
    pub dir: PathBuf,
    /// The `vmm` executable the restores run.
    pub vmm: PathBuf,
    /// The peers to measure beside `vmm` (`--peers`); empty without.
    pub peers: Vec<PeerPlan>,
}

/// A peer of the sweep: its executable, or why it is absent.
#[derive(Clone, Debug)]
pub struct PeerPlan {
    /// Which.
    pub vmm: Vmm,
    /// Its executable; `Err(reason)` when absent.
    pub binary: std::result::Result<PathBuf, String>,
}

/// Where the guest stops without `--at`: before the largest DGEMM
/// (n = 1024, whose matrices are the ~27 MB in use), with the largest rows
/// still to run after the restore.
pub const DEFAULT_POINT: &str = "mid";

/// `--at PHASE`: one of [`guest::protocol::SNAPSHOT_PHASES`].
pub fn parse_point(name: &str) -> std::result::Result<SnapshotPhase, String> {
    SnapshotPhase::parse(name).ok_or_else(|| {
        format!(
            "{name:?} is no snapshot point: one of {}",
            guest::protocol::SNAPSHOT_PHASES.join(", ")
        )
    })
}

/// The snapshot-time goal: `vmm` ≤ this fraction of the best peer.
pub const SNAPSHOT_GOAL_RATIO: f64 = 0.2;
/// The smallest guest the snapshot-time goal applies to, MiB.
pub const SNAPSHOT_GOAL_MIN_MIB: u64 = 512;

/// The peers `--peers` measures, from the environment (`env` looks a
/// variable up): Cloud Hypervisor and Firecracker. A variable set to
/// something that is not an executable file is an error (the user asked
/// for that peer).
pub fn peer_plans(
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> std::result::Result<Vec<PeerPlan>, super::peers::PeerError> {
    let (run, skipped) = super::peers::targets(PathBuf::new(), |v| {
        // QEMU is not measured: never look it up.
        if v == "VMM_PEER_QEMU" {
            None
        } else {
            env(v)
        }
    })?;
    Ok([Vmm::CloudHypervisor, Vmm::Firecracker]
        .into_iter()
        .map(|vmm| PeerPlan {
            vmm,
            binary: run
                .iter()
                .find(|t| t.vmm == vmm)
                .map(|t| t.binary.clone())
                .ok_or_else(|| {
                    skipped
                        .iter()
                        .find(|s| s.vmm == vmm)
                        .map_or_else(|| "not run".to_string(), |s| s.reason.clone())
                }),
        })
        .collect())
}

/// `vmm bench snapshot --json`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SnapshotBench {
    /// The guest's workload list.
    pub workload: String,
    /// The snapshot point the guest stopped at (`snapshot=` on its
    /// command line, under every VMM): `start`, `mid` or `end`.
    pub point: String,
    /// The same guest booted and run to its end without a snapshot, once,
    /// at the smallest size, s: the unrestored run.
    pub unrestored_run_s: f64,
    /// Runs per size.
    pub runs: u32,
    /// Process start of `vmm` (spawn to exit of `vmm --version`), ms.
    pub process_start_ms: Option<Spread>,
    /// One row per guest size.
    pub rows: Vec<SnapshotRow>,
    /// How each snapshot's stored pages were written to its file
    /// (`crate::snapshot::save::MEMORY_WRITE`, also in the file's meta).
    pub memory_write: String,
}

/// One guest size.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SnapshotRow {
    /// Guest RAM, MiB.
    pub mem_mib: u64,
    /// Pause to rename, ms.
    pub snapshot_ms: Option<Spread>,
    /// The snapshot file's length (of the last run), bytes.
    pub file_bytes: u64,
    /// The disk space it takes (of the last run), bytes.
    pub disk_bytes: u64,
    /// The same atomic write of as many bytes as the snapshot file, from a
    /// buffer in memory, right after each snapshot, ms: what the file
    /// system charged for the file's bytes then (see the module doc).
    pub write_floor_ms: Option<Spread>,
    /// Each run's snapshot time over its write floor.
    pub snapshot_over_floor: Option<Spread>,
    /// `restore()` start to ready for the first `KVM_RUN`, in the child, ms.
    pub restore_setup_ms: Option<Spread>,
    /// Process start to the first `KVM_RUN`: the medians of
    /// `process_start_ms` and `restore_setup_ms` added, ms.
    pub restore_to_first_run_ms: Option<f64>,
    /// The restored guest's run to its end, ms.
    pub restored_run_ms: Option<Spread>,
    /// What the unrestored run took from the snapshot point to its end
    /// (`unrestored_run_s` less the median time from boot to the point in
    /// this size's snapshot runs), ms: the restored run's
    /// counterpart; the difference is what restoring (the pages coming in
    /// on demand) cost the guest.
    pub unrestored_rest_ms: Option<f64>,
    /// Page faults the restored guest's pager served (`restored_memory`
    /// of `vmm restore --json`).
    pub pager_faults: Option<Spread>,
    /// From the restore's start of paging to every stored page in and
    /// verified, ms.
    pub pages_in_ms: Option<Spread>,
    /// Restores whose guest exited 0 with every check passing.
    pub restores_passed: u32,
    /// What went wrong in `vmm`'s runs that did not pass (the first few),
    /// each naming its step (snapshot, restore).
    pub failures: Vec<String>,
    /// The peers on the same guest (`--peers`; empty without).
    pub peers: Vec<PeerColumn>,
    /// The goals against the peers (`--peers`; absent without).
    pub goals: Option<Goals>,
}

/// One peer at one guest size.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct PeerColumn {
    /// Which.
    pub vmm: Vmm,
    /// Why it was not measured (its variable unset); `None` when it ran.
    pub absent: Option<String>,
    /// Pause request to snapshot request answered, ms.
    pub snapshot_ms: Option<Spread>,
    /// The snapshot files' lengths added (of the last successful cycle), bytes.
    pub file_bytes: u64,
    /// The disk space they took, bytes.
    pub disk_bytes: u64,
    /// Restoring process spawned to its resume request answered, ms.
    pub restore_ms: Option<Spread>,
    /// Cycles whose restored guest exited 0 with every check passing.
    pub restores_passed: u32,
    /// Why cycles failed (the first few).
    pub failures: Vec<String>,
}

/// Whether a goal holds at one size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Goal {
    /// It holds.
    Met,
    /// It does not.
    Missed,
    /// The goal does not apply at this size.
    NotApplicable,
    /// No peer (or `vmm` itself) was measured: nothing to compare.
    Unmeasured,
}

impl Goal {
    fn words(self) -> &'static str {
        match self {
            Goal::Met => "met",
            Goal::Missed => "MISSED",
            Goal::NotApplicable => "n/a",
            Goal::Unmeasured => "unmeasured",
        }
    }
}

/// One peer's figures at one size for [`Goals::of`]: which, its median
/// snapshot and restore times (ms; `None`: not measured) and its files'
/// bytes.
pub type PeerMedians = (Vmm, Option<f64>, Option<f64>, u64);

/// `vmm` against the best peer at one size (issue 16 §1).
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Goals {
    /// The peer with the lowest median snapshot time.
    pub best_snapshot_peer: Option<Vmm>,
    /// `vmm`'s median snapshot time over that peer's.
    pub snapshot_ratio: Option<f64>,
    /// `snapshot_ratio` ≤ [`SNAPSHOT_GOAL_RATIO`], at
    /// [`SNAPSHOT_GOAL_MIN_MIB`] and above.
    pub snapshot_goal: Goal,
    /// The peer with the lowest median restore time.
    pub best_restore_peer: Option<Vmm>,
    /// `vmm`'s process start to first `KVM_RUN` over that peer's restore.
    pub restore_ratio: Option<f64>,
    /// `vmm`'s restore below every measured peer's (`restore_ratio` < 1).
    pub restore_goal: Goal,
    /// `vmm`'s snapshot file over the best-snapshot peer's files.
    pub file_ratio: Option<f64>,
}

impl Goals {
    /// The verdicts at `mem_mib` from `vmm`'s medians and each peer's
    /// `(which, snapshot median, restore median, file bytes)`.
    pub fn of(
        mem_mib: u64,
        vmm_snapshot: Option<f64>,
        vmm_restore: Option<f64>,
        vmm_file: u64,
        peers: &[PeerMedians],
    ) -> Goals {
        let best = |pick: fn(&PeerMedians) -> Option<f64>| {
            peers
                .iter()
                .filter_map(|p| pick(p).map(|v| (p.0, v, p.3)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
        };
        let snap = best(|p| p.1);
        let rest = best(|p| p.2);
        let snapshot_ratio = snap.zip(vmm_snapshot).map(|((_, p, _), v)| v / p);
        let restore_ratio = rest.zip(vmm_restore).map(|((_, p, _), v)| v / p);
        let snapshot_goal = match snapshot_ratio {
            _ if mem_mib < SNAPSHOT_GOAL_MIN_MIB => Goal::NotApplicable,
            None => Goal::Unmeasured,
            Some(r) if r <= SNAPSHOT_GOAL_RATIO => Goal::Met,
            Some(_) => Goal::Missed,
        };
        let restore_goal = match restore_ratio {
            None => Goal::Unmeasured,
            Some(r) if r < 1.0 => Goal::Met,
            Some(_) => Goal::Missed,
        };
        Goals {
            best_snapshot_peer: snap.map(|s| s.0),
            snapshot_ratio,
            snapshot_goal,
            best_restore_peer: rest.map(|r| r.0),
            restore_ratio,
            restore_goal,
            file_ratio: snap
                .filter(|s| s.2 > 0 && vmm_file > 0)
                .map(|s| vmm_file as f64 / s.2 as f64),
        }
    }

    /// Whether no goal was missed.
    #[cfg(test)]
    pub fn none_missed(&self) -> bool {
        self.snapshot_goal != Goal::Missed && self.restore_goal != Goal::Missed
    }
}

impl SnapshotBench {
    /// Whether every restore passed.
    pub fn all_ok(&self) -> bool {
        self.rows.iter().all(|r| {
            r.restores_passed == self.runs
                && r.failures.is_empty()
                && r.peers
                    .iter()
                    .all(|p| p.absent.is_some() || p.failures.is_empty())
        })
    }

    /// The table.
    pub fn to_table(&self) -> String {
        use crate::report::table::Columns;
        let mut s = format!(
            "snapshot of `workload={}` at its point `snapshot={}`, then restored to its end; \
             median (min..p90) of {} run(s)\n\
             process start of vmm, ms (spawn to exit of `vmm --version`): {}\n\
             stored pages written by: {} (no copy in user space; \
             the choice is measured by `cargo bench --bench snapshot_copy`)\n\
             write floor: as many bytes as the file, from memory, by the same atomic write \
             (temporary file, fsync, rename, directory sync), right after each snapshot; \
             snapshot / floor run by run\n\
             restored run: the restored guest to its end, beside the unrestored run's rest \
             (the same guest booted without a snapshot, {:.2} s in all, less the snapshot point); \
             faults: those the on-demand pager served; pages in: until every page was in, verified\n",
            self.workload,
            self.point,
            self.runs,
            ms(self.process_start_ms.as_ref()),
            self.memory_write,
            self.unrestored_run_s
        );
        let t = Columns::new()
            .right("", 8)
            .right("  ", 22)
            .right("  ", 22)
            .right("  ", 20)
            .right("  ", 11)
            .right("  ", 11)
            .right("  ", 22)
            .right("  ", 14)
            .right("  ", 22)
            .right("  ", 14)
            .right("  ", 16)
            .right("  ", 18)
            .left("  ", 0);
        t.push(
            &mut s,
            &[
                "mem MiB",
                "snapshot ms",
                "write floor ms",
                "snapshot / floor",
                "file B",
                "disk B",
                "restore setup ms",
                "to KVM_RUN ms",
                "restored run ms",
                "unrestored ms",
                "faults",
                "pages in ms",
                "checks",
            ],
        );
        for r in &self.rows {
            t.push(
                &mut s,
                &[
                    r.mem_mib.to_string(),
                    ms(r.snapshot_ms.as_ref()),
                    ms(r.write_floor_ms.as_ref()),
                    r.snapshot_over_floor.as_ref().map_or("-".into(), |x| {
                        format!("{:.2}x ({:.2}..{:.2})", x.median, x.min, x.p90)
                    }),
                    r.file_bytes.to_string(),
                    r.disk_bytes.to_string(),
                    ms(r.restore_setup_ms.as_ref()),
                    r.restore_to_first_run_ms
                        .map_or("-".into(), |v| format!("{v:.1}")),
                    ms(r.restored_run_ms.as_ref()),
                    r.unrestored_rest_ms
                        .map_or("-".into(), |v| format!("{v:.1}")),
                    r.pager_faults.as_ref().map_or("-".into(), |f| {
                        format!("{:.0} ({:.0}..{:.0})", f.median, f.min, f.p90)
                    }),
                    ms(r.pages_in_ms.as_ref()),
                    format!("{}/{} pass", r.restores_passed, self.runs),
                ],
            );
        }
        for r in &self.rows {
            for f in &r.failures {
                s.push_str(&format!("{} MiB {}: {f}\n", r.mem_mib, Vmm::Vmm.name()));
            }
        }
        if self.rows.iter().any(|r| !r.peers.is_empty()) {
            self.peers_table(&mut s);
        }
        s
    }

    fn peers_table(&self, s: &mut String) {
        use crate::report::table::Columns;
        s.push_str(
            "\nthe same guest under the peers (paused at the same point, while the guest waits there)\n\
             snapshot: vmm pause to rename; peers pause request to snapshot request answered\n\
             restore: vmm process start to first KVM_RUN; peers process spawned to resume answered \
             (cloud-hypervisor memory_restore_mode=ondemand)\n",
        );
        let t = Columns::new()
            .right("", 8)
            .left("  ", 16)
            .right("  ", 22)
            .right("  ", 11)
            .right("  ", 11)
            .right("  ", 22)
            .left("  ", 0);
        t.push(
            s,
            &[
                "mem MiB",
                "vmm",
                "snapshot ms",
                "file B",
                "disk B",
                "restore ms",
                "checks",
            ],
        );
        for r in &self.rows {
            t.push(
                s,
                &[
                    r.mem_mib.to_string(),
                    "vmm".into(),
                    ms(r.snapshot_ms.as_ref()),
                    r.file_bytes.to_string(),
                    r.disk_bytes.to_string(),
                    r.restore_to_first_run_ms
                        .map_or("-".into(), |v| format!("{v:.1}")),
                    format!("{}/{} pass", r.restores_passed, self.runs),
                ],
            );
            for p in &r.peers {
                let checks = match &p.absent {
                    Some(why) => format!("absent: {why}"),
                    None => format!("{}/{} pass", p.restores_passed, self.runs),
                };
                t.push(
                    s,
                    &[
                        String::new(),
                        p.vmm.name().into(),
                        ms(p.snapshot_ms.as_ref()),
                        p.file_bytes.to_string(),
                        p.disk_bytes.to_string(),
                        ms(p.restore_ms.as_ref()),
                        checks,
                    ],
                );
            }
            if let Some(g) = &r.goals {
                let ratio = |r: Option<f64>, who: Option<Vmm>| match (r, who) {
                    (Some(r), Some(w)) => format!("{r:.3}x {}", w.name()),
                    _ => "-".into(),
                };
                s.push_str(&format!(
                    "         goals: snapshot {} (<= {SNAPSHOT_GOAL_RATIO}x at >= {SNAPSHOT_GOAL_MIN_MIB} MiB) {}; \
                     restore {} (< 1x) {}; file {}\n",
                    ratio(g.snapshot_ratio, g.best_snapshot_peer),
                    g.snapshot_goal.words(),
                    ratio(g.restore_ratio, g.best_restore_peer),
                    g.restore_goal.words(),
                    g.file_ratio.map_or("-".into(), |f| format!("{f:.4}x")),
                ));
            }
        }
        for r in &self.rows {
            for p in &r.peers {
                for f in &p.failures {
                    s.push_str(&format!("{} MiB {}: {f}\n", r.mem_mib, p.vmm.name()));
                }
            }
        }
    }
}

fn ms(s: Option<&Spread>) -> String {
    match s {
        Some(s) => format!("{:.1} ({:.1}..{:.1})", s.median, s.min, s.p90),
        None => "-".into(),
    }
}

/// `--mem LIST`: sizes in MiB, each in the range `vmm run --mem` takes.
pub fn parse_mem(list: &str) -> std::result::Result<Vec<u64>, String> {
    list.split(',')
        .map(|w| {
            let v: u64 = crate::input::parse_whole(w).map_err(|e| format!("{e} (MiB)"))?;
            if (MIN_MEM_MIB..=MAX_MEM_MIB).contains(&v) {
                Ok(v)
            } else {
                Err(format!(
                    "{v} MiB is outside {MIN_MEM_MIB}..={MAX_MEM_MIB} MiB"
                ))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
