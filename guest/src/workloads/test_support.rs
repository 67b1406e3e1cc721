//! Helpers the workload tests share: the implementations this host can
//! run, so every test exercises every variant the CPU has.

use super::features::CpuFeatures;
use super::std::{string::String, vec::Vec};
use super::text::Reason;
use crate::protocol::{field_str, Report};

/// Every variant in `all` that `new` accepts for this CPU's features.
pub(crate) fn host_variants<V: Copy, T>(
    all: &[V],
    new: impl Fn(V, &CpuFeatures) -> Result<T, Reason>,
) -> Vec<T> {
    let f = CpuFeatures::detect();
    all.iter().filter_map(|&v| new(v, &f).ok()).collect()
}

/// The reason `report` gives for skipping workload `name` variant
/// `variant`, if it skipped it.
pub(crate) fn skip_reason(report: &Report, name: &str, variant: &str) -> Option<String> {
    report
        .skipped()
        .iter()
        .find(|s| field_str(&s.name) == name && field_str(&s.variant) == variant)
        .map(|s| field_str(&s.reason).into())
}
