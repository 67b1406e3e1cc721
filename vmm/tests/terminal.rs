//! Text from files, snapshots and the command line reaches the terminal
//! shown, not obeyed: every control character (but tab and line break),
//! DEL, C1 control and bidirectional mark in `vmm`'s messages and tables
//! is written as a `\uXXXX` escape. A file named `$'\e]0;x\a'`, or a
//! snapshot whose recorded command line sets the window title, printed
//! its escape sequences raw before.

mod common;

use common::crafted::{info_args, real_snapshot, refusal, restore_args, temp_snapshot};
use common::{kvm_or_skip, stderr, vmm};
use vmm::snapshot::state::Snapshot;

/// Whether `text` holds a character a terminal would obey.
fn obeyed(text: &str) -> Option<char> {
    text.chars()
        .find(|&c| vmm::internal::cli::terminal::is_unsafe(c))
}

/// A path with an escape sequence, a carriage return and a bidi override,
/// named in messages of every kind: a refused kernel, profile and guest
/// log, a missing baseline, a compare input.
#[test]
fn paths_in_messages_are_shown_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = dir.path().join("\u{1b}]0;owned\u{7}\r\u{202e}x");
    let h = hostile.to_str().unwrap();
    for args in [
        vec!["run", "--kernel", h],
        vec!["features", "--profile", h],
        vec!["features", "--guest-log", h],
        vec!["features", "compare", h, "zen3-milan"],
        vec!["bench", "exits", "--compare", h],
        vec!["snapshot", "info", h],
        vec!["restore", h],
    ] {
        let out = vmm(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert_eq!(obeyed(&err), None, "{args:?}: {err:?}");
        assert!(
            err.contains("\\u001b]0;owned\\u0007\\u000d\\u202ex"),
            "{args:?}: {err}"
        );
    }
    // In a table too: a profile read from such a file names it.
    let profile = dir.path().join("zen3\u{1b}[2J.json");
    std::fs::write(
        &profile,
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../xstate/tests/data/amd-zen3-milan.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let out = vmm(&[
        "features",
        "compare",
        profile.to_str().unwrap(),
        "zen4-genoa",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8(out.stdout).unwrap();
    assert_eq!(obeyed(&table), None, "{table:?}");
    assert!(table.contains("zen3\\u001b[2J.json"), "{table}");
}

/// A crafted snapshot whose command line and version hold escape
/// sequences: `info` shows them escaped in its table and its verdict, and
/// `restore` refuses it naming the field, escaped too.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn snapshot_text_is_shown_escaped() {
    if !kvm_or_skip("snapshot_text_is_shown_escaped") {
        return;
    }
    let mut s = Snapshot::from_bytes(real_snapshot()).expect("the real snapshot decodes");
    s.meta.cmdline = "quiet \u{1b}]0;owned\u{7}".into();
    let p = temp_snapshot("escapes");
    std::fs::write(&p, s.to_bytes()).unwrap();
    let ps = p.to_str().unwrap();
    let info = vmm(&info_args(ps));
    let table = String::from_utf8_lossy(&info.stdout).into_owned();
    assert_eq!(info.status.code(), Some(0), "{}", stderr(&info));
    assert_eq!(obeyed(&table), None, "{table:?}");
    assert!(table.contains("quiet \\u001b]0;owned\\u0007"), "{table}");
    assert!(
        table.contains("restorable on this host: no: ") && table.contains("meta.cmdline: holds"),
        "{table}"
    );
    let restore = vmm(&restore_args(ps, "30"));
    let err = stderr(&restore);
    assert_eq!(restore.status.code(), Some(64), "{err}");
    assert_eq!(obeyed(&err), None, "{err:?}");
    assert!(
        refusal(&err).is_some_and(|r| r.contains("meta.cmdline: holds")),
        "{err}"
    );
    let _ = std::fs::remove_file(p);
}
