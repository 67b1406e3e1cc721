//! The init state: the architectural initial image a vCPU starts with
//! ([`init_image`], [`InitMode`]) and the detection of components whose
//! bytes hold their init value ([`minimal_xstate_bv`]), which is what lets a
//! VMM store and send only the state in use.
//!
//! The init values themselves (FCW 0x037F, MXCSR 0x1F80, zero elsewhere)
//! and the MXCSR rule of XRSTOR are described in [`crate::convert`].

use core::ops::Range;

use crate::area::{all_zero, header_xcomp_bv, header_xstate_bv, sse_is_init, x87_is_init};
use crate::area::{
    write_header, write_sse_init, write_x87_init, XCOMP_BV_COMPACTED, XSAVE_MIN_SIZE,
};
use crate::convert::{require_destination, require_source, ConvertError};
use crate::info::XsaveInfo;
use crate::layout::{Format, LayoutError};
use crate::mask::XfeatureMask;

/// How [`init_image`] marks the initial state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InitMode {
    /// XSTATE_BV = x87 | SSE: only the legacy state is marked in use, so the
    /// CPU tracks AVX and wider state as init (no false dependencies or
    /// SSE/AVX transition penalties). The correct choice.
    Minimal,
    /// XSTATE_BV = all of XCR0 (the illumos bug): values are the same, but the
    /// CPU treats the upper vector state as live. For experiments only.
    AllOfXcr0,
}

/// Whether component `i`, at `range` of `area`, holds its init value.
fn component_is_init(area: &[u8], i: u32, range: Range<usize>) -> bool {
    match i {
        0 => x87_is_init(area),
        1 => sse_is_init(area),
        _ => all_zero(&area[range]),
    }
}

/// Writes the architectural initial image for `xcr0` in the standard format:
/// FCW = 0x037F, MXCSR = 0x1F80, every other byte zero (MXCSR_MASK included),
/// and XSTATE_BV per `mode`. Returns the bytes written (the standard size).
///
/// ```
/// # use xstate::{CpuidRegs, XsaveInfo};
/// # // x87, SSE, AVX and PKRU at their Intel standard offsets; XSAVEC.
/// # let info = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
/// #     0 => CpuidRegs::new(0x207, 2696, 2696, 0),
/// #     1 => CpuidRegs::new(0x7, 0, 0, 0),
/// #     2 => CpuidRegs::new(256, 576, 0, 0),
/// #     9 => CpuidRegs::new(8, 2688, 0, 0),
/// #     _ => CpuidRegs::default(),
/// # })
/// # .unwrap();
/// use xstate::buffer::offsets;
/// use xstate::{init_image, InitMode, XfeatureMask};
/// let mut image = vec![0xaau8; 2696];
/// let xcr0 = XfeatureMask::from_bits(0x207);
/// assert_eq!(init_image(&info, xcr0, InitMode::Minimal, &mut image)?, 2696);
/// assert_eq!(image[offsets::FCW..offsets::FCW + 2], 0x037fu16.to_le_bytes());
/// assert_eq!(image[offsets::MXCSR..offsets::MXCSR + 4], 0x1f80u32.to_le_bytes());
/// assert_eq!(image[offsets::XSTATE_BV], 0x3); // x87 | SSE
/// # Ok::<(), xstate::ConvertError>(())
/// ```
pub fn init_image(
    info: &XsaveInfo,
    xcr0: XfeatureMask,
    mode: InitMode,
    dst: &mut [u8],
) -> Result<usize, ConvertError> {
    xcr0.validate_xcr0(info.supported_xcr0())?;
    let total = info.standard_size(xcr0)? as usize;
    require_destination(dst, total)?;
    dst[..total].fill(0);
    write_x87_init(dst);
    write_sse_init(dst);
    let bv = match mode {
        InitMode::Minimal => XfeatureMask::LEGACY,
        InitMode::AllOfXcr0 => xcr0,
    };
    write_header(dst, bv.bits(), 0);
    Ok(total)
}

