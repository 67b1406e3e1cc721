//! Helpers the workload tests share: the implementations this host can
//! run, so every test exercises every variant the CPU has.

use super::features::CpuFeatures;
use super::std::vec::Vec;
use super::text::Reason;

/// Every variant in `all` that `new` accepts for this CPU's features.
pub(crate) fn host_variants<V: Copy, T>(
    all: &[V],
    new: impl Fn(V, &CpuFeatures) -> Result<T, Reason>,
) -> Vec<T> {
    let f = CpuFeatures::detect();
    all.iter().filter_map(|&v| new(v, &f).ok()).collect()
}
