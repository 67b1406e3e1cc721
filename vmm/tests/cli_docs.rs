//! The ecosystem around the binary: shell completions, man pages, the CPU
//! profiles bundled with it, and one-line errors with hints. None of these
//! needs KVM.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{vmm, vmm_bin, vmm_json};

/// Every subcommand, nested ones included.
const SUBCOMMANDS: &[&str] = &[
    "run",
    "bench",
    "exits",
    "init-xstate",
    "features",
    "save",
    "compare",
    "restore",
    "snapshot",
    "info",
    "completions",
    "man",
    "schema",
];

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bash_completion_names_every_subcommand() {
    let out = vmm(&["completions", "bash"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("complete -F _vmm"),
        "not a bash completion script"
    );
    for sub in SUBCOMMANDS {
        assert!(text.contains(sub), "bash completion lacks {sub}");
    }
    // Options and their values too.
    for word in ["--xfeatures", "--list-profiles", "eager-compact"] {
        assert!(text.contains(word), "bash completion lacks {word}");
    }
}

#[test]
fn every_shell_gets_a_script() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = vmm(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        assert!(stdout(&out).contains("features"), "{shell}");
    }
    let out = vmm(&["completions", "tcsh"]);
    assert_eq!(
        out.status.code(),
        Some(68),
        "an unknown shell is a usage error"
    );
}

