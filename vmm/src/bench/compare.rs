//! This run of a `vmm bench` against a baseline, row by row: the model of
//! the comparison and its table (made by [`super::baseline::compare`] for
//! any benchmark described by a [`Kind`]), and the [`Kind`] itself.

use std::fmt::Write as _;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use super::stats::{Change, Spread};
use crate::report::table::{or_dash, Columns};

/// One comparable figure of a benchmark row: what identifies it, its unit
/// when that varies by row, and its spread over the rounds.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The values of [`Kind::key`], in order.
    pub key: Vec<Value>,
    /// The figure's unit where rows differ in it (`MB/s`, `GFLOPS`).
    pub unit: Option<String>,
    /// Min / median / p90 (min = median = p90 when the file has no spread).
    pub spread: Spread,
}

/// What a benchmark's rows are compared by: one description per `vmm
/// bench` subcommand, so one comparison serves them all.
#[derive(Debug)]
pub struct Kind {
    /// The subcommand (`exits`, `init-xstate`): the `bench` field its JSON
    /// carries and baselines are checked against.
    pub bench: &'static str,
    /// The JSON names of the fields identifying a row, and their table
    /// headers.
    pub key: &'static [(&'static str, &'static str)],
    /// The JSON name of the figure: the comparison's rows carry it as
    /// `FIGURE` and `baseline_FIGURE`.
    pub figure: &'static str,
    /// The figure's unit for the table headers, when every row has the same
    /// one (else the rows' [`Sample::unit`] get a `unit` column).
    pub unit: Option<&'static str>,
    /// Whether a larger figure is better (throughput) rather than worse
    /// (a cost).
    pub higher_is_better: bool,
    /// The samples of one JSON row of the benchmark's output.
    pub samples: fn(&Value) -> Vec<Sample>,
}

/// A JSON value as a table cell: strings without their quotes.
pub(crate) fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The row's `field` as a number, if present.
pub(crate) fn num(row: &Value, field: &str) -> Option<f64> {
    row.get(field).and_then(Value::as_f64)
}

/// The values of `fields` in `row`; `None` if one is missing.
pub(crate) fn key_of(row: &Value, fields: &[(&str, &str)]) -> Option<Vec<Value>> {
    fields.iter().map(|(f, _)| row.get(*f).cloned()).collect()
}

/// One figure of this run against the baseline.
#[derive(Clone, Debug)]
pub struct CompareRow {
    /// The row's key fields (JSON name, value), as [`Kind::key`] orders them.
    pub key: Vec<(&'static str, Value)>,
    /// The JSON name of the figure ([`Kind::figure`]).
    pub figure: &'static str,
    /// The figure's unit, where rows differ in it.
    pub unit: Option<String>,
    /// The baseline's median.
    pub then: f64,
    /// This run's median.
    pub now: f64,
    /// `(now - baseline) / baseline`, in percent.
    pub change_pct: f64,
    /// `improved`, `regressed` or `no change` (the ranges overlap, or a run
    /// had one round).
    pub verdict: Change,
}

/// Flat JSON: the key fields, `unit` where rows differ in it,
/// `baseline_FIGURE`, `FIGURE`, `change_pct`, `verdict` (for `vmm bench
/// exits`: `exit`, `mode`, ..., `baseline_ns_per_exit`, `ns_per_exit`).
impl Serialize for CompareRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in &self.key {
            m.serialize_entry(k, v)?;
        }
        if let Some(u) = &self.unit {
            m.serialize_entry("unit", u)?;
        }
        m.serialize_entry(&format!("baseline_{}", self.figure), &self.then)?;
        m.serialize_entry(self.figure, &self.now)?;
        m.serialize_entry("change_pct", &self.change_pct)?;
        m.serialize_entry("verdict", &self.verdict)?;
        m.end()
    }
}

/// This run against a baseline.
#[derive(schemars::JsonSchema, Clone, Debug, serde::Serialize)]
pub struct Comparison {
    /// The benchmark's description (headers, figure).
    #[serde(skip)]
    #[schemars(skip)]
    pub kind: &'static Kind,
    /// The baseline's name or file.
    pub baseline: String,
    /// The baseline's rounds.
    pub baseline_rounds: u32,
    /// Figures present in both runs: each a flat object of the row's key
    /// fields, `unit` where rows differ in it, `baseline_FIGURE`, `FIGURE`,
    /// `change_pct` and `verdict` (see [`CompareRow`]'s serialisation).
    #[schemars(with = "Vec<serde_json::Map<String, serde_json::Value>>")]
    pub rows: Vec<CompareRow>,
    /// Figures of this run the baseline lacks (their key words).
    pub only_now: Vec<String>,
    /// Figures of the baseline this run lacks.
    pub only_baseline: Vec<String>,
}

impl Comparison {
    /// The comparison table: the key columns, then and now (their unit in
    /// the header, or in a `unit` column where rows differ), the change in
    /// percent and the verdict.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\ncompared with baseline {} ({} rounds): change of the median; significant only where both runs' min..p90 ranges are apart",
            self.baseline,
            or_dash((self.baseline_rounds > 0).then_some(self.baseline_rounds))
        );
        let kind = self.kind;
        let keys: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| r.key.iter().map(|(_, v)| cell(v)).collect())
            .collect();
        let mut t = Columns::new();
        let mut header: Vec<String> = Vec::new();
        for (i, (_, h)) in kind.key.iter().enumerate() {
            let w = keys
                .iter()
                .filter_map(|k| k.get(i).map(String::len))
                .chain([h.len()])
                .max()
                .unwrap_or(0);
            t = t.left(if i == 0 { "" } else { " " }, w);
            header.push(h.to_string());
        }
        let (then_h, now_h) = match kind.unit {
            Some(u) => (format!("then {u}"), format!("now {u}")),
            None => ("then".to_string(), "now".to_string()),
        };
        t = t
            .right(" ", then_h.len().max(10))
            .right(" ", now_h.len().max(10));
        header.extend([then_h, now_h]);
        let unit_col = kind.unit.is_none();
        if unit_col {
            t = t.left(" ", 6);
            header.push("unit".into());
        }
        t = t.right(" ", 10).left("  ", 0);
        header.extend(["change (%)".to_string(), "verdict".to_string()]);
        t.push(&mut s, &header);
        let fig = |v: f64| {
            if v.abs() >= 100.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        };
        for (r, k) in self.rows.iter().zip(keys) {
            let mut cells = k;
            cells.extend([fig(r.then), fig(r.now)]);
            if unit_col {
                cells.push(or_dash(r.unit.clone()));
            }
            cells.extend([
                format!("{:+.1}", r.change_pct),
                r.verdict.words().to_string(),
            ]);
            t.push(&mut s, &cells);
        }
        let count = |c: Change| self.rows.iter().filter(|r| r.verdict == c).count();
        let _ = writeln!(
            s,
            "{} improved, {} regressed, {} no change (within noise)",
            count(Change::Improved),
            count(Change::Regressed),
            count(Change::NoChange)
        );
        if !self.only_now.is_empty() {
            let _ = writeln!(s, "not in the baseline: {}", self.only_now.join(", "));
        }
        if !self.only_baseline.is_empty() {
            let _ = writeln!(s, "not in this run: {}", self.only_baseline.join(", "));
        }
        s
    }
}
