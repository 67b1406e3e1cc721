//! Baselines of `vmm bench exits`, criterion-style: `--save-baseline NAME`
//! stores this run's JSON as `NAME.json` in the baseline directory,
//! `--baseline NAME` (or `--compare FILE.json`, any `--json` output) compares
//! this run with it row by row: the change of the median in percent, and
//! whether it is significant (the two runs' min..p90 ranges do not overlap).
//!
//! The directory is `--baseline-dir`, else `$XDG_DATA_HOME/vmm/bench`, else
//! `~/.local/share/vmm/bench`: the guest is embedded in the binary, so a
//! baseline belongs to the user and host rather than to a source tree (which
//! is why this is not criterion's `target/criterion`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::compare::{CompareRow, Comparison};
use super::exits::ExitBench;
use super::stats::{Change, Spread};
use crate::error::BaselineError;

/// Largest baseline file read (a full matrix is ~60 KiB).
pub const MAX_BASELINE_BYTES: u64 = 16 << 20;

/// The baseline directory: `dir` if given, else the XDG default.
pub fn dir(given: Option<&Path>) -> Result<PathBuf, BaselineError> {
    if let Some(d) = given {
        return Ok(d.to_path_buf());
    }
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("XDG_DATA_HOME")
        .or_else(|| var("HOME").map(|h| h.join(".local/share")))
        .map(|d| d.join("vmm/bench"))
        .ok_or(BaselineError::NoDir)
}

/// `dir/NAME.json`, for a `NAME` that is a plain file name.
pub fn path(dir: &Path, flag: &'static str, name: &str) -> Result<PathBuf, BaselineError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !ok {
        return Err(BaselineError::BadName {
            flag,
            name: name.to_string(),
        });
    }
    Ok(dir.join(format!("{name}.json")))
}

/// Write `bench` (without its own comparison) to `path`, creating the
/// directory; the file is replaced in one rename, never left half-written.
pub fn save(path: &Path, bench: &ExitBench) -> Result<(), BaselineError> {
    let write_err = |p: &Path| {
        let p = p.to_path_buf();
        move |source| BaselineError::Write { path: p, source }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(write_err(dir))?;
    let mut plain = bench.clone();
    plain.comparison = None;
    let text = serde_json::to_string_pretty(&plain).map_err(|e| BaselineError::Write {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(write_err(dir))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(write_err(path))?;
    tmp.persist(path).map_err(|e| BaselineError::Write {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    Ok(())
}

/// A baseline as read back: only the fields the comparison needs, so any
/// `vmm bench exits --json` output (also from before spreads existed) is
/// accepted.
#[derive(Clone, Debug, Deserialize)]
pub struct Baseline {
    /// Which benchmark wrote it (absent in old files).
    #[serde(default)]
    pub bench: Option<String>,
    /// Its rounds.
    #[serde(default)]
    pub rounds: u32,
    /// Its rows.
    pub rows: Vec<BaselineRow>,
}

/// One row of a [`Baseline`].
#[derive(Clone, Debug, Deserialize)]
pub struct BaselineRow {
    /// Exit kind.
    pub exit: String,
    /// Guest mode.
    pub mode: String,
    /// Upper-YMM state.
    pub upper_ymm: String,
    /// Policy.
    pub policy: String,
    /// XCR0 as its hex string.
    pub guest_xcr0: String,
    /// The row's figure.
    pub ns_per_exit: Option<f64>,
    /// Spread, when the file has it.
    #[serde(default)]
    pub ns_per_exit_min: Option<f64>,
    /// Spread, when the file has it.
    #[serde(default)]
    pub ns_per_exit_p90: Option<f64>,
}

impl BaselineRow {
    fn spread(&self) -> Option<Spread> {
        let m = self.ns_per_exit?;
        Some(Spread {
            min: self.ns_per_exit_min.unwrap_or(m),
            median: m,
            p90: self.ns_per_exit_p90.unwrap_or(m),
        })
    }
}

/// Read a baseline file (`--baseline` resolved, or `--compare FILE`).
pub fn load(path: &Path) -> Result<Baseline, BaselineError> {
    let bytes = crate::input::open_regular(path, "baseline", MAX_BASELINE_BYTES)?.read_all()?;
    let b: Baseline = serde_json::from_slice(&bytes).map_err(|source| BaselineError::Parse {
        path: path.to_path_buf(),
        bench: "exits",
        source,
    })?;
    match b.bench.as_deref() {
        None | Some("exits") => Ok(b),
        Some(other) => Err(BaselineError::WrongBench {
            path: path.to_path_buf(),
            bench: "exits",
            found: other.to_string(),
        }),
    }
}

fn row_id(policy: &str, exit: &str, mode: &str, ymm: &str, xcr0: &str) -> String {
    format!("{policy} {exit} {mode} {ymm} {xcr0}")
}

/// Compare `now` with `then` (named `name` in the output) row by row.
pub fn compare(now: &ExitBench, then: &Baseline, name: String) -> Comparison {
    let mut rows = Vec::new();
    let mut only_now = Vec::new();
    let mut matched = vec![false; then.rows.len()];
    for r in &now.rows {
        let xcr0 = format!("{:#x}", r.guest_xcr0);
        let id = row_id(&r.policy, &r.exit, &r.mode, &r.upper_ymm, &xcr0);
        let found = then.rows.iter().position(|b| {
            b.exit == r.exit
                && b.mode == r.mode
                && b.upper_ymm == r.upper_ymm
                && b.policy == r.policy
                && b.guest_xcr0 == xcr0
        });
        let Some(i) = found else {
            only_now.push(id);
            continue;
        };
        matched[i] = true;
        let b = &then.rows[i];
        let (Some(mine), Some(theirs)) = (r.spread(), b.spread()) else {
            only_now.push(id);
            continue;
        };
        if theirs.median <= 0.0 {
            only_now.push(id);
            continue;
        }
        rows.push(CompareRow {
            exit: r.exit.clone(),
            mode: r.mode.clone(),
            upper_ymm: r.upper_ymm.clone(),
            policy: r.policy.clone(),
            guest_xcr0: xcr0,
            baseline_ns_per_exit: theirs.median,
            ns_per_exit: mine.median,
            change_pct: (mine.median - theirs.median) / theirs.median * 100.0,
            verdict: Change::of(&mine, &theirs, now.rounds, then.rounds.max(1)),
        });
    }
    let only_baseline = then
        .rows
        .iter()
        .zip(&matched)
        .filter(|(_, m)| !**m)
        .map(|(b, _)| row_id(&b.policy, &b.exit, &b.mode, &b.upper_ymm, &b.guest_xcr0))
        .collect();
    Comparison {
        baseline: name,
        baseline_rounds: then.rounds,
        rows,
        only_now,
        only_baseline,
    }
}
