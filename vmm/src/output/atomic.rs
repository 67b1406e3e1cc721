//! The atomic write: fill a private temporary file, fsync it, move it into
//! place without replacing anything but the regular file checked before.

use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use super::destination::{available_space, check, check_space, Destination};
use super::error::WriteError;
use super::sys::{flags_unsupported, renameat2};
use super::temp::{remove_stale_temporaries, TempFile};
use crate::input::kind_of;

/// What a successful write did besides writing the file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Stale temporary files of earlier, killed writes that were removed.
    pub stale_removed: Vec<PathBuf>,
}

/// Write `bytes` to `path` with every property of the module description.
pub fn write_atomic(path: &Path, force: bool, bytes: &[u8]) -> Result<Written, WriteError> {
    write_with(path, force, bytes.len() as u64, |f| {
        io::Write::write_all(f, bytes)
    })
}

/// Write a set of files that belong together (the schemas of `vmm schema
/// DIR`, the pages of `vmm man --dir`), replacing regular files of the same
/// names: every destination is checked before the first is written, so a
/// refused one leaves the others as they were.
///
/// # Errors
/// The first destination refused, or the first write that failed, with its
/// path.
pub fn write_set(files: &[(PathBuf, Vec<u8>)]) -> Result<(), (PathBuf, WriteError)> {
    for (path, _) in files {
        check(path, true).map_err(|e| (path.clone(), e))?;
    }
    for (path, bytes) in files {
        write_atomic(path, true, bytes).map_err(|e| (path.clone(), e))?;
    }
    Ok(())
}

/// Write a file of `size` bytes that `fill` writes into the (private,
/// still unnamed to readers) temporary file, then move it into place.
/// `fill` may take as long as it likes: a SIGINT or SIGTERM meanwhile
/// removes the temporary file before the process ends.
pub fn write_with(
    path: &Path,
    force: bool,
    size: u64,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<Written, WriteError> {
    let dest = check(path, force)?;
    let stale_removed = remove_stale_temporaries(&dest.dir);
    let available = available_space(&dest.dir).map_err(|source| WriteError::Directory {
        dir: dest.dir.clone(),
        source,
    })?;
    check_space(&dest.dir, size, available)?;

    let mut tmp = TempFile::create(&dest.dir, &dest.name)?;
    let io_err = |what, p: &Path| {
        let p = p.to_path_buf();
        move |source| WriteError::Io {
            what,
            path: p,
            source,
        }
    };
    // Narrowed before any data is in the file: never wider than 0600, nor
    // than the file it replaces.
    tmp.file
        .set_permissions(std::fs::Permissions::from_mode(dest.mode()))
        .map_err(io_err("setting the permissions of", &tmp.path))?;
    fill(&mut tmp.file).map_err(io_err("writing", &tmp.path))?;
    tmp.file.sync_all().map_err(io_err("syncing", &tmp.path))?;
    place(&tmp.path, &dest)?;
    tmp.placed();
    // The rename is only durable once the directory is.
    File::open(&dest.dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("syncing the directory", &dest.dir))?;
    Ok(Written { stale_removed })
}

/// Move the written temporary file to the destination, replacing only the
/// regular file `dest` was checked to hold.
fn place(tmp: &Path, dest: &Destination) -> Result<(), WriteError> {
    let path = &dest.path;
    let rename_err = |source| WriteError::Io {
        what: "renaming the temporary file to",
        path: path.clone(),
        source,
    };
    let Some(existing) = dest.existing else {
        return place_new(tmp, path);
    };
    match renameat2(tmp, path, libc::RENAME_EXCHANGE) {
        Ok(()) => {}
        // The file went away since the check: nothing to replace.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return place_new(tmp, path),
        Err(e) if flags_unsupported(&e) => {
            // No atomic exchange here: re-check and rename (the residual
            // race is documented above).
            let now = std::fs::symlink_metadata(path).map_err(rename_err)?;
            if !now.file_type().is_file() {
                return Err(WriteError::Changed {
                    path: path.clone(),
                    kind: kind_of(now.file_type()),
                });
            }
            return std::fs::rename(tmp, path).map_err(rename_err);
        }
        Err(e) => return Err(rename_err(e)),
    }
    // `tmp` now names what was at the destination.
    let old = std::fs::symlink_metadata(tmp);
    let same = matches!(&old, Ok(m) if m.file_type().is_file()
        && m.dev() == existing.dev && m.ino() == existing.ino);
    if same {
        return std::fs::remove_file(tmp).map_err(|source| WriteError::Io {
            what: "removing the replaced file (now named)",
            path: tmp.to_path_buf(),
            source,
        });
    }
    // Something else was put there during the write: give it its name back.
    let kind = match &old {
        Ok(m) if m.file_type().is_file() => "another regular file",
        Ok(m) => kind_of(m.file_type()),
        Err(_) => "unreadable",
    };
    renameat2(tmp, path, libc::RENAME_EXCHANGE).map_err(rename_err)?;
    Err(WriteError::Changed {
        path: path.clone(),
        kind,
    })
}

/// Give the temporary file the destination's name, refusing (not
/// replacing) anything that appeared there.
fn place_new(tmp: &Path, path: &Path) -> Result<(), WriteError> {
    let appeared = |path: &Path| {
        let kind = std::fs::symlink_metadata(path)
            .map(|m| kind_of(m.file_type()))
            .unwrap_or("unreadable");
        WriteError::Changed {
            path: path.to_path_buf(),
            kind,
        }
    };
    let rename_err = |source| WriteError::Io {
        what: "renaming the temporary file to",
        path: path.to_path_buf(),
        source,
    };
    match renameat2(tmp, path, libc::RENAME_NOREPLACE) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(appeared(path)),
        Err(e) if flags_unsupported(&e) => {
            // link() never replaces either; then drop the temporary name.
            match std::fs::hard_link(tmp, path) {
                Ok(()) => std::fs::remove_file(tmp).map_err(rename_err),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(appeared(path)),
                Err(e) => Err(rename_err(e)),
            }
        }
        Err(e) => Err(rename_err(e)),
    }
}
