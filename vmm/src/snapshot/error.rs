//! Why a snapshot was not restored or inspected. Every message names the
//! file; the cause is kept as the source.

use std::path::PathBuf;

use super::format::{FormatError, ReadError};
use super::pager::PageError;
use crate::error::Error;
use crate::input::InputError;

/// Why a snapshot was not restored (or inspected).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The file could not be read.
    #[error("cannot read snapshot {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The file cannot be used as input at all: missing, not a regular file
    /// (a FIFO, a device), larger than any snapshot, or unreadable.
    #[error("{source}")]
    Input {
        /// What the input layer found.
        #[source]
        source: InputError,
    },
    /// The file decodes but its state is invalid or inconsistent: one
    /// field, named as `section: field`, breaks a rule no host can accept.
    #[error("snapshot {} is invalid: {field}: {problem}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The offending field (`meta.mem_mib`, `vcpu0.sregs.cr4`, ...).
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The file is not a valid snapshot: truncated, corrupted, another
    /// format version, or malformed sections.
    #[error("snapshot {}: {source}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: FormatError,
    },
    /// The snapshot is valid but this host cannot hold its state.
    #[error("snapshot {} cannot be restored on this host: {reason}", path.display())]
    Incompatible {
        /// The file.
        path: PathBuf,
        /// What the state needs that this host lacks.
        reason: String,
    },
    /// A stored page failed its checksum or could not be read while the
    /// pages were read up front: the guest never ran.
    #[error("snapshot {}: {source}; the guest was not started", path.display())]
    Memory {
        /// The file.
        path: PathBuf,
        /// The page and what is wrong with it.
        #[source]
        source: PageError,
    },
    /// Restoring failed in KVM or the VMM.
    #[error("restoring snapshot {}: {source}", path.display())]
    Vmm {
        /// The file.
        path: PathBuf,
        /// The VMM's error.
        #[source]
        source: Error,
    },
}

impl SnapshotError {
    /// A [`ReadError`] of `path` as a snapshot error.
    pub fn from_read(path: &std::path::Path, e: ReadError) -> Self {
        match e {
            ReadError::Input(source) => SnapshotError::Input { source },
            ReadError::Format(source) => SnapshotError::Format {
                path: path.to_path_buf(),
                source,
            },
        }
    }

    /// A suggestion for the user where one helps.
    pub fn hint(&self) -> Option<String> {
        match self {
            SnapshotError::Format {
                source: FormatError::BadMagic { .. } | FormatError::Truncated { .. },
                ..
            } => Some(
                "this is not a complete vmm snapshot; snapshots are written by \
                 `vmm run --snapshot-after SECONDS --snapshot-file FILE`"
                    .into(),
            ),
            SnapshotError::Format {
                source: FormatError::Version { .. },
                ..
            } => Some("restore it with the vmm version that wrote it (`vmm snapshot info` needs the same format)".into()),
            SnapshotError::Incompatible { .. } => Some(
                "`vmm snapshot info FILE` shows what the snapshot needs; \
                 `vmm features --no-boot` what this host offers"
                    .into(),
            ),
            SnapshotError::Vmm { source, .. } => source.hint(),
            _ => None,
        }
    }
}
