//! Snapshot and restore: `vmm run --snapshot-after S --snapshot-file F`
//! (or a guest write to `SNAPSHOT_PORT`) saves the VM and stops;
//! `vmm restore F` resumes it in a fresh VM; `vmm snapshot info F` shows
//! what is inside.
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
//! - [`save`]: capturing a running VM.
//! - [`compat`]: the one validation `restore` and `info` share, against this
//!   host, before any VM exists.
//! - [`restore`]: resuming a validated snapshot in a new VM.
//! - [`verify`]: reading the state back from KVM after a restore and
//!   comparing it, field by field, with the file.
//! - [`error`]: what can go wrong, naming the file and the field.
//! - [`write`](mod@write): writing the file: private (0600), atomic, never through or
//!   over anything but a regular file, no temporary left behind.
//! - [`info`](mod@info): the `vmm snapshot info` view.

pub mod compat;
pub mod error;
pub mod format;
pub mod info;
pub mod restore;
pub mod save;
pub mod sparse;
pub mod state;
pub mod verify;
pub mod write;

use std::path::PathBuf;

pub use info::{info, SnapshotInfo, VcpuInfo};
pub use restore::SnapshotError;

/// `vmm snapshot`.
#[derive(clap::Args)]
pub struct SnapshotArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SnapshotCommand,
}

/// The subcommands of `vmm snapshot`.
#[derive(clap::Subcommand)]
pub enum SnapshotCommand {
    /// Show what a snapshot holds: sections, memory, vCPU and xstate.
    Info(InfoArgs),
}

/// `vmm snapshot info`.
#[derive(clap::Args)]
pub struct InfoArgs {
    /// The snapshot file.
    pub file: PathBuf,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `vmm snapshot ...`: returns the exit status; errors are printed as
/// `vmm: ...` with status 64.
pub fn main(args: SnapshotArgs) -> i32 {
    match args.command {
        SnapshotCommand::Info(a) => match info(&a.file) {
            Ok(i) => {
                if a.json {
                    match crate::schema::to_json(crate::schema::Document::SnapshotInfo, &i) {
                        Ok(j) => println!("{j}"),
                        Err(e) => {
                            eprintln!("vmm: JSON: {e}");
                            return crate::report::EXIT_VMM_ERROR;
                        }
                    }
                } else {
                    print!("{}", i.to_table());
                }
                0
            }
            Err(e) => {
                crate::error::eprint(&e, e.hint());
                crate::report::EXIT_VMM_ERROR
            }
        },
    }
}
