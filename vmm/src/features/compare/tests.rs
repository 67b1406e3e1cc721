//! Reducing masks to valid ones, the restorability messages and the labels.

use super::*;
use xstate::{CpuidRegs, Incompatibility};

/// A leaf 0xD with the given user components at their usual Intel places.
fn info(xcr0: u64) -> XsaveInfo {
    let places: [(u32, u32, u32); 8] = [
        (2, 256, 576),
        (3, 64, 960),
        (4, 64, 1024),
        (5, 64, 1088),
        (6, 512, 1152),
        (7, 1024, 1664),
        (9, 8, 2688),
        (17, 64, 2752),
    ];
    let mut raw = [CpuidRegs::default(); 64];
    let mut end = 576;
    for (i, size, off) in places {
        if xcr0 & (1 << i) != 0 {
            raw[i as usize] = CpuidRegs::new(size, off, 0, 0);
            end = end.max(off + size);
        }
    }
    if xcr0 & (1 << 18) != 0 {
        raw[18] = CpuidRegs::new(8192, 2816, 6, 0);
        end = end.max(2816 + 8192);
    }
    raw[0] = CpuidRegs::new(xcr0 as u32, end, end, 0);
    raw[1] = CpuidRegs::new(0xf, 0, 0, 0);
    XsaveInfo::from_raw(raw).unwrap()
}

#[test]
fn reduce_keeps_valid_masks() {
    for m in [0x3u64, 0x7, 0x207, 0xe7, 0x602e7, 0x2ff] {
        let m = XfeatureMask::from_bits(m);
        assert_eq!(largest_valid_xcr0(m), m);
        m.validate_xcr0(m).unwrap();
    }
}

#[test]
fn reduce_drops_orphans() {
    let r = |m: u64| largest_valid_xcr0(XfeatureMask::from_bits(m)).bits();
    // Half of AVX-512, of MPX, of AMX.
    assert_eq!(r(0x67), 0x7);
    assert_eq!(r(0x0f), 0x7);
    assert_eq!(r(0x20007), 0x7);
    // AVX-512 without AVX; AVX without SSE (x87/SSE are always kept).
    assert_eq!(r(0xe3), 0x3);
    assert_eq!(r(0x5), 0x7);
    // Supervisor, unknown and bit 63 bits go.
    assert_eq!(r(0x1807 | (1 << 40) | (1 << 63)), 0x7);
    for m in 0..(1u64 << 20) {
        if m % 97 != 0 {
            continue;
        }
        let red = largest_valid_xcr0(XfeatureMask::from_bits(m));
        red.validate_xcr0(XfeatureMask::ALL_KNOWN.user()).unwrap();
    }
}

#[test]
fn restorable_messages() {
    let host = info(0x7);
    let avx512 = XfeatureMask::from_bits(0xe7);
    let e = restorable_on(avx512, avx512, &host).unwrap_err();
    assert_eq!(
        e.to_string(),
        "state uses avx512 (components 5-7); this host supports 0x7"
    );
    // Enabled but unused AVX-512 still blocks the guest's XCR0.
    let e = restorable_on(avx512, XfeatureMask::from_bits(0x7), &host).unwrap_err();
    assert!(matches!(e, Incompatibility::Xcr0Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("avx512 (components 5-7)"), "{e}");
    restorable_on(
        XfeatureMask::from_bits(0x7),
        XfeatureMask::from_bits(0x3),
        &host,
    )
    .unwrap();
    let e = restorable_on(
        XfeatureMask::from_bits(0x3),
        XfeatureMask::from_bits(0x7),
        &host,
    )
    .unwrap_err();
    assert!(matches!(e, Incompatibility::StateOutsideXcr0 { .. }), "{e}");
    let e = restorable_on(
        XfeatureMask::from_bits(0x67),
        XfeatureMask::from_bits(0x3),
        &host,
    )
    .unwrap_err();
    assert!(matches!(e, Incompatibility::InvalidXcr0 { .. }), "{e}");
    let e = restorable_on(
        XfeatureMask::from_bits(0x7),
        XfeatureMask::from_bits(0x3 | 1 << 20),
        &host,
    )
    .unwrap_err();
    assert!(matches!(e, Incompatibility::UnknownBits { .. }), "{e}");
    let e = restorable_on(
        XfeatureMask::from_bits(0x7),
        XfeatureMask::from_bits(0x3 | 1 << 11),
        &host,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "state uses supervisor cet_u (component 11); this host supports IA32_XSS 0x0"
    );
    let amx = XfeatureMask::from_bits(0x60003);
    let e = restorable_on(amx, amx, &info(0x2e7)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "state uses amx (components 17-18); this host supports 0x2e7"
    );
    restorable_on(amx, amx, &info(0x602e7)).unwrap();
}

#[test]
fn labels() {
    assert_eq!(label(0), "A");
    assert_eq!(label(25), "Z");
    assert_eq!(label(26), "AA");
    assert_eq!(label(27), "AB");
}
