//! `vmm bench peers`: the same guest under `vmm`, QEMU, Cloud Hypervisor
//! and Firecracker, side by side in one table.
//!
//! Each VMM is a child process started with the embedded guest (written to
//! a private temporary file) and the same guest words; its serial console
//! goes to a file. Per VMM and run the command measures the wall time from
//! `spawn` to the child's exit (polled every [`POLL`]), and reads the
//! guest's `VMMREC1` record from the serial log
//! ([`crate::features::guest_log`]): the exit costs the guest timed itself
//! (TSC cycles per exit, whatever the VMM) and the xstate the VMM showed
//! it. `vmm` itself runs as a child too (`vmm run`), so every VMM pays the
//! same process start.
//!
//! Which VMMs run: `vmm` always; QEMU when `qemu-system-x86_64` is on
//! `PATH` (or `VMM_PEER_QEMU` names it); Cloud Hypervisor and Firecracker
//! only when `VMM_PEER_CLOUD_HYPERVISOR` / `VMM_PEER_FIRECRACKER` name
//! their executables (see `../shared/peers/README.md` for building them).
//! After each successful run, one snapshot/restore cycle per VMM
//! ([`snapshot`]): the guest stops at its snapshot point mid-workload (the
//! same under every VMM), is snapshotted, restored in a new process and
//! must then finish normally; the peers are driven through their API
//! servers ([`http`]).
//!
//! - `model`: the rows and the document (`--json`).
//! - `render`: the tables.
//! - [`snapshot`]: the snapshot/restore cycle of each VMM.
//! - [`http`]: HTTP/1.1 over a Unix socket, for the peers' APIs.
//! - this module: which VMMs, how each is started, the runs.

pub(crate) mod http;
mod model;
mod render;
pub(crate) mod snapshot;
#[cfg(test)]
mod tests;

pub use model::*;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use guest::protocol::{field_str, Report, WorkUnit};

use crate::bench::stats::Spread;
use crate::features::guest_log::GuestRecord;

/// What `vmm bench peers` was asked for.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Runs per VMM.
    pub runs: u32,
    /// Exits per guest benchmark row.
    pub exits: u64,
    /// Limit of one run.
    pub timeout: Duration,
}

impl Plan {
    /// The guest's command-line words.
    pub fn guest_words(&self) -> String {
        format!("workload=none bench=exits exits={}", self.exits)
    }
}

