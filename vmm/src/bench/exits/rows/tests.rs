//! Rows from made-up boots: a Sapphire Rapids guest with the tiles granted
//! (no host at hand has AMX), and the eager-compact verdicts.

use std::time::Duration;

use guest::protocol::{fixed_str, Report, ResultRecord, WorkUnit, AUX_XINUSE, MARK_END};
use xstate::{XfeatureMask, XsaveInfo};

use super::{raw_limit, Boot, Matrix};
use crate::bench::exits::model::{ExitBench, ExitRow};
use crate::bench::stats::Verdict;

const COUNT: u64 = 1000;

fn spr() -> XsaveInfo {
    xstate::profile::CpuidProfile::from_json(include_str!(
        "../../../../../profiles/sapphire-rapids.json"
    ))
    .expect("the bundled Sapphire Rapids profile")
    .xsave_info()
    .expect("its leaf 0xD")
}

/// The PIO rows of a guest at XCR0 0x600e7: the variant and its aux figure.
const PIO_ROWS: [(&str, u64); 5] = [
    ("cpl3-clean", AUX_XINUSE | 0x2),
    ("cpl3-ymm", AUX_XINUSE | 0x6),
    ("cpl3-zmm", AUX_XINUSE | 0xe6),
    ("cpl3-tiles", AUX_XINUSE | 0x600e6),
    // No XGETBV1: the model decides.
    ("cpl0", 0),
];

/// A report of `PIO_ROWS` and the markers that time row `i` at `ns[i]` per
/// exit.
fn boot_of(ns: &[f64]) -> (Box<Report>, Vec<(u32, Duration)>) {
    let mut report = Box::new(Report::new());
    let mut marks = Vec::new();
    let mut t = Duration::from_millis(1);
    for (i, &(variant, aux)) in PIO_ROWS.iter().enumerate() {
        let rec = ResultRecord {
            name: fixed_str("exit-pio"),
            variant: fixed_str(variant),
            size: COUNT,
            work: COUNT,
            cycles: COUNT * 3000,
            unit: WorkUnit::Events as u32,
            check: 1,
            residual: 0.0,
        };
        assert!(report.push_result_aux(rec, aux));
        marks.push((i as u32, t));
        t += Duration::from_nanos((ns[i] * COUNT as f64) as u64);
        marks.push((MARK_END | i as u32, t));
        t += Duration::from_micros(10);
    }
    (report, marks)
}

/// Three rounds of raw, eager and eager-compact at 0x600e7, each policy's
/// per-row cost given per round.
fn matrix(costs: &[(&str, [[f64; 5]; 3])]) -> (Vec<ExitRow>, Vec<String>) {
    let info = spr();
    let mut m = Matrix::default();
    for round in 0..3 {
        for (policy, per_round) in costs {
            let (report, marks) = boot_of(&per_round[round]);
            let boot = Boot {
                report: &report,
                marks: &marks,
                tsc_khz: 3_000_000,
                policy,
                xcr0: XfeatureMask::from_bits(0x600e7),
                count: COUNT,
            };
            m.add_boot(&boot, &info);
        }
    }
    m.finish(3)
}

#[test]
fn tile_rows_carry_their_xinuse_and_compacted_bytes() {
    let flat = [[50_000.0; 5]; 3];
    let (rows, notes) = matrix(&[("raw", flat)]);
    assert!(notes.is_empty(), "{notes:?}");
    let got: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.mode.as_str(),
                r.upper.as_str(),
                r.xinuse.map(|m| m.bits()),
                r.compacted_bytes,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("cpl3", "clean", Some(0x2), Some(576)),
            ("cpl3", "ymm", Some(0x6), Some(832)),
            ("cpl3", "zmm", Some(0xe6), Some(2432)),
            // TILECFG 64-byte aligned at 2432, TILEDATA 8192 after it.
            ("cpl3", "tiles", Some(0x600e6), Some(2432 + 64 + 8192)),
            // XINUSE unknown: x87|SSE by the model.
            ("cpl0", "clean", None, Some(576)),
        ]
    );
    assert!(rows.iter().all(|r| r.ns_per_exit == Some(50_000.0)));
    assert_eq!(
        raw_limit(&rows, Some(XfeatureMask::from_bits(0x600e7))),
        Some(50_000.0)
    );
    assert_eq!(raw_limit(&rows, Some(XfeatureMask::from_bits(0xe7))), None);
}

