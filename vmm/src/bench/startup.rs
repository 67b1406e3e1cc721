//! `vmm bench startup`: how far `vmm run --workload none --no-native` is
//! from the floor, the least any KVM VMM does to run a guest instruction.
//!
//! The floor is our own C program, `vmm/benches/floor/kvm_floor.c` (embedded
//! here, compiled at run time with `$CC` or `cc`): it opens `/dev/kvm`,
//! creates a VM with 64 MiB and one vCPU already in 64-bit mode, runs
//! `out 0xf4` and exits. Both programs run pair by pair (the order
//! alternating, so neither always gets the warmer machine), each timed
//! from just before its spawn to the parent's `wait` returning. Each row
//! is the median of the pairs with its min..p90 spread; the ratio is taken
//! pair by pair, then summarised the same way.
//!
//! For `vmm` the run is also split, from its own `--json` timing: process
//! start to the start of the run (exec, dynamic linking, argument
//! parsing), to the guest's first instruction (the TSC the guest reads
//! there, placed on the VMM's clock; direct 64-bit entry only), and to the
//! end of the guest's run.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;

use crate::bench::stats::Spread;
use crate::report::table::Columns;

/// The floor program's source.
pub const FLOOR_SOURCE: &str = include_str!("../../benches/floor/kvm_floor.c");
/// Pairs when `--pairs` is absent.
pub const DEFAULT_PAIRS: u32 = 20;
/// The most `--pairs` accepts.
pub const MAX_PAIRS: u32 = 10_000;
/// The goal: `vmm` within this factor of the floor.
pub const GOAL_RATIO: f64 = 1.5;
/// How long one process may run before it is killed.
const TIMEOUT: Duration = Duration::from_secs(60);
/// What `vmm` is asked to run.
pub const VMM_ARGS: [&str; 6] = [
    "run",
    "--workload",
    "none",
    "--no-native",
    "--json",
    "--timeout",
];

