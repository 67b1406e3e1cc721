//! The write's guarantees on real files in a temporary directory.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use super::sys::c_path;
use super::*;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// A fresh directory and the path `name` in it.
fn scratch(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    (dir, p)
}

/// No temporary file is left in `dir`.
fn assert_no_temporaries(dir: &tempfile::TempDir) {
    let left = temporaries(dir.path());
    assert!(left.is_empty(), "{left:?}");
}

/// `e` says the destination changed during the write and is now `kind`.
fn assert_changed(e: &WriteError, kind: &str) {
    assert!(
        matches!(e, WriteError::Changed { kind: k, .. } if *k == kind),
        "{e}"
    );
}

/// `p` is a symbolic link (not followed).
fn is_symlink(p: &Path) -> bool {
    std::fs::symlink_metadata(p)
        .unwrap()
        .file_type()
        .is_symlink()
}

fn temporaries(dir: &Path) -> Vec<OsString> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains(TEMP_MARKER))
        .collect()
}

#[test]
fn temp_names_round_trip_and_others_are_not_ours() {
    let n = temp_name(OsStr::new("a.snap"), 4242, 0xdead_beef);
    assert_eq!(n, ".a.snap.vmm-snapshot-tmp.4242.00000000deadbeef");
    assert_eq!(temp_pid(&n), Some(4242));
    for other in [
        "a.snap",
        ".a.snap.tmp",
        ".a.snap.vmm-snapshot-tmp.4242.deadbeef",
        ".a.snap.vmm-snapshot-tmp.x.00000000deadbeef",
        ".vmm-snapshot-tmp.1.00000000deadbeef",
        "a.snap.vmm-snapshot-tmp.1.00000000deadbeef",
    ] {
        assert_eq!(temp_pid(OsStr::new(other)), None, "{other}");
    }
}

#[test]
fn a_new_file_is_0600_whatever_the_umask_allows() {
    let (dir, p) = scratch("new.snap");
    write_atomic(&p, false, b"guest ram").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"guest ram");
    assert_eq!(mode(&p), 0o600);
    assert_no_temporaries(&dir);
}

#[test]
fn an_existing_file_is_refused_without_force_and_kept() {
    let (dir, p) = scratch("old.snap");
    std::fs::write(&p, b"precious").unwrap();
    let e = write_atomic(&p, false, b"new").unwrap_err();
    assert!(matches!(e, WriteError::Exists { .. }), "{e}");
    assert!(e.to_string().contains("--force"), "{e}");
    assert_eq!(std::fs::read(&p).unwrap(), b"precious");
    assert_no_temporaries(&dir);
}

#[test]
fn force_replaces_a_regular_file_without_widening_it() {
    let dir = tempfile::tempdir().unwrap();
    for (old, new) in [
        (0o644, 0o600),
        (0o600, 0o600),
        (0o400, 0o400),
        (0o640, 0o600),
    ] {
        let p = dir.path().join(format!("f{old:o}.snap"));
        std::fs::write(&p, b"old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(old)).unwrap();
        write_atomic(&p, true, b"replacement").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"replacement");
        assert_eq!(mode(&p), new, "old mode {old:o}");
    }
    assert_no_temporaries(&dir);
}

#[test]
fn non_regular_destinations_are_refused_even_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    std::fs::write(&target, b"target").unwrap();
    let link = dir.path().join("link.snap");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let sub = dir.path().join("sub.snap");
    std::fs::create_dir(&sub).unwrap();
    let fifo = dir.path().join("fifo.snap");
    let c = c_path(&fifo).unwrap();
    // SAFETY: `c` is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (p, kind) in [
        (&link, "a symbolic link"),
        (&sub, "a directory"),
        (&fifo, "a FIFO"),
        (&PathBuf::from("/dev/null"), "a character device"),
    ] {
        for force in [false, true] {
            let e = write_atomic(p, force, b"ram").unwrap_err();
            match &e {
                WriteError::NotRegular { kind: k, .. } => assert_eq!(*k, kind, "{e}"),
                _ => panic!("{}: {e}", p.display()),
            }
        }
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"target");
    assert!(is_symlink(&link));
    assert_no_temporaries(&dir);
}

#[test]
fn a_missing_directory_is_named() {
    let (dir, p) = scratch("missing/x.snap");
    let e = write_atomic(&p, false, b"ram").unwrap_err();
    match &e {
        WriteError::Directory { dir: d, source } => {
            assert_eq!(d, &dir.path().join("missing"));
            assert_eq!(source.kind(), io::ErrorKind::NotFound);
        }
        _ => panic!("{e}"),
    }
    assert!(e.to_string().contains("missing"), "{e}");
}

