//! `vmm bench snapshot`: what a snapshot and a restore cost as the guest's
//! RAM grows, for the same guest work.
//!
//! Per `--mem` size and run: the guest boots with the workload (default
//! `gemm`), is snapshotted after `--after` seconds (mid-DGEMM by default) in
//! this process, and is then restored by a child `vmm restore` that runs it
//! to its normal end. Measured:
//!
//! - **snapshot**: from the guest's pause (the vCPU back in the VMM) to the
//!   file renamed into place and its directory synced (the run's
//!   `snapshot_time`);
//! - **file**: its length and the disk space it takes;
//! - **restore**: the child's own setup time, from `restore()`'s start
//!   (file opened) to the VM ready for its first `KVM_RUN`, plus the
//!   process start (spawn to exit of `vmm --version`, measured in the same
//!   run): process start to the first `KVM_RUN`, as `vmm restore` pays it;
//! - whether the restored guest exited 0 with every workload check passing
//!   (its exit status is `vmm`'s), and how long that run took.
//!
//! Figures are medians with min..p90 over `--runs` (rounds interleave the
//! sizes, so drift on a shared machine spreads over every size alike).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::stats::Spread;
use crate::arch::layout::{MAX_MEM_MIB, MIN_MEM_MIB};
use crate::devices::SerialSink;
use crate::error::{Error, Result};
use crate::vstate::{self, RunConfig, RunEnd};

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
    /// When the snapshot is taken.
    pub after: Duration,
    /// Limit of one boot or restore.
    pub timeout: Duration,
    /// Where the snapshots go (a private temporary directory).
    pub dir: PathBuf,
    /// The `vmm` executable the restores run.
    pub vmm: PathBuf,
}

/// `vmm bench snapshot --json`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SnapshotBench {
    /// The guest's workload list.
    pub workload: String,
    /// Seconds after boot the snapshot was taken.
    pub after_s: f64,
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
    /// `restore()` start to ready for the first `KVM_RUN`, in the child, ms.
    pub restore_setup_ms: Option<Spread>,
    /// Process start to the first `KVM_RUN`: the medians of
    /// `process_start_ms` and `restore_setup_ms` added, ms.
    pub restore_to_first_run_ms: Option<f64>,
    /// The restored guest's run to its end, ms.
    pub restored_run_ms: Option<Spread>,
    /// Restores whose guest exited 0 with every check passing.
    pub restores_passed: u32,
    /// What went wrong in the runs that did not pass (the first few).
    pub failures: Vec<String>,
}

impl SnapshotBench {
    /// Whether every restore passed.
    pub fn all_ok(&self) -> bool {
        self.rows
            .iter()
            .all(|r| r.restores_passed == self.runs && r.failures.is_empty())
    }

