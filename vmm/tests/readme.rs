//! The documentation as a tested artefact: every `vmm ...` and
//! `cargo run ... -- ...` command in the shell code blocks and command
//! tables (the first column of a table whose first column is headed
//! `command`) of README.md and of every `docs/*.md` runs
//! against the built binary, file by file in the order of [`DOCS`] and
//! line by line within a file, all in one scratch directory (so a file an
//! earlier command writes is there for a later one: `guest.snap` in
//! `docs/snapshot.md`, `host.json` and `vmm.log` in `docs/features.md`,
//! `genoa.json` in `docs/formats.md`), and must exit 0 unless the line ends
//! with `# exit N`.
//!
//! What is not run, and why:
//! - other programs (`cargo test`, `cargo install`, `cargo bench`, `qemu-...`,
//!   `cpuid`) and `text` blocks: they are the test suite itself, a 10-minute
//!   release build, covered by `tests/qemu.rs`, or need files we do not ship;
//! - without KVM (and without `VMM_REQUIRE_KVM=1`), the commands that need
//!   it, and the later commands that read a file one of those would have
//!   written;
//! - a command already run with the same arguments and the same `> FILE`
//!   (`vmm run` is in README.md and `docs/run.md`): it is not run twice.
//!
//! Benchmarks run with minimal budgets (see [`minimal_budget`]): the docs
//! show the real commands (`vmm bench init-xstate` is a 60 s measurement)
//! and the test runs each with one round, one run or one pair, a 0.1 s
//! budget and 64 MiB, which exercises the same code paths in seconds.
//!
//! `cargo run [--release] -p vmm -- ARGS` runs as the built `vmm ARGS`.
//! `> FILE` sends the command's stdout to FILE in the scratch directory (a
//! later command may read it); `2> ...` is dropped, and so is a pipe into
//! another program: the command's own status is what is checked. A pipe
//! from `vmm` into `vmm` (`vmm run ... | vmm features --guest-log
//! /dev/stdin`) runs as a pipeline, the first's stdout the second's stdin;
//! its status is the first failure's, as under `set -o pipefail`. Every
//! command is killed after [`LIMIT`].
//!
//! The other tests here check the documents against the binary: every
//! relative link resolves (file and heading), and the lists that drifted
//! before (the JSON schemas, the bundled profiles, the commands without
//! `--json`) are complete.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{kvm_or_skip, vmm_bin};

/// Wall-clock bound of one command (generous: kvm_pvm is slow, the
/// machine is shared).
const LIMIT: Duration = Duration::from_secs(600);

/// One documented command.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Example {
    /// Line number in its file (1-based).
    line: usize,
    /// The text as written.
    text: String,
    /// The arguments to `vmm`.
    args: Vec<String>,
    /// The documented exit status.
    status: i32,
    /// `> FILE`: where the line's last command's stdout goes (else
    /// nowhere); a first command piped into `vmm` writes into the pipe.
    stdout: Option<String>,
    /// `| vmm ARGS`: the `vmm` command that reads this one's stdout.
    then: Option<Vec<String>>,
}

