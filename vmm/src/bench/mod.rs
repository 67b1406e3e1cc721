//! `vmm bench`: measurements that boot the guest several times and compare.
//!
//! - `exits` (`exits`): vCPU exit cost per policy against the raw limit.
//! - `init-xstate` (`init_xstate`): the illumos initial-state experiment.
//! - `peers` (`peers`): the same guest under `vmm`, QEMU, Cloud Hypervisor
//!   and Firecracker.
//! - `snapshot` (`snapshot`): snapshot and restore time and file size as
//!   guest RAM grows.
//! - `startup` (`startup`): `vmm run --workload none` against the floor, a
//!   minimal C VMM, pair by pair.
//! - [`openssl`]: the host's `openssl speed` beside the guest's AES rows
//!   (used by `vmm run`).
//!
//! Shared by both: [`stats`] (median, min..p90 spread, within-noise
//! verdicts), `progress` (the stderr progress bar), `--plot` through
//! [`crate::report::plot`], `baseline` and `compare` (saved runs and
//! the row-by-row comparison with them, one code for both benchmarks).

pub(crate) mod baseline;
mod command;
pub(crate) mod compare;
pub(crate) mod exits;
pub(crate) mod init_xstate;
pub mod openssl;
pub(crate) mod peers;
pub(crate) mod progress;
pub(crate) mod snapshot;
pub(crate) mod startup;
pub mod stats;

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::error::Result;
use crate::xstate_manager::SyncPolicy;
use exits::{MAX_EXITS_PER_ROW, MAX_ROUNDS};

pub use command::main;

/// `vmm bench`.
#[derive(Args)]
pub struct BenchArgs {
    /// Which measurement.
    #[command(subcommand)]
    pub what: BenchCommand,
}

/// `--budget SECONDS`: a positive, finite number of seconds, at most a day.
fn parse_budget(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && v > 0.0 && v <= 86_400.0 {
        Ok(v)
    } else {
        Err("must be a number of seconds above 0 and at most 86400".into())
    }
}