/// Why `vmm bench startup` could not measure.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The C compiler did not start.
    #[error("compiling the floor program: `{cc}` did not start")]
    CcSpawn {
        /// The compiler command.
        cc: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The C compiler refused the floor program.
    #[error("compiling the floor program with `{cc}` failed ({status}): {stderr}")]
    CcFailed {
        /// The compiler command.
        cc: String,
        /// Its exit status.
        status: String,
        /// The end of its stderr.
        stderr: String,
    },
    /// A scratch file or directory could not be made.
    #[error("scratch file {}", path.display())]
    Scratch {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A measured program did not start.
    #[error("starting {what} failed")]
    Spawn {
        /// The program.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A measured program ran too long.
    #[error("{what} ran longer than {} s and was killed", TIMEOUT.as_secs())]
    Timeout {
        /// The program.
        what: String,
    },
    /// A measured program failed.
    #[error("{what} failed ({status}): {stderr}")]
    Failed {
        /// The program.
        what: String,
        /// Its exit status.
        status: String,
        /// The end of its stderr.
        stderr: String,
    },
    /// `vmm run --json` printed something else than its document.
    #[error("vmm run --json: {reason}")]
    BadJson {
        /// What was wrong.
        reason: String,
    },
}

impl StartupError {
    /// The next step, where there is one.
    pub fn hint(&self) -> Option<String> {
        match self {
            Self::CcSpawn { .. } | Self::CcFailed { .. } => Some(
                "the floor is compiled at run time: install a C compiler with the Linux headers \
                 (Debian: gcc, linux-libc-dev) or name one with CC=..."
                    .into(),
            ),
            Self::Failed { what, .. } if what.contains("floor") => {
                Some("the floor needs read/write access to /dev/kvm, as vmm does".into())
            }
            _ => None,
        }
    }
}

/// `vmm bench startup --json`: one row per phase.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct StartupBench {
    /// Pairs measured.
    pub pairs: u32,
    /// The compiler that built the floor.
    pub cc: String,
    /// The entry `vmm` started the guest at (`direct64`, `pvh`).
    pub boot_entry: Option<String>,
    /// The floor, process start to exit, ms.
    pub floor_ms: Spread,
    /// `vmm run --workload none --no-native`, process start to exit, ms.
    pub vmm_ms: Spread,
    /// vmm / floor, pair by pair.
    pub ratio: Spread,
    /// The goal for `ratio.median`.
    pub goal_ratio: f64,
    /// Whether the median ratio meets the goal.
    pub goal_met: bool,
    /// Whether the ratio's min..p90 spread crosses the goal, so that the
    /// machine's noise, not `vmm`, decides `goal_met` (rerun on a quiet
    /// machine).
    pub goal_within_noise: bool,
    /// vmm: process start to the start of the run (exec, dynamic linking,
    /// argument parsing, opening KVM), ms.
    pub vmm_to_run_start_ms: Spread,
    /// vmm: process start to the guest's first instruction, ms (null when
    /// the guest did not report it: the PVH entry).
    pub vmm_to_first_instruction_ms: Option<Spread>,
    /// vmm: process start to the end of the guest's run (its exit port
    /// write handled), ms.
    pub vmm_to_guest_exit_ms: Spread,
    /// vmm: building the VM (`timing_ms.setup`), ms.
    pub vmm_setup_ms: Spread,
    /// vmm: the guest's run, first `KVM_RUN` to its exit (`timing_ms.run`), ms.
    pub vmm_run_ms: Spread,
}

/// One `vmm` run's figures, ms from just before the spawn.
struct VmmSample {
    exit: f64,
    run_start: f64,
    first_instruction: Option<f64>,
    guest_exit: f64,
    setup: f64,
    run: f64,
    boot_entry: Option<String>,
}

/// The last 400 bytes of a file, as text.
fn tail(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let from = bytes.len().saturating_sub(400);
    String::from_utf8_lossy(&bytes[from..]).trim().to_string()
}

/// Compile the floor into `dir` with `cc`; returns the executable. `cc` is
/// `$CC` as make and the `cc` crate read it: a program and its own
/// arguments, split at white space (`ccache gcc`, `clang -m64`); empty, it
/// is `cc`.
pub fn build_floor(cc: &str, dir: &Path) -> Result<PathBuf, StartupError> {
    let mut words = cc.split_ascii_whitespace();
    let program = words.next().unwrap_or("cc");
    let src = dir.join("kvm_floor.c");
    let exe = dir.join("kvm_floor");
    std::fs::write(&src, FLOOR_SOURCE).map_err(|source| StartupError::Scratch {
        path: src.clone(),
        source,
    })?;
    let out = Command::new(program)
        .args(words)
        .arg("-O2")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| StartupError::CcSpawn {
            cc: cc.to_string(),
            source,
        })?;
    if !out.status.success() {
        let from = out.stderr.len().saturating_sub(400);
        return Err(StartupError::CcFailed {
            cc: cc.to_string(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr[from..])
                .trim()
                .to_string(),
        });
    }
    Ok(exe)
}

/// Spawn `cmd` (stdout into `out`, stderr into `err`), wait for it and
/// return (CLOCK_MONOTONIC ns just before the spawn, wall time to the end
/// of its `wait`, status). The wait blocks in a thread so the time is not
/// rounded to a polling interval; a process still running after
/// [`TIMEOUT`] is killed.
fn time_process(
    what: &str,
    mut cmd: Command,
    out: &Path,
    err: &Path,
) -> Result<(u64, f64, ExitStatus), StartupError> {
    let file = |path: &Path| {
        File::create(path).map_err(|source| StartupError::Scratch {
            path: path.to_path_buf(),
            source,
        })
    };
    cmd.stdin(Stdio::null())
        .stdout(file(out)?)
        .stderr(file(err)?);
    // The clock `vmm run --json` reports `start_clock_monotonic_ns` on.
    let spawned_ns = crate::run::prepared::monotonic_now_ns();
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| StartupError::Spawn {
        what: what.to_string(),
        source,
    })?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let status = child.wait();
        let _ = tx.send((start.elapsed(), status));
    });
    match rx.recv_timeout(TIMEOUT) {
        Ok((elapsed, Ok(status))) => Ok((spawned_ns, elapsed.as_secs_f64() * 1e3, status)),
        Ok((_, Err(source))) => Err(StartupError::Spawn {
            what: what.to_string(),
            source,
        }),
        Err(_) => {
            // SAFETY: kill(2) on the child this function spawned, which has
            // not been reaped (its waiter is still blocked in wait).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            let _ = rx.recv();
            Err(StartupError::Timeout {
                what: what.to_string(),
            })
        }
    }
}

