//! Exact layouts and sizes for every recorded CPU, hand-verified against the
//! CPUID dumps and the table in tests/data/README.md.

mod common;

use common::*;
use xstate::{Format, LayoutError, Xfeature, XfeatureMask, XsaveInfo};
use Xfeature::*;

fn m(bits: u64) -> XfeatureMask {
    XfeatureMask::from_bits(bits)
}

/// (component, offset, size) of a layout, known components only.
fn offsets(info: &XsaveInfo, mask: u64, format: Format) -> Vec<(Xfeature, u32, u32)> {
    info.layout(m(mask), format).unwrap().iter().collect()
}

/// x87, SSE and AVX: the same places in every layout of every recorded CPU.
const X87_SSE_AVX: [(Xfeature, u32, u32); 3] = [(X87, 0, 160), (Sse, 160, 256), (Avx, 576, 256)];

/// An expected layout: [`X87_SSE_AVX`] followed by `rest`.
fn after_avx(rest: &[(Xfeature, u32, u32)]) -> Vec<(Xfeature, u32, u32)> {
    X87_SSE_AVX.iter().chain(rest).copied().collect()
}

/// Checks the area size of each `(mask, size)` pair in `format`.
fn assert_sizes(info: &XsaveInfo, format: Format, cases: &[(u64, u32)]) {
    for &(mask, size) in cases {
        let got = match format {
            Format::Standard => info.standard_size(m(mask)),
            Format::Compacted => info.compacted_size(m(mask)),
        };
        assert_eq!(got.unwrap(), size, "{format} size of {mask:#x}");
    }
}

#[test]
fn readme_table() {
    // (file, XCR0, IA32_XSS, standard, compacted XCR0, compacted XCR0|XSS)
    let table = [
        (
            "intel-sapphire-rapids.json",
            0x602e7,
            0xdd00,
            11008,
            10752,
            11776,
        ),
        (
            "intel-ice-lake-client.json",
            0x2e7,
            0x2100,
            2696,
            2440,
            2576,
        ),
        ("amd-zen3-milan.json", 0x207, 0x1800, 2440, 840, 880),
        ("amd-zen3-kvm-guest.json", 0x7, 0x1800, 832, 832, 872),
    ];
    for (file, xcr0, xss, std_size, cmp, cmp_all) in table {
        let info = info(file);
        assert_eq!(info.supported_xcr0(), m(xcr0), "{file}");
        assert_eq!(info.supported_xss(), m(xss), "{file}");
        assert_eq!(info.standard_size(m(xcr0)).unwrap(), std_size, "{file}");
        assert_eq!(
            info.standard_size(m(xcr0)).unwrap(),
            info.raw_subleaf(0).ecx,
            "{file}"
        );
        assert_eq!(info.max_standard_size(), std_size, "{file}");
        assert_eq!(info.compacted_size(m(xcr0)).unwrap(), cmp, "{file}");
        assert_eq!(
            info.compacted_size(m(xcr0 | xss)).unwrap(),
            cmp_all,
            "{file}"
        );
    }
}

#[test]
fn sapphire_rapids_standard() {
    let info = spr();
    assert_eq!(
        offsets(&info, 0x602e7, Format::Standard),
        after_avx(&[
            (Opmask, 1088, 64),
            (ZmmHi256, 1152, 512),
            (Hi16Zmm, 1664, 1024),
            (Pkru, 2688, 8),
            (XtileCfg, 2752, 64),
            (XtileData, 2816, 8192),
        ])
    );
    assert_sizes(
        &info,
        Format::Standard,
        &[
            (0x3, 576),
            (0x7, 832),
            (0xe7, 2688),
            (0x207, 2696),
            (0x2e7, 2696),
            (0x600e7, 11008),
        ],
    );
}

