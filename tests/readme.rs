//! The README as a tested artefact: every `vmm ...` and
//! `cargo run ... -- ...` command in its shell code blocks and command
//! tables (their first column) runs against the built binary, in README order, in one scratch
//! directory (so a file an earlier command writes, like `guest.snap`, is
//! there for a later one), and must exit 0 unless the README line ends
//! with `# exit N`.
//!
//! What is not run, and why:
//! - other programs (`cargo test`, `cargo install`, `cargo bench`, `qemu-...`):
//!   they are the test suite itself, a 10-minute release build, or covered by
//!   `tests/qemu.rs`;
//! - without KVM (and without `VMM_REQUIRE_KVM=1`), the commands that need it.
//!
//! `cargo run [--release] -p vmm -- ARGS` runs as the built `vmm ARGS`.
//! `> FILE` sends the command's stdout to FILE in the scratch directory (a
//! later command may read it); `2> ...` and pipes are dropped: the
//! command's own status is what is checked. Every command is killed after
//! [`LIMIT`].

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{kvm_or_skip, vmm_bin};

/// Wall-clock bound of one command (generous: kvm_pvm is slow, the
/// machine is shared).
const LIMIT: Duration = Duration::from_secs(600);

/// One README command.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Example {
    /// README line number (1-based).
    line: usize,
    /// The text as written.
    text: String,
    /// The arguments to `vmm`.
    args: Vec<String>,
    /// The documented exit status.
    status: i32,
    /// `> FILE`: where its stdout goes (else nowhere).
    stdout: Option<String>,
}

/// The file of a `> FILE` stdout redirection on the line, if any (`2>`,
/// `>>` and `&>` are not stdout-to-file and are ignored).
fn stdout_file(line: &str) -> Option<String> {
    let code = line.split(" #").next().unwrap_or(line);
    let mut toks = code.split_whitespace();
    while let Some(t) = toks.next() {
        if t == ">" {
            return toks.next().map(str::to_string);
        }
    }
    None
}

/// Split a shell line into words (single and double quotes, no
/// expansions), stopping at a pipe, a redirection or a comment.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                in_word = true;
                for d in chars.by_ref() {
                    if d == c {
                        break;
                    }
                    cur.push(d);
                }
            }
            '|' | '>' | '<' | '#' | ';' | '&' if !in_word || c != '#' => break,
            '2' if !in_word && chars.peek() == Some(&'>') => break,
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

/// The `vmm` arguments of a command line, if it is a `vmm` command.
fn vmm_args(line: &str) -> Option<Vec<String>> {
    let w = words(line);
    match w.first().map(String::as_str) {
        Some("vmm") => Some(w[1..].to_vec()),
        Some("cargo") if w.get(1).map(String::as_str) == Some("run") => {
            let sep = w.iter().position(|x| x == "--")?;
            let pkg = w[..sep].windows(2).any(|p| p[0] == "-p" && p[1] == "vmm");
            pkg.then(|| w[sep + 1..].to_vec())
        }
        _ => None,
    }
}

/// `# exit N` at the end of a line: the documented status.
fn documented_status(line: &str) -> i32 {
    line.rsplit_once("# exit ")
        .and_then(|(_, n)| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Every command of `sh`/`bash`/`console`/untyped code blocks and of table
/// cells, in README order.
fn examples(readme: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let mut fence: Option<bool> = None; // Some(runnable) inside a block
    for (i, line) in readme.lines().enumerate() {
        let t = line.trim_start();
        if let Some(lang) = t.strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(matches!(
                    lang.trim(),
                    "" | "sh" | "bash" | "console" | "shell"
                )),
            };
            continue;
        }
        let mut push = |text: &str| {
            let text = text.trim().trim_start_matches("$ ");
            if let Some(args) = vmm_args(text) {
                out.push(Example {
                    line: i + 1,
                    text: text.to_string(),
                    args,
                    status: documented_status(text),
                    stdout: stdout_file(text),
                });
            }
        };
        match fence {
            Some(true) => push(t),
            Some(false) => {}
            None if t.starts_with('|') => {
                // Backticked spans of a table's first column (the command
                // column; other cells mention `vmm` in prose).
                let first = t[1..].split(" | ").next().unwrap_or("");
                for (k, span) in first.split('`').enumerate() {
                    if k % 2 == 1 {
                        push(span);
                    }
                }
            }
            None => {}
        }
    }
    out
}

