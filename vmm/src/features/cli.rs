//! `vmm features`' command line (clap) and its dispatch: the binary's, not
//! the library's API (reached through the doc-hidden
//! `crate::internal::cli`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;

use super::profile::HostProfile;
use super::{
    compare_cmd, export, import_cmd, inputs, lint_cmd, save, show, FeaturesError, Inputs, Request,
};
use crate::report::{EXIT_USAGE, EXIT_VMM_ERROR};

/// `vmm features`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct FeaturesArgs {
    /// `save` or `compare`; none shows the table.
    #[command(subcommand)]
    pub command: Option<FeaturesCommand>,
    /// Options of the table.
    #[command(flatten)]
    pub show: ShowArgs,
}

/// The table of `vmm features` without a subcommand.
#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    /// Show a recorded CPU instead of this host (no KVM, no boot): the name
    /// of a bundled profile (see --list-profiles) or a profile file
    /// (`vmm features save` output; `-`: standard input). A bundled name
    /// wins over a file of the same name; write ./NAME for the file.
    #[arg(long, value_name = "NAME|FILE")]
    pub profile: Option<PathBuf>,
    /// List the CPU profiles bundled with vmm (name, CPU, XCR0, source).
    #[arg(long, conflicts_with_all = ["profile", "xfeatures", "no_boot"])]
    pub list_profiles: bool,
    /// The policy, as for `vmm run`: `0x7`, `x87,sse`, `avx512`,
    /// `host,-avx`, `-avx`, `all`. Default: everything KVM (or the profile)
    /// supports.
    #[arg(long, value_name = "MASK", allow_hyphen_values = true)]
    pub xfeatures: Option<String>,
    /// Do not boot the guest (no guest column).
    #[arg(long)]
    pub no_boot: bool,
    /// Take the guest column from the VMMREC1 record in a serial log of
    /// our guest under any VMM (no boot; `-` is standard input, and a pipe
    /// is read to its end). Alone, the CPU column is the CPUID the guest
    /// saw; with --profile, the profile's.
    #[arg(long, value_name = "FILE")]
    pub guest_log: Option<PathBuf>,
    /// Stop the guest after this many seconds (0: no limit; at most 7 days).
    #[arg(long, value_name = "SECONDS", default_value = "60",
          value_parser = crate::input::parse_seconds)]
    pub timeout: Duration,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The subcommands of `vmm features`.
#[derive(Subcommand, Debug)]
pub enum FeaturesCommand {
    /// Record this host's CPUID profile (leaf 0xD, leaves 1/7, KVM's set).
    Save(SaveArgs),
    /// Compare host profiles: common components, layouts, safe baseline.
    Compare(CompareArgs),
    /// Check that leaves 1, 7, 0xD, 0x14, 0x19, 0x1D/0x1E and XCR0 agree, in
    /// KVM's table, the VMM's guest table, this CPU, the guest's view or a
    /// profile; exits 1 on a violation.
    Lint(LintArgs),
    /// Convert a CPUID dump (`cpuid -r`, InstLatx64, Firecracker template
    /// dump, or a profile) into a vmm profile file.
    Import(ImportArgs),
}

/// `vmm features import`.
#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// The dump to read (format detected from its content; `-`: standard
    /// input), or a bundled profile's name (a bundled name wins over a file
    /// of the same name).
    #[arg(value_name = "DUMP|NAME")]
    pub input: PathBuf,
    /// Where to write the profile (`-` for stdout).
    #[arg(value_name = "FILE")]
    pub output: PathBuf,
    /// The microarchitecture to record (CPUID does not name it).
    #[arg(long, value_name = "NAME")]
    pub microarchitecture: Option<String>,
    /// Where the dump comes from, recorded as the profile's `source`
    /// (default: the format and the file name).
    #[arg(long, value_name = "TEXT")]
    pub source: Option<String>,
    /// Overwrite an existing file.
    #[arg(long)]
    pub force: bool,
}

