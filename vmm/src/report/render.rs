//! The human table of `vmm run`: the policy, what the guest saw and did,
//! its workload results and how the run ended.

use std::fmt::Write as _;

use xstate::XfeatureMask;

use super::hex;
use super::summary::{ResultRow, RunSummary};
use super::table::{or_dash, Columns};

impl RunSummary {
    /// The human table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        self.policy_section(&mut s);
        self.guest_section(&mut s);
        self.results_section(&mut s);
        if let Some(c) = &self.copy {
            c.render(&mut s);
        }
        // `openssl_aes_128_cbc_mb_per_s` (JSON) is the yardsticks' CBC
        // 8192 B figure: the table below prints it, so no line of its own.
        s.push_str(&super::yardstick::render(
            &self.openssl_yardsticks,
            !self.seed_xts_4k_ice_lake.is_empty(),
        ));
        self.notices_section(&mut s);
        self.smp_section(&mut s);
        if let Some(c) = &self.crash {
            let _ = writeln!(s, "guest crashed: {}", c.reason);
            let _ = write!(s, "{}", c.registers);
        }
        if let Some(r) = &self.stopped_at {
            let _ = writeln!(s, "guest stopped by --timeout at:");
            let _ = write!(s, "{r}");
        }
        // The other CPUs of an SMP guest: a hang is often one CPU spinning
        // while another waits for it.
        let others = self.smp.iter().flat_map(|m| &m.vcpus).skip(1);
        for (i, r) in others.filter_map(|v| Some((v.index, v.stopped_at.as_ref()?))) {
            let _ = writeln!(s, "vCPU {i} stopped by --timeout at:");
            let _ = write!(s, "{r}");
        }
        let _ = writeln!(
            s,
            "exit: {} ({}), {} exits, setup {:.1} ms, run {:.1} ms",
            or_dash(self.exit_status),
            self.exit_description,
            self.exits,
            self.timing_ms.setup,
            self.timing_ms.run
        );
        s
    }

    /// The vCPUs of an SMP run, one line each, and their parallel table.
    fn smp_section(&self, s: &mut String) {
        if let Some(smp) = &self.smp {
            let _ = writeln!(
                s,
                "vCPUs: {} (APs started by {}, {} irqchip); the run's end came from vCPU {}",
                smp.vcpus.len(),
                smp.ap_start.map_or("-", |a| a.name()),
                smp.irqchip.name(),
                smp.ended_by
            );
            if let (Some(n), Some(from)) = (smp.cpus_wanted, &smp.cpus_source) {
                let _ = writeln!(s, "  the guest counted {n} CPUs (from {from})");
            }
            for v in &smp.vcpus {
                let mask = |m: Option<xstate::XfeatureMask>| {
                    m.map_or("-".to_string(), |m| format!("{:#x}", m.bits()))
                };
                let _ = writeln!(
                    s,
                    "  vcpu{}: guest xcr0 {} xinuse {} final xcr0 {}, {} results, {} exits, {} xsave fetches; {}",
                    v.index,
                    mask(v.guest_xcr0),
                    mask(v.guest_xinuse),
                    mask(v.final_xcr0),
                    v.results.len(),
                    v.exits,
                    v.xstate_stats.fetches,
                    v.end
                );
            }
            if !smp.parallel.is_empty() {
                s.push_str(&parallel_table(&smp.parallel));
            }
        }
    }

    /// The skipped rows, the guest's exception, and what the VMM refused or
    /// did not keep: reports, requests, markers, serial bytes, snapshots.
    fn notices_section(&self, s: &mut String) {
        for sk in &self.skipped {
            let _ = writeln!(s, "  skipped {} {}: {}", sk.name, sk.variant, sk.reason);
        }
        if let Some(f) = &self.fault {
            let _ = writeln!(
                s,
                "guest exception {}({:#x}) at rip {} (cr2 {}, cpl {})",
                f.mnemonic, f.error_code, f.rip, f.cr2, f.cpl
            );
        }
        for e in &self.report_errors {
            let _ = writeln!(s, "report refused: {e}");
        }
        if self.report_errors_dropped != 0 {
            let _ = writeln!(
                s,
                "report refused: {} more (only the first {} reasons are kept)",
                self.report_errors_dropped,
                self.report_errors.len()
            );
        }
        for e in &self.refused_requests {
            let _ = writeln!(s, "request refused: {e}");
        }
        let unlisted = self.requests_refused - self.refused_requests.len() as u64;
        if unlisted != 0 {
            let _ = writeln!(s, "request refused: {unlisted} more");
        }
        let dropped = [
            (self.reports_dropped, "earlier valid reports replaced"),
            (self.marks_dropped, "benchmark markers"),
            (self.serial_bytes_dropped, "bytes of older serial output"),
        ];
        for (n, what) in dropped.iter().filter(|(n, _)| *n != 0) {
            let _ = writeln!(s, "not kept: {n} {what}");
        }
        for e in &self.snapshot_errors {
            let _ = writeln!(s, "snapshot not written (the guest was resumed): {e}");
        }
    }

    /// The workload results table with its legend, how the native figures and
    /// the huge pages were obtained, and the rows found invalid.
    fn results_section(&self, s: &mut String) {
        if !self.results.is_empty() {
            let _ = writeln!(s, "results");
            let t = Columns::new()
                .left("  ", 14)
                .left(" ", 26)
                .right(" ", 9)
                .right(" ", 12)
                .left(" ", 6)
                .left(" ", 5)
                .right(" ", 10)
                .left("  ", 0);
            t.push(
                s,
                &[
                    "workload",
                    "variant",
                    "size",
                    "throughput",
                    "unit",
                    "check",
                    "native (x)",
                    "per op",
                ],
            );
            for r in &self.results {
                let (v, unit) = match (r.mb_per_s, r.gflops, r.events_per_s) {
                    (Some(v), _, _) => (format!("{v:.2}"), "MB/s"),
                    (_, Some(v), _) => (format!("{v:.2}"), "GFLOPS"),
                    (_, _, Some(v)) => (format!("{v:.0}"), "1/s"),
                    _ if r.invalid.is_some() => ("invalid".to_string(), "-"),
                    _ => ("-".to_string(), "-"),
                };
                t.push(
                    s,
                    &[
                        r.name.clone(),
                        r.variant.clone(),
                        size_cell(r),
                        v,
                        unit.to_string(),
                        r.check.to_string(),
                        or_dash(r.native_ratio.map(|x| match &r.native_spread {
                            Some(sp) => format!(
                                "{x:.3} ({:.2}..{:.2}){}",
                                sp.min,
                                sp.max,
                                if sp.noisy { " ~" } else { "" }
                            ),
                            // Timed once, after the guest: no spread to give.
                            None => format!("{x:.3} once"),
                        })),
                        per_op_cell(r),
                    ],
                );
            }
            let _ = writeln!(
                s,
                "  size: B = message bytes, n = matrix order (n x n), ev = events timed"
            );
            if self.results.iter().any(|r| r.native_ratio.is_some()) {
                let _ = writeln!(
                    s,
                    "  native = guest throughput / the same code on the host, same run"
                );
            }
            if self
                .results
                .iter()
                .any(|r| r.native_ratio.is_some() && r.native_spread.is_none())
            {
                let _ = writeln!(
                    s,
                    "  once: the host's side ran once, after the guest (not interleaved \
                     repetitions): no spread, a slow spell of either side is not seen"
                );
            }
            self.native_note(s);
            self.hugepages_notes(s);
            self.restored_memory_note(s);
            for r in self.results.iter().filter(|r| r.invalid.is_some()) {
                let _ = writeln!(
                    s,
                    "  invalid: {} {} {}: {}",
                    r.name,
                    r.variant,
                    size_cell(r),
                    r.invalid.as_deref().unwrap_or_default()
                );
            }
        }
    }

    /// How a restored guest's pages reached its RAM, and when all were in.
    fn restored_memory_note(&self, s: &mut String) {
        if let Some(m) = &self.restored_memory {
            let how = match &m.why_up_front {
                None => format!("on demand, {} page faults served", m.faults),
                Some(why) => format!("read up front ({why})"),
            };
            let _ = writeln!(
                s,
                "  restored memory: {how}; every page in and verified after {:.1} ms",
                m.fill_ms
            );
        }
    }

    /// How guest RAM (and the native side's memory) was backed: hugetlbfs or
    /// transparent huge pages, and how much of it was in huge pages.
    fn hugepages_notes(&self, s: &mut String) {
        if let Some(h) = self.hugepages.as_ref().filter(|h| h.backing == "hugetlbfs") {
            let _ = writeln!(
                s,
                "  hugepages: hugetlbfs (2 MiB pages, reserved at start); {} of {} KiB of guest RAM touched in them",
                h.hugetlb_kib
                    .map_or("unknown".to_string(), |k| k.to_string()),
                h.ram_kib
            );
        } else if let Some(h) = &self.hugepages {
            let _ = writeln!(
                s,
                "  hugepages: {}; AnonHugePages {} of {} KiB of guest RAM",
                if h.advised {
                    "MADV_HUGEPAGE".to_string()
                } else {
                    format!("not advised: {}", h.error.as_deref().unwrap_or("?"))
                },
                h.anon_huge_kib
                    .map_or("unknown".to_string(), |k| k.to_string()),
                h.ram_kib
            );
        }
        if let Some(n) = self.hugepages.as_ref().and_then(|h| h.native.as_ref()) {
            let how = match n.backing.as_str() {
                "hugetlbfs" => "2 MiB hugetlb pages",
                "thp" => "MADV_HUGEPAGE",
                other => other,
            };
            let _ = writeln!(
                s,
                "  hugepages, native side: {how} on its {} KiB of memory, {} KiB of it in huge pages{}",
                n.scratch_kib,
                n.huge_kib.map_or("unknown".to_string(), |k| k.to_string()),
                n.fallback
                    .as_deref()
                    .map_or(String::new(), |f| format!(" ({f})"))
            );
        }
    }

    /// How the native column was measured: which code ran on the host, and
    /// how guest and native repetitions were paired.
    fn native_note(&self, s: &mut String) {
        if let Some(n) = &self.native {
            let what = match n.code {
                "guest-image" => format!(
                    "the guest kernel's own code (mapped in the VMM, entry {})",
                    n.entry.as_deref().unwrap_or("?")
                ),
                _ => format!(
                    "the VMM's build of the same source ({})",
                    n.fallback_reason.as_deref().unwrap_or("?")
                ),
            };
            let how = if n.part_pairs > 0 {
                format!(
                    "guest and native alternating part by part, median of the row's part pairs \
                     ({} in all), (min..max) of its {} repetitions",
                    n.part_pairs, n.reps_per_row
                )
            } else {
                format!(
                    "median of {} interleaved guest/native repetitions per row (min..max)",
                    n.reps_per_row
                )
            };
            let _ = writeln!(
                s,
                "  native: {how}; ran {what}; ~ = spread wider than the distance from 1.0 ({} rows)",
                n.noisy_rows
            );
        }
    }

    /// What the guest saw and set: its XCR0 and XINUSE, the CPUID 0xD sizes,
    /// the XSAVE variants, the switch strategy and the component table.
    fn guest_section(&self, s: &mut String) {
        let _ = writeln!(s, "guest");
        let _ = writeln!(s, "  XCR0 set          {}", mask_names(self.guest_xcr0));
        if self.guest_xcr0_hardware.is_some() && self.guest_xcr0_hardware != self.guest_xcr0 {
            let _ = writeln!(
                s,
                "  XCR0 in hardware  {} at CPL3 (the hypervisor does not load the guest's XCR0)",
                mask_names(self.guest_xcr0_hardware)
            );
        }
        let _ = writeln!(s, "  XINUSE at end     {}", mask_names(self.guest_xinuse));
        if let Some(l) = &self.linux_xstate {
            // Linux's own account, then what differs from vmm's layout.
            for line in &l.lines {
                let _ = writeln!(s, "  linux  {line}");
            }
            let verdict = if l.mismatches.is_empty() {
                "every value agrees with vmm's layout".to_string()
            } else {
                l.mismatches.join("; ")
            };
            let _ = writeln!(s, "  linux vs vmm      {verdict}");
        }
        if let Some(c) = &self.guest_cpuid {
            let _ = writeln!(
                s,
                "  CPUID 0xD sizes   max {} B, enabled {} B, compacted {} B (xstate crate: {} / {} B)",
                c.sizes.standard_size_max,
                c.sizes.standard_size_enabled,
                c.sizes.compacted_size,
                c.sizes.computed_standard_size,
                c.sizes.computed_compacted_size
            );
            let _ = writeln!(
                s,
                "  XSAVE variants    {}",
                c.sizes.xsave_variants.join(" ")
            );
            if let Some(st) = &self.switch_strategy {
                let figures: Vec<String> = self
                    .switch_cycles
                    .iter()
                    .map(|f| format!("{} {}", f.strategy, f.cycles))
                    .collect();
                let _ = writeln!(
                    s,
                    "  switch strategy   {st} (measured at boot, cycles per switch: {})",
                    figures.join(", ")
                );
            }
            let t = Columns::new()
                .left("  ", 3)
                .left(" ", 12)
                .right(" ", 6)
                .right(" ", 10)
                .right(" ", 11);
            t.push(
                s,
                &["id", "component", "size B", "standard B", "compacted B"],
            );
            for r in &c.components {
                t.push(
                    s,
                    &[
                        r.id.to_string(),
                        r.name.to_string(),
                        r.size.to_string(),
                        r.standard_offset.to_string(),
                        or_dash(r.compacted_offset),
                    ],
                );
            }
        }
    }

    /// The policy: the XCR0 asked for and what KVM allowed, the CPUID flags
    /// hidden and whether KVM honoured the table, the sizes and the initial
    /// xstate.
    fn policy_section(&self, s: &mut String) {
        let _ = writeln!(s, "xstate policy");
        let _ = writeln!(
            s,
            "  KVM supports      {:#x} ({})",
            self.kvm_xfeatures, self.kvm_xfeatures
        );
        let _ = writeln!(
            s,
            "  guest CPUID       {:#x} ({})",
            self.policy_xfeatures, self.policy_xfeatures_names
        );
        if !self.hidden_cpuid_flags.is_empty() {
            let _ = writeln!(
                s,
                "  hidden flags      {}",
                self.hidden_cpuid_flags.join(" ")
            );
        }
        if self.kvm_cpuid_honored == Some(false) {
            let _ = writeln!(
                s,
                "  KVM's CPUID       {} (KVM ignored the policy's CPUID; XCR0 limited by the boot hint)",
                hex::or_dash(self.kvm_cpuid_xfeatures)
            );
            if !self.exposed_despite_policy.is_empty() {
                let _ = writeln!(
                    s,
                    "  exposed anyway    {}",
                    self.exposed_despite_policy.join(" ")
                );
            }
        }
        let _ = writeln!(
            s,
            "  xsave size        standard {} B, compacted {} B",
            self.standard_size, self.compacted_size
        );
        let _ = writeln!(s, "  initial xstate    {}", self.init_xstate);
    }
}

