//! The compute workloads the guest times inside the VM and the VMM times
//! natively on the host, to report guest/native ratios: AES-128 (CBC, CTR),
//! XTS-AES-256 and AES-128-GCM (with the per-message register-borrow
//! rows), and double-precision linear algebra (DGEMM, Linpack), each in the ISA
//! variants whose cost depends on how a VMM handles extended state.
//!
//! The same code runs in both places, so it is `no_std`, allocation-free
//! (every buffer is carved from the caller's scratch bytes, see
//! [`scratch_bytes`]) and makes no OS calls. ISA variants are chosen at run
//! time from [`CpuFeatures`]; each one is compiled with its own
//! `#[target_feature]` set rather than the crate's, and the legacy-SSE AES
//! variant deliberately without AVX so it keeps the non-VEX encoding whose
//! slowdown under live AVX upper state motivated the project.
//!
//! Every result is checked before or as it is timed: AES against FIPS-197,
//! SP 800-38A, IEEE 1619 and GCM known answers, DGEMM against dot products, Linpack by
//! its scaled residual.
//!
//! - [`features`]: CPUID + XCR0 -> usable variants, and skip reasons.
//! - [`selection`]: the `workload=` list.
//! - [`amx`]: the AMX tile product (TDPBSSD) and its scalar reference.
//! - [`aes`], [`gemm`], [`linpack`]: the building blocks, public for tests
//!   and benchmarks.
//! - [`runner`]: sizes, checks, timing and report records ([`run`]).
//! - [`timing`], [`scratch`], [`rng`], [`text`]: support.

#[cfg(test)]
extern crate std;

pub mod aes;
pub mod amx;
pub mod features;
pub mod gemm;
pub mod linpack;
pub mod live;
pub mod rng;
pub mod runner;
pub mod scratch;
pub mod selection;
pub mod text;
pub mod timing;

pub use aes::{Aes128, AesVariant, RoundKeys};
pub use features::{CpuFeatures, Requirement};
pub use gemm::{Dgemm, GemmVariant};
pub use runner::{
    mode_row_variant, run, run_row, run_with_hook, scratch_bytes, NoReps, RepHook, Target,
};
pub use selection::Selection;
pub use text::Reason;

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
