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
//! Snapshot and restore of the peers need their API servers (an HTTP
//! socket), which this command does not drive: that column says so.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use guest::protocol::{field_str, Report, WorkUnit};
use schemars::JsonSchema;
use serde::Serialize;
use xstate::XfeatureMask;

use super::stats::Spread;
use crate::features::guest_log::GuestRecord;
use crate::features::profile::HexMask;
use crate::report::table::{or_dash, Columns};

/// Runs per VMM when `--runs` is absent.
pub const DEFAULT_RUNS: u32 = 3;
/// The most `--runs` accepts.
pub const MAX_RUNS: u32 = 100;
/// Exits per benchmark row the guest runs when `--exits` is absent: enough
/// for a stable per-exit figure, few enough that the slowest peer ends in
/// seconds.
pub const DEFAULT_EXITS: u64 = 2000;
/// The most `--exits` accepts.
pub const MAX_EXITS: u64 = 1_000_000;
/// Seconds one run of one VMM may take when `--timeout` is absent.
pub const DEFAULT_TIMEOUT_S: u64 = 120;
/// How often a running child is polled for its exit: the resolution of
/// the start-to-exit time.
pub const POLL: Duration = Duration::from_micros(500);
/// Guest RAM of every VMM, in MiB.
pub const MEM_MIB: u32 = 64;
/// Why the snapshot column is empty.
pub const SNAPSHOT_NOT_MEASURED: &str =
    "not measured (the peers snapshot through their API servers, which this command does not drive)";

/// The VMMs `vmm bench peers` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Vmm {
    /// This VMM (`vmm run`).
    Vmm,
    /// QEMU, `-M microvm`.
    Qemu,
    /// Cloud Hypervisor (`--serial tty --console off`).
    CloudHypervisor,
    /// Firecracker (`--no-api --config-file`).
    Firecracker,
}

impl Vmm {
    /// Every VMM, in table order.
    pub const ALL: [Vmm; 4] = [Vmm::Vmm, Vmm::Qemu, Vmm::CloudHypervisor, Vmm::Firecracker];

    /// Its name in the table and the JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Vmm::Vmm => "vmm",
            Vmm::Qemu => "qemu",
            Vmm::CloudHypervisor => "cloud-hypervisor",
            Vmm::Firecracker => "firecracker",
        }
    }

    /// The environment variable naming its executable.
    pub const fn env_var(self) -> Option<&'static str> {
        match self {
            Vmm::Vmm => None,
            Vmm::Qemu => Some("VMM_PEER_QEMU"),
            Vmm::CloudHypervisor => Some("VMM_PEER_CLOUD_HYPERVISOR"),
            Vmm::Firecracker => Some("VMM_PEER_FIRECRACKER"),
        }
    }
}

/// What can stop `vmm bench peers` before it measures, or one run of one
/// VMM.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// An environment variable names something that is not an executable
    /// regular file.
    #[error("{var}={}: not an executable regular file", path.display())]
    NotExecutable {
        /// The variable.
        var: &'static str,
        /// Its value.
        path: PathBuf,
    },
    /// The scratch directory or a file in it could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Scratch {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The VMM's process could not be started.
    #[error("cannot start {}: {source}", binary.display())]
    Spawn {
        /// The executable.
        binary: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for the child failed.
    #[error("waiting for {}: {source}", binary.display())]
    Wait {
        /// The executable.
        binary: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The run did not end within `--timeout`; the child was killed.
    #[error("still running after {secs} s: killed")]
    Timeout {
        /// The limit, in seconds.
        secs: u64,
    },
    /// The serial log held no valid guest record.
    #[error("{reason} ({status}; serial log tail: {tail:?}; stderr tail: {stderr:?})")]
    NoRecord {
        /// What the log parser said.
        reason: String,
        /// The child's exit status.
        status: String,
        /// The last bytes of the serial log, for diagnosis.
        tail: String,
        /// The last bytes of the child's stderr.
        stderr: String,
    },
}

/// One guest exit-cost row, the median over the runs.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ExitRow {
    /// The guest's row name (`exit-pio`, `exit-mmio`, `exit-cpuid`).
    pub name: String,
    /// Its variant (`cpl3-clean`, `cpl3-dirty`, `cpl0`).
    pub variant: String,
    /// Exits the guest timed per run.
    pub exits: u64,
    /// TSC cycles per exit, as the guest timed them: median and spread
    /// over the runs.
    pub cycles_per_exit: Spread,
    /// Nanoseconds per exit (median), from [`PeerRow::tsc_khz`]; `None`
    /// when no TSC frequency is known.
    pub ns_per_exit: Option<f64>,
}

