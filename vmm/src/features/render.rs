//! The human-readable tables of `vmm features` ([`FeaturesView`], at most
//! 100 columns wide) and `vmm features compare` ([`Comparison`]). Masks are
//! formatted as hex here, from the typed models.

use std::fmt::Write as _;

use super::compare::{Comparison, ComponentAcross};
use super::view::{FeaturesView, MaskColumn};
use crate::report::table::{or_dash, Columns};

fn mark(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "-"
    }
}

impl FeaturesView {
    /// The human-readable table (at most 100 columns wide).
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "Extended state (XSAVE) of {}", self.source);
        let _ = writeln!(s, "CPU: {}", self.cpu_name);
        let _ = writeln!(
            s,
            "Sizes and offsets from {}'s CPUID 0xD; compacted offsets for the policy XCR0 {:#x} \
             (cmpct)\nand for XCR0|XSS {:#x} (+xss).",
            if self.layout_from == "kvm" {
                "KVM"
            } else {
                "the CPU"
            },
            self.policy.xcr0,
            self.policy.xcr0 | self.policy.xss
        );
        let _ = writeln!(s);
        self.components_table(&mut s);
        let _ = writeln!(s);
        self.masks_table(&mut s);
        let _ = writeln!(s);
        if self.disagreements.is_empty() {
            let _ = writeln!(s, "Disagreements: none");
        } else {
            let _ = writeln!(s, "Disagreements:");
            for d in &self.disagreements {
                let _ = writeln!(s, "  - {d}");
            }
        }
        s
    }

    /// One row per component, one column per source, and the legend.
    fn components_table(&self, s: &mut String) {
        let guest = self.columns.guest.is_some();
        let kvm = self.columns.kvm.is_some();
        let mut t = Columns::new()
            .right("", 2)
            .left(" ", 9)
            .left(" ", 36)
            .left(" ", 4)
            .right("", 6)
            .right(" ", 5)
            .right(" ", 7)
            .right(" ", 6)
            .left(" ", 3);
        let mut header = vec![
            "id",
            "name",
            "description",
            "u/s",
            "size B",
            "std B",
            "cmpct B",
            "+xss B",
        ];
        header.push("cpu");
        if kvm {
            t = t.left(" ", 3);
            header.push("kvm");
        }
        t = t.left(" ", 3);
        header.push("pol");
        if guest {
            t = t.left(" ", 0);
            header.push("guest");
        }
        t.push(s, &header);
        for c in &self.components {
            let cpu = match (c.cpu, c.os) {
                (true, Some(false)) if !c.supervisor => "off",
                (b, _) => mark(b),
            };
            let mut row = vec![
                c.id.to_string(),
                c.name.to_string(),
                c.description.to_string(),
                if c.supervisor { "sup" } else { "user" }.to_string(),
                or_dash(c.size),
                or_dash(c.standard_offset),
                or_dash(c.compacted_offset),
                or_dash(c.compacted_offset_xss),
                cpu.to_string(),
            ];
            if kvm {
                row.push(mark(c.kvm.unwrap_or(false)).to_string());
            }
            row.push(mark(c.policy).to_string());
            if guest {
                let g = match (c.guest_cpuid, c.guest_xcr0, c.guest_xinuse) {
                    (_, _, Some(true)) => "used",
                    (_, Some(true), _) => "on",
                    (Some(true), _, _) => "cpuid",
                    _ => "-",
                };
                row.push(g.to_string());
            }
            t.push(s, &row);
        }
        let _ = writeln!(
            s,
            "cpu: in CPUID 0xD (off: not enabled by the host OS){}",
            if kvm {
                "; kvm: in KVM_GET_SUPPORTED_CPUID"
            } else {
                ""
            }
        );
        let _ = writeln!(
            s,
            "pol: offered by the policy (supervisor state: what KVM offers)"
        );
        if guest {
            let _ = writeln!(
                s,
                "guest: cpuid = advertised to it, on = enabled in its XCR0, used = also in XINUSE"
            );
        }
    }

    /// Masks and sizes per column, then the notes.
    fn masks_table(&self, s: &mut String) {
        let t = Columns::new()
            .left("", 16)
            .right(" ", 9)
            .right(" ", 9)
            .right(" ", 10)
            .right(" ", 11)
            .right(" ", 10);
        t.push(
            s,
            &["", "XCR0", "XSS", "standard B", "compacted B", "+XSS B"],
        );
        let row = |s: &mut String, name: &str, m: &MaskColumn| {
            t.push(
                s,
                &[
                    name.to_string(),
                    format!("{:#x}", m.xcr0),
                    format!("{:#x}", m.xss),
                    m.standard_size.to_string(),
                    m.compacted_size.to_string(),
                    m.compacted_size_xss.to_string(),
                ],
            );
        };
        row(s, "host CPU", &self.columns.cpu.masks);
        if let Some(os) = self.columns.cpu.os_xcr0 {
            let _ = writeln!(
                s,
                "{}   (XGETBV(0))",
                t.cells(&["host OS".to_string(), format!("{os:#x}")])
            );
        }
        if let Some(k) = &self.columns.kvm {
            row(s, "KVM", &k.masks);
        }
        row(s, "policy", &self.columns.policy.masks);
        if let Some(g) = &self.columns.guest {
            let _ = writeln!(
                s,
                "{}   (its CPUID 0xD.0 ECX, 0xD.1 EBX)",
                t.cells(&[
                    "guest CPUID".to_string(),
                    format!("{:#x}", g.supported.xcr0_supported),
                    format!("{:#x}", g.supported.xss_supported),
                    g.sizes.standard_size_max.to_string(),
                    g.sizes.compacted_size.to_string(),
                ])
            );
            // The guest's IA32_XSS is not readable at CPL3: its column stays
            // empty. XINUSE is a mask of components like XCR0, so it goes
            // under XCR0 on a row of its own.
            let _ = writeln!(
                s,
                "{}   (XCR0 set, 0xD.0 EBX)",
                t.cells(&[
                    "guest enabled".to_string(),
                    format!("{:#x}", g.xcr0),
                    "-".to_string(),
                    g.sizes.standard_size_enabled.to_string(),
                ])
            );
            let _ = writeln!(
                s,
                "{}   (XINUSE at the end, XGETBV(1))",
                t.cells(&[
                    "guest in use".to_string(),
                    g.xinuse
                        .map_or_else(|| "n/a".to_string(), |m| format!("{m:#x}")),
                ])
            );
        }
        let hidden = &self.columns.policy.hidden_cpuid_flags;
        if !hidden.is_empty() {
            let _ = writeln!(s, "policy hides CPUID flags: {}", hidden.join(" "));
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
    }
}

