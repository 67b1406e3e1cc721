//! The table and the charts of `vmm bench exits`.

use std::fmt::Write as _;

use xstate::XfeatureMask;

use super::model::*;
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
            "vCPU exit cost: median of {} rounds (spread min..p90), {} exits per row ({source}); raw limit (PIO, CPL3, full XCR0): {}",
            self.rounds,
            self.count,
            or_dash(self.raw_ns_per_exit.map(|v| format!("{v:.0} ns")))
        );
        let t = Columns::new()
            .left("", 6)
            .left(" ", 5)
            .left(" ", 6)
            .left(" ", 14)
            .left(" ", 6)
            .right(" ", 9)
            .right(" ", 13)
            .right(" ", 11)
            .right(" ", 11)
            .right(" ", 9)
            .left("  ", 0);
        t.push(
            &mut s,
            &[
                "exit",
                "mode",
                "ymm",
                "policy",
                "xcr0",
                "ns/exit",
                "min..p90 ns",
                "cycles/exit",
                "raw ns/exit",
                "ratio (x)",
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
                    r.upper_ymm.clone(),
                    r.policy.clone(),
                    format!("{:#x}", r.guest_xcr0),
                    ns(r.ns_per_exit),
                    spread,
                    format!("{:.0}", r.guest_cycles_per_exit),
                    ns(r.raw_ns_per_exit),
                    or_dash(r.ratio_to_raw.map(|v| format!("{v:.3}"))),
                    r.note().to_string(),
                ],
            );
        }
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
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        let _ = writeln!(s, "measured in {:.1} s", self.wall_s);
        if let Some(c) = &self.comparison {
            s.push_str(&c.to_table());
        }
        s
    }

    /// The `--plot` charts: one per XCR0, a bar group per policy, a bar per
    /// exit kind, mode and YMM state (median, with the min..p90 whisker),
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
                                    label: format!("{} {} {}", r.exit, r.mode, r.upper_ymm),
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
