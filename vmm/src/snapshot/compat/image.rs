//! The xsave image of a vCPU against the layouts: a compacted image's
//! header and size checked against its source CPU, and a standard image
//! moved component by component to this host's offsets.

use xstate::buffer::{XCOMP_BV_COMPACTED, XSAVE_MIN_SIZE};
use xstate::{Format, XfeatureMask, XsaveBuf, XsaveInfo};

/// Structural checks of a stored compacted image: the format bit, XCOMP_BV
/// within XCR0, XSTATE_BV within XCOMP_BV, zero reserved header bytes, the
/// length of its layout; then the standard image it expands to is
/// validated as KVM would see it (MXCSR reserved bits included).
pub(super) fn check_compacted(
    image: &XsaveBuf,
    source: &XsaveInfo,
    xcr0: XfeatureMask,
) -> Result<(), String> {
    let view = image.view();
    let xcomp_bv = view.xcomp_bv();
    if xcomp_bv & XCOMP_BV_COMPACTED == 0 {
        return Err("a standard-format image; snapshots store the compacted format".into());
    }
    let comp = XfeatureMask::from_bits(xcomp_bv & !XCOMP_BV_COMPACTED);
    let bv = view.xstate_bv_mask();
    if !(comp - xcr0).is_empty() {
        return Err(format!(
            "XCOMP_BV {comp:#x} has components outside XCR0 {xcr0:#x}"
        ));
    }
    if !(bv - comp).is_empty() {
        return Err(format!(
            "XSTATE_BV {bv:#x} has components outside XCOMP_BV {comp:#x}"
        ));
    }
    if !view.header_reserved_is_zero() {
        return Err("reserved xsave header bytes are not zero".into());
    }
    let need = source
        .compacted_size(comp)
        .map_err(|e| format!("compacted layout of {comp:#x}: {e}"))?;
    if image.len() as u64 != need as u64 {
        return Err(format!(
            "{} bytes, the compacted layout of {comp:#x} is {need}",
            image.len()
        ));
    }
    let standard = xstate::expand_to_standard(source, image, xcr0).map_err(|e| e.to_string())?;
    xstate::validate(standard.as_bytes(), source, xcr0, XfeatureMask::EMPTY)
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// A standard-format image of `source`'s layout, moved to `target`'s
/// standard offsets. Legacy region and header are common to both.
pub(super) fn relayout(
    source: &XsaveInfo,
    target: &XsaveInfo,
    image: &XsaveBuf,
    mask: XfeatureMask,
    xstate_bv: XfeatureMask,
) -> Result<(XsaveBuf, bool), String> {
    let from = source
        .layout(mask, Format::Standard)
        .map_err(|e| format!("source layout of {mask:#x}: {e}"))?;
    let to = target
        .layout(mask, Format::Standard)
        .map_err(|e| format!("this host's layout of {mask:#x}: {e}"))?;
    if from == to {
        return Ok((image.clone(), false));
    }
    let mut out = XsaveBuf::standard_for(target, mask).map_err(|e| e.to_string())?;
    let head = XSAVE_MIN_SIZE;
    out.as_bytes_mut()[..head].copy_from_slice(&image.as_bytes()[..head]);
    for i in xstate_bv.user().iter_indices().filter(|&i| i >= 2) {
        let (Some(r), Some(w)) = (from.range_by_index(i), to.range_by_index(i)) else {
            return Err(format!(
                "component {i} is in use but has no standard offset"
            ));
        };
        if r.len() != w.len() {
            return Err(format!(
                "component {i} is {} bytes here, {} in the snapshot",
                w.len(),
                r.len()
            ));
        }
        out.as_bytes_mut()[w].copy_from_slice(&image.as_bytes()[r]);
    }
    Ok((out, true))
}