impl Comparison {
    /// The human-readable report.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Hosts (the XCR0 a guest can get: from KVM where recorded, else the CPU)"
        );
        for h in &self.hosts {
            let _ = writeln!(s, "  {:<2} {}", h.label, h.file);
            let _ = writeln!(
                s,
                "     XCR0 {:#x} ({}), XSS {:#x}: {}",
                h.xcr0, h.xcr0_source, h.xss, h.name
            );
        }
        let _ = writeln!(s);
        self.components_across_table(&mut s);
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Baseline XCR0 (every host): {:#x} = {}",
            self.baseline_xcr0, self.baseline_xfeatures
        );
        let _ = writeln!(s, "  --xfeatures {}", self.baseline_xfeatures);
        if !self.baseline_dropped.is_empty() {
            let _ = writeln!(
                s,
                "  common to all hosts {:#x}, reduced to a valid XCR0 (dropped {:#x})",
                self.common_xcr0, self.baseline_dropped
            );
        }
        let _ = writeln!(s, "  common IA32_XSS: {:#x}", self.baseline_xss);
        for h in &self.hosts {
            let _ = writeln!(
                s,
                "  {:<2} baseline sizes: standard {}, compacted {}",
                h.label, h.baseline_standard_size, h.baseline_compacted_size
            );
        }
        let _ = writeln!(s);
        if self.differences.is_empty() {
            let _ = writeln!(s, "Differences: none");
        } else {
            let _ = writeln!(s, "Differences:");
            for d in &self.differences {
                let _ = writeln!(s, "  - {d}");
            }
        }
        self.flags_table(&mut s);
        self.guests_table(&mut s);
        if let Some(r) = &self.restore {
            let _ = writeln!(s);
            let _ = writeln!(
                s,
                "Restore of XSTATE_BV {:#x} with XCR0 {:#x}:",
                r.xstate_bv, r.xcr0
            );
            for h in &r.hosts {
                match &h.reason {
                    None => {
                        let _ = writeln!(s, "  {:<2} {}: restorable", h.label, h.file);
                    }
                    Some(why) => {
                        let _ = writeln!(s, "  {:<2} {}: NOT restorable: {why}", h.label, h.file);
                    }
                }
            }
        }
        s
    }

    /// The components across the hosts: size, each host's standard
    /// offset, and what of them agrees.
    fn components_across_table(&self, s: &mut String) {
        let mut t = Columns::new()
            .right("", 2)
            .left(" ", 9)
            .left(" ", 4)
            .right("", 6);
        for _ in &self.hosts {
            t = t.right(" ", 8);
        }
        t = t.left("  ", 0);
        // Host columns hold standard offsets, in bytes (spelled out: the
        // hosts are labelled A, B, ...).
        let hosts: Vec<String> = self
            .hosts
            .iter()
            .map(|h| format!("{} bytes", h.label))
            .collect();
        let mut header = vec!["id", "name", "u/s", "size B"];
        header.extend(hosts.iter().map(String::as_str));
        header.push("agreement");
        t.push(s, &header);
        for c in &self.components {
            if !c.present.iter().any(|p| *p) {
                continue;
            }
            let size = if c.sizes_agree {
                c.sizes
                    .iter()
                    .flatten()
                    .next()
                    .map(u32::to_string)
                    .unwrap_or_default()
            } else {
                "diff".into()
            };
            let mut row = vec![
                c.id.to_string(),
                c.name.to_string(),
                if c.supervisor { "sup" } else { "user" }.to_string(),
                size,
            ];
            row.extend(
                c.present
                    .iter()
                    .zip(&c.standard_offsets)
                    .map(|(p, o)| match (p, o) {
                        (false, _) => "-".to_string(),
                        (true, Some(o)) => o.to_string(),
                        (true, None) => "yes".to_string(),
                    }),
            );
            row.push(agreement(c).join(", "));
            t.push(s, &row);
        }
        let _ = writeln!(
        s,
        "(host columns: standard offset in bytes; \"yes\" for supervisor state, which has none)"
    );
    }
}

