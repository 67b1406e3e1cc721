//! Running a `vmm bench` subcommand: what can be refused is refused before
//! measuring, then the measurement runs under the progress bar and its
//! table or JSON is printed, with the baseline and plot when asked for.

use std::path::Path;
use std::time::Duration;

use super::progress::Progress;
use super::{
    baseline, exits, init_xstate, peers, snapshot, startup, BaselineArgs, BenchArgs, BenchCommand,
    OutputArgs,
};
use crate::error::{Error, Result};
use crate::kvm::HostKvm;
use crate::report::plot;
use crate::schema::Document;
use crate::xstate_manager::SyncPolicy;
use exits::Count;

/// `--save-baseline`: write `bench` to `path`, if given, and say where.
fn save<T: serde::Serialize>(path: Option<&Path>, bench: &T) -> Result<()> {
    if let Some(path) = path {
        baseline::save(path, bench)?;
        crate::output::terminal::line(format_args!("vmm: baseline saved to {}", path.display()));
    }
    Ok(())
}

fn print<T: serde::Serialize>(json: Option<Document>, value: &T, table: String) -> Result<()> {
    if let Some(doc) = json {
        let text = crate::schema::to_json(doc, value)?;
        crate::output::stdout::print(&format!("{text}\n"))?;
    } else {
        crate::output::stdout::print(&table)?;
    }
    Ok(())
}

/// Write `charts` to `--plot FILE`, if given.
fn write_plot(
    file: Option<&Path>,
    force: bool,
    charts: impl FnOnce() -> Vec<plot::BarChart>,
) -> Result<()> {
    if let Some(path) = file {
        plot::write_svg(path, &charts(), 1400, force)?;
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
                plot::check_target(p, out.force)?;
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
            write_plot(out.plot.as_deref(), out.force, || b.charts())?;
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
            at,
            timeout,
            peers,
            json,
            quiet,
        } => snapshot_main(mem, runs, workload, at, timeout, peers, json, quiet),
        BenchCommand::Startup { pairs, json, quiet } => startup_main(pairs, json, quiet),
    }
}

/// The `exits` sweep's plan: the masks (each `--xfeatures` given the AMX
/// permission it needs and checked against KVM's table; else the
/// defaults, the user state KVM offers and the host enables, climbing one
/// register file at a time, only the widest with `--quick`), the
/// policies, the rows' exit count or time budget, and the rounds.
fn exits_plan(
    count: Option<u64>,
    budget: Option<f64>,
    rounds: Option<u32>,
    quick: bool,
    policy: Vec<SyncPolicy>,
    xfeatures: &[String],
) -> Result<exits::Plan> {
    // AMX needs the guest permission before KVM's table is read (see
    // crate::arch::amx): for each --xfeatures naming it, or by default
    // for whatever the host has, so that KVM offers the tiles.
    if xfeatures.is_empty() {
        crate::arch::amx::permit_guest(None)?;
    }
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
        let offered = exits::offered_xcr0(
            host.xstate.supported_xcr0(),
            xstate::native::host_xcr0().ok(),
        );
        if quick {
            exits::quick_masks(offered)
        } else {
            exits::default_masks(offered)
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
    let (info, image_bytes) = (host.xstate.info, host.xsave2_size as u64);
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
        info,
        image_bytes,
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
        .map_err(|e| Error::Argument(format!("--workload {workload:?}: {e}")))?;
    if let Some(p) = &out.plot {
        plot::check_target(p, out.force)?;
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
    write_plot(out.plot.as_deref(), out.force, || b.charts())?;
    Ok(0)
}

/// `vmm bench peers`: the targets found (a missing one is a usage error),
/// the same guest run under each, the table or JSON printed.
fn peers_main(runs: u32, exits: u64, timeout: u64, json: bool, quiet: bool) -> Result<i32> {
    let ours = std::env::current_exe().map_err(Error::io("cannot find vmm's own executable"))?;
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
    point: guest::protocol::SnapshotPhase,
    timeout: u64,
    peers: bool,
    json: bool,
    quiet: bool,
) -> Result<i32> {
    if let Err(e) = guest::workloads::Selection::parse(&workload) {
        return Err(Error::Argument(format!("--workload {workload:?}: {e}")));
    }
    let dir = tempfile::Builder::new()
        .prefix("vmm-bench-snapshot-")
        .tempdir()
        .map_err(Error::io(format!(
            "cannot create a temporary directory in {}",
            std::env::temp_dir().display()
        )))?;
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
        point,
        timeout: Duration::from_secs(timeout),
        dir: dir.path().to_path_buf(),
        vmm: std::env::current_exe().map_err(Error::io("cannot find vmm's own executable"))?,
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
    let ours = std::env::current_exe().map_err(Error::io("cannot find vmm's own executable"))?;
    // Unset or empty: `cc` (build_floor splits a program from its
    // arguments, as make does).
    let cc = std::env::var("CC")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "cc".into());
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
