//! The `bench=copy` table of a run: the guest's cycles per copy turned into
//! ns and GB/s with the TSC rate, the price of borrowing the vector
//! registers, the crossovers they imply and the `memcpy` policy the guest
//! took from them (see `guest::bench::copy`). JSON: the `copy` object of
//! `vmm run --json`.

use std::fmt::Write as _;

use guest::bench::copy::crossover::{crossovers, Policy};
use guest::bench::copy::{Method, SAVE_INSNS};
use guest::protocol::{CopyReport, COPY_SIZES};
use guest::workloads::live::Live;
use serde::Serialize;

use super::table::Columns;

/// One measured cell.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct CopyRow {
    /// Method (`rep movsb`, `rep movsq`, `sse2`, `avx2`, `avx512`, `nt-sse2`, ...).
    pub method: &'static str,
    /// `hot` (same buffers every copy) or `cold` (rotating through a region
    /// twice the largest cache).
    pub data: &'static str,
    /// Bytes per copy.
    pub size: u64,
    /// TSC cycles per copy (fastest of the guest's trials).
    pub cycles_per_copy: f64,
    /// Nanoseconds per copy (null when the TSC rate is unknown).
    pub ns_per_copy: Option<f64>,
    /// 10^9 bytes per second (null when the TSC rate is unknown).
    pub gb_per_s: Option<f64>,
}

/// One XSAVE+XRSTOR measurement.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct BorrowRow {
    /// Save instruction: `xsave` or `xsavec` (each paired with XRSTOR).
    pub insn: &'static str,
    /// Which vector state was live: `xmm`, `ymm` or `zmm`.
    pub live: &'static str,
    /// TSC cycles per pair.
    pub cycles_per_pair: f64,
    /// Nanoseconds per pair (null when the TSC rate is unknown).
    pub ns_per_pair: Option<f64>,
}

/// Where one method beats `rep movsb` (sizes in bytes, on a powers-of-4 grid).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct MethodCrossover {
    /// The method.
    pub method: &'static str,
    /// Hot data: smallest and largest size where it beats `rep movsb`; it
    /// need not beat it at every size between (`beats_movsb_hot_runs`).
    pub beats_movsb_hot: Option<(u64, u64)>,
    /// Cold data: smallest and largest size where it beats `rep movsb`; it
    /// need not beat it at every size between (`beats_movsb_cold_runs`).
    pub beats_movsb_cold: Option<(u64, u64)>,
    /// Hot data: every stretch of consecutive grid sizes where it beats
    /// `rep movsb`, smallest first, each as [smallest, largest] (empty: at
    /// none).
    pub beats_movsb_hot_runs: Vec<(u64, u64)>,
    /// Cold data: as `beats_movsb_hot_runs`.
    pub beats_movsb_cold_runs: Vec<(u64, u64)>,
    /// Cold data: the size from which on it beats every cached method
    /// (for the non-temporal methods: where non-temporal pays).
    pub beats_cached_cold_from: Option<u64>,
    /// Cold data: every stretch of grid sizes where it beats every cached
    /// method, as `beats_movsb_hot_runs` (it may win in the middle only).
    pub beats_cached_cold_runs: Vec<(u64, u64)>,
}

/// Where borrowing the vector registers pays.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct BorrowCrossover {
    /// Live state: `xmm`, `ymm` or `zmm`.
    pub live: &'static str,
    /// Hot data: the size from which on the best vector method plus the
    /// cheapest XSAVE+XRSTOR pair beats the best string instruction.
    pub pays_hot_from: Option<u64>,
    /// Cold data: as `pays_hot_from`.
    pub pays_cold_from: Option<u64>,
    /// Hot data: every stretch of grid sizes where borrowing pays.
    pub pays_hot_runs: Vec<(u64, u64)>,
    /// Cold data: as `pays_hot_runs`.
    pub pays_cold_runs: Vec<(u64, u64)>,
}