/// One run of the floor: ms from spawn to exit.
fn run_floor(floor: &Path, dir: &Path) -> Result<f64, StartupError> {
    let what = "the floor program";
    let (out, err) = (dir.join("floor.out"), dir.join("floor.err"));
    let (_, ms, status) = time_process(what, Command::new(floor), &out, &err)?;
    if !status.success() {
        return Err(StartupError::Failed {
            what: what.into(),
            status: status.to_string(),
            stderr: tail(&err),
        });
    }
    Ok(ms)
}

/// One run of `vmm run --workload none --no-native --json`.
fn run_vmm(vmm: &Path, dir: &Path) -> Result<VmmSample, StartupError> {
    let what = "vmm run --workload none --no-native";
    let (out, err) = (dir.join("vmm.json"), dir.join("vmm.err"));
    let mut cmd = Command::new(vmm);
    cmd.args(VMM_ARGS).arg(TIMEOUT.as_secs().to_string());
    let (spawned_ns, exit, status) = time_process(what, cmd, &out, &err)?;
    if !status.success() {
        return Err(StartupError::Failed {
            what: what.into(),
            status: status.to_string(),
            stderr: tail(&err),
        });
    }
    let text = std::fs::read_to_string(&out).map_err(|source| StartupError::Scratch {
        path: out.clone(),
        source,
    })?;
    parse_vmm(&text, spawned_ns, exit)
}

/// The figures of one `vmm run --json` document, spawned at `spawned_ns`
/// (CLOCK_MONOTONIC) and gone `exit` ms later.
fn parse_vmm(text: &str, spawned_ns: u64, exit: f64) -> Result<VmmSample, StartupError> {
    let bad = |reason: &str| StartupError::BadJson {
        reason: reason.to_string(),
    };
    let doc: serde_json::Value =
        serde_json::from_str(text).map_err(|e| bad(&format!("not JSON: {e}")))?;
    let t = &doc["timing_ms"];
    let num = |k: &str| {
        t[k].as_f64()
            .ok_or_else(|| bad(&format!("no timing_ms.{k}")))
    };
    let (setup, run) = (num("setup")?, num("run")?);
    let start_ns = t["start_clock_monotonic_ns"]
        .as_u64()
        .ok_or_else(|| bad("no timing_ms.start_clock_monotonic_ns"))?;
    let run_start = start_ns.saturating_sub(spawned_ns) as f64 / 1e6;
    Ok(VmmSample {
        exit,
        run_start,
        first_instruction: t["first_instruction"].as_f64().map(|f| run_start + f),
        guest_exit: run_start + setup + run,
        setup,
        run,
        boot_entry: t["boot_entry"].as_str().map(str::to_string),
    })
}

/// Measure `pairs` pairs; `vmm` is this executable, `cc` the compiler,
/// `tick` is called after each pair.
pub fn run(
    pairs: u32,
    vmm: &Path,
    cc: &str,
    mut tick: impl FnMut(),
) -> Result<StartupBench, StartupError> {
    let dir = tempfile::tempdir().map_err(|source| StartupError::Scratch {
        path: std::env::temp_dir(),
        source,
    })?;
    let floor = build_floor(cc, dir.path())?;
    // One unmeasured pair: page cache, KVM module state.
    run_floor(&floor, dir.path())?;
    run_vmm(vmm, dir.path())?;
    let mut floors = Vec::new();
    let mut vmms = Vec::new();
    for i in 0..pairs {
        let (f, v) = if i % 2 == 0 {
            let f = run_floor(&floor, dir.path())?;
            (f, run_vmm(vmm, dir.path())?)
        } else {
            let v = run_vmm(vmm, dir.path())?;
            (run_floor(&floor, dir.path())?, v)
        };
        floors.push(f);
        vmms.push(v);
        tick();
    }
    Ok(summarise(pairs, cc, &floors, &vmms))
}