#[test]
fn eager_compact_is_judged_against_eager_row_by_row() {
    let raw = [[40_000.0; 5]; 3];
    let eager = [
        [60_000.0, 61_000.0, 62_000.0, 70_000.0, 30_000.0],
        [61_000.0, 62_000.0, 63_000.0, 71_000.0, 31_000.0],
        [62_000.0, 63_000.0, 64_000.0, 72_000.0, 32_000.0],
    ];
    // Cheaper on clean and ymm, within noise on zmm, costlier on tiles.
    let compact = [
        [50_000.0, 51_000.0, 61_000.0, 90_000.0, 20_000.0],
        [51_000.0, 52_000.0, 63_000.0, 91_000.0, 21_000.0],
        [52_000.0, 53_000.0, 65_000.0, 92_000.0, 22_000.0],
    ];
    let (rows, notes) = matrix(&[("raw", raw), ("eager", eager), ("eager-compact", compact)]);
    let of = |upper: &str, mode: &str| {
        rows.iter()
            .find(|r| r.policy == "eager-compact" && r.upper == upper && r.mode == mode)
            .unwrap()
    };
    assert_eq!(of("clean", "cpl3").vs_eager, Some(Verdict::Faster));
    assert_eq!(of("ymm", "cpl3").eager_ns_per_exit, Some(62_000.0));
    assert_eq!(of("zmm", "cpl3").vs_eager, Some(Verdict::WithinNoise));
    assert_eq!(of("zmm", "cpl3").at_most_eager(), Some(true));
    assert_eq!(of("tiles", "cpl3").vs_eager, Some(Verdict::Slower));
    assert_eq!(of("tiles", "cpl3").at_most_eager(), Some(false));
    assert!(of("tiles", "cpl3").upper_live());
    assert!(!of("clean", "cpl3").upper_live());
    // A CPUID row is compared but not judged: no policy runs for it.
    let mut cpuid = of("tiles", "cpl3").clone();
    cpuid.exit = "cpuid".into();
    assert_eq!(cpuid.vs_eager, Some(Verdict::Slower));
    assert!(!cpuid.reaches_vmm());
    assert_eq!(cpuid.at_most_eager(), None);
    assert_eq!(super::super::render::vs_eager(&cpuid), "in KVM");
    // Only eager-compact rows are judged against eager.
    assert!(rows
        .iter()
        .filter(|r| r.policy != "eager-compact")
        .all(|r| r.vs_eager.is_none() && r.at_most_eager().is_none()));

    let bench = ExitBench {
        bench: "exits",
        raw_ns_per_exit: raw_limit(&rows, Some(XfeatureMask::from_bits(0x600e7))),
        raw_xcr0: Some(XfeatureMask::from_bits(0x600e7)),
        image_bytes: 11008,
        count: COUNT,
        count_source: "given",
        budget_s: None,
        rounds: 3,
        statistic: "median",
        wall_s: 1.0,
        rows,
        notes,
        comparison: None,
    };
    let table = bench.to_table();
    assert!(
        table.contains("raw limit (PIO, CPL3, upper state clean, XCR0 0x600e7): 40000 ns"),
        "{table}"
    );
    assert!(table.contains("KVM's 11008-byte image"), "{table}");
    let tiles_line = table
        .lines()
        .find(|l| l.contains(" tiles ") && l.contains("eager-compact"))
        .expect("a tiles row");
    assert!(tiles_line.contains("0x600e6") && tiles_line.contains("10688"));
    assert!(tiles_line.contains("> eager"), "{tiles_line}");
    assert!(
        table.contains(
            "eager-compact <= eager (cheaper, or within noise): 2 of 3 rows with upper state live, 4 of 5 rows in all (exits that reach the VMM"
        ),
        "{table}"
    );
    assert!(
        table.contains(
            "costlier than eager: pio cpl3 tiles xcr0 0x600e7: 91000 ns against 71000 ns"
        ),
        "{table}"
    );
}

/// The calibration's budget share: a boot weighs its rows over the
/// widest XCR0's, so a full run of 0x3, 0x7, 0xe7 is 27 boots' worth of
/// 0xe7 boots, not 36.
#[test]
fn boots_weigh_by_their_rows() {
    let plan = crate::bench::exits::Plan {
        count: crate::bench::exits::Count::Budget(120.0),
        rounds: 3,
        masks: [0x3, 0x7, 0xe7].map(XfeatureMask::from_bits).to_vec(),
        info: spr(),
        image_bytes: 4096,
        policies: vec![
            crate::xstate_manager::SyncPolicy::Lazy,
            crate::xstate_manager::SyncPolicy::Eager,
            crate::xstate_manager::SyncPolicy::EagerCompact,
        ],
        timeout: Duration::from_secs(1),
    };
    assert_eq!(plan.boots(), 36);
    assert_eq!(plan.widest_boots(), 27.0);
    let quick = crate::bench::exits::Plan {
        masks: vec![XfeatureMask::from_bits(0xe7)],
        ..plan
    };
    assert_eq!(quick.widest_boots(), quick.boots() as f64);
}
