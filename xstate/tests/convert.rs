//! Standard <-> compacted conversion, init detection, initial images and
//! buffer validation, on the layouts of every recorded CPU.

mod common;

use common::Rng;
use proptest::prelude::*;
use xstate::buffer::{XCOMP_BV_COMPACTED, XSAVE_MIN_SIZE};
use xstate::{
    compact, expand, init_image, minimal_xstate_bv, validate, BufferError, ConvertError, Format,
    InitMode, Xfeature, XfeatureMask, XsaveBuf, XsaveInfo, XsaveMut, XsaveRef,
};

fn m(bits: u64) -> XfeatureMask {
    XfeatureMask::from_bits(bits)
}

/// A random valid XCR0 the CPU supports.
fn random_xcr0(info: &XsaveInfo, rng: &mut Rng) -> XfeatureMask {
    let sup = info.supported_xcr0();
    let x = rng.subset(sup).with_dependencies() & sup;
    x.validate_xcr0(sup).unwrap();
    x
}

/// Fills component `i` of `area` (at `range`) with random bytes, keeping the
/// x87 tag/control fields plausible is unnecessary: conversions are byte-exact.
fn fill_component(area: &mut [u8], i: u32, range: std::ops::Range<usize>, rng: &mut Rng) {
    match i {
        0 => {
            rng.fill(&mut area[0..24]);
            rng.fill(&mut area[32..160]);
        }
        1 => {
            rng.fill(&mut area[160..416]);
            rng.fill(&mut area[24..28]);
        }
        _ => rng.fill(&mut area[range]),
    }
}

/// A canonical standard image for `xcr0` with random state in `bv`.
fn random_standard(
    info: &XsaveInfo,
    xcr0: XfeatureMask,
    bv: XfeatureMask,
    rng: &mut Rng,
) -> XsaveBuf {
    let mut b = XsaveBuf::init(info, xcr0, InitMode::Minimal).unwrap();
    let layout = info.layout(xcr0, Format::Standard).unwrap();
    for i in bv.iter_indices() {
        fill_component(b.as_bytes_mut(), i, layout.range_by_index(i).unwrap(), rng);
    }
    rng.fill(&mut b.as_bytes_mut()[28..32]); // MXCSR_MASK
    rng.fill(&mut b.as_bytes_mut()[416..512]); // software-available
    b.set_xstate_bv(bv);
    b
}

/// A canonical compacted image with XCOMP_BV = `comp` and random state in `bv`.
fn random_compacted(
    info: &XsaveInfo,
    comp: XfeatureMask,
    bv: XfeatureMask,
    rng: &mut Rng,
) -> XsaveBuf {
    let layout = info.layout(comp, Format::Compacted).unwrap();
    let mut b = XsaveBuf::new(layout.total_size() as usize);
    b.set_fcw(0x37f);
    b.set_mxcsr(0x1f80);
    for i in bv.iter_indices() {
        fill_component(b.as_bytes_mut(), i, layout.range_by_index(i).unwrap(), rng);
    }
    rng.fill(&mut b.as_bytes_mut()[28..32]);
    rng.fill(&mut b.as_bytes_mut()[416..512]);
    b.set_xstate_bv(bv);
    b.set_xcomp_bv(comp.bits() | XCOMP_BV_COMPACTED);
    b
}

