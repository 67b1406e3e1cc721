//! The virtual machine's state in KVM: the VM, its RAM and vCPUs, and how a
//! running vCPU is stopped. The runs that drive it are [`crate::run`].
//!
//! - `machine`: VM, guest RAM and vCPU creation (`Machine`).
//! - [`vcpu`]: vCPU ioctls: CPUID, XCRs, xsave images, MSRs.
//! - [`xfd`]: `IA32_XFD`/`IA32_XFD_ERR` saved and restored with the vCPU
//!   where KVM has XFD (dynamic xfeatures such as AMX).
//! - `dump`: register dumps for crash reports.
//! - `halt`: a guest whose vCPUs all wait with nothing to wake them.
//! - `kvm_stats`: a vCPU's KVM counters, which tell the halt watch it
//!   stayed in one HLT.
//! - `stop`: why and how a running vCPU is stopped from outside.
//! - `deadline`: one vCPU's deadlines as requests and a kicking timer,
//!   without a watching thread.
//! - `smp`: `--vcpus N`: the limits, the irqchip, how APs start.
//! - `pc`: the PIT and COM1 interrupt a stock Linux kernel needs.

pub(crate) mod deadline;
pub(crate) mod dump;
pub(crate) mod halt;
pub(crate) mod kvm_stats;
pub(crate) mod machine;
pub(crate) mod pc;
pub(crate) mod smp;
pub(crate) mod stop;
pub mod vcpu;
pub mod xfd;

pub use dump::RegisterDump;
pub use machine::RamBacking;
pub use smp::{ApStart, VcpuPhases};