/// The smallest XSTATE_BV that describes `area` exactly: its XSTATE_BV minus
/// every component whose bytes equal the init value (what the CPU's XINUSE
/// would report had the state been reached by an init). Works on both formats.
///
/// ```
/// # use xstate::{CpuidRegs, XsaveInfo};
/// # // x87, SSE, AVX and PKRU at their Intel standard offsets; XSAVEC.
/// # let info = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
/// #     0 => CpuidRegs::new(0x207, 2696, 2696, 0),
/// #     1 => CpuidRegs::new(0x7, 0, 0, 0),
/// #     2 => CpuidRegs::new(256, 576, 0, 0),
/// #     9 => CpuidRegs::new(8, 2688, 0, 0),
/// #     _ => CpuidRegs::default(),
/// # })
/// # .unwrap();
/// use xstate::buffer::offsets;
/// use xstate::{init_image, minimal_xstate_bv, InitMode, Xfeature, XfeatureMask};
/// let mut image = vec![0u8; 2696];
/// let xcr0 = XfeatureMask::from_bits(0x207);
/// // XSTATE_BV claims all of XCR0, but every component holds its init value.
/// init_image(&info, xcr0, InitMode::AllOfXcr0, &mut image)?;
/// assert_eq!(minimal_xstate_bv(&info, &image)?, XfeatureMask::EMPTY);
/// image[offsets::XMM0] = 1;
/// assert_eq!(minimal_xstate_bv(&info, &image)?, Xfeature::Sse.mask());
/// # Ok::<(), xstate::ConvertError>(())
/// ```
pub fn minimal_xstate_bv(info: &XsaveInfo, area: &[u8]) -> Result<XfeatureMask, ConvertError> {
    require_source(area, XSAVE_MIN_SIZE)?;
    let bv = XfeatureMask::from_bits(header_xstate_bv(area));
    let xcomp = header_xcomp_bv(area);
    let layout = if xcomp & XCOMP_BV_COMPACTED != 0 {
        let comp = XfeatureMask::from_bits(xcomp & !XCOMP_BV_COMPACTED);
        let outside = bv - comp;
        if !outside.is_empty() {
            return Err(ConvertError::XstateBvOutsideXcompBv(outside));
        }
        info.layout(comp, Format::Compacted)?
    } else {
        info.layout(bv, Format::Standard)?
    };
    let mut out = bv;
    for i in bv.iter_indices() {
        let r = layout
            .range_by_index(i)
            .ok_or(ConvertError::Layout(LayoutError::Unsupported(
                XfeatureMask::from_bits(1 << i),
            )))?;
        require_source(area, r.end)?;
        if component_is_init(area, i, r) {
            out = out.difference(XfeatureMask::from_bits(1 << i));
        }
    }
    Ok(out)
}

#[cfg(feature = "std")]
mod owned {
    use super::*;
    use crate::area::mxcsr_is_init;
    use crate::buffer::XsaveBuf;
    use crate::convert::compact;
    use crate::feature::Xfeature;

    /// Compacts a standard image to only the components in use: XSTATE_BV and
    /// XCOMP_BV are both the minimal XSTATE_BV (limited to `xcr0`), so a
    /// sparse in-use set is dense in memory, as XSAVEC with an XINUSE mask
    /// would store it.
    pub fn compacted_in_use(
        info: &XsaveInfo,
        standard: &XsaveBuf,
        xcr0: XfeatureMask,
    ) -> Result<XsaveBuf, ConvertError> {
        let src = standard.as_bytes();
        let mut used = minimal_xstate_bv(info, src)?;
        if src.len() >= XSAVE_MIN_SIZE && !mxcsr_is_init(src) {
            used = used.with(Xfeature::Sse);
        }
        let outside = used - xcr0;
        if !outside.is_empty() {
            return Err(ConvertError::StateNotRequested(outside));
        }
        let mut out = XsaveBuf::new(info.compacted_size(used)? as usize);
        compact(info, src, used, out.as_bytes_mut())?;
        Ok(out)
    }

    impl XsaveBuf {
        /// The architectural initial image for `xcr0` in the standard format
        /// (see [`init_image`]).
        pub fn init(
            info: &XsaveInfo,
            xcr0: XfeatureMask,
            mode: InitMode,
        ) -> Result<Self, ConvertError> {
            let size = info.standard_size(xcr0)?;
            let mut b = Self::new(size as usize);
            init_image(info, xcr0, mode, b.as_bytes_mut())?;
            Ok(b)
        }

        /// A zeroed standard-format area sized for `xcr0`.
        pub fn standard_for(info: &XsaveInfo, xcr0: XfeatureMask) -> Result<Self, ConvertError> {
            Ok(Self::new(info.standard_size(xcr0)? as usize))
        }
    }
}

#[cfg(feature = "std")]
pub use owned::compacted_in_use;
