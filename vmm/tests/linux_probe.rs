//! `linux-probe`, the project's static Linux user program (guest crate,
//! `src/probe/`), run as `/init` of Debian's stock kernel: what Linux
//! shows of the guest's CPU and what the program's own instructions see
//! must agree with vmm's xstate policy, and its vector checksum must equal
//! the scalar reference.
//!
//! The initramfs is built here from the program `vmm/build.rs` built
//! (embedded: the harness's machine has no build tree). Linux boots only
//! on a hardware-style KVM (`scripts/hw-kvm.sh`); elsewhere the boots
//! skip, named.

mod common;

use common::cpio::Cpio;
use common::linux::{
    bzimage_args, check_boot, hw_kvm_or_skip, kernel_or_skip, restore_linux, snapshotted,
    vmm_json_retrying,
};
use common::{hex, in_hw_kvm_harness};
use guest::linux_probe::{self, Block, LANES, PROBE_BLOCKS, PROBE_ROUNDS};

/// The program, as `vmm/build.rs` built it.
const PROBE: &[u8] = include_bytes!(env!("VMM_LINUX_PROBE"));

/// The flags `--xfeatures 0x3` hides: AVX and everything that needs its
/// state, and PKU (PKRU state).
const HIDDEN_UNDER_0X3: [&str; 6] = ["avx", "avx2", "fma", "f16c", "pku", "vaes"];

/// The initramfs: `/init` (the program), `/proc` (it mounts proc there),
/// and `/dev/console`, from which Linux opens init's standard streams
/// (Debian's kernel carries the same node in its built-in initramfs; ours
/// does not count on that).
fn probe_initrd() -> Vec<u8> {
    let mut cpio = Cpio::new();
    cpio.dir("dev", 0o755)
        .char_dev("dev/console", 0o600, (5, 1))
        .dir("proc", 0o755)
        .file("init", 0o755, PROBE);
    cpio.finish()
}

/// [`probe_initrd`] written into `dir`; its path.
fn probe_initrd_file(dir: &tempfile::TempDir) -> String {
    let initrd = dir.path().join("probe.cpio");
    std::fs::write(&initrd, probe_initrd()).unwrap();
    initrd.display().to_string()
}

/// The checksum the program must print: the scalar reference over its
/// data.
fn reference_checksum() -> u64 {
    let mut data = vec![[0u32; LANES]; PROBE_BLOCKS];
    linux_probe::fill(&mut data);
    linux_probe::scalar(&data as &[Block], PROBE_ROUNDS)
}

/// What the probe printed after `VMM-PROBE {what} `.
fn probe_line<'a>(console: &'a str, what: &str) -> &'a str {
    let want = format!("VMM-PROBE {what}");
    console
        .lines()
        .find_map(|l| l.split_once(&want).map(|(_, rest)| rest.trim()))
        .unwrap_or_else(|| panic!("no {want:?} line from the probe:\n{console}"))
}

/// A probe boot's report and console.
struct ProbeRun {
    report: serde_json::Value,
    console: String,
}

