//! The SMP scaling rows (`bench=parallel`): each AES-128-CTR and DGEMM
//! variant measured on vCPU 0 alone and on every vCPU at once in the same
//! run, their aggregate and scaling, and the same code on as many host
//! threads (filled in by `native::attach_parallel`).
//!
//! The guest marks the rows' variants with the phase
//! ([`SOLO_SUFFIX`]: vCPU 0 alone; [`SMP_SUFFIX`]: all together, each
//! vCPU's rows in its own report); this module pairs them up again.

use guest::bench::parallel::{split_variant, SMP_SUFFIX, SOLO_SUFFIX};
use serde::Serialize;

use super::row_id::RowId;

/// What pairing needs of one result row (the run's rows are converted
/// with `From<&ResultRow>` in `summary`).
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// Workload name.
    pub name: String,
    /// Variant as reported (with the phase suffix for guest rows).
    pub variant: String,
    /// Problem size.
    pub size: u64,
    /// Throughput in `unit`.
    pub throughput: Option<f64>,
    /// Unit of `throughput`.
    pub unit: &'static str,
    /// Whether its self-check held.
    pub pass: bool,
}

impl Measured {
    /// The row's identity ([`RowId`]), with `variant` as reported.
    pub fn id(&self) -> RowId<'_> {
        RowId {
            name: &self.name,
            variant: &self.variant,
            size: self.size,
        }
    }

    /// The identity with `base` (the variant without its phase suffix) as
    /// the variant: what the solo and the SMP phase of one variant share.
    fn in_phase<'a>(&'a self, base: &'a str) -> RowId<'a> {
        RowId {
            name: &self.name,
            variant: base,
            size: self.size,
        }
    }
}

/// One workload variant measured alone and on every vCPU at once.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ParallelRow {
    /// Workload name (`aes-128-ctr`, `dgemm`).
    pub name: String,
    /// ISA variant, without the phase suffix.
    pub variant: String,
    /// Problem size (message bytes, matrix order).
    pub size: u64,
    /// Unit of every throughput in the row (`MB/s`, `GFLOPS`).
    pub unit: &'static str,
    /// `pass` when every measurement's self-check held, else `fail`.
    pub check: &'static str,
    /// vCPUs that ran it together.
    pub vcpus: u32,
    /// Throughput of vCPU 0 alone (the others waiting), same run.
    pub one_vcpu: Option<f64>,
    /// Throughput of each vCPU while all ran it, by vCPU index (null for a
    /// vCPU without the row, e.g. an XCR0 that does not allow the variant).
    pub per_vcpu: Vec<Option<f64>>,
    /// Sum of `per_vcpu`.
    pub aggregate: Option<f64>,
    /// `aggregate / one_vcpu`: the speed-up of all vCPUs over one.
    pub scaling: Option<f64>,
    /// `scaling / vcpus` (1.0 is perfect scaling).
    pub efficiency: Option<f64>,
    /// The same code on one host thread.
    pub native_one_thread: Option<f64>,
    /// The same code on `vcpus` host threads at once, per thread.
    pub native_per_thread: Vec<Option<f64>>,
    /// Sum of `native_per_thread`.
    pub native_aggregate: Option<f64>,
    /// `aggregate / native_aggregate`.
    pub native_ratio: Option<f64>,
    /// Per vCPU: its throughput over the native thread of the same index.
    pub per_vcpu_native_ratio: Vec<Option<f64>>,
    /// Why the row's figures cannot all be true of one quiet machine
    /// (empty when nothing says so): each phase is timed once, so a
    /// neighbour's load that slows one phase and not the other shows as
    /// impossible scaling or a guest faster than its host. `scaling`,
    /// `efficiency` and `native_ratio` of a row with a reason are noise,
    /// not findings.
    pub noise: Vec<String>,
}

/// Scaling may exceed the vCPU count by this factor (timer granularity,
/// turbo) before it is called impossible.
pub const SCALING_SLACK: f64 = 1.10;

/// A guest may beat the same code on the host by this factor (measurement
/// spread of a quiet host) before one side is called slowed.
pub const NATIVE_SLACK: f64 = 1.15;

