//! Why `vmm features` failed: its own module so every part of the command
//! (profiles, inputs, dispatch) shares one error type without depending on
//! the command's entry point.

use std::path::PathBuf;

/// Failures of `vmm features`.
#[derive(Debug, thiserror::Error)]
pub enum FeaturesError {
    /// A profile file is unreadable or malformed.
    #[error("profile {}: {reason}", path.display())]
    Profile {
        /// The profile file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A serial log holds no valid guest record (or the record cannot be
    /// compared).
    #[error("guest log {}: {reason}", path.display())]
    GuestLog {
        /// The log file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A `compare` input is neither a CPUID profile nor a serial log with
    /// a guest record.
    #[error("{}: neither a CPUID profile or dump (vmm profile JSON, `cpuid -r` output, InstLatx64 dump, Firecracker template dump) nor a serial log with a VMMREC1 guest record", path.display())]
    UnknownInput {
        /// The file.
        path: PathBuf,
    },
    /// A profile file is not a regular file of a profile's size, or cannot
    /// be read.
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
    /// A `--profile` / `compare` argument that is neither a bundled
    /// profile's name nor an existing file.
    #[error("profile {0:?}: no bundled profile has this name and no such file exists")]
    UnknownProfile(String),
    /// A command-line value is invalid.
    #[error("{0}")]
    Usage(String),
    /// A program the command runs (`--qemu`) failed or said nothing usable.
    #[error("{0}")]
    Tool(String),
    /// The running host's CPUID cannot be used.
    #[error("this host's CPUID: {0}")]
    Host(String),
    /// A file cannot go to its path (a symlink, device, FIFO or directory
    /// there, a directory that refuses writes) or could not be written;
    /// nothing at the path was changed.
    #[error("cannot write {}: {source}", path.display())]
    Output {
        /// The file being written.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::output::WriteError,
    },
    /// A VMM error (KVM, policy, guest boot): reported as `vmm run` reports it.
    #[error(transparent)]
    Vmm(#[from] crate::Error),
}