/// The guest's `memcpy`/`memset` size policy after the run.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct PolicyView {
    /// True when it comes from this run's table, false: the default.
    pub measured: bool,
    /// `memcpy` sizes from this one up use `rep movsb` (below: the SSE2
    /// loop), unless `memcpy_nt_min` is smaller: non-temporal stores are
    /// tested first (`memcpy_steps` says what runs).
    pub memcpy_rep_min: u64,
    /// `memcpy` sizes from this one up use non-temporal stores (null: never).
    pub memcpy_nt_min: Option<u64>,
    /// What `memcpy` runs, smallest size first: each method from its
    /// `from` size on, up to the next step (up to 32 bytes, before the
    /// first: overlapping moves). Only thresholds it reaches.
    pub memcpy_steps: Vec<PolicyStep>,
    /// `memset` sizes from this one up use `rep stosb`.
    pub memset_rep_min: u64,
}

/// One step of the `memcpy` policy.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct PolicyStep {
    /// Bytes from which on `method` runs.
    pub from: u64,
    /// `sse2`, `rep movsb` or `nt-sse2`.
    pub method: &'static str,
}

/// The whole `bench=copy` result.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct CopyView {
    /// Largest cache the guest's CPUID describes, bytes (0: none).
    pub llc_bytes: u64,
    /// Bytes of each of the cold source and destination rotation regions.
    pub cold_region_bytes: u64,
    /// Every measured cell.
    pub rows: Vec<CopyRow>,
    /// XSAVE+XRSTOR pairs of the task's state at CPL3. XSAVES is CPL0-only
    /// and not timed (CPL0 is emulated on kvm_pvm hosts).
    pub borrow: Vec<BorrowRow>,
    /// Per method, where it beats `rep movsb` and cached copies.
    pub crossovers: Vec<MethodCrossover>,
    /// Per live state, where borrowing the vector registers pays.
    pub borrow_pays: Vec<BorrowCrossover>,
    /// The policy the guest's libc follows after the run.
    pub policy: PolicyView,
}

fn ns(cycles: f64, tsc_khz: u64) -> Option<f64> {
    (tsc_khz != 0).then(|| cycles * 1e6 / tsc_khz as f64)
}

impl CopyView {
    /// The view of a report's table; `None` when `bench=copy` did not run.
    pub fn new(t: &CopyReport, tsc_khz: u64) -> Option<CopyView> {
        if t.valid == 0 {
            return None;
        }
        let mut rows = Vec::new();
        for (data, cells) in [("hot", &t.hot), ("cold", &t.cold)] {
            for m in Method::ALL {
                for (i, &c) in cells[m as usize].iter().enumerate() {
                    if c <= 0.0 {
                        continue;
                    }
                    let size = CopyReport::size(i);
                    let n = ns(c, tsc_khz);
                    rows.push(CopyRow {
                        method: m.name(),
                        data,
                        size,
                        cycles_per_copy: c,
                        ns_per_copy: n,
                        gb_per_s: n.map(|n| size as f64 / n),
                    });
                }
            }
        }
        let mut borrow = Vec::new();
        for (si, insn) in SAVE_INSNS.iter().enumerate() {
            for live in Live::ALL {
                let c = t.borrow_cycles[si][live as usize];
                if c > 0.0 {
                    borrow.push(BorrowRow {
                        insn,
                        live: live.name(),
                        cycles_per_pair: c,
                        ns_per_pair: ns(c, tsc_khz),
                    });
                }
            }
        }
        let x = crossovers(t);
        let measured = |m: Method| t.methods & (1 << m as u32) != 0;
        let policy = Policy::of_report(t);
        Some(CopyView {
            llc_bytes: t.llc_bytes,
            cold_region_bytes: t.cold_region,
            rows,
            borrow,
            crossovers: Method::ALL
                .into_iter()
                .filter(|&m| measured(m))
                .map(|m| MethodCrossover {
                    method: m.name(),
                    beats_movsb_hot: x.beats_movsb_hot[m as usize].bounds(),
                    beats_movsb_cold: x.beats_movsb_cold[m as usize].bounds(),
                    beats_movsb_hot_runs: x.beats_movsb_hot[m as usize].runs().collect(),
                    beats_movsb_cold_runs: x.beats_movsb_cold[m as usize].runs().collect(),
                    beats_cached_cold_from: x.beats_cached_cold[m as usize],
                    beats_cached_cold_runs: x.beats_cached_cold_sizes[m as usize].runs().collect(),
                })
                .collect(),
            borrow_pays: Live::ALL
                .into_iter()
                .map(|l| BorrowCrossover {
                    live: l.name(),
                    pays_hot_from: x.borrow_pays_hot[l as usize],
                    pays_cold_from: x.borrow_pays_cold[l as usize],
                    pays_hot_runs: x.borrow_pays_hot_sizes[l as usize].runs().collect(),
                    pays_cold_runs: x.borrow_pays_cold_sizes[l as usize].runs().collect(),
                })
                .collect(),
            policy: PolicyView {
                measured: t.policy_measured != 0,
                memcpy_rep_min: policy.memcpy_rep_min,
                memcpy_nt_min: (policy.memcpy_nt_min != u64::MAX).then_some(policy.memcpy_nt_min),
                memcpy_steps: policy
                    .memcpy_steps()
                    .into_iter()
                    .flatten()
                    .map(|(from, m)| PolicyStep {
                        from,
                        method: m.name(),
                    })
                    .collect(),
                memset_rep_min: policy.memset_rep_min,
            },
        })
    }

