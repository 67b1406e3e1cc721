//! The `vmm` command line.
//!
//! `main` is the C entry point (`#![no_main]`), not Rust's `fn main`.
//! Why: Rust's runtime start-up reads `/proc/self/maps` (glibc's
//! `pthread_getattr_np` for the main thread's stack guard) and sets up a
//! signal stack, about 0.13 ms under nested paging: a twentieth of a
//! `vmm run --workload none` whose start-up is measured against a C floor
//! (`vmm bench startup`). Of what that start-up gave, `vmm` keeps what it
//! relies on: SIGPIPE ignored (a closed pipe is an error on the write, not
//! the end of the process), standard descriptors 0-2 open (one closed at
//! exec is opened on `/dev/null`, see [`open_standard_descriptors`]) and
//! standard output flushed at the end.
//! `std::env::args` still works (on glibc the standard library collects
//! the arguments from `.init_array`). What goes: a stack overflow on the
//! main thread ends in a plain SIGSEGV instead of Rust's message.
// The test harness brings its own `main`.
#![cfg_attr(not(test), no_main)]
// Messages go through `terminal::line`, results through `stdout::print`:
// both escape control characters.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use guest::workloads::Selection;
use vmm::internal::cli::{
    self, parse_destination, parse_in_place, parse_seconds, parse_whole, stdout, terminal,
    StdoutError, EXIT_CLOSED_PIPE,
};
use vmm::report::{RunSummary, EXIT_SNAPSHOT_MEMORY, EXIT_USAGE, EXIT_VMM_ERROR};
use vmm::run::{self, KernelImage, RunConfig, SerialSink, Xfeatures};
use vmm::schema::Document;
use vmm::session;
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
    Bench(cli::BenchArgs),
    /// Compare guest-visible xstate: host CPU, KVM, policy, guest; host profiles.
    Features(cli::FeaturesArgs),
    /// Resume a snapshot (from `vmm run --snapshot-file`) in a new VM.
    Restore(RestoreArgs),
    /// Inspect snapshot files.
    Snapshot(cli::SnapshotArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the manual page (roff), or write one page per subcommand.
    Man(ManArgs),
    /// Write the JSON Schema of every `--json` document into a directory.
    Schema(SchemaArgs),
}

/// `vmm completions`.
#[derive(clap::Args)]
#[command(
    after_help = "Install, e.g.: vmm completions bash > ~/.local/share/bash-completion/completions/vmm"
)]
struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// `vmm man`.
#[derive(clap::Args)]
#[command(after_help = "Read it with: vmm man | man -l -")]
struct ManArgs {
    /// Write vmm.1 and one page per subcommand (vmm-run.1, ...) into DIR
    /// instead of printing the top page.
    #[arg(long, value_name = "DIR", value_parser = parse_destination)]
    dir: Option<PathBuf>,
}