/// The xstate a VMM showed the guest, from its record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct GuestMasks {
    /// XCR0 the guest ran with (it enables everything CPUID offers).
    #[schemars(with = "crate::schema::Hex")]
    pub xcr0: HexMask,
    /// CPUID.(EAX=0xD,ECX=0):EDX:EAX, the XCR0 bits offered.
    #[schemars(with = "crate::schema::Hex")]
    pub xcr0_supported: HexMask,
    /// CPUID.(EAX=0xD,ECX=1):EDX:ECX, the IA32_XSS bits offered.
    #[schemars(with = "crate::schema::Hex")]
    pub xss_supported: HexMask,
    /// CPUID.(EAX=0xD,ECX=1):EAX (XSAVEOPT, XSAVEC, XGETBV1, XSAVES, XFD).
    #[schemars(with = "crate::schema::Hex")]
    pub xsave_features: HexMask,
    /// CPUID.1:ECX.
    #[schemars(with = "crate::schema::Hex")]
    pub cpuid1_ecx: HexMask,
    /// CPUID.7.0:EBX.
    #[schemars(with = "crate::schema::Hex")]
    pub cpuid7_ebx: HexMask,
    /// CPUID.7.0:ECX.
    #[schemars(with = "crate::schema::Hex")]
    pub cpuid7_ecx: HexMask,
    /// CPUID.7.0:EDX.
    #[schemars(with = "crate::schema::Hex")]
    pub cpuid7_edx: HexMask,
    /// CPUID.7.1:EAX.
    #[schemars(with = "crate::schema::Hex")]
    pub cpuid7_1_eax: HexMask,
    /// CPUID.(EAX=0xD,ECX=0):EBX, the standard XSAVE size for XCR0.
    pub size_enabled: u32,
}

impl GuestMasks {
    fn of(r: &Report) -> Self {
        GuestMasks {
            xcr0: HexMask(r.xcr0),
            xcr0_supported: HexMask(r.cpuid_xcr0_supported),
            xss_supported: HexMask(r.cpuid_xss_supported),
            xsave_features: HexMask(r.cpuid_xsave_features.into()),
            cpuid1_ecx: HexMask(r.cpuid1_ecx.into()),
            cpuid7_ebx: HexMask(r.cpuid7_ebx.into()),
            cpuid7_ecx: HexMask(r.cpuid7_ecx.into()),
            cpuid7_edx: HexMask(r.cpuid7_edx.into()),
            cpuid7_1_eax: HexMask(r.cpuid7_1_eax.into()),
            size_enabled: r.cpuid_size_enabled,
        }
    }

    /// `(field, value)` pairs, in a fixed order.
    fn fields(&self) -> [(&'static str, u64); 10] {
        [
            ("xcr0", self.xcr0.0),
            ("xcr0_supported", self.xcr0_supported.0),
            ("xss_supported", self.xss_supported.0),
            ("xsave_features", self.xsave_features.0),
            ("cpuid1_ecx", self.cpuid1_ecx.0),
            ("cpuid7_ebx", self.cpuid7_ebx.0),
            ("cpuid7_ecx", self.cpuid7_ecx.0),
            ("cpuid7_edx", self.cpuid7_edx.0),
            ("cpuid7_1_eax", self.cpuid7_1_eax.0),
            ("size_enabled", self.size_enabled.into()),
        ]
    }

    /// How these masks differ from `ours`, one entry per differing field:
    /// `xcr0 -pkru` (XCR0 components named), `cpuid7_ebx 0x.. (vmm 0x..)`.
    pub fn differences(&self, ours: &GuestMasks) -> Vec<String> {
        let mut out = Vec::new();
        for ((name, v), (_, o)) in self.fields().into_iter().zip(ours.fields()) {
            if v == o {
                continue;
            }
            if name == "xcr0" || name == "xcr0_supported" {
                let missing = XfeatureMask::from_bits(o & !v);
                let extra = XfeatureMask::from_bits(v & !o);
                let mut s = format!("{name} {v:#x}:");
                if !missing.is_empty() {
                    s.push_str(&format!(" -{missing}"));
                }
                if !extra.is_empty() {
                    s.push_str(&format!(" +{extra}"));
                }
                out.push(s);
            } else {
                out.push(format!("{name} {v:#x} (vmm {o:#x})"));
            }
        }
        out
    }
}

/// One VMM's results.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct PeerRow {
    /// Which VMM.
    pub vmm: Vmm,
    /// The executable run.
    pub binary: String,
    /// The command line of the last run (scratch paths included).
    pub command: Vec<String>,
    /// Process start to exit of each successful run, in milliseconds.
    pub start_to_exit_ms: Vec<f64>,
    /// Their median and spread; `None` when no run succeeded.
    pub start_to_exit: Option<Spread>,
    /// The exit status of the last run, as text (`exit status: 0`).
    pub exit_status: Option<String>,
    /// The TSC frequency (kHz) the guest reported; 0 when the VMM gives it
    /// none (QEMU microvm and Firecracker give no leaf 0x40000010 here).
    pub guest_tsc_khz: u64,
    /// The TSC frequency used for [`ExitRow::ns_per_exit`]: the guest's,
    /// else the one the guest under `vmm` reported (the same host TSC).
    pub tsc_khz: Option<u64>,
    /// The guest's exit-cost rows.
    pub exit_rows: Vec<ExitRow>,
    /// The xstate the VMM showed the guest (the last run's record).
    pub masks: Option<GuestMasks>,
    /// How [`PeerRow::masks`] differ from `vmm`'s.
    pub differs_from_vmm: Vec<String>,
    /// Snapshot and restore time, or why there is none.
    pub snapshot: String,
    /// Why a run failed (the first failure); the successful runs still count.
    pub error: Option<String>,
}