/// Boots the bzImage with the probe as `/init` under `--xfeatures policy`
/// (`None`: the full XCR0 KVM offers); checks the run ended with Linux's
/// reset (status 70), with an oracle that agrees, and with no error from
/// the program.
fn boot_probe(test: &str, policy: Option<&str>) -> Option<ProbeRun> {
    let bz = kernel_or_skip(test, "bzImage")?;
    let dir = tempfile::tempdir().unwrap();
    let initrd = probe_initrd_file(&dir);
    let mut extra = vec!["--serial"];
    if let Some(p) = policy {
        extra.extend(["--xfeatures", p]);
    }
    let args = bzimage_args(&bz, &initrd, &extra);
    let what = format!("bzImage + linux-probe, {}", policy.unwrap_or("full xcr0"));
    let t0 = std::time::Instant::now();
    let (out, report) = vmm_json_retrying(&args, &what);
    eprintln!(
        "linux boot ({what}) took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    check_boot(&out, &report, policy.unwrap_or("kvm"));
    let console = common::stderr(&out);
    assert!(
        !console.contains("VMM-PROBE error"),
        "the probe failed:\n{console}"
    );
    assert_eq!(probe_line(&console, "done"), "", "{console}");
    for line in console.lines().filter(|l| l.contains("VMM-PROBE")) {
        eprintln!("{what}: {}", line.trim());
    }
    Some(ProbeRun { report, console })
}

/// The probe's checks common to every policy: XGETBV(0) is the policy's
/// XCR0, the flags line lacks what the policy hides and has what it
/// offers, the checksum is the reference, computed by the loop the
/// policy allows. Returns the path the program took.
fn check_probe(run: &ProbeRun, policy: &str) -> String {
    let console = &run.console;
    let want = hex(&run.report["policy_xfeatures"]);
    // Linux enables in XCR0 every user component it supports that CPUID
    // leaf 0xD offers (fpu__init_system_xstate), and vmm's leaf 0xD
    // offers exactly the policy: XGETBV(0) in the guest is the policy.
    let xcr0 = probe_line(console, "xcr0");
    assert_eq!(xcr0, format!("{want:#x}"), "{policy}: {console}");
    let flags = probe_line(console, "flags");
    let words: Vec<&str> = flags.split_whitespace().collect();
    for offered in ["fpu", "sse", "sse2", "xsave"] {
        assert!(words.contains(&offered), "{policy}: no {offered}: {flags}");
    }
    let avx_state = want & 0x6 == 0x6;
    assert_eq!(words.contains(&"avx"), avx_state, "{policy}: {flags}");
    if !avx_state {
        for hidden in HIDDEN_UNDER_0X3 {
            assert!(!words.contains(&hidden), "{policy}: {hidden}: {flags}");
        }
    }
    if want & 0x200 == 0 {
        assert!(!words.contains(&"pku"), "{policy}: {flags}");
    }
    let (sum, path) = probe_line(console, "checksum")
        .split_once(' ')
        .unwrap_or_else(|| panic!("{policy}: a checksum line without a path:\n{console}"));
    assert_eq!(
        sum,
        format!("{:#018x}", reference_checksum()),
        "{policy}: {path}"
    );
    let avx2 = avx_state && words.contains(&"avx2");
    assert_eq!(
        path,
        if avx2 { "avx2" } else { "sse2" },
        "{policy}: {flags}"
    );
    path.to_string()
}

/// Under the full XCR0 KVM offers, the probe sees all of it: XGETBV(0) is
/// `policy_xfeatures`, AVX is shown, and the checksum goes through the
/// AVX2 loop when the CPU has AVX2 (the TCG CPU of the harness does). The
/// request it writes to port 0xe4 mid-loop is ignored: this run has no
/// snapshot file, and the program runs on to its reboot.
#[test]
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
fn linux_probe_sees_the_full_xcr0_and_its_checksum_matches() {
    let test = "linux_probe_sees_the_full_xcr0_and_its_checksum_matches";
    if !hw_kvm_or_skip(test) {
        return;
    }
    let Some(run) = boot_probe(test, None) else {
        return;
    };
    let path = check_probe(&run, "full xcr0");
    let flags = probe_line(&run.console, "flags");
    if flags.split_whitespace().any(|w| w == "avx2") {
        assert_eq!(path, "avx2");
    }
    assert!(run.report.get("snapshot").is_none_or(|s| s.is_null()));
}

/// Under `--xfeatures 0x3`, Linux shows none of the flags that need AVX or
/// PKRU state, XGETBV(0) is 0x3, and the checksum goes through the SSE2
/// loop with the same value.
#[test]
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
fn linux_probe_under_x87_sse_hides_avx_and_its_checksum_matches() {
    let test = "linux_probe_under_x87_sse_hides_avx_and_its_checksum_matches";
    if !hw_kvm_or_skip(test) {
        return;
    }
    let Some(run) = boot_probe(test, Some("0x3")) else {
        return;
    };
    assert_eq!(hex(&run.report["policy_xfeatures"]), 0x3);
    assert_eq!(check_probe(&run, "0x3"), "sse2");
}

/// The embedded program is what Linux can run as `/init` with no loader:
/// a 64-bit x86 executable (ET_EXEC, not PIE), with no interpreter.
#[test]
fn the_probe_is_a_static_x86_64_executable() {
    assert_eq!(&PROBE[..4], b"\x7fELF");
    assert_eq!(PROBE[4], 2, "ELFCLASS64");
    assert_eq!(u16::from_le_bytes([PROBE[16], PROBE[17]]), 2, "ET_EXEC");
    assert_eq!(u16::from_le_bytes([PROBE[18], PROBE[19]]), 62, "EM_X86_64");
    let phoff = u64::from_le_bytes(PROBE[32..40].try_into().unwrap()) as usize;
    let phentsize = u16::from_le_bytes([PROBE[54], PROBE[55]]) as usize;
    let phnum = u16::from_le_bytes([PROBE[56], PROBE[57]]) as usize;
    for i in 0..phnum {
        let at = phoff + i * phentsize;
        let p_type = u32::from_le_bytes(PROBE[at..at + 4].try_into().unwrap());
        assert_ne!(p_type, 3, "PT_INTERP: the probe is dynamically linked");
    }
}

/// The initramfs is a newc archive GNU `cpio` lists with its four entries,
/// the console node among them (on the host, where a `cpio` binary
/// exists).
#[test]
fn the_probe_initrd_is_a_newc_archive() {
    let test = "the_probe_initrd_is_a_newc_archive";
    let bytes = probe_initrd();
    assert_eq!(&bytes[..6], b"070701");
    assert!(bytes.len().is_multiple_of(4));
    if in_hw_kvm_harness() {
        // Busybox's cpio lists differently; there the boots unpack it.
        common::skip(test, "the harness's cpio is busybox's");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("probe.cpio");
    std::fs::write(&path, &bytes).unwrap();
    let out = match std::process::Command::new("cpio")
        .args(["-t", "-v", "-F"])
        .arg(&path)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            common::skip(test, &format!("no cpio to list the archive ({e})"));
            return;
        }
    };
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 4, "{list}");
    assert!(lines[0].starts_with("drwxr-xr-x") && lines[0].ends_with(" dev"));
    assert!(lines[1].starts_with("crw-------") && lines[1].contains("5,"));
    assert!(lines[1].ends_with(" dev/console"), "{list}");
    assert!(lines[3].starts_with("-rwxr-xr-x") && lines[3].ends_with(" init"));
    assert!(lines[3].contains(&PROBE.len().to_string()), "{list}");
}

