//! The sweep itself: per round and size, `vmm`'s snapshot (and the write
//! floor after it) and restore, then each peer's cycle, into samples that
//! become the [`SnapshotBench`] rows.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Goals, PeerColumn, Plan, SnapshotBench, SnapshotRow};
use crate::bench::peers::snapshot::guest_words;
use crate::bench::peers::snapshot::{peer_cycle, ChRestore, PeerGuest};
use crate::bench::stats::Spread;
use crate::devices::SerialSink;
use crate::error::{Error, Result};
use crate::output::write_atomic;
use crate::run::{self, RunConfig, RunEnd};
use guest::protocol::SnapshotPhase;

/// What one size's runs gave.
#[derive(Default)]
struct Samples {
    snapshot: Vec<f64>,
    /// From the snapshot run's start to the guest's point (its run less
    /// the snapshot's write), ms.
    to_point: Vec<f64>,
    floor: Vec<f64>,
    over_floor: Vec<f64>,
    setup: Vec<f64>,
    run: Vec<f64>,
    /// The restored guest's page faults the pager served.
    faults: Vec<f64>,
    /// Until every stored page was in, ms.
    pages_in: Vec<f64>,
    passed: u32,
    failures: Vec<String>,
    file_bytes: u64,
    disk_bytes: u64,
}

/// What one peer's cycles at one size gave.
#[derive(Default)]
struct PeerSamples {
    snapshot: Vec<f64>,
    restore: Vec<f64>,
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
    let mut peer_samples: Vec<Vec<PeerSamples>> = plan
        .mem_mib
        .iter()
        .map(|_| plan.peers.iter().map(|_| PeerSamples::default()).collect())
        .collect();
    let kernel = plan.dir.join("guest.elf");
    if plan.peers.iter().any(|p| p.binary.is_ok()) {
        std::fs::write(&kernel, crate::GUEST_KERNEL)
            .map_err(Error::io(format!("cannot write {}", kernel.display())))?;
    }
    // The same guest booted and run to its end without a snapshot (the
    // guest passes its point: no snapshot file, so vmm declines): what the
    // restored guest's run is compared with.
    let unrestored = unrestored_run(plan)?;
    let mut starts = Vec::new();
    for _ in 0..plan.runs {
        starts.push(process_start(&plan.vmm)?);
        for ((&mib, s), ps) in plan
            .mem_mib
            .iter()
            .zip(samples.iter_mut())
            .zip(peer_samples.iter_mut())
        {
            one(plan, mib, s)?;
            let g = PeerGuest {
                kernel: &kernel,
                workload: &plan.workload,
                mem_mib: mib,
                point: plan.point,
                ch_restore: ChRestore::OnDemand,
            };
            peer_cycles(plan, &g, ps);
            tick();
        }
    }
    let process_start_ms = Spread::of(&starts);
    let rows = plan
        .mem_mib
        .iter()
        .zip(samples)
        .zip(peer_samples)
        .map(|((&mem_mib, s), ps)| {
            let to_point = Spread::of(&s.to_point);
            let mut r = row(plan, mem_mib, s, ps, process_start_ms);
            r.unrestored_rest_ms =
                to_point.map(|p| (unrestored.as_secs_f64() * 1e3 - p.median).max(0.0));
            r
        })
        .collect();
    Ok(SnapshotBench {
        workload: plan.workload.clone(),
        point: plan.point.name().into(),
        unrestored_run_s: unrestored.as_secs_f64(),
        runs: plan.runs,
        process_start_ms,
        rows,
        memory_write: crate::snapshot::save::MEMORY_WRITE.into(),
    })
}

/// One cycle of each peer that has an executable, with guest `g`, into
/// its samples: a failed cycle is kept as a failure (the first
/// [`MAX_FAILURES`]), not the end of the sweep.
fn peer_cycles(plan: &Plan, g: &PeerGuest<'_>, samples: &mut [PeerSamples]) {
    for (p, acc) in plan.peers.iter().zip(samples.iter_mut()) {
        let Ok(binary) = &p.binary else { continue };
        match peer_cycle(p.vmm, binary, g, &plan.dir, plan.timeout) {
            None => {}
            Some(Ok(c)) => {
                acc.snapshot.push(c.snapshot_ms);
                acc.restore.push(c.restore_ms);
                acc.file_bytes = c.file_bytes;
                acc.disk_bytes = c.disk_bytes;
                acc.passed += 1;
            }
            Some(Err(e)) if acc.failures.len() < MAX_FAILURES => {
                acc.failures.push(e.to_string());
            }
            Some(Err(_)) => {}
        }
    }
}

