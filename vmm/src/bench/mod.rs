//! `vmm bench`: measurements that boot the guest several times and compare.
//!
//! - `exits` ([`exits`]): vCPU exit cost per policy against the raw limit.
//! - `init-xstate` ([`init_xstate`]): the illumos initial-state experiment.

pub mod exits;
pub mod init_xstate;

use std::time::Duration;

use clap::{Args, Subcommand};

use crate::error::{Error, Result};
use crate::kvm::HostKvm;
use crate::schema::Document;
use crate::xstate_manager::SyncPolicy;

/// `vmm bench`.
#[derive(Args)]
pub struct BenchArgs {
    /// Which measurement.
    #[command(subcommand)]
    pub what: BenchCommand,
}

/// The measurements of `vmm bench`.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// vCPU exit cost per exit kind, guest mode, XCR0, upper-YMM state and
    /// xstate sync policy, against a raw KVM_RUN loop measured in the same run.
    Exits {
        /// Exits per row.
        #[arg(long, default_value_t = 100_000)]
        count: u64,
        /// Interleaved rounds; each row reports its best.
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        /// Policies to measure (default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        policy: Vec<SyncPolicy>,
        /// Guest XCR0 values (default: x87,sse and x87,sse,avx).
        #[arg(long, value_delimiter = ';')]
        xfeatures: Vec<String>,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The same workloads with the initial XSTATE_BV = x87|SSE and = all of XCR0.
    InitXstate {
        /// Workloads to run under both initial states.
        #[arg(long, default_value = "aes,linpack")]
        workload: String,
        /// The policy, as for `vmm run`.
        #[arg(long, value_name = "MASK")]
        xfeatures: Option<String>,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
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

/// Run a `vmm bench` subcommand; returns the process exit status.
pub fn main(args: BenchArgs) -> Result<i32> {
    let timeout = Duration::from_secs(1800);
    match args.what {
        BenchCommand::Exits {
            count,
            rounds,
            policy,
            xfeatures,
            json,
        } => {
            let host = HostKvm::open()?;
            let masks = if xfeatures.is_empty() {
                exits::default_masks(host.xstate.supported_xcr0())
            } else {
                xfeatures
                    .iter()
                    .map(|s| {
                        crate::cpuid::validate_policy(Some(s), &host.xstate, &host.supported_cpuid)
                    })
                    .collect::<Result<Vec<_>>>()?
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
            let b = exits::run(count, rounds, &masks, &policies, timeout)?;
            print(json.then_some(Document::BenchExits), &b, b.to_table())?;
        }
        BenchCommand::InitXstate {
            workload,
            xfeatures,
            json,
        } => {
            guest::workloads::Selection::parse(&workload)
                .map_err(|e| Error::Argument(format!("--workload {workload:?}: {e}")))?;
            let b = init_xstate::run(&workload, xfeatures.as_deref(), timeout)?;
            print(json.then_some(Document::BenchInitXstate), &b, b.to_table())?;
        }
    }
    Ok(0)
}
