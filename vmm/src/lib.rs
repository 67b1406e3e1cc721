//! `vmm`: a minimal KVM virtual machine monitor whose speciality is the
//! guest's extended CPU state.
//!
//! Its modules form layers that only point down (`ARCHITECTURE.md` has the
//! order; `scripts/module_cycles.py` checks it):
//!
//! 1. Foundation, no KVM: [`input`] (files the user names: regular, bounded,
//!    magic first), [`output`] (files written: private, atomic, never over
//!    anything but a regular file), [`schema`] (the `--json` envelope).
//! 2. The machine: [`arch`] (memory map, PVH boot, entry state, MP table),
//!    [`error`], [`kvm`] (`/dev/kvm` and what it supports), [`cpuid`] (the
//!    `--xfeatures` policy and the guest CPUID it shapes), [`devices`] (the
//!    port bus), [`xstate_manager`] (the guest's xsave state between
//!    `KVM_RUN`s), [`vstate`] (VM, RAM, vCPUs), [`snapshot`] (capture, the
//!    file format, loading a file into a VM).
//! 3. The session: [`run`] (`vmm run` and `vmm restore` from configuration
//!    to [`run::RunOutcome`]).
//! 4. The tools: [`report`] (what a run prints), [`features`] (`vmm
//!    features`), [`bench`](mod@bench) (`vmm bench`), [`native`] (the
//!    guest's workloads on the host), [`session`] (`vmm run` and `vmm
//!    restore` to a finished summary), [`catalog`] (each `--json`
//!    document's type and JSON Schema), `fuzzing` (hidden: the fuzz
//!    targets' entry points into parsers the API does not expose).

pub mod arch;
pub mod bench;
pub mod catalog;
pub mod cpuid;
pub mod devices;
pub mod error;
pub mod features;
#[doc(hidden)]
pub mod fuzzing;
pub mod input;
pub mod kvm;
pub mod native;
pub mod output;
pub mod report;
pub mod run;
pub mod schema;
pub mod session;
pub mod snapshot;
pub mod vstate;
pub mod xstate_manager;

pub use error::{Error, Result};

/// The guest kernel built from `guest/` by `build.rs`.
pub static GUEST_KERNEL: &[u8] = include_bytes!(env!("VMM_GUEST_KERNEL"));
