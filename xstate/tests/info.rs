//! Malformed leaf-0xD data is rejected with a clear error, never a panic.

mod common;

use xstate::{CpuidRegs, InfoError, XsaveInfo};

fn from(raw: &[CpuidRegs; 64]) -> Result<XsaveInfo, InfoError> {
    XsaveInfo::from_leaf_0xd(|i| raw[i as usize])
}

#[test]
fn reads_only_needed_subleaves() {
    let raw = common::raw("amd-zen3-milan.json");
    let mut read = Vec::new();
    XsaveInfo::from_leaf_0xd(|i| {
        read.push(i);
        raw[i as usize]
    })
    .unwrap();
    assert_eq!(read, vec![0, 1, 2, 9, 11, 12]);
}

#[test]
fn missing_subleaf() {
    let mut raw = common::raw("intel-sapphire-rapids.json");
    raw[17] = CpuidRegs::default();
    let e = from(&raw).unwrap_err();
    assert_eq!(e, InfoError::MissingSubleaf(17));
    assert!(e.to_string().contains("xtilecfg"), "{e}");
    let mut raw = common::raw("intel-sapphire-rapids.json");
    raw[15] = CpuidRegs::default(); // supervisor LBR
    assert_eq!(from(&raw), Err(InfoError::MissingSubleaf(15)));
}

#[test]
fn overlap() {
    let mut raw = common::raw("intel-ice-lake-client.json");
    raw[9].ebx = 0x680 + 8; // PKRU inside Hi16_ZMM
    assert_eq!(from(&raw), Err(InfoError::Overlap { a: 7, b: 9 }));
    let mut raw = common::raw("amd-zen3-milan.json");
    raw[9].ebx = 0x100; // inside the legacy region
    assert_eq!(
        from(&raw),
        Err(InfoError::InsideLegacyRegion {
            index: 9,
            offset: 0x100
        })
    );
}

#[test]
fn sizes_past_4gib_and_max() {
    let mut raw = common::raw("amd-zen3-milan.json");
    raw[9].eax = 0xffff_fff0;
    assert!(matches!(
        from(&raw),
        Err(InfoError::PastAddressSpace { index: 9, .. })
    ));
    let mut raw = common::raw("amd-zen3-milan.json");
    raw[9].eax = 16; // ends at 2448 > 0.ECX 2440
    assert_eq!(
        from(&raw),
        Err(InfoError::PastMaxSize {
            index: 9,
            end: 2448,
            max: 2440
        })
    );
    // Supervisor sizes summing past 4 GiB in the compacted format.
    let mut raw = common::raw("amd-zen3-milan.json");
    raw[11].eax = 0x8000_0000;
    raw[12].eax = 0x8000_0000;
    assert!(matches!(from(&raw), Err(InfoError::CompactedTooLarge(_))));
    let mut raw = common::raw("amd-zen3-milan.json");
    raw[0].ecx = 512;
    assert_eq!(from(&raw), Err(InfoError::MaxSizeTooSmall(512)));
}

#[test]
fn inconsistent_masks_and_flags() {
    let mut raw = common::raw("amd-zen3-milan.json");
    raw[0].eax = 0x205; // no SSE
    assert!(matches!(
        from(&raw),
        Err(InfoError::LegacyNotSupported { .. })
    ));
    let mut raw = common::raw("amd-zen3-milan.json");
    raw[0].eax = 0x206; // no x87
    assert!(matches!(
        from(&raw),
        Err(InfoError::LegacyNotSupported { .. })
    ));
    let mut raw = common::raw("amd-zen3-milan.json");
    raw[1].ecx |= 0x200; // PKRU as both
    assert!(matches!(from(&raw), Err(InfoError::UserAndSupervisor(_))));
    let mut raw = common::raw("amd-zen3-milan.json");
    raw[1].ecx |= 0x1; // x87 in XSS
    assert!(matches!(from(&raw), Err(InfoError::ReservedBit { .. })));
    let mut raw = common::raw("amd-zen3-milan.json");
    raw[11].ecx = 0; // CET_U not flagged supervisor
    assert_eq!(from(&raw), Err(InfoError::SupervisorFlagMismatch(11)));
    let mut raw = common::raw("amd-zen3-milan.json");
    raw[9].ecx = 1; // PKRU flagged supervisor
    assert_eq!(from(&raw), Err(InfoError::SupervisorFlagMismatch(9)));
}