    /// The table.
    pub fn to_table(&self) -> String {
        use crate::report::table::Columns;
        let mut s = format!(
            "snapshot of `workload={}` after {:.2} s, then restored to its end; median (min..p90) of {} run(s)\n\
             process start of vmm (spawn to exit of `vmm --version`): {}\n\
             stored pages written by: {} (no copy in user space; \
             the choice is measured by `cargo bench --bench snapshot_copy`)\n",
            self.workload,
            self.after_s,
            self.runs,
            ms(self.process_start_ms.as_ref()),
            self.memory_write
        );
        let t = Columns::new()
            .right("", 8)
            .right("  ", 22)
            .right("  ", 11)
            .right("  ", 11)
            .right("  ", 22)
            .right("  ", 14)
            .right("  ", 22)
            .left("  ", 0);
        t.push(
            &mut s,
            &[
                "mem MiB",
                "snapshot ms",
                "file B",
                "disk B",
                "restore setup ms",
                "to KVM_RUN ms",
                "restored run ms",
                "checks",
            ],
        );
        for r in &self.rows {
            t.push(
                &mut s,
                &[
                    r.mem_mib.to_string(),
                    ms(r.snapshot_ms.as_ref()),
                    r.file_bytes.to_string(),
                    r.disk_bytes.to_string(),
                    ms(r.restore_setup_ms.as_ref()),
                    r.restore_to_first_run_ms
                        .map_or("-".into(), |v| format!("{v:.1}")),
                    ms(r.restored_run_ms.as_ref()),
                    format!("{}/{} pass", r.restores_passed, self.runs),
                ],
            );
        }
        for r in &self.rows {
            for f in &r.failures {
                s.push_str(&format!("{} MiB: {f}\n", r.mem_mib));
            }
        }
        s
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
            let v: u64 = w
                .trim()
                .parse()
                .map_err(|e| format!("{w:?} is not a number of MiB: {e}"))?;
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

/// What one size's runs gave.
#[derive(Default)]
struct Samples {
    snapshot: Vec<f64>,
    setup: Vec<f64>,
    run: Vec<f64>,
    passed: u32,
    failures: Vec<String>,
    file_bytes: u64,
    disk_bytes: u64,
}

/// Failures kept per size.
const MAX_FAILURES: usize = 4;

impl Samples {
    fn fail(&mut self, what: String) {
        if self.failures.len() < MAX_FAILURES {
            self.failures.push(what);
        }
    }
}

/// Run the sweep; `tick` after every snapshot-and-restore.
pub fn run(plan: &Plan, mut tick: impl FnMut()) -> Result<SnapshotBench> {
    let mut samples: Vec<Samples> = plan.mem_mib.iter().map(|_| Samples::default()).collect();
    let mut starts = Vec::new();
    for _ in 0..plan.runs {
        starts.push(process_start(&plan.vmm)?);
        for (&mib, s) in plan.mem_mib.iter().zip(samples.iter_mut()) {
            one(plan, mib, s)?;
            tick();
        }
    }
    let process_start_ms = Spread::of(&starts);
    let rows = plan
        .mem_mib
        .iter()
        .zip(samples)
        .map(|(&mem_mib, s)| {
            let restore_setup_ms = Spread::of(&s.setup);
            SnapshotRow {
                mem_mib,
                snapshot_ms: Spread::of(&s.snapshot),
                file_bytes: s.file_bytes,
                disk_bytes: s.disk_bytes,
                restore_to_first_run_ms: process_start_ms
                    .zip(restore_setup_ms)
                    .map(|(p, r)| p.median + r.median),
                restore_setup_ms,
                restored_run_ms: Spread::of(&s.run),
                restores_passed: s.passed,
                failures: s.failures,
            }
        })
        .collect();
    Ok(SnapshotBench {
        workload: plan.workload.clone(),
        after_s: plan.after.as_secs_f64(),
        runs: plan.runs,
        process_start_ms,
        rows,
        memory_write: crate::snapshot::save::MEMORY_WRITE.into(),
    })
}

/// Spawn to exit of `vmm --version`, ms.
fn process_start(vmm: &Path) -> Result<f64> {
    let t = Instant::now();
    let st = Command::new(vmm)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    let took = t.elapsed().as_secs_f64() * 1e3;
    if !st.success() {
        return Err(Error::Argument(format!(
            "{} --version failed ({st})",
            vmm.display()
        )));
    }
    Ok(took)
}

/// One snapshot (in this process) and its restore (a child) at `mib`.
fn one(plan: &Plan, mib: u64, s: &mut Samples) -> Result<()> {
    let file = plan.dir.join(format!("bench-{mib}MiB.snap"));
    let outcome = vstate::run(RunConfig {
        mem_mib: mib,
        cmdline: format!("quiet workload={}", plan.workload),
        serial: SerialSink::Null,
        timeout: Some(plan.timeout),
        snapshot_after: Some(plan.after),
        snapshot_file: Some(file.clone()),
        snapshot_force: true,
        ..RunConfig::default()
    })?;
    let (RunEnd::Snapshotted(_), Some(took)) = (&outcome.end, outcome.snapshot_time) else {
        s.fail(format!(
            "no snapshot: the guest {} before {:.2} s",
            match outcome.end {
                RunEnd::Exited(_) => "exited",
                _ => "stopped otherwise",
            },
            plan.after.as_secs_f64()
        ));
        return Ok(());
    };
    s.snapshot.push(took.as_secs_f64() * 1e3);
    if let Ok(m) = std::fs::metadata(&file) {
        use std::os::unix::fs::MetadataExt;
        s.file_bytes = m.len();
        s.disk_bytes = m.blocks() * 512;
    }
    let out = Command::new(&plan.vmm)
        .arg("restore")
        .arg(&file)
        .args(["--no-native", "--json", "--timeout"])
        .arg(plan.timeout.as_secs().max(1).to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    let _ = std::fs::remove_file(&file);
    let v: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(e) => {
            s.fail(format!(
                "vmm restore printed no JSON ({e}; {}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            return Ok(());
        }
    };
    let timing = |k: &str| v["timing_ms"][k].as_f64();
    if let (Some(setup), Some(run)) = (timing("setup"), timing("run")) {
        s.setup.push(setup);
        s.run.push(run);
    }
    let failed: Vec<String> = v["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["check"] != "pass")
        .map(|r| r["name"].as_str().unwrap_or("?").to_string())
        .collect();
    if out.status.success() && v["exit_reason"] == "exited" && failed.is_empty() {
        s.passed += 1;
    } else {
        s.fail(format!(
            "restore ended {} ({}), checks not passing: {failed:?}",
            v["exit_reason"], out.status
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_lists() {
        assert_eq!(parse_mem("64,512, 2048").unwrap(), vec![64, 512, 2048]);
        assert!(parse_mem("64,x").unwrap_err().contains("\"x\""));
        let big = (MAX_MEM_MIB + 1).to_string();
        assert!(parse_mem(&big).unwrap_err().contains("outside"));
    }
}
