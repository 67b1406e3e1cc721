//! Loading the recorded CPUID dumps of `tests/data` without the crate's
//! `serde` feature (plain serde_json values), so layout tests run in every
//! feature configuration.
#![allow(dead_code)]

use xstate::{CpuidRegs, XfeatureMask, XsaveInfo};

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

/// A splitmix64 generator: reproducible pseudo-random register contents and
/// masks for the property tests, seeded per case.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Fills `b` with the next values, 8 bytes each, little-endian.
    pub fn fill(&mut self, b: &mut [u8]) {
        for c in b.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }

    /// A random subset of `of`.
    pub fn subset(&mut self, of: XfeatureMask) -> XfeatureMask {
        XfeatureMask::from_bits(self.next() & of.bits())
    }

    /// Sixteen random 256-bit registers (YMM0-15).
    pub fn regs(&mut self) -> [[u8; 32]; 16] {
        let mut r = [[0u8; 32]; 16];
        for reg in r.iter_mut() {
            self.fill(reg);
        }
        r
    }
}