/// The probe snapshotted at its own request, half-way through its loop
/// with the sums live in vector registers (`ymm0`-`ymm1` under the full
/// XCR0, `xmm0`-`xmm3` under 0x3), and restored in a new process, finishes
/// with the checksum of an uninterrupted run, the scalar reference: the
/// guest's xstate, its PC and its time survived the snapshot. The file
/// says the guest asked for it, was a PC, and keeps the vector state in
/// use (compacted, within the policy).
#[test]
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
fn the_probe_snapshotted_mid_loop_finishes_with_the_same_checksum() {
    let test = "the_probe_snapshotted_mid_loop_finishes_with_the_same_checksum";
    if !hw_kvm_or_skip(test) {
        return;
    }
    let Some(bz) = kernel_or_skip(test, "bzImage") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let initrd = probe_initrd_file(&dir);
    for policy in [None, Some("0x3")] {
        let name = policy.unwrap_or("full xcr0");
        let snap = dir.path().join(format!("probe-{name}.snap"));
        let snap = snap.to_str().unwrap();
        let mut extra = vec!["--snapshot-file", snap];
        if let Some(p) = policy {
            extra.extend(["--xfeatures", p]);
        }
        let t0 = std::time::Instant::now();
        let (out, v) = vmm_json_retrying(&bzimage_args(&bz, &initrd, &extra), name);
        let (before, info) = snapshotted(name, &out, &v, snap);
        let to_snapshot = t0.elapsed().as_secs_f64();
        assert!(before.contains("VMM-PROBE xcr0"), "{name}: {before}");
        assert!(!before.contains("VMM-PROBE checksum"), "{name}: {before}");
        assert_eq!(info["trigger"], "guest", "{info:#}");
        let policy_xcr0 = hex(&info["policy_xcr0"]);
        let in_use = hex(&info["vcpus"][0]["xstate_bv"]);
        assert_eq!(in_use & !policy_xcr0, 0, "{name}: {info:#}");
        let (out, report, after, restored) = restore_linux(snap);
        eprintln!("{name}: boot to the snapshot {to_snapshot:.1} s, restored run {restored:.1} s");
        check_boot(&out, &report, policy.unwrap_or("kvm"));
        assert!(!after.contains("VMM-PROBE error"), "{name}: {after}");
        assert_eq!(probe_line(&after, "done"), "", "{after}");
        let run = ProbeRun {
            report,
            console: format!("{before}{after}"),
        };
        let path = check_probe(&run, name);
        if path == "avx2" {
            assert_ne!(in_use & 0x4, 0, "{name}: the live ymm sums: {info:#}");
        }
    }
}
