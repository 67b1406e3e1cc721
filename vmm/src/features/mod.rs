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
//! - `--profile NAME|FILE`: the same for a recorded CPUID profile instead
//!   of this host, no KVM and no boot needed: a profile bundled with the
//!   binary by name (`bundled`, `--list-profiles`) or a file in the
//!   profile format ([`profile`]).
//! - `vmm features save FILE`: record this host's profile (leaf 0xD, leaves
//!   1 and 7, XGETBV(0), KVM's supported leaves) for collection from a fleet.
//! - `vmm features compare A.json B.json ...`: per component which hosts
//!   have it and whether sizes and offsets agree, the largest valid XCR0
//!   every host supports (a ready `--xfeatures` value), and with
//!   `--xstate-bv` on which hosts that state can be restored
//!   ([`xstate::restorable_on`]).
//!
//! Exit status: 0 when the report was produced (disagreements and
//! unrestorable hosts are findings, not failures); 68 (`EXIT_USAGE`)
//! for a bad option value (a malformed or architecturally invalid mask),
//! whatever the host; 64 ([`EXIT_VMM_ERROR`]) for the other errors:
//! unreadable or malformed profiles, an existing file without `--force`,
//! KVM failures, or a guest boot that produced no report.
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
//! | `schema_version` | 1 ([`crate::schema`]; `docs/schema/features.schema.json`) |
//! | `source` | `this host`, the profile file, or the bundled profile's name |
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
//! | `id`, `name`, `description` | bit number, short name (as `--xfeatures` takes), what it holds (after the Intel SDM, `Xfeature::long_name`) |
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
//! | `schema_version` | 1 ([`crate::schema`]; `docs/schema/features-compare.schema.json`) |
//! | `hosts` | per profile: `label` (A, B, ...), `file` (or bundled name), `name`, `xcr0_source` (`kvm` when the profile recorded KVM's leaf 0xD, else `cpu`), `xcr0`, `xss`, `standard_size`, `baseline_standard_size`, `baseline_compacted_size` |
//! | `common_xcr0` | intersection of the hosts' XCR0 masks |
//! | `baseline_xcr0` | the largest valid XCR0 every host supports |
//! | `baseline_xfeatures` | the same as a `--xfeatures` value |
//! | `baseline_dropped` | common components dropped to keep the baseline a valid XCR0 |
//! | `baseline_xss` | supervisor state every host supports |
//! | `components` | per component: `id`, `name`, `supervisor`, per host (in `hosts` order) `present`, `sizes`, `standard_offsets`, `align64`; `sizes_agree`, `offsets_agree`, `align_agree`, `in_baseline` |
//! | `differences` | every difference, one sentence each |
//! | `flag_differences` | gating CPUID flags (AVX2, AVX-512*, AMX*, ...) that differ: `flag`, `present_on`, `missing_on` |
//! | `restore` | null without `--xstate-bv`; else `xstate_bv`, `xcr0` and per host `label`, `file`, `restorable`, `reason` |
//! | `flags` | every gating CPUID flag: `flag`, per source `present` (null where leaves 1/7 were not recorded); empty when no source recorded them |
//! | `guests` | per guest-log source: `label`, `file`, `xcr0` (set), `xinuse`, `tsc_khz`, `switch_strategy`, `switch_cycles` (`[strategy, cycles or null]`), `timings` (`name`, `variant`, `cycles_per_event`, `ns_per_event` of its event rows: exit costs, context switches), `records_found` |
//!
//! Guest logs: `compare` also takes serial logs of our guest under any VMM
//! (QEMU, Cloud Hypervisor, Firecracker, `vmm run --serial`); the guest's
//! `VMMREC1` record line (`guest_log`) stands in as a host whose CPUID is
//! what that VMM exposed (`xcr0_source` `guest`). `vmm features --guest-log
//! LOG` shows one such record as the guest column.
//!
//! Saved profiles: see [`profile`].

//!
//! Modules: `inputs` gathers the columns, `diff` finds the
//! disagreements, `view` assembles the serialisable view and `render`
//! prints it; `compare` compares host profiles; [`profile`] is the profile
//! format; `error` the command's errors. `cli` holds the command line and
//! dispatches to the commands here.

pub(crate) mod bundled;
pub(crate) mod cli;
pub(crate) mod compare;
pub(crate) mod diff;
pub(crate) mod error;
pub(crate) mod export;
pub(crate) mod guest_log;
pub(crate) mod import;
pub(crate) mod inputs;
pub(crate) mod lint;
pub mod profile;
pub(crate) mod render;
pub(crate) mod view;

use xstate::XfeatureMask;

