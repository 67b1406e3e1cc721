//! The virtual machine's state in KVM and the run that drives it.
//!
//! - `machine`: VM, guest RAM and vCPU creation (`Machine`).
//! - [`vcpu`]: vCPU ioctls: CPUID, XCRs, xsave images, MSRs.
//! - [`xfd`]: `IA32_XFD`/`IA32_XFD_ERR` saved and restored with the vCPU
//!   where KVM has XFD (dynamic xfeatures such as AMX).
//! - [`dump`]: register dumps for crash reports.
//! - [`config`]: what a run is asked to do ([`RunConfig`]).
//! - `launch`: booting a guest ([`run`]) and running a configured machine
//!   (what restore uses too).
//! - `runner`: the run loops and exit decoding.
//! - `stop`: why and how a running vCPU is stopped from outside.
//! - `deadline`: one vCPU's deadlines as requests and a kicking timer,
//!   without a watching thread.
//! - [`smp`]: `--vcpus N`: the limits, the irqchip, how APs start.
//! - [`outcome`]: what a run produced ([`RunOutcome`], [`RunEnd`]).

pub mod config;
pub(crate) mod deadline;
pub mod dump;
pub(crate) mod launch;
pub(crate) mod machine;
pub mod outcome;
pub(crate) mod runner;
pub mod smp;
pub(crate) mod stop;
pub mod vcpu;
pub mod xfd;

pub use config::{InterleaveSpec, KernelImage, RunConfig};
pub use dump::RegisterDump;
pub use launch::{check_cmdline_words, run};
pub use machine::RamBacking;
pub use outcome::{ExitCounts, RunEnd, RunOutcome, VcpuOutcome};
pub use smp::{ApStart, VcpuCountError, VcpuPhases};
