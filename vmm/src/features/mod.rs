//! `vmm features`: which extended state a guest sees, where it comes from,
//! and whether saved state fits another host.
//!
//! - `vmm features [--xfeatures MASK] [--no-boot] [--json]`: one row per
//!   state component known to the xstate crate (0..=19) with its size,
//!   standard offset and compacted offsets, and one column each for the host
//!   CPU (CPUID leaf 0xD, with XGETBV(0) for what the host OS enabled), KVM
//!   (`KVM_GET_SUPPORTED_CPUID` leaf 0xD), the policy (`--xfeatures`, parsed
//!   and validated exactly as `vmm run` does) and the guest (the embedded
//!   guest kernel booted with no workload: what its CPUID said, what it
//!   enabled in XCR0, what XINUSE held at the end). Every disagreement
//!   between the columns, and between the guest's CPUID and the xstate
//!   crate's layouts, is spelled out.
//! - `--profile FILE`: the same for a recorded CPUID profile
//!   (`xstate/tests/data/*.json` format, see [`profile`]) instead of this
//!   host; no KVM and no boot needed.
//! - `vmm features save FILE`: record this host's profile (leaf 0xD, leaves
//!   1 and 7, XGETBV(0), KVM's supported leaves) for collection from a fleet.
//! - `vmm features compare A.json B.json ...`: per component which hosts
//!   have it and whether sizes and offsets agree, the largest valid XCR0
//!   every host supports (a ready `--xfeatures` value), and with
//!   `--xstate-bv` on which hosts that state can be restored
//!   ([`xstate::restorable_on`]).
//!
//! Exit status: 0 when the report was produced (disagreements and
//! unrestorable hosts are findings, not failures); 64
//! ([`EXIT_VMM_ERROR`]) for errors: bad options, unreadable or malformed
//! profiles, KVM failures, or a guest boot that produced no report.
//! `compare --check` exits 1 when the `--xstate-bv` state cannot be restored
//! on every host, for scripts.
//!
//! # JSON of `vmm features --json`
//!
//! Stable; fields are only ever added. Masks are hex strings (`"0x207"`),
//! sizes and offsets numbers in bytes.
//!
//! | field | meaning |
//! |-------|---------|
//! | `source` | `this host` or the profile file |
//! | `cpu_name` | the CPU's brand string (and microarchitecture, from profiles) |
//! | `layout_from` | `kvm` or `cpu`: whose leaf 0xD the sizes and offsets come from |
//! | `xcr0`, `xcr0_names` | the policy's XCR0, as hex and as component names |
//! | `xss` | the supervisor state offered with it (KVM's, or the CPU's for profiles) |
//! | `standard_size` | standard-format size of `xcr0` |
//! | `compacted_size` | compacted size of `xcr0` (XSAVEC) |
//! | `compacted_size_xss` | compacted size of `xcr0 \| xss` (XSAVES) |
//! | `components` | 20 rows, see below |
//! | `columns.cpu` | the CPU's `xcr0`, `xcr0_names`, `xss`, sizes (as above, for its whole mask), `max_standard_size` (0xD.0 ECX), `os_xcr0` (XGETBV(0), null if unknown) |
//! | `columns.kvm` | the same for KVM's supported leaf 0xD; null without KVM |
//! | `columns.policy` | the same for the policy, plus `hidden_cpuid_flags` (flags the policy hides, host only) |
//! | `columns.guest` | null unless booted: `xcr0_supported`, `xss_supported` (its CPUID), `xcr0` (set), `xinuse` (null without XGETBV1), `standard_size_max` (0xD.0 ECX), `standard_size_enabled` (0xD.0 EBX), `compacted_size` (0xD.1 EBX), `computed_standard_size`, `computed_compacted_size` (by the guest's xstate crate), `xsave_variants` |
//! | `notes` | why a column is missing, or what was odd about the guest run |
//! | `disagreements` | every disagreement, one sentence each |
//!
//! Each of `components`:
//!
//! | field | meaning |
//! |-------|---------|
//! | `id`, `name`, `description` | bit number, short name (as `--xfeatures` takes), Linux's boot-log name |
//! | `supervisor` | IA32_XSS state rather than XCR0 state |
//! | `size`, `standard_offset` | from CPUID 0xD.i; null when unsupported (`standard_offset` also for supervisor state) |
//! | `compacted_offset` | offset in the compacted layout of `xcr0`; null when not in it |
//! | `compacted_offset_xss` | offset in the compacted layout of `xcr0 \| xss` |
//! | `align64`, `xfd` | CPUID 0xD.i ECX bits 1 and 2; null when unsupported |
//! | `cpu`, `os`, `kvm`, `policy` | booleans per column (`os` null when XGETBV(0) is unknown and for supervisor state, `kvm` null without KVM) |
//! | `guest_cpuid`, `guest_xcr0`, `guest_xinuse` | advertised to, enabled by, in use by the guest (null without a guest) |
//!
//! # JSON of `vmm features compare --json`
//!
//! | field | meaning |
//! |-------|---------|
//! | `hosts` | per profile: `label` (A, B, ...), `file`, `name`, `xcr0_source` (`kvm` when the profile recorded KVM's leaf 0xD, else `cpu`), `xcr0`, `xss`, `standard_size`, `baseline_standard_size`, `baseline_compacted_size` |
//! | `common_xcr0` | intersection of the hosts' XCR0 masks |
//! | `baseline_xcr0` | the largest valid XCR0 every host supports |
//! | `baseline_xfeatures` | the same as a `--xfeatures` value |
//! | `baseline_dropped` | common components dropped to keep the baseline a valid XCR0 |
//! | `baseline_xss` | supervisor state every host supports |
//! | `components` | per component: `id`, `name`, `supervisor`, per host (in `hosts` order) `present`, `sizes`, `standard_offsets`, `align64`; `sizes_agree`, `offsets_agree`, `align_agree`, `in_baseline` |
//! | `differences` | every difference, one sentence each |
//! | `flag_differences` | gating CPUID flags (AVX2, AVX-512*, AMX*, ...) that differ: `flag`, `present_on`, `missing_on` |
//! | `restore` | null without `--xstate-bv`; else `xstate_bv`, `xcr0` and per host `label`, `file`, `restorable`, `reason` |
//!
//! Saved profiles: see [`profile`].