#[test]
fn sapphire_rapids_compacted() {
    let info = spr();
    assert_eq!(
        offsets(&info, 0x602e7, Format::Compacted),
        after_avx(&[
            (Opmask, 832, 64),
            (ZmmHi256, 896, 512),
            (Hi16Zmm, 1408, 1024),
            (Pkru, 2432, 8),
            // 2440 rounded up to 64 (ECX bit 1 set for both AMX components).
            (XtileCfg, 2496, 64),
            (XtileData, 2560, 8192),
        ])
    );
    // XCR0 | IA32_XSS, as XSAVES lays it out.
    let all = info.layout(m(0x602e7 | 0xdd00), Format::Compacted).unwrap();
    assert_eq!(
        all.iter().collect::<Vec<_>>(),
        after_avx(&[
            (Opmask, 832, 64),
            (ZmmHi256, 896, 512),
            (Hi16Zmm, 1408, 1024),
            (Pt, 2432, 128),
            (Pkru, 2560, 8),
            (Pasid, 2568, 8),
            (CetU, 2576, 16),
            (CetS, 2592, 24),
            (Uintr, 2616, 48),
            (Lbr, 2664, 808),
            (XtileCfg, 3520, 64),
            (XtileData, 3584, 8192),
        ])
    );
    assert_eq!(all.total_size(), 11776);
    // Small masks.
    assert_sizes(
        &info,
        Format::Compacted,
        &[(0x3, 576), (0x7, 832), (0x207, 840), (0xe7, 2432)],
    );
    // AMX alone: XTILECFG at 576 (already aligned), XTILEDATA at 640.
    let amx = info.layout(m(0x60003), Format::Compacted).unwrap();
    assert_eq!(amx.offset(XtileCfg), Some(576));
    assert_eq!(amx.offset(XtileData), Some(640));
    assert_eq!(amx.total_size(), 640 + 8192);
    // AVX then AMX: 832 is a multiple of 64.
    let l = info.layout(m(0x60007), Format::Compacted).unwrap();
    assert_eq!(l.offset(XtileCfg), Some(832));
    assert_eq!(l.offset(XtileData), Some(896));
}

#[test]
fn sapphire_rapids_boot_log_cross_check() {
    // A Sapphire Rapids boot log, mask 0x606e7 (PASID included), compacted.
    let l = spr().layout(m(0x606e7), Format::Compacted).unwrap();
    assert_eq!(l.offset(Pkru), Some(2432));
    assert_eq!(l.offset(Pasid), Some(2440));
    assert_eq!(l.offset(XtileCfg), Some(2496));
    assert_eq!(l.offset(XtileData), Some(2560));
    assert_eq!(l.size_of(XtileData), Some(8192));
    assert_eq!(l.total_size(), 10752);
}

#[test]
fn ice_lake() {
    let info = icl();
    assert_eq!(
        offsets(&info, 0x2e7, Format::Standard),
        after_avx(&[
            (Opmask, 1088, 64),
            (ZmmHi256, 1152, 512),
            (Hi16Zmm, 1664, 1024),
            (Pkru, 2688, 8),
        ])
    );
    let all = info.layout(m(0x2e7 | 0x2100), Format::Compacted).unwrap();
    assert_eq!(all.offset(Pt), Some(2432));
    assert_eq!(all.offset(Pkru), Some(2560));
    assert_eq!(all.offset(Hdc), Some(2568));
    assert_eq!(all.size_of(Hdc), Some(8));
    assert_sizes(&info, Format::Compacted, &[(0x7, 832), (0x207, 840)]);
    assert_eq!(info.standard_size(m(0xe7)).unwrap(), 2688);
    assert!(info.has_xsaveopt() && info.has_xsavec() && info.has_xgetbv1() && info.has_xsaves());
    assert!(!info.has_xfd());
}

#[test]
fn milan() {
    let info = common::milan();
    // PKRU right after AVX's 832? No: at its CPUID offset 2432 (AMD leaves the
    // AVX-512 space empty).
    assert_eq!(
        offsets(&info, 0x207, Format::Standard),
        after_avx(&[(Pkru, 2432, 8),])
    );
    assert_eq!(
        offsets(&info, 0x207, Format::Compacted),
        after_avx(&[(Pkru, 832, 8),])
    );
    let all = info.layout(m(0x207 | 0x1800), Format::Compacted).unwrap();
    assert_eq!(all.offset(CetU), Some(840));
    assert_eq!(all.offset(CetS), Some(856));
    assert_eq!(all.total_size(), 880);
    assert_sizes(&info, Format::Standard, &[(0x7, 832), (0x3, 576)]);
}

