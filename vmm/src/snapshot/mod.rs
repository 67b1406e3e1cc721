//! Snapshot and restore: `vmm run --snapshot-after S --snapshot-file F`
//! (or a guest write to `SNAPSHOT_PORT`) saves the VM and stops;
//! `vmm restore F` resumes it in a fresh VM ([`crate::run::restore`]);
//! `vmm snapshot info F` shows what is inside (`crate::report::snapshot_info`).
//!
//! The extended state is stored the way the xstate manager holds it:
//! **compacted, with only the components in use** (an AVX-512-capable guest
//! whose upper state is in its init state costs 576 bytes, not 2.4 KiB; an
//! AMX guest with idle tiles not 11 KiB), together with XCR0 and the source
//! KVM's leaf 0xD, so a target with other standard offsets can re-lay it
//! out and a target lacking a component in use refuses by name before any
//! VM exists.
//!
//! - [`format`](mod@format): the container (header, section table, CRC32 per
//!   section), read bounded and table first.
//! - [`sparse`]: guest RAM without its all-zero pages.
//! - [`state`]: the sections and their encodings.
//! - `save`: capturing a running VM.
//! - `compat`: the one validation `restore` and `info` share, against this
//!   host, before any VM exists.
//! - `load`: reading a file back, verified, and putting its state into a
//!   new VM (the resumed run is [`crate::run::restore`]).
//! - `pager`: the stored pages into a restored guest's RAM, isolated
//!   from the file and verified page by page.
//! - `verify` (tests only): reading the state back from KVM after a restore and
//!   comparing it, field by field, with the file.
//! - `error`: what can go wrong, naming the file and the field.

pub(crate) mod compat;
pub(crate) mod error;
pub mod format;
pub(crate) mod load;
pub(crate) mod pager;
pub(crate) mod save;
pub mod sparse;
pub mod state;
#[cfg(test)]
pub(crate) mod verify;

pub use error::SnapshotError;
