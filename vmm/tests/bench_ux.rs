//! `vmm bench` as a newcomer meets it: usage errors naming the flag, the
//! `--quick` preset with medians and spreads in its JSON, baselines and
//! comparisons, and the `--plot` SVGs (`vmm run --plot` too). No speed is
//! asserted: only the shape and the arithmetic of what is reported.

mod common;

use std::path::Path;

use common::{kvm_or_skip, stderr, vmm, vmm_json};
use serde_json::Value;

/// A usage error (status 68, `EXIT_USAGE`) whose message names `flag`.
fn assert_usage_error(args: &[&str], flag: &str) {
    let out = vmm(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(68), "{args:?}: {err}");
    assert!(err.contains(flag), "{args:?} does not name {flag}: {err}");
}

#[test]
fn zero_count_and_rounds_are_usage_errors() {
    assert_usage_error(&["bench", "exits", "--count", "0"], "--count");
    assert_usage_error(&["bench", "exits", "--count", "10000001"], "--count");
    assert_usage_error(&["bench", "exits", "--rounds", "0"], "--rounds");
    assert_usage_error(&["bench", "exits", "--budget", "0"], "--budget");
    assert_usage_error(&["bench", "exits", "--budget", "nan"], "--budget");
    assert_usage_error(&["bench", "init-xstate", "--rounds", "0"], "--rounds");
    assert_usage_error(
        &["bench", "exits", "--count", "5", "--budget", "3"],
        "--budget",
    );
}

