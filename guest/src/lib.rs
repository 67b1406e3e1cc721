//! The library half of the guest: what the guest kernel and the VMM share.
//!
//! - [`protocol`]: ports, exit statuses and the report record.
//! - [`workloads`]: the compute workloads.
//! - [`bench`](mod@bench): exit, xstate-check and context-switch benchmarks.
//! - [`firmware`]: the CPU count from the ACPI MADT or the MP table.
//! - [`linux_probe`]: the checksum of the `linux-probe` Linux program.
//!
//! The kernel itself (`src/main.rs`, feature `kernel`) is built by
//! `vmm/build.rs` with bare-metal link flags and embedded in the `vmm` binary.
#![no_std]

pub mod bench;
pub mod firmware;
pub mod linux_probe;
pub mod protocol;
pub mod workloads;