/// A mask as `0x7 (x87|sse|avx)`; `-` when unknown.
fn mask_names(m: Option<XfeatureMask>) -> String {
    m.map_or_else(|| "-".into(), |m| format!("{m:#x} ({m})"))
}

/// The size cell with its unit: `8192 B`, `n=256`, `100000 ev`.
fn size_cell(r: &ResultRow) -> String {
    match r.size_unit {
        "bytes" => format!("{} B", r.size),
        "matrix order" => format!("n={}", r.size),
        _ => format!("{} ev", r.size),
    }
}

/// What one operation costs, where that means something: ns per 16-byte
/// AES block, TSC cycles per flop, TSC cycles per event (plus bytes per
/// save for context switches); empty for invalid and untimed rows.
fn per_op_cell(r: &ResultRow) -> String {
    // Invalid rows, and checks the guest did not time (zero cycles).
    if r.invalid.is_some() || r.cycles == 0 {
        return String::new();
    }
    match r.size_unit {
        "bytes" => r
            .ns_per_block
            .map_or_else(String::new, |ns| format!("{ns:.1} ns/block")),
        "matrix order" => format!("{:.2} cycles/flop", r.cycles_per_unit),
        _ => match r.bytes_per_save {
            Some(b) => format!("{:.0} cycles, {b} B/save", r.cycles_per_unit),
            None => format!("{:.0} cycles", r.cycles_per_unit),
        },
    }
}

