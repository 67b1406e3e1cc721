//! The shell scripts CI runs (`.ci/run`, `scripts/*.sh`) do not test a
//! pipeline's output with `grep -q` under `set -o pipefail`: grep exits at
//! its first match, the command writing into the pipe dies of SIGPIPE,
//! and the pipeline fails (status 141) exactly when the text was found.
//! `scripts/hw-kvm.sh` read "bookworm-backports" out of `apt-cache policy`
//! that way and installed bookworm's QEMU 7.2, which the harness refuses.

use std::path::{Path, PathBuf};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).to_path_buf()
}

/// `.ci/run` and every `scripts/*.sh`.
fn scripts() -> Vec<PathBuf> {
    let mut all = vec![root().join(".ci/run")];
    for entry in std::fs::read_dir(root().join("scripts")).expect("scripts/") {
        let path = entry.expect("scripts/ entry").path();
        if path.extension().is_some_and(|e| e == "sh") {
            all.push(path);
        }
    }
    all
}

/// Whether `line` (not a comment) pipes a command into `grep` with `-q`.
fn pipes_into_quiet_grep(line: &str) -> bool {
    let code = line.split_once('#').map_or(line, |(code, _)| code);
    // `||` is a list, not a pipe.
    let code = code.replace("||", ";");
    code.split('|').skip(1).any(|stage| {
        let mut words = stage.split_whitespace();
        words.next() == Some("grep")
            && words
                .take_while(|w| w.starts_with('-'))
                .any(|w| !w.starts_with("--") && w.contains('q'))
    })
}

#[test]
fn no_pipeline_into_grep_q_under_pipefail() {
    let mut found = Vec::new();
    for path in scripts() {
        let text = std::fs::read_to_string(&path).expect("script");
        if !text.contains("pipefail") {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            if pipes_into_quiet_grep(line) {
                found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "`cmd | grep -q` fails under pipefail when grep matches early (SIGPIPE):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_the_pattern_and_nothing_else() {
    assert!(pipes_into_quiet_grep(
        "apt-cache policy qemu-system-x86 | grep -q bookworm-backports && x"
    ));
    assert!(pipes_into_quiet_grep("ldconfig -p | grep -qE 'a|b' || y"));
    assert!(!pipes_into_quiet_grep("grep -q '^HARNESS done$' \"$part\""));
    assert!(!pipes_into_quiet_grep("a | grep -c x >/dev/null"));
    assert!(!pipes_into_quiet_grep("# not code: a | grep -q b"));
    assert!(!pipes_into_quiet_grep("[ -n \"$x\" ] || grep -q y file"));
}
