//! Writing snapshot files safely, end to end: what may be at
//! `--snapshot-file` (nothing, or a regular file with `--force`; never a
//! symlink, device, FIFO or directory), the file's permissions (0600, never
//! widened), stale temporaries, a signal during the write, and a write that
//! fails (file size limit, full or read-only file system): the guest is
//! resumed and runs to completion with the failure reported.

mod common;

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{
    kvm_or_skip, rows_named, snapshot_check_args, snapshot_regs_kernel, tiny_pvh_elf, vmm_bin,
};
use vmm::internal::output::{self, TEMP_MARKER};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// The temporary files of our naming left in `dir`.
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(TEMP_MARKER))
        .collect()
}

/// The register kernel (asks for a snapshot at once, then checks its
/// registers and exits 0) in `dir`.
fn regs_kernel(dir: &Path) -> PathBuf {
    let p = dir.join("regs.elf");
    std::fs::write(&p, tiny_pvh_elf(&snapshot_regs_kernel(), true)).unwrap();
    p
}

/// `vmm run` of the register kernel snapshotting to `snap`.
fn regs_run(dir: &Path, snap: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(vmm_bin());
    c.args(["run", "--kernel"])
        .arg(regs_kernel(dir))
        .arg("--snapshot-file")
        .arg(snap)
        .args(["--no-native", "--json"])
        .args(extra);
    c
}

fn run(mut c: Command) -> (Output, serde_json::Value) {
    let out = c.output().expect("cannot start vmm");
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out, v)
}

