//! `vmm bench`: measurements that boot the guest several times and compare.
//!
//! - `exits` ([`exits`]): vCPU exit cost per policy against the raw limit.
//! - `init-xstate` ([`init_xstate`]): the illumos initial-state experiment.
//! - `peers` ([`peers`]): the same guest under `vmm`, QEMU, Cloud Hypervisor
//!   and Firecracker.
//! - `snapshot` ([`snapshot`]): snapshot and restore time and file size as
//!   guest RAM grows.
//! - `startup` ([`startup`]): `vmm run --workload none` against the floor, a
//!   minimal C VMM, pair by pair.
//! - [`openssl`]: the host's `openssl speed` beside the guest's AES rows
//!   (used by `vmm run`).
//!
//! Shared by both: [`stats`] (median, min..p90 spread, within-noise
//! verdicts), [`progress`] (the stderr progress bar), `--plot` through
//! [`crate::report::plot`], [`baseline`] and [`compare`] (saved runs and
//! the row-by-row comparison with them, one code for both benchmarks).

pub mod baseline;
pub mod compare;
pub mod exits;
pub mod init_xstate;
pub mod openssl;
pub mod peers;
pub mod progress;
pub mod snapshot;
pub mod startup;
pub mod stats;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::error::{Error, Result};
use crate::kvm::HostKvm;
use crate::report::plot;
use crate::schema::Document;
use crate::xstate_manager::SyncPolicy;
use exits::{Count, MAX_EXITS_PER_ROW, MAX_ROUNDS};
use progress::Progress;

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
    /// vCPU exit cost per exit kind, guest mode, XCR0, upper-YMM state and
    /// xstate sync policy, against a raw KVM_RUN loop measured in the same run.
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
        /// A short run (well under 30 s): the full XCR0 only (unless
        /// --xfeatures), a 12 s budget, 3 rounds.
        #[arg(long)]
        quick: bool,
        /// Policies to measure (default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        policy: Vec<SyncPolicy>,
        /// Guest XCR0 values, `;`-separated, each as for `vmm run`
        /// (default: x87,sse and x87,sse,avx).
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
        /// Seconds after boot the snapshot is taken [default: 0.6 of the
        /// workload's own run, timed by one boot before the sweep: with
        /// `gemm`, mid-DGEMM with about 27 MB of the guest's RAM in use on
        /// any CPU].
        #[arg(long, value_name = "SECONDS", value_parser = parse_budget)]
        after: Option<f64>,
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
    /// ratio is taken pair by pair. The goal is vmm / floor <= 2.
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
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
}