impl Example {
    /// Every `vmm` command of the line: this one and the one it pipes to.
    fn commands(&self) -> impl Iterator<Item = &Vec<String>> {
        std::iter::once(&self.args).chain(self.then.iter())
    }
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

/// The `vmm` arguments of the command a line pipes its output into, if
/// that command is `vmm` too.
fn piped_vmm_args(line: &str) -> Option<Vec<String>> {
    let code = line.split(" #").next().unwrap_or(line);
    let (_, rest) = code.split_once(" | ")?;
    vmm_args(rest)
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

/// Every command of `sh`/`bash`/`console`/untyped code blocks and of the
/// first column of command tables (those whose first column is headed
/// `command`), in the order of the text.
fn examples(readme: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let mut fence: Option<bool> = None; // Some(runnable) inside a block
    let mut command_table: Option<bool> = None; // Some(runnable) inside a table
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
                    then: piped_vmm_args(text),
                });
            }
        };
        match fence {
            Some(true) => push(t),
            Some(false) => {}
            None if t.starts_with('|') => {
                let first = t[1..].split(" | ").next().unwrap_or("");
                match command_table {
                    // The header row: a command table's first column is
                    // headed `command`.
                    None => command_table = Some(first.trim() == "command"),
                    // Backticked spans of a command table's first column
                    // (other cells, and other tables, mention `vmm` in
                    // prose).
                    Some(true) => {
                        for (k, span) in first.split('`').enumerate() {
                            if k % 2 == 1 {
                                push(span);
                            }
                        }
                    }
                    Some(false) => {}
                }
            }
            None => command_table = None,
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

/// One `vmm` of a pipeline, started in `dir`, with its stderr collected by
/// a thread.
fn spawn(args: &[String], dir: &Path, stdin: Stdio, stdout: Stdio) -> Started {
    let mut child = Command::new(vmm_bin())
        .args(args)
        .current_dir(dir)
        .stdin(stdin)
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
    Started {
        child,
        reader,
        status: None,
    }
}

/// A started `vmm` and what is known of its end.
struct Started {
    child: std::process::Child,
    reader: std::thread::JoinHandle<String>,
    /// `Some(code)` once it ended (`code` `None`: killed by a signal).
    status: Option<Option<i32>>,
}

/// Run one example in `dir` (a pipeline of two when it pipes into `vmm`),
/// every process killed after [`LIMIT`]: (status, stderr tail). The status
/// is the first failure's, as under `set -o pipefail` (`None`: killed).
fn run(ex: &Example, dir: &Path) -> (Option<i32>, String) {
    let last_stdout = || match &ex.stdout {
        Some(f) => Stdio::from(std::fs::File::create(dir.join(f)).expect("create the > file")),
        None => Stdio::null(),
    };
    let mut procs = Vec::new();
    match &ex.then {
        None => procs.push(spawn(&ex.args, dir, Stdio::null(), last_stdout())),
        Some(next) => {
            let mut first = spawn(&ex.args, dir, Stdio::null(), Stdio::piped());
            let pipe = first.child.stdout.take().expect("stdout is piped");
            procs.push(first);
            procs.push(spawn(next, dir, Stdio::from(pipe), last_stdout()));
        }
    }
    let start = Instant::now();
    while procs.iter().any(|p| p.status.is_none()) {
        for p in procs.iter_mut().filter(|p| p.status.is_none()) {
            if let Some(s) = p.child.try_wait().expect("wait for vmm") {
                p.status = Some(s.code());
            } else if start.elapsed() > LIMIT {
                let _ = p.child.kill();
                let _ = p.child.wait();
                p.status = Some(None);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut status = Some(0);
    let mut tail = Vec::new();
    for p in procs {
        let code = p.status.expect("every process ended");
        if status == Some(0) {
            status = code;
        }
        let err = p.reader.join().unwrap_or_default();
        let mut t: Vec<&str> = err.lines().rev().take(6).collect();
        t.reverse();
        tail.extend(t.into_iter().map(str::to_string));
    }
    (status, tail.join("\n"))
}

/// The documents whose commands run, in this order (one scratch directory
/// for all: a later file may read what an earlier one wrote, though today
/// each file's commands only read files that the same file wrote first).
/// Every `docs/*.md` must be listed ([`every_doc_is_listed`]).
const DOCS: &[&str] = &[
    "README.md",
    "docs/README.md",
    "docs/cli.md",
    "docs/run.md",
    "docs/workloads.md",
    "docs/features.md",
    "docs/formats.md",
    "docs/bench.md",
    "docs/snapshot.md",
    "docs/snapshot-format.md",
    "docs/protocol.md",
    "docs/design.md",
    "docs/measurements.md",
    "docs/hw-kvm.md",
];

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn read(doc: &str) -> String {
    std::fs::read_to_string(root().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"))
}

/// Set `opt` to `value`: replace its value where it is given, else append
/// it.
fn set_opt(args: &mut Vec<String>, opt: &str, value: &str) {
    match args.iter().position(|a| a == opt) {
        Some(i) if i + 1 < args.len() => args[i + 1] = value.to_string(),
        _ => args.extend([opt.to_string(), value.to_string()]),
    }
}

/// Drop `opt` and its value.
fn drop_opt(args: &mut Vec<String>, opt: &str) {
    if let Some(i) = args.iter().position(|a| a == opt) {
        args.drain(i..(i + 2).min(args.len()));
    }
}

/// The arguments a documented benchmark runs with here: its budget, rounds,
/// runs, pairs and sizes at their smallest (`--rounds`, `--runs`, `--pairs`
/// 1; `bench exits --budget 0.1`, the budget's lower bound being "above 0";
/// `bench snapshot --mem 64`). Everything else is as documented, so the
/// same code paths run; only the measurement is shorter. Other commands are
/// unchanged.
fn minimal_budget(args: &[String]) -> Vec<String> {
    let mut a = args.to_vec();
    if a.first().map(String::as_str) != Some("bench") || a.iter().any(|w| w == "--help") {
        return a;
    }
    match a.get(1).map(String::as_str) {
        Some("exits") => {
            drop_opt(&mut a, "--count");
            set_opt(&mut a, "--budget", "0.1");
            set_opt(&mut a, "--rounds", "1");
        }
        Some("init-xstate") => {
            // `--rounds` replaces the budget (they conflict).
            drop_opt(&mut a, "--budget");
            set_opt(&mut a, "--rounds", "1");
        }
        Some("peers") => set_opt(&mut a, "--runs", "1"),
        Some("startup") => set_opt(&mut a, "--pairs", "1"),
        Some("snapshot") => {
            set_opt(&mut a, "--runs", "1");
            set_opt(&mut a, "--mem", "64");
        }
        _ => {}
    }
    a
}

/// The files a command names or writes that look like files (`guest.snap`,
/// `host.json`): what a later command cannot have when this one was
/// skipped.
fn file_words(ex: &Example) -> Vec<String> {
    ex.commands()
        .flatten()
        .chain(ex.stdout.iter())
        .filter(|w| {
            !w.starts_with('-')
                && w.parse::<f64>().is_err()
                && w.rsplit_once('.').is_some_and(|(stem, ext)| {
                    !stem.is_empty()
                        && !ext.is_empty()
                        && ext.chars().all(|c| c.is_ascii_alphanumeric())
                        && !w.contains([' ', '='])
                })
        })
        .cloned()
        .collect()
}

/// The extraction itself, on known text.
#[test]
fn extraction_finds_blocks_and_table_cells() {
    let text = "```sh\nvmm run --xfeatures 'x87,sse'  # exit 1\ncargo test --workspace\n\
                cargo run --release -p vmm -- features --json | jq .\n```\n\
                ```text\nvmm: not a command\n```\n\
                | command | what |\n|---|---|\n\
                | `vmm man`, `vmm completions bash` | `vmm` in prose |\n\
                Prose `vmm prose` is not run.\n\
                | option | meaning |\n|---|---|\n| `vmm in an option table` | no |\n\n\
                - a list item:\n\n  ```sh\n  vmm schema out > x.txt\n  ```\n\
                ```sh\nvmm run --serial | vmm features --guest-log /dev/stdin # exit 3\n\
                vmm man | man -l -\n```\n";
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
            (11, vec!["man"], 0),
            (11, vec!["completions", "bash"], 0),
            (20, vec!["schema", "out"], 0),
            (23, vec!["run", "--serial"], 3),
            (24, vec!["man"], 0),
        ]
    );
    assert_eq!(ex[4].stdout.as_deref(), Some("x.txt"));
    assert_eq!(file_words(&ex[4]), vec!["x.txt"]);
    // A pipe into `vmm` is a pipeline; into another program, dropped.
    assert_eq!(
        ex[5].then,
        Some(
            ["features", "--guest-log", "/dev/stdin"]
                .map(String::from)
                .to_vec()
        )
    );
    assert_eq!(ex[6].then, None);
    assert!(ex[..5].iter().all(|e| e.then.is_none()));
}

/// The benchmark rewrite, on the commands the docs show.
#[test]
fn benchmarks_run_with_minimal_budgets() {
    let cases: &[(&str, &str)] = &[
        (
            "bench exits --quick",
            "bench exits --quick --budget 0.1 --rounds 1",
        ),
        (
            "bench exits --budget 60 --rounds 5 --json",
            "bench exits --budget 0.1 --rounds 1 --json",
        ),
        (
            "bench exits --count 500",
            "bench exits --budget 0.1 --rounds 1",
        ),
        ("bench init-xstate", "bench init-xstate --rounds 1"),
        (
            "bench init-xstate --budget 60 --quick",
            "bench init-xstate --quick --rounds 1",
        ),
        ("bench peers --runs 3", "bench peers --runs 1"),
        ("bench startup --pairs 5", "bench startup --pairs 1"),
        (
            "bench snapshot --mem 64,512,2048 --runs 3",
            "bench snapshot --mem 64 --runs 1",
        ),
        ("run --workload all", "run --workload all"),
        ("bench exits --help", "bench exits --help"),
    ];
    for (doc, ran) in cases {
        let args: Vec<String> = doc.split(' ').map(str::to_string).collect();
        assert_eq!(minimal_budget(&args).join(" "), *ran, "{doc}");
    }
    let snap = Example {
        line: 1,
        text: String::new(),
        args: [
            "run",
            "--snapshot-after",
            "0.5",
            "--snapshot-file",
            "guest.snap",
        ]
        .map(String::from)
        .to_vec(),
        status: 0,
        stdout: Some("run.json".into()),
        then: None,
    };
    assert_eq!(file_words(&snap), vec!["guest.snap", "run.json"]);
}

/// A new page under docs/ has its commands run too.
#[test]
fn every_doc_is_listed() {
    let mut on_disk: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = DOCS
        .iter()
        .filter(|d| d.starts_with("docs/"))
        .map(|d| d.to_string())
        .collect();
    listed.sort();
    assert_eq!(
        listed, on_disk,
        "DOCS in tests/readme.rs must list every docs/*.md"
    );
}

#[test]
fn every_documented_command_works() {
    if common::in_hw_kvm_harness() {
        // The documented commands include `vmm bench startup` (it compiles
        // its floor with `cc`) and `--qemu qemu-system-x86_64`; the
        // harness's machine has neither, and the quick workloads with their
        // native comparison are slow under TCG. The host runs them in the
        // same CI run; what differs on kvm_amd is covered by the run,
        // snapshot, smp and hostile tests.
        common::skip(
            "every_documented_command_works",
            "needs cc and QEMU, which the hardware-KVM harness's machine lacks",
        );
        return;
    }
    let kvm = kvm_or_skip("every_documented_command_works (the KVM commands)");
    let dir = std::env::temp_dir().join(format!("vmm-docs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = Vec::new();
    // (args, piped into, stdout) already run, and where.
    type Done = (Vec<String>, Option<Vec<String>>, Option<String>, String);
    let mut done: Vec<Done> = Vec::new();
    // Files a skipped command would have written, and which command.
    let mut missing: Vec<(String, String)> = Vec::new();
    let mut count = 0;
    let total = Instant::now();
    for doc in DOCS {
        let all = examples(&read(doc));
        count += all.len();
        for ex in &all {
            let at = format!("{doc}:{}", ex.line);
            if ex.commands().any(|c| needs_kvm(c)) && !kvm {
                eprintln!("SKIPPED {at} {} (no KVM)", ex.text);
                for f in file_words(ex) {
                    if !dir.join(&f).exists() {
                        missing.push((f, at.clone()));
                    }
                }
                continue;
            }
            if let Some((f, by)) = missing.iter().find(|(f, _)| {
                ex.commands().any(|c| c.contains(f)) && ex.stdout.as_ref() != Some(f)
            }) {
                eprintln!("SKIPPED {at} {} (reads {f}, which {by} writes)", ex.text);
                continue;
            }
            if let Some((_, _, _, first)) = done
                .iter()
                .find(|(a, t, o, _)| *a == ex.args && *t == ex.then && *o == ex.stdout)
            {
                eprintln!("{at} {} -> as {first}", ex.text);
                continue;
            }
            done.push((
                ex.args.clone(),
                ex.then.clone(),
                ex.stdout.clone(),
                at.clone(),
            ));
            let ran = Example {
                args: minimal_budget(&ex.args),
                then: ex.then.as_deref().map(minimal_budget),
                ..ex.clone()
            };
            let start = Instant::now();
            let (status, err) = run(&ran, &dir);
            let how = if ran.args == ex.args && ran.then == ex.then {
                String::new()
            } else {
                let then = ran
                    .then
                    .as_ref()
                    .map_or(String::new(), |t| format!(" | vmm {}", t.join(" ")));
                format!(" (run as `vmm {}{then}`)", ran.args.join(" "))
            };
            eprintln!(
                "{at} {}{how} -> {status:?} in {:.1} s",
                ex.text,
                start.elapsed().as_secs_f64()
            );
            if status != Some(ex.status) {
                failures.push(format!(
                    "{at}: `{}`{how} exited {} (documented: {}):\n{err}",
                    ex.text,
                    status.map_or_else(
                        || format!("nothing: killed after {} s", LIMIT.as_secs()),
                        |s| s.to_string()
                    ),
                    ex.status
                ));
            }
        }
    }
    eprintln!(
        "{count} documented commands, {} run, in {:.1} s",
        done.len(),
        total.elapsed().as_secs_f64()
    );
    assert!(count >= 40, "too few documented commands found: {count}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "documented commands that do not work:\n{}",
        failures.join("\n")
    );
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_`
/// dropped, spaces made `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && t.starts_with('#') {
            out.push(slug(t.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of the inline links `[text](target)` of a line.
fn link_targets(line: &str) -> Vec<String> {
    line.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(t, _)| t.to_string()))
        .collect()
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(
        slug(" The `--xfeatures` grammar"),
        "the---xfeatures-grammar"
    );
    assert_eq!(slug(" SMP: `--vcpus`"), "smp---vcpus");
    assert_eq!(
        slug(" `vmm bench peers`: the same guest under every VMM"),
        "vmm-bench-peers-the-same-guest-under-every-vmm"
    );
    assert_eq!(slug(" kvm_pvm's CPUID table"), "kvm_pvms-cpuid-table");
}

/// Every relative link of README.md and docs/*.md names a file that exists
/// and, with `#anchor`, a heading of it.
#[test]
fn doc_links_resolve() {
    let mut broken = Vec::new();
    for doc in DOCS {
        let text = read(doc);
        let base = root().join(doc).parent().unwrap().to_path_buf();
        let mut fenced = false;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                continue;
            }
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() {
                    root().join(doc)
                } else {
                    base.join(path)
                };
                if !file.exists() {
                    broken.push(format!("{doc}:{}: {target}: no such file", i + 1));
                    continue;
                }
                if let Some(a) = anchor {
                    let heads = anchors(&std::fs::read_to_string(&file).unwrap_or_default());
                    if !heads.iter().any(|h| h == a) {
                        broken.push(format!("{doc}:{}: {target}: no such heading", i + 1));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The subcommands of `vmm ARGS --help` (its `Commands:` section, without
/// `help`).
fn subcommands(args: &[&str]) -> Vec<String> {
    let out = common::vmm(&[args, &["--help"]].concat());
    assert!(out.status.success(), "{args:?} --help: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

/// The lists that drifted from the binary before: the commands without
/// `--json` (from each leaf command's `--help`), the JSON documents (from
/// `docs/schema/`) and the bundled profiles (from `profiles/`), each
/// complete where the docs give it.
#[test]
fn docs_list_what_the_binary_has() {
    // Leaf commands, from the help itself.
    let mut leaves: Vec<Vec<String>> = Vec::new();
    let mut todo: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = todo.pop() {
        let p: Vec<&str> = path.iter().map(String::as_str).collect();
        let subs = subcommands(&p);
        // `vmm features` is a command of its own as well as a group.
        if (subs.is_empty() || p == ["features"]) && !path.is_empty() {
            leaves.push(path.clone());
        }
        for s in subs {
            let mut q = path.clone();
            q.push(s);
            todo.push(q);
        }
    }
    leaves.sort();
    assert!(leaves.len() >= 15, "{leaves:?}");
    let no_json: Vec<String> = leaves
        .iter()
        .filter(|path| {
            let p: Vec<&str> = path.iter().map(String::as_str).collect();
            let out = common::vmm(&[&p[..], &["--help"]].concat());
            // An option line, not a mention in a description.
            !String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.trim_start().starts_with("--json"))
        })
        .map(|p| format!("`vmm {}`", p.join(" ")))
        .collect();
    // Line breaks do not matter.
    let flat = |doc: &str| read(doc).split_whitespace().collect::<Vec<_>>().join(" ");
    let cli = flat("docs/cli.md");
    let readme = flat("README.md");
    let formats = flat("docs/formats.md");
    let index = flat("docs/README.md");
    let json_para = cli
        .split("## ")
        .find(|p| p.contains("have no `--json`"))
        .expect("docs/cli.md says which commands have no --json");
    for c in &no_json {
        assert!(
            json_para.contains(c.as_str()),
            "docs/cli.md: {c} has no --json"
        );
        assert!(readme.contains(c.as_str()), "README.md: {c} has no --json");
    }
    let word = ["no", "one", "two", "three", "four", "five", "six", "seven"]
        .get(no_json.len())
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .unwrap()
                .to_uppercase()
                .chain(c)
                .collect::<String>()
        })
        .unwrap_or_default();
    assert!(
        json_para.contains(&format!("{word} commands have no `--json`")),
        "docs/cli.md should say {word} commands have no --json: {no_json:?}"
    );
    // Every JSON document.
    let mut schemas = 0;
    for e in std::fs::read_dir(root().join("docs/schema")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        let doc = name.strip_suffix(".schema.json").expect("a schema file");
        schemas += 1;
        assert!(
            formats.contains(&format!("[`{doc}`](schema/{name})")),
            "docs/formats.md does not list the {doc} document"
        );
    }
    assert!(
        index.contains(&format!("the {schemas} JSON documents")),
        "docs/README.md counts {schemas} JSON documents"
    );
    // Every bundled profile, with its CPU and XCR0 as the binary lists them.
    let (out, v) = common::vmm_json(&["features", "--list-profiles"]);
    assert!(out.status.success(), "{out:?}");
    let list = v["profiles"].as_array().unwrap();
    let files = common::json_files_in(&root().join("profiles"));
    assert_eq!(list.len(), files);
    for p in list {
        let row = format!(
            "| `{}` | {} | {} | {} ({}) |",
            p["name"].as_str().unwrap(),
            p["cpu"].as_str().unwrap(),
            p["microarchitecture"].as_str().unwrap(),
            p["xcr0"].as_str().unwrap(),
            p["xcr0_names"].as_str().unwrap()
        );
        assert!(
            formats.contains(&row),
            "docs/formats.md lacks the row {row}"
        );
    }
    for (doc, text) in [("README.md", &readme), ("docs/README.md", &index)] {
        assert!(
            text.contains(&format!("{} bundled", list.len())),
            "{doc} counts {} bundled profiles",
            list.len()
        );
    }
}