/// A refusal before any guest runs: status 64, nothing on stdout, the
/// message naming `what`.
fn assert_refused(out: &Output, what: &[&str]) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}\n{}", text(&out.stdout));
    for w in what {
        assert!(err.contains(w), "stderr lacks {w:?}: {err}");
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_planted_symlink_is_refused_and_its_target_untouched() {
    if !kvm_or_skip("a_planted_symlink_is_refused_and_its_target_untouched") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("precious");
    std::fs::write(&target, b"the user's data").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    let link = dir.path().join("snap");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for force in [&[][..], &["--force"][..]] {
        let (out, _) = run(regs_run(dir.path(), &link, force));
        assert_refused(&out, &[link.to_str().unwrap(), "is a symbolic link"]);
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"the user's data");
        assert_eq!(mode(&target), 0o644);
    }
    assert!(temporaries(dir.path()).is_empty());
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn devices_fifos_and_directories_are_refused_even_with_force() {
    if !kvm_or_skip("devices_fifos_and_directories_are_refused_even_with_force") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let null = PathBuf::from("/dev/null");
    let null_rdev = std::fs::metadata(&null).unwrap().rdev();
    for (p, kind) in [
        (&null, "is a character device"),
        (&fifo, "is a FIFO"),
        (&sub, "is a directory"),
    ] {
        for force in [&[][..], &["--force"][..]] {
            let (out, _) = run(regs_run(dir.path(), p, force));
            assert_refused(&out, &[p.to_str().unwrap(), kind]);
        }
    }
    let m = std::fs::symlink_metadata(&null).unwrap();
    assert!(m.file_type().is_char_device(), "/dev/null was replaced");
    assert_eq!(m.rdev(), null_rdev);
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(std::fs::read_dir(&sub).unwrap().count(), 0);
    assert!(temporaries(dir.path()).is_empty());
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_new_snapshot_is_0600_even_with_umask_0() {
    if !kvm_or_skip("a_new_snapshot_is_0600_even_with_umask_0") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("new.snap");
    let mut c = regs_run(dir.path(), &snap, &[]);
    // SAFETY: umask is async-signal-safe and cannot fail.
    unsafe {
        c.pre_exec(|| {
            libc::umask(0);
            Ok(())
        })
    };
    let (out, v) = run(c);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(v["exit_reason"], "snapshotted", "{v}");
    assert_eq!(mode(&snap), 0o600);
    assert!(temporaries(dir.path()).is_empty());
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn an_existing_file_needs_force_and_keeps_its_narrow_permissions() {
    if !kvm_or_skip("an_existing_file_needs_force_and_keeps_its_narrow_permissions") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("old.snap");
    std::fs::write(&snap, b"an older snapshot").unwrap();
    std::fs::set_permissions(&snap, std::fs::Permissions::from_mode(0o600)).unwrap();

    let (out, _) = run(regs_run(dir.path(), &snap, &[]));
    assert_refused(
        &out,
        &[snap.to_str().unwrap(), "already exists; pass --force"],
    );
    assert_eq!(std::fs::read(&snap).unwrap(), b"an older snapshot");

    let (out, v) = run(regs_run(dir.path(), &snap, &["--force"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(v["exit_reason"], "snapshotted", "{v}");
    assert_eq!(mode(&snap), 0o600, "0600 stays 0600");
    let info = vmm::internal::report::snapshot_info::info(&snap)
        .expect("a valid snapshot replaced the file");
    assert_eq!(info.trigger, "guest");

    // A world-readable file is narrowed, never the other way round.
    std::fs::set_permissions(&snap, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (out, _) = run(regs_run(dir.path(), &snap, &["--force"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(mode(&snap), 0o600, "0644 becomes 0600");
    assert!(temporaries(dir.path()).is_empty());
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn stale_temporaries_are_removed_by_the_next_write() {
    if !kvm_or_skip("stale_temporaries_are_removed_by_the_next_write") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("x.snap");
    let name = std::ffi::OsStr::new("x.snap");
    // Pids above the kernel's PID_MAX_LIMIT (4194304) never exist.
    let dead: Vec<PathBuf> = [(4_194_305, 1u64), (4_194_399, 0xabc)]
        .iter()
        .map(|&(pid, r)| dir.path().join(output::temp_name(name, pid, r)))
        .collect();
    let other_dead = dir.path().join(output::temp_name(
        std::ffi::OsStr::new("y.snap"),
        4_194_305,
        7,
    ));
    // This test process is alive: its "temporary" may be a write under way.
    let live = dir
        .path()
        .join(output::temp_name(name, std::process::id(), 2));
    let unrelated = dir.path().join(".x.snap.tmp");
    for f in dead.iter().chain([&other_dead, &live, &unrelated]) {
        std::fs::write(f, vec![0u8; 4096]).unwrap();
    }
    let (out, v) = run(regs_run(dir.path(), &snap, &[]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(v["exit_reason"], "snapshotted", "{v}");
    for f in dead.iter().chain([&other_dead]) {
        assert!(!f.exists(), "{} was not removed", f.display());
    }
    assert!(live.exists() && unrelated.exists());
    let mut left = temporaries(dir.path());
    left.sort();
    assert_eq!(left, vec![live.file_name().unwrap().to_string_lossy()]);
}

/// Set by [`sigterm_during_a_write_leaves_no_temporary`] for its child.
const CHILD_DIR: &str = "VMM_SNAPSHOT_WRITE_CHILD_DIR";

/// The child half of [`sigterm_during_a_write_leaves_no_temporary`]: a write
/// that stops half way, until a signal ends the process. Does nothing when
/// run by itself.
#[test]
fn child_writer_blocked_mid_write() {
    let Some(dir) = std::env::var_os(CHILD_DIR).map(PathBuf::from) else {
        return;
    };
    let _ = output::write_with(&dir.join("big.snap"), false, 1 << 20, |f| {
        std::io::Write::write_all(f, &[0x5a; 1 << 16])?;
        std::fs::write(dir.join("ready"), b"")?;
        std::thread::sleep(Duration::from_secs(600));
        Ok(())
    });
    panic!("the signal should have ended the process");
}

#[test]
fn sigterm_during_a_write_leaves_no_temporary() {
    for (sig, status) in [(libc::SIGTERM, 143), (libc::SIGINT, 130)] {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_writer_blocked_mid_write", "--nocapture"])
            .env(CHILD_DIR, dir.path())
            .spawn()
            .unwrap();
        let begin = Instant::now();
        while !dir.path().join("ready").exists() {
            assert!(
                begin.elapsed() < Duration::from_secs(120),
                "the child never started writing"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(temporaries(dir.path()).len(), 1, "a write is under way");
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
        let st = child.wait().unwrap();
        assert_eq!(st.signal(), Some(sig), "ended by the signal itself: {st:?}");
        assert_eq!(128 + sig, status);
        assert!(
            temporaries(dir.path()).is_empty(),
            "left behind: {:?}",
            temporaries(dir.path())
        );
        assert!(!dir.path().join("big.snap").exists());
    }
}

/// Best effort: SIGTERM a large guest about when its snapshot is written.
/// Wherever the signal lands (before, during or after the write), no
/// temporary may remain.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn sigterm_around_a_large_snapshot_leaves_no_temporary() {
    if !kvm_or_skip("sigterm_around_a_large_snapshot_leaves_no_temporary") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for delay_ms in [300u64, 700] {
        let snap = dir.path().join(format!("large-{delay_ms}.snap"));
        let mut child = Command::new(vmm_bin())
            .args([
                "run",
                "--mem",
                "2048",
                "--workload",
                "aes,gemm",
                "--no-native",
            ])
            .args(["--snapshot-after", "0.3", "--snapshot-file"])
            .arg(&snap)
            .arg("--json")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let st = child.wait().unwrap();
        assert!(
            st.signal() == Some(libc::SIGTERM) || st.code() == Some(0),
            "{st:?}"
        );
        assert!(
            temporaries(dir.path()).is_empty(),
            "left behind: {:?}",
            temporaries(dir.path())
        );
        if snap.exists() {
            assert_eq!(mode(&snap), 0o600);
        }
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_missing_directory_is_refused_before_the_guest_runs() {
    if !kvm_or_skip("a_missing_directory_is_refused_before_the_guest_runs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("no/such/dir/x.snap");
    let (out, _) = run(regs_run(dir.path(), &snap, &[]));
    let missing = dir.path().join("no/such/dir");
    assert_refused(
        &out,
        &[
            &format!("directory {}", missing.display()),
            "No such file or directory",
        ],
    );
}

/// Limit files this process writes to `bytes`, as `ulimit -f` does: a
/// larger write raises SIGXFSZ (which kills by default) and fails with
/// EFBIG.
fn limit_file_size(c: &mut Command, bytes: u64) {
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        c.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
}

fn snapshot_errors(v: &serde_json::Value) -> Vec<String> {
    v["snapshot_errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no snapshot_errors: {v}"))
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect()
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_failed_guest_requested_write_resumes_the_guest() {
    if !kvm_or_skip("a_failed_guest_requested_write_resumes_the_guest") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("x.snap");
    let mut c = Command::new(vmm_bin());
    c.args(snapshot_check_args(snap.to_str().unwrap()))
        .args(["--no-native", "--json"]);
    limit_file_size(&mut c, 4096);
    let (out, v) = run(c);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}\n{v}");
    assert_eq!(v["exit_reason"], "exited", "{v}");
    assert_eq!(v["exit_status"], 0, "{v}");
    let rows = rows_named(&v, "snapshot-check");
    assert_eq!(rows.len(), 1, "the guest reported after the failure: {v}");
    assert_eq!(rows[0]["check"], "pass", "{v}");
    let errors = snapshot_errors(&v);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(snap.to_str().unwrap()) && errors[0].contains("File too large"),
        "{errors:?}"
    );
    assert!(err.contains("the guest was resumed"), "{err}");
    assert!(!snap.exists());
    assert!(temporaries(dir.path()).is_empty());
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_failed_timed_write_resumes_the_guest_to_completion() {
    if !kvm_or_skip("a_failed_timed_write_resumes_the_guest_to_completion") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("t.snap");
    let mut c = Command::new(vmm_bin());
    let workload = common::harness_sized("aes,gemm");
    c.args(["run", "--workload", &workload, "--snapshot-after", "0.3"])
        .args(["--timeout", "300", "--snapshot-file"])
        .arg(&snap)
        .args(["--no-native", "--json"]);
    limit_file_size(&mut c, 4096);
    let (out, v) = run(c);
    assert_eq!(out.status.code(), Some(0), "{}\n{v}", text(&out.stderr));
    assert_eq!(v["exit_reason"], "exited", "{v}");
    let results = v["results"].as_array().unwrap();
    assert!(results.iter().any(|r| r["name"] == "dgemm"), "{v}");
    for r in results {
        assert_eq!(r["check"], "pass", "{r}");
    }
    let errors = snapshot_errors(&v);
    assert_eq!(
        errors.len(),
        1,
        "one timed request, one failure: {errors:?}"
    );
    assert!(errors[0].contains("File too large"), "{errors:?}");
    assert!(!snap.exists());
    assert!(temporaries(dir.path()).is_empty());
    // What happened is said once, and the report names it (issue 37 §6:
    // it also said the guest exited "before --snapshot-after").
    let err = text(&out.stderr);
    assert_eq!(err.matches("the guest was resumed").count(), 1, "{err}");
    assert!(!err.contains("before --snapshot-after"), "{err}");
    let reason = v["snapshot"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("could not be written") && reason.contains("File too large"),
        "{v:#}"
    );
}

/// A small tmpfs mounted for the test (root only); unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(opts: &str) -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_full_or_read_only_file_system_is_reported_and_the_guest_goes_on() {
    if !kvm_or_skip("a_full_or_read_only_file_system_is_reported_and_the_guest_goes_on") {
        return;
    }
    let Some(fs) = Tmpfs::mount("size=512k") else {
        eprintln!("SKIPPED the tmpfs cases: cannot mount a tmpfs here (not root?)");
        return;
    };
    // Room checked before writing: 512 KiB cannot hold the file and the
    // margin, so nothing is written and the guest runs on.
    let snap = fs.path().join("full.snap");
    let work = tempfile::tempdir().unwrap();
    let (out, v) = run(regs_run(work.path(), &snap, &[]));
    assert_eq!(out.status.code(), Some(0), "{}\n{v}", text(&out.stderr));
    assert_eq!(v["exit_reason"], "exited", "{v}");
    assert_eq!(v["exit_status"], 0, "the registers survived: {v}");
    let errors = snapshot_errors(&v);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(&format!("directory {}", fs.path().display()))
            && errors[0].contains("not enough free space"),
        "{errors:?}"
    );
    assert_eq!(std::fs::read_dir(fs.path()).unwrap().count(), 0);

    // Read-only: refused before the guest runs, naming the directory.
    let ro = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(fs.path())
        .status()
        .unwrap();
    assert!(ro.success());
    let (out, _) = run(regs_run(work.path(), &snap, &[]));
    assert_refused(
        &out,
        &[
            &format!("directory {}", fs.path().display()),
            "Read-only file system",
        ],
    );
}