/// A VMM to run and its executable.
#[derive(Clone, Debug)]
pub struct Target {
    /// Which.
    pub vmm: Vmm,
    /// Its executable.
    pub binary: PathBuf,
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `name` on `PATH`, if there.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// The VMMs to run, from the environment (`env` looks a variable up), and
/// those left out with the reason. A variable that is set but names no
/// executable is an error: the user asked for that VMM.
pub fn targets(
    ours: PathBuf,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<(Vec<Target>, Vec<Skipped>), PeerError> {
    let mut run = vec![Target {
        vmm: Vmm::Vmm,
        binary: ours,
    }];
    let mut skipped = Vec::new();
    for vmm in [Vmm::Qemu, Vmm::CloudHypervisor, Vmm::Firecracker] {
        let var = vmm.env_var().expect("peers have a variable");
        match env(var).filter(|v| !v.is_empty()) {
            Some(v) => {
                let path = PathBuf::from(v);
                if !is_executable(&path) {
                    return Err(PeerError::NotExecutable { var, path });
                }
                run.push(Target { vmm, binary: path });
            }
            None if vmm == Vmm::Qemu => match on_path("qemu-system-x86_64") {
                Some(binary) => run.push(Target { vmm, binary }),
                None => skipped.push(Skipped {
                    vmm,
                    reason: format!("qemu-system-x86_64 is not on PATH and {var} is not set"),
                }),
            },
            None => skipped.push(Skipped {
                vmm,
                reason: format!(
                    "{var} is not set (build it with ../shared/peers/build.sh, see the README)"
                ),
            }),
        }
    }
    Ok((run, skipped))
}

/// The arguments that run `kernel` with `words` under `vmm`, its serial
/// console going to `log` (or to stdout when this returns `true`).
fn command(
    t: &Target,
    kernel: &Path,
    words: &str,
    log: &Path,
    scratch: &Path,
    timeout: Duration,
) -> Result<(Vec<OsString>, bool), PeerError> {
    let mut a: Vec<OsString> = Vec::new();
    let to_stdout = match t.vmm {
        Vmm::Vmm => {
            for s in ["run", "--workload", "none", "--no-native", "--serial"] {
                a.push(OsString::from(s));
            }
            a.push(OsString::from("--mem"));
            a.push(OsString::from(&MEM_MIB.to_string()));
            a.push(OsString::from("--timeout"));
            a.push(OsString::from(&timeout.as_secs().max(1).to_string()));
            a.push(OsString::from("--cmdline"));
            // `--workload none` puts `workload=none` on the line already.
            a.push(OsString::from(words.trim_start_matches("workload=none ")));
            a.push(OsString::from("--kernel"));
            a.push(kernel.into());
            true
        }
        Vmm::Qemu => {
            for s in [
                "-M",
                "microvm",
                "-enable-kvm",
                "-cpu",
                "host,arch-capabilities=off",
                "-m",
                &MEM_MIB.to_string(),
                "-display",
                "none",
                "-no-reboot",
                "-nodefaults",
                "-device",
                "isa-debug-exit,iobase=0xf4,iosize=4",
                "-serial",
            ] {
                a.push(OsString::from(s));
            }
            a.push(format!("file:{}", log.display()).into());
            a.push("-append".into());
            a.push(words.into());
            a.push("-kernel".into());
            a.push(kernel.into());
            false
        }
        Vmm::CloudHypervisor => {
            a.push("--kernel".into());
            a.push(kernel.into());
            for s in [
                "--cpus",
                "boot=1",
                "--memory",
                &format!("size={MEM_MIB}M"),
                "--serial",
                "tty",
                "--console",
                "off",
                "--cmdline",
                words,
            ] {
                a.push(OsString::from(s));
            }
            true
        }
        Vmm::Firecracker => {
            let cfg = serde_json::json!({
                "boot-source": {
                    "kernel_image_path": kernel.to_string_lossy(),
                    "boot_args": words,
                },
                "drives": [],
                "machine-config": { "vcpu_count": 1, "mem_size_mib": MEM_MIB },
            });
            let path = scratch.join("firecracker.json");
            std::fs::write(&path, cfg.to_string()).map_err(|source| PeerError::Scratch {
                path: path.clone(),
                source,
            })?;
            for s in ["--no-api", "--config-file"] {
                a.push(OsString::from(s));
            }
            a.push(path.into());
            for s in ["--level", "Error"] {
                a.push(OsString::from(s));
            }
            true
        }
    };
    Ok((a, to_stdout))
}

/// One run: the start-to-exit time, the exit status and the serial log's
/// record.
fn run_once(
    t: &Target,
    args: &[OsString],
    to_stdout: bool,
    log: &Path,
    timeout: Duration,
) -> Result<(Duration, ExitStatus, GuestRecord), PeerError> {
    let scratch_err = |source| PeerError::Scratch {
        path: log.to_path_buf(),
        source,
    };
    let file = File::create(log).map_err(scratch_err)?;
    let stdout = if to_stdout {
        Stdio::from(file)
    } else {
        drop(file);
        Stdio::null()
    };
    let err_log = log.with_extension("stderr");
    let err_file = File::create(&err_log).map_err(|source| PeerError::Scratch {
        path: err_log.clone(),
        source,
    })?;
    let mut cmd = Command::new(&t.binary);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(err_file);
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| PeerError::Spawn {
        binary: t.binary.clone(),
        source,
    })?;
    let wait_err = |source| PeerError::Wait {
        binary: t.binary.clone(),
        source,
    };
    let (elapsed, status) = loop {
        if let Some(status) = child.try_wait().map_err(wait_err)? {
            break (start.elapsed(), status);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(PeerError::Timeout {
                secs: timeout.as_secs(),
            });
        }
        std::thread::sleep(POLL);
    };
    let bytes = std::fs::read(log).map_err(scratch_err)?;
    let record = GuestRecord::parse(log, &bytes).map_err(|e| {
        let stderr = std::fs::read(&err_log).unwrap_or_default();
        PeerError::NoRecord {
            reason: e.to_string(),
            status: status.to_string(),
            tail: tail_text(&bytes),
            stderr: tail_text(&stderr),
        }
    })?;
    Ok((elapsed, status, record))
}

/// The exit-cost rows of one record: `(name, variant) -> (exits, cycles per exit)`.
fn exit_rows_of(r: &Report) -> Vec<((String, String), (u64, f64))> {
    r.results()
        .iter()
        .filter(|x| {
            x.unit == WorkUnit::Events as u32
                && field_str(&x.name).starts_with("exit-")
                && x.work > 0
                && x.check == 1
        })
        .map(|x| {
            (
                (
                    field_str(&x.name).to_string(),
                    field_str(&x.variant).to_string(),
                ),
                (x.work, x.cycles as f64 / x.work as f64),
            )
        })
        .collect()
}

/// Run every target `plan.runs` times, VMM by VMM in turn (runs
/// interleaved, so a burst of load hits every VMM alike). `each` is called
/// after every run (progress).
pub fn run(
    plan: &Plan,
    targets: &[Target],
    skipped: Vec<Skipped>,
    mut each: impl FnMut(),
) -> Result<PeersBench, PeerError> {
    let (dir, kernel) = scratch_kernel()?;
    let words = plan.guest_words();
    let mut accs: Vec<Acc> = targets.iter().map(|_| Acc::default()).collect();
    for _ in 0..plan.runs {
        for (t, acc) in targets.iter().zip(accs.iter_mut()) {
            let log = dir.path().join(format!("{}.serial.log", t.vmm.name()));
            let (args, to_stdout) = command(t, &kernel, &words, &log, dir.path(), plan.timeout)?;
            acc.command = std::iter::once(t.binary.display().to_string())
                .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
                .collect();
            match run_once(t, &args, to_stdout, &log, plan.timeout) {
                Ok((elapsed, status, record)) => {
                    acc.record_run(elapsed, status, record);
                    // A VMM that boots the guest gets a snapshot cycle too.
                    let cycle =
                        snapshot::cycle(t.vmm, &t.binary, &kernel, dir.path(), plan.timeout);
                    acc.record_snapshot(cycle);
                }
                Err(e) => {
                    if acc.error.is_none() {
                        acc.error = Some(e.to_string());
                    }
                }
            }
            each();
        }
    }
    let ours = accs.first().and_then(|a| a.last.as_deref());
    let ours_khz = ours.map(|r| r.tsc_khz).filter(|&k| k > 0);
    let ours_masks = ours.map(GuestMasks::of);
    let vmms = targets
        .iter()
        .zip(accs)
        .map(|(t, acc)| acc.into_row(t, ours_khz, ours_masks.as_ref()))
        .collect();
    Ok(PeersBench {
        guest_words: words,
        runs: plan.runs,
        mem_mib: MEM_MIB,
        vmms,
        skipped,
    })
}

/// A private temporary directory holding the embedded guest as
/// `guest.elf`, and that file's path: every VMM boots the same file, and
/// the directory also takes the serial logs and the peers' scratch files.
fn scratch_kernel() -> Result<(tempfile::TempDir, PathBuf), PeerError> {
    let dir = tempfile::Builder::new()
        .prefix("vmm-bench-peers-")
        .tempdir()
        .map_err(|source| PeerError::Scratch {
            path: std::env::temp_dir(),
            source,
        })?;
    let kernel = dir.path().join("guest.elf");
    std::fs::write(&kernel, crate::GUEST_KERNEL).map_err(|source| PeerError::Scratch {
        path: kernel.clone(),
        source,
    })?;
    Ok((dir, kernel))
}

/// What the runs of one VMM gathered so far: [`run`] fills one per
/// target while it interleaves the runs, and [`Acc::into_row`] turns it
/// into the VMM's [`PeerRow`] at the end.
#[derive(Default)]
struct Acc {
    /// The command line of the last run.
    command: Vec<String>,
    /// Start to exit of each successful run, milliseconds.
    times: Vec<f64>,
    /// The exit status of the last successful run.
    status: Option<String>,
    /// Cycles per exit of each exit row, per run, with the row's exits.
    rows: BTreeMap<(String, String), (u64, Vec<f64>)>,
    /// The exit rows in the order the guest first reported them.
    order: Vec<(String, String)>,
    /// The guest's report of the last successful run.
    last: Option<Box<Report>>,
    /// The first run's error.
    error: Option<String>,
    /// Snapshot times of the successful cycles, milliseconds.
    snapshot_ms: Vec<f64>,
    /// Restore times of the successful cycles, milliseconds.
    restore_ms: Vec<f64>,
    /// The first snapshot cycle's error.
    snapshot_error: Option<String>,
}

impl Acc {
    /// Adds a successful run: its time, status and exit rows; its report
    /// becomes the last one.
    fn record_run(&mut self, elapsed: Duration, status: ExitStatus, record: GuestRecord) {
        self.times.push(elapsed.as_secs_f64() * 1e3);
        self.status = Some(status.to_string());
        for (key, (exits, cpe)) in exit_rows_of(&record.report) {
            let e = self.rows.entry(key.clone()).or_insert_with(|| {
                self.order.push(key);
                (exits, Vec::new())
            });
            e.1.push(cpe);
        }
        self.last = Some(record.report);
    }