#[test]
fn man_page_lists_every_top_level_subcommand() {
    let out = vmm(&["man"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.starts_with(".ie") || text.contains("\n.TH vmm 1"),
        "{text}"
    );
    assert!(text.contains(".TH vmm 1"), "no .TH line");
    for sub in [
        "run",
        "bench",
        "features",
        "restore",
        "snapshot",
        "completions",
        "man",
        "schema",
    ] {
        assert!(
            text.contains(&format!("vmm\\-{sub}(1)")),
            "man page does not list {sub}"
        );
    }
}

#[test]
fn man_dir_writes_one_page_per_subcommand() {
    let dir = std::env::temp_dir().join(format!("vmm-test-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = vmm(&["man", "--dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    for page in [
        "vmm.1",
        "vmm-run.1",
        "vmm-bench-exits.1",
        "vmm-bench-init-xstate.1",
        "vmm-features.1",
        "vmm-features-save.1",
        "vmm-features-compare.1",
        "vmm-restore.1",
        "vmm-snapshot-info.1",
    ] {
        let text = std::fs::read_to_string(dir.join(page))
            .unwrap_or_else(|e| panic!("{page} not written: {e}"));
        assert!(text.contains(".TH"), "{page}");
    }
    let run = std::fs::read_to_string(dir.join("vmm-run.1")).unwrap();
    assert!(run.contains("xfeatures"), "vmm-run.1 lacks its options");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The first four bundled profiles' figures (all of them: docs/formats.md).
const BUNDLED: &[(&str, &str, u64, u64, &str)] = &[
    (
        "sapphire-rapids",
        "Intel(R) Xeon(R) w9-3475X",
        0x602e7,
        0xdd00,
        "intel-sapphire-rapids.json",
    ),
    (
        "ice-lake-client",
        "Intel(R) Core(TM) i7-1065G7 CPU @ 1.30GHz",
        0x2e7,
        0x2100,
        "intel-ice-lake-client.json",
    ),
    (
        "zen3-milan",
        "AMD EPYC 7763 64-Core Processor",
        0x207,
        0x1800,
        "amd-zen3-milan.json",
    ),
    (
        "zen3-kvm-guest",
        "AMD EPYC vCPU of a KVM guest on a Zen 3 (Milan) host",
        0x7,
        0x1800,
        "amd-zen3-kvm-guest.json",
    ),
];

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

#[test]
fn list_profiles_names_cpu_xcr0_and_source() {
    let (out, v) = vmm_json(&["features", "--list-profiles"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(v["schema_version"], 1);
    let list = v["profiles"].as_array().unwrap();
    // Every file in profiles/ is listed; the first ones are the copies of
    // the xstate crate's test data, in this order.
    let files = common::json_files_in(&root().join("profiles"));
    assert_eq!(list.len(), files);
    for (row, (name, cpu, xcr0, xss, data)) in list.iter().zip(BUNDLED) {
        assert_eq!(row["name"], *name);
        assert_eq!(row["cpu"], *cpu);
        assert_eq!(common::hex(&row["xcr0"]), *xcr0, "{name}");
        assert_eq!(common::hex(&row["xss"]), *xss, "{name}");
        // The copy keeps the source of its numbers and is byte for byte
        // the xstate crate's test data.
        let bundled = std::fs::read(root().join("profiles").join(format!("{name}.json"))).unwrap();
        let original = std::fs::read(root().join("xstate/tests/data").join(data)).unwrap();
        assert_eq!(
            bundled, original,
            "profiles/{name}.json differs from {data}"
        );
        assert!(!row["source"].as_str().unwrap().is_empty());
    }
    let out = vmm(&["features", "--list-profiles"]);
    let text = stdout(&out);
    assert!(text.starts_with("name "), "{text}");
    for (name, cpu, xcr0, _, _) in BUNDLED {
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} not listed"));
        assert!(
            line.contains(cpu) && line.contains(&format!("{xcr0:#x}")),
            "{line}"
        );
    }
}

#[test]
fn a_bundled_name_reads_the_same_as_its_file() {
    for (name, _, xcr0, _, data) in BUNDLED {
        let (out, by_name) = vmm_json(&["features", "--profile", name]);
        assert!(out.status.success(), "{out:?}");
        let file = root().join("xstate/tests/data").join(data);
        let (_, by_file) = vmm_json(&["features", "--profile", file.to_str().unwrap()]);
        assert_eq!(by_name["source"], *name);
        assert_eq!(common::hex(&by_name["xcr0"]), *xcr0);
        let strip = |mut v: serde_json::Value| {
            v.as_object_mut().unwrap().remove("source");
            v
        };
        assert_eq!(strip(by_name), strip(by_file), "{name}");
    }
    let (out, v) = vmm_json(&["features", "compare", "zen3-milan", "ice-lake-client"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(v["hosts"][0]["file"], "zen3-milan");
    // x87|SSE|AVX|PKRU on both.
    assert_eq!(common::hex(&v["baseline_xcr0"]), 0x207);
}

/// A bundled name wins over a file of the same name; `./NAME` is the file.
#[test]
fn bundled_name_precedence_over_files() {
    let dir = std::env::temp_dir().join(format!("vmm-test-prec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        root().join("xstate/tests/data/intel-ice-lake-client.json"),
        dir.join("zen3-milan"),
    )
    .unwrap();
    std::fs::copy(
        root().join("xstate/tests/data/intel-ice-lake-client.json"),
        dir.join("my-host"),
    )
    .unwrap();
    let run = |arg: &str| -> serde_json::Value {
        let out = Command::new(vmm_bin())
            .args(["features", "--profile", arg, "--json"])
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{arg}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(common::hex(&run("zen3-milan")["xcr0"]), 0x207);
    assert_eq!(common::hex(&run("./zen3-milan")["xcr0"]), 0x2e7);
    // Not a bundled name: the file.
    assert_eq!(common::hex(&run("my-host")["xcr0"]), 0x2e7);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_names_bundled_profiles_not_the_source_tree() {
    for args in [
        &["features", "--help"][..],
        &["features", "compare", "--help"][..],
    ] {
        let text = stdout(&vmm(args));
        assert!(
            !text.contains("tests/data"),
            "{args:?} points into the source tree"
        );
        assert!(text.contains("bundled"), "{args:?}: {text}");
    }
}

/// An error is one `vmm:` line naming the input and the fault, then one
/// `hint:` line; `code` is 68 for a value refused for what it is, 64 for
/// what a file or the host refused (docs/cli.md).
fn assert_error(args: &[&str], names: &[&str], hint: &str, code: i32) {
    let out = vmm(args);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {out:?}");
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{args:?}: {err}");
    assert!(lines[0].starts_with("vmm: "), "{err}");
    for n in names {
        assert!(lines[0].contains(n), "{args:?}: {n} not named in {err}");
    }
    assert!(
        lines[1].starts_with("hint: ") && lines[1].contains(hint),
        "{err}"
    );
}

#[test]
fn errors_are_one_line_with_a_hint() {
    assert_error(
        &["features", "--profile", "sapphire"],
        &["\"sapphire\"", "no bundled profile"],
        "sapphire-rapids, ice-lake-client, zen3-milan, zen3-kvm-guest",
        64,
    );
    let not_snapshot = common::temp_file("not-a-snapshot", b"hello, world\n");
    let p = not_snapshot.to_str().unwrap();
    assert_error(
        &["snapshot", "info", p],
        &[p, "not a vmm snapshot"],
        "vmm run --snapshot-after",
        64,
    );
    assert_error(
        &[
            "features",
            "--profile",
            "zen3-milan",
            "--xfeatures",
            "x87,sse,bogus",
        ],
        &["--xfeatures", "bogus"],
        "zmm_hi256",
        68,
    );
    let _ = std::fs::remove_file(not_snapshot);
}
