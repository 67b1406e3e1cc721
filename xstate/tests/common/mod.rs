//! Loading the recorded CPUID dumps of `tests/data` without the crate's
//! `serde` feature (plain serde_json values), so layout tests run in every
//! feature configuration.
#![allow(dead_code)]

use xstate::{CpuidRegs, XsaveInfo};

pub const DUMPS: [&str; 4] = [
    "intel-sapphire-rapids.json",
    "intel-ice-lake-client.json",
    "amd-zen3-milan.json",
    "amd-zen3-kvm-guest.json",
];

pub fn dump_text(name: &str) -> String {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn hex(v: &serde_json::Value) -> u32 {
    let s = v.as_str().expect("hex string");
    u32::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex")
}

/// Raw subleaves 0..64 of a dump.
pub fn raw(name: &str) -> [CpuidRegs; 64] {
    let v: serde_json::Value = serde_json::from_str(&dump_text(name)).unwrap();
    let mut raw = [CpuidRegs::default(); 64];
    for e in v["leaf_0xd"].as_array().unwrap() {
        let i = e["subleaf"].as_u64().unwrap() as usize;
        raw[i] = CpuidRegs::new(
            hex(&e["eax"]),
            hex(&e["ebx"]),
            hex(&e["ecx"]),
            hex(&e["edx"]),
        );
    }
    raw
}

pub fn info(name: &str) -> XsaveInfo {
    let raw = raw(name);
    XsaveInfo::from_leaf_0xd(|i| raw[i as usize]).unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn spr() -> XsaveInfo {
    info("intel-sapphire-rapids.json")
}
pub fn icl() -> XsaveInfo {
    info("intel-ice-lake-client.json")
}
pub fn milan() -> XsaveInfo {
    info("amd-zen3-milan.json")
}
pub fn zen3_guest() -> XsaveInfo {
    info("amd-zen3-kvm-guest.json")
}
