//! Why a snapshot file was not written.

use std::io;
use std::path::PathBuf;

use super::SPACE_MARGIN;

/// Why a snapshot file was not written. Every message names the file or
/// directory; what is at the destination is never modified on failure.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The path ends in no file name (`/`, `..`).
    #[error("{} names no file", path.display())]
    NoFileName {
        /// The path given.
        path: PathBuf,
    },
    /// The path is `-`, which `features save` and `features import` read as
    /// standard output: a file named so would surprise whoever meant that.
    #[error(
        "`-` means standard output only to `features save` and `features import`; write ./- \
         for a file or directory named -"
    )]
    Dash,
    /// Something other than a regular file is at the destination.
    #[error("{} is {kind}: only a regular file may be replaced; it is left as it is", path.display())]
    NotRegular {
        /// The destination.
        path: PathBuf,
        /// What is there: "a symbolic link", "a character device", ...
        kind: &'static str,
    },
    /// A regular file is at the destination and `--force` was not given.
    #[error("{} already exists; pass --force to replace it", path.display())]
    Exists {
        /// The destination.
        path: PathBuf,
    },
    /// The destination's directory is missing, not a directory, or not
    /// writable (permissions, read-only file system).
    #[error("directory {}: {source}", dir.display())]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// What the file system said.
        #[source]
        source: io::Error,
    },
    /// The directory's file system has no room for the file.
    #[error("directory {}: not enough free space: the file needs {needed} bytes (with a {SPACE_MARGIN}-byte margin), {available} are available", dir.display())]
    NoSpace {
        /// The directory.
        dir: PathBuf,
        /// The file's size plus [`SPACE_MARGIN`].
        needed: u64,
        /// What `statvfs` reports available to this user.
        available: u64,
    },
    /// The destination changed between the check and the rename; the entry
    /// found there was put back.
    #[error("{} changed while the file was written (it is now {kind}); it is left as it is", path.display())]
    Changed {
        /// The destination.
        path: PathBuf,
        /// What was found there.
        kind: &'static str,
    },
    /// The directory a set of files goes into (`vmm schema DIR`) is
    /// something else.
    #[error("{} is {kind}, not a directory", path.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
        /// What is there: "a regular file", "a character device", ...
        kind: &'static str,
    },
    /// That directory was missing and could not be made.
    #[error("cannot create directory {}: {source}", path.display())]
    CreateDir {
        /// The path given.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: io::Error,
    },
    /// A file system operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// The operation: "creating", "writing", "renaming to", ...
        what: &'static str,
        /// The file it was applied to.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: io::Error,
    },
}