#[test]
fn zen3_kvm_guest() {
    let info = zen3_guest();
    assert_eq!(offsets(&info, 0x7, Format::Standard), X87_SSE_AVX.to_vec());
    let all = info.layout(m(0x1807), Format::Compacted).unwrap();
    assert_eq!(all.offset(CetU), Some(832));
    assert_eq!(all.offset(CetS), Some(848));
    assert_eq!(all.total_size(), 872);
    assert!(info.has_xsaves() && !info.has_xfd());
}

#[test]
fn component_info() {
    let info = spr();
    let tile = info.component(XtileData).unwrap();
    assert_eq!(tile.size, 8192);
    assert_eq!(tile.standard_offset, 2816);
    assert!(tile.align64 && tile.xfd && !tile.supervisor);
    let cfg = info.component(XtileCfg).unwrap();
    assert!(cfg.align64 && !cfg.xfd);
    let lbr = info.component(Lbr).unwrap();
    assert!(lbr.supervisor && lbr.standard_offset == 0 && lbr.size == 808);
    assert_eq!(info.component(X87).unwrap().standard_offset, 0);
    assert_eq!(info.component(X87).unwrap().size, 160);
    assert_eq!(info.component(Sse).unwrap().standard_offset, 160);
    assert_eq!(info.component(Sse).unwrap().size, 256);
    assert_eq!(info.component(BndRegs), None);
    assert_eq!(info.component(Hwp), None);
    assert!(info.has_xfd());
    assert_eq!(info.xfd_capable(), XtileData.mask());
    assert_eq!(common::milan().component(ZmmHi256), None);
}

#[test]
fn layout_errors() {
    let info = common::milan();
    // AVX-512 is not supported on Milan.
    assert_eq!(
        info.layout(m(0xe7), Format::Standard),
        Err(LayoutError::Unsupported(m(0xe0)))
    );
    // Supervisor state has no standard place.
    assert_eq!(
        info.layout(m(0x807), Format::Standard),
        Err(LayoutError::SupervisorInStandard(m(0x800)))
    );
    assert_eq!(
        info.layout(m((1 << 63) | 3), Format::Compacted),
        Err(LayoutError::Bit63)
    );
    // Layout accessors for absent components.
    let l = info.layout(m(0x3), Format::Compacted).unwrap();
    assert_eq!(l.offset(Avx), None);
    assert_eq!(l.size_of(Avx), None);
    assert_eq!(l.format(), Format::Compacted);
    assert_eq!(l.mask(), m(0x3));
}

#[test]
fn every_dump_every_subset_is_consistent() {
    // For every dump and every subset of XCR0 with x87|SSE: compacted
    // components are ascending, non-overlapping, aligned when flagged, and
    // the total covers them; standard components sit at their CPUID offsets.
    for file in DUMPS {
        let info = info(file);
        let xcr0 = info.supported_xcr0().bits();
        let xss = info.supported_xss().bits();
        let all = xcr0 | xss;
        let bits: Vec<u32> = (2..64).filter(|i| all & (1 << i) != 0).collect();
        for sub in 0..(1u64 << bits.len()) {
            let mut mask = 0x3u64;
            for (k, b) in bits.iter().enumerate() {
                if sub & (1 << k) != 0 {
                    mask |= 1 << b;
                }
            }
            let l = info.layout(m(mask), Format::Compacted).unwrap();
            let mut next: u32 = 576;
            for (i, off, size) in l.iter_indices().filter(|t| t.0 >= 2) {
                let c = info.component_by_index(i).unwrap();
                let expect = if c.align64 {
                    next.div_ceil(64) * 64
                } else {
                    next
                };
                assert_eq!(off, expect, "{file} mask {mask:#x} component {i}");
                next = off + size;
            }
            assert_eq!(l.total_size(), next, "{file} {mask:#x}");
            if mask & xss == 0 {
                let s = info.layout(m(mask), Format::Standard).unwrap();
                for (i, off, _) in s.iter_indices().filter(|t| t.0 >= 2) {
                    assert_eq!(off, info.raw_subleaf(i).ebx);
                }
                assert!(s.total_size() <= info.max_standard_size());
            }
        }
    }
}
