//! Checks of the destination before anything is written: its directory
//! exists and is writable, what is at the path may be replaced, and the
//! file system has room (`statvfs`).

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::error::WriteError;
use super::sys::c_path;
use super::{NEW_FILE_MODE, SPACE_MARGIN};
use crate::input::kind_of;

/// A regular file found at the destination, to be replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Existing {
    /// Its device.
    pub dev: u64,
    /// Its inode.
    pub ino: u64,
    /// Its permission bits (`st_mode & 0o7777`).
    pub mode: u32,
}

/// A checked destination: where the file goes and what it replaces.
#[derive(Clone, Debug)]
pub struct Destination {
    /// The final path.
    pub path: PathBuf,
    /// Its directory (`.` for a bare name).
    pub dir: PathBuf,
    /// Its file name.
    pub name: OsString,
    /// The regular file it replaces (only with `force`).
    pub existing: Option<Existing>,
}

impl Destination {
    /// The permission bits the file gets: 0600, narrowed to a replaced
    /// file's bits.
    pub fn mode(&self) -> u32 {
        match self.existing {
            Some(e) => NEW_FILE_MODE & e.mode,
            None => NEW_FILE_MODE,
        }
    }
}

/// A destination path from the command line (`--plot`, `--snapshot-file`,
/// `schema DIR`, `man --dir`, `--baseline-dir`): `-` is refused as it is
/// said, before anything runs, so it is a usage error (68) like any other
/// value refused for what it is. `check` refuses it too, for callers
/// that did not come through the command line.
///
/// # Errors
///
/// `WriteError::Dash` for `-`.
pub fn parse_destination(text: &str) -> Result<PathBuf, WriteError> {
    if text == "-" {
        return Err(WriteError::Dash);
    }
    Ok(PathBuf::from(text))
}

/// Check where a snapshot may go, without writing anything: the directory
/// exists and is writable, and the destination is absent or (with `force`)
/// a regular file. Done before a run starts and again before each write.
pub fn check(path: &Path, force: bool) -> Result<Destination, WriteError> {
    if path.as_os_str() == "-" {
        return Err(WriteError::Dash);
    }
    let name = path
        .file_name()
        .filter(|_| !path.as_os_str().as_bytes().ends_with(b"/"))
        .ok_or_else(|| WriteError::NoFileName {
            path: path.to_path_buf(),
        })?
        .to_os_string();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir_err = |source| WriteError::Directory {
        dir: dir.clone(),
        source,
    };
    let meta = std::fs::metadata(&dir).map_err(dir_err)?;
    if !meta.is_dir() {
        return Err(dir_err(io::Error::from_raw_os_error(libc::ENOTDIR)));
    }
    // A directory removed while a process still has it (a shell's working
    // directory after `rmdir`) stays a directory with no links, where no
    // file can be created.
    if meta.nlink() == 0 {
        return Err(dir_err(io::Error::new(
            io::ErrorKind::NotFound,
            "it was removed: no file can be created in it",
        )));
    }
    let c_dir = c_path(&dir).map_err(dir_err)?;
    // SAFETY: `c_dir` is a NUL-terminated path that outlives the call.
    if unsafe { libc::access(c_dir.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(dir_err(io::Error::last_os_error()));
    }
    let existing = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(WriteError::Io {
                what: "looking at",
                path: path.to_path_buf(),
                source,
            })
        }
        Ok(m) if !m.file_type().is_file() => {
            return Err(WriteError::NotRegular {
                path: path.to_path_buf(),
                kind: kind_of(m.file_type()),
            })
        }
        Ok(_) if !force => {
            return Err(WriteError::Exists {
                path: path.to_path_buf(),
            })
        }
        Ok(m) => Some(Existing {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode() & 0o7777,
        }),
    };
    Ok(Destination {
        path: path.to_path_buf(),
        dir,
        name,
        existing,
    })
}

/// Bytes `statvfs` says this user may still write in `dir`.
pub fn available_space(dir: &Path) -> io::Result<u64> {
    let c = c_path(dir)?;
    // SAFETY: an all-zero statvfs is a valid value for the kernel to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` is a valid out-pointer; both
    // outlive the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Refuse a write of `size` bytes into `dir` when `available` bytes cannot
/// hold it with [`SPACE_MARGIN`] to spare.
pub fn check_space(dir: &Path, size: u64, available: u64) -> Result<(), WriteError> {
    let needed = size.saturating_add(SPACE_MARGIN);
    if available < needed {
        return Err(WriteError::NoSpace {
            dir: dir.to_path_buf(),
            needed,
            available,
        });
    }
    Ok(())
}
