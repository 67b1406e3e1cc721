//! `vmm`: a minimal KVM virtual machine monitor whose speciality is the
//! guest's extended CPU state.
//!
//! - [`bench`]: `vmm bench exits` and `vmm bench init-xstate`.
//! - [`kvm`]: opening `/dev/kvm`, capabilities, what KVM supports.
//! - [`cpuid`]: the guest CPUID policy for an xfeature mask.
//! - [`memory`]: guest RAM and the boot-time memory map.
//! - [`boot`]: PVH ELF loading and the boot vCPU's entry state.
//! - [`vcpu`]: XCR0 and xsave images through KVM.
//! - [`devices`]: COM1, debug exit and report ports.
//! - [`vm`]: one guest run, start to exit.
//! - [`xstate_manager`]: the guest's xsave state between `KVM_RUN`s, per sync policy.
//! - [`regs`]: register dumps for crash reports.
//! - [`report`]: the table and JSON `vmm run` prints.
//! - [`native`]: the guest's workloads run on the host, for guest/native ratios.
//! - [`snapshot`]: `vmm run --snapshot-after`, `vmm restore`, `vmm snapshot info`.
//! - [`features`]: `vmm features`: host, KVM, policy and guest xstate compared; profiles.

pub mod bench;
pub mod boot;
pub mod cpuid;
pub mod devices;
pub mod error;
pub mod features;
pub mod kvm;
pub mod memory;
pub mod native;
pub mod regs;
pub mod report;
pub mod snapshot;
pub mod vcpu;
pub mod vm;
pub mod xstate_manager;

pub use error::{Error, Result};

/// The guest kernel built from `guest/` by `build.rs`.
pub static GUEST_KERNEL: &[u8] = include_bytes!(env!("VMM_GUEST_KERNEL"));
