//! Baselines of `vmm bench exits` and `vmm bench init-xstate`, criterion-style: `--save-baseline NAME`
//! stores this run's JSON as `NAME.json` in the baseline directory,
//! `--baseline NAME` (or `--compare FILE.json`, any `--json` output) compares
//! this run with it row by row: the change of the median in percent, and
//! whether it is significant (the two runs' min..p90 ranges do not overlap).
//! Each benchmark describes its rows by a [`Kind`] (key fields, figure,
//! whether more is better), so one comparison serves both.
//!
//! The directory is `--baseline-dir`, else `$XDG_DATA_HOME/vmm/bench`, else
//! `~/.local/share/vmm/bench`: the guest is embedded in the binary, so a
//! baseline belongs to the user and host rather than to a source tree (which
//! is why this is not criterion's `target/criterion`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::compare::{cell, CompareRow, Comparison, Kind, Sample};
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

/// Write `bench`'s JSON (without its own `comparison`) to `path`,
/// creating the directory, as every file `vmm` writes
/// ([`crate::output::write_atomic`]): the baseline of that name is replaced
/// in one rename, never left half-written, never through a symlink or into
/// a device or FIFO.
pub fn save<T: Serialize>(path: &Path, bench: &T) -> Result<(), BaselineError> {
    let write_err = |p: &Path| {
        let p = p.to_path_buf();
        move |source| BaselineError::Write { path: p, source }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(write_err(dir))?;
    let json_err = |e: serde_json::Error| BaselineError::Write {
        path: path.to_path_buf(),
        source: e.into(),
    };
    let mut plain = serde_json::to_value(bench).map_err(json_err)?;
    if let Some(o) = plain.as_object_mut() {
        o.remove("comparison");
    }
    let text = serde_json::to_string_pretty(&plain).map_err(json_err)?;
    crate::output::write_atomic(path, true, text.as_bytes())
        .map(|_| ())
        .map_err(|e| BaselineError::Write {
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })
}

/// A baseline as read back: the rows stay JSON, read by the benchmark's
/// [`Kind::samples`], so any `--json` output of that benchmark (also from
/// before spreads existed) is accepted.
#[derive(Clone, Debug, Deserialize)]
pub struct Baseline {
    /// Which benchmark wrote it (absent in old files).
    #[serde(default)]
    pub bench: Option<String>,
    /// Its rounds.
    #[serde(default)]
    pub rounds: u32,
    /// Its rows.
    pub rows: Vec<Value>,
}

/// Read a baseline file (`--baseline` resolved, or `--compare FILE`) of
/// benchmark `kind`.
pub fn load(path: &Path, kind: &Kind) -> Result<Baseline, BaselineError> {
    let bytes = crate::input::read_whole(path, "baseline", MAX_BASELINE_BYTES)?;
    let b: Baseline = serde_json::from_slice(&bytes).map_err(|source| BaselineError::Parse {
        path: path.to_path_buf(),
        bench: kind.bench,
        source,
    })?;
    match b.bench.as_deref() {
        None => Ok(b),
        Some(found) if found == kind.bench => Ok(b),
        Some(other) => Err(BaselineError::WrongBench {
            path: path.to_path_buf(),
            bench: kind.bench,
            found: other.to_string(),
        }),
    }
}

/// A key's words, for the `only_now` / `only_baseline` lists.
fn id(key: &[Value]) -> String {
    key.iter().map(cell).collect::<Vec<_>>().join(" ")
}

fn samples(kind: &Kind, rows: &[Value]) -> Vec<Sample> {
    rows.iter().flat_map(|r| (kind.samples)(r)).collect()
}

/// Compare `now` (this run, of benchmark `kind`) with `then` (named `name`
/// in the output) figure by figure.
pub fn compare<T: Serialize>(
    kind: &'static Kind,
    now: &T,
    then: &Baseline,
    name: String,
) -> Comparison {
    let now = serde_json::to_value(now).unwrap_or(Value::Null);
    let rounds_now = now["rounds"].as_u64().map_or(1, |r| r as u32);
    let mine = samples(kind, now["rows"].as_array().map_or(&[][..], Vec::as_slice));
    let theirs = samples(kind, &then.rows);
    let flip = |s: Spread| {
        if kind.higher_is_better {
            s.negated()
        } else {
            s
        }
    };
    let mut rows = Vec::new();
    let mut only_now = Vec::new();
    let mut matched = vec![false; theirs.len()];
    for m in mine {
        let Some(i) = theirs
            .iter()
            .position(|t| t.key == m.key && t.unit == m.unit)
        else {
            only_now.push(id(&m.key));
            continue;
        };
        matched[i] = true;
        let t = &theirs[i];
        if t.spread.median == 0.0 {
            only_now.push(id(&m.key));
            continue;
        }
        rows.push(CompareRow {
            key: kind
                .key
                .iter()
                .map(|k| k.0)
                .zip(m.key.iter().cloned())
                .collect(),
            figure: kind.figure,
            unit: m.unit.clone(),
            then: t.spread.median,
            now: m.spread.median,
            change_pct: (m.spread.median - t.spread.median) / t.spread.median.abs() * 100.0,
            verdict: Change::of(
                &flip(m.spread),
                &flip(t.spread),
                rounds_now,
                then.rounds.max(1),
            ),
        });
    }
    let only_baseline = theirs
        .iter()
        .zip(&matched)
        .filter(|(_, m)| !**m)
        .map(|(t, _)| id(&t.key))
        .collect();
    Comparison {
        kind,
        baseline: name,
        baseline_rounds: then.rounds,
        rows,
        only_now,
        only_baseline,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::compare::{key_of, num};
    use serde_json::json;

    fn one(row: &Value) -> Vec<Sample> {
        let Some(key) = key_of(row, TEST.key) else {
            return Vec::new();
        };
        let Some(m) = num(row, "rate") else {
            return Vec::new();
        };
        vec![Sample {
            key,
            unit: None,
            spread: Spread {
                min: num(row, "rate_min").unwrap_or(m),
                median: m,
                p90: num(row, "rate_p90").unwrap_or(m),
            },
        }]
    }

    static TEST: Kind = Kind {
        bench: "test",
        key: &[("name", "name"), ("size", "size")],
        figure: "rate",
        unit: Some("MB/s"),
        higher_is_better: true,
        samples: one,
    };

    #[test]
    fn higher_is_better_flips_the_verdict() {
        let now = json!({"rounds": 3, "rows": [
            {"name": "a", "size": 1, "rate": 200.0, "rate_min": 190.0, "rate_p90": 210.0},
            {"name": "b", "size": 1, "rate": 100.0, "rate_min": 95.0, "rate_p90": 105.0},
            {"name": "c", "size": 1, "rate": 100.0, "rate_min": 90.0, "rate_p90": 130.0},
            {"name": "new", "size": 1, "rate": 1.0}
        ]});
        let then = Baseline {
            bench: Some("test".into()),
            rounds: 3,
            rows: vec![
                json!({"name": "a", "size": 1, "rate": 100.0, "rate_min": 95.0, "rate_p90": 105.0}),
                json!({"name": "b", "size": 1, "rate": 200.0, "rate_min": 190.0, "rate_p90": 210.0}),
                json!({"name": "c", "size": 1, "rate": 110.0, "rate_min": 100.0, "rate_p90": 120.0}),
                json!({"name": "old", "size": 2, "rate": 1.0}),
            ],
        };
        let c = compare(&TEST, &now, &then, "b0".into());
        let v: Vec<_> = c.rows.iter().map(|r| (r.change_pct, r.verdict)).collect();
        assert_eq!(
            v,
            [
                (100.0, Change::Improved),
                (-50.0, Change::Regressed),
                (-100.0 / 11.0, Change::NoChange)
            ]
        );
        assert_eq!(c.only_now, ["new 1"]);
        assert_eq!(c.only_baseline, ["old 2"]);
        let j = serde_json::to_value(&c).unwrap();
        assert_eq!(j["rows"][0]["name"], "a");
        assert_eq!(j["rows"][0]["size"], 1);
        assert_eq!(j["rows"][0]["baseline_rate"], 100.0);
        assert_eq!(j["rows"][0]["rate"], 200.0);
        assert_eq!(j["rows"][0]["verdict"], "improved");
        let t = c.to_table();
        assert!(t.contains("then MB/s"), "{t}");
        assert!(t.contains("change (%)"), "{t}");
        assert!(
            t.contains("1 improved, 1 regressed, 1 no change (within noise)"),
            "{t}"
        );
    }
}
