//! The tables of `vmm bench peers`.

use xstate::XfeatureMask;

use super::model::*;
use crate::bench::stats::Spread;
use crate::features::profile::HexMask;
use crate::report::table::{or_dash, Columns};

/// A duration in ms with its spread: `8.1 (7.9..8.5)`.
fn ms_cell(s: Option<&Spread>, times: &[f64]) -> String {
    match s {
        None => "-".into(),
        Some(s) => {
            let max = times.iter().copied().fold(f64::MIN, f64::max);
            if times.len() > 1 {
                format!("{:.1} ({:.1}..{:.1})", s.median, s.min, max)
            } else {
                format!("{:.1}", s.median)
            }
        }
    }
}

impl PeerRow {
    /// The row `name`/`variant`, if the guest measured it.
    pub fn exit_row(&self, name: &str, variant: &str) -> Option<&ExitRow> {
        self.exit_rows
            .iter()
            .find(|r| r.name == name && r.variant == variant)
    }

    /// `ns` of a row, or its cycles when no TSC frequency is known.
    fn cost_cell(&self, name: &str) -> String {
        match self.exit_row(name, "cpl3-clean") {
            None => "-".into(),
            Some(r) => match r.ns_per_exit {
                Some(ns) => format!("{ns:.0}"),
                None => format!("{:.0} cyc", r.cycles_per_exit.median),
            },
        }
    }
}

impl PeersBench {
    /// The table `vmm bench peers` prints.
    pub fn to_table(&self) -> String {
        let mut out = format!(
            "guest: {} ({} MiB), {} run(s) per VMM; time = process start to exit, median (min..max)\n\
             exit costs: the guest's own TSC timing at CPL3 with clean upper state, ns per exit\n\
             (at the guest's TSC frequency, else the one it reported under vmm)\n\n",
            self.guest_words, self.mem_mib, self.runs
        );
        self.runs_table(&mut out);
        self.xstate_table(&mut out);
        out.push_str(&format!(
            "\nsnapshot/restore (guest `{}`: the same point of its workload under every VMM; \
             snapshot = pause to snapshot complete, restore = new process spawned to guest \
             resumed; the restored guest must finish normally):\n",
            super::snapshot::SNAPSHOT_WORDS
        ));
        for r in &self.vmms {
            let how = match &r.snapshot_error {
                Some(e) => format!("FAILED: {e}"),
                None => r.snapshot.clone(),
            };
            out.push_str(&format!("  {:16}  {how}\n", r.vmm.name()));
        }
        out
    }

    /// The guest-visible xstate under each VMM with a record: XCR0, what
    /// CPUID offers, the feature leaves and the enabled size.
    fn xstate_table(&self, out: &mut String) {
        out.push_str("\nguest-visible xstate (from each VMM's VMMREC1 record):\n");
        let m = Columns::new()
            .left("", 16)
            .right("  ", 8)
            .right("  ", 10)
            .right("  ", 8)
            .right("  ", 8)
            .right("  ", 10)
            .right("  ", 10)
            .right("  ", 10)
            .right("  ", 7)
            .right("  ", 7)
            .right("  ", 7)
            .left("  ", 0);
        m.push(
            out,
            &[
                "VMM",
                "XCR0",
                "offered",
                "XSS",
                "0xD.1",
                "1:ECX",
                "7:EBX",
                "7:ECX",
                "7:EDX",
                "7.1:EAX",
                "size B",
                "XCR0 components",
            ],
        );
        for r in &self.vmms {
            if let Some(g) = &r.masks {
                let h = |v: &HexMask| format!("{:#x}", v.0);
                m.push(
                    out,
                    &[
                        r.vmm.name().to_string(),
                        h(&g.xcr0),
                        h(&g.xcr0_supported),
                        h(&g.xss_supported),
                        h(&g.xsave_features),
                        h(&g.cpuid1_ecx),
                        h(&g.cpuid7_ebx),
                        h(&g.cpuid7_ecx),
                        h(&g.cpuid7_edx),
                        h(&g.cpuid7_1_eax),
                        g.size_enabled.to_string(),
                        XfeatureMask::from_bits(g.xcr0.0).to_string(),
                    ],
                );
            }
        }
    }

    /// The per-VMM table: start-to-exit time, exit costs, XCR0, snapshot and
    /// restore times, and what differs from `vmm` (or why a VMM was skipped).
    fn runs_table(&self, out: &mut String) {
        let t = Columns::new()
            .left("", 16)
            .right("  ", 22)
            .right("  ", 8)
            .right("  ", 8)
            .right("  ", 9)
            .right("  ", 8)
            .right("  ", 12)
            .right("  ", 12)
            .left("  ", 0);
        t.push(
            out,
            &[
                "VMM",
                "start→exit ms",
                "pio ns",
                "mmio ns",
                "cpuid ns",
                "XCR0",
                "snapshot ms",
                "restore ms",
                "differs from vmm",
            ],
        );
        for r in &self.vmms {
            let diff = if let Some(e) = &r.error {
                format!("ERROR: {e}")
            } else if r.vmm == Vmm::Vmm {
                "(reference)".into()
            } else if r.differs_from_vmm.is_empty() {
                "nothing".into()
            } else {
                r.differs_from_vmm.join("; ")
            };
            t.push(
                out,
                &[
                    r.vmm.name().to_string(),
                    ms_cell(r.start_to_exit.as_ref(), &r.start_to_exit_ms),
                    r.cost_cell("exit-pio"),
                    r.cost_cell("exit-mmio"),
                    r.cost_cell("exit-cpuid"),
                    or_dash(r.masks.as_ref().map(|m| format!("{:#x}", m.xcr0.0))),
                    ms_cell(r.snapshot_time.as_ref(), &r.snapshot_ms),
                    ms_cell(r.restore_time.as_ref(), &r.restore_ms),
                    diff,
                ],
            );
        }
        for s in &self.skipped {
            t.push(
                out,
                &[
                    s.vmm.name(),
                    "skipped",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    s.reason.as_str(),
                ],
            );
        }
    }

    /// Whether every VMM run gave at least one record and no run failed.
    pub fn all_ok(&self) -> bool {
        self.vmms
            .iter()
            .all(|r| r.error.is_none() && r.masks.is_some())
    }
}