/// The document from the pairs' figures.
fn summarise(pairs: u32, cc: &str, floors: &[f64], vmms: &[VmmSample]) -> StartupBench {
    let spread = |v: Vec<f64>| {
        Spread::of(&v).unwrap_or(Spread {
            min: f64::NAN,
            median: f64::NAN,
            p90: f64::NAN,
        })
    };
    let of = |f: fn(&VmmSample) -> f64| spread(vmms.iter().map(f).collect());
    let ratio = spread(floors.iter().zip(vmms).map(|(f, v)| v.exit / f).collect());
    let first: Option<Vec<f64>> = vmms.iter().map(|v| v.first_instruction).collect();
    StartupBench {
        pairs,
        cc: cc.to_string(),
        boot_entry: vmms.first().and_then(|v| v.boot_entry.clone()),
        floor_ms: spread(floors.to_vec()),
        vmm_ms: of(|v| v.exit),
        goal_ratio: GOAL_RATIO,
        goal_met: ratio.median <= GOAL_RATIO,
        goal_within_noise: ratio.min <= GOAL_RATIO && ratio.p90 > GOAL_RATIO,
        ratio,
        vmm_to_run_start_ms: of(|v| v.run_start),
        vmm_to_first_instruction_ms: first.and_then(|f| Spread::of(&f)),
        vmm_to_guest_exit_ms: of(|v| v.guest_exit),
        vmm_setup_ms: of(|v| v.setup),
        vmm_run_ms: of(|v| v.run),
    }
}

