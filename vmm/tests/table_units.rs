//! Every table the CLI prints names the unit of each numeric column in its
//! header (`size B`, `ns/exit`, `ratio (x)`, ...), or, where the unit
//! differs by row, has a `unit` column next to the figures.

mod common;

use common::{data, kvm_or_skip, snapshot_regs_kernel, temp_file, tiny_pvh_elf, vmm};

/// The output of `vmm args` (which must succeed).
fn table(args: &[&str]) -> String {
    let out = vmm(args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The header line of `text` that starts (after blanks) with `first` and
/// holds every one of `headers`, in order.
fn assert_header(text: &str, first: &str, headers: &[&str]) {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(first) && headers.iter().all(|h| l.contains(h)))
        .unwrap_or_else(|| panic!("no header {first:?} with {headers:?} in:\n{text}"));
    let mut at = 0;
    for h in headers {
        let i = line[at..]
            .find(h)
            .unwrap_or_else(|| panic!("{h:?} out of order in {line:?}"));
        at += i + h.len();
    }
}

#[test]
fn features_tables_name_their_units() {
    let spr = data("intel-sapphire-rapids.json");
    let t = table(&["features", "--profile", &spr, "--no-boot"]);
    assert_header(
        &t,
        "id name",
        &["size B", "std B", "cmpct B", "+xss B", "cpu"],
    );
    assert_header(&t, "XCR0", &["XSS", "standard B", "compacted B", "+XSS B"]);
    let milan = data("amd-zen3-milan.json");
    let t = table(&["features", "compare", &spr, &milan]);
    assert_header(
        &t,
        "id name",
        &["u/s", "size B", "A bytes", "B bytes", "agreement"],
    );
    assert!(t.contains("standard offset in bytes"), "{t}");
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn run_and_snapshot_tables_name_their_units() {
    if !kvm_or_skip("run_and_snapshot_tables_name_their_units") {
        return;
    }
    let t = table(&["run", "--workload", "quick", "--no-native"]);
    assert_header(
        &t,
        "id",
        &["component", "size B", "standard B", "compacted B"],
    );
    assert_header(
        &t,
        "workload",
        &[
            "size",
            "throughput",
            "unit",
            "check",
            "native (x)",
            "per op",
        ],
    );
    // The throughput's unit is the next column, per row.
    let row = t
        .lines()
        .find(|l| l.trim_start().starts_with("aes-128-cbc"))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((cells[3], cells[5]), ("B", "MB/s"), "{row}");

    let kernel = temp_file(
        "units-regs.elf",
        &tiny_pvh_elf(&snapshot_regs_kernel(), true),
    );
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("s.snap");
    table(&[
        "run",
        "--kernel",
        kernel.to_str().unwrap(),
        "--snapshot-file",
        snap.to_str().unwrap(),
        "--no-native",
    ]);
    let _ = std::fs::remove_file(kernel);
    let t = table(&["snapshot", "info", snap.to_str().unwrap()]);
    assert_header(&t, "name", &["offset B", "length B", "crc32"]);
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn bench_tables_name_their_units() {
    if !kvm_or_skip("bench_tables_name_their_units") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let exits = [
        "bench",
        "exits",
        "--count",
        "20",
        "--rounds",
        "1",
        "--policy",
        "lazy",
        "--xfeatures",
        "x87,sse",
        "--baseline-dir",
        d,
    ];
    table(&[&exits[..], &["--save-baseline", "e"]].concat());
    let t = table(&[&exits[..], &["--baseline", "e"]].concat());
    assert_header(
        &t,
        "exit",
        &[
            "ns/exit",
            "min..p90 ns",
            "cycles/exit",
            "raw ns/exit",
            "ratio (x)",
            "note",
        ],
    );
    assert_header(
        &t,
        "exit",
        &[
            "xcr0",
            "then ns/exit",
            "now ns/exit",
            "change (%)",
            "verdict",
        ],
    );
    let init = [
        "bench",
        "init-xstate",
        "--workload",
        "aes,quick",
        "--rounds",
        "1",
        "--baseline-dir",
        d,
    ];
    table(&[&init[..], &["--save-baseline", "i"]].concat());
    let t = table(&[&init[..], &["--baseline", "i"]].concat());
    assert_header(
        &t,
        "workload",
        &[
            "size",
            "minimal",
            "min..p90",
            "all",
            "min..p90",
            "unit",
            "all/min (x)",
        ],
    );
    assert_header(
        &t,
        "workload",
        &["initial", "then", "now", "unit", "change (%)", "verdict"],
    );
}