    /// The table and crossovers as `vmm run` prints them.
    pub fn render(&self, s: &mut String) {
        self.render_table(s);
        let pairs: Vec<String> = self
            .borrow
            .iter()
            .map(|b| match b.ns_per_pair {
                Some(n) => format!("{} {} {n:.1} ns", b.insn, b.live),
                None => format!("{} {} {:.0} cycles", b.insn, b.live, b.cycles_per_pair),
            })
            .collect();
        let _ = writeln!(
            s,
            "  borrow (XSAVE(C)+XRSTOR of the task's state at CPL3): {}; XSAVES is CPL0-only: not timed (CPL0 is emulated on kvm_pvm)",
            if pairs.is_empty() { "-".to_string() } else { pairs.join(", ") }
        );
        self.render_crossovers(s);
        let p = &self.policy;
        let steps: Vec<String> = p
            .memcpy_steps
            .iter()
            .enumerate()
            .map(|(k, step)| match p.memcpy_steps.get(k + 1) {
                Some(next) if k == 0 => format!("{} below {}", step.method, bytes(next.from)),
                Some(next) => format!(
                    "{} from {} below {}",
                    step.method,
                    bytes(step.from),
                    bytes(next.from)
                ),
                None if k == 0 => format!("{} at every size", step.method),
                None => format!("{} from {}", step.method, bytes(step.from)),
            })
            .collect();
        let _ = writeln!(
            s,
            "  guest memcpy ({}): {}; memset rep stosb from {}",
            if p.measured { "measured" } else { "default" },
            steps.join(", "),
            bytes(p.memset_rep_min)
        );
    }

    /// Where each method beats `rep movsb` and the cached copies, and where
    /// borrowing the vector registers pays, as size ranges.
    fn render_crossovers(&self, s: &mut String) {
        // Where it holds, every stretch of sizes; "never" only when it holds
        // at none (a "from" threshold said "never" where a method won in
        // the middle and lost at the end).
        let spans = |runs: &[(u64, u64)]| {
            if runs.is_empty() {
                return "never".to_string();
            }
            let each = runs.iter().map(|&(a, b)| {
                if a == b {
                    bytes(a)
                } else {
                    format!("{}..{}", bytes(a), bytes(b))
                }
            });
            each.collect::<Vec<_>>().join(" and ")
        };
        for c in &self.crossovers {
            if c.method == Method::RepMovsb.name() {
                continue;
            }
            let _ = writeln!(
                s,
                "  {:<10} beats rep movsb hot {}, cold {}; beats cached copies cold {}",
                c.method,
                spans(&c.beats_movsb_hot_runs),
                spans(&c.beats_movsb_cold_runs),
                spans(&c.beats_cached_cold_runs)
            );
        }
        for b in &self.borrow_pays {
            let _ = writeln!(
                s,
                "  borrowing with {} live pays hot {}, cold {}",
                b.live,
                spans(&b.pays_hot_runs),
                spans(&b.pays_cold_runs)
            );
        }
    }