impl StartupBench {
    /// The table `vmm bench startup` prints.
    pub fn to_table(&self) -> String {
        let t = Columns::new().left("", 42).right("  ", 9).left("  ", 0);
        let mut out = format!(
            "start-up: process start to each point, {} pairs, order alternating \
             (guest entry: {}, floor built with {})\n",
            self.pairs,
            self.boot_entry.as_deref().unwrap_or("?"),
            self.cc
        );
        t.push(&mut out, &["", "median", "min..p90"]);
        let mut row = |name: &str, s: &Spread| {
            t.push(
                &mut out,
                &[
                    name.to_string(),
                    format!("{:.2} ms", s.median),
                    format!("{:.2}..{:.2}", s.min, s.p90),
                ],
            );
        };
        row(
            "floor (vmm/benches/floor/kvm_floor.c): exit",
            &self.floor_ms,
        );
        row("vmm run --workload none --no-native: exit", &self.vmm_ms);
        row(
            "  run start (exec, libraries, CLI)",
            &self.vmm_to_run_start_ms,
        );
        if let Some(s) = &self.vmm_to_first_instruction_ms {
            row("  guest's first instruction", s);
        }
        row("  guest's exit handled", &self.vmm_to_guest_exit_ms);
        row("  of which setup (timing_ms.setup)", &self.vmm_setup_ms);
        row("  of which guest run (timing_ms.run)", &self.vmm_run_ms);
        if self.vmm_to_first_instruction_ms.is_none() {
            t.push(
                &mut out,
                &[
                    "  guest's first instruction",
                    "-",
                    "(PVH entry: not reported)",
                ],
            );
        }
        t.push(
            &mut out,
            &[
                "vmm / floor, pair by pair".to_string(),
                format!("{:.2}x", self.ratio.median),
                format!("{:.2}..{:.2}", self.ratio.min, self.ratio.p90),
            ],
        );
        let noise = if self.goal_within_noise {
            format!(
                " (but the spread {:.2}..{:.2} crosses {:.1}x: the machine's noise decides; \
                 rerun on a quiet machine)",
                self.ratio.min, self.ratio.p90, self.goal_ratio
            )
        } else {
            String::new()
        };
        out.push_str(&format!(
            "goal: vmm / floor <= {:.1}x: {}{noise}\n",
            self.goal_ratio,
            if self.goal_met { "met" } else { "not met" }
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmm_figures_are_placed_on_the_spawn_clock() {
        let text = r#"{"timing_ms":{"setup":1.0,"run":0.5,"first_instruction":1.25,
            "boot_entry":"direct64","start_clock_monotonic_ns":5000000}}"#;
        let s = parse_vmm(text, 4_000_000, 3.0).unwrap();
        assert_eq!(s.run_start, 1.0);
        assert_eq!(s.first_instruction, Some(2.25));
        assert_eq!(s.guest_exit, 2.5);
        assert_eq!((s.exit, s.setup, s.run), (3.0, 1.0, 0.5));
        assert_eq!(s.boot_entry.as_deref(), Some("direct64"));
        let e = parse_vmm("{}", 0, 1.0).err().unwrap();
        assert_eq!(e.to_string(), "vmm run --json: no timing_ms.setup");
        assert!(parse_vmm("xx", 0, 1.0).is_err());
    }

    #[test]
    fn the_ratio_is_taken_pair_by_pair() {
        let sample = |exit: f64| VmmSample {
            exit,
            run_start: 0.5,
            first_instruction: None,
            guest_exit: exit - 0.1,
            setup: 0.2,
            run: 0.3,
            boot_entry: Some("pvh".into()),
        };
        let b = summarise(
            3,
            "cc",
            &[2.0, 2.0, 4.0],
            &[sample(2.6), sample(2.8), sample(4.0)],
        );
        // Ratios 1.3, 1.4, 1.0: median 1.3, not median(vmm)/median(floor)
        // (1.4).
        assert!((b.ratio.median - 1.3).abs() < 1e-9, "{:?}", b.ratio);
        assert_eq!(b.ratio.min, 1.0);
        assert!(b.goal_met);
        // 1.0..1.4 (p90 at most) stays under 1.5: decided by vmm, not by
        // noise.
        assert!(b.ratio.p90 < GOAL_RATIO, "{:?}", b.ratio);
        assert!(!b.goal_within_noise);
        let wide = summarise(2, "cc", &[1.0, 1.0], &[sample(1.0), sample(3.0)]);
        assert!(wide.goal_within_noise, "{:?}", wide.ratio);
        assert!(wide.to_table().contains("the machine's noise decides"));
        assert!(b.vmm_to_first_instruction_ms.is_none());
        assert!(b.to_table().contains("(PVH entry: not reported)"));
    }

    /// `CC="ccache gcc"` is a program and its argument, not a file named
    /// `ccache gcc` ("did not start: No such file or directory" before).
    #[test]
    fn a_cc_with_arguments_runs_its_first_word_with_the_rest() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("fake-cc");
        let log = dir.path().join("args");
        // Records its arguments and makes the `-o` file, as a compiler.
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\necho \"$@\" > {}\nwhile [ \"$1\" != -o ]; do shift; done\ntouch \"$2\"\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let cc = format!("  {} --wrapped  -m64 ", fake.display());
        let exe = build_floor(&cc, dir.path()).unwrap();
        assert!(exe.exists());
        let args = std::fs::read_to_string(&log).unwrap();
        assert!(
            args.starts_with(&format!("--wrapped -m64 -O2 -o {}", exe.display())),
            "{args}"
        );
        // An empty CC is `cc`: the error, if any, names no empty program.
        if let Err(e) = build_floor(" ", dir.path()) {
            assert!(!e.to_string().contains("``"), "{e}");
        }
    }

    #[test]
    fn the_floor_source_is_the_one_in_benches() {
        assert!(FLOOR_SOURCE.contains("KVM_CREATE_VM"));
        assert!(FLOOR_SOURCE.contains("0xe6, 0xf4"));
    }
}