/// The SVG at `path` parses as XML, is an `<svg>` document and its text
/// holds every one of `labels`.
fn assert_svg(path: &Path, labels: &[&str]) {
    let text = std::fs::read_to_string(path).expect("the plot was written");
    let doc = roxmltree::Document::parse(&text).expect("the plot is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let words: String = doc
        .descendants()
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join("\n");
    for l in labels {
        assert!(words.contains(l), "{} lacks {l:?}", path.display());
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A `0x...` mask of the JSON documents.
fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// The CPL3 widths of the exit rows under guest XCR0 `xcr0`, with the
/// components each leaves live above SSE.
fn widths(xcr0: u64) -> Vec<(&'static str, u64)> {
    let (avx, avx512, amx) = (0x4, 0xe0, 0x6_0000);
    let mut w = vec![("clean", 0)];
    if xcr0 & avx == avx {
        w.push(("ymm", avx));
    }
    if xcr0 & (avx | avx512) == avx | avx512 {
        w.push(("zmm", avx | avx512));
    }
    if xcr0 & amx == amx {
        w.push(("tiles", (xcr0 & (avx | avx512)) | amx));
    }
    w
}

/// The user state this host's KVM offers a guest (after the AMX
/// permission, as `vmm` asks it) and its OS has enabled: what `vmm bench
/// exits --quick` must measure.
fn full_xcr0() -> (u64, xstate::XsaveInfo) {
    vmm::internal::arch::amx::permit_guest(None).expect("the AMX permission decision");
    let host = vmm::kvm::HostKvm::open().expect("/dev/kvm");
    let kvm = host.xstate.supported_xcr0().bits();
    let os = xstate::native::host_xcr0()
        .expect("XCR0 of the host")
        .bits();
    (
        kvm & os & xstate::XfeatureMask::ALL_KNOWN.user().bits(),
        host.xstate.info,
    )
}

/// `--quick` measures the host's full XCR0: the raw limit is taken there,
/// and every width it has gets its rows (zmm on an AVX-512 host, tiles
/// where KVM grants AMX), each with its XINUSE and compacted bytes; every
/// eager-compact row is judged against eager. Expectations come from this
/// host's KVM and XCR0, so a Zen 3 host (no zmm rows) passes as well.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn quick_exits_measure_every_width_of_the_full_xcr0() {
    if !kvm_or_skip("quick_exits_measure_every_width_of_the_full_xcr0") {
        return;
    }
    let (full, info) = full_xcr0();
    let args = [
        "bench",
        "exits",
        "--quick",
        "--count",
        "200",
        "--rounds",
        "2",
        "--policy",
        "eager,eager-compact",
        "--quiet",
    ];
    let (out, v) = vmm_json(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let raw_xcr0 = hex(v["raw_xcr0"].as_str().unwrap());
    assert_eq!(
        raw_xcr0, full,
        "raw limit at {raw_xcr0:#x}, not the full {full:#x}"
    );
    assert!(f(&v["raw_ns_per_exit"]) > 0.0);
    let rows = v["rows"].as_array().unwrap();
    assert!(rows
        .iter()
        .all(|r| hex(r["guest_xcr0"].as_str().unwrap()) == full));
    let mask = xstate::XfeatureMask::from_bits;
    let upper = 0x6_00e4 & full;
    let inuse_of = |r: &Value| r["xinuse"].as_str().map(hex);
    // A CPU may keep a component marked in use after it went back to init
    // (the SDM allows it; QEMU's TCG marks all of XCR0): whether this one
    // tracks shows on the first clean row, put to init just before.
    let tracks_init = rows
        .iter()
        .find(|r| r["upper"] == "clean")
        .and_then(inuse_of)
        .is_some_and(|x| x & upper == 0);
    for (width, live) in widths(full) {
        let mut seen = std::collections::BTreeSet::new();
        for policy in ["raw", "eager", "eager-compact"] {
            for exit in ["pio", "mmio", "cpuid"] {
                let r = rows
                    .iter()
                    .find(|r| {
                        r["upper"] == width
                            && r["policy"] == policy
                            && r["exit"] == exit
                            && r["mode"] == "cpl3"
                    })
                    .unwrap_or_else(|| panic!("no {exit} {width} {policy} row at {full:#x}"));
                // XINUSE, where the guest read it, has the width live above
                // SSE (exactly, where the CPU tracks init state); the bytes
                // are those of the state in use.
                let inuse = match inuse_of(r) {
                    Some(x) => {
                        assert_eq!(x & live, live, "{r}");
                        if tracks_init {
                            assert_eq!(x & upper, live, "{r}");
                        }
                        seen.insert(x & upper);
                        x
                    }
                    None => 0x3 | live,
                };
                let want = info.compacted_size(mask(inuse)).unwrap();
                assert_eq!(r["compacted_bytes"].as_u64(), Some(u64::from(want)), "{r}");
                if policy == "eager-compact" {
                    assert!(
                        r["vs_eager"].is_string() && f(&r["eager_ns_per_exit"]) > 0.0,
                        "{r}"
                    );
                }
            }
        }
        // Every row of a width starts from the same state, whatever row
        // ran before it (a wider row's state must not leak into it).
        assert!(
            seen.len() <= 1,
            "{width} rows at {full:#x}: XINUSE above SSE {seen:x?}"
        );
    }
    let has_zmm = full & 0xe4 == 0xe4;
    assert_eq!(rows.iter().any(|r| r["upper"] == "zmm"), has_zmm);
    assert_eq!(
        rows.iter().any(|r| r["upper"] == "tiles"),
        full & 0x6_0000 != 0
    );
    // The table says the same: the headline XCR0, the zmm rows, the verdict.
    let out = vmm(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains(&format!("upper state clean, XCR0 {full:#x}): ")),
        "{text}"
    );
    assert_eq!(
        text.lines().any(|l| l.starts_with("pio    cpl3  zmm ")),
        has_zmm,
        "{text}"
    );
    assert!(
        text.contains("eager-compact <= eager (cheaper, or within noise): "),
        "{text}"
    );
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn quick_exits_reports_spreads_saves_compares_and_plots() {
    if !kvm_or_skip("quick_exits_reports_spreads_saves_compares_and_plots") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("exits.svg");
    let bdir = dir.path().join("baselines");
    let (out, v) = vmm_json(&[
        "bench",
        "exits",
        "--quick",
        "--plot",
        svg.to_str().unwrap(),
        "--save-baseline",
        "first",
        "--baseline-dir",
        bdir.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Not a terminal: no progress bar on stderr, only the saved-baseline line.
    assert!(!err.contains("ETA"), "{err}");
    assert!(err.contains("baseline saved"), "{err}");
    assert_eq!(v["bench"], "exits");
    assert_eq!(v["rounds"], 3);
    assert_eq!(v["count_source"], "calibrated");
    assert_eq!(f(&v["budget_s"]), 12.0);
    assert_eq!(v["statistic"], "median");
    assert!(v["count"].as_u64().unwrap() >= 200);
    assert!(f(&v["wall_s"]) > 0.0);
    assert!(v["comparison"].is_null());
    let rows = v["rows"].as_array().unwrap();
    // --quick: one XCR0; raw + 3 policies x 3 exit kinds x (cpl0 and a
    // cpl3 row per width the XCR0 has).
    let xcr0s: std::collections::BTreeSet<_> = rows
        .iter()
        .map(|r| r["guest_xcr0"].as_str().unwrap())
        .collect();
    assert_eq!(xcr0s.len(), 1, "{xcr0s:?}");
    let xcr0_bits = hex(xcr0s.iter().next().unwrap());
    assert_eq!(rows.len(), 4 * 3 * (1 + widths(xcr0_bits).len()));
    let raw_of = |r: &Value| {
        rows.iter()
            .find(|x| {
                x["policy"] == "raw"
                    && x["exit"] == r["exit"]
                    && x["mode"] == r["mode"]
                    && x["upper"] == r["upper"]
            })
            .unwrap()
    };
    for r in rows {
        let (min, med, p90) = (
            f(&r["ns_per_exit_min"]),
            f(&r["ns_per_exit_median"]),
            f(&r["ns_per_exit_p90"]),
        );
        assert!(min <= med && med <= p90, "{r}");
        assert_eq!(f(&r["ns_per_exit"]), med);
        let rounds: Vec<f64> = r["ns_per_exit_rounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(f)
            .collect();
        assert_eq!(rounds.len(), 3);
        let mut sorted = rounds.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!((sorted[0], sorted[1]), (min, med));
        assert!((f(&r["spread_pct"]) - (p90 - min) / med * 100.0).abs() < 1e-6);
        assert!(f(&r["guest_cycles_per_exit_min"]) <= f(&r["guest_cycles_per_exit"]));
        let raw = raw_of(r);
        assert_eq!(f(&r["raw_ns_per_exit"]), f(&raw["ns_per_exit"]));
        assert!((f(&r["ratio_to_raw"]) - med / f(&raw["ns_per_exit"])).abs() < 1e-9);
        if r["policy"] == "raw" {
            assert!(r["vs_raw"].is_null() && r["within_noise"].is_null(), "{r}");
            continue;
        }
        // The verdict follows the ranges: overlapping min..p90 is noise.
        let (rmin, rp90) = (f(&raw["ns_per_exit_min"]), f(&raw["ns_per_exit_p90"]));
        let overlap = min <= rp90 && rmin <= p90;
        let verdict = r["vs_raw"].as_str().unwrap();
        assert_eq!(r["within_noise"].as_bool(), Some(overlap), "{r}");
        match verdict {
            "within-noise" => assert!(overlap),
            "slower" => assert!(!overlap && med > f(&raw["ns_per_exit"])),
            "faster" => assert!(!overlap && med < f(&raw["ns_per_exit"])),
            other => panic!("verdict {other}"),
        }
    }
    assert_svg(
        &svg,
        &[
            "lazy",
            "eager",
            "eager-compact",
            "pio cpl3 clean",
            "cpuid cpl0 clean",
            "raw KVM limit (same exit)",
            "min..p90 of the rounds",
            "ns per exit",
        ],
    );
    let saved = bdir.join("first.json");
    let saved_v: Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
    assert_eq!(saved_v["rows"], v["rows"]);

    // A short run of the same XCR0 against the saved baseline, and the
    // same through --compare FILE.
    let xcr0 = *xcr0s.iter().next().unwrap();
    for how in [
        ["--baseline", "first"],
        ["--compare", saved.to_str().unwrap()],
    ] {
        let (out, c) = vmm_json(&[
            "bench",
            "exits",
            "--count",
            "50",
            "--rounds",
            "2",
            "--policy",
            "lazy",
            "--xfeatures",
            xcr0,
            "--baseline-dir",
            bdir.to_str().unwrap(),
            how[0],
            how[1],
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(c["count_source"], "given");
        assert!(c["budget_s"].is_null());
        let cmp = &c["comparison"];
        assert_eq!(cmp["baseline_rounds"], 3);
        let crow = cmp["rows"].as_array().unwrap();
        // raw and lazy rows match; as many eager and eager-compact rows
        // are only in the baseline.
        assert_eq!(crow.len(), cmp["only_baseline"].as_array().unwrap().len());
        assert!(crow
            .iter()
            .all(|r| r["policy"] == "raw" || r["policy"] == "lazy"));
        assert!(cmp["only_now"].as_array().unwrap().is_empty());
        for r in crow {
            let (then, now) = (f(&r["baseline_ns_per_exit"]), f(&r["ns_per_exit"]));
            assert!((f(&r["change_pct"]) - (now - then) / then * 100.0).abs() < 1e-6);
            let v = r["verdict"].as_str().unwrap();
            assert!(["improved", "regressed", "no change"].contains(&v), "{v}");
        }
    }
    // The table says it in words.
    let out = vmm(&[
        "bench",
        "exits",
        "--count",
        "50",
        "--rounds",
        "1",
        "--policy",
        "lazy",
        "--xfeatures",
        xcr0,
        "--compare",
        saved.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("compared with baseline"), "{text}");
    assert!(text.contains("no change (within noise)"), "{text}");
    assert!(text.contains("1 round: noise unknown"), "{text}");
}

#[test]
fn baseline_and_plot_refusals_come_before_measuring() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let status = |args: &[&str], want: &str, code: i32| {
        let out = vmm(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    };
    // A name refused for what it is: a usage error (docs/cli.md).
    status(
        &[
            "bench",
            "exits",
            "--save-baseline",
            "../up",
            "--baseline-dir",
            d,
        ],
        "--save-baseline \"../up\"",
        68,
    );
    // The rest depend on files: the VMM's failure.
    let check = |args: &[&str], want: &str| status(args, want, 64);
    check(
        &[
            "bench",
            "exits",
            "--baseline",
            "never-saved",
            "--baseline-dir",
            d,
        ],
        "--baseline \"never-saved\": no baseline saved",
    );
    let other = dir.path().join("other.json");
    std::fs::write(&other, r#"{"bench": "init-xstate", "rows": []}"#).unwrap();
    check(
        &["bench", "exits", "--compare", other.to_str().unwrap()],
        "holds a `vmm bench init-xstate` result",
    );
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "not json").unwrap();
    check(
        &["bench", "exits", "--compare", junk.to_str().unwrap()],
        "is not a `vmm bench exits --json` result",
    );
    check(&["bench", "exits", "--compare", d], "a directory");
    // A baseline through a pipe is read as the file is: a result of
    // another bench is refused before measuring, naming the pipe.
    let stdin = common::stdin_path();
    let piped = common::vmm_piped(
        &["bench", "exits", "--compare", stdin],
        br#"{"bench": "init-xstate", "rows": []}"#,
    );
    assert_eq!(piped.status.code(), Some(64), "{}", common::stderr(&piped));
    let err = common::stderr(&piped);
    assert!(
        err.contains(stdin) && err.contains("holds a `vmm bench init-xstate` result"),
        "{err}"
    );
    let nowhere = dir.path().join("no/such/x.svg");
    check(
        &["bench", "exits", "--plot", nowhere.to_str().unwrap()],
        "--plot",
    );
    check(&["run", "--plot", nowhere.to_str().unwrap()], "--plot");
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn init_xstate_rounds_and_plot() {
    if !kvm_or_skip("init_xstate_rounds_and_plot") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("init.svg");
    let (out, v) = vmm_json(&[
        "bench",
        "init-xstate",
        "--workload",
        "aes",
        "--rounds",
        "2",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(v["rounds"], 2);
    let rows = v["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        let (m, a) = (&r["minimal_spread"], &r["all_spread"]);
        assert_eq!(f(&r["minimal"]), f(&m["median"]));
        assert_eq!(f(&r["all"]), f(&a["median"]));
        assert!(f(&m["min"]) <= f(&m["median"]) && f(&m["median"]) <= f(&m["p90"]));
        assert!((f(&r["ratio"]) - f(&r["all"]) / f(&r["minimal"])).abs() < 1e-9);
        let overlap = f(&a["min"]) <= f(&m["p90"]) && f(&m["min"]) <= f(&a["p90"]);
        assert_eq!(r["within_noise"].as_bool(), Some(overlap), "{r}");
    }
    let first = format!(
        "{} {} {}",
        rows[0]["name"].as_str().unwrap(),
        rows[0]["variant"].as_str().unwrap(),
        rows[0]["size"]
    );
    assert_svg(
        &svg,
        &["no effect = 1.0", "throughput all / minimal", &first],
    );
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn run_plot_shows_switch_strategies_and_native_ratios() {
    if !kvm_or_skip("run_plot_shows_switch_strategies_and_native_ratios") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("run.svg");
    let (out, v) = vmm_json(&["run", "--plot", svg.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut labels: Vec<String> = vec![
        "TSC cycles per switch".into(),
        "native = 1.0".into(),
        "guest / native (1.0 = native speed)".into(),
    ];
    for s in v["switch_cycles"].as_array().unwrap() {
        labels.push(s["strategy"].as_str().unwrap().to_string());
    }
    for r in v["results"].as_array().unwrap() {
        if r["native_ratio"].is_number() {
            labels.push(format!(
                "{} {} {}",
                r["name"].as_str().unwrap(),
                r["variant"].as_str().unwrap(),
                r["size"]
            ));
        }
    }
    assert!(labels.len() > 4, "{v}");
    let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
    assert_svg(&svg, &refs);
}

#[test]
fn init_xstate_usage_errors_name_the_flag() {
    assert_usage_error(&["bench", "init-xstate", "--budget", "0"], "--budget");
    assert_usage_error(&["bench", "init-xstate", "--budget=-3"], "--budget");
    assert_usage_error(&["bench", "init-xstate", "--rounds", "101"], "--rounds");
    assert_usage_error(
        &["bench", "init-xstate", "--rounds", "2", "--budget", "3"],
        "--budget",
    );
    assert_usage_error(
        &["bench", "init-xstate", "--baseline", "a", "--compare", "b"],
        "--compare",
    );
    // A result of the other benchmark is refused before measuring.
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("exits.json");
    std::fs::write(&other, r#"{"bench": "exits", "rows": []}"#).unwrap();
    let out = vmm(&["bench", "init-xstate", "--compare", other.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains("holds a `vmm bench exits` result, not `init-xstate`"),
        "{err}"
    );
}

/// The median and min..p90 of `v` (a `minimal_spread` / `all_spread`).
fn spread(v: &Value) -> (f64, f64, f64) {
    (f(&v["min"]), f(&v["median"]), f(&v["p90"]))
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn quick_init_xstate_reports_spreads_saves_and_compares() {
    if !kvm_or_skip("quick_init_xstate_reports_spreads_saves_and_compares") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bdir = dir.path().join("baselines");
    let b = bdir.to_str().unwrap();
    let (out, v) = vmm_json(&[
        "bench",
        "init-xstate",
        "--quick",
        "--save-baseline",
        "first",
        "--baseline-dir",
        b,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("ETA"), "{err}");
    assert!(err.contains("baseline saved"), "{err}");
    assert_eq!(v["bench"], "init-xstate");
    assert_eq!(v["workload"], "aes,linpack,quick");
    assert_eq!(v["rounds_source"], "calibrated");
    assert_eq!(f(&v["budget_s"]), 12.0);
    assert_eq!(v["statistic"], "median");
    assert!(f(&v["wall_s"]) > 0.0);
    assert!(v["comparison"].is_null());
    let rounds = v["rounds"].as_u64().unwrap();
    assert!((3..=100).contains(&rounds), "{rounds}");
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.iter().any(|r| r["name"] == "linpack"), "{v}");
    for r in rows {
        let (mmin, mmed, mp90) = spread(&r["minimal_spread"]);
        let (amin, amed, ap90) = spread(&r["all_spread"]);
        assert!(mmin <= mmed && mmed <= mp90, "{r}");
        assert!(amin <= amed && amed <= ap90, "{r}");
        assert_eq!((f(&r["minimal"]), f(&r["all"])), (mmed, amed));
        assert!((f(&r["ratio"]) - amed / mmed).abs() < 1e-9);
        // The verdict follows the ranges; a ratio above 1 outside them is
        // called "faster", never a gain (the table says so).
        let overlap = amin <= mp90 && mmin <= ap90;
        assert_eq!(r["within_noise"].as_bool(), Some(overlap), "{r}");
        let want = match (overlap, amed < mmed) {
            (true, _) => "within-noise",
            (false, true) => "slower",
            (false, false) => "faster",
        };
        assert_eq!(r["all_vs_minimal"], want, "{r}");
    }
    let saved = bdir.join("first.json");
    let saved_v: Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
    assert_eq!(saved_v["rows"], v["rows"]);
    assert!(saved_v.get("comparison").is_none());

    // Against the baseline: every row twice (minimal, all), with the
    // change of the median and a verdict that follows the ranges (more
    // throughput is an improvement).
    let then_of = |r: &Value| {
        let row = rows
            .iter()
            .find(|x| {
                x["name"] == r["name"] && x["variant"] == r["variant"] && x["size"] == r["size"]
            })
            .unwrap();
        spread(&row[format!("{}_spread", r["initial"].as_str().unwrap())])
    };
    let (out, c) = vmm_json(&[
        "bench",
        "init-xstate",
        "--quick",
        "--rounds",
        "2",
        "--compare",
        saved.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(c["rounds_source"], "given");
    assert!(c["budget_s"].is_null());
    let cmp = &c["comparison"];
    assert_eq!(cmp["baseline_rounds"].as_u64(), Some(rounds));
    let crow = cmp["rows"].as_array().unwrap();
    assert_eq!(crow.len(), 2 * rows.len());
    let now_rows = c["rows"].as_array().unwrap();
    for r in crow {
        let (tmin, tmed, tp90) = then_of(r);
        let now_row = now_rows
            .iter()
            .find(|x| {
                x["name"] == r["name"] && x["variant"] == r["variant"] && x["size"] == r["size"]
            })
            .unwrap();
        let (nmin, nmed, np90) =
            spread(&now_row[format!("{}_spread", r["initial"].as_str().unwrap())]);
        assert_eq!(f(&r["baseline_throughput"]), tmed);
        assert_eq!(f(&r["throughput"]), nmed);
        assert!((f(&r["change_pct"]) - (nmed - tmed) / tmed * 100.0).abs() < 1e-6);
        let overlap = nmin <= tp90 && tmin <= np90;
        let want = match (overlap, nmed > tmed) {
            (true, _) => "no change",
            (false, true) => "improved",
            (false, false) => "regressed",
        };
        assert_eq!(r["verdict"], want, "{r}");
        assert!(
            ["MB/s", "GFLOPS"].contains(&r["unit"].as_str().unwrap()),
            "{r}"
        );
    }
    assert!(cmp["only_now"].as_array().unwrap().is_empty());
    assert!(cmp["only_baseline"].as_array().unwrap().is_empty());

    // --baseline NAME prints the comparison in words.
    let out = vmm(&[
        "bench",
        "init-xstate",
        "--workload",
        "aes,quick",
        "--rounds",
        "1",
        "--baseline",
        "first",
        "--baseline-dir",
        b,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("compared with baseline first"), "{text}");
    assert!(text.contains("no change (within noise)"), "{text}");
    assert!(text.contains("1 round: noise unknown"), "{text}");
    // linpack was in the baseline, not in this run.
    assert!(text.contains("not in this run: linpack"), "{text}");
}
