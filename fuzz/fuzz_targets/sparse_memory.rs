//! cargo-fuzz target `sparse_memory`: the body is shared with the stable replay
//! test (`tests/fuzz_replay.rs`); see `tests/fuzz_bodies/mod.rs`.
#![no_main]

#[path = "../../tests/fuzz_bodies/mod.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::sparse_memory(data));
