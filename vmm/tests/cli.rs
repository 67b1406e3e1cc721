//! The `vmm` command line itself: help, and refusals that need no KVM.

use std::process::Command;

fn vmm(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vmm"))
        .args(args)
        .output()
        .expect("cannot start vmm")
}

#[test]
fn help_lists_the_subcommands() {
    let out = vmm(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("run"), "{text}");
}

#[test]
fn bad_workload_list_is_refused_before_boot() {
    let out = vmm(&["run", "--workload", "aes,bogus"]);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--workload"), "{err}");
}

/// Usage errors have their own status, 68 (`EXIT_USAGE`), not clap's 2,
/// which is the guest's CPU-exception status.
#[test]
fn unknown_option_is_a_usage_error() {
    for args in [
        &["run", "--no-such-option"][..],
        &["run", "--mem"],
        &["no-such-command"],
        &[],
    ] {
        let out = vmm(args);
        assert_eq!(out.status.code(), Some(68), "vmm {args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        // clap's own message, said as every vmm error is (`vmm: `), or the
        // usage for a missing command.
        assert!(
            err.starts_with("vmm: ") || err.contains("Usage: vmm"),
            "vmm {args:?}: {err}"
        );
        assert!(!err.starts_with("error:"), "vmm {args:?}: {err}");
    }
    for args in [["--help"], ["--version"]] {
        let out = vmm(&args);
        assert_eq!(out.status.code(), Some(0), "vmm {args:?}");
        assert!(!out.stdout.is_empty());
    }
}

/// `xfeatures=` carries the VMM's policy: a user cannot supply it.
#[test]
fn vmm_owned_cmdline_word_is_a_usage_error() {
    let out = vmm(&["run", "--cmdline", "quiet xfeatures=0xe7"]);
    assert_eq!(out.status.code(), Some(68));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"xfeatures=0xe7\""), "{err}");
    assert!(err.contains("--xfeatures"), "{err}");
}

/// A command line the guest would cut (its 2048 bytes, with the VMM's own
/// words) is refused before anything runs, naming the limit: cut, it lost
/// the VMM's `xfeatures=` word and the guest enabled state outside the
/// policy (issue 37 §5).
#[test]
fn a_command_line_the_guest_would_cut_is_a_usage_error() {
    let long = "w ".repeat(1010);
    let out = vmm(&["run", "--workload", "none", "--cmdline", long.trim_end()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(68), "{err}");
    assert!(err.contains("2048 bytes"), "the limit is named: {err}");
}

/// A negative number is a bad value, said as one, not an unknown option
/// (`--mem -5` was "unexpected argument '-5'", issue 38 §5).
#[test]
fn a_negative_number_is_an_invalid_value() {
    for args in [["run", "--mem", "-5"], ["run", "--vcpus", "-1"]] {
        let out = vmm(&args);
        assert_eq!(out.status.code(), Some(68), "vmm {args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("vmm: invalid value"), "vmm {args:?}: {err}");
    }
}

/// A mistyped subcommand gets the one it was near (`vmm rnu` suggested
/// nothing, issue 38 §5).
#[test]
fn a_mistyped_subcommand_gets_a_tip() {
    let out = vmm(&["rnu"]);
    assert_eq!(out.status.code(), Some(68));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("vmm: unrecognized subcommand 'rnu'"),
        "{err}"
    );
    assert!(err.contains("did you mean 'run'?"), "{err}");
}