use crate::report::EXIT_VMM_ERROR;
use crate::schema::Document;
use cli::{gather, CompareArgs, ImportArgs, LintArgs, SaveArgs, ShowArgs};
pub use error::FeaturesError;
pub use inputs::{GuestSeen, GuestState, Inputs, Request};
use profile::HostProfile;
pub use view::{FeaturesDocument, FeaturesView};

/// Hints live with the command (not in `error`) because they name the
/// bundled profiles, which load through the error type.
impl FeaturesError {
    /// A suggestion for the user where one helps.
    pub fn hint(&self) -> Option<String> {
        match self {
            FeaturesError::UnknownProfile(_) | FeaturesError::Profile { .. } => Some(format!(
                "bundled profiles: {} (`vmm features --list-profiles`); \
                 a file must be a CPU profile as `vmm features save FILE` writes it, \
                 `cpuid -r` output, an InstLatx64 CPUID dump or a Firecracker \
                 `cpu-template-helper template dump`",
                bundled::names()
            )),
            FeaturesError::Usage(m) if m.contains("--xfeatures") => {
                Some(crate::error::xfeatures_hint())
            }
            FeaturesError::Vmm(e) => e.hint(),
            _ => None,
        }
    }

    /// Whether the command line alone is at fault, whatever the host (the
    /// rule of [`crate::Error::is_usage`]).
    pub fn is_usage(&self) -> bool {
        match self {
            FeaturesError::Usage(_) => true,
            FeaturesError::Vmm(e) => e.is_usage(),
            _ => false,
        }
    }
}

/// A command's result on standard output (a closed pipe or a full device is
/// a [`crate::Error::Stdout`], never a panic).
fn out(text: &str) -> Result<(), FeaturesError> {
    crate::output::stdout::print(text).map_err(|e| FeaturesError::Vmm(e.into()))
}

fn print_json(doc: Document, v: &impl serde::Serialize) -> Result<(), FeaturesError> {
    let s =
        crate::schema::to_json(doc, v).map_err(|e| FeaturesError::Host(format!("JSON: {e}")))?;
    out(&format!("{s}\n"))
}

fn show(args: &ShowArgs) -> Result<i32, FeaturesError> {
    if args.list_profiles {
        let list = bundled::list()?;
        if args.json {
            print_json(Document::ProfileList, &list)?;
        } else {
            out(&list.to_table())?;
        }
        return Ok(0);
    }
    // Read once: the file may be a pipe, and two reads of one path need
    // not agree.
    let profile = args.profile.as_deref().map(bundled::load).transpose()?;
    let inputs = match &args.guest_log {
        Some(log) => guest_log::inputs(log, profile.as_ref(), args.xfeatures.as_deref())?,
        None => gather(args, profile.as_ref())?,
    };
    let view = view::build(&inputs);
    let consistency = consistency(args, profile.as_ref(), &inputs)?;
    if args.json {
        print_json(
            Document::Features,
            &FeaturesDocument {
                view: &view,
                consistency: consistency.summary_json(),
            },
        )?;
    } else {
        out(&view.to_table())?;
        out(&format!("\n{}", consistency.to_summary_table()))?;
    }
    if view.failed {
        if let GuestState::Failed(why) = &inputs.guest {
            crate::output::terminal::line(format_args!("vmm: features: guest boot failed: {why}"));
        }
        return Ok(EXIT_VMM_ERROR);
    }
    Ok(0)
}

/// The lint of the sources `vmm features` shows.
fn consistency(
    args: &ShowArgs,
    profile: Option<&HostProfile>,
    inputs: &Inputs,
) -> Result<lint::LintView, FeaturesError> {
    Ok(match profile {
        Some(p) => lint::lint_profile(p),
        None => {
            let seen = match &inputs.guest {
                GuestState::Booted { seen, .. } => Some(seen),
                _ => None,
            };
            lint::lint_host(args.xfeatures.as_deref(), seen)
        }
    })
}

fn lint_cmd(args: &LintArgs) -> Result<i32, FeaturesError> {
    let view = match &args.profile {
        Some(p) => lint::lint_profile(&bundled::load(p)?),
        None => {
            let inputs = inputs::gather(&Request {
                profile: None,
                xfeatures: None,
                boot: !args.no_boot,
                timeout: (!args.timeout.is_zero()).then_some(args.timeout),
            })?;
            if let GuestState::Failed(why) = &inputs.guest {
                crate::output::terminal::line(format_args!(
                    "vmm: features lint: guest boot failed: {why}"
                ));
                return Ok(EXIT_VMM_ERROR);
            }
            let seen = match &inputs.guest {
                GuestState::Booted { seen, .. } => Some(seen),
                _ => None,
            };
            lint::lint_host(None, seen)
        }
    };
    if args.json {
        print_json(Document::FeaturesLint, &view)?;
    } else {
        out(&view.to_table())?;
    }
    Ok(view.exit_code())
}