/// `-` is standard output to `features save` and `import`; to every other
/// writer it is refused, not made a file named `-` in the working directory.
#[test]
fn a_dash_is_not_taken_for_a_file() {
    let e = check(Path::new("-"), true).unwrap_err();
    assert!(matches!(e, WriteError::Dash), "{e}");
    assert!(
        e.to_string()
            .contains("write ./- for a file or directory named -"),
        "{e}"
    );
    // ./- is a file named -.
    let dir = tempfile::tempdir().unwrap();
    assert!(check(&dir.path().join("-"), false).is_ok());
}

/// A directory removed while still open (a shell's working directory
/// after `rmdir`, reached here through `/proc/self/fd`) is refused by the
/// check before the work, not found out at the write (a guest-requested
/// snapshot into `.` was 'not written (the guest was resumed)').
#[test]
fn a_removed_directory_is_refused_by_the_check() {
    use std::os::fd::AsRawFd;
    let parent = tempfile::tempdir().unwrap();
    let gone = parent.path().join("gone");
    std::fs::create_dir(&gone).unwrap();
    let held = std::fs::File::open(&gone).unwrap();
    std::fs::remove_dir(&gone).unwrap();
    let p = PathBuf::from(format!("/proc/self/fd/{}/x.snap", held.as_raw_fd()));
    let e = check(&p, false).unwrap_err();
    assert!(matches!(e, WriteError::Directory { .. }), "{e}");
    assert!(e.to_string().contains("it was removed"), "{e}");
}

#[test]
fn too_little_space_is_refused_naming_the_sizes() {
    let e = check_space(Path::new("/d"), 10 << 20, 5 << 20).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "directory /d: not enough free space: the file needs {} bytes (with a {SPACE_MARGIN}-byte margin), {} are available",
            (10 << 20) + SPACE_MARGIN,
            5 << 20
        )
    );
    check_space(Path::new("/d"), 1 << 20, (2 << 20) + 1).unwrap();
}

#[test]
fn a_failed_fill_leaves_nothing() {
    let (dir, p) = scratch("fail.snap");
    let e = write_with(&p, false, 3, |_| {
        Err(io::Error::from_raw_os_error(libc::ENOSPC))
    })
    .unwrap_err();
    assert!(
        matches!(
            &e,
            WriteError::Io {
                what: "writing",
                ..
            }
        ),
        "{e}"
    );
    assert!(!p.exists());
    assert_no_temporaries(&dir);
}

#[test]
fn the_temporary_is_private_while_it_fills() {
    let (dir, p) = scratch("private.snap");
    write_with(&p, false, 3, |f| {
        let names = temporaries(dir.path());
        assert_eq!(names.len(), 1, "{names:?}");
        assert_eq!(temp_pid(&names[0]), Some(std::process::id()));
        assert_eq!(mode(&dir.path().join(&names[0])), 0o600);
        io::Write::write_all(f, b"abc")
    })
    .unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"abc");
}

#[test]
fn a_symlink_swapped_in_during_a_forced_write_is_put_back() {
    let (dir, p) = scratch("swap.snap");
    std::fs::write(&p, b"old").unwrap();
    let target = dir.path().join("target");
    std::fs::write(&target, b"target").unwrap();
    let e = write_with(&p, true, 3, |f| {
        // The check saw a regular file; a symlink replaces it meanwhile.
        std::fs::remove_file(&p)?;
        std::os::unix::fs::symlink(&target, &p)?;
        io::Write::write_all(f, b"ram")
    })
    .unwrap_err();
    assert_changed(&e, "a symbolic link");
    assert!(is_symlink(&p));
    assert_eq!(std::fs::read(&target).unwrap(), b"target");
    assert_no_temporaries(&dir);
}

#[test]
fn a_file_appearing_during_a_write_is_not_replaced() {
    let (dir, p) = scratch("race.snap");
    for force in [false, true] {
        let e = write_with(&p, force, 3, |f| {
            std::fs::write(&p, b"theirs")?;
            io::Write::write_all(f, b"ram")
        })
        .unwrap_err();
        assert_changed(&e, "a regular file");
        assert_eq!(std::fs::read(&p).unwrap(), b"theirs");
        std::fs::remove_file(&p).unwrap();
    }
    assert_no_temporaries(&dir);
}

#[test]
fn stale_temporaries_of_dead_processes_are_removed_live_ones_kept() {
    let dir = tempfile::tempdir().unwrap();
    // A pid that cannot exist (above the kernel's PID_MAX_LIMIT).
    let dead = dir
        .path()
        .join(temp_name(OsStr::new("x.snap"), 4_194_305, 1));
    let live = dir
        .path()
        .join(temp_name(OsStr::new("x.snap"), std::process::id(), 2));
    let foreign = dir.path().join(".x.snap.tmp");
    for f in [&dead, &live, &foreign] {
        std::fs::write(f, b"left over").unwrap();
    }
    let w = write_atomic(&dir.path().join("x.snap"), false, b"ram").unwrap();
    assert_eq!(w.stale_removed, vec![dead.clone()]);
    assert!(!dead.exists());
    assert!(live.exists() && foreign.exists());
}
