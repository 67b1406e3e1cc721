//! How many bytes one save wrote, read back from the saved image: the
//! `aux` figure of a `ctxsw` row (the rule per strategy is in the
//! [`super`] module documentation).

use xstate::buffer::{offsets, XSAVE_MIN_SIZE};
use xstate::{Format, XfeatureMask, XsaveInfo};

use xstate::SaveStrategy as Strategy;

/// Bytes the last save wrote into `area` (see the module documentation for
/// the rule per strategy); `rfbm` is the requested-feature bitmap the
/// strategy was given.
pub fn bytes_per_save(
    info: &XsaveInfo,
    strategy: Strategy,
    rfbm: XfeatureMask,
    area: &[u8],
) -> u32 {
    let min = XSAVE_MIN_SIZE as u32;
    if area.len() < XSAVE_MIN_SIZE {
        return 0;
    }
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&area[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let xstate_bv = XfeatureMask::from_bits(word(offsets::XSTATE_BV));
    let xcomp_bv = word(offsets::XCOMP_BV);
    let (mask, layout_mask, format) = match strategy {
        Strategy::Xsave => (rfbm, rfbm, Format::Standard),
        Strategy::Xsaveopt => (xstate_bv & rfbm, rfbm, Format::Standard),
        Strategy::Xsavec | Strategy::XsavecXinuse => {
            let xcomp = XfeatureMask::from_bits(xcomp_bv & !xstate::buffer::XCOMP_BV_COMPACTED);
            (xstate_bv & xcomp, xcomp, Format::Compacted)
        }
    };
    let Ok(layout) = info.layout(layout_mask, format) else {
        return min;
    };
    mask.iter_indices()
        .filter_map(|i| layout.range_by_index(i))
        .map(|r| r.end as u32)
        .fold(min, u32::max)
}
