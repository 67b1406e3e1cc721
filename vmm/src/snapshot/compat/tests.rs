//! Relayout between hosts moves every component to the target's offsets; the
//! patterned image it uses is shared with the restore tests.

use xstate::Format;

use super::*;

/// A standard image with every register of every component of `xcr0`
/// holding a distinct pattern (x87 control words valid, MXCSR default).
pub(crate) fn pattern_image(info: &XsaveInfo, xcr0: XfeatureMask) -> XsaveBuf {
    let mut img = XsaveBuf::standard_for(info, xcr0).unwrap();
    let layout = info.layout(xcr0, Format::Standard).unwrap();
    {
        let mut v = img.view_mut();
        v.set_fcw(0x027f);
        v.set_fsw(0x0100);
        v.set_ftw(0xff);
        v.set_mxcsr(0x1f80 | 0x8000);
        for i in 0..8 {
            v.set_st(i, [0x40 + i as u8; 16].map(|b| b ^ 0x5a));
        }
        for i in 0..16 {
            let mut x = [0u8; 16];
            for (k, b) in x.iter_mut().enumerate() {
                *b = 0x80 ^ ((i as u8) << 4) ^ k as u8;
            }
            v.set_xmm(i, x);
        }
        for c in xcr0.iter_indices().filter(|&i| i >= 2) {
            if let Some(bytes) = v.component_by_index_mut(c, &layout) {
                for (k, b) in bytes.iter_mut().enumerate() {
                    *b = (c as u8).wrapping_mul(37) ^ (k as u8).wrapping_mul(3) | 1;
                }
            }
        }
        v.set_xstate_bv(xcr0.bits());
    }
    img
}

#[test]
fn relayout_moves_components_to_the_target_offsets() {
    let path = crate::features::profile::recorded_dump("intel-sapphire-rapids.json");
    let text = std::fs::read_to_string(path).unwrap();
    let spr = xstate::CpuidProfile::from_json(&text)
        .unwrap()
        .xsave_info()
        .unwrap();
    let xcr0 = XfeatureMask::from_bits(0x2e7); // AVX-512 and PKRU
    let img = pattern_image(&spr, xcr0);
    let (same, relaid) = relayout(&spr, &spr, &img, xcr0, xcr0).unwrap();
    assert!(!relaid);
    assert_eq!(same, img);

    // A target without AMX whose PKRU sits 64 bytes further up (and
    // whose sizes say so).
    let mut raw: [xstate::CpuidRegs; 64] = core::array::from_fn(|i| spr.raw_subleaf(i as u32));
    raw[17] = xstate::CpuidRegs::default();
    raw[18] = xstate::CpuidRegs::default();
    raw[0].eax &= !0x60000;
    raw[9].ebx += 64;
    let end = raw[9].ebx + raw[9].eax;
    raw[0].ebx = end;
    raw[0].ecx = end;
    let target =
        XsaveInfo::from_raw(raw).unwrap_or_else(|e| panic!("synthetic target leaf 0xD: {e}"));
    let (moved, relaid) = relayout(&spr, &target, &img, xcr0, xcr0).unwrap();
    assert!(relaid);
    let (from, to) = (
        spr.layout(xcr0, Format::Standard).unwrap(),
        target.layout(xcr0, Format::Standard).unwrap(),
    );
    assert_eq!(
        &moved.as_bytes()[..XSAVE_MIN_SIZE],
        &img.as_bytes()[..XSAVE_MIN_SIZE]
    );
    for i in xcr0.iter_indices().filter(|&i| i >= 2) {
        let (r, w) = (
            from.range_by_index(i).unwrap(),
            to.range_by_index(i).unwrap(),
        );
        assert_eq!(&moved.as_bytes()[w], &img.as_bytes()[r], "component {i}");
    }
    assert_ne!(from.offset_by_index(9), to.offset_by_index(9));
}