/// The measurements of `vmm bench`.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// vCPU exit cost per exit kind, guest mode, XCR0, live vector state
    /// (clean, ymm, zmm, tiles) and xstate sync policy, against a raw
    /// KVM_RUN loop measured in the same run.
    ///
    /// Each row is the median of --rounds interleaved rounds with its
    /// min..p90 spread; rows whose difference from the raw loop is inside
    /// that spread are marked "within noise". Without --count the exits per
    /// row are calibrated to a time budget.
    Exits {
        /// Exits per row [default: calibrated to --budget].
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_EXITS_PER_ROW), conflicts_with = "budget")]
        count: Option<u64>,
        /// Seconds of measurement to calibrate the exits per row to
        /// [default: 120; 12 with --quick].
        #[arg(long, value_name = "SECONDS", value_parser = parse_budget)]
        budget: Option<f64>,
        /// Interleaved rounds; each row reports their median and spread
        /// [default: 3].
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_ROUNDS as i64))]
        rounds: Option<u32>,
        /// A short run (well under 30 s): the full XCR0 only (the user
        /// state KVM offers and the host enables; unless --xfeatures), a
        /// 12 s budget, 3 rounds.
        #[arg(long)]
        quick: bool,
        /// Policies to measure (default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        policy: Vec<SyncPolicy>,
        /// Guest XCR0 values, `;`-separated, each as for `vmm run`
        /// (default: x87,sse, then +avx, +AVX-512, +AMX tiles, each where
        /// KVM offers it and the host has it, then the full XCR0).
        #[arg(
            long,
            value_name = "MASKS",
            value_delimiter = ';',
            allow_hyphen_values = true
        )]
        xfeatures: Vec<String>,
        /// Output options.
        #[command(flatten)]
        out: OutputArgs,
        /// Baseline options.
        #[command(flatten)]
        baseline: BaselineArgs,
    },
    /// The same workloads with the initial XSTATE_BV = x87|SSE and = all of XCR0.
    ///
    /// Each row is the median of interleaved rounds with its min..p90
    /// spread, and all/min their ratio; ratios whose ranges overlap are
    /// marked "within noise", and a ratio above 1 is never reported as a
    /// gain. Without --rounds, the first round is timed and as many rounds
    /// run as fit --budget (at least 3).
    InitXstate {
        /// Workloads to run under both initial states, as for `vmm run`
        /// (none, quick, aes, gemm, linpack, all; comma-separated)
        /// [default: aes,linpack; aes,linpack,quick with --quick].
        #[arg(long, value_name = "LIST")]
        workload: Option<String>,
        /// The policy, as for `vmm run` (`avx512`, `host,-avx`, ...).
        /// Default: everything KVM supports.
        #[arg(long, value_name = "MASK", allow_hyphen_values = true)]
        xfeatures: Option<String>,
        /// Interleaved rounds; each row reports their median and spread
        /// [default: calibrated to --budget].
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_ROUNDS as i64), conflicts_with = "budget")]
        rounds: Option<u32>,
        /// Seconds the run should take: the first round (one boot per
        /// initial state) is timed and as many rounds run as fit, at least
        /// 3 (so a budget below three rounds is exceeded) [default: 60; 12
        /// with --quick].
        #[arg(long, value_name = "SECONDS", value_parser = parse_budget)]
        budget: Option<f64>,
        /// A short run (well under 30 s): the workloads at their quick
        /// sizes (unless --workload) and a 12 s budget.
        #[arg(long)]
        quick: bool,
        /// Output options.
        #[command(flatten)]
        out: OutputArgs,
        /// Baseline options.
        #[command(flatten)]
        baseline: BaselineArgs,
    },
    /// The same guest under vmm, QEMU, Cloud Hypervisor and Firecracker:
    /// process start to guest exit, the guest's own exit costs, and the
    /// xstate each VMM shows it, in one table.
    ///
    /// vmm always runs; QEMU when qemu-system-x86_64 is on PATH (or
    /// VMM_PEER_QEMU names it); Cloud Hypervisor and Firecracker when
    /// VMM_PEER_CLOUD_HYPERVISOR / VMM_PEER_FIRECRACKER name their
    /// executables. Exits with 64 when a run of a VMM failed (the table
    /// still shows what was measured), 68 when a variable names no
    /// executable.
    Peers {
        /// Runs per VMM; times are their median and min..max.
        #[arg(long, default_value_t = peers::DEFAULT_RUNS, value_parser = clap::value_parser!(u32).range(1..=peers::MAX_RUNS as i64))]
        runs: u32,
        /// Exits per guest benchmark row (the guest's `exits=` word).
        #[arg(long, default_value_t = peers::DEFAULT_EXITS, value_parser = clap::value_parser!(u64).range(1..=peers::MAX_EXITS))]
        exits: u64,
        /// Seconds one run of one VMM may take before it is killed.
        #[arg(long, value_name = "SECONDS", default_value_t = peers::DEFAULT_TIMEOUT_S, value_parser = clap::value_parser!(u64).range(1..=3600))]
        timeout: u64,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// No progress bar (it is drawn on stderr only when stderr is a terminal).
        #[arg(long)]
        quiet: bool,
    },
    /// Snapshot time (pause to rename), file size and restore time (process
    /// start to the first KVM_RUN) per guest RAM size, for the same guest
    /// snapshotted mid-workload; every restored guest runs to its end and
    /// its checks must pass (exit status 64 otherwise).
    Snapshot {
        /// Guest RAM sizes in MiB [default: 64,512,2048].
        #[arg(long, value_name = "LIST", value_parser = snapshot::parse_mem)]
        mem: Option<std::vec::Vec<u64>>,
        /// Runs per size; figures are their median and min..p90.
        #[arg(long, default_value_t = snapshot::DEFAULT_RUNS, value_parser = clap::value_parser!(u32).range(1..=snapshot::MAX_RUNS as i64))]
        runs: u32,
        /// The guest's workloads (as `vmm run --workload`).
        #[arg(long, default_value = "gemm")]
        workload: String,
        /// Where the guest stops for its snapshot, under every VMM: `start`
        /// (before its first timed row), `mid` (before the first row at the
        /// largest size of its last workload: with `gemm`, DGEMM n = 1024
        /// with its ~27 MB of matrices filled) or `end` (after its last
        /// workload).
        #[arg(long, value_name = "PHASE", default_value = snapshot::DEFAULT_POINT, value_parser = snapshot::parse_point)]
        at: guest::protocol::SnapshotPhase,
        /// Seconds one boot or restore may take.
        #[arg(long, value_name = "SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=3600))]
        timeout: u64,
        /// Also snapshot and restore the same guest under Cloud Hypervisor
        /// and Firecracker (VMM_PEER_CLOUD_HYPERVISOR / VMM_PEER_FIRECRACKER;
        /// unset: their columns say so) and report the goals.
        #[arg(long)]
        peers: bool,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// No progress bar (it is drawn on stderr only when stderr is a terminal).
        #[arg(long)]
        quiet: bool,
    },
    /// Start-up against the floor: `vmm run --workload none --no-native`
    /// and a minimal C VMM (benches/floor/kvm_floor.c, embedded and
    /// compiled with $CC or cc) that runs one `out` in 64-bit mode, pair by
    /// pair, from process start to exit; vmm's time also split at the run
    /// start, the guest's first instruction and the guest's exit.
    ///
    /// Each row is the median of the pairs with its min..p90 spread; the
    /// ratio is taken pair by pair. The goal is vmm / floor <= 1.5.
    Startup {
        /// Pairs to measure (plus one unmeasured warm-up pair).
        #[arg(long, default_value_t = startup::DEFAULT_PAIRS, value_parser = clap::value_parser!(u32).range(1..=startup::MAX_PAIRS as i64))]
        pairs: u32,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// No progress bar (it is drawn on stderr only when stderr is a terminal).
        #[arg(long)]
        quiet: bool,
    },
}