/// `vmm features lint`.
#[derive(clap::Args, Debug)]
pub struct LintArgs {
    /// Lint a recorded CPUID profile (its CPU's leaves and, where recorded,
    /// its KVM's) instead of this host: no KVM and no boot.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Do not boot the guest (no "what the guest saw" source).
    #[arg(long)]
    pub no_boot: bool,
    /// Stop the guest after this many seconds (0: no limit; at most 7 days).
    #[arg(long, value_name = "SECONDS", default_value = "60",
          value_parser = crate::input::parse_seconds)]
    pub timeout: Duration,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `vmm features save`.
#[derive(clap::Args, Debug)]
pub struct SaveArgs {
    /// Where to write the profile (`-` for stdout).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The microarchitecture to record (CPUID does not name it).
    #[arg(long, value_name = "NAME")]
    pub microarchitecture: Option<String>,
    /// Overwrite an existing file.
    #[arg(long)]
    pub force: bool,
}

/// `vmm features compare`.
#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// Profiles to compare: bundled profile names (see
    /// `vmm features --list-profiles`), profile files (`vmm features save`
    /// output), and serial logs of our guest under any VMM (their VMMREC1
    /// record), files told apart by content (`-`: standard input); a bundled
    /// name wins over a file of the same name.
    #[arg(value_name = "NAME|FILE|LOG", required = true, num_args = 1..)]
    pub profiles: Vec<PathBuf>,
    /// Check on which hosts state with this XSTATE_BV can be restored.
    #[arg(long, value_name = "MASK")]
    pub xstate_bv: Option<String>,
    /// The saved XCR0 that goes with --xstate-bv (default: the smallest
    /// valid XCR0 holding that state).
    #[arg(long, value_name = "MASK", requires = "xstate_bv")]
    pub xcr0: Option<String>,
    /// Exit 1 unless the --xstate-bv state is restorable on every host.
    #[arg(long, requires = "xstate_bv")]
    pub check: bool,
    /// Print one JSON object instead of the report.
    #[arg(long)]
    pub json: bool,
    /// Print only the safe baseline, as another VMM takes it: a Firecracker
    /// custom CPU template (JSON), a QEMU `-cpu` value, or our --xfeatures.
    #[arg(long, value_name = "FORMAT", conflicts_with_all = ["json", "xstate_bv"])]
    pub export: Option<export::ExportFormat>,
    /// With `--export qemu`: the QEMU binary to ask (`-cpu help`) which
    /// flag names it knows; names it does not know are left out, with a
    /// warning.
    #[arg(long, value_name = "PATH", requires = "export")]
    pub qemu: Option<PathBuf>,
}

/// `vmm features`: prints errors other than VMM errors itself (as `vmm: ...`)
/// and returns the exit status.
pub fn main(args: FeaturesArgs) -> crate::Result<i32> {
    match run(args) {
        Ok(code) => Ok(code),
        Err(FeaturesError::Vmm(e)) => Err(e),
        Err(e) => {
            crate::error::eprint(&e, e.hint());
            Ok(if e.is_usage() {
                EXIT_USAGE
            } else {
                EXIT_VMM_ERROR
            })
        }
    }
}

/// `vmm features` with typed errors.
pub fn run(args: FeaturesArgs) -> Result<i32, FeaturesError> {
    match args.command {
        None => show(&args.show),
        Some(FeaturesCommand::Save(a)) => save(&a),
        Some(FeaturesCommand::Compare(a)) => compare_cmd(&a),
        Some(FeaturesCommand::Lint(a)) => lint_cmd(&a),
        Some(FeaturesCommand::Import(a)) => import_cmd(&a),
    }
}

impl ShowArgs {
    /// What to gather for these options, with `--profile`'s profile as
    /// loaded (once) by the caller.
    pub fn request<'a>(&'a self, profile: Option<&'a HostProfile>) -> Request<'a> {
        Request {
            profile,
            xfeatures: self.xfeatures.as_deref(),
            boot: !self.no_boot,
            timeout: (!self.timeout.is_zero()).then_some(self.timeout),
        }
    }
}

/// Collects the inputs of the view for `profile` (`--profile`'s, loaded)
/// or this host.
pub(crate) fn gather(
    args: &ShowArgs,
    profile: Option<&HostProfile>,
) -> Result<Inputs, FeaturesError> {
    inputs::gather(&args.request(profile))
}
