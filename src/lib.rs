//! `vmm-suite`: the workspace's root package. It exists to hold the criterion
//! benchmarks in `benches/` and the end-to-end tests in `tests/`; the code
//! lives in `xstate/`, `vmm/` and `guest/`.
