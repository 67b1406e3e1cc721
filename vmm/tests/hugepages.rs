//! `--hugepages thp|hugetlbfs`: bare `--hugepages` is still THP; hugetlbfs
//! takes guest RAM from the host's 2 MiB pool, refuses an odd `--mem` and a
//! short pool with named errors (how many pages to reserve), and runs the
//! guest when the pool has room. These tests never change the host's pool:
//! they read `/proc/meminfo` and take the success path only when enough
//! pages are free (saying so), the short-pool path otherwise.

mod common;

use common::{kvm_or_skip, restore_checked, snapshot_check_args, stderr, vmm, vmm_json};

/// `(HugePages_Total, HugePages_Free, Hugepagesize kB)` now.
fn pool() -> Option<(u64, u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let v = l.strip_prefix(name)?.strip_prefix(':')?;
            v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
        })
    };
    Some((
        field("HugePages_Total")?,
        field("HugePages_Free")?,
        field("Hugepagesize")?,
    ))
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn bare_hugepages_is_still_thp() {
    if !kvm_or_skip("bare_hugepages_is_still_thp") {
        return;
    }
    let (out, v) = vmm_json(&["run", "--workload", "none", "--no-native", "--hugepages"]);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["hugepages"]["backing"], "thp", "{v:#}");
    assert!(v["hugepages"]["hugetlb_kib"].is_null());
    let (out, v) = vmm_json(&["run", "--workload", "none", "--no-native"]);
    assert!(out.status.success());
    assert!(v["hugepages"].is_null());
    // Nothing ran natively: no native side to back.
    let (out, v) = vmm_json(&["run", "--workload", "none", "--no-native", "--hugepages"]);
    assert!(out.status.success(), "{v:#}");
    assert!(v["hugepages"]["native"].is_null(), "{v:#}");
}

/// With `--hugepages`, the native rows run on memory backed as guest RAM
/// is (both sides of a ratio on the same page size), and the report says
/// how much of it huge pages backed; the table says it too.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn the_native_side_gets_huge_pages_too() {
    if !kvm_or_skip("the_native_side_gets_huge_pages_too") {
        return;
    }
    let args = [
        "run",
        "--workload",
        "gemm,quick",
        "--native-reps",
        "3",
        "--hugepages",
    ];
    let (out, v) = vmm_json(&args);
    assert!(out.status.success(), "{v:#}");
    let n = &v["hugepages"]["native"];
    assert_eq!(n["backing"], "thp", "{v:#}");
    assert!(n["fallback"].is_null(), "{n}");
    let kib = n["scratch_kib"].as_u64().unwrap_or_else(|| panic!("{n}"));
    // A whole number of 2 MiB pages, and as large as the rows' buffers.
    assert!(kib >= 2048 && kib % 2048 == 0, "{n}");
    let huge = n["huge_kib"].as_u64().unwrap_or_else(|| panic!("{n}"));
    assert!(huge <= kib && huge % 2048 == 0, "{n}");
    let out = common::vmm(&args);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("  hugepages, native side: MADV_HUGEPAGE on its "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.ends_with(" KiB of it in huge pages"), "{line}");
}

#[test]
fn an_unknown_kind_is_a_usage_error() {
    let out = vmm(&["run", "--hugepages", "1g"]);
    assert_eq!(out.status.code(), Some(68), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("invalid value '1g' for '--hugepages [<KIND>]'"),
        "{e}"
    );
    assert!(e.contains("[possible values: thp, hugetlbfs]"), "{e}");
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn hugetlbfs_refuses_an_odd_size() {
    if !kvm_or_skip("hugetlbfs_refuses_an_odd_size") {
        return;
    }
    let out = vmm(&["run", "--hugepages", "hugetlbfs", "--mem", "65"]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim(),
        "vmm: guest memory: --hugepages hugetlbfs needs --mem in whole 2 MiB huge pages: 65 MiB is odd"
    );
}

/// `vmm run` of no workload on `mib` MiB of guest RAM in hugetlbfs pages.
fn hugetlbfs_run(mib: &str) -> [&str; 8] {
    [
        "run",
        "--workload",
        "none",
        "--no-native",
        "--hugepages",
        "hugetlbfs",
        "--mem",
        mib,
    ]
}

/// The success path when the pool has room for 64 MiB, else the named
/// error for 64 MiB; the error path again for a size the pool cannot hold
/// whenever one fits `--mem`'s range.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn hugetlbfs_runs_or_names_the_pages_it_needs() {
    if !kvm_or_skip("hugetlbfs_runs_or_names_the_pages_it_needs") {
        return;
    }
    let Some((_, free, page_kib)) = pool() else {
        common::skip(
            "hugetlbfs_runs_or_names_the_pages_it_needs",
            "no huge-page pool in /proc/meminfo",
        );
        return;
    };
    if page_kib != 2048 {
        common::skip(
            "hugetlbfs_runs_or_names_the_pages_it_needs",
            &format!("default huge pages are {page_kib} kB, not 2 MiB"),
        );
        return;
    }
    let short = |mib: u64| {
        let out = vmm(&hugetlbfs_run(&mib.to_string()));
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(64), "{e}");
        // The pool is read again by vmm: its free count may have moved,
        // what it needs may not.
        assert!(
            e.contains(&format!(
                "vmm: guest memory: --hugepages hugetlbfs: {mib} MiB of guest RAM needs {} free 2 MiB huge pages, the host has ",
                mib / 2
            )),
            "{e}"
        );
        assert!(e.contains("(HugePages_Free in /proc/meminfo, of "), "{e}");
        assert!(e.contains(" > /proc/sys/vm/nr_hugepages`"), "{e}");
    };
    if free >= 32 {
        eprintln!("hugetlbfs_runs_or_names_the_pages_it_needs: {free} huge pages free: running on hugetlbfs");
        let (out, v) = vmm_json(&hugetlbfs_run("64"));
        assert!(out.status.success(), "{}", stderr(&out));
        let h = &v["hugepages"];
        assert_eq!(h["backing"], "hugetlbfs", "{h}");
        assert_eq!(h["ram_kib"], 64 * 1024, "{h}");
        assert_eq!(h["anon_huge_kib"], 0, "{h}");
        // The guest touched some of its RAM, all of it in 2 MiB pages.
        let kib = h["hugetlb_kib"].as_u64().unwrap_or_else(|| panic!("{h}"));
        assert!(kib > 0 && kib <= 64 * 1024 && kib % 2048 == 0, "{h}");
        // A hugetlbfs guest snapshots (its RAM found by pagemap) and its
        // registers come back bit for bit on ordinary pages.
        let path = std::env::temp_dir().join(format!("vmm-hugetlb-{}.snap", std::process::id()));
        let mut args = snapshot_check_args(path.to_str().unwrap()).to_vec();
        args.extend(["--hugepages", "hugetlbfs", "--mem", "64"]);
        let (out, v) = vmm_json(&args);
        assert!(out.status.success(), "{v:#}");
        assert_eq!(v["exit_reason"], "snapshotted", "{v:#}");
        assert_eq!(v["hugepages"]["backing"], "hugetlbfs", "{v:#}");
        restore_checked(&path);
    } else {
        eprintln!("hugetlbfs_runs_or_names_the_pages_it_needs: only {free} huge pages free: the short-pool error for 64 MiB (success path not run)");
        short(64);
    }
    // A size one page beyond what is free, when --mem takes it.
    let mib = 2 * (free + 1);
    if (4..=3 * 1024).contains(&mib) {
        short(mib);
    }
}