    /// The heading and the grid: ns per copy and GB/s per data temperature,
    /// size and method (sizes no method measured left out).
    fn render_table(&self, s: &mut String) {
        let methods: Vec<&'static str> = self.crossovers.iter().map(|c| c.method).collect();
        let _ = writeln!(
            s,
            "copy (ns per copy and GB/s; cold = rotating through 2 x {} MiB, largest cache {} KiB)",
            self.cold_region_bytes >> 20,
            self.llc_bytes >> 10
        );
        let mut t = Columns::new().left("  ", 4).right(" ", 6);
        for _ in &methods {
            t = t.right(" ", 14);
        }
        let mut head = vec!["data".to_string(), "size".to_string()];
        head.extend(methods.iter().map(|m| m.to_string()));
        t.push(s, &head);
        for data in ["hot", "cold"] {
            for i in 0..COPY_SIZES {
                let size = CopyReport::size(i);
                let cells: Vec<String> = methods
                    .iter()
                    .map(|m| {
                        self.rows
                            .iter()
                            .find(|r| r.data == data && r.size == size && r.method == *m)
                            .map_or("-".to_string(), |r| match (r.ns_per_copy, r.gb_per_s) {
                                (Some(n), Some(g)) => format!("{n:.1} {g:.1}"),
                                _ => format!("{:.0} cyc", r.cycles_per_copy),
                            })
                    })
                    .collect();
                if cells.iter().all(|c| c == "-") {
                    continue;
                }
                let mut row = vec![data.to_string(), bytes(size)];
                row.extend(cells);
                t.push(s, &row);
            }
        }
    }
}

/// `Policy` is the guest's; the VMM only shows it.
const _: Policy = Policy::DEFAULT;