/// vCPUs running the same code at once may differ by this factor before
/// they are said not to have run together.
pub const PER_VCPU_SPREAD: f64 = 1.5;

/// The reasons `row`'s figures are noise: what no quiet machine can give.
pub fn noise(row: &ParallelRow) -> Vec<String> {
    let mut why = Vec::new();
    if let Some(s) = row
        .scaling
        .filter(|s| row.vcpus > 0 && *s > f64::from(row.vcpus) * SCALING_SLACK)
    {
        why.push(format!(
            "scaling {s:.2}x on {} vCPUs is more than they can give: vCPU 0 alone was slowed",
            row.vcpus
        ));
    }
    if let Some(r) = row.native_ratio.filter(|r| *r > NATIVE_SLACK) {
        why.push(format!(
            "the guest beat {} host threads running the same code ({r:.2}x): the native run was slowed",
            row.native_per_thread.len()
        ));
    }
    let per: Vec<f64> = row
        .per_vcpu
        .iter()
        .flatten()
        .copied()
        .filter(|v| *v > 0.0)
        .collect();
    if per.len() > 1 {
        let (lo, hi) = per
            .iter()
            .fold((f64::MAX, 0.0f64), |(l, h), v| (l.min(*v), h.max(*v)));
        if hi / lo > PER_VCPU_SPREAD {
            why.push(format!(
                "the vCPUs differ {:.2}x on the same code: they did not all run at once",
                hi / lo
            ));
        }
    }
    why
}

/// Pair the phases up: one row per variant vCPU 0 measured alone.
/// `per_vcpu[i]` is vCPU i's rows (vCPU 0's include its solo rows).
pub fn parallel_rows(per_vcpu: &[Vec<Measured>]) -> Vec<ParallelRow> {
    let Some(bsp) = per_vcpu.first() else {
        return Vec::new();
    };
    bsp.iter()
        .filter_map(|solo| {
            let (base, phase) = split_variant(&solo.variant)?;
            (phase == SOLO_SUFFIX).then_some((solo, base))
        })
        .map(|(solo, base)| {
            let together: Vec<Option<&Measured>> = per_vcpu
                .iter()
                .map(|rows| {
                    rows.iter().find(|r| {
                        split_variant(&r.variant).is_some_and(|(b, phase)| {
                            phase == SMP_SUFFIX && r.in_phase(b) == solo.in_phase(base)
                        })
                    })
                })
                .collect();
            let per: Vec<Option<f64>> = together
                .iter()
                .map(|r| r.and_then(|r| r.throughput))
                .collect();
            let ran = together.iter().flatten().count() as u32;
            let aggregate = sum(&per);
            let one = solo.throughput;
            let scaling = ratio(aggregate, one);
            let pass = solo.pass && together.iter().flatten().all(|r| r.pass);
            ParallelRow {
                name: solo.name.clone(),
                variant: base.to_string(),
                size: solo.size,
                unit: solo.unit,
                check: if pass { "pass" } else { "fail" },
                vcpus: ran,
                one_vcpu: one,
                per_vcpu: per,
                aggregate,
                scaling,
                efficiency: scaling.filter(|_| ran > 0).map(|s| s / f64::from(ran)),
                native_one_thread: None,
                native_per_thread: Vec::new(),
                native_aggregate: None,
                native_ratio: None,
                per_vcpu_native_ratio: Vec::new(),
                noise: Vec::new(),
            }
        })
        .map(|mut row| {
            row.noise = noise(&row);
            row
        })
        .collect()
}

/// Fill the native columns of `rows` from one host thread's rows (`solo`)
/// and each of N concurrent threads' rows (`threads`), matched by name,
/// variant and size.
pub fn attach_native(rows: &mut [ParallelRow], solo: &[Measured], threads: &[Vec<Measured>]) {
    let find = |rows: &[Measured], p: &ParallelRow| {
        let want = RowId {
            name: &p.name,
            variant: &p.variant,
            size: p.size,
        };
        rows.iter()
            .find(|r| r.id() == want)
            .and_then(|r| r.throughput)
    };
    for p in rows.iter_mut() {
        p.native_one_thread = find(solo, p);
        p.native_per_thread = threads.iter().map(|t| find(t, p)).collect();
        p.native_aggregate = sum(&p.native_per_thread);
        p.native_ratio = ratio(p.aggregate, p.native_aggregate);
        p.per_vcpu_native_ratio = p
            .per_vcpu
            .iter()
            .enumerate()
            .map(|(i, g)| ratio(*g, p.native_per_thread.get(i).copied().flatten()))
            .collect();
        p.noise = noise(p);
    }
}

