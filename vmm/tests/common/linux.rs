//! The stock Linux guest of `vmm/tests/linux.rs` and
//! `vmm/tests/linux_probe.rs`: where its kernel is, when a test can boot
//! it, and the checks every boot shares.
//!
//! The kernel comes from `scripts/hw-kvm.sh`'s cache: `VMM_LINUX_DIR` (the
//! harness sets it) or `target/hw-kvm/linux`, made from the cached
//! package's `vmlinuz` by `scripts/linux_guest.py` when missing.

use std::path::PathBuf;
use std::process::Command;

use super::{hex, in_hw_kvm_harness, kvm_or_skip, vmm_json};

/// The command line: the console on COM1, KERN_INFO shown (`loglevel=7`
/// shows the levels below 7: the x86/fpu lines), a reset right after the
/// panic a boot without a root ends in.
pub const CMDLINE: &str = "console=ttyS0 loglevel=7 panic=-1";

/// Each boot's `--timeout`: a boot takes 12-36 s on kvm_amd under TCG
/// (docs/hw-kvm.md), the harness gives this binary 600 s for its five
/// boots on two threads. A boot that hangs must end here, as a failing
/// test that shows its console, not as a binary killed with nothing said.
pub const BOOT_TIMEOUT_S: &str = "150";

/// The directory with `vmlinux` and `bzImage`, or why there is none.
pub fn linux_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("VMM_LINUX_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = root.join("target/hw-kvm/linux");
    if dir.join("vmlinux").is_file() {
        return Ok(dir);
    }
    let boot = root.join("target/hw-kvm/kernel/boot");
    let vmlinuz = std::fs::read_dir(&boot)
        .map_err(|e| {
            format!(
                "no Debian kernel cached in {} ({e}); run scripts/hw-kvm.sh --install-only",
                boot.display()
            )
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .ok_or_else(|| format!("no vmlinuz-* in {}", boot.display()))?;
    let out = Command::new("python3")
        .arg(root.join("scripts/linux_guest.py"))
        .arg(&vmlinuz)
        .arg(&dir)
        .output()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "scripts/linux_guest.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(dir)
}

/// The kernel file `name` in [`linux_dir`], or a skip naming why (a
/// failure inside the harness, which always carries it).
pub fn kernel_or_skip(test: &str, name: &str) -> Option<String> {
    match linux_dir() {
        Ok(dir) => Some(dir.join(name).display().to_string()),
        Err(why) if in_hw_kvm_harness() => panic!("{test}: the harness carries no Linux: {why}"),
        Err(why) => {
            super::skip(test, &why);
            None
        }
    }
}

/// Why a Linux run on kvm_amd under TCG ended in a way known there and
/// not yet understood, which earns it one retry: a triple fault
/// (`KVM_EXIT_SHUTDOWN`) or a run past [`BOOT_TIMEOUT_S`]. About one boot
/// in twenty did the first before the ACPI tables; after them, about one
/// restore in fifteen of a Linux snapshotted mid-boot (on one vCPU or
/// two) and one CI boot did either (docs/hw-kvm.md). `None` outside the
/// harness: elsewhere every end counts.
pub fn known_flake(v: &serde_json::Value) -> Option<String> {
    let desc = v["exit_description"].as_str().unwrap_or_default();
    let flaky = desc.contains("KVM_EXIT_SHUTDOWN") || v["exit_reason"] == "timed_out";
    (in_hw_kvm_harness() && flaky).then(|| desc.to_string())
}

/// `vmm run` with `args`, retried once after a [`known_flake`]; the retry
/// is said on stderr (`RETRY`), and a second one fails the test.
pub fn vmm_json_retrying(args: &[&str], what: &str) -> (std::process::Output, serde_json::Value) {
    let (out, v) = vmm_json(args);
    if let Some(why) = known_flake(&v) {
        // Where the vCPUs were and how the console ended, each line
        // marked: the harness keeps RETRY lines of a binary that passed.
        let detail = where_stopped(&v) + &console_tail(&out, 8);
        eprintln!("RETRY {what}: the first run ended with {why}");
        for line in detail.lines() {
            eprintln!("RETRY   {line}");
        }
        return vmm_json(args);
    }
    (out, v)
}

/// Whether `test` runs here: a KVM that boots Linux, which is the
/// hardware-KVM harness's kvm_amd; else it skips, saying why.
pub fn hw_kvm_or_skip(test: &str) -> bool {
    if !kvm_or_skip(test) {
        return false;
    }
    if !in_hw_kvm_harness() {
        super::skip(
            test,
            "Linux needs a hardware-style KVM (scripts/hw-kvm.sh); \
             kvm_pvm emulates CPL0 (see linux_on_kvm_pvm_ends_with_the_emulation_failure)",
        );
        return false;
    }
    true
}

/// The last `n` lines of a boot's console (stderr with `--json`), each
/// prefixed `console:`: where CI keeps only a failure's first lines, a
/// failing boot's message leads with how its console ended.
pub fn console_tail(out: &std::process::Output, n: usize) -> String {
    let text = super::stderr(out);
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(n);
    lines[from..]
        .iter()
        .map(|l| format!("console: {l}\n"))
        .collect()
}

/// Where each vCPU was when a run crashed or was stopped, a line each:
/// RIP, RSP, CR2 and CR3, from the crash dump or `--timeout`'s registers.
fn where_stopped(v: &serde_json::Value) -> String {
    let line = |who: &str, r: &serde_json::Value| {
        let x = |v: &serde_json::Value| format!("{:#x}", v.as_u64().unwrap_or(0));
        format!(
            "{who}: rip {} rsp {} cr2 {} cr3 {}\n",
            x(&r["regs"]["rip"]),
            x(&r["regs"]["rsp"]),
            x(&r["sregs"]["cr2"]),
            x(&r["sregs"]["cr3"])
        )
    };
    let mut s = String::new();
    if v["crash"].is_object() {
        s += &line("crashed at", &v["crash"]["registers"]);
    }
    let vcpus = v["smp"]["vcpus"].as_array().cloned().unwrap_or_default();
    for c in vcpus.iter().filter(|c| c["stopped_at"].is_object()) {
        s += &line(&format!("vCPU {} stopped at", c["index"]), &c["stopped_at"]);
    }
    if vcpus.is_empty() && v["stopped_at"].is_object() {
        s += &line("stopped at", &v["stopped_at"]);
    }
    s
}

/// A boot ended by Linux's reset, with an oracle that agrees.
pub fn check_boot(out: &std::process::Output, v: &serde_json::Value, policy: &str) {
    let oracle = &v["linux_xstate"];
    assert_eq!(
        v["exit_reason"],
        "reset",
        "{policy}: {}\n{}{}oracle: {oracle}",
        v["exit_description"],
        where_stopped(v),
        console_tail(out, 40)
    );
    assert_eq!(out.status.code(), Some(70), "{policy}");
    assert_eq!(
        oracle["mismatches"],
        serde_json::json!([]),
        "{policy}: {oracle:#}"
    );
    let want = hex(&v["policy_xfeatures"]);
    assert_eq!(hex(&oracle["enabled"]) & want, want, "{policy}: {oracle:#}");
    eprintln!("{policy}: {}", oracle["lines"]);
}

/// `vmm run` of the Linux `kernel` as every test boots it (256 MiB, no
/// native runs, [`BOOT_TIMEOUT_S`], [`CMDLINE`]), then `extra`.
pub fn linux_args<'a>(kernel: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        "--kernel",
        kernel,
        "--mem",
        "256",
        "--no-native",
        "--timeout",
        BOOT_TIMEOUT_S,
        "--cmdline",
        CMDLINE,
    ];
    args.extend_from_slice(extra);
    args
}

