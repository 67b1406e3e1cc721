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
/// # Errors
/// - [`ConvertError::Xcr0`]: `xcr0` is not a valid XCR0 for `info`'s
///   supported XCR0 (any [`Xcr0Error`](crate::Xcr0Error) rule);
/// - [`ConvertError::DestinationTooSmall`]: `dst` is shorter than the
///   standard size of `xcr0`.
///
/// # Examples
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
/// # Errors
/// - [`ConvertError::SourceTooSmall`]: `area` is shorter than 576 bytes, or
///   ends before a component its XSTATE_BV marks present;
/// - [`ConvertError::XstateBvOutsideXcompBv`]: compacted format, and
///   XSTATE_BV has bits outside XCOMP_BV;
/// - [`ConvertError::Layout`]: `info` cannot lay out XCOMP_BV (compacted)
///   or XSTATE_BV (standard): bit 63, components it does not enumerate,
///   or supervisor components in a standard image.
///
/// # Examples
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
    ///
    /// # Errors
    /// - [`ConvertError::SourceTooSmall`],
    ///   [`ConvertError::XstateBvOutsideXcompBv`], [`ConvertError::Layout`]:
    ///   as [`minimal_xstate_bv`] on `standard`;
    /// - [`ConvertError::StateNotRequested`]: a component in use (SSE also
    ///   when MXCSR is not 0x1F80) is outside `xcr0`;
    /// - [`ConvertError::NotStandard`]: `standard`'s XCOMP_BV is not 0 (a
    ///   compacted image).
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
    /// use xstate::{compacted_in_use, Format, InitMode, Xfeature, XfeatureMask, XsaveBuf};
    /// let xcr0 = XfeatureMask::from_bits(0x207);
    /// let layout = info.layout(xcr0, Format::Standard)?;
    /// // XSTATE_BV claims all of XCR0, but only PKRU holds a non-init value.
    /// let mut image = XsaveBuf::init(&info, xcr0, InitMode::AllOfXcr0)?;
    /// image.component_mut(Xfeature::Pkru, &layout).unwrap()[0] = 0x54;
    /// let dense = compacted_in_use(&info, &image, xcr0)?;
    /// // x87 and SSE are init too: XCOMP_BV holds PKRU alone, right after
    /// // the header, and the image is 584 bytes instead of 2440.
    /// assert_eq!(dense.xcomp_bv(), 0x200 | 1 << 63);
    /// assert_eq!((dense.len(), dense.as_bytes()[576]), (584, 0x54));
    /// # Ok::<(), xstate::ConvertError>(())
    /// ```
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
        ///
        /// # Errors
        /// - [`ConvertError::Layout`]: `xcr0` has bit 63, supervisor
        ///   components or components `info` does not support (checked
        ///   first, sizing the buffer);
        /// - [`ConvertError::Xcr0`]: `xcr0` breaks another XCR0 rule (no
        ///   x87, AVX without SSE, part of AVX-512, MPX or AMX).
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
        /// use xstate::{ConvertError, InitMode, Xcr0Error, XfeatureMask, XsaveBuf};
        /// let image = XsaveBuf::init(&info, XfeatureMask::from_bits(0x207), InitMode::Minimal)?;
        /// assert_eq!(image.len(), 2440);
        /// assert_eq!((image.fcw(), image.mxcsr(), image.xstate_bv()), (0x037f, 0x1f80, 0x3));
        /// // AVX without SSE is no XCR0 XSETBV would take.
        /// assert_eq!(
        ///     XsaveBuf::init(&info, XfeatureMask::from_bits(0x5), InitMode::Minimal),
        ///     Err(ConvertError::Xcr0(Xcr0Error::AvxWithoutSse))
        /// );
        /// # Ok::<(), ConvertError>(())
        /// ```
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
        ///
        /// # Errors
        /// [`ConvertError::Layout`] if `xcr0` has no standard layout on
        /// `info`: bit 63 ([`LayoutError::Bit63`]), supervisor components
        /// ([`LayoutError::SupervisorInStandard`]) or components it does not
        /// support ([`LayoutError::Unsupported`]). `xcr0` need not be a
        /// valid XCR0.
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
        /// use xstate::{XfeatureMask, XsaveBuf};
        /// // A buffer for KVM_GET_XSAVE of a guest with XCR0 0x207.
        /// let buf = XsaveBuf::standard_for(&info, XfeatureMask::from_bits(0x207))?;
        /// assert_eq!(buf.len(), 2440);
        /// assert!(buf.as_bytes().iter().all(|&b| b == 0));
        /// # Ok::<(), xstate::ConvertError>(())
        /// ```
        pub fn standard_for(info: &XsaveInfo, xcr0: XfeatureMask) -> Result<Self, ConvertError> {
            Ok(Self::new(info.standard_size(xcr0)? as usize))
        }
    }
}

#[cfg(feature = "std")]
pub use owned::compacted_in_use;
