//! The guest's CPUID, as far as extended state is concerned.
//!
//! - `policy`: THE `--xfeatures` parser and its validation against what
//!   the host supports, and the [`Policy`] a run records.
//! - `flags`: the instruction-set flags that need extended state
//!   ([`GATED_FLAGS`]).
//! - `guest`: the table the guest gets (flags hidden, leaf 0xD rewritten)
//!   and what KVM made of it.
//! - `leaf`: finding and editing entries of a `kvm_cpuid2` table.

pub(crate) mod flags;
pub(crate) mod guest;
pub(crate) mod leaf;
pub(crate) mod policy;

pub use crate::error::PolicyError;
pub use crate::kvm::KvmXstate;
pub(crate) use flags::{GatedFlag, GATED_FLAGS};
pub(crate) use guest::{guest_cpuid, verify, CpuidCheck, GuestCpuid};
pub(crate) use leaf::{entry, Reg};
pub use policy::{
    describe_resolution, parse_xfeatures, resolve_policy, resolve_xfeatures, validate_policy,
    validate_policy_resolution, Policy,
};
