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
    assert_eq!(out.status.code(), Some(68));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--workload"), "{err}");
}

/// One rule for 68 against 64 (docs/cli.md, "Exit statuses"): a command
/// line refused for what it says is a usage error on every host, whether
/// clap or the VMM refuses it. These need no KVM: each is refused first.
#[test]
fn a_value_refused_for_what_it_says_is_a_usage_error() {
    let cases: &[&[&str]] = &[
        &["run", "--workload", "foo"],
        &["run", "--vcpus", "0"],
        &["run", "--native-reps", "0"],
        &["run", "--mem", "-5"],
        &["run", "--cmdline", "xfeatures=0x3"],
        &["run", "--force"],
        &["bench", "snapshot", "--workload", "foo"],
        &["features", "compare", "zen3-milan", "--xstate-bv", "zz"],
        &[
            "features",
            "--profile",
            "sapphire-rapids",
            "--xfeatures",
            "avx512,-avx",
            "--no-boot",
        ],
        &[
            "features",
            "--profile",
            "sapphire-rapids",
            "--xfeatures",
            "0x5",
            "--no-boot",
        ],
    ];
    for args in cases {
        let out = vmm(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(68), "vmm {args:?}: {err}");
        assert!(err.starts_with("vmm: "), "vmm {args:?}: {err}");
    }
}

/// A negative number is a value of the option before it, refused by that
/// option's own check (its range or its parser), for every option that
/// takes a number. Before, only `--mem` and `--vcpus` took it; the others
/// said `unexpected argument '-1' found`, as if a flag had been mistyped.
#[test]
fn a_negative_number_is_the_options_value_everywhere() {
    for (args, says) in [
        (
            &["run", "--timeout", "-1"][..],
            "'-1' for '--timeout <SECONDS>'",
        ),
        (
            &["run", "--snapshot-after", "-1"][..],
            "'-1' for '--snapshot-after <SECONDS>'",
        ),
        (&["run", "--native-reps", "-1"][..], "-1 is not in 1..=15"),
        (&["run", "--mem", "-5"][..], "'-5' for '--mem <MiB>'"),
        (
            &["features", "--timeout", "-1"][..],
            "'-1' for '--timeout <SECONDS>'",
        ),
        (
            &["bench", "exits", "--budget", "-1"][..],
            "'-1' for '--budget <SECONDS>'",
        ),
        (
            &["bench", "exits", "--count", "-5"][..],
            "'-5' for '--count <COUNT>'",
        ),
        (
            &["bench", "snapshot", "--mem", "-64"][..],
            "'-64' for '--mem <LIST>'",
        ),
        (
            &["bench", "startup", "--pairs", "-3"][..],
            "-3 is not in 1..=10000",
        ),
    ] {
        let out = vmm(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(68), "vmm {args:?}: {err}");
        assert!(!err.contains("unexpected argument"), "vmm {args:?}: {err}");
        assert!(err.contains(says), "vmm {args:?}: {err}");
    }
}

/// The other side of the rule: a valid command line this host or a named
/// file cannot serve is the VMM's failure, 64.
#[test]
fn a_valid_line_the_host_cannot_serve_is_the_vmms_failure() {
    let out = vmm(&["run", "--kernel", "/nonexistent/vmlinux"]);
    assert_eq!(
        out.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
/// (`--mem -5` was "unexpected argument '-5'", issue 38 §5), and a count
/// or size says what is wrong with its text: `--vcpus -1` was "-1 is not
/// in 0..=4294967295" (clap's u32 range, not the option's) and `--mem 1.5`
/// "invalid digit found in string".
#[test]
fn a_negative_number_is_an_invalid_value() {
    for (args, says) in [
        (&["run", "--mem", "-5"][..], "-5 is negative"),
        (&["run", "--vcpus", "-1"], "-1 is negative"),
        (&["run", "--mem", "1.5"], "\"1.5\" is not a whole number"),
        (&["run", "--vcpus", "two"], "\"two\" is not a whole number"),
        (
            &["run", "--vcpus", "4294967296"],
            "4294967296 is too large (at most 4294967295)",
        ),
        (
            &["bench", "snapshot", "--mem", "64,-64"],
            "-64 is negative (MiB)",
        ),
    ] {
        let out = vmm(args);
        assert_eq!(out.status.code(), Some(68), "vmm {args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("vmm: invalid value"), "vmm {args:?}: {err}");
        assert!(err.contains(says), "vmm {args:?}: {err}");
        assert!(!err.contains("invalid digit"), "vmm {args:?}: {err}");
        assert!(!err.contains("0..="), "vmm {args:?}: {err}");
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

/// The rule where the VMM refuses the value only once it knows the host
/// (the policy is resolved against KVM's table): a broken XCR0 rule or an
/// out-of-range size is still 68, a component no CPU defines (bit 20)
/// still 64.
#[test]
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
fn the_rule_holds_where_the_host_is_consulted() {
    let usage: &[&[&str]] = &[
        &["run", "--mem", "0"],
        &["run", "--vcpus", "9"],
        &["run", "--xfeatures", "0x5"],
        &["run", "--xfeatures", "0x20000"],
        &["bench", "exits", "--xfeatures", "0x5"],
    ];
    for args in usage {
        let out = vmm(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(68), "vmm {args:?}: {err}");
    }
    let out = vmm(&["run", "--xfeatures", "0x100003"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("not supported"), "{err}");
}