#[test]
fn garbage_never_panics() {
    // A cheap fuzz: random registers for every subleaf.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..20000 {
        let mut raw = [CpuidRegs::default(); 64];
        let density = next() % 4;
        for r in raw.iter_mut() {
            if next() % 4 <= density {
                let v = next();
                *r = CpuidRegs::new(
                    v as u32 % 8192,
                    (v >> 32) as u32 % 16384,
                    (v >> 13) as u32 & 7,
                    0,
                );
            }
        }
        raw[0].eax = (next() as u32) | 3;
        raw[0].ecx = next() as u32 % 20000;
        raw[1].ecx = next() as u32 & 0xfffc;
        if let Ok(info) = from(&raw) {
            // Anything accepted lays out without error.
            let all = info.supported_all();
            info.compacted_size(all).unwrap();
            info.standard_size(info.supported_xcr0()).unwrap();
        }
    }
}

#[test]
fn unknown_components_handled_by_index() {
    // A future CPU with user component 25 (size 64 at 2440) on top of Milan.
    let mut raw = common::raw("amd-zen3-milan.json");
    raw[0].eax |= 1 << 25;
    raw[0].ecx = 2440 + 64;
    raw[25] = CpuidRegs::new(64, 2440, 0, 0);
    let info = from(&raw).unwrap();
    assert_eq!(info.standard_size(info.supported_xcr0()).unwrap(), 2504);
    assert_eq!(info.compacted_size(info.supported_xcr0()).unwrap(), 904);
    assert_eq!(info.supported_xcr0().to_string(), "x87,sse,avx,pkru,bit25");
}

#[test]
fn restricted_view() {
    let info = common::spr();
    let r = info
        .restricted(
            xstate::XfeatureMask::from_bits(0x7),
            xstate::XfeatureMask::from_bits(0x1800),
        )
        .unwrap();
    assert_eq!(r.supported_xcr0().bits(), 0x7);
    assert_eq!(r.supported_xss().bits(), 0x1800);
    assert_eq!(r.max_standard_size(), 832);
    assert_eq!(r.raw_subleaf(1).ebx, 832 + 16 + 24);
    assert_eq!(r.raw_subleaf(18), CpuidRegs::default());
}

/// The subleaves `from_leaf_0xd` reads beyond 0 and 1 are exactly the
/// supported XCR0 and IA32_XSS components from 2 up, in order.
#[test]
fn component_subleaves_follow_both_masks() {
    // XCR0 0xe7 (x87, SSE, AVX, AVX-512), XSS bits 11 and 12 (CET).
    let sub0 = CpuidRegs::new(0xe7, 0x980, 0x988, 0);
    let sub1 = CpuidRegs::new(0xf, 0x988, 0x1800, 0);
    let got: Vec<u32> = XsaveInfo::component_subleaves(sub0, sub1).collect();
    assert_eq!(got, [2, 5, 6, 7, 11, 12]);
    // A component only in EDX (bit 32 + 2 = 34) counts too.
    let sub0 = CpuidRegs::new(0x3, 0x240, 0x240, 0x4);
    let got: Vec<u32> = XsaveInfo::component_subleaves(sub0, CpuidRegs::default()).collect();
    assert_eq!(got, [34]);
}

/// The leaf 0xD a hypervisor gives under an x87-only policy (hardware KVM
/// honours it: `vmm run --xfeatures x87` on kvm_amd) is valid: x87 is the
/// only component XCR0 must hold, and nothing above SSE is offered.
#[test]
fn x87_alone_is_a_valid_supported_xcr0() {
    let mut raw = common::raw("amd-zen3-milan.json");
    raw[0].eax = 0x1;
    raw[0].edx = 0;
    raw[0].ebx = 576;
    raw[0].ecx = 576;
    raw[1].ecx = 0;
    raw[1].edx = 0;
    let info = from(&raw).expect("x87 alone");
    assert_eq!(info.supported_xcr0().bits(), 0x1);
    assert_eq!(info.standard_size(info.supported_xcr0()), Ok(576));
}