/// `vmm schema`.
#[derive(clap::Args)]
struct SchemaArgs {
    /// Directory to write `<document>.schema.json` files into (created if missing).
    #[arg(value_name = "DIR", value_parser = parse_destination)]
    dir: PathBuf,
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
    /// A kernel to boot instead of the embedded guest: a PVH ELF, or a
    /// 64-bit Linux bzImage (Linux boot protocol). A Linux kernel gets a
    /// PC: irqchip, PIT, COM1 on IRQ 4, the i8042 reset.
    #[arg(long, value_name = "PATH", value_parser = parse_in_place)]
    kernel: Option<PathBuf>,
    /// An initramfs for a Linux --kernel (PVH module list, or the bzImage
    /// zero page's ramdisk fields), placed at the top of low RAM.
    #[arg(long, value_name = "PATH", requires = "kernel", value_parser = parse_in_place)]
    initrd: Option<PathBuf>,
    /// Guest RAM in MiB, 4 to 1047552: up to 3 GiB below the 32-bit hole,
    /// the rest from 4 GiB; the host backs only what the guest touches.
    #[arg(long, value_name = "MiB", default_value_t = 64, value_parser = parse_whole::<u64>)]
    mem: u64,
    /// xfeatures the guest may enable: `0x7`, `x87,sse,avx`, `avx512`,
    /// `host,-avx`, `-avx` (= host minus avx), `all`. Names imply their
    /// prerequisites, removals drop what depends on them; the result is
    /// printed on stderr. Default: everything KVM supports.
    #[arg(long, value_name = "MASK", allow_hyphen_values = true)]
    xfeatures: Option<String>,
    /// Initial XSTATE_BV of the vCPU.
    #[arg(long, value_enum, default_value = "minimal")]
    init_xstate: InitArg,
    /// When the VMM moves the guest's xsave state across exits.
    #[arg(long, value_enum, default_value = "lazy")]
    xstate_sync: SyncPolicy,
    /// Workloads the guest runs, comma-separated: none, quick (aes, gemm
    /// and linpack at small sizes), aes, xts, gcm (XTS-AES-256 and
    /// AES-128-GCM with their register-borrow rows, opt-in), gemm, linpack,
    /// amx (the AMX tile product, only when named), all (aes, gemm, linpack
    /// at full sizes); `aes,quick` runs one workload at small sizes.
    #[arg(long, value_name = "LIST", default_value = "quick")]
    workload: String,
    /// Extra words for the guest's command line (printable ASCII).
    #[arg(long, value_name = "WORDS")]
    cmdline: Option<String>,
    /// vCPUs, each a host thread: 1 to 8, and no more than KVM allows;
    /// more than one adds an in-kernel irqchip and the guest starts the
    /// others with INIT-SIPI-SIPI.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = parse_whole::<u32>)]
    vcpus: u32,
    /// Also show the guest's own serial report (on stderr with --json).
    #[arg(long)]
    serial: bool,
    /// Also draw the switch strategies' cycles and the workloads'
    /// guest/native ratios as an SVG bar chart into FILE.
    #[arg(long, value_name = "FILE", value_parser = parse_destination)]
    plot: Option<PathBuf>,
    /// Where the kernel starts: `auto` = vmm's direct 64-bit entry when the
    /// image declares one (the embedded guest does), else PVH; `pvh` = the
    /// 32-bit PVH entry other VMMs use.
    #[arg(long, value_enum, default_value = "auto")]
    entry: vmm::run::EntryChoice,
    /// Guest/native repetition pairs per workload row, interleaved (guest,
    /// native, guest, native ...); the ratio is their median (1..=15).
    #[arg(long, value_name = "N", default_value_t = cli::DEFAULT_REPS,
          value_parser = clap::value_parser!(u32).range(1..=guest::protocol::MAX_ROW_REPS as i64))]
    native_reps: u32,
    /// Back guest RAM with huge pages: `thp` (bare --hugepages) advises
    /// transparent huge pages (MADV_HUGEPAGE); `hugetlbfs` maps RAM from the
    /// host's 2 MiB pool (--mem even; a short pool is an error saying how
    /// many to reserve). The report says what backed it.
    #[arg(long, value_name = "KIND", num_args = 0..=1, default_missing_value = "thp", value_enum)]
    hugepages: Option<vmm::run::RamBacking>,
    #[command(flatten)]
    session: SessionArgs,
}

/// What `run` and `restore` share: how long, where snapshots go, output.
#[derive(clap::Args)]
struct SessionArgs {
    /// Do not run the workloads natively on the host for guest/native ratios.
    #[arg(long)]
    no_native: bool,
    /// Stop the guest after this many seconds (0: no limit; at most 7 days).
    #[arg(long, value_name = "SECONDS", default_value = "600", value_parser = parse_seconds)]
    timeout: Duration,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Snapshot the guest after this many seconds and stop (needs --snapshot-file; at most 7 days).
    #[arg(long, value_name = "SECONDS", requires = "snapshot_file", value_parser = parse_seconds)]
    snapshot_after: Option<Duration>,
    /// Where to write a snapshot: after --snapshot-after, or when the guest
    /// asks for one (SNAPSHOT_PORT).
    #[arg(long, value_name = "PATH", value_parser = parse_destination)]
    snapshot_file: Option<PathBuf>,
    /// Let the snapshot (and `vmm run`'s --plot) replace a regular file
    /// already at its path (never a symlink, device, FIFO or directory; its
    /// permissions are never widened).
    #[arg(long)]
    force: bool,
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

    /// `--timeout`, `None` for 0 (no limit).
    fn timeout(&self) -> Option<Duration> {
        (!self.timeout.is_zero()).then_some(self.timeout)
    }
}

#[derive(clap::Args)]
struct RestoreArgs {
    /// The snapshot file (it is only read).
    #[arg(value_parser = parse_in_place)]
    file: PathBuf,
    /// When the VMM moves the guest's xsave state across exits (default: as
    /// when the snapshot was taken).
    #[arg(long, value_enum)]
    xstate_sync: Option<SyncPolicy>,
    /// Read and verify every stored page (its CRC32) before the guest
    /// runs; without it they are copied in, each verified, when first
    /// touched and in the background (status 69 when one fails).
    #[arg(long)]
    verify_memory: bool,
    #[command(flatten)]
    session: SessionArgs,
}

