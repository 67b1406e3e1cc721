//! The short and general conversion paths agree at every vector level, and
//! the precomputed XCR0 sizes match a walk of the components.

use super::*;
use crate::info::CpuidRegs;
use crate::init::{init_image, InitMode};

/// The short path writes exactly what the general path writes, and
/// returns the same size, for x87|SSE and x87|SSE|AVX with every
/// XSTATE_BV subset, MXCSR at its init value or live, at every vector
/// level this CPU allows; where it does not apply it writes nothing.
#[test]
fn short_path_matches_the_general_one() {
    let info = XsaveInfo::from_leaf_0xd(|sub| match sub {
        0 => CpuidRegs::new(0x207, 2696, 2696, 0),
        1 => CpuidRegs::new(0x7, 0, 0, 0),
        2 => CpuidRegs::new(256, 576, 0, 0),
        9 => CpuidRegs::new(8, 2688, 0, 0),
        _ => CpuidRegs::default(),
    })
    .unwrap();
    let xcr0 = XfeatureMask::from_bits(0x207);
    let mut base = vec![0u8; 2696];
    init_image(&info, xcr0, InitMode::Minimal, &mut base).unwrap();
    for (k, b) in base[..512].iter_mut().enumerate().skip(32) {
        *b = (k as u8).wrapping_mul(13) | 1;
    }
    for (k, b) in base[576..832].iter_mut().enumerate() {
        *b = (k as u8).wrapping_mul(7) | 1;
    }
    let mut cases = 0;
    for requested in [0x3u64, 0x7] {
        let requested = XfeatureMask::from_bits(requested);
        for bv in 0..=requested.bits() {
            for mxcsr in [MXCSR_INIT_BYTES, [0x80, 0x1f, 0, 1]] {
                let mut img = base.clone();
                img[512..520].copy_from_slice(&bv.to_le_bytes());
                img[MXCSR].copy_from_slice(&mxcsr);
                let mut want = vec![0xa5u8; 1024];
                let general = compact_in::<SSE2>(&info, &img, requested, &mut want);
                for l in SSE2..=top_level() {
                    let mut got = vec![0xa5u8; 1024];
                    match short_at(l, &info, &img, requested, &mut got) {
                        Some(n) => {
                            assert_eq!(Ok(n), general, "bv {bv:#x} level {l}");
                            assert!(got == want, "bv {bv:#x} level {l}");
                            cases += 1;
                        }
                        None => assert!(got.iter().all(|&b| b == 0xa5)),
                    }
                }
            }
        }
    }
    // Every XSTATE_BV takes it but a live MXCSR with SSE clear: 6 of 8
    // for x87|SSE, 12 of 16 for x87|SSE|AVX, at each level.
    assert_eq!(cases, 18 * usize::from(top_level() - SSE2 + 1));
    // The public entry point agrees too (short path included).
    let mut img = base.clone();
    img[512..520].copy_from_slice(&7u64.to_le_bytes());
    let (mut a, mut b) = (vec![0u8; 832], vec![0u8; 832]);
    let x7 = XfeatureMask::from_bits(0x7);
    assert_eq!(compact(&info, &img, x7, &mut a), Ok(832));
    assert_eq!(compact_in::<SSE2>(&info, &img, x7, &mut b), Ok(832));
    assert!(a == b);
    // Errors are the general path's, named: a short destination.
    assert_eq!(
        compact(&info, &img, x7, &mut [0u8; 600]),
        Err(ConvertError::DestinationTooSmall {
            need: 832,
            have: 600
        })
    );
}

const MXCSR_INIT_BYTES: [u8; 4] = crate::area::MXCSR_INIT.to_le_bytes();

/// The highest vector level this CPU allows.
fn top_level() -> u8 {
    #[cfg(target_arch = "x86_64")]
    return crate::area::level();
    #[cfg(not(target_arch = "x86_64"))]
    SSE2
}

/// [`compact_short`] at level `l` (at most [`top_level`]).
fn short_at(
    l: u8,
    info: &XsaveInfo,
    src: &[u8],
    requested: XfeatureMask,
    dst: &mut [u8],
) -> Option<usize> {
    assert!(l <= top_level());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `level` reported at least `l` on this CPU.
    unsafe {
        if l == crate::area::AVX512 {
            return Some(wide::compact_short_avx512(info, src, requested, dst)).filter(|&n| n != 0);
        }
        if l == crate::area::AVX2 {
            return Some(wide::compact_short_avx2(info, src, requested, dst)).filter(|&n| n != 0);
        }
    }
    compact_short::<SSE2>(info, src, requested, dst)
}

