//! Validating an XSAVE image against the vCPU it is for: the header and
//! MXCSR checks that XRSTOR (and KVM_SET_XSAVE) would make, done before the
//! hardware or KVM sees the image, so that a bad image is refused with a
//! [`BufferError`] naming the rule instead of a #GP or an `EINVAL`.

use crate::area::{self, header_xcomp_bv, header_xstate_bv, offsets as o, rd_u32};
use crate::area::{MXCSR_MASK_DEFAULT, XCOMP_BV_COMPACTED, XSAVE_MIN_SIZE};
use crate::buffer::{require_len, BufferError};
use crate::feature::Xfeature;
use crate::info::XsaveInfo;
use crate::layout::Format;
use crate::mask::XfeatureMask;

/// Checks an area the way the restoring side would, so that the VMM can
/// refuse a bad image before KVM (or XRSTOR) sees it.
///
/// `xcr0` and `xss` are the enabled sets of the vCPU the image is for. The
/// format comes from XCOMP_BV bit 63. Checked: the area holds the header and
/// every component XSTATE_BV marks present (what XRSTOR reads); standard format: XCOMP_BV is 0 and
/// XSTATE_BV is within XCR0; compacted format: the CPU has XSAVEC, XCOMP_BV is
/// within XCR0 | IA32_XSS and XSTATE_BV within XCOMP_BV; header bytes 16..63
/// are zero; MXCSR, when it would be loaded, has no bit set that MXCSR_MASK
/// (or the default 0xFFBF when the image's mask is 0) reserves.
///
/// Returns the image's format.
///
/// # Errors
/// The first failed check, in this order:
/// - [`BufferError::TooSmall`]: the area is shorter than 576 bytes;
/// - standard format (XCOMP_BV bit 63 clear):
///   [`BufferError::XcompBvInStandard`] if XCOMP_BV is not 0,
///   [`BufferError::XstateBvOutsideXcr0`] if XSTATE_BV has bits outside
///   `xcr0`, [`BufferError::Layout`] if `info` cannot lay XSTATE_BV out in
///   the standard format (a component it does not enumerate, or a
///   supervisor bit or bit 63 that `xcr0` let through);
/// - compacted format: [`BufferError::CompactedUnsupported`] if `info` has
///   no XSAVEC, [`BufferError::XcompBvOutsideEnabled`] if XCOMP_BV has bits
///   outside `xcr0 | xss`, [`BufferError::XstateBvOutsideXcompBv`] if
///   XSTATE_BV has bits outside XCOMP_BV, [`BufferError::Layout`] if
///   XCOMP_BV holds components `info` does not enumerate;
/// - [`BufferError::ReservedHeaderBytes`]: a nonzero byte in header bytes
///   16..63 (area offsets 528..576);
/// - [`BufferError::TooSmall`]: the area ends before the last component
///   XSTATE_BV marks present;
/// - [`BufferError::MxcsrReserved`]: MXCSR would be loaded (standard: SSE or
///   AVX in `xcr0`; compacted: SSE in XSTATE_BV) and sets bits the mask
///   reserves.
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
/// use xstate::{init_image, validate, BufferError, Format, InitMode, XfeatureMask};
/// let mut image = vec![0u8; 2696];
/// let xcr0 = XfeatureMask::from_bits(0x207);
/// init_image(&info, xcr0, InitMode::Minimal, &mut image).unwrap();
/// assert_eq!(validate(&image, &info, xcr0, XfeatureMask::EMPTY), Ok(Format::Standard));
/// image[offsets::MXCSR + 2] = 0xff; // MXCSR bits 16..24 are reserved
/// assert!(matches!(
///     validate(&image, &info, xcr0, XfeatureMask::EMPTY),
///     Err(BufferError::MxcsrReserved { .. })
/// ));
/// ```
pub fn validate(
    area: &[u8],
    info: &XsaveInfo,
    xcr0: XfeatureMask,
    xss: XfeatureMask,
) -> Result<Format, BufferError> {
    require_len(area.len(), XSAVE_MIN_SIZE)?;
    let xstate_bv = header_xstate_bv(area);
    let xcomp_bv = header_xcomp_bv(area);
    let format = if xcomp_bv & XCOMP_BV_COMPACTED != 0 {
        Format::Compacted
    } else {
        Format::Standard
    };
    let need = match format {
        Format::Standard => {
            if xcomp_bv != 0 {
                return Err(BufferError::XcompBvInStandard(xcomp_bv));
            }
            let extra = xstate_bv & !xcr0.bits();
            if extra != 0 {
                return Err(BufferError::XstateBvOutsideXcr0(XfeatureMask::from_bits(
                    extra,
                )));
            }
            // XRSTOR reads only the components XSTATE_BV marks present.
            info.layout(XfeatureMask::from_bits(xstate_bv), Format::Standard)
                .map_err(BufferError::Layout)?
                .total_size()
        }
        Format::Compacted => {
            if !info.has_xsavec() {
                return Err(BufferError::CompactedUnsupported);
            }
            let comp = xcomp_bv & !XCOMP_BV_COMPACTED;
            let extra = comp & !(xcr0.bits() | xss.bits());
            if extra != 0 {
                return Err(BufferError::XcompBvOutsideEnabled(XfeatureMask::from_bits(
                    extra,
                )));
            }
            let extra = xstate_bv & !comp;
            if extra != 0 {
                return Err(BufferError::XstateBvOutsideXcompBv(
                    XfeatureMask::from_bits(extra),
                ));
            }
            let layout = info
                .layout(XfeatureMask::from_bits(comp), Format::Compacted)
                .map_err(BufferError::Layout)?;
            layout
                .iter_indices()
                .filter(|&(i, _, _)| xstate_bv & (1 << i) != 0)
                .map(|(_, off, size)| off + size)
                .fold(XSAVE_MIN_SIZE as u32, u32::max)
        }
    };
    if let Some(pos) = area[area::HEADER_RESERVED].iter().position(|&b| b != 0) {
        return Err(BufferError::ReservedHeaderBytes {
            offset: o::HEADER_RESERVED + pos,
        });
    }
    require_len(area.len(), need as usize)?;
    // Standard XRSTOR loads MXCSR whenever SSE or AVX is requested; compacted
    // XRSTOR only when SSE state is loaded from memory.
    let sse_avx = Xfeature::Sse.bit() | Xfeature::Avx.bit();
    let loads_mxcsr = match format {
        Format::Standard => xcr0.bits() & sse_avx != 0,
        Format::Compacted => xstate_bv & Xfeature::Sse.bit() != 0,
    };
    if loads_mxcsr {
        let mxcsr = rd_u32(area, o::MXCSR);
        let mut mask = rd_u32(area, o::MXCSR_MASK);
        if mask == 0 {
            mask = MXCSR_MASK_DEFAULT;
        }
        if mxcsr & !mask != 0 {
            return Err(BufferError::MxcsrReserved { mxcsr, mask });
        }
    }
    Ok(format)
}