/// `vmm run`: the options parsed into a [`session::RunRequest`], the
/// summary printed.
fn run(args: RunArgs) -> Result<i32, vmm::Error> {
    if args.session.force && args.session.snapshot_file.is_none() && args.plot.is_none() {
        terminal::line(format_args!(
            "vmm: --force needs --snapshot-file or --plot: it lets them replace a file"
        ));
        return Ok(EXIT_USAGE);
    }
    if let Some(p) = &args.plot {
        cli::plot::check_target(p, args.session.force)?;
    }
    let kernel = match &args.kernel {
        Some(p) => KernelImage::from_file(p)?,
        None => KernelImage::embedded(),
    };
    let mut words = Vec::new();
    if !args.serial {
        words.push("quiet".to_string());
    }
    // Refuse a bad list before booting anything, naming the option (not as
    // an xstate policy or a generic argument error).
    let workload = Selection::parse(&args.workload)
        .map_err(|e| vmm::Error::Argument(format!("--workload {:?}: {e}", args.workload)))?;
    words.push(format!("workload={}", args.workload));
    if let Some(c) = &args.cmdline {
        words.push(c.clone());
    }
    // Words the VMM owns (`xfeatures=`), or a line the guest would cut, are
    // usage errors, refused before KVM is asked anything.
    let cmdline = words.join(" ");
    if let Err(e) = run::check_cmdline_words(&cmdline) {
        terminal::line(format_args!("vmm: --cmdline: {e}"));
        return Ok(EXIT_USAGE);
    }
    // Say how --xfeatures was understood (implied and dropped components)
    // before booting; an invalid mask stops here, before any VM exists.
    let xfeatures = Xfeatures::request(args.xfeatures.as_deref())?;
    if let Some(r) = xfeatures.resolved() {
        terminal::line(vmm::cpuid::describe_resolution(&r.spec, &r.resolution));
    }
    let config = RunConfig {
        kernel,
        mem_mib: args.mem,
        xfeatures,
        init_xstate: match args.init_xstate {
            InitArg::Minimal => InitMode::Minimal,
            InitArg::All => InitMode::AllOfXcr0,
        },
        cmdline,
        serial: args.session.serial(),
        timeout: args.session.timeout(),
        xstate_sync: args.xstate_sync,
        raw_loop: false,
        snapshot_after: args.session.snapshot_after,
        snapshot_file: args.session.snapshot_file.clone(),
        snapshot_force: args.session.force,
        entry: args.entry,
        initrd: args
            .initrd
            .as_deref()
            .map(KernelImage::initrd_from_file)
            .transpose()?,
        interleave: None,
        hugepages: args.hugepages,
        vcpus: args.vcpus,
    };
    let request = session::RunRequest {
        config,
        native: (!args.session.no_native).then_some(session::NativePlan {
            workload,
            reps: args.native_reps,
        }),
    };
    let summary = session::run(request)?;
    let json = args.session.json.then_some(Document::Run);
    let plot = args.plot.as_deref().map(|p| (p, args.session.force));
    print_summary(&summary, json, plot)
}

/// Print a run's (or a restored run's) summary; returns the exit status.
/// `json`: the JSON document to print instead of the table.
fn print_summary(
    summary: &RunSummary,
    json: Option<Document>,
    plot: Option<(&std::path::Path, bool)>,
) -> Result<i32, vmm::Error> {
    let text = match json {
        Some(doc) => vmm::schema::to_json(doc, summary)? + "\n",
        None => summary.to_table(),
    };
    stdout::print(&text)?;
    if let Some((path, force)) = plot {
        let charts = cli::plot::run_charts(summary);
        cli::plot::write_svg(path, &charts, 1200, force)?;
    }
    Ok(summary.process_exit)
}

/// `vmm restore`: snapshot errors are printed here (status 64; 69 for a page of
/// its memory that failed).
fn restore(args: RestoreArgs) -> Result<i32, vmm::Error> {
    let s = &args.session;
    if s.force && s.snapshot_file.is_none() {
        terminal::line(format_args!(
            "vmm: --force needs --snapshot-file: it lets the snapshot replace a file"
        ));
        return Ok(EXIT_USAGE);
    }
    let options = vmm::run::restore::RestoreOptions {
        serial: s.serial(),
        timeout: s.timeout(),
        xstate_sync: args.xstate_sync,
        snapshot_after: s.snapshot_after,
        snapshot_file: s.snapshot_file.clone(),
        snapshot_force: s.force,
        verify_memory: args.verify_memory,
    };
    let request = session::RestoreRequest {
        file: args.file.clone(),
        options,
        native: !s.no_native,
    };
    match session::restore(request) {
        Ok(summary) => print_summary(&summary, s.json.then_some(Document::Restore), None),
        Err(session::SessionError::Snapshot(e)) => {
            vmm::error::eprint(&e, e.hint());
            // A page of the file failed, not the VMM: its own status.
            Ok(match e {
                vmm::snapshot::SnapshotError::Memory { .. } => EXIT_SNAPSHOT_MEMORY,
                _ => EXIT_VMM_ERROR,
            })
        }
        Err(session::SessionError::Vmm(e)) => Err(e),
    }
}

