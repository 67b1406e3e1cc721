//! Standard output is a file too (issue 37 §4): a reader that closed the
//! pipe ends a command quietly with status 141 (what a shell reports for a
//! tool SIGPIPE ended), a full device is an error with status 64, and no
//! output path panics. Before, every one of these aborted on "failed
//! printing to stdout" (SIGABRT: `main` is `extern "C"`).

mod common;

use std::process::{Command, Stdio};

use common::{kvm_or_skip, vmm_bin};

/// `vmm ARGS` with standard output a pipe nobody reads: its status and
/// standard error.
fn to_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(vmm_bin())
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run vmm");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Commands whose result is on standard output and need no KVM.
const NO_KVM: &[&[&str]] = &[
    &["--help"],
    &["features", "--profile", "zen3-milan"],
    &["features", "--profile", "zen3-milan", "--json"],
    &["features", "--list-profiles", "--json"],
    &["features", "compare", "zen3-milan", "zen4-genoa"],
    &["completions", "bash"],
    &["man"],
];

#[test]
fn a_closed_pipe_ends_each_command_quietly_with_141() {
    for args in NO_KVM {
        let (status, stderr) = to_closed_pipe(args);
        assert_eq!(status, Some(141), "vmm {args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "vmm {args:?}: {stderr}");
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_closed_pipe_ends_a_run_quietly_with_141() {
    if !kvm_or_skip("a_closed_pipe_ends_a_run_quietly_with_141") {
        return;
    }
    for args in [
        &["run", "--workload", "none", "--no-native", "--json"][..],
        &["run", "--workload", "none", "--no-native"][..],
    ] {
        let (status, stderr) = to_closed_pipe(args);
        assert_eq!(status, Some(141), "vmm {args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "vmm {args:?}: {stderr}");
    }
}

#[test]
fn a_full_device_is_an_error_naming_standard_output() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        common::skip(
            "a_full_device_is_an_error_naming_standard_output",
            "no /dev/full",
        );
        return;
    };
    let out = Command::new(vmm_bin())
        .args(["features", "--list-profiles"])
        .stdout(full)
        .output()
        .expect("run vmm");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("writing standard output"),
        "the error names what failed: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