/// Baselines of `vmm bench exits` and `init-xstate` (see [`baseline`]).
#[derive(Args)]
pub struct BaselineArgs {
    /// Save this run as baseline NAME (NAME.json in the baseline directory).
    #[arg(long, value_name = "NAME")]
    pub save_baseline: Option<String>,
    /// Compare this run with the saved baseline NAME.
    #[arg(long, value_name = "NAME", conflicts_with = "compare")]
    pub baseline: Option<String>,
    /// Compare this run with FILE, any `--json` output of the same
    /// `vmm bench` subcommand.
    #[arg(long, value_name = "FILE.json")]
    pub compare: Option<PathBuf>,
    /// Where baselines are kept [default: $XDG_DATA_HOME/vmm/bench, else
    /// ~/.local/share/vmm/bench].
    #[arg(long, value_name = "DIR")]
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

/// `--save-baseline`: write `bench` to `path`, if given, and say where.
fn save<T: serde::Serialize>(path: Option<&Path>, bench: &T) -> Result<()> {
    if let Some(path) = path {
        baseline::save(path, bench)?;
        eprintln!("vmm: baseline saved to {}", path.display());
    }
    Ok(())
}

fn print<T: serde::Serialize>(json: Option<Document>, value: &T, table: String) -> Result<()> {
    if let Some(doc) = json {
        let text = crate::schema::to_json(doc, value)?;
        println!("{text}");
    } else {
        print!("{table}");
    }
    Ok(())
}

/// Write `charts` to `--plot FILE`, if given.
fn write_plot(file: Option<&Path>, charts: impl FnOnce() -> Vec<plot::BarChart>) -> Result<()> {
    if let Some(path) = file {
        plot::write_svg(path, &charts(), 1400)?;
    }
    Ok(())
}

/// How long one boot of `exits` or `init-xstate` may take.
const BOOT_TIMEOUT: Duration = Duration::from_secs(1800);

/// Run a `vmm bench` subcommand; returns the process exit status.
pub fn main(args: BenchArgs) -> Result<i32> {
    match args.what {
        BenchCommand::Exits {
            count,
            budget,
            rounds,
            quick,
            policy,
            xfeatures,
            out,
            baseline: bl,
        } => {
            // Everything that can be refused is refused before measuring.
            if let Some(p) = &out.plot {
                plot::check_target(p)?;
            }
            let (save_to, against) = bl.resolve(&exits::KIND)?;
            let plan = exits_plan(count, budget, rounds, quick, policy, &xfeatures)?;
            let progress = Progress::new(plan.boots(), out.quiet);
            let measured = exits::run(&plan, &progress);
            drop(progress);
            let mut b = measured?;
            if let Some((then, name)) = &against {
                b.comparison = Some(baseline::compare(&exits::KIND, &b, then, name.clone()));
            }
            print(out.json.then_some(Document::BenchExits), &b, b.to_table())?;
            save(save_to.as_deref(), &b)?;
            write_plot(out.plot.as_deref(), || b.charts())?;
            Ok(0)
        }
        BenchCommand::InitXstate {
            workload,
            xfeatures,
            rounds,
            budget,
            quick,
            out,
            baseline: bl,
        } => init_xstate_main(workload, xfeatures, rounds, budget, quick, out, bl),
        BenchCommand::Peers {
            runs,
            exits,
            timeout,
            json,
            quiet,
        } => peers_main(runs, exits, timeout, json, quiet),
        BenchCommand::Snapshot {
            mem,
            runs,
            workload,
            after,
            timeout,
            peers,
            json,
            quiet,
        } => snapshot_main(mem, runs, workload, after, timeout, peers, json, quiet),
        BenchCommand::Startup { pairs, json, quiet } => startup_main(pairs, json, quiet),
    }
}

/// The `exits` sweep's plan: the masks (each `--xfeatures` given the AMX
/// permission it needs and checked against KVM's table; else the
/// defaults, only the widest with `--quick`), the policies, the rows'
/// exit count or time budget, and the rounds.
fn exits_plan(
    count: Option<u64>,
    budget: Option<f64>,
    rounds: Option<u32>,
    quick: bool,
    policy: Vec<SyncPolicy>,
    xfeatures: &[String],
) -> Result<exits::Plan> {
    // An --xfeatures naming AMX needs the guest permission before
    // KVM's table is read (see crate::arch::amx).
    for spec in xfeatures {
        crate::arch::amx::permit_guest(Some(spec))?;
    }
    let host = HostKvm::open()?;
    let masks = if !xfeatures.is_empty() {
        xfeatures
            .iter()
            .map(|s| crate::cpuid::validate_policy(Some(s), &host.xstate, &host.supported_cpuid))
            .collect::<Result<Vec<_>>>()?
    } else {
        let all = exits::default_masks(host.xstate.supported_xcr0());
        if quick {
            all.into_iter()
                .max_by_key(|m| m.bits())
                .into_iter()
                .collect()
        } else {
            all
        }
    };
    let policies = if policy.is_empty() {
        vec![
            SyncPolicy::Lazy,
            SyncPolicy::Eager,
            SyncPolicy::EagerCompact,
        ]
    } else {
        policy
    };
    drop(host);
    let default_budget = if quick {
        exits::QUICK_BUDGET_S
    } else {
        exits::DEFAULT_BUDGET_S
    };
    Ok(exits::Plan {
        count: match count {
            Some(c) => Count::Given(c),
            None => Count::Budget(budget.unwrap_or(default_budget)),
        },
        rounds: rounds.unwrap_or(exits::DEFAULT_ROUNDS),
        masks,
        policies,
        timeout: BOOT_TIMEOUT,
    })
}

/// `vmm bench init-xstate`: the workload and the plot target checked,
/// the baseline resolved, then the two boots measured and reported.
fn init_xstate_main(
    workload: Option<String>,
    xfeatures: Option<String>,
    rounds: Option<u32>,
    budget: Option<f64>,
    quick: bool,
    out: OutputArgs,
    bl: BaselineArgs,
) -> Result<i32> {
    let default_workload = if quick {
        init_xstate::QUICK_WORKLOAD
    } else {
        init_xstate::DEFAULT_WORKLOAD
    };
    let workload = workload.unwrap_or_else(|| default_workload.to_string());
    guest::workloads::Selection::parse(&workload)
        .map_err(|e| Error::Argument(format!("invalid --workload {workload:?}: {e}")))?;
    if let Some(p) = &out.plot {
        plot::check_target(p)?;
    }
    let (save_to, against) = bl.resolve(&init_xstate::KIND)?;
    let default_budget = if quick {
        init_xstate::QUICK_BUDGET_S
    } else {
        init_xstate::DEFAULT_BUDGET_S
    };
    let rounds = match rounds {
        Some(n) => init_xstate::Rounds::Given(n),
        None => init_xstate::Rounds::Budget(budget.unwrap_or(default_budget)),
    };
    let progress = Progress::new(2, out.quiet);
    let measured = init_xstate::run(
        &workload,
        xfeatures.as_deref(),
        rounds,
        BOOT_TIMEOUT,
        &progress,
    );
    drop(progress);
    let mut b = measured?;
    if let Some((then, name)) = &against {
        b.comparison = Some(baseline::compare(
            &init_xstate::KIND,
            &b,
            then,
            name.clone(),
        ));
    }
    print(
        out.json.then_some(Document::BenchInitXstate),
        &b,
        b.to_table(),
    )?;
    save(save_to.as_deref(), &b)?;
    write_plot(out.plot.as_deref(), || b.charts())?;
    Ok(0)
}

/// `vmm bench peers`: the targets found (a missing one is a usage error),
/// the same guest run under each, the table or JSON printed.
fn peers_main(runs: u32, exits: u64, timeout: u64, json: bool, quiet: bool) -> Result<i32> {
    let ours = std::env::current_exe()?;
    // A PeerError is printed here, not turned into `Error`: the
    // error module stays below the bench modules.
    let (targets, skipped) = match peers::targets(ours, |v| std::env::var_os(v)) {
        Ok(t) => t,
        Err(e) => {
            crate::error::eprint(&e, None);
            return Ok(crate::report::exit::EXIT_USAGE);
        }
    };
    let plan = peers::Plan {
        runs,
        exits,
        timeout: Duration::from_secs(timeout),
    };
    let progress = Progress::new(u64::from(runs) * targets.len() as u64, quiet);
    let measured = peers::run(&plan, &targets, skipped, || progress.inc());
    drop(progress);
    let b = match measured {
        Ok(b) => b,
        Err(e) => {
            crate::error::eprint(&e, None);
            return Ok(crate::report::exit::EXIT_VMM_ERROR);
        }
    };
    print(json.then_some(Document::BenchPeers), &b, b.to_table())?;
    if !b.all_ok() {
        return Ok(crate::report::exit::EXIT_VMM_ERROR);
    }
    Ok(0)
}

/// `vmm bench snapshot`: the workload and the peers checked, the sweep
/// run in a scratch directory, the table or JSON printed.
#[allow(clippy::too_many_arguments)]
fn snapshot_main(
    mem: Option<Vec<u64>>,
    runs: u32,
    workload: String,
    after: Option<f64>,
    timeout: u64,
    peers: bool,
    json: bool,
    quiet: bool,
) -> Result<i32> {
    if let Err(e) = guest::workloads::Selection::parse(&workload) {
        return Err(Error::Argument(format!(
            "invalid --workload {workload:?}: {e}"
        )));
    }
    let dir = tempfile::Builder::new()
        .prefix("vmm-bench-snapshot-")
        .tempdir()?;
    let peers = if peers {
        match snapshot::peer_plans(|v| std::env::var_os(v)) {
            Ok(p) => p,
            Err(e) => {
                crate::error::eprint(&e, None);
                return Ok(crate::report::exit::EXIT_USAGE);
            }
        }
    } else {
        Vec::new()
    };
    let plan = snapshot::Plan {
        mem_mib: mem.unwrap_or_else(|| snapshot::DEFAULT_MEM_MIB.to_vec()),
        runs,
        workload,
        after: after.map(Duration::from_secs_f64),
        timeout: Duration::from_secs(timeout),
        dir: dir.path().to_path_buf(),
        vmm: std::env::current_exe()?,
        peers,
    };
    let progress = Progress::new(u64::from(runs) * plan.mem_mib.len() as u64, quiet);
    let b = snapshot::run(&plan, || progress.inc())?;
    drop(progress);
    print(json.then_some(Document::BenchSnapshot), &b, b.to_table())?;
    if !b.all_ok() {
        return Ok(crate::report::exit::EXIT_VMM_ERROR);
    }
    Ok(0)
}

/// `vmm bench startup`: `pairs` pairs of `vmm` and the C floor (built
/// with `$CC`, else `cc`), the table or JSON printed.
fn startup_main(pairs: u32, json: bool, quiet: bool) -> Result<i32> {
    let ours = std::env::current_exe()?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let progress = Progress::new(u64::from(pairs), quiet);
    let measured = startup::run(pairs, &ours, &cc, || progress.inc());
    drop(progress);
    // Printed here, not turned into `Error` (as for peers).
    let b = match measured {
        Ok(b) => b,
        Err(e) => {
            crate::error::eprint(&e, e.hint());
            return Ok(crate::report::exit::EXIT_VMM_ERROR);
        }
    };
    print(json.then_some(Document::BenchStartup), &b, b.to_table())?;
    Ok(0)
}
