//! cargo-fuzz target `linux_console`: the body is shared with the stable replay
//! test (`vmm/tests/fuzz_replay.rs`); see `vmm/tests/fuzz_bodies/mod.rs`.
#![no_main]

#[path = "../../vmm/tests/fuzz_bodies/mod.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::linux_console(data));