/// A VMM that was not run, and why.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Skipped {
    /// Which VMM.
    pub vmm: Vmm,
    /// Why it was not run.
    pub reason: String,
}

/// The `vmm bench peers --json` document.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct PeersBench {
    /// The guest's command line, the same under every VMM (Firecracker
    /// appends `pci=off`, QEMU nothing the guest acts on).
    pub guest_words: String,
    /// Runs per VMM.
    pub runs: u32,
    /// Guest RAM, MiB.
    pub mem_mib: u32,
    /// One row per VMM run, `vmm` first.
    pub vmms: Vec<PeerRow>,
    /// VMMs not run.
    pub skipped: Vec<Skipped>,
}

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

/// The last 400 bytes of `bytes`, as text: enough of a log to see why.
fn tail_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(400)..]).into_owned()
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
    let words = plan.guest_words();
    struct Acc {
        command: Vec<String>,
        times: Vec<f64>,
        status: Option<String>,
        rows: BTreeMap<(String, String), (u64, Vec<f64>)>,
        order: Vec<(String, String)>,
        last: Option<Box<Report>>,
        error: Option<String>,
    }
    let mut accs: Vec<Acc> = targets
        .iter()
        .map(|_| Acc {
            command: Vec::new(),
            times: Vec::new(),
            status: None,
            rows: BTreeMap::new(),
            order: Vec::new(),
            last: None,
            error: None,
        })
        .collect();
    for _ in 0..plan.runs {
        for (t, acc) in targets.iter().zip(accs.iter_mut()) {
            let log = dir.path().join(format!("{}.serial.log", t.vmm.name()));
            let (args, to_stdout) = command(t, &kernel, &words, &log, dir.path(), plan.timeout)?;
            acc.command = std::iter::once(t.binary.display().to_string())
                .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
                .collect();
            match run_once(t, &args, to_stdout, &log, plan.timeout) {
                Ok((elapsed, status, record)) => {
                    acc.times.push(elapsed.as_secs_f64() * 1e3);
                    acc.status = Some(status.to_string());
                    for (key, (exits, cpe)) in exit_rows_of(&record.report) {
                        let e = acc.rows.entry(key.clone()).or_insert_with(|| {
                            acc.order.push(key);
                            (exits, Vec::new())
                        });
                        e.1.push(cpe);
                    }
                    acc.last = Some(record.report);
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
    let ours_khz = accs
        .first()
        .and_then(|a| a.last.as_ref())
        .map(|r| r.tsc_khz)
        .filter(|&k| k > 0);
    let ours_masks = accs
        .first()
        .and_then(|a| a.last.as_ref())
        .map(|r| GuestMasks::of(r));
    let vmms = targets
        .iter()
        .zip(accs)
        .map(|(t, acc)| {
            let guest_tsc_khz = acc.last.as_ref().map_or(0, |r| r.tsc_khz);
            let tsc_khz = Some(guest_tsc_khz).filter(|&k| k > 0).or(ours_khz);
            let exit_rows = acc
                .order
                .iter()
                .filter_map(|key| {
                    let (exits, samples) = acc.rows.get(key)?;
                    let cycles_per_exit = Spread::of(samples)?;
                    Some(ExitRow {
                        name: key.0.clone(),
                        variant: key.1.clone(),
                        exits: *exits,
                        cycles_per_exit,
                        ns_per_exit: tsc_khz.map(|k| cycles_per_exit.median * 1e6 / k as f64),
                    })
                })
                .collect();
            let masks = acc.last.as_ref().map(|r| GuestMasks::of(r));
            let differs_from_vmm = match (&masks, &ours_masks) {
                (Some(m), Some(o)) => m.differences(o),
                _ => Vec::new(),
            };
            PeerRow {
                vmm: t.vmm,
                binary: t.binary.display().to_string(),
                command: acc.command,
                start_to_exit: Spread::of(&acc.times),
                start_to_exit_ms: acc.times,
                exit_status: acc.status,
                guest_tsc_khz,
                tsc_khz,
                exit_rows,
                masks,
                differs_from_vmm,
                snapshot: if t.vmm == Vmm::Vmm {
                    "not measured here (see vmm run --snapshot-file, vmm restore)".into()
                } else {
                    SNAPSHOT_NOT_MEASURED.into()
                },
                error: acc.error,
            }
        })
        .collect();
    Ok(PeersBench {
        guest_words: words,
        runs: plan.runs,
        mem_mib: MEM_MIB,
        vmms,
        skipped,
    })
}

/// A duration in ms with its spread: `8.1 (7.9..8.5)`.
fn ms_cell(s: Option<&Spread>, times: &[f64]) -> String {
    match s {
        None => "-".into(),
        Some(s) => {
            let max = times.iter().copied().fold(f64::MIN, f64::max);
            if times.len() > 1 {
                format!("{:.1} ({:.1}..{:.1})", s.median, s.min, max)
            } else {
                format!("{:.1}", s.median)
            }
        }
    }
}

impl PeerRow {
    /// The row `name`/`variant`, if the guest measured it.
    pub fn exit_row(&self, name: &str, variant: &str) -> Option<&ExitRow> {
        self.exit_rows
            .iter()
            .find(|r| r.name == name && r.variant == variant)
    }

    /// `ns` of a row, or its cycles when no TSC frequency is known.
    fn cost_cell(&self, name: &str) -> String {
        match self.exit_row(name, "cpl3-clean") {
            None => "-".into(),
            Some(r) => match r.ns_per_exit {
                Some(ns) => format!("{ns:.0}"),
                None => format!("{:.0} cyc", r.cycles_per_exit.median),
            },
        }
    }
}

impl PeersBench {
    /// The table `vmm bench peers` prints.
    pub fn to_table(&self) -> String {
        let mut out = format!(
            "guest: {} ({} MiB), {} run(s) per VMM; time = process start to exit, median (min..max)\n\
             exit costs: the guest's own TSC timing at CPL3 with clean upper state, ns per exit\n\
             (at the guest's TSC frequency, else the one it reported under vmm)\n\n",
            self.guest_words, self.mem_mib, self.runs
        );
        let t = Columns::new()
            .left("", 16)
            .right("  ", 22)
            .right("  ", 8)
            .right("  ", 8)
            .right("  ", 9)
            .right("  ", 8)
            .left("  ", 16)
            .left("  ", 0);
        t.push(
            &mut out,
            &[
                "VMM",
                "start→exit ms",
                "pio ns",
                "mmio ns",
                "cpuid ns",
                "XCR0",
                "snapshot",
                "differs from vmm",
            ],
        );
        for r in &self.vmms {
            let snap = if r.vmm == Vmm::Vmm {
                "-"
            } else {
                "not measured"
            };
            let diff = if let Some(e) = &r.error {
                format!("ERROR: {e}")
            } else if r.vmm == Vmm::Vmm {
                "(reference)".into()
            } else if r.differs_from_vmm.is_empty() {
                "nothing".into()
            } else {
                r.differs_from_vmm.join("; ")
            };
            t.push(
                &mut out,
                &[
                    r.vmm.name().to_string(),
                    ms_cell(r.start_to_exit.as_ref(), &r.start_to_exit_ms),
                    r.cost_cell("exit-pio"),
                    r.cost_cell("exit-mmio"),
                    r.cost_cell("exit-cpuid"),
                    or_dash(r.masks.as_ref().map(|m| format!("{:#x}", m.xcr0.0))),
                    snap.to_string(),
                    diff,
                ],
            );
        }
        for s in &self.skipped {
            t.push(
                &mut out,
                &[
                    s.vmm.name(),
                    "skipped",
                    "",
                    "",
                    "",
                    "",
                    "",
                    s.reason.as_str(),
                ],
            );
        }
        out.push_str("\nguest-visible xstate (from each VMM's VMMREC1 record):\n");
        let m = Columns::new()
            .left("", 16)
            .right("  ", 8)
            .right("  ", 10)
            .right("  ", 8)
            .right("  ", 8)
            .right("  ", 10)
            .right("  ", 10)
            .right("  ", 10)
            .right("  ", 7)
            .right("  ", 7)
            .right("  ", 7)
            .left("  ", 0);
        m.push(
            &mut out,
            &[
                "VMM",
                "XCR0",
                "offered",
                "XSS",
                "0xD.1",
                "1:ECX",
                "7:EBX",
                "7:ECX",
                "7:EDX",
                "7.1:EAX",
                "size B",
                "XCR0 components",
            ],
        );
        for r in &self.vmms {
            if let Some(g) = &r.masks {
                let h = |v: &HexMask| format!("{:#x}", v.0);
                m.push(
                    &mut out,
                    &[
                        r.vmm.name().to_string(),
                        h(&g.xcr0),
                        h(&g.xcr0_supported),
                        h(&g.xss_supported),
                        h(&g.xsave_features),
                        h(&g.cpuid1_ecx),
                        h(&g.cpuid7_ebx),
                        h(&g.cpuid7_ecx),
                        h(&g.cpuid7_edx),
                        h(&g.cpuid7_1_eax),
                        g.size_enabled.to_string(),
                        XfeatureMask::from_bits(g.xcr0.0).to_string(),
                    ],
                );
            }
        }
        out.push_str(&format!(
            "\nsnapshot/restore: peers {SNAPSHOT_NOT_MEASURED}\n"
        ));
        out
    }

    /// Whether every VMM run gave at least one record and no run failed.
    pub fn all_ok(&self) -> bool {
        self.vmms
            .iter()
            .all(|r| r.error.is_none() && r.masks.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masks(xcr0: u64, ebx: u32) -> GuestMasks {
        let mut r = Report::new();
        r.xcr0 = xcr0;
        r.cpuid_xcr0_supported = xcr0;
        r.cpuid7_ebx = ebx;
        GuestMasks::of(&r)
    }

    #[test]
    fn differences_name_components_and_registers() {
        let ours = masks(0x2e7, 0x20);
        assert!(masks(0x2e7, 0x20).differences(&ours).is_empty());
        let d = masks(0x7, 0x0).differences(&ours);
        assert_eq!(
            d,
            vec![
                "xcr0 0x7: -opmask,zmm_hi256,hi16_zmm,pkru".to_string(),
                "xcr0_supported 0x7: -opmask,zmm_hi256,hi16_zmm,pkru".to_string(),
                "cpuid7_ebx 0x0 (vmm 0x20)".to_string(),
            ]
        );
    }

    #[test]
    fn targets_from_the_environment() {
        let ours = PathBuf::from("/bin/sh");
        let (run, skipped) = targets(ours.clone(), |v| match v {
            "VMM_PEER_QEMU" => Some("/bin/true".into()),
            "VMM_PEER_FIRECRACKER" => Some("".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(
            run.iter().map(|t| t.vmm).collect::<Vec<_>>(),
            [Vmm::Vmm, Vmm::Qemu]
        );
        assert_eq!(run[1].binary, Path::new("/bin/true"));
        assert_eq!(
            skipped.iter().map(|s| s.vmm).collect::<Vec<_>>(),
            [Vmm::CloudHypervisor, Vmm::Firecracker]
        );
        assert!(skipped[0]
            .reason
            .contains("VMM_PEER_CLOUD_HYPERVISOR is not set"));
        let e = targets(ours, |v| {
            (v == "VMM_PEER_CLOUD_HYPERVISOR").then(|| "/etc/passwd".into())
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "VMM_PEER_CLOUD_HYPERVISOR=/etc/passwd: not an executable regular file"
        );
    }

    #[test]
    fn exit_rows_are_cycles_per_exit() {
        let mut r = Report::new();
        let mut rec = guest::protocol::ResultRecord {
            name: guest::protocol::fixed_str("exit-pio"),
            variant: guest::protocol::fixed_str("cpl3-clean"),
            size: 0,
            work: 2000,
            cycles: 130_000_000,
            unit: WorkUnit::Events as u32,
            check: 1,
            residual: 0.0,
        };
        assert!(r.push_result(rec));
        rec.name = guest::protocol::fixed_str("aes-128-cbc");
        assert!(r.push_result(rec));
        let rows = exit_rows_of(&r);
        assert_eq!(
            rows,
            vec![(
                ("exit-pio".to_string(), "cpl3-clean".to_string()),
                (2000, 65_000.0)
            )]
        );
    }
}