/// [`linux_args`] of the bzImage `bz` with the initramfs `initrd`.
pub fn bzimage_args<'a>(bz: &'a str, initrd: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = linux_args(bz, &["--initrd", initrd]);
    args.extend_from_slice(extra);
    args
}

/// A Linux run given `--snapshot-file snap` that must have ended in its
/// snapshot: returns the console it printed so far (stderr with `--json`)
/// and `vmm snapshot info` of the file, which must be a PC's and
/// restorable here.
pub fn snapshotted(
    what: &str,
    out: &std::process::Output,
    v: &serde_json::Value,
    snap: &str,
) -> (String, serde_json::Value) {
    let before = super::stderr(out);
    assert_eq!(
        v["exit_reason"], "snapshotted",
        "{what}: {}\n{before}",
        v["exit_description"]
    );
    assert_eq!(out.status.code(), Some(0), "{what}");
    let (_, info) = vmm_json(&["snapshot", "info", snap]);
    assert_eq!(info["platform"], "pc", "{what}: {info:#}");
    assert_eq!(info["restorable_here"], true, "{what}: {info:#}");
    (before, info)
}

/// `vmm restore snap` in a new process (no native runs,
/// [`BOOT_TIMEOUT_S`]): its output, report and console (stderr), and how
/// long it took.
pub fn restore_linux(snap: &str) -> (std::process::Output, serde_json::Value, String, f64) {
    let t0 = std::time::Instant::now();
    let args = ["restore", snap, "--no-native", "--timeout", BOOT_TIMEOUT_S];
    let (out, v) = vmm_json_retrying(&args, &format!("restore of {snap}"));
    let console = super::stderr(&out);
    (out, v, console, t0.elapsed().as_secs_f64())
}