/// Whether a command needs `/dev/kvm`.
fn needs_kvm(args: &[String]) -> bool {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["run", ..] | ["restore", ..] | ["bench", ..] => true,
        ["features", rest @ ..] => {
            // `features` boots a guest and opens KVM unless it shows a profile.
            !rest
                .iter()
                .any(|w| ["--profile", "--list-profiles", "compare", "--help"].contains(w))
        }
        _ => false,
    }
}

/// Run one example in `dir`, killed after [`LIMIT`]: (status, stderr tail).
fn run(ex: &Example, dir: &Path) -> (Option<i32>, String) {
    let stdout = match &ex.stdout {
        Some(f) => Stdio::from(std::fs::File::create(dir.join(f)).expect("create the > file")),
        None => Stdio::null(),
    };
    let mut child = Command::new(vmm_bin())
        .args(&ex.args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start vmm");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for vmm") {
            break s.code();
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = reader.join().unwrap_or_default();
    let tail: Vec<&str> = err.lines().rev().take(6).collect();
    (
        status,
        tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
    )
}

fn readme() -> String {
    std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md")
}

/// The extraction itself, on known text.
#[test]
fn extraction_finds_blocks_and_table_cells() {
    let text = "```sh\nvmm run --xfeatures 'x87,sse'  # exit 1\ncargo test --workspace\n\
                cargo run --release -p vmm -- features --json | jq .\n```\n\
                ```text\nvmm: not a command\n```\n\
                | `vmm man`, `vmm completions bash` | `vmm` in prose |\n\
                Prose `vmm prose` is not run.\n";
    let ex = examples(text);
    let got: Vec<(usize, Vec<&str>, i32)> = ex
        .iter()
        .map(|e| {
            (
                e.line,
                e.args.iter().map(String::as_str).collect(),
                e.status,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (2, vec!["run", "--xfeatures", "x87,sse"], 1),
            (4, vec!["features", "--json"], 0),
            (9, vec!["man"], 0),
            (9, vec!["completions", "bash"], 0),
        ]
    );
}

#[test]
fn every_readme_command_works() {
    if common::in_hw_kvm_harness() {
        // The README's commands are benchmarks at their documented budgets
        // (init-xstate, a full restore, the copy sweep) and need the host's
        // compiler and QEMU: 7 minutes under TCG, most of the harness's
        // budget. The host runs them in the same CI run; what differs on
        // kvm_amd is covered by the run, snapshot, smp and hostile tests.
        eprintln!(
            "SKIPPED every_readme_command_works: the README's benchmark budgets \
             are the host's (7 minutes under TCG)"
        );
        return;
    }
    let all = examples(&readme());
    assert!(all.len() >= 15, "too few README commands found: {all:#?}");
    let kvm = kvm_or_skip("every_readme_command_works (the KVM commands)");
    let dir = std::env::temp_dir().join(format!("vmm-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = Vec::new();
    for ex in &all {
        if needs_kvm(&ex.args) && !kvm {
            eprintln!("SKIPPED README:{} {} (no KVM)", ex.line, ex.text);
            continue;
        }
        let start = Instant::now();
        let (status, err) = run(ex, &dir);
        eprintln!(
            "README:{} {} -> {status:?} in {:.1} s",
            ex.line,
            ex.text,
            start.elapsed().as_secs_f64()
        );
        if status != Some(ex.status) {
            failures.push(format!(
                "README.md:{}: `{}` exited {} (documented: {}):\n{err}",
                ex.line,
                ex.text,
                status.map_or_else(
                    || format!("nothing: killed after {} s", LIMIT.as_secs()),
                    |s| s.to_string()
                ),
                ex.status
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "README commands that do not work:\n{}",
        failures.join("\n")
    );
}
