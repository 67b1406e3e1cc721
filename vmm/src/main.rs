//! The `vmm` command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use vmm::devices::SerialSink;
use vmm::native;
use vmm::report::{RunSummary, EXIT_VMM_ERROR};
use vmm::vm::{self, KernelImage, RunConfig};
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
    /// Do not run the workloads natively on the host for guest/native ratios.
    #[arg(long)]
    no_native: bool,
    /// Extra words for the guest's command line.
    #[arg(long, value_name = "WORDS")]
    cmdline: Option<String>,
    /// Also show the guest's own serial report (on stderr with --json).
    #[arg(long)]
    serial: bool,
    /// Stop the guest after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
    timeout: f64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
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
        .map_err(|e| vmm::Error::Policy(format!("--workload {:?}: {e}", args.workload)))?;
    words.push(format!("workload={}", args.workload));
    if let Some(c) = &args.cmdline {
        words.push(c.clone());
    }
    let timeout = (args.timeout > 0.0).then(|| Duration::from_secs_f64(args.timeout));
    let config = RunConfig {
        kernel,
        mem_mib: args.mem,
        xfeatures: args.xfeatures.clone(),
        init_xstate: match args.init_xstate {
            InitArg::Minimal => InitMode::Minimal,
            InitArg::All => InitMode::AllOfXcr0,
        },
        cmdline: words.join(" "),
        // Keep stdout for the JSON object alone.
        serial: if args.json {
            SerialSink::Stderr
        } else {
            SerialSink::Stdout
        },
        timeout,
        xstate_sync: args.xstate_sync,
        raw_loop: false,
    };
    let outcome = vm::run(config)?;
    let mut summary = RunSummary::new(&outcome);
    if !args.no_native && !summary.results.is_empty() {
        let native = native::run_native(&args.workload, summary.tsc_khz)?;
        native::attach_ratios(&mut summary.results, &native);
        if summary.results.iter().any(|r| r.name == "aes-128-cbc") {
            summary.openssl_aes_128_cbc_mb_per_s = native::openssl_aes_128_cbc_8192(1);
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).map_err(|e| vmm::Error::Guest(e.to_string()))?
        );
    } else {
        print!("{}", summary.to_table());
    }
    Ok(summary.process_exit)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Bench(args) => vmm::bench::main(args),
        Command::Features(args) => vmm::features::main(args),
    };
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("vmm: {e}");
            ExitCode::from(EXIT_VMM_ERROR as u8)
        }
    }
}
