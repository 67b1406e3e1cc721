//! End-to-end: no file or flag can hurt the VMM. Duration flags out of
//! range are usage errors naming the flag (no panic); a kernel that is a
//! device, a FIFO, a huge file or a malformed PVH image is refused before
//! any VM exists, naming the rule; a profile with a signed hex number or a
//! control character is refused naming the field. None of these needs KVM:
//! every refusal comes before `/dev/kvm` is opened.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{stderr, temp_file, tiny_pvh_elf, vmm_bin};

/// Status of a VMM error reported before boot.
const EXIT_VMM_ERROR: i32 = 64;

/// Run `vmm` with a watchdog: a run that has not ended after two minutes
/// (a FIFO blocking, say) is killed and the test fails, instead of hanging.
fn vmm(args: &[&str]) -> Output {
    let mut child = Command::new(vmm_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start the vmm binary");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait().expect("wait for vmm").is_some() {
            return child.wait_with_output().expect("vmm output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output();
            panic!("vmm {args:?} did not end within 2 minutes: {out:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A usage error: refused by the argument parser (not a VMM error, not a
/// guest status), with no panic.
fn assert_usage_error(args: &[&str], needles: &[&str]) {
    let out = vmm(args);
    let err = stderr(&out);
    let code = out.status.code();
    assert!(
        code.is_some_and(|c| c != 0 && c != 1 && c != EXIT_VMM_ERROR),
        "{args:?}: status {code:?}\n{err}"
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: no {n:?} in\n{err}");
    }
    assert!(out.stdout.is_empty(), "{args:?}: nothing may run");
}

/// A VMM error reported before boot (status 64), with no panic.
fn assert_vmm_error(args: &[&str], needles: &[&str]) {
    let out = vmm(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(EXIT_VMM_ERROR), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: no {n:?} in\n{err}");
    }
    assert!(out.stdout.is_empty(), "{args:?}: no guest may run");
}

/// A fresh directory under the system's temporary directory.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("vmm-inputs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        Self(p)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

#[test]
fn duration_flags_out_of_range_are_usage_errors() {
    for v in ["1e300", "1e20", "1e19", "inf", "NaN", "604801"] {
        assert_usage_error(
            &["run", "--timeout", v],
            &["--timeout", "<= 604800 (7 days)"],
        );
        assert_usage_error(
            &["restore", "/nonexistent.snap", "--timeout", v],
            &["--timeout", "7 days"],
        );
        assert_usage_error(
            &[
                "run",
                "--snapshot-after",
                v,
                "--snapshot-file",
                "/nonexistent/x.snap",
            ],
            &["--snapshot-after", "7 days"],
        );
        assert_usage_error(
            &["features", "--no-boot", "--timeout", v],
            &["--timeout", "7 days"],
        );
    }
    assert_usage_error(
        &["run", "--timeout", "soon"],
        &["--timeout", "\"soon\" is not a number of seconds"],
    );
}

#[test]
fn kernel_files_that_are_not_small_regular_files_are_refused() {
    assert_vmm_error(
        &["run", "--kernel", "/dev/zero"],
        &["kernel /dev/zero is a character device, not a regular file"],
    );
    let dir = TempDir::new("kernels");
    // A FIFO with no writer: refused at once, not waited on.
    let fifo = dir.path("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    assert_vmm_error(&["run", "--kernel", s(&fifo)], &["is a FIFO"]);
    // 4 GiB, sparse: refused from its size, not read.
    let big = dir.path("sparse.elf");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    assert_vmm_error(
        &["run", "--kernel", s(&big)],
        &["is 4294967296 bytes; the limit is 67108864 bytes"],
    );
    // The magic is checked before the rest is read.
    let exe = dir.path("script.sh");
    std::fs::write(&exe, b"#!/bin/sh\necho hi\n").unwrap();
    assert_vmm_error(&["run", "--kernel", s(&exe)], &["not an ELF file"]);
}

/// `tiny_pvh_elf`'s code segment moved to `paddr` (with its PVH entry).
fn elf_at(paddr: u64) -> Vec<u8> {
    let mut e = tiny_pvh_elf(&[0xf4], true);
    // Program header 0: p_vaddr at 64 + 16, p_paddr at 64 + 24.
    e[80..88].copy_from_slice(&paddr.to_le_bytes());
    e[88..96].copy_from_slice(&paddr.to_le_bytes());
    // The PVH note's descriptor: 176 (notes) + 12 (header) + 4 ("Xen\0").
    e[192..200].copy_from_slice(&paddr.to_le_bytes());
    e
}

#[test]
fn malformed_pvh_images_are_refused_naming_the_segment() {
    let low = temp_file("low.elf", &elf_at(0x8000));
    assert_vmm_error(
        &["run", "--kernel", s(&low)],
        &[
            &format!("kernel image {}: invalid PVH ELF image", low.display()),
            "PT_LOAD segment 0 at 0x8000 is below 1 MiB",
        ],
    );
    let _ = std::fs::remove_file(&low);
    // Fits a 64 MiB guest, not a 4 MiB one: checked against --mem.
    let high = temp_file("high.elf", &elf_at(0x20_0000 * 3));
    assert_vmm_error(
        &["run", "--mem", "4", "--kernel", s(&high)],
        &["PT_LOAD segment 0 at 0x600000 with p_memsz 0x1 does not fit in the guest's 0x400000 bytes of RAM"],
    );
    let _ = std::fs::remove_file(&high);
    // The PVH note's descriptor size is 0xfffffff0.
    let mut e = tiny_pvh_elf(&[0xf4], true);
    e[180..184].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let note = temp_file("note.elf", &e);
    assert_vmm_error(
        &["run", "--kernel", s(&note)],
        &["PT_NOTE segment 1: the note at offset 0xb0 (namesz 0x4, descsz 0xfffffff0) runs past the end of the segment"],
    );
    let _ = std::fs::remove_file(&note);
    // The PVH entry at 0.
    let mut e = tiny_pvh_elf(&[0xf4], true);
    e[192..200].copy_from_slice(&0u64.to_le_bytes());
    let zero = temp_file("zero.elf", &e);
    assert_vmm_error(&["run", "--kernel", s(&zero)], &["PVH entry 0x0 is 0"]);
    let _ = std::fs::remove_file(&zero);
}

fn profile_text() -> serde_json::Value {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .join("xstate/tests/data/amd-zen3-milan.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn profiles_with_signed_hex_or_control_characters_are_refused() {
    let dir = TempDir::new("profiles");
    let mut v = profile_text();
    v["leaf_0xd"][0]["eax"] = "0x+207".into();
    let signed = dir.path("signed.json");
    std::fs::write(&signed, v.to_string()).unwrap();
    assert_vmm_error(
        &["features", "--profile", s(&signed)],
        &["register value \"0x+207\" is not a 32-bit hex number"],
    );

    let mut v = profile_text();
    v["name"] = "AMD \u{1b}[2J\u{1b}]0;owned\u{7}".into();
    let ctrl = dir.path("ctrl.json");
    std::fs::write(&ctrl, v.to_string()).unwrap();
    for args in [
        vec!["features", "--profile", s(&ctrl)],
        vec!["features", "compare", s(&ctrl)],
    ] {
        assert_vmm_error(
            &args,
            &["field `name` contains control character U+001B at byte 4"],
        );
        let out = vmm(&args);
        assert!(!out.stderr.contains(&0x1b), "ESC reached the terminal");
    }

    assert_vmm_error(
        &["features", "--profile", "/dev/zero"],
        &["profile /dev/zero is a character device, not a regular file"],
    );
}

/// An import names the format it recognised and what is wrong with it
/// (issue 37 §6): a Firecracker dump whose JSON does not parse (a number
/// out of range, nesting past the parser's limit) was "a vmm profile
/// missing `name`", and `/proc/cpuinfo` was "1 bytes; the limit is 0".
#[test]
fn imports_name_the_format_and_the_fault() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.json");
    std::fs::write(&big, r#"{"cpuid_modifiers": [{"leaf": 1e400}]}"#).unwrap();
    let deep = dir.path().join("deep.json");
    let nest = format!(
        r#"{{"cpuid_modifiers": [{{"leaf": "0x1", "subleaf": "0x0", "flags": 0, "modifiers": {}{}}}]}}"#,
        "[".repeat(300),
        "]".repeat(300)
    );
    std::fs::write(&deep, nest).unwrap();
    for (file, needle) in [(&big, "number out of range"), (&deep, "firecracker")] {
        let out = vmm(&["features", "import", s(file), "-"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(64), "{err}");
        assert!(err.contains("firecracker") && err.contains(needle), "{err}");
        assert!(!err.contains("missing field `name`"), "{err}");
    }
    let out = vmm(&["features", "import", "/proc/cpuinfo", "-"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("pseudo-file"), "{err}");
    assert!(!err.contains("the limit is 0 bytes"), "{err}");
}

/// `-` is standard input to every reader of a whole text file, as it is to
/// `cat`: a profile, a compare input, an import dump (here on to `-`,
/// standard output), a bench `--compare` file. It was read as a file named
/// `-` ("no bundled profile has this name", "cannot open guest log -").
/// Standard input that is no pipe or file (`/dev/null`, a terminal) is
/// refused by kind rather than waited on; a file named `-` is `./-`.
#[test]
fn a_dash_reads_standard_input() {
    let profile = profile_text().to_string();
    let via_file = {
        let dir = TempDir::new("dash");
        let p = dir.path("p.json");
        std::fs::write(&p, &profile).unwrap();
        vmm(&["features", "--profile", s(&p), "--json"])
    };
    assert!(via_file.status.success(), "{}", stderr(&via_file));
    let piped = common::vmm_piped(
        &["features", "--profile", "-", "--json"],
        profile.as_bytes(),
    );
    assert!(piped.status.success(), "{}", stderr(&piped));
    let a: serde_json::Value = serde_json::from_slice(&via_file.stdout).unwrap();
    let b: serde_json::Value = serde_json::from_slice(&piped.stdout).unwrap();
    for k in ["columns", "components", "xcr0", "xss"] {
        assert_eq!(a[k], b[k], "{k}");
    }

    let out = common::vmm_piped(
        &["features", "compare", "-", "zen3-milan"],
        profile.as_bytes(),
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let out = common::vmm_piped(&["features", "import", "-", "-"], profile.as_bytes());
    assert!(out.status.success(), "{}", stderr(&out));
    let imported: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(imported["leaf_0xd"], profile_text()["leaf_0xd"]);

    // Read, checked and refused as a result of another benchmark, before
    // anything is measured: no KVM needed.
    let out = common::vmm_piped(
        &["bench", "exits", "--quick", "--compare", "-"],
        br#"{"schema_version": 1}"#,
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(EXIT_VMM_ERROR), "{err}");
    assert!(
        err.contains("baseline: - is not a `vmm bench exits --json` result"),
        "{err}"
    );

    // A socket (a supervisor's socketpair) is read to its end, as a pipe.
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let child = Command::new(vmm_bin())
        .args(["features", "--profile", "-", "--json"])
        .stdin(std::os::fd::OwnedFd::from(theirs))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut ours = ours;
        ours.write_all(profile.as_bytes()).unwrap();
        ours.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["xcr0"], a["xcr0"]);

    // Standard input on /dev/null (this helper's): refused by kind, at once.
    assert_vmm_error(
        &["features", "--profile", "-"],
        &["profile - (standard input) is a character device, not a regular file, a pipe or a socket"],
    );
    assert_vmm_error(
        &["features", "--guest-log", "-"],
        &["guest log - (standard input) is a character device"],
    );

    // A file named `-` is still reachable as `./-`.
    let dir = TempDir::new("dash-file");
    std::fs::write(dir.path("-"), &profile).unwrap();
    let out = Command::new(vmm_bin())
        .args(["features", "--profile", "./-"])
        .current_dir(&dir.0)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Kernels, initrds and snapshots are read in place (mapped, sought in),
/// so `-` cannot stand for one: refused as what it says, a usage error
/// (68), naming why. It was "cannot open kernel -: No such file or
/// directory" (64), which read as if `-` meant standard input but it was
/// empty.
#[test]
fn a_dash_is_no_file_read_in_place() {
    let dir = TempDir::new("dash-in-place");
    let elf = dir.path("k.elf");
    std::fs::write(&elf, tiny_pvh_elf(&[0xf4], true)).unwrap();
    for args in [
        vec!["run", "--kernel", "-"],
        vec!["run", "--kernel", s(&elf), "--initrd", "-"],
        vec!["restore", "-"],
        vec!["snapshot", "info", "-"],
    ] {
        assert_usage_error(
            &args,
            &["`-` (standard input) cannot stand for a file: kernels, initrds and snapshots are read in place"],
        );
        assert_eq!(vmm(&args).status.code(), Some(68), "{args:?}");
    }
}