/// A size on the grid as text: `16B`, `4K`, `64M`.
fn bytes(n: u64) -> String {
    if n == u64::MAX {
        "never".to_string()
    } else if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{}K", n >> 10)
    } else {
        format!("{n}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_of_a_table_converts_cycles_with_the_tsc_rate() {
        let mut t = CopyReport::EMPTY;
        t.valid = 1;
        t.methods = 1 << Method::RepMovsb as u32 | 1 << Method::Sse2 as u32;
        t.hot[Method::RepMovsb as usize][0] = 30.0;
        t.hot[Method::Sse2 as usize][0] = 3.0;
        t.hot[Method::RepMovsb as usize][1] = 40.0;
        t.hot[Method::Sse2 as usize][1] = 50.0;
        t.borrow_cycles[1][0] = 300.0;
        t.memcpy_rep_min = 64;
        t.memcpy_nt_min = u64::MAX;
        t.memset_rep_min = 64;
        t.policy_measured = 1;
        // 3 GHz: 3 cycles = 1 ns.
        let v = CopyView::new(&t, 3_000_000).unwrap();
        assert_eq!(v.rows.len(), 4);
        let sse16 = v
            .rows
            .iter()
            .find(|r| r.method == "sse2" && r.size == 16)
            .unwrap();
        assert_eq!(sse16.ns_per_copy, Some(1.0));
        assert_eq!(sse16.gb_per_s, Some(16.0));
        assert_eq!(v.borrow.len(), 1);
        assert_eq!((v.borrow[0].insn, v.borrow[0].live), ("xsavec", "xmm"));
        assert_eq!(v.borrow[0].ns_per_pair, Some(100.0));
        let sse = v.crossovers.iter().find(|c| c.method == "sse2").unwrap();
        assert_eq!(sse.beats_movsb_hot, Some((16, 16)));
        assert_eq!(v.policy.memcpy_nt_min, None);
        let mut s = String::new();
        v.render(&mut s);
        assert!(
            s.contains("  hot     16B       10.0 1.6       1.0 16.0\n"),
            "{s}"
        );
        assert!(s.contains("xsavec xmm 100.0 ns"), "{s}");
        assert!(
            s.contains("sse2       beats rep movsb hot 16B, cold never"),
            "{s}"
        );
        assert!(
            s.contains("guest memcpy (measured): sse2 below 64B, rep movsb from 64B; memset"),
            "{s}"
        );
        assert!(CopyView::new(&CopyReport::EMPTY, 1).is_none());
    }

    /// A non-temporal copy that beats the cached ones in the middle of the
    /// grid and loses at its end was said to beat them "never" (issue 38
    /// §5): it is shown by the stretch where it wins.
    #[test]
    fn beating_cached_copies_in_the_middle_is_shown_as_its_stretch() {
        let mut t = CopyReport::EMPTY;
        t.valid = 1;
        t.methods = 1 << Method::RepMovsb as u32 | 1 << Method::NtSse2 as u32;
        for i in 0..COPY_SIZES {
            t.cold[Method::RepMovsb as usize][i] = 100.0;
            // Wins from 16 KiB (index 5) to 1 MiB (index 8), loses after.
            let wins = (5..=8).contains(&i);
            t.cold[Method::NtSse2 as usize][i] = if wins { 90.0 } else { 110.0 };
        }
        t.memcpy_rep_min = u64::MAX;
        t.memcpy_nt_min = u64::MAX;
        t.memset_rep_min = u64::MAX;
        let v = CopyView::new(&t, 0).unwrap();
        let nt = v.crossovers.iter().find(|c| c.method == "nt-sse2").unwrap();
        assert_eq!(nt.beats_cached_cold_from, None, "not to the end");
        assert_eq!(nt.beats_cached_cold_runs, vec![(16 << 10, 1 << 20)]);
        let mut s = String::new();
        v.render(&mut s);
        assert!(s.contains("beats cached copies cold 16K..1M"), "{s}");
    }

    /// A method that wins at both ends of the grid and loses between is
    /// shown as two stretches, not as one range over the sizes it loses.
    #[test]
    fn crossovers_with_a_gap_are_shown_as_stretches() {
        let mut t = CopyReport::EMPTY;
        t.valid = 1;
        t.methods = 1 << Method::RepMovsb as u32 | 1 << Method::RepMovsq as u32;
        for i in 0..COPY_SIZES {
            t.hot[Method::RepMovsb as usize][i] = 100.0;
            // Wins at 16 B and from 16 MiB (indices 10 and 11), loses between.
            let wins = i == 0 || i >= 10;
            t.hot[Method::RepMovsq as usize][i] = if wins { 90.0 } else { 110.0 };
        }
        t.memcpy_rep_min = u64::MAX;
        t.memcpy_nt_min = u64::MAX;
        t.memset_rep_min = u64::MAX;
        let v = CopyView::new(&t, 0).unwrap();
        let q = v
            .crossovers
            .iter()
            .find(|c| c.method == "rep movsq")
            .unwrap();
        assert_eq!(q.beats_movsb_hot, Some((16, 64 << 20)));
        assert_eq!(q.beats_movsb_hot_runs, vec![(16, 16), (16 << 20, 64 << 20)]);
        assert!(q.beats_movsb_cold_runs.is_empty());
        let mut s = String::new();
        v.render(&mut s);
        assert!(
            s.contains("rep movsq  beats rep movsb hot 16B and 16M..64M, cold never"),
            "{s}"
        );
        assert!(
            s.contains("guest memcpy (default): sse2 at every size"),
            "{s}"
        );
    }

    /// Non-temporal stores are tested first: under a threshold below the
    /// `rep movsb` one, `rep movsb` never runs and is not shown as running.
    #[test]
    fn policy_steps_follow_what_memcpy_runs() {
        let mut t = CopyReport::EMPTY;
        t.valid = 1;
        t.methods = 1 << Method::RepMovsb as u32 | 1 << Method::Sse2 as u32;
        t.memcpy_rep_min = 64 << 20;
        t.memcpy_nt_min = 32 << 20;
        t.memset_rep_min = 64 << 20;
        t.policy_measured = 1;
        let v = CopyView::new(&t, 0).unwrap();
        let steps: Vec<(u64, &str)> = v
            .policy
            .memcpy_steps
            .iter()
            .map(|p| (p.from, p.method))
            .collect();
        assert_eq!(steps, vec![(33, "sse2"), (32 << 20, "nt-sse2")]);
        let mut s = String::new();
        v.render(&mut s);
        assert!(
            s.contains("guest memcpy (measured): sse2 below 32M, nt-sse2 from 32M; memset rep stosb from 64M"),
            "{s}"
        );
        t.memcpy_rep_min = 64 << 10;
        let v = CopyView::new(&t, 0).unwrap();
        let mut s = String::new();
        v.render(&mut s);
        assert!(
            s.contains("sse2 below 64K, rep movsb from 64K below 32M, nt-sse2 from 32M;"),
            "{s}"
        );
    }
}