/// The `bench=parallel` rows: one vCPU, all vCPUs, scaling, and the same
/// against as many native threads.
fn parallel_table(rows: &[super::ParallelRow]) -> String {
    let cols = Columns::new()
        .left("  ", 12)
        .left(" ", 16)
        .right(" ", 6)
        .right(" ", 7)
        .right(" ", 10)
        .right(" ", 10)
        .right(" ", 8)
        .right(" ", 6)
        .right(" ", 10)
        .right(" ", 7)
        .left(" ", 4);
    let fig = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let r2 = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let mut s = String::from("parallel (bench=parallel): vCPU 0 alone, then every vCPU at once\n");
    let mut flagged = false;
    s.push_str(&cols.line(&[
        "workload", "variant", "size", "unit", "1 vCPU", "N vCPUs", "scaling", "eff.", "N native",
        "ratio", "check",
    ]));
    for r in rows {
        // A row with noise shows its ratios with `~`: not findings.
        let noisy = |v: String| {
            if r.noise.is_empty() || v == "-" {
                v
            } else {
                format!("~{v}")
            }
        };
        flagged |= !r.noise.is_empty();
        s.push_str(&cols.line(&[
            r.name.clone(),
            r.variant.clone(),
            r.size.to_string(),
            r.unit.to_string(),
            fig(r.one_vcpu),
            fig(r.aggregate),
            noisy(r2(r.scaling)),
            noisy(r2(r.efficiency)),
            fig(r.native_aggregate),
            noisy(r2(r.native_ratio)),
            r.check.to_string(),
        ]));
        let per: Vec<String> = r
            .per_vcpu
            .iter()
            .zip(
                r.per_vcpu_native_ratio
                    .iter()
                    .map(Some)
                    .chain(std::iter::repeat(None)),
            )
            .enumerate()
            .map(|(i, (g, n))| {
                format!(
                    "vcpu{i} {} (native ratio {})",
                    fig(*g),
                    r2(n.copied().flatten())
                )
            })
            .collect();
        let _ = writeln!(s, "    {}", per.join(", "));
        for why in &r.noise {
            let _ = writeln!(s, "    noise: {why}");
        }
    }
    if flagged {
        s.push_str(
            "  ~ each phase is timed once: a host busy in one phase and not the other \
             gives figures no quiet machine can; rerun on a quiet host\n",
        );
    }
    s
}
