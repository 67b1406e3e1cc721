//! `vmm bench init-xstate`: the illumos experiment. The same workloads with
//! the vCPU's initial XSTATE_BV = x87|SSE (correct) and = all of XCR0 (the
//! bug that left AVX upper state looking live, making legacy-SSE AES-NI 3x
//! slower on Skylake), in one command, with their ratio.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use xstate::{InitMode, XfeatureMask};

use crate::devices::SerialSink;
use crate::error::{Error, Result};
use crate::report::hex;
use crate::report::table::{or_dash, Columns};
use crate::report::{ResultRow, RunSummary};
use crate::vstate::{self, RunConfig};

/// One workload row under both initial states.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct InitRow {
    /// Workload name.
    pub name: String,
    /// Variant name.
    pub variant: String,
    /// Problem size.
    pub size: u64,
    /// Unit of `minimal` and `all` (`MB/s`, `GFLOPS`, `1/s`).
    pub unit: &'static str,
    /// Throughput with the initial XSTATE_BV = x87|SSE.
    pub minimal: Option<f64>,
    /// Throughput with the initial XSTATE_BV = all of XCR0.
    pub all: Option<f64>,
    /// `all / minimal`: below 1 means the wrong initial state costs throughput.
    pub ratio: Option<f64>,
}

/// The whole experiment.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct InitBench {
    /// The `workload=` selection run under both initial states.
    pub workload: String,
    /// The XCR0 the guest set.
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub guest_xcr0: Option<XfeatureMask>,
    /// XINUSE at the end of each run: what the CPU considered live.
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub xinuse_minimal: Option<XfeatureMask>,
    /// The same with all of XCR0 initially marked in use.
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub xinuse_all: Option<XfeatureMask>,
    /// One row per workload variant.
    pub rows: Vec<InitRow>,
}

fn run_one(
    workload: &str,
    xfeatures: Option<&str>,
    init: InitMode,
    timeout: Duration,
) -> Result<RunSummary> {
    let outcome = vstate::run(RunConfig {
        xfeatures: xfeatures.map(str::to_string),
        init_xstate: init,
        cmdline: format!("quiet workload={workload}"),
        serial: SerialSink::Null,
        timeout: Some(timeout),
        ..RunConfig::default()
    })?;
    if let Some(why) = outcome.end.failure() {
        return Err(Error::Guest(format!("init-xstate benchmark: {why}")));
    }
    Ok(RunSummary::new(&outcome))
}

/// Run `workload` under both initial states.
pub fn run(workload: &str, xfeatures: Option<&str>, timeout: Duration) -> Result<InitBench> {
    let minimal = run_one(workload, xfeatures, InitMode::Minimal, timeout)?;
    let all = run_one(workload, xfeatures, InitMode::AllOfXcr0, timeout)?;
    let rows = minimal
        .results
        .iter()
        .map(|m| {
            let a = all
                .results
                .iter()
                .find(|a| a.name == m.name && a.variant == m.variant && a.size == m.size);
            let (mv, av) = (m.throughput(), a.and_then(ResultRow::throughput));
            InitRow {
                name: m.name.clone(),
                variant: m.variant.clone(),
                size: m.size,
                unit: m.unit(),
                minimal: mv,
                all: av,
                ratio: match (mv, av) {
                    (Some(m), Some(a)) if m > 0.0 => Some(a / m),
                    _ => None,
                },
            }
        })
        .collect();
    Ok(InitBench {
        workload: workload.to_string(),
        guest_xcr0: minimal.guest_xcr0,
        xinuse_minimal: minimal.guest_xinuse,
        xinuse_all: all.guest_xinuse,
        rows,
    })
}

impl InitBench {
    /// The human table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "initial XSTATE_BV: minimal (x87|SSE) vs all of XCR0 {}; XINUSE at end {} vs {}",
            hex::or_dash(self.guest_xcr0),
            hex::or_dash(self.xinuse_minimal),
            hex::or_dash(self.xinuse_all)
        );
        let t = Columns::new()
            .left("", 14)
            .left(" ", 10)
            .right(" ", 7)
            .right(" ", 12)
            .right(" ", 12)
            .left(" ", 7)
            .right(" ", 7);
        t.push(
            &mut s,
            &[
                "workload", "variant", "size", "minimal", "all", "unit", "all/min",
            ],
        );
        let f = |v: Option<f64>| or_dash(v.map(|v| format!("{v:.2}")));
        for r in &self.rows {
            t.push(
                &mut s,
                &[
                    r.name.clone(),
                    r.variant.clone(),
                    r.size.to_string(),
                    f(r.minimal),
                    f(r.all),
                    r.unit.to_string(),
                    or_dash(r.ratio.map(|v| format!("{v:.3}"))),
                ],
            );
        }
        s
    }
}
