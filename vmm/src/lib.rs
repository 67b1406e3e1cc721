//! `vmm`: a minimal KVM virtual machine monitor whose speciality is the
//! guest's extended CPU state.
//!
//! # Public API
//!
//! What a library user needs, as the rust-vmm crates and Firecracker's
//! `vmm` expose it (`ARCHITECTURE.md`, "Public API", says why):
//!
//! - running a guest and reading what came out: [`run`] ([`run::RunConfig`],
//!   [`run::run`], [`run::restore`], [`run::RunOutcome`]) and [`session`]
//!   (a run or restore to a finished [`report::RunSummary`]);
//! - the snapshot file: [`snapshot`] (the container, its sections and sparse
//!   RAM; validating and inspecting a file through [`run::restore`]);
//! - the host and the policy: [`kvm::HostKvm`], [`cpuid`] (resolving
//!   `--xfeatures`), [`features`] (CPU profiles, their lint),
//!   [`xstate_manager`] (the guest's xsave state between `KVM_RUN`s);
//! - [`Error`], [`Result`], [`GUEST_KERNEL`], and the `--json` documents:
//!   [`schema`], [`catalog`].
//!
//! The machine's internals (`arch`, `devices`, `vstate`, `input`, `output`),
//! the tools the binary runs (`bench`, `native`) and the rest of each
//! module are crate-private. What the `vmm` binary, the integration tests,
//! the benches and the fuzz targets reach beyond that sits in two
//! doc-hidden modules, `internal` and `fuzzing`, and is no API.
//!
//! # Layers
//!
//! The modules form layers that only point down (`ARCHITECTURE.md` has the
//! order; `scripts/module_cycles.py` checks it):
//!
//! 1. Foundation, no KVM: `input` (files the user names: regular, bounded,
//!    magic first), `output` (files written: private, atomic, never over
//!    anything but a regular file), [`schema`] (the `--json` envelope).
//! 2. The machine: `arch` (memory map, PVH boot, entry state, MP table),
//!    [`error`], [`kvm`] (`/dev/kvm` and what it supports), [`cpuid`] (the
//!    `--xfeatures` policy and the guest CPUID it shapes), `devices` (the
//!    port bus), [`xstate_manager`] (the guest's xsave state between
//!    `KVM_RUN`s), `vstate` (VM, RAM, vCPUs), [`snapshot`] (capture, the
//!    file format, loading a file into a VM).
//! 3. The session: [`run`] (`vmm run` and `vmm restore` from configuration
//!    to [`run::RunOutcome`]).
//! 4. The tools: [`report`] (what a run prints), [`features`] (`vmm
//!    features`), `bench` (`vmm bench`), `native` (the guest's workloads
//!    on the host), [`session`] (`vmm run` and `vmm restore` to a finished
//!    summary), [`catalog`] (each `--json` document's type and JSON
//!    Schema), `fuzzing` and `internal` (hidden: the fuzz targets' entry
//!    points, and what the binary and the tests reach that the API does
//!    not expose).
// Every message and result reaches the terminal escaped
// (`output::terminal`): no `print!`/`eprint!` outside the tests.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

pub(crate) mod arch;
pub(crate) mod bench;
pub mod catalog;
pub mod cpuid;
pub(crate) mod devices;
pub mod error;
pub mod features;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod input;
#[doc(hidden)]
pub mod internal;
pub mod kvm;
pub(crate) mod native;
pub(crate) mod output;
pub mod report;
pub mod run;
pub mod schema;
pub mod session;
pub mod snapshot;
pub(crate) mod vstate;
pub mod xstate_manager;

pub use error::{Error, Result};

/// The guest kernel built from `guest/` by `build.rs`.
///
/// It starts on a page of the executable, so a run maps its pages into
/// guest RAM from the executable's file instead of copying them.
pub static GUEST_KERNEL: &[u8] = &PAGE_ALIGNED_GUEST_KERNEL.0;

/// Bytes that start on a page.
#[repr(C, align(4096))]
struct PageAligned<T: ?Sized>(T);

/// [`GUEST_KERNEL`], page-aligned.
static PAGE_ALIGNED_GUEST_KERNEL: &PageAligned<[u8]> =
    &PageAligned(*include_bytes!(env!("VMM_GUEST_KERNEL")));
