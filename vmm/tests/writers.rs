//! Every file `vmm` writes is written like the snapshot (issue 37 §3):
//! a regular file or nothing, no symlink followed (dangling ones included),
//! no device or FIFO written into (or blocked on), an existing file
//! replaced only with `--force`, and a destination that cannot be written
//! refused before the work starts. Before, `features save --force`,
//! `features import --force`, `--plot`, `schema DIR` and `man --dir`
//! followed symlinks, wrote into `/dev/null` and reported success, blocked
//! on a FIFO, and `--plot` replaced an existing file.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::vmm_bin;

/// `vmm ARGS`, killed after 20 s: a writer that blocks on a FIFO must
/// fail the test, not hang it.
fn vmm_bounded(args: &[&str]) -> Output {
    let mut child = Command::new(vmm_bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vmm");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("vmm {args:?} blocked for 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(made.success());
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// The destinations no writer may use, whatever `--force` says.
fn hostile_destinations(dir: &Path) -> Vec<std::path::PathBuf> {
    let dangling = dir.join("dangling");
    std::os::unix::fs::symlink(dir.join("not-there"), &dangling).unwrap();
    let target = dir.join("target");
    std::fs::write(&target, "keep").unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    vec![dangling, link, fifo, "/dev/null".into()]
}

fn assert_untouched(dir: &Path) {
    assert!(
        !dir.join("not-there").exists(),
        "written through a dangling link"
    );
    assert_eq!(std::fs::read_to_string(dir.join("target")).unwrap(), "keep");
}

#[test]
fn features_save_and_import_refuse_links_devices_and_fifos() {
    let dir = tempfile::tempdir().unwrap();
    for dest in hostile_destinations(dir.path()) {
        for args in [
            vec!["features", "import", "zen3-milan", s(&dest), "--force"],
            vec!["features", "save", s(&dest), "--force"],
        ] {
            let out = vmm_bounded(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "vmm {args:?}: {err}");
            assert!(err.contains(s(&dest)), "the error names the path: {err}");
        }
    }
    assert_untouched(dir.path());
}

#[test]
fn features_import_replaces_a_file_only_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("milan.json");
    std::fs::write(&file, "old").unwrap();
    let out = vmm_bounded(&["features", "import", "zen3-milan", s(&file)]);
    assert_ne!(out.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "old");
    let out = vmm_bounded(&["features", "import", "zen3-milan", s(&file), "--force"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read_to_string(&file).unwrap().contains("\"name\""));
}

#[test]
fn schema_and_man_refuse_a_link_before_writing_any_file() {
    for (args, page) in [
        (&["schema"][..], "run.schema.json"),
        (&["man", "--dir"][..], "vmm-run.1"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&elsewhere, dir.path().join(page)).unwrap();
        let mut all = args.to_vec();
        all.push(s(dir.path()));
        let out = vmm_bounded(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "vmm {all:?}: {err}");
        assert!(!elsewhere.exists(), "vmm {all:?} wrote through the link");
        let written = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(
            written, 1,
            "vmm {all:?}: nothing written, all checked first"
        );
    }
}

/// The directory itself: something other than a directory at its path,
/// or a path that cannot be made, is named. Before, both said only
/// `vmm: output: File exists (os error 17)` (or `Not a directory`),
/// without the path or what was in the way.
#[test]
fn schema_and_man_name_a_directory_they_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "keep").unwrap();
    let under_file = file.join("sub");
    for (args, what) in [
        (&["schema"][..], "schema directory"),
        (&["man", "--dir"][..], "manual directory"),
    ] {
        for (target, says) in [
            (
                Path::new("/dev/null"),
                "/dev/null is a character device, not a directory".to_string(),
            ),
            (
                file.as_path(),
                format!("{} is a regular file, not a directory", file.display()),
            ),
            (
                under_file.as_path(),
                format!("cannot create directory {}: ", under_file.display()),
            ),
        ] {
            let mut all = args.to_vec();
            all.push(s(target));
            let out = vmm_bounded(&all);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "vmm {all:?}: {err}");
            let named = format!("vmm: {what}: {says}");
            assert!(err.starts_with(&named), "vmm {all:?}: {err}");
        }
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
}