impl Comparison {
    /// Per gating CPUID flag, which sources offer it (only flags some
    /// source offers; `?` where leaves 1/7 were not recorded).
    fn flags_table(&self, s: &mut String) {
        let rows: Vec<_> = self
            .flags
            .iter()
            .filter(|f| f.present.contains(&Some(true)))
            .collect();
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "CPUID flags that need extended state (as offered):");
        let mut t = Columns::new().left("  ", 19);
        for i in 0..self.hosts.len() {
            t = t.right(if i == 0 { " " } else { "" }, 4);
        }
        let mut header = vec!["flag"];
        header.extend(self.hosts.iter().map(|h| h.label.as_str()));
        t.push(s, &header);
        for f in rows {
            let mut row = vec![f.flag.to_string()];
            row.extend(f.present.iter().map(|p| {
                match p {
                    Some(true) => "yes",
                    Some(false) => "-",
                    None => "?",
                }
                .to_string()
            }));
            t.push(s, &row);
        }
    }

    /// What each guest record says the guest enabled and paid.
    fn guests_table(&self, s: &mut String) {
        if self.guests.is_empty() {
            return;
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "Guests (from their VMMREC1 serial records):");
        for g in &self.guests {
            let _ = writeln!(
                s,
                "  {:<2} XCR0 set {:#x}, XINUSE {}, TSC {}, switch strategy {}",
                g.label,
                g.xcr0,
                g.xinuse.as_deref().unwrap_or("unknown"),
                if g.tsc_khz == 0 {
                    "unknown".to_string()
                } else {
                    format!("{} kHz", g.tsc_khz)
                },
                if g.switch_strategy.is_empty() {
                    "none"
                } else {
                    &g.switch_strategy
                }
            );
            let cycles: Vec<String> = g
                .switch_cycles
                .iter()
                .filter_map(|(n, c)| c.map(|c| format!("{n} {c}")))
                .collect();
            if !cycles.is_empty() {
                let _ = writeln!(s, "     switch cycles: {}", cycles.join(", "));
            }
            for t in &g.timings {
                let ns = t
                    .ns_per_event
                    .map(|n| format!(" = {:.2} us", n / 1000.0))
                    .unwrap_or_default();
                let _ = writeln!(
                    s,
                    "     {} [{}]: {:.0} cycles/event{ns}",
                    t.name, t.variant, t.cycles_per_event
                );
            }
            if g.records_found > 1 {
                let _ = writeln!(
                    s,
                    "     ({} records in {}; the last one is shown)",
                    g.records_found, g.file
                );
            }
        }
    }
}

/// The agreement column of one component: on which hosts, what differs,
/// whether it is in the baseline.
fn agreement(c: &ComponentAcross) -> Vec<&'static str> {
    let mut notes = vec![if c.present.iter().all(|p| *p) {
        "all"
    } else {
        "some"
    }];
    if !c.sizes_agree {
        notes.push("sizes differ");
    }
    if !c.offsets_agree {
        notes.push("offsets differ");
    }
    if !c.align_agree {
        notes.push("alignment differs");
    }
    if c.in_baseline {
        notes.push("baseline");
    }
    notes
}