/// `vmm completions SHELL`: the script on stdout.
fn completions(args: CompletionsArgs) -> Result<i32, vmm::Error> {
    let mut cmd = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "vmm", &mut script);
    stdout::print(&String::from_utf8_lossy(&script))?;
    Ok(0)
}

/// `vmm man [--dir DIR]`.
fn man(args: ManArgs) -> Result<i32, vmm::Error> {
    let cmd = Cli::command();
    match args.dir {
        Some(dir) => {
            // clap_mangen names the pages; they are rendered in a private
            // directory, then each goes to DIR as every file vmm writes.
            cli::create_dir(&dir).map_err(|source| vmm::Error::OutputDir {
                what: "manual directory",
                source,
            })?;
            let rendered = tempfile::tempdir().map_err(vmm::Error::io(format!(
                "cannot create a temporary directory in {}",
                std::env::temp_dir().display()
            )))?;
            let render_err = || {
                vmm::Error::io(format!(
                    "cannot render the manual pages in {}",
                    rendered.path().display()
                ))
            };
            clap_mangen::generate_to(cmd, rendered.path()).map_err(render_err())?;
            let mut pages: Vec<_> = std::fs::read_dir(rendered.path())
                .and_then(|d| d.map(|e| e.map(|e| e.path())).collect())
                .map_err(render_err())?;
            pages.sort();
            let files = pages
                .iter()
                .map(|p| {
                    Ok((
                        dir.join(p.file_name().unwrap_or_default()),
                        std::fs::read(p)?,
                    ))
                })
                .collect::<Result<Vec<_>, std::io::Error>>()
                .map_err(render_err())?;
            cli::write_set(&files).map_err(|(path, source)| vmm::Error::Output { path, source })?;
            terminal::line(format_args!(
                "vmm: manual pages written to {}",
                dir.display()
            ));
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut page)
                .map_err(vmm::Error::io("cannot render the manual page"))?;
            stdout::print(&String::from_utf8_lossy(&page))?;
        }
    }
    Ok(0)
}

/// `vmm schema DIR`.
fn schema(args: SchemaArgs) -> Result<i32, vmm::Error> {
    let written = vmm::catalog::write_all(&args.dir)?;
    terminal::line(format_args!(
        "vmm: {} schemas written to {}",
        written.len(),
        args.dir.display()
    ));
    Ok(0)
}

/// The command line. `vmm run` is first parsed against its own arguments
/// alone: building clap's whole command tree (every subcommand, every
/// help text) took about 0.2 ms of the 4-5 ms `vmm run --workload none`
/// lasts, and start-up is measured against a floor (`vmm bench startup`).
/// Anything that is not a clean `run` parse (help, errors, other commands)
/// goes through the full tree, so messages and help are the usual ones.
fn parse() -> Result<Cli, clap::Error> {
    use clap::{Args, FromArgMatches};
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "run") {
        let run = negative_numbers(RunArgs::augment_args(clap::Command::new("run")));
        if let Ok(args) = run
            .try_get_matches_from(&args[1..])
            .and_then(|m| RunArgs::from_arg_matches(&m))
        {
            return Ok(Cli {
                command: Command::Run(args),
            });
        }
    }
    let mut cli = negative_numbers(Cli::command());
    let mut matches = cli.try_get_matches_from_mut(args)?;
    Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut cli))
}

/// `cmd` with every option and argument that takes a value taking one
/// that looks like a negative number (`--timeout -1`, `--mem -5`), in
/// every subcommand: its value parser then refuses it with the flag's
/// range, where clap alone said `unexpected argument '-1' found`.
fn negative_numbers(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        if a.get_action().takes_values() {
            a.allow_negative_numbers(true)
        } else {
            a
        }
    })
    .mut_subcommands(negative_numbers)
}