pub mod compare;
pub mod profile;
pub mod table;

use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use xstate::XfeatureMask;

use crate::devices::SerialSink;
use crate::report::EXIT_VMM_ERROR;
use crate::vm::{self, KernelImage, RunConfig};
use profile::HostProfile;
use table::{GuestSeen, GuestState, Inputs};

/// `vmm features`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct FeaturesArgs {
    #[command(subcommand)]
    pub command: Option<FeaturesCommand>,
    #[command(flatten)]
    pub show: ShowArgs,
}

/// The table of `vmm features` without a subcommand.
#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    /// Show a recorded CPUID profile (xstate/tests/data/*.json format)
    /// instead of this host: no KVM and no boot.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// The policy, as for `vmm run`: `0x7`, `x87,sse`, `host,-avx`, `all`.
    /// Default: everything KVM (or the profile) supports.
    #[arg(long, value_name = "MASK")]
    pub xfeatures: Option<String>,
    /// Do not boot the guest (no guest column).
    #[arg(long)]
    pub no_boot: bool,
    /// Stop the guest after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub timeout: f64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum FeaturesCommand {
    /// Record this host's CPUID profile (leaf 0xD, leaves 1/7, KVM's set).
    Save(SaveArgs),
    /// Compare host profiles: common components, layouts, safe baseline.
    Compare(CompareArgs),
}

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

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// Profiles to compare (`vmm features save` output or
    /// xstate/tests/data/*.json).
    #[arg(value_name = "PROFILE", required = true, num_args = 1..)]
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
}

/// Failures of `vmm features`.
#[derive(Debug, thiserror::Error)]
pub enum FeaturesError {
    /// A profile file is unreadable or malformed.
    #[error("profile {}: {reason}", path.display())]
    Profile { path: PathBuf, reason: String },
    /// A command-line value is invalid.
    #[error("{0}")]
    Usage(String),
    /// The running host's CPUID cannot be used.
    #[error("this host's CPUID: {0}")]
    Host(String),
    /// Writing a file failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Vmm(#[from] crate::Error),
}

/// `vmm features`: prints errors other than VMM errors itself (as `vmm: ...`)
/// and returns the exit status.
pub fn main(args: FeaturesArgs) -> crate::Result<i32> {
    match run(args) {
        Ok(code) => Ok(code),
        Err(FeaturesError::Vmm(e)) => Err(e),
        Err(e) => {
            eprintln!("vmm: {e}");
            Ok(EXIT_VMM_ERROR)
        }
    }
}

/// `vmm features` with typed errors.
pub fn run(args: FeaturesArgs) -> Result<i32, FeaturesError> {
    match args.command {
        None => show(&args.show),
        Some(FeaturesCommand::Save(a)) => save(&a),
        Some(FeaturesCommand::Compare(a)) => compare_cmd(&a),
    }
}