fn import_cmd(args: &ImportArgs) -> Result<i32, FeaturesError> {
    if args.output.as_os_str() != "-" {
        profile::check_new(&args.output, args.force)?;
    }
    let mut p = bundled::load(&args.input)?;
    if let Some(m) = &args.microarchitecture {
        p.profile.microarchitecture = m.clone();
    }
    if let Some(s) = &args.source {
        p.profile.source = s.clone();
    }
    // Check the edited profile exactly as a reader will.
    let p = import::from_parts(&args.input, &p.profile, &p.extras)?;
    let json = p.to_json();
    if args.output.as_os_str() == "-" {
        out(&json)?;
        return Ok(0);
    }
    profile::write_new(&args.output, &json, args.force)?;
    crate::output::terminal::line(format_args!(
        "vmm: imported {} as {}: XCR0 {:#x}",
        args.input.display(),
        args.output.display(),
        p.cpu.supported_xcr0()
    ));
    Ok(0)
}

fn save(args: &SaveArgs) -> Result<i32, FeaturesError> {
    // A destination that cannot take the file is refused before the work.
    if args.file.as_os_str() != "-" {
        profile::check_new(&args.file, args.force)?;
    }
    let (p, kvm_error) = profile::record_host(args.microarchitecture.as_deref())?;
    if let Some(e) = &kvm_error {
        crate::output::terminal::line(format_args!(
            "vmm: warning: the profile does not record KVM's supported CPUID: {e}"
        ));
    }
    let json = p.to_json();
    if args.file.as_os_str() == "-" {
        out(&json)?;
        return Ok(0);
    }
    profile::write_new(&args.file, &json, args.force)?;
    crate::output::terminal::line(format_args!(
        "vmm: saved {}: XCR0 {:#x}{}",
        args.file.display(),
        p.cpu.supported_xcr0(),
        match &p.kvm {
            Some(k) => format!(", KVM {:#x}", k.supported_xcr0()),
            None => String::new(),
        }
    ));
    Ok(0)
}

/// A mask of `compare` (`--xstate-bv`, `--xcr0`): any known components, no
/// host to validate against; whether it fits each host is the finding.
fn parse_mask(opt: &str, s: &str) -> Result<XfeatureMask, FeaturesError> {
    XfeatureMask::parse(s, XfeatureMask::ALL_KNOWN)
        .map_err(|e| FeaturesError::Usage(format!("{opt} {s:?}: {e}")))
}

fn compare_cmd(args: &CompareArgs) -> Result<i32, FeaturesError> {
    let sources = args
        .profiles
        .iter()
        .map(|p| load_source(p))
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
    let c = compare::compare_sources(&sources, restore);
    if let Some(format) = args.export {
        let known = match &args.qemu {
            Some(q) => Some(export::query_qemu(q)?),
            None => None,
        };
        out(&export::render(&c, format, known.as_ref()))?;
        return Ok(0);
    }
    if args.json {
        print_json(Document::FeaturesCompare, &c)?;
    } else {
        out(&c.to_table())?;
    }
    let all_ok = c
        .restore
        .as_ref()
        .is_none_or(|r| r.hosts.iter().all(|h| h.restorable));
    Ok(if args.check && !all_ok { 1 } else { 0 })
}

/// A `compare` input, told apart by content: a file with a VMMREC1 line is
/// a guest log; JSON (or an empty file) is a profile, checked as one;
/// anything else is refused by name.
fn load_source(path: &std::path::Path) -> Result<compare::Source, FeaturesError> {
    let named = path.to_str().and_then(bundled::find).is_some();
    if named || (!path.exists() && !crate::input::is_stdin(path)) {
        // A bundled profile by name, or the error naming the bundled ones.
        return Ok(compare::Source::Host(bundled::load(path)?));
    }
    let bytes = crate::input::read_whole(path, "compare input", guest_log::MAX_GUEST_LOG_BYTES)?;
    if guest_log::holds_record(&bytes) {
        let g = guest_log::GuestRecord::parse(path, &bytes)?;
        return Ok(compare::Source::Guest(g.to_profile()?, g));
    }
    let start = bytes.trim_ascii_start();
    let text = std::str::from_utf8(&bytes).ok();
    if !start.is_empty() && !start.starts_with(b"{") && text.and_then(import::detect).is_none() {
        return Err(FeaturesError::UnknownInput {
            path: path.to_path_buf(),
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| FeaturesError::Profile {
        path: path.to_path_buf(),
        reason: format!("not UTF-8 text: {}", e.utf8_error()),
    })?;
    Ok(compare::Source::Host(import::parse_any(path, &text)?))
}