/// The row of one size from its samples and its peers', with the goals
/// when there are peers. `process_start_ms` (the whole sweep's) plus this
/// size's restore setup is its restore to the first `KVM_RUN`.
fn row(
    plan: &Plan,
    mem_mib: u64,
    s: Samples,
    ps: Vec<PeerSamples>,
    process_start_ms: Option<Spread>,
) -> SnapshotRow {
    let restore_setup_ms = Spread::of(&s.setup);
    let snapshot_ms = Spread::of(&s.snapshot);
    let restore_to_first_run_ms = process_start_ms
        .zip(restore_setup_ms)
        .map(|(p, r)| p.median + r.median);
    let peers: Vec<PeerColumn> = plan
        .peers
        .iter()
        .zip(ps)
        .map(|(p, a)| PeerColumn {
            vmm: p.vmm,
            absent: p.binary.as_ref().err().cloned(),
            snapshot_ms: Spread::of(&a.snapshot),
            file_bytes: a.file_bytes,
            disk_bytes: a.disk_bytes,
            restore_ms: Spread::of(&a.restore),
            restores_passed: a.passed,
            failures: a.failures,
        })
        .collect();
    let goals = (!plan.peers.is_empty()).then(|| {
        let measured: Vec<_> = peers
            .iter()
            .map(|p| {
                (
                    p.vmm,
                    p.snapshot_ms.map(|s| s.median),
                    p.restore_ms.map(|s| s.median),
                    p.file_bytes,
                )
            })
            .collect();
        Goals::of(
            mem_mib,
            snapshot_ms.map(|s| s.median),
            restore_to_first_run_ms,
            s.file_bytes,
            &measured,
        )
    });
    SnapshotRow {
        mem_mib,
        snapshot_ms,
        file_bytes: s.file_bytes,
        disk_bytes: s.disk_bytes,
        write_floor_ms: Spread::of(&s.floor),
        snapshot_over_floor: Spread::of(&s.over_floor),
        restore_to_first_run_ms,
        restore_setup_ms,
        restored_run_ms: Spread::of(&s.run),
        unrestored_rest_ms: None,
        pager_faults: Spread::of(&s.faults),
        pages_in_ms: Spread::of(&s.pages_in),
        restores_passed: s.passed,
        failures: s.failures,
        peers,
        goals,
    }
}

/// The write floor of a `len`-byte file in `dir`, ms: a buffer of `len`
/// bytes (filled before the clock starts) written by the atomic write a
/// snapshot takes, then removed.
pub(super) fn write_floor(dir: &Path, len: u64) -> Result<f64> {
    let len = usize::try_from(len)
        .map_err(|_| Error::Host(format!("a {len}-byte file does not fit in memory")))?;
    let bytes = vec![0xa5u8; len];
    let path = dir.join("bench-write-floor.bin");
    let t = Instant::now();
    let written = write_atomic(&path, true, &bytes);
    let took = t.elapsed().as_secs_f64() * 1e3;
    let _ = std::fs::remove_file(&path);
    written.map_err(|source| Error::SnapshotWrite { path, source })?;
    Ok(took)
}

/// Spawn to exit of `vmm --version`, ms.
fn process_start(vmm: &Path) -> Result<f64> {
    let t = Instant::now();
    let st = Command::new(vmm)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(Error::io(format!("cannot run {} --version", vmm.display())))?;
    let took = t.elapsed().as_secs_f64() * 1e3;
    if !st.success() {
        return Err(Error::Host(format!(
            "{} --version failed ({st})",
            vmm.display()
        )));
    }
    Ok(took)
}

/// The sweep's guest at `mib`: its workload, stopping at the plan's
/// point, quiet, no serial output.
fn guest(plan: &Plan, mib: u64) -> RunConfig {
    RunConfig {
        mem_mib: mib,
        cmdline: format!("quiet {}", guest_words(&plan.workload, plan.point)),
        serial: SerialSink::Null,
        timeout: Some(plan.timeout),
        ..RunConfig::default()
    }
}

