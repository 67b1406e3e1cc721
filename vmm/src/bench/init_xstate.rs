//! `vmm bench init-xstate`: the illumos experiment. The same workloads with
//! the vCPU's initial XSTATE_BV = x87|SSE (correct) and = all of XCR0 (the
//! bug that left AVX upper state looking live, making legacy-SSE AES-NI 3x
//! slower on Skylake), in one command, with their ratio.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use xstate::InitMode;

use crate::devices::SerialSink;
use crate::error::{Error, Result};
use crate::report::{ResultRow, RunSummary};
use crate::vm::{self, RunConfig};

/// One workload row under both initial states.
#[derive(Clone, Debug, Serialize)]
pub struct InitRow {
    pub name: String,
    pub variant: String,
    pub size: u64,
    pub unit: &'static str,
    pub minimal: Option<f64>,
    pub all: Option<f64>,
    /// `all / minimal`: below 1 means the wrong initial state costs throughput.
    pub ratio: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct InitBench {
    pub workload: String,
    pub guest_xcr0: Option<String>,
    /// XINUSE at the end of each run: what the CPU considered live.
    pub xinuse_minimal: Option<String>,
    pub xinuse_all: Option<String>,
    pub rows: Vec<InitRow>,
}

fn unit(r: &ResultRow) -> &'static str {
    if r.mb_per_s.is_some() {
        "MB/s"
    } else if r.gflops.is_some() {
        "GFLOPS"
    } else {
        "1/s"
    }
}

fn run_one(
    workload: &str,
    xfeatures: Option<&str>,
    init: InitMode,
    timeout: Duration,
) -> Result<RunSummary> {
    let outcome = vm::run(RunConfig {
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
                unit: unit(m),
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
        guest_xcr0: minimal.guest_xcr0.clone(),
        xinuse_minimal: minimal.guest_xinuse.clone(),
        xinuse_all: all.guest_xinuse.clone(),
        rows,
    })
}

impl InitBench {
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "initial XSTATE_BV: minimal (x87|SSE) vs all of XCR0 {}; XINUSE at end {} vs {}",
            self.guest_xcr0.as_deref().unwrap_or("-"),
            self.xinuse_minimal.as_deref().unwrap_or("-"),
            self.xinuse_all.as_deref().unwrap_or("-")
        );
        let _ = writeln!(
            s,
            "{:<14} {:<10} {:>7} {:>12} {:>12} {:<7} {:>7}",
            "workload", "variant", "size", "minimal", "all", "unit", "all/min"
        );
        for r in &self.rows {
            let f = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
            let _ = writeln!(
                s,
                "{:<14} {:<10} {:>7} {:>12} {:>12} {:<7} {:>7}",
                r.name,
                r.variant,
                r.size,
                f(r.minimal),
                f(r.all),
                r.unit,
                r.ratio
                    .map(|v| format!("{v:.3}"))
                    .unwrap_or_else(|| "-".into())
            );
        }
        s
    }
}
