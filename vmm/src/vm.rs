//! Compatibility paths for code written against the old `vm` module: the
//! run lives in [`crate::vstate`], the policy in [`crate::cpuid::policy`].

pub use crate::cpuid::policy::{resolve_policy, Policy};
pub use crate::vstate::config::{KernelImage, RunConfig};
pub use crate::vstate::launch::run;
pub use crate::vstate::outcome::{ExitCounts, RunEnd, RunOutcome};