/// How long the workload's own run takes: one boot of the same guest at
/// the sweep's smallest size, to its end, no snapshot (the unrestored run
/// the restored ones are compared with).
fn unrestored_run(plan: &Plan) -> Result<Duration> {
    let mib = plan
        .mem_mib
        .iter()
        .copied()
        .min()
        .unwrap_or(crate::arch::layout::MIN_MEM_MIB);
    let outcome = run::run(guest(plan, mib))?;
    match outcome.end {
        RunEnd::Exited(0) => Ok(outcome.run_time),
        end => Err(Error::Guest(format!(
            "the unrestored boot (workload={}, {mib} MiB, no snapshot) did not end with status 0 ({end:?})",
            plan.workload
        ))),
    }
}

/// Why a run that should have stopped at `point` did not: the snapshot it
/// asked for could not be written (`write_errors`: the guest was resumed
/// and ran on), or how it ended without asking.
pub(super) fn no_snapshot(end: &RunEnd, write_errors: &[String], point: SnapshotPhase) -> String {
    if let Some(e) = write_errors.first() {
        return format!(
            "no snapshot: the guest asked at its point snapshot={} but the file was not written: {e}",
            point.name()
        );
    }
    let how = match end {
        RunEnd::Exited(status) => format!("exited with status {status}"),
        RunEnd::TimedOut(limit) => format!(
            "ran past --timeout ({:.0} s) and was stopped",
            limit.as_secs_f64()
        ),
        RunEnd::Snapshotted(_) => "was snapshotted but its time was not recorded".into(),
        other => format!("ended otherwise ({other:?})"),
    };
    format!(
        "no snapshot: the guest {how} without asking for one at its point snapshot={}",
        point.name()
    )
}

/// One snapshot (in this process) at the guest's point, and its restore
/// (a child), at `mib`.
fn one(plan: &Plan, mib: u64, s: &mut Samples) -> Result<()> {
    let file = plan.dir.join(format!("bench-{mib}MiB.snap"));
    let outcome = run::run(RunConfig {
        snapshot_file: Some(file.clone()),
        snapshot_force: true,
        ..guest(plan, mib)
    })?;
    let (RunEnd::Snapshotted(_), Some(took)) = (&outcome.end, outcome.snapshot_time) else {
        s.fail(no_snapshot(
            &outcome.end,
            &outcome.snapshot_errors,
            plan.point,
        ));
        return Ok(());
    };
    let took_ms = took.as_secs_f64() * 1e3;
    s.snapshot.push(took_ms);
    s.to_point
        .push(outcome.run_time.saturating_sub(took).as_secs_f64() * 1e3);
    if let Ok(m) = std::fs::metadata(&file) {
        use std::os::unix::fs::MetadataExt;
        s.file_bytes = m.len();
        s.disk_bytes = m.blocks() * 512;
        match write_floor(&plan.dir, m.len()) {
            Ok(floor) => {
                s.floor.push(floor);
                s.over_floor.push(took_ms / floor);
            }
            Err(e) => s.fail(format!("write floor: {e}")),
        }
    }
    let out = Command::new(&plan.vmm)
        .arg("restore")
        .arg(&file)
        .args(["--no-native", "--json", "--timeout"])
        .arg(plan.timeout.as_secs().max(1).to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(Error::io(format!(
            "cannot run {} restore",
            plan.vmm.display()
        )))?;
    let _ = std::fs::remove_file(&file);
    let v: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(e) => {
            s.fail(format!(
                "restore: vmm restore printed no JSON ({e}; {}): {}",
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
    let m = &v["restored_memory"];
    if let (Some(faults), Some(fill)) = (m["faults"].as_f64(), m["fill_ms"].as_f64()) {
        s.faults.push(faults);
        s.pages_in.push(fill);
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
            "restore: the restored guest ended {} ({}), checks not passing: {failed:?}; stderr tail: {:?}",
            v["exit_reason"],
            out.status,
            crate::bench::peers::tail_text(&out.stderr)
        ));
    }
    Ok(())
}
