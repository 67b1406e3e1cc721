//! The table and the charts of `vmm bench exits`.

use std::fmt::Write as _;

use xstate::XfeatureMask;

use super::model::*;
use crate::bench::stats::Verdict;
use crate::report::plot::{short, Bar, BarChart, BarGroup};
use crate::report::table::{or_dash, Columns};

impl ExitBench {
    /// The human table: per row the median, the min..p90 spread, the ratio
    /// to the raw loop and, where that ratio is not a result, why.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let source = match self.budget_s {
            Some(b) => format!("calibrated to a {b:.0} s budget"),
            None => "--count".to_string(),
        };
        let _ = writeln!(
            s,
            "vCPU exit cost: median of {} rounds (spread min..p90), {} exits per row ({source}); raw limit (PIO, CPL3, upper state clean, XCR0 {}): {}",
            self.rounds,
            self.count,
            crate::report::hex::or_dash(self.raw_xcr0),
            or_dash(self.raw_ns_per_exit.map(|v| format!("{v:.0} ns")))
        );
        let _ = writeln!(
            s,
            "compact B: the live state (XINUSE at the first exit) compacted, what eager-compact keeps per exit; eager copies KVM's {}-byte image out and back per exit",
            self.image_bytes
        );
        let t = Columns::new()
            .left("", 6)
            .left(" ", 5)
            .left(" ", 6)
            .left(" ", 14)
            .left(" ", 8)
            .left(" ", 8)
            .right(" ", 9)
            .right(" ", 9)
            .right(" ", 13)
            .right(" ", 11)
            .right(" ", 11)
            .right(" ", 9)
            .left("  ", 9)
            .left("  ", 0);
        t.push(
            &mut s,
            &[
                "exit",
                "mode",
                "upper",
                "policy",
                "xcr0",
                "xinuse",
                "compact B",
                "ns/exit",
                "min..p90 ns",
                "cycles/exit",
                "raw ns/exit",
                "ratio (x)",
                "vs eager",
                "note",
            ],
        );
        let ns = |v: Option<f64>| or_dash(v.map(|v| format!("{v:.0}")));
        for r in &self.rows {
            let spread = match (r.ns_per_exit_min, r.ns_per_exit_p90) {
                (Some(lo), Some(hi)) => format!("{}..{}", short(lo), short(hi)),
                _ => "-".into(),
            };
            t.push(
                &mut s,
                &[
                    r.exit.clone(),
                    r.mode.clone(),
                    r.upper.clone(),
                    r.policy.clone(),
                    format!("{:#x}", r.guest_xcr0),
                    crate::report::hex::or_dash(r.xinuse),
                    or_dash(r.compacted_bytes.map(|b| b.to_string())),
                    ns(r.ns_per_exit),
                    spread,
                    format!("{:.0}", r.guest_cycles_per_exit),
                    ns(r.raw_ns_per_exit),
                    or_dash(r.ratio_to_raw.map(|v| format!("{v:.3}"))),
                    vs_eager(r).to_string(),
                    r.note().to_string(),
                ],
            );
        }
        self.noise_summary(&mut s);
        self.eager_summary(&mut s);
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        let _ = writeln!(s, "measured in {:.1} s", self.wall_s);
        if let Some(c) = &self.comparison {
            s.push_str(&c.to_table());
        }
        s
    }

    /// How many policy rows are within noise of the raw loop, if any.
    fn noise_summary(&self, s: &mut String) {
        let noisy = self
            .rows
            .iter()
            .filter(|r| r.within_noise == Some(true))
            .count();
        if noisy > 0 {
            let _ = writeln!(
                s,
                "{noisy} of {} policy rows are within noise: their min..p90 overlaps the raw loop's, so their ratio is not a measured difference",
                self.rows.iter().filter(|r| r.policy != "raw").count()
            );
        }
    }

    /// The verdict line: on how many rows with upper state live
    /// eager-compact cost at most what eager did, and which rows did not.
    fn eager_summary(&self, s: &mut String) {
        let judged: Vec<&ExitRow> = self
            .rows
            .iter()
            .filter(|r| r.at_most_eager().is_some())
            .collect();
        if judged.is_empty() {
            return;
        }
        let live: Vec<&&ExitRow> = judged.iter().filter(|r| r.upper_live()).collect();
        let ok = |rows: &[&&ExitRow]| {
            rows.iter()
                .filter(|r| r.at_most_eager() == Some(true))
                .count()
        };
        let all: Vec<&&ExitRow> = judged.iter().collect();
        let _ = writeln!(
            s,
            "eager-compact <= eager (cheaper, or within noise): {} of {} rows with upper state live, {} of {} rows in all (exits that reach the VMM; `in KVM`: CPUID, answered by KVM, no policy runs)",
            ok(&live),
            live.len(),
            ok(&all),
            all.len()
        );
        for r in judged.iter().filter(|r| r.at_most_eager() == Some(false)) {
            let _ = writeln!(
                s,
                "  costlier than eager: {} {} {} xcr0 {:#x}: {} ns against {} ns",
                r.exit,
                r.mode,
                r.upper,
                r.guest_xcr0,
                or_dash(r.ns_per_exit.map(|v| format!("{v:.0}"))),
                or_dash(r.eager_ns_per_exit.map(|v| format!("{v:.0}")))
            );
        }
    }

    /// The `--plot` charts: one per XCR0, a bar group per policy, a bar per
    /// exit kind, mode and upper state (median, with the min..p90 whisker),
    /// the raw KVM limit of the same exit drawn across each bar.
    pub fn charts(&self) -> Vec<BarChart> {
        let mut masks: Vec<XfeatureMask> = self.rows.iter().map(|r| r.guest_xcr0).collect();
        masks.dedup();
        let kinds = ["pio", "mmio", "cpuid"];
        masks
            .iter()
            .map(|&xcr0| {
                let mut policies: Vec<&str> = Vec::new();
                for r in self.rows.iter().filter(|r| r.guest_xcr0 == xcr0) {
                    if r.policy != "raw" && !policies.contains(&r.policy.as_str()) {
                        policies.push(&r.policy);
                    }
                }
                let groups = policies
                    .iter()
                    .map(|&p| BarGroup {
                        label: p.to_string(),
                        bars: self
                            .rows
                            .iter()
                            .filter(|r| r.guest_xcr0 == xcr0 && r.policy == p)
                            .filter_map(|r| {
                                let v = r.ns_per_exit?;
                                Some(Bar {
                                    label: format!("{} {} {}", r.exit, r.mode, r.upper),
                                    series: kinds.iter().position(|k| *k == r.exit).unwrap_or(0),
                                    value: v,
                                    range: r.ns_per_exit_min.zip(r.ns_per_exit_p90),
                                    tick: r.raw_ns_per_exit,
                                    text: Some(match r.within_noise {
                                        Some(true) => format!("{} ~", short(v)),
                                        _ => short(v),
                                    }),
                                })
                            })
                            .collect(),
                    })
                    .collect();
                BarChart {
                    title: format!(
                        "vCPU exit cost, guest XCR0 {:#x} ({}): median of {} rounds, {} exits per row; ~ = within noise of raw",
                        xcr0, xcr0, self.rounds, self.count
                    ),
                    y_desc: "ns per exit (VMM wall time)".into(),
                    series: kinds.iter().map(|k| format!("{k} exit")).collect(),
                    groups,
                    tick_name: Some("raw KVM limit (same exit)".into()),
                    hline: None,
                }
            })
            .collect()
    }
}

/// The `vs eager` cell of an eager-compact row: `<=` or `>` eager, and how
/// that was decided.
pub(super) fn vs_eager(r: &ExitRow) -> &'static str {
    if r.vs_eager.is_some() && !r.reaches_vmm() {
        return "in KVM";
    }
    match (r.vs_eager, r.at_most_eager()) {
        (Some(Verdict::Faster), _) => "< eager",
        (Some(Verdict::WithinNoise), _) => "~ eager",
        (Some(Verdict::Slower), _) => "> eager",
        (Some(Verdict::NoSpread), Some(true)) => "<= (1 rnd)",
        (Some(Verdict::NoSpread), _) => "> (1 rnd)",
        (None, _) => "",
    }
}
