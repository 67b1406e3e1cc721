//! The conversions into new, owned buffers (with `std`): the standard
//! image sized for an XCR0, the compacted one sized for its XCOMP_BV.

use super::*;
use crate::buffer::XsaveBuf;

/// Expands a compacted image into a new standard-format buffer for `xcr0`.
///
/// # Errors
/// - [`ConvertError::Layout`]: `xcr0` has no standard layout on `info`
///   (bit 63, supervisor components, or components outside the
///   supported XCR0);
/// - otherwise those of [`expand`]: [`ConvertError::SourceTooSmall`],
///   [`ConvertError::NotCompacted`],
///   [`ConvertError::XstateBvOutsideXcompBv`],
///   [`ConvertError::StateNotRequested`], [`ConvertError::Layout`] (the
///   buffer is sized for `xcr0`, so never
///   [`ConvertError::DestinationTooSmall`]).
///
/// # Examples
/// ```
/// # use xstate::{CpuidRegs, XsaveInfo};
/// # // AMD EPYC 7763 (Zen 3): x87, SSE, AVX, PKRU; CET in IA32_XSS.
/// # let info = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
/// #     0 => CpuidRegs::new(0x207, 832, 2440, 0),
/// #     1 => CpuidRegs::new(0xf, 848, 0x1800, 0),
/// #     2 => CpuidRegs::new(256, 576, 0, 0),
/// #     9 => CpuidRegs::new(8, 2432, 0, 0),
/// #     11 => CpuidRegs::new(16, 0, 1, 0),
/// #     12 => CpuidRegs::new(24, 0, 1, 0),
/// #     _ => CpuidRegs::default(),
/// # })
/// # .unwrap();
/// use xstate::{compact_to_buf, expand_to_standard, InitMode, XfeatureMask, XsaveBuf};
/// let xcr0 = XfeatureMask::from_bits(0x207);
/// let standard = XsaveBuf::init(&info, xcr0, InitMode::Minimal)?;
/// let packed = compact_to_buf(&info, &standard, xcr0)?;
/// assert_eq!((packed.len(), packed.xcomp_bv()), (840, 0x207 | 1 << 63));
/// let back = expand_to_standard(&info, &packed, xcr0)?;
/// assert_eq!(back, standard);
/// # Ok::<(), xstate::ConvertError>(())
/// ```
pub fn expand_to_standard(
    info: &XsaveInfo,
    compacted: &XsaveBuf,
    xcr0: XfeatureMask,
) -> Result<XsaveBuf, ConvertError> {
    let mut out = XsaveBuf::new(info.standard_size(xcr0)? as usize);
    expand(info, compacted.as_bytes(), out.as_bytes_mut(), xcr0)?;
    Ok(out)
}

/// Compacts a standard image into a new buffer with XCOMP_BV = `requested`.
///
/// # Errors
/// - [`ConvertError::Layout`]: `requested` has no compacted layout on
///   `info` (bit 63, or components it does not enumerate);
/// - otherwise those of [`compact`]: [`ConvertError::SourceTooSmall`],
///   [`ConvertError::NotStandard`], [`ConvertError::Unsupported`],
///   [`ConvertError::StateNotRequested`] (the buffer is sized for
///   `requested`, so never [`ConvertError::DestinationTooSmall`]).
///
/// # Examples
/// ```
/// # use xstate::{CpuidRegs, XsaveInfo};
/// # // AMD EPYC 7763 (Zen 3): x87, SSE, AVX, PKRU; CET in IA32_XSS.
/// # let info = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
/// #     0 => CpuidRegs::new(0x207, 832, 2440, 0),
/// #     1 => CpuidRegs::new(0xf, 848, 0x1800, 0),
/// #     2 => CpuidRegs::new(256, 576, 0, 0),
/// #     9 => CpuidRegs::new(8, 2432, 0, 0),
/// #     11 => CpuidRegs::new(16, 0, 1, 0),
/// #     12 => CpuidRegs::new(24, 0, 1, 0),
/// #     _ => CpuidRegs::default(),
/// # })
/// # .unwrap();
/// use xstate::{compact_to_buf, ConvertError, InitMode, Xfeature, XfeatureMask, XsaveBuf};
/// let xcr0 = XfeatureMask::from_bits(0x207);
/// let mut standard = XsaveBuf::init(&info, xcr0, InitMode::Minimal)?;
/// // Only x87 and SSE hold state: XSAVEC with RFBM 0x3 stores 576 bytes.
/// let packed = compact_to_buf(&info, &standard, XfeatureMask::LEGACY)?;
/// assert_eq!(packed.len(), 576);
/// // Once PKRU holds a value, leaving it out would lose it.
/// let layout = info.layout(xcr0, xstate::Format::Standard)?;
/// standard.component_mut(Xfeature::Pkru, &layout).unwrap()[0] = 0x54;
/// standard.set_xstate_bv(XfeatureMask::from_bits(0x203));
/// assert_eq!(
///     compact_to_buf(&info, &standard, XfeatureMask::LEGACY),
///     Err(ConvertError::StateNotRequested(Xfeature::Pkru.mask()))
/// );
/// # Ok::<(), ConvertError>(())
/// ```
pub fn compact_to_buf(
    info: &XsaveInfo,
    standard: &XsaveBuf,
    requested: XfeatureMask,
) -> Result<XsaveBuf, ConvertError> {
    let mut out = XsaveBuf::new(info.compacted_size(requested)? as usize);
    compact(info, standard.as_bytes(), requested, out.as_bytes_mut())?;
    Ok(out)
}