fn print_json(v: &impl serde::Serialize) -> Result<(), FeaturesError> {
    let s =
        serde_json::to_string_pretty(v).map_err(|e| FeaturesError::Host(format!("JSON: {e}")))?;
    println!("{s}");
    Ok(())
}

/// Parse a policy and validate it as `vmm run` does, against `host`.
fn policy_for(
    spec: Option<&str>,
    host: XfeatureMask,
    what: &str,
) -> Result<XfeatureMask, FeaturesError> {
    let mask = match spec {
        None => host,
        Some(s) => XfeatureMask::parse(s, host).map_err(|e| {
            FeaturesError::Usage(format!("invalid xstate policy: --xfeatures {s:?}: {e}"))
        })?,
    };
    mask.validate_xcr0(host).map_err(|e| {
        FeaturesError::Usage(format!(
            "invalid xstate policy: --xfeatures {}: {e} ({what} supports {host:#x} = {host})",
            spec.unwrap_or("host")
        ))
    })?;
    Ok(mask)
}

/// Collects the inputs of the view for a profile or this host.
pub fn gather(args: &ShowArgs) -> Result<Inputs, FeaturesError> {
    if let Some(path) = &args.profile {
        let p = HostProfile::load(path)?;
        let (host, what) = match &p.kvm {
            Some(k) => (k.supported_xcr0(), "the profile's KVM"),
            None => (p.cpu.supported_xcr0(), "the profile's CPU"),
        };
        let policy = policy_for(args.xfeatures.as_deref(), host, what)?;
        return Ok(Inputs {
            source: p.file.clone(),
            cpu_name: p.name.clone(),
            cpu: p.cpu,
            os_xcr0: p.os_xcr0,
            kvm: p.kvm,
            kvm_missing: p
                .kvm
                .is_none()
                .then(|| "the profile does not record KVM's supported CPUID".to_string()),
            policy_xcr0: policy,
            hidden_flags: Vec::new(),
            guest: GuestState::NotBooted("showing a profile".into()),
        });
    }

    let cpu = xstate::XsaveInfo::host().map_err(|e| FeaturesError::Host(e.to_string()))?;
    let cpu_name = xstate::profile::CpuidProfile::host()
        .map(|p| p.name)
        .unwrap_or_else(|_| "unknown CPU".into());
    let os_xcr0 = profile::host_xcr0();
    let mut inputs = Inputs {
        source: "this host".into(),
        cpu_name,
        cpu,
        os_xcr0,
        kvm: None,
        kvm_missing: None,
        policy_xcr0: XfeatureMask::LEGACY,
        hidden_flags: Vec::new(),
        guest: GuestState::NotBooted("--no-boot".into()),
    };
    let kvm = match crate::kvm::HostKvm::open() {
        Ok(k) => k,
        Err(e) => {
            // Without KVM the layouts of the CPU are still worth showing;
            // the policy is checked against what the host OS enabled.
            let host = os_xcr0.unwrap_or(XfeatureMask::LEGACY) & cpu.supported_xcr0();
            inputs.policy_xcr0 =
                policy_for(args.xfeatures.as_deref(), host, "the host OS (no KVM)")?;
            inputs.kvm_missing = Some(e.to_string());
            inputs.guest = GuestState::NotBooted("KVM is unavailable".into());
            return Ok(inputs);
        }
    };
    let (policy, _) = vm::resolve_policy(
        &kvm,
        args.xfeatures.as_deref(),
        xstate::InitMode::Minimal,
        0,
    )?;
    inputs.kvm = Some(kvm.xstate.info);
    inputs.policy_xcr0 = policy.xcr0;
    inputs.hidden_flags = policy.hidden_flags.iter().map(|s| s.to_string()).collect();
    drop(kvm);
    if !args.no_boot {
        inputs.guest = boot_guest(args)?;
    }
    Ok(inputs)
}

/// Boots the embedded guest with no workload and reads what it saw.
fn boot_guest(args: &ShowArgs) -> Result<GuestState, FeaturesError> {
    let timeout = (args.timeout > 0.0).then(|| Duration::from_secs_f64(args.timeout));
    let outcome = vm::run(RunConfig {
        kernel: KernelImage::embedded(),
        mem_mib: 64,
        xfeatures: args.xfeatures.clone(),
        init_xstate: xstate::InitMode::Minimal,
        cmdline: "quiet workload=none".into(),
        serial: SerialSink::Null,
        timeout,
        ..RunConfig::default()
    })?;
    let end = outcome.end.failure();
    Ok(match outcome.report.as_deref() {
        Some(r) => GuestState::Booted {
            seen: GuestSeen {
                kvm_cpuid_honored: outcome.policy.cpuid_check.as_ref().map(|c| c.honored),
                ..GuestSeen::from_report(r)
            },
            note: end.map(|e| format!("guest run: {e}")),
        },
        None => {
            let mut why = end.unwrap_or_else(|| "the guest exited with status 0".into());
            why.push_str(" without a report");
            if !outcome.report_errors.is_empty() {
                why.push_str(&format!(" (refused: {})", outcome.report_errors.join("; ")));
            }
            GuestState::Failed(why)
        }
    })
}