#[test]
fn plot_refuses_before_the_run_and_replaces_only_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.svg");
    std::fs::write(&old, "keep").unwrap();
    let mut dests = hostile_destinations(dir.path());
    dests.push(old.clone());
    for dest in &dests {
        for args in [
            vec!["run", "--workload", "none", "--plot", s(dest)],
            vec!["bench", "exits", "--quick", "--plot", s(dest)],
        ] {
            let out = vmm_bounded(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "vmm {args:?}: {err}");
            assert!(err.contains("--plot"), "{err}");
        }
    }
    assert_eq!(std::fs::read_to_string(&old).unwrap(), "keep");
    assert_untouched(dir.path());
    // --force is only for a file something writes.
    let out = vmm_bounded(&["run", "--workload", "none", "--force"]);
    assert_eq!(out.status.code(), Some(68));
}

/// Descriptors 1 and 2 closed at exec (`vmm ... >&- 2>&-`) are opened on
/// `/dev/null` before `vmm` opens anything: no file `vmm` opens may take
/// their numbers, where a message or a table would land in it. Before,
/// the pipe `--guest-log /dev/stdin` opened took descriptor 1 (and the
/// temporary file of `features import DUMP OUT 2>&-` took 2).
#[test]
fn closed_standard_descriptors_are_never_handed_to_a_file() {
    // `vmm` blocks reading the pipe until the test closes its end.
    let mut child = Command::new("sh")
        .args(["-c", r#"exec "$0" "$@" >&- 2>&-"#])
        .arg(vmm_bin())
        .args(["features", "--guest-log", common::stdin_path()])
        .stdin(Stdio::piped())
        .spawn()
        .expect("run sh");
    let fd = |n: u32| std::fs::read_link(format!("/proc/{}/fd/{n}", child.id())).ok();
    // Until `vmm` (not `sh`) has opened its standard input's pipe a
    // second time.
    let opened = || {
        let stdin = fd(0).filter(|t| t.to_string_lossy().starts_with("pipe:"));
        stdin.is_some() && (1..8).any(|n| fd(n) == stdin)
    };
    let start = Instant::now();
    while !opened() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "vmm never opened its standard input"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let (one, two) = (fd(1), fd(2));
    drop(child.stdin.take());
    let status = child.wait().expect("wait");
    assert_eq!(one.as_deref(), Some(Path::new("/dev/null")), "descriptor 1");
    assert_eq!(two.as_deref(), Some(Path::new("/dev/null")), "descriptor 2");
    // The empty pipe is refused (the message went to /dev/null).
    assert_eq!(status.code(), Some(64));
}

/// `-` is standard output to `features save` and `features import`; every
/// other writer refuses it instead of making a file or directory named `-`
/// in the working directory (`--plot -` and `schema -` made one before),
/// as a usage error (68): refused for what it says, on every host (it was
/// 64, the status of what a host cannot serve).
#[test]
fn a_dash_is_standard_output_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["run", "--workload", "none", "--no-native", "--plot", "-"],
        vec![
            "run",
            "--workload",
            "none",
            "--no-native",
            "--snapshot-file",
            "-",
            "--snapshot-after",
            "1",
        ],
        vec!["schema", "-"],
        vec!["man", "--dir", "-"],
        vec!["bench", "exits", "--quick", "--plot", "-"],
        vec![
            "bench",
            "exits",
            "--quick",
            "--baseline-dir",
            "-",
            "--save-baseline",
            "b",
        ],
    ] {
        let out = Command::new(vmm_bin())
            .args(&args)
            .current_dir(dir.path())
            .output()
            .expect("run vmm");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(68), "vmm {args:?}: {err}");
        assert!(
            err.contains("`-` means standard output only to `features save` and `features import`"),
            "vmm {args:?}: {err}"
        );
        assert!(!dir.path().join("-").exists(), "vmm {args:?} made ./-");
    }
    // Where `-` is standard output, the document goes there.
    let out = vmm_bounded(&["features", "import", "zen3-milan", "-"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"name\""));
}