    /// Adds the outcome of a snapshot cycle ([`snapshot::cycle`]; `None`:
    /// the VMM has none): its times, or its error if it is the first.
    fn record_snapshot(&mut self, cycle: Option<Result<snapshot::Cycle, snapshot::CycleError>>) {
        match cycle {
            None => {}
            Some(Ok(c)) => {
                self.snapshot_ms.push(c.snapshot_ms);
                self.restore_ms.push(c.restore_ms);
            }
            Some(Err(e)) if self.snapshot_error.is_none() => {
                self.snapshot_error = Some(e.to_string());
            }
            Some(Err(_)) => {}
        }
    }

    /// The row of target `t`; `ours_khz` and `ours_masks` are `vmm`'s (the
    /// first target's) TSC frequency and masks, which stand in for a
    /// missing frequency and which the masks are compared with.
    fn into_row(
        self,
        t: &Target,
        ours_khz: Option<u64>,
        ours_masks: Option<&GuestMasks>,
    ) -> PeerRow {
        let guest_tsc_khz = self.last.as_ref().map_or(0, |r| r.tsc_khz);
        let tsc_khz = Some(guest_tsc_khz).filter(|&k| k > 0).or(ours_khz);
        let exit_rows = self.exit_rows(tsc_khz);
        let masks = self.last.as_ref().map(|r| GuestMasks::of(r));
        let differs_from_vmm = match (&masks, ours_masks) {
            (Some(m), Some(o)) => m.differences(o),
            _ => Vec::new(),
        };
        PeerRow {
            vmm: t.vmm,
            binary: t.binary.display().to_string(),
            command: self.command,
            start_to_exit: Spread::of(&self.times),
            start_to_exit_ms: self.times,
            exit_status: self.status,
            guest_tsc_khz,
            tsc_khz,
            exit_rows,
            masks,
            differs_from_vmm,
            snapshot: snapshot::method(t.vmm).into(),
            snapshot_time: Spread::of(&self.snapshot_ms),
            restore_time: Spread::of(&self.restore_ms),
            snapshot_ms: self.snapshot_ms,
            restore_ms: self.restore_ms,
            snapshot_error: self.snapshot_error,
            error: self.error,
        }
    }

    /// The exit rows in the guest's order, cycles per exit as median and
    /// spread over the runs, nanoseconds from `tsc_khz` when known.
    fn exit_rows(&self, tsc_khz: Option<u64>) -> Vec<ExitRow> {
        self.order
            .iter()
            .filter_map(|key| {
                let (exits, samples) = self.rows.get(key)?;
                let cycles_per_exit = Spread::of(samples)?;
                Some(ExitRow {
                    name: key.0.clone(),
                    variant: key.1.clone(),
                    exits: *exits,
                    cycles_per_exit,
                    ns_per_exit: tsc_khz.map(|k| cycles_per_exit.median * 1e6 / k as f64),
                })
            })
            .collect()
    }
}