fn show(args: &ShowArgs) -> Result<i32, FeaturesError> {
    let inputs = gather(args)?;
    let view = table::build(&inputs);
    if args.json {
        print_json(&view)?;
    } else {
        print!("{}", view.to_table());
    }
    if view.failed {
        if let GuestState::Failed(why) = &inputs.guest {
            eprintln!("vmm: features: guest boot failed: {why}");
        }
        return Ok(EXIT_VMM_ERROR);
    }
    Ok(0)
}

fn save(args: &SaveArgs) -> Result<i32, FeaturesError> {
    let (p, kvm_error) = profile::record_host(args.microarchitecture.as_deref())?;
    if let Some(e) = &kvm_error {
        eprintln!("vmm: warning: the profile does not record KVM's supported CPUID: {e}");
    }
    let json = p.to_json();
    if args.file.as_os_str() == "-" {
        print!("{json}");
        return Ok(0);
    }
    let write = |source| FeaturesError::Write {
        path: args.file.clone(),
        source,
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    if args.force {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    let mut f = opts.open(&args.file).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            FeaturesError::Usage(format!(
                "{} exists (use --force to overwrite)",
                args.file.display()
            ))
        } else {
            write(e)
        }
    })?;
    std::io::Write::write_all(&mut f, json.as_bytes()).map_err(write)?;
    eprintln!(
        "vmm: saved {}: XCR0 {:#x}{}",
        args.file.display(),
        p.cpu.supported_xcr0(),
        match &p.kvm {
            Some(k) => format!(", KVM {:#x}", k.supported_xcr0()),
            None => String::new(),
        }
    );
    Ok(0)
}

fn parse_mask(opt: &str, s: &str) -> Result<XfeatureMask, FeaturesError> {
    XfeatureMask::parse(s, XfeatureMask::ALL_KNOWN)
        .map_err(|e| FeaturesError::Usage(format!("{opt} {s:?}: {e}")))
}

fn compare_cmd(args: &CompareArgs) -> Result<i32, FeaturesError> {
    let hosts = args
        .profiles
        .iter()
        .map(|p| HostProfile::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    let restore = match &args.xstate_bv {
        None => None,
        Some(s) => {
            let bv = parse_mask("--xstate-bv", s)?;
            let xcr0 = match &args.xcr0 {
                Some(x) => parse_mask("--xcr0", x)?,
                None => bv.user().with_dependencies(),
            };
            Some((xcr0, bv))
        }
    };
    let c = compare::compare(&hosts, restore);
    if args.json {
        print_json(&c)?;
    } else {
        print!("{}", c.to_table());
    }
    let all_ok = c
        .restore
        .as_ref()
        .is_none_or(|r| r.hosts.iter().all(|h| h.restorable));
    Ok(if args.check && !all_ok { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_masks() {
        let d = |m: u64| XfeatureMask::from_bits(m).describe().to_string();
        assert_eq!(d(0xe0), "avx512 (components 5-7)");
        assert_eq!(d(0x60000), "amx (components 17-18)");
        assert_eq!(d(0x204), "avx, pkru (components 2, 9)");
        assert_eq!(d(0x1800), "cet (components 11-12)");
        assert_eq!(d(0x60), "opmask, zmm_hi256 (components 5-6)");
        assert_eq!(d(1 << 30), "bit30 (component 30)");
        assert_eq!(d(0), "nothing");
    }

    #[test]
    fn policy_validation_matches_run() {
        let host = XfeatureMask::from_bits(0x7);
        assert_eq!(
            policy_for(Some("x87,sse"), host, "KVM").unwrap().bits(),
            0x3
        );
        assert_eq!(policy_for(None, host, "KVM").unwrap().bits(), 0x7);
        let e = policy_for(Some("x87,sse,avx,avx512"), host, "KVM")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not supported") && e.contains("KVM supports 0x7"),
            "{e}"
        );
        let e = policy_for(Some("sse"), host, "KVM")
            .unwrap_err()
            .to_string();
        assert!(e.contains("x87"), "{e}");
        let e = policy_for(Some("bogus"), host, "KVM")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown xfeature `bogus`"), "{e}");
    }
}