fn infos() -> Vec<XsaveInfo> {
    common::DUMPS.iter().map(|d| common::info(d)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn expand_compact_is_identity(dump in 0usize..4, seed in any::<u64>()) {
        let info = infos()[dump];
        let mut rng = Rng(seed);
        let xcr0 = random_xcr0(&info, &mut rng);
        let bv = rng.subset(xcr0);
        let x = random_standard(&info, xcr0, bv, &mut rng);
        // Requested = XCR0 (XSAVEC's layout) or only the state present.
        for requested in [xcr0, bv, bv | rng.subset(xcr0)] {
            let mut c = XsaveBuf::new(info.compacted_size(requested).unwrap() as usize);
            let n = compact(&info, x.as_bytes(), requested, c.as_bytes_mut()).unwrap();
            prop_assert_eq!(n, c.len());
            prop_assert_eq!(c.xcomp_bv(), requested.bits() | XCOMP_BV_COMPACTED);
            prop_assert_eq!(c.xstate_bv(), bv.bits());
            validate(c.as_bytes(), &info, xcr0, XfeatureMask::EMPTY).map(|_| ()).or_else(|e| match e {
                BufferError::MxcsrReserved { .. } => Ok(()), // random MXCSR
                e => Err(e),
            }).unwrap();
            let mut back = XsaveBuf::new(x.len());
            expand(&info, c.as_bytes(), back.as_bytes_mut(), xcr0).unwrap();
            prop_assert!(back == x, "round trip differs for xcr0 {:#x} bv {:#x} requested {:#x}", xcr0, bv, requested);
        }
    }

    #[test]
    fn compact_expand_is_identity(dump in 0usize..4, seed in any::<u64>()) {
        let info = infos()[dump];
        let mut rng = Rng(seed);
        let xcr0 = random_xcr0(&info, &mut rng);
        let comp = rng.subset(xcr0);
        let bv = rng.subset(comp);
        let y = random_compacted(&info, comp, bv, &mut rng);
        let mut s = XsaveBuf::standard_for(&info, xcr0).unwrap();
        expand(&info, y.as_bytes(), s.as_bytes_mut(), xcr0).unwrap();
        prop_assert_eq!(s.xstate_bv(), bv.bits());
        prop_assert_eq!(s.xcomp_bv(), 0);
        let mut back = XsaveBuf::new(y.len());
        compact(&info, s.as_bytes(), comp, back.as_bytes_mut()).unwrap();
        prop_assert!(back == y, "round trip differs for xcr0 {:#x} comp {:#x} bv {:#x}", xcr0, comp, bv);
    }

    #[test]
    fn minimal_never_drops_live_state(dump in 0usize..4, seed in any::<u64>()) {
        let info = infos()[dump];
        let mut rng = Rng(seed);
        let xcr0 = random_xcr0(&info, &mut rng);
        let bv = rng.subset(xcr0);
        let mut x = random_standard(&info, xcr0, bv, &mut rng);
        let init = XsaveBuf::init(&info, xcr0, InitMode::Minimal).unwrap();
        let layout = info.layout(xcr0, Format::Standard).unwrap();
        // Put some present components back to their init bytes, and for some
        // components flip just one byte away from init.
        for i in bv.iter_indices() {
            let r = layout.range_by_index(i).unwrap();
            match rng.next() % 3 {
                0 => {
                    let src = init.as_bytes()[r.clone()].to_vec();
                    x.as_bytes_mut()[r.clone()].copy_from_slice(&src);
                    if i == 0 { let v = init.as_bytes()[0..24].to_vec(); x.as_bytes_mut()[0..24].copy_from_slice(&v); }
                    if i == 1 { x.set_mxcsr(0x1f80); }
                }
                1 => {
                    let src = init.as_bytes()[r.clone()].to_vec();
                    x.as_bytes_mut()[r.clone()].copy_from_slice(&src);
                    if i == 0 { let v = init.as_bytes()[0..24].to_vec(); x.as_bytes_mut()[0..24].copy_from_slice(&v); }
                    if i == 1 { x.set_mxcsr(0x1f80); }
                    let k = r.start + (rng.next() as usize % (r.end - r.start));
                    let k = if (24..32).contains(&k) { 40 } else { k };
                    x.as_bytes_mut()[k] ^= 1 << (rng.next() % 8);
                }
                _ => {}
            }
        }
        let min = minimal_xstate_bv(&info, x.as_bytes()).unwrap();
        prop_assert!(bv.contains_all(min));
        for i in bv.iter_indices() {
            let r = layout.range_by_index(i).unwrap();
            let mut differs = x.as_bytes()[r.clone()] != init.as_bytes()[r.clone()];
            if i == 0 { differs |= x.as_bytes()[0..24] != init.as_bytes()[0..24]; }
            if i == 1 { differs |= x.mxcsr() != 0x1f80; }
            prop_assert_eq!(min.contains_index(i), differs, "component {}", i);
        }
        // The minimal image converts to the same state.
        let mut y = x.clone();
        y.set_xstate_bv(min);
        let cx = xstate::compacted_in_use(&info, &x, xcr0).unwrap();
        let cy = xstate::compacted_in_use(&info, &y, xcr0).unwrap();
        prop_assert!(cx == cy);
        prop_assert_eq!(cx.xcomp_bv(), min.bits() | XCOMP_BV_COMPACTED);
        let ex = xstate::expand_to_standard(&info, &cx, xcr0).unwrap();
        prop_assert_eq!(minimal_xstate_bv(&info, ex.as_bytes()).unwrap(), min);
    }
}

#[test]
fn init_images() {
    let info = common::spr();
    let xcr0 = m(0x602e7);
    let b = XsaveBuf::init(&info, xcr0, InitMode::Minimal).unwrap();
    assert_eq!(b.len(), 11008);
    assert_eq!(b.xstate_bv(), 0x3);
    assert_eq!(b.xcomp_bv(), 0);
    assert_eq!(b.fcw(), 0x37f);
    assert_eq!(b.mxcsr(), 0x1f80);
    let mut expect = vec![0u8; 11008];
    expect[0..2].copy_from_slice(&0x37fu16.to_le_bytes());
    expect[24..28].copy_from_slice(&0x1f80u32.to_le_bytes());
    expect[512] = 3;
    assert_eq!(b.as_bytes(), &expect[..]);
    let w = XsaveBuf::init(&info, xcr0, InitMode::AllOfXcr0).unwrap();
    assert_eq!(w.xstate_bv(), 0x602e7);
    assert_eq!(w.as_bytes()[..512], expect[..512]);
    // Everything in the all-of-XCR0 image holds its init value anyway.
    assert_eq!(minimal_xstate_bv(&info, w.as_bytes()).unwrap(), m(0));
    // Invalid XCR0 values are refused.
    assert_eq!(
        XsaveBuf::init(&info, m(0x27), InitMode::Minimal).unwrap_err(),
        ConvertError::Xcr0(xstate::Xcr0Error::Avx512Partial(m(0x20)))
    );
    let mut small = [0u8; 600];
    assert!(matches!(
        init_image(&info, m(0x7), InitMode::Minimal, &mut small),
        Err(ConvertError::DestinationTooSmall {
            need: 832,
            have: 600
        })
    ));
}

#[test]
fn mxcsr_rules() {
    let info = common::zen3_guest();
    let xcr0 = m(0x7);
    // Standard image, SSE bit clear but MXCSR not default: standard XRSTOR
    // would load MXCSR, so the compacted form must carry SSE.
    let mut x = XsaveBuf::init(&info, xcr0, InitMode::Minimal).unwrap();
    x.set_xstate_bv(0x1u64);
    x.set_xmm(3, [0xaa; 16]); // ignored: SSE not present
    x.set_mxcsr(0x1f80 | 0x6000); // round toward zero
    let mut c = XsaveBuf::new(832);
    compact(&info, x.as_bytes(), xcr0, c.as_bytes_mut()).unwrap();
    assert_eq!(c.xstate_bv(), 0x3);
    assert_eq!(c.mxcsr(), 0x7f80);
    assert_eq!(c.xmm(3), [0; 16]);
    // Requesting less than the live state is an error, not a silent drop.
    let mut c2 = XsaveBuf::new(576);
    assert_eq!(
        compact(&info, x.as_bytes(), m(0x1), c2.as_bytes_mut()),
        Err(ConvertError::StateNotRequested(m(0x2)))
    );
    // And a default MXCSR makes SSE droppable.
    x.set_mxcsr(0x1f80);
    assert_eq!(
        compact(&info, x.as_bytes(), m(0x1), c2.as_bytes_mut()),
        Ok(576)
    );
    // Live AVX state not requested.
    let mut y = XsaveBuf::init(&info, xcr0, InitMode::Minimal).unwrap();
    let l = info.layout(xcr0, Format::Standard).unwrap();
    y.set_ymm_hi(5, &l, [1; 16]);
    y.set_xstate_bv(0x7u64);
    assert_eq!(
        compact(&info, y.as_bytes(), m(0x3), c.as_bytes_mut()),
        Err(ConvertError::StateNotRequested(m(0x4)))
    );
    assert_eq!(y.ymm_hi(5, &l), Some([1; 16]));
}

#[test]
fn accessors_at_architectural_offsets() {
    let info = common::spr();
    let mut b = XsaveBuf::new(11008);
    b.set_fcw(0x1234);
    b.set_fsw(0x5678);
    b.set_ftw(0x9a);
    b.set_fop(0x7bc);
    b.set_mxcsr(0xdeadbeef);
    b.set_mxcsr_mask(0xffff);
    b.set_st(7, [7; 16]);
    b.set_xmm(15, [15; 16]);
    b.set_xstate_bv(0x602e7u64);
    b.set_xcomp_bv(0x8000_0000_0000_0007);
    let l = info.layout(m(0x602e7), Format::Standard).unwrap();
    assert!(b.set_ymm_hi(2, &l, [2; 16]));
    let s = b.as_bytes();
    assert_eq!(&s[0..2], &[0x34, 0x12]);
    assert_eq!(&s[2..4], &[0x78, 0x56]);
    assert_eq!(s[4], 0x9a);
    assert_eq!(&s[6..8], &[0xbc, 0x07]);
    assert_eq!(&s[24..28], &0xdeadbeefu32.to_le_bytes());
    assert_eq!(&s[28..32], &0xffffu32.to_le_bytes());
    assert_eq!(&s[32 + 7 * 16..32 + 8 * 16], &[7; 16]);
    assert_eq!(&s[160 + 15 * 16..160 + 16 * 16], &[15; 16]);
    assert_eq!(&s[576 + 32..576 + 48], &[2; 16]);
    assert_eq!(&s[512..520], &0x602e7u64.to_le_bytes());
    assert_eq!(&s[520..528], &0x8000_0000_0000_0007u64.to_le_bytes());
    assert!(b.is_compacted());
    assert_eq!(b.xcomp_bv_mask(), m(7));
    assert_eq!(b.component(Xfeature::XtileData, &l).unwrap().len(), 8192);
    assert_eq!(b.component(Xfeature::Pt, &l), None);
    assert_eq!(b.st(7), [7; 16]);
    assert_eq!(b.xmm(15), [15; 16]);
    assert_eq!(
        (b.fcw(), b.fsw(), b.ftw(), b.fop()),
        (0x1234, 0x5678, 0x9a, 0x7bc)
    );
}

#[test]
fn views_check_alignment_and_size() {
    let mut b = XsaveBuf::new(1024);
    assert_eq!(b.as_bytes().as_ptr() as usize % 64, 0);
    assert!(XsaveRef::new(b.as_bytes()).is_ok());
    assert!(matches!(
        XsaveRef::new(&b.as_bytes()[8..]),
        Err(BufferError::Misaligned { .. })
    ));
    assert!(matches!(
        XsaveRef::new(&b.as_bytes()[..500]),
        Err(BufferError::TooSmall {
            need: 576,
            have: 500
        })
    ));
    let mut v = XsaveMut::new(b.as_bytes_mut()).unwrap();
    v.set_mxcsr(0x1f80);
    v.set_xstate_bv(Xfeature::Sse);
    assert_eq!(v.as_ref().mxcsr(), 0x1f80);
    assert_eq!(b.xstate_bv(), 2);
    let c = b.clone();
    assert_eq!(c.as_bytes().as_ptr() as usize % 64, 0);
    assert!(c == b);
    assert_eq!(
        XsaveBuf::from_bytes(&[0; 10]),
        Err(BufferError::TooSmall {
            need: 576,
            have: 10
        })
    );
    assert_eq!(XsaveBuf::new(3).len(), XSAVE_MIN_SIZE);
}

#[test]
fn validation_errors() {
    let info = common::spr();
    let xcr0 = m(0x2e7);
    let good = XsaveBuf::init(&info, xcr0, InitMode::Minimal).unwrap();
    assert_eq!(
        validate(good.as_bytes(), &info, xcr0, m(0)),
        Ok(Format::Standard)
    );

    let mut b = good.clone();
    b.set_xstate_bv(0x60003u64);
    assert_eq!(
        validate(b.as_bytes(), &info, xcr0, m(0)),
        Err(BufferError::XstateBvOutsideXcr0(m(0x60000)))
    );
    let mut b = good.clone();
    b.set_xcomp_bv(0x7);
    assert_eq!(
        validate(b.as_bytes(), &info, xcr0, m(0)),
        Err(BufferError::XcompBvInStandard(0x7))
    );
    let mut b = good.clone();
    b.as_bytes_mut()[600 - 1] = 0; // outside the header: fine
    b.as_bytes_mut()[540] = 1;
    assert_eq!(
        validate(b.as_bytes(), &info, xcr0, m(0)),
        Err(BufferError::ReservedHeaderBytes { offset: 540 })
    );
    let mut b = good.clone();
    b.set_mxcsr(0x1f80 | 1 << 16);
    assert_eq!(
        validate(b.as_bytes(), &info, xcr0, m(0)),
        Err(BufferError::MxcsrReserved {
            mxcsr: 0x11f80,
            mask: 0xffbf
        })
    );
    b.set_mxcsr(0x1f80 | 1 << 6); // DAZ: reserved under the default mask
    assert!(matches!(
        validate(b.as_bytes(), &info, xcr0, m(0)),
        Err(BufferError::MxcsrReserved { .. })
    ));
    b.set_mxcsr_mask(0xffff);
    assert_eq!(
        validate(b.as_bytes(), &info, xcr0, m(0)),
        Ok(Format::Standard)
    );
    // Only components marked present must be covered.
    assert_eq!(
        validate(&good.as_bytes()[..600], &info, xcr0, m(0)),
        Ok(Format::Standard)
    );
    let mut b = good.clone();
    b.set_xstate_bv(0x203u64);
    assert!(matches!(
        validate(&b.as_bytes()[..2000], &info, xcr0, m(0)),
        Err(BufferError::TooSmall {
            need: 2696,
            have: 2000
        })
    ));
    // Compacted 0x207 on Sapphire Rapids: PKRU at 832..840.
    let mut c = XsaveBuf::new(840);
    c.set_xcomp_bv(XCOMP_BV_COMPACTED | 0x207);
    c.set_xstate_bv(0x200u64);
    assert!(matches!(
        validate(&c.as_bytes()[..800], &info, xcr0, m(0)),
        Err(BufferError::TooSmall {
            need: 840,
            have: 800
        })
    ));

    // Compacted.
    let mut c = XsaveBuf::new(info.compacted_size(m(0x1900 | 0x7)).unwrap() as usize);
    c.set_fcw(0x37f);
    c.set_mxcsr(0x1f80);
    c.set_xcomp_bv(XCOMP_BV_COMPACTED | 0x1907);
    c.set_xstate_bv(0x807u64);
    assert_eq!(
        validate(c.as_bytes(), &info, m(0x7), m(0x1900)),
        Ok(Format::Compacted)
    );
    assert_eq!(
        validate(c.as_bytes(), &info, m(0x7), m(0x800)),
        Err(BufferError::XcompBvOutsideEnabled(m(0x1100)))
    );
    c.set_xstate_bv(0x20807u64);
    assert_eq!(
        validate(c.as_bytes(), &info, m(0x7), m(0x1900)),
        Err(BufferError::XstateBvOutsideXcompBv(m(0x20000)))
    );
    // A CPU without XSAVEC cannot take a compacted image.
    let mut raw = common::raw("amd-zen3-kvm-guest.json");
    raw[1].eax = 0x1; // XSAVEOPT only
    let old = XsaveInfo::from_leaf_0xd(|i| raw[i as usize]).unwrap();
    c.set_xstate_bv(0x7u64);
    c.set_xcomp_bv(XCOMP_BV_COMPACTED | 0x7);
    assert_eq!(
        validate(c.as_bytes(), &old, m(0x7), m(0)),
        Err(BufferError::CompactedUnsupported)
    );
}

#[test]
fn conversion_errors() {
    let info = common::milan();
    let std_img = XsaveBuf::init(&info, m(0x207), InitMode::Minimal).unwrap();
    let mut out = XsaveBuf::new(4096);
    // Compacting a compacted image / expanding a standard one.
    assert!(matches!(
        expand(&info, std_img.as_bytes(), out.as_bytes_mut(), m(0x207)),
        Err(ConvertError::NotCompacted { xcomp_bv: 0 })
    ));
    let mut c = XsaveBuf::new(840);
    compact(&info, std_img.as_bytes(), m(0x207), c.as_bytes_mut()).unwrap();
    assert!(matches!(
        compact(&info, c.as_bytes(), m(0x207), out.as_bytes_mut()),
        Err(ConvertError::NotStandard { .. })
    ));
    // Too small on either side.
    assert!(matches!(
        compact(&info, std_img.as_bytes(), m(0x207), &mut [0u8; 700]),
        Err(ConvertError::DestinationTooSmall {
            need: 840,
            have: 700
        })
    ));
    assert!(matches!(
        expand(&info, c.as_bytes(), &mut [0u8; 1000], m(0x207)),
        Err(ConvertError::DestinationTooSmall {
            need: 2440,
            have: 1000
        })
    ));
    assert!(matches!(
        compact(&info, &[0u8; 100], m(0x7), out.as_bytes_mut()),
        Err(ConvertError::SourceTooSmall { .. })
    ));
    // Unsupported or unrepresentable state.
    let mut bad = std_img.clone();
    bad.set_xstate_bv(0xe7u64);
    assert_eq!(
        compact(&info, bad.as_bytes(), m(0x207), out.as_bytes_mut()),
        Err(ConvertError::Unsupported(m(0xe0)))
    );
    let mut sup = XsaveBuf::new(880);
    sup.set_fcw(0x37f);
    sup.set_mxcsr(0x1f80);
    sup.set_xcomp_bv(XCOMP_BV_COMPACTED | 0x1a07);
    sup.set_xstate_bv(0x803u64);
    assert_eq!(
        expand(&info, sup.as_bytes(), out.as_bytes_mut(), m(0x207)),
        Err(ConvertError::StateNotRequested(m(0x800)))
    );
    sup.set_xstate_bv(0x4003u64);
    assert_eq!(
        expand(&info, sup.as_bytes(), out.as_bytes_mut(), m(0x207)),
        Err(ConvertError::XstateBvOutsideXcompBv(m(0x4000)))
    );
    // Messages name the fault.
    let e = ConvertError::StateNotRequested(m(0x4));
    assert!(e.to_string().contains("avx"), "{e}");
}
