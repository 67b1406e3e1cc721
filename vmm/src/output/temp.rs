//! Temporary files: their names, their creation (private from the start),
//! their removal, and the sweep of those left by killed writes.

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use super::error::WriteError;
use super::signals::{install_signal_cleanup, register, unregister};
use super::NEW_FILE_MODE;
use super::TEMP_MARKER;

/// The temporary file name for `name`: `.<name>.vmm-snapshot-tmp.<pid>.<hex>`.
pub fn temp_name(name: &OsStr, pid: u32, random: u64) -> OsString {
    let mut n = OsString::from(".");
    n.push(name);
    n.push(format!("{TEMP_MARKER}{pid}.{random:016x}"));
    n
}

/// The pid in a temporary file name of this module's making, `None` for
/// any other name.
pub fn temp_pid(file_name: &OsStr) -> Option<u32> {
    let s = file_name.to_str()?;
    let rest = s.strip_prefix('.')?;
    let at = rest.rfind(TEMP_MARKER)?;
    if at == 0 {
        return None;
    }
    let (pid, hex) = rest[at + TEMP_MARKER.len()..].split_once('.')?;
    let valid = !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && hex.len() == 16
        && hex.bytes().all(|b| b.is_ascii_hexdigit());
    valid.then(|| pid.parse().ok()).flatten()
}

/// Whether process `pid` exists (`kill(pid, 0)`; `EPERM`: it exists but
/// belongs to someone else).
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Remove the temporary files of earlier writes into `dir` that were killed
/// before they could clean up: regular files named by [`temp_name`], owned
/// by this user, whose process no longer exists. A live process's file
/// (another `vmm` writing into the same directory) is left alone; so is a
/// dead one's whose pid was reused since. Returns what was removed; errors
/// only mean something is left for next time.
pub fn remove_stale_temporaries(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = temp_pid(&entry.file_name()) else {
            continue;
        };
        let path = entry.path();
        let ours = std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.file_type().is_file() && m.uid() == me);
        if ours && !process_exists(pid) && std::fs::remove_file(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// A temporary file being written: removed on drop unless placed, and
/// removed by the termination signals while it exists.
pub(super) struct TempFile {
    pub(super) path: PathBuf,
    pub(super) file: File,
    slot: Option<usize>,
    placed: bool,
}

impl TempFile {
    /// Create a new private temporary file for `name` in `dir`. Creation is
    /// exclusive and does not follow symlinks: anything already at the
    /// chosen name (a planted symlink included) makes it fail, and another
    /// random name is tried.
    pub(super) fn create(dir: &Path, name: &OsStr) -> Result<Self, WriteError> {
        install_signal_cleanup();
        let pid = std::process::id();
        let mut attempt = 0u64;
        loop {
            let path = dir.join(temp_name(name, pid, random_u64(attempt)));
            attempt += 1;
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(NEW_FILE_MODE)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
            {
                Ok(file) => {
                    let slot = register(&path);
                    return Ok(Self {
                        path,
                        file,
                        slot,
                        placed: false,
                    });
                }
                // Something is at that name (possibly planted): never
                // opened, another name is tried, 16 times at most.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 16 => {}
                Err(source) => {
                    return Err(WriteError::Io {
                        what: "creating the temporary file",
                        path,
                        source,
                    })
                }
            }
        }
    }

    /// The file now has its final name: nothing to remove.
    pub(super) fn placed(&mut self) {
        self.placed = true;
        if let Some(s) = self.slot.take() {
            unregister(s);
        }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(s) = self.slot.take() {
            unregister(s);
        }
        if !self.placed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// 64 unpredictable bits for a temporary name (std's randomly keyed
/// hasher, mixed with the time and the attempt).
pub(super) fn random_u64(attempt: u64) -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(attempt);
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish()
}