/// The process's entry point, called by the C runtime (see the module
/// documentation for why it is not Rust's `fn main`).
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    open_standard_descriptors();
    // SAFETY: setting a signal's disposition to SIG_IGN, before any other
    // thread exists, is what Rust's own start-up does for SIGPIPE.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    // One malloc arena for every thread. glibc gives each new thread that
    // allocates an arena of its own: a 64 MiB-aligned reservation carved
    // out of a 128 MiB mapping, three more system calls and the faults on
    // its first pages. `vmm run` starts one such thread (`kvm-cpuid`, see
    // `HostKvm::open_overlapping`) on the path measured against the C
    // floor, where that was ~0.03 ms; vCPU threads allocate only between
    // exits, so sharing the main arena costs them nothing measurable.
    // SAFETY: a glibc tunable set before any other thread exists.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    let code = vmm_main();
    // Rust's start-up would flush it on return; an error is as good as lost.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    code
}

/// Open each of descriptors 0, 1 and 2 that is closed on `/dev/null`, as
/// Rust's runtime start-up does (and `vmm`'s C entry point skips).
///
/// Why: `vmm run >&-` or `2>&-` leaves the number free, and the next file
/// `vmm` opens takes it: `/dev/kvm` took descriptor 1, and the temporary
/// file of `vmm features import DUMP out.json 2>&-` took descriptor 2, so
/// a message written then would have gone into the user's file. One
/// `poll` tells the closed ones (`POLLNVAL`); a descriptor that cannot be
/// opened ends the process, as it does under Rust's start-up.
#[cfg(not(test))]
fn open_standard_descriptors() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: `fds` is an array of three valid pollfd structures; a zero
    // timeout returns at once.
    if unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } < 0 {
        return;
    }
    for p in fds.iter().filter(|p| p.revents & libc::POLLNVAL != 0) {
        // SAFETY: a constant NUL-terminated path; open returns the lowest
        // free descriptor, which is `p.fd` as the lower ones are open.
        let got = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        if got != p.fd {
            std::process::abort();
        }
    }
}

/// The command line's work; its exit status.
#[cfg_attr(test, allow(dead_code))]
fn vmm_main() -> libc::c_int {
    // Usage errors get their own status (not clap's 2, the guest's
    // CPU-exception status); --help and --version still end with 0.
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // Every error of vmm's starts `vmm: `, clap's too.
            let text = e.render().to_string();
            let mut text = match text.strip_prefix("error:") {
                Some(rest) => format!("vmm:{rest}"),
                None => text,
            };
            if e.kind() == clap::error::ErrorKind::InvalidSubcommand {
                if let Some(tip) = subcommand_tip() {
                    text = text.replacen("\n\n", &format!("\n\n  tip: {tip}\n\n"), 1);
                }
            }
            // Clap quotes the argument it refused, as typed.
            let text = terminal::escape_controls(&text);
            let _ = std::io::Write::write_all(&mut std::io::stderr(), text.as_bytes());
            return EXIT_USAGE;
        }
        // --help, --version: their text is the result (styled by clap on
        // a terminal).
        Err(e) if std::io::IsTerminal::is_terminal(&std::io::stdout()) => {
            let _ = e.print();
            return 0;
        }
        Err(e) => {
            return match stdout::print(&e.render().to_string()) {
                Ok(()) => 0,
                Err(e) => closed_or_error(vmm::Error::Stdout(e)),
            };
        }
    };
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Bench(args) => cli::bench(args),
        Command::Features(args) => cli::features(args),
        Command::Restore(args) => restore(args),
        Command::Snapshot(args) => Ok(cli::snapshot(args)),
        Command::Completions(args) => completions(args),
        Command::Man(args) => man(args),
        Command::Schema(args) => schema(args),
    };
    match result {
        Ok(code) => code.clamp(0, 255),
        Err(e) => closed_or_error(e),
    }
}

/// "did you mean `run`?" for a mistyped subcommand (`vmm rnu`): the one
/// subcommand within two edits (a swap of neighbours counting one), if any.
fn subcommand_tip() -> Option<String> {
    let typed = std::env::args().nth(1)?;
    let near: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|name| edits(&typed, name) <= 2)
        .collect();
    match near.as_slice() {
        [one] => Some(format!("did you mean '{one}'?")),
        _ => None,
    }
}

/// Edit distance with adjacent transpositions (optimal string alignment).
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// The status of a command that failed with `e`: a reader that closed
/// standard output ends it quietly, as SIGPIPE would; anything else is
/// said on stderr.
fn closed_or_error(e: vmm::Error) -> libc::c_int {
    if matches!(e, vmm::Error::Stdout(StdoutError::Closed)) {
        return EXIT_CLOSED_PIPE;
    }
    vmm::error::eprint(&e, e.hint());
    if e.is_usage() {
        EXIT_USAGE
    } else {
        EXIT_VMM_ERROR
    }
}

#[cfg(test)]
#[path = "main_tests.rs"]
mod tests;
