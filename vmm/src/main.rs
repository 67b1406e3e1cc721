//! The `vmm` command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use vmm::devices::SerialSink;
use vmm::native;
use vmm::report::{RunSummary, EXIT_USAGE, EXIT_VMM_ERROR};
use vmm::vstate::{self, KernelImage, RunConfig};
use vmm::xstate_manager::SyncPolicy;
use xstate::InitMode;

#[derive(Parser)]
#[command(
    name = "vmm",
    version,
    about = "A minimal KVM VMM that owns its guest's XCR0 and xsave state"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Boot a guest kernel (by default the embedded one) and print what it reports.
    Run(RunArgs),
    /// Benchmarks that boot the guest several times and compare.
    Bench(vmm::bench::BenchArgs),
    /// Compare guest-visible xstate: host CPU, KVM, policy, guest; host profiles.
    Features(vmm::features::FeaturesArgs),
    /// Resume a snapshot (from `vmm run --snapshot-file`) in a new VM.
    Restore(RestoreArgs),
    /// Inspect snapshot files.
    Snapshot(vmm::snapshot::SnapshotArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum InitArg {
    /// XSTATE_BV = x87|SSE: everything else in its init state (correct).
    Minimal,
    /// XSTATE_BV = all of XCR0: the illumos bug, for experiments.
    All,
}

#[derive(clap::Args)]
struct RunArgs {
    /// A PVH ELF kernel to boot instead of the embedded guest.
    #[arg(long, value_name = "PATH")]
    kernel: Option<PathBuf>,
    /// Guest RAM in MiB.
    #[arg(long, value_name = "MiB", default_value_t = 64)]
    mem: u64,
    /// xfeatures the guest may enable: `0x7`, `x87,sse`, `host,-avx`, `all`.
    /// Default: everything KVM supports.
    #[arg(long, value_name = "MASK")]
    xfeatures: Option<String>,
    /// Initial XSTATE_BV of the vCPU.
    #[arg(long, value_enum, default_value = "minimal")]
    init_xstate: InitArg,
    /// When the VMM moves the guest's xsave state across exits.
    #[arg(long, value_enum, default_value = "lazy")]
    xstate_sync: SyncPolicy,
    /// Workloads the guest runs: none, quick, aes, gemm, linpack, all (comma-separated).
    #[arg(long, value_name = "LIST", default_value = "quick")]
    workload: String,
    /// Extra words for the guest's command line.
    #[arg(long, value_name = "WORDS")]
    cmdline: Option<String>,
    /// Also show the guest's own serial report (on stderr with --json).
    #[arg(long)]
    serial: bool,
    #[command(flatten)]
    session: SessionArgs,
}

/// What `run` and `restore` share: how long, where snapshots go, output.
#[derive(clap::Args)]
struct SessionArgs {
    /// Do not run the workloads natively on the host for guest/native ratios.
    #[arg(long)]
    no_native: bool,
    /// Stop the guest after this many seconds (0: no limit).
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
    timeout: f64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Snapshot the guest after this many seconds and stop (needs --snapshot-file).
    #[arg(long, value_name = "SECONDS", requires = "snapshot_file")]
    snapshot_after: Option<f64>,
    /// Where to write a snapshot: after --snapshot-after, or when the guest
    /// asks for one (SNAPSHOT_PORT).
    #[arg(long, value_name = "PATH")]
    snapshot_file: Option<PathBuf>,
}

impl SessionArgs {
    /// Serial output: stdout, or stderr to keep stdout for the JSON object.
    fn serial(&self) -> SerialSink {
        if self.json {
            SerialSink::Stderr
        } else {
            SerialSink::Stdout
        }
    }

    fn timeout(&self) -> Result<Option<Duration>, vmm::Error> {
        seconds(self.timeout, "--timeout")
    }

    fn snapshot_after(&self) -> Result<Option<Duration>, vmm::Error> {
        self.snapshot_after
            .map(|s| Ok(seconds(s, "--snapshot-after")?.unwrap_or(Duration::ZERO)))
            .transpose()
    }
}

#[derive(clap::Args)]
struct RestoreArgs {
    /// The snapshot file (it is only read).
    file: PathBuf,
    /// When the VMM moves the guest's xsave state across exits (default: as
    /// when the snapshot was taken).
    #[arg(long, value_enum)]
    xstate_sync: Option<SyncPolicy>,
    #[command(flatten)]
    session: SessionArgs,
}

/// A positive number of seconds, or `None` for 0 (no limit).
fn seconds(v: f64, what: &str) -> Result<Option<Duration>, vmm::Error> {
    if !v.is_finite() || v < 0.0 {
        return Err(vmm::Error::Argument(format!(
            "{what} {v}: must be a number of seconds >= 0"
        )));
    }
    Ok((v > 0.0).then(|| Duration::from_secs_f64(v)))
}

fn run(args: RunArgs) -> Result<i32, vmm::Error> {
    let kernel = match &args.kernel {
        Some(p) => KernelImage::from_file(p)?,
        None => KernelImage::embedded(),
    };
    let mut words = Vec::new();
    if !args.serial {
        words.push("quiet".to_string());
    }
    // Refuse a bad list before booting anything.
    guest::workloads::Selection::parse(&args.workload)
        .map_err(|e| vmm::Error::Argument(format!("--workload {:?}: {e}", args.workload)))?;
    words.push(format!("workload={}", args.workload));
    if let Some(c) = &args.cmdline {
        // Words the VMM owns (`xfeatures=`) are a usage error.
        if let Err(e) = vstate::check_cmdline_words(c) {
            eprintln!("vmm: --cmdline: {e}");
            return Ok(EXIT_USAGE);
        }
        words.push(c.clone());
    }
    let config = RunConfig {
        kernel,
        mem_mib: args.mem,
        xfeatures: args.xfeatures.clone(),
        init_xstate: match args.init_xstate {
            InitArg::Minimal => InitMode::Minimal,
            InitArg::All => InitMode::AllOfXcr0,
        },
        cmdline: words.join(" "),
        serial: args.session.serial(),
        timeout: args.session.timeout()?,
        xstate_sync: args.xstate_sync,
        raw_loop: false,
        snapshot_after: args.session.snapshot_after()?,
        snapshot_file: args.session.snapshot_file.clone(),
    };
    let outcome = vstate::run(config)?;
    print_outcome(
        &outcome,
        (!args.session.no_native).then_some(args.workload.as_str()),
        args.session.json,
    )
}

/// Print a run's (or a restored run's) summary; returns the exit status.
/// `native`: the workload list to run natively for guest/native ratios.
fn print_outcome(
    outcome: &vstate::RunOutcome,
    native: Option<&str>,
    json: bool,
) -> Result<i32, vmm::Error> {
    let mut summary = RunSummary::new(outcome);
    if let Some(workload) = native.filter(|_| !summary.results.is_empty()) {
        let native = native::run_native(workload, summary.tsc_khz)?;
        native::attach_ratios(&mut summary.results, &native);
        if summary.results.iter().any(|r| r.name == "aes-128-cbc") {
            summary.openssl_aes_128_cbc_mb_per_s = native::openssl_aes_128_cbc_8192(1);
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", summary.to_table());
    }
    Ok(summary.process_exit)
}

/// `vmm restore`: snapshot errors are printed here (status 64).
fn restore(args: RestoreArgs) -> Result<i32, vmm::Error> {
    let session = &args.session;
    let opts = vmm::snapshot::restore::RestoreOptions {
        serial: session.serial(),
        timeout: session.timeout()?,
        xstate_sync: args.xstate_sync,
        snapshot_after: session.snapshot_after()?,
        snapshot_file: session.snapshot_file.clone(),
    };
    let outcome = match vmm::snapshot::restore::restore(&args.file, opts) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("vmm: {e}");
            return Ok(EXIT_VMM_ERROR);
        }
    };
    // The guest's workloads, from the command line it booted with.
    let workload = (!session.no_native)
        .then(|| vmm::snapshot::restore::load(&args.file).ok())
        .flatten()
        .and_then(|s| {
            s.meta
                .cmdline
                .split_whitespace()
                .find_map(|w| w.strip_prefix("workload=").map(str::to_string))
        })
        .unwrap_or_else(|| "quick".into());
    print_outcome(
        &outcome,
        (!session.no_native).then_some(workload.as_str()),
        session.json,
    )
}

fn main() -> ExitCode {
    // Usage errors get their own status (not clap's 2, the guest's
    // CPU-exception status); --help and --version still end with 0.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE as u8 } else { 0 });
        }
    };
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Bench(args) => vmm::bench::main(args),
        Command::Features(args) => vmm::features::main(args),
        Command::Restore(args) => restore(args),
        Command::Snapshot(args) => Ok(vmm::snapshot::main(args)),
    };
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("vmm: {e}");
            ExitCode::from(EXIT_VMM_ERROR as u8)
        }
    }
}