/// Every vector level this CPU allows converts bit for bit like the
/// SSE2 one, both ways (the proptests of `tests/convert.rs` run the
/// widest level only).
#[test]
fn every_level_converts_alike() {
    // x87, SSE, AVX, the AVX-512 trio and PKRU at Intel's offsets.
    let info = XsaveInfo::from_leaf_0xd(|sub| match sub {
        0 => CpuidRegs::new(0x2e7, 2696, 2696, 0),
        1 => CpuidRegs::new(0x7, 0, 0, 0),
        2 => CpuidRegs::new(256, 576, 0, 0),
        5 => CpuidRegs::new(64, 1088, 0, 0),
        6 => CpuidRegs::new(512, 1152, 0, 0),
        7 => CpuidRegs::new(1024, 1664, 0, 0),
        9 => CpuidRegs::new(8, 2688, 0, 0),
        _ => CpuidRegs::default(),
    })
    .unwrap();
    let xcr0 = XfeatureMask::from_bits(0x2e7);
    let mut std_img = vec![0u8; 2696];
    init_image(&info, xcr0, InitMode::Minimal, &mut std_img).unwrap();
    for (k, b) in std_img[160..416].iter_mut().enumerate() {
        *b = k as u8 | 1;
    }
    for (k, b) in std_img[576..2696].iter_mut().enumerate() {
        *b = (k as u8).wrapping_mul(7) | 1;
    }
    // AVX, opmask, ZMM_Hi256 and PKRU live; Hi16_ZMM in its init state;
    // the gap between AVX and the opmasks zero (a canonical image).
    std_img[832..1088].fill(0);
    std_img[1664..2688].fill(0);
    let bv = 0x267u64;
    std_img[512..520].copy_from_slice(&bv.to_le_bytes());
    let mut want = vec![0u8; 2696];
    let n = compact_in::<SSE2>(&info, &std_img, xcr0, &mut want).unwrap();
    let mut back = vec![0u8; 2696];
    expand_in::<SSE2>(&info, &want[..n], &mut back, xcr0).unwrap();
    assert!(back == std_img, "SSE2 round trip");
    #[cfg(target_arch = "x86_64")]
    for l in [crate::area::AVX2, crate::area::AVX512] {
        if crate::area::level() < l {
            continue;
        }
        let mut got = vec![0u8; 2696];
        let mut back = vec![0u8; 2696];
        // SAFETY: `level` reported at least `l` on this CPU.
        unsafe {
            if l == crate::area::AVX512 {
                assert_eq!(wide::compact_avx512(&info, &std_img, xcr0, &mut got), Ok(n));
                wide::expand_avx512(&info, &got[..n], &mut back, xcr0).unwrap();
            } else {
                assert_eq!(wide::compact_avx2(&info, &std_img, xcr0, &mut got), Ok(n));
                wide::expand_avx2(&info, &got[..n], &mut back, xcr0).unwrap();
            }
        }
        assert!(got == want, "level {l} compact");
        assert!(back == std_img, "level {l} expand");
    }
}

/// The sizes `XsaveInfo` precomputes for all of the supported XCR0 are
/// what walking the components gives: x87|SSE|AVX (Zen 3), and a
/// Sapphire Rapids-like layout with AVX-512, PKRU and AMX (TILECFG and
/// TILEDATA 64-byte aligned in the compacted format, after the 8-byte
/// PKRU).
#[test]
fn precomputed_xcr0_sizes_match_the_walk() {
    const ALIGN: u32 = 2;
    let zen3 = |sub: u32| match sub {
        0 => CpuidRegs::new(0x7, 832, 832, 0),
        1 => CpuidRegs::new(0xf, 0, 0, 0),
        2 => CpuidRegs::new(256, 576, 0, 0),
        _ => CpuidRegs::default(),
    };
    let spr = |sub: u32| match sub {
        0 => CpuidRegs::new(0x602e7, 11008, 11008, 0),
        1 => CpuidRegs::new(0x1f, 0, 0, 0),
        2 => CpuidRegs::new(256, 576, 0, 0),
        5 => CpuidRegs::new(64, 1088, 0, 0),
        6 => CpuidRegs::new(512, 1152, 0, 0),
        7 => CpuidRegs::new(1024, 1664, 0, 0),
        9 => CpuidRegs::new(8, 2688, 0, 0),
        17 => CpuidRegs::new(64, 2752, ALIGN, 0),
        18 => CpuidRegs::new(8192, 2816, ALIGN, 0),
        _ => CpuidRegs::default(),
    };
    for (name, info, standard, compacted) in [
        ("zen3", XsaveInfo::from_leaf_0xd(zen3).unwrap(), 832, 832),
        // 576 + 256 + 64 + 512 + 1024 + 8 = 2440, aligned to 2496,
        // + 64 = 2560 (aligned), + 8192.
        ("spr", XsaveInfo::from_leaf_0xd(spr).unwrap(), 11008, 10752),
    ] {
        let xcr0 = info.supported_xcr0();
        assert_eq!(info.xcr0_standard_end(), standard, "{name}");
        assert_eq!(standard_end(&info, xcr0), standard, "{name}");
        assert_eq!(standard_end_walk(&info, xcr0), standard, "{name}");
        assert_eq!(info.xcr0_compacted_end(), compacted, "{name}");
        assert_eq!(compacted_end(&info, xcr0), Ok(compacted), "{name}");
        assert_eq!(
            walk_compacted(&info, xcr0, |_, _, _| {}),
            compacted,
            "{name}"
        );
    }
}
