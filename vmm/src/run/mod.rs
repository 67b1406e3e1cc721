//! A run session: what `vmm run` and `vmm restore` ask of the machine, the
//! loop that drives its vCPUs, and what came out.
//!
//! This layer sits on the machine (`crate::vstate`, `crate::devices`,
//! [`crate::xstate_manager`], [`crate::snapshot`]) and knows nothing of the
//! tools above it: the native side of an interleaved run reaches the port
//! bus through `crate::devices::NativeSide`, which the caller supplies.
//!
//! - `config`: what a run is asked to do ([`RunConfig`]).
//! - `launch`: booting a guest ([`run`]).
//! - `execute`: running a configured machine, booted or restored, to its
//!   end.
//! - `prepared`: a machine ready to run (`Launch`), the boot's clock.
//! - `runner`: the run loops and exit decoding.
//! - `smp_run`: several vCPUs, one thread each, under one supervisor.
//! - [`restore`]: resuming a snapshot in a new VM.
//! - `outcome`: what a run produced ([`RunOutcome`], [`RunEnd`]).
//! - `linux_xstate`: a Linux guest's `x86/fpu:` lines, compared with
//!   vmm's layout.

pub(crate) mod config;
pub(crate) mod execute;
pub(crate) mod launch;
pub(crate) mod linux_xstate;
pub(crate) mod outcome;
pub(crate) mod prepared;
pub mod restore;
pub(crate) mod runner;
mod smp_run;

pub use crate::arch::boot::EntryChoice;
pub use crate::devices::SerialSink;
pub use crate::vstate::RamBacking;
pub use config::{KernelImage, ResolvedXfeatures, RunConfig, Xfeatures};
pub use launch::{check_cmdline_words, run};
pub use outcome::{ExitCounts, RunEnd, RunOutcome, VcpuOutcome};
