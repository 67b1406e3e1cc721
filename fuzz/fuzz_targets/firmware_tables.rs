//! cargo-fuzz target `firmware_tables`: the body is shared with the stable replay
//! test (`tests/fuzz_replay.rs`); see `tests/fuzz_bodies/mod.rs`.
#![no_main]

#[path = "../../tests/fuzz_bodies/mod.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::firmware_tables(data));
