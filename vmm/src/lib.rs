//! `vmm`: a minimal KVM virtual machine monitor whose speciality is the
//! guest's extended CPU state.
//!
//! - [`kvm`]: opening `/dev/kvm`, capabilities, what KVM supports.
//! - [`cpuid`]: the `--xfeatures` policy and the guest CPUID it shapes.
//! - [`arch`]: the PC platform: memory map, PVH boot, the boot vCPU's entry state.
//! - [`vstate`]: the VM in KVM: machine creation, vCPU ioctls, the run loops.
//! - [`devices`]: COM1, debug exit and report ports.
//! - [`xstate_manager`]: the guest's xsave state between `KVM_RUN`s, per sync policy.
//! - [`snapshot`]: `vmm run --snapshot-after`, `vmm restore`, `vmm snapshot info`.
//! - [`report`]: the table and JSON `vmm run` prints.
//! - [`native`]: the guest's workloads run on the host, for guest/native ratios.
//! - [`bench`](mod@bench): `vmm bench exits` and `vmm bench init-xstate`.
//! - [`features`]: `vmm features`: host, KVM, policy and guest xstate compared; profiles.
//! - [`error`]: the error types.
//! - [`output`]: writing files the user names: private, atomic, never over
//!   anything but a regular file, no temporary left behind.
//! - [`input`]: opening files the user names: regular files only, bounded, magic first.
//! - [`schema`]: the `--json` documents, versioned.
//! - [`catalog`]: each `--json` document's type and its JSON Schema.

pub mod arch;
pub mod bench;
pub mod catalog;
pub mod cpuid;
pub mod devices;
pub mod error;
pub mod features;
pub mod input;
pub mod kvm;
pub mod native;
pub mod output;
pub mod report;
pub mod run;
pub mod schema;
pub mod snapshot;
pub mod vstate;
pub mod xstate_manager;

pub use error::{Error, Result};

/// The guest kernel built from `guest/` by `build.rs`.
pub static GUEST_KERNEL: &[u8] = include_bytes!(env!("VMM_GUEST_KERNEL"));