/// Output options every `vmm bench` shares.
#[derive(Args)]
pub struct OutputArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// No progress bar (it is drawn on stderr only when stderr is a terminal).
    #[arg(long)]
    pub quiet: bool,
    /// Also draw the results as an SVG bar chart into FILE.
    #[arg(long, value_name = "FILE", value_parser = crate::output::parse_destination)]
    pub plot: Option<PathBuf>,
    /// Let --plot replace a regular file already at FILE (never a symlink,
    /// device, FIFO or directory).
    #[arg(long, requires = "plot")]
    pub force: bool,
}

/// Baselines of `vmm bench exits` and `init-xstate` (see `baseline`).
#[derive(Args)]
pub struct BaselineArgs {
    /// Save this run as baseline NAME (NAME.json in the baseline directory).
    #[arg(long, value_name = "NAME")]
    pub save_baseline: Option<String>,
    /// Compare this run with the saved baseline NAME.
    #[arg(long, value_name = "NAME", conflicts_with = "compare")]
    pub baseline: Option<String>,
    /// Compare this run with FILE, any `--json` output of the same
    /// `vmm bench` subcommand (`-`: standard input).
    #[arg(long, value_name = "FILE.json")]
    pub compare: Option<PathBuf>,
    /// Where baselines are kept [default: $XDG_DATA_HOME/vmm/bench, else
    /// ~/.local/share/vmm/bench].
    #[arg(long, value_name = "DIR", value_parser = crate::output::parse_destination)]
    pub baseline_dir: Option<PathBuf>,
}

/// A baseline to compare with, and its name in the output.
type Against = (baseline::Baseline, String);

impl BaselineArgs {
    /// Everything that can be refused before measuring: the file
    /// `--save-baseline` will write, and the baseline `--baseline` /
    /// `--compare` name, read and checked to be a `kind` result.
    fn resolve(&self, kind: &compare::Kind) -> Result<(Option<PathBuf>, Option<Against>)> {
        let needs_dir = self.save_baseline.is_some() || self.baseline.is_some();
        let dir = needs_dir
            .then(|| baseline::dir(self.baseline_dir.as_deref()))
            .transpose()?;
        let save_to = match (&self.save_baseline, &dir) {
            (Some(name), Some(d)) => Some(baseline::path(d, "--save-baseline", name)?),
            _ => None,
        };
        let against = match (&self.baseline, &dir, &self.compare) {
            (Some(name), Some(d), _) => {
                let path = baseline::path(d, "--baseline", name)?;
                if !path.exists() {
                    return Err(crate::error::BaselineError::Missing {
                        name: name.clone(),
                        path,
                    }
                    .into());
                }
                Some((baseline::load(&path, kind)?, name.clone()))
            }
            (_, _, Some(file)) => Some((baseline::load(file, kind)?, file.display().to_string())),
            _ => None,
        };
        Ok((save_to, against))
    }
}