/// The sum of the figures present; `None` when none is.
fn sum(v: &[Option<f64>]) -> Option<f64> {
    let present: Vec<f64> = v.iter().flatten().copied().collect();
    (!present.is_empty()).then(|| present.iter().sum())
}

/// `a / b` when both are known and `b` is positive.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, variant: &str, mb: f64) -> Measured {
        Measured {
            name: name.into(),
            variant: variant.into(),
            size: 8192,
            throughput: Some(mb),
            unit: "MB/s",
            pass: true,
        }
    }

    #[test]
    fn phases_pair_up_and_native_attaches() {
        let v0 = vec![
            row("aes-128-ctr", "vaes/solo", 1000.0),
            row("aes-128-ctr", "vaes/smp", 950.0),
            row("aes-128-ctr", "aesni-sse", 1.0),
        ];
        let v1 = vec![row("aes-128-ctr", "vaes/smp", 970.0)];
        let mut rows = parallel_rows(&[v0, v1]);
        assert_eq!(rows.len(), 1);
        let p = &rows[0];
        assert_eq!((p.variant.as_str(), p.vcpus, p.unit), ("vaes", 2, "MB/s"));
        assert_eq!(p.per_vcpu, vec![Some(950.0), Some(970.0)]);
        assert_eq!(p.aggregate, Some(1920.0));
        assert_eq!(p.scaling, Some(1.92));
        assert_eq!(p.efficiency, Some(0.96));
        let solo = vec![row("aes-128-ctr", "vaes", 1000.0)];
        let threads = vec![
            vec![row("aes-128-ctr", "vaes", 1000.0)],
            vec![row("aes-128-ctr", "vaes", 1000.0)],
        ];
        attach_native(&mut rows, &solo, &threads);
        let p = &rows[0];
        assert_eq!(p.native_one_thread, Some(1000.0));
        assert_eq!(p.native_aggregate, Some(2000.0));
        assert_eq!(p.native_ratio, Some(0.96));
        assert_eq!(p.per_vcpu_native_ratio, vec![Some(0.95), Some(0.97)]);
        assert!(p.noise.is_empty(), "{:?}", p.noise);
    }

    /// Issue 38 §5: a run printed scaling 3.61x on 2 vCPUs and a guest
    /// 2.02x faster than the host with `pass` and no flag.
    #[test]
    fn figures_no_quiet_machine_gives_are_flagged_as_noise() {
        let v0 = vec![
            row("dgemm", "avx2/solo", 10.0),
            row("dgemm", "avx2/smp", 18.0),
        ];
        let v1 = vec![row("dgemm", "avx2/smp", 18.1)];
        let mut rows = parallel_rows(&[v0, v1]);
        let p = &rows[0];
        assert_eq!(p.noise.len(), 1, "{:?}", p.noise);
        assert!(
            p.noise[0].contains("scaling 3.61x on 2 vCPUs"),
            "{:?}",
            p.noise
        );
        let solo = vec![row("dgemm", "avx2", 10.0)];
        let threads = vec![
            vec![row("dgemm", "avx2", 9.0)],
            vec![row("dgemm", "avx2", 8.9)],
        ];
        attach_native(&mut rows, &solo, &threads);
        let p = &rows[0];
        assert_eq!(p.noise.len(), 2, "{:?}", p.noise);
        assert!(p.noise[1].contains("beat 2 host threads"), "{:?}", p.noise);
        // vCPUs that did not run together.
        let v0 = vec![
            row("dgemm", "avx2/solo", 10.0),
            row("dgemm", "avx2/smp", 4.0),
        ];
        let v1 = vec![row("dgemm", "avx2/smp", 9.0)];
        let p = &parallel_rows(&[v0, v1])[0];
        assert!(
            p.noise.iter().any(|w| w.contains("differ 2.25x")),
            "{:?}",
            p.noise
        );
    }
}
