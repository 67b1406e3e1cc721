//! Conversions between the standard and compacted formats: what XSAVEC
//! would have saved from a standard (XSAVE, KVM_GET_XSAVE) image, and back.
//! A VMM needs both to move state between hosts, snapshots and the guest's
//! own save format. The initial image and init-state detection are
//! [`crate::init`].
//!
//! # Init values and the MXCSR rule
//!
//! A component whose XSTATE_BV bit is clear is in its *init state*; XRSTOR
//! loads the init value instead of reading the area. The init values are:
//! - x87: FCW = 0x037F, FSW = 0, abridged FTW = 0 (all registers empty),
//!   FOP = FIP = FDP = 0, ST0-7 = 0;
//! - SSE: XMM0-15 = 0 and MXCSR = 0x1F80;
//! - every other component: all bytes zero.
//!
//! MXCSR is the exception to "clear bit = ignore the bytes". The *standard*
//! form of XRSTOR loads MXCSR from bytes 24..28 whenever SSE or AVX is in the
//! requested-feature bitmap, regardless of XSTATE_BV bit 1; the *compacted* form
//! treats MXCSR as part of the SSE component (XSTATE_BV bit 1 = 0 gives 0x1F80).
//! The conversions here are exact under both rules: [`compact`] marks SSE as
//! present when a standard image's MXCSR is not 0x1F80 even if its XSTATE_BV bit 1
//! is clear; init detection treats SSE as init only if the XMM registers are
//! zero *and* MXCSR is 0x1F80. MXCSR_MASK (a read-only CPU capability) and the
//! software-available bytes 416..512 are copied verbatim in both directions.
//!
//! A *canonical* image holds the init value in every component whose
//! XSTATE_BV bit is clear, zeros in the gaps between standard-format
//! components and in the reserved header bytes. Conversions produce canonical
//! images, and `expand(compact(x)) == x` and `compact(expand(y)) == y` hold
//! byte for byte for canonical `x` and `y`.

use core::fmt;

use crate::area::XSAVE_MIN_SIZE;
use crate::area::{
    all_zero, copy_at, header_xcomp_bv, header_xstate_bv, mxcsr_is_init, offsets as o, zero_at,
    SSE2,
};
use crate::area::{sse_is_init, write_header, write_sse_init, write_x87_init, x87_is_init};
use crate::area::{MXCSR, MXCSR_MASK, X87_ENV, X87_REGS, XCOMP_BV_COMPACTED, XMM_REGS};
use crate::feature::Xfeature;
use crate::info::{standard_end_walk, walk_compacted, XsaveInfo};
use crate::layout::LayoutError;
use crate::mask::XfeatureMask;
use crate::rules::Xcr0Error;

/// Copies the legacy region from `src` to `dst`: x87 and SSE state from
/// `src` when `bv` marks them, their init values otherwise; MXCSR_MASK and the
/// software-available bytes always.
#[inline(always)]
fn copy_legacy<const L: u8>(src: &[u8], dst: &mut [u8], bv: u64) {
    let both = Xfeature::X87.bit() | Xfeature::Sse.bit();
    if bv & both == both {
        // The common case: the whole legacy region is live, one copy.
        copy_at::<L>(&mut dst[..o::XSTATE_BV], &src[..o::XSTATE_BV]);
        return;
    }
    if bv & Xfeature::X87.bit() != 0 {
        dst[X87_ENV].copy_from_slice(&src[X87_ENV]);
        dst[X87_REGS].copy_from_slice(&src[X87_REGS]);
    } else {
        write_x87_init(dst);
    }
    if bv & Xfeature::Sse.bit() != 0 {
        copy_at::<L>(&mut dst[XMM_REGS], &src[XMM_REGS]);
        dst[MXCSR].copy_from_slice(&src[MXCSR]);
    } else {
        write_sse_init(dst);
    }
    dst[MXCSR_MASK].copy_from_slice(&src[MXCSR_MASK]);
    copy_at::<L>(
        &mut dst[o::SW_AVAILABLE..o::XSTATE_BV],
        &src[o::SW_AVAILABLE..o::XSTATE_BV],
    );
}

/// `SourceTooSmall` unless `src` holds `need` bytes.
pub(crate) fn require_source(src: &[u8], need: usize) -> Result<(), ConvertError> {
    if src.len() < need {
        return Err(ConvertError::SourceTooSmall {
            need,
            have: src.len(),
        });
    }
    Ok(())
}

/// `DestinationTooSmall` unless `dst` holds `need` bytes.
pub(crate) fn require_destination(dst: &[u8], need: usize) -> Result<(), ConvertError> {
    if dst.len() < need {
        return Err(ConvertError::DestinationTooSmall {
            need,
            have: dst.len(),
        });
    }
    Ok(())
}

/// Converts a standard-format image to the compacted format with XCOMP_BV =
/// `requested` (as XSAVEC with that requested-feature bitmap would have saved
/// it) and returns the number of bytes written (the compacted size).
///
/// Bytes of `dst` past the compacted size are left untouched. A component
/// that `src` holds but `requested` lacks is an error unless its bytes equal
/// the init value (so that no state is silently dropped); the same holds for
/// a non-default MXCSR when `requested` lacks SSE (see the module docs).
///
/// # Errors
/// The first failed check, in this order:
/// - [`ConvertError::SourceTooSmall`]: `src` is shorter than 576 bytes;
/// - [`ConvertError::NotStandard`]: `src`'s XCOMP_BV is not 0;
/// - [`ConvertError::Unsupported`]: `src`'s XSTATE_BV has bits outside the
///   supported XCR0 of `info`;
/// - [`ConvertError::SourceTooSmall`]: `src` ends before the last component
///   its XSTATE_BV marks present (at its standard offset);
/// - [`ConvertError::Layout`]: `requested` has bit 63
///   ([`LayoutError::Bit63`]) or components `info` does not enumerate
///   ([`LayoutError::Unsupported`]);
/// - [`ConvertError::DestinationTooSmall`]: `dst` is shorter than the
///   compacted size of `requested`;
/// - [`ConvertError::StateNotRequested`]: `src` holds non-init state (or an
///   MXCSR other than 0x1F80) for a component `requested` lacks.
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
/// use xstate::{compact, expand, init_image, InitMode, XfeatureMask};
/// let xcr0 = XfeatureMask::from_bits(0x207);
/// let mut standard = vec![0u8; 2696];
/// init_image(&info, xcr0, InitMode::Minimal, &mut standard)?;
/// standard[xstate::buffer::offsets::XMM0] = 1; // XMM0 holds live state
/// let mut compacted = vec![0u8; 840];
/// assert_eq!(compact(&info, &standard, xcr0, &mut compacted)?, 840);
/// let mut back = vec![0u8; 2696];
/// expand(&info, &compacted, &mut back, xcr0)?;
/// assert_eq!(back, standard);
/// // Live XMM0 cannot be dropped by compacting to x87 alone.
/// assert_eq!(
///     compact(&info, &standard, XfeatureMask::from_bits(0x1), &mut compacted),
///     Err(xstate::ConvertError::StateNotRequested(XfeatureMask::from_bits(0x2)))
/// );
/// # Ok::<(), xstate::ConvertError>(())
/// ```
#[inline]
pub fn compact(
    info: &XsaveInfo,
    src: &[u8],
    requested: XfeatureMask,
    dst: &mut [u8],
) -> Result<usize, ConvertError> {
    // In line in the caller: one call to the short path, whose answer
    // comes back in a register; everything else, errors included, goes to
    // the general path.
    match compact_short_dispatch(info, src, requested, dst) {
        0 => compact_general(info, src, requested, dst),
        n => Ok(n),
    }
}

/// [`compact_short`] at this CPU's vector level; 0 when it does not apply,
/// or before the level is detected (the general path detects it).
#[inline]
fn compact_short_dispatch(
    info: &XsaveInfo,
    src: &[u8],
    requested: XfeatureMask,
    dst: &mut [u8],
) -> usize {
    #[cfg(target_arch = "x86_64")]
    match crate::area::detected_level() {
        // SAFETY: `detected_level` reported AVX-512F (CPUID and XCR0) on
        // this CPU.
        crate::area::AVX512 => unsafe { wide::compact_short_avx512(info, src, requested, dst) },
        // SAFETY: `detected_level` reported AVX2 (CPUID and XCR0) on this
        // CPU.
        crate::area::AVX2 => unsafe { wide::compact_short_avx2(info, src, requested, dst) },
        SSE2 => compact_short_sse2(info, src, requested, dst),
        _ => 0,
    }
    #[cfg(not(target_arch = "x86_64"))]
    compact_short_sse2(info, src, requested, dst)
}

/// The general path of [`compact`] ([`compact_in`]) at this CPU's vector
/// level, out of line.
#[inline(never)]
fn compact_general(
    info: &XsaveInfo,
    src: &[u8],
    requested: XfeatureMask,
    dst: &mut [u8],
) -> Result<usize, ConvertError> {
    #[cfg(target_arch = "x86_64")]
    match crate::area::level() {
        // SAFETY: `level` reported AVX-512F (CPUID and XCR0) on this CPU.
        crate::area::AVX512 => return unsafe { wide::compact_avx512(info, src, requested, dst) },
        // SAFETY: `level` reported AVX2 (CPUID and XCR0) on this CPU.
        crate::area::AVX2 => return unsafe { wide::compact_avx2(info, src, requested, dst) },
        _ => {}
    }
    compact_in::<SSE2>(info, src, requested, dst)
}

/// [`compact_short`] with 16-byte moves.
#[inline(never)]
fn compact_short_sse2(
    info: &XsaveInfo,
    src: &[u8],
    requested: XfeatureMask,
    dst: &mut [u8],
) -> usize {
    compact_short::<SSE2>(info, src, requested, dst).unwrap_or(0)
}

/// The conversions compiled for the wider vector levels: each only sets the
/// target feature and inlines the generic body.
#[cfg(target_arch = "x86_64")]
mod wide {
    use super::*;
    use crate::area::{AVX2, AVX512};

    /// [`compact_short`] with 64-byte moves; 0 when it does not apply.
    ///
    /// # Safety
    /// The CPU and XCR0 must allow AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn compact_short_avx512(
        info: &XsaveInfo,
        src: &[u8],
        requested: XfeatureMask,
        dst: &mut [u8],
    ) -> usize {
        compact_short::<AVX512>(info, src, requested, dst).unwrap_or(0)
    }

    /// [`compact_short`] with 32-byte moves; 0 when it does not apply.
    ///
    /// # Safety
    /// The CPU and XCR0 must allow AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn compact_short_avx2(
        info: &XsaveInfo,
        src: &[u8],
        requested: XfeatureMask,
        dst: &mut [u8],
    ) -> usize {
        compact_short::<AVX2>(info, src, requested, dst).unwrap_or(0)
    }

    /// [`compact_in`] with 64-byte moves.
    ///
    /// # Safety
    /// The CPU and XCR0 must allow AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn compact_avx512(
        info: &XsaveInfo,
        src: &[u8],
        requested: XfeatureMask,
        dst: &mut [u8],
    ) -> Result<usize, ConvertError> {
        compact_in::<AVX512>(info, src, requested, dst)
    }

    /// [`compact_in`] with 32-byte moves.
    ///
    /// # Safety
    /// The CPU and XCR0 must allow AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn compact_avx2(
        info: &XsaveInfo,
        src: &[u8],
        requested: XfeatureMask,
        dst: &mut [u8],
    ) -> Result<usize, ConvertError> {
        compact_in::<AVX2>(info, src, requested, dst)
    }

    /// [`expand`] with 64-byte moves.
    ///
    /// # Safety
    /// The CPU and XCR0 must allow AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn expand_avx512(
        info: &XsaveInfo,
        src: &[u8],
        dst: &mut [u8],
        xcr0: XfeatureMask,
    ) -> Result<(), ConvertError> {
        expand_in::<AVX512>(info, src, dst, xcr0)
    }

    /// [`expand`] with 32-byte moves.
    ///
    /// # Safety
    /// The CPU and XCR0 must allow AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn expand_avx2(
        info: &XsaveInfo,
        src: &[u8],
        dst: &mut [u8],
        xcr0: XfeatureMask,
    ) -> Result<(), ConvertError> {
        expand_in::<AVX2>(info, src, dst, xcr0)
    }
}

/// The short path of [`compact`] for the two masks a guest's state is
/// most often in: x87|SSE alone, and x87|SSE|AVX. Both lay out as the
/// standard format does (AVX, the first component, sits at 576 in both
/// formats when its standard offset is 576, as on every CPU so far), so the
/// image is the legacy region, the header and, for AVX, one fixed-size
/// block: no layout walk, no per-component dispatch, no drop check (nothing
/// held lies outside `requested`). Returns `None`, having written nothing,
/// for any other case, including every error: the general path
/// ([`compact_in`]) then names it. The bytes written are exactly those of
/// the general path (tested by `short_path_matches_the_general_one`).
#[inline(always)]
fn compact_short<const L: u8>(
    info: &XsaveInfo,
    src: &[u8],
    requested: XfeatureMask,
    dst: &mut [u8],
) -> Option<usize> {
    let legacy = XfeatureMask::LEGACY;
    let avx = legacy.with(Xfeature::Avx);
    let with_avx = if requested == legacy {
        false
    } else if requested == avx {
        true
    } else {
        return None;
    };
    if src.len() < XSAVE_MIN_SIZE || dst.len() < XSAVE_MIN_SIZE {
        return None;
    }
    let src_bv = XfeatureMask::from_bits(header_xstate_bv(src));
    // Standard format, nothing held outside `requested`, every requested
    // component supported (the errors of the general path cannot arise).
    if header_xcomp_bv(src) != 0
        || !(src_bv - requested).is_empty()
        || !(requested - info.supported_xcr0()).is_empty()
    {
        return None;
    }
    // A live MXCSR with XSTATE_BV bit 1 clear takes the general path.
    if !src_bv.contains(Xfeature::Sse) && !mxcsr_is_init(src) {
        return None;
    }
    let mut total = XSAVE_MIN_SIZE;
    if with_avx {
        // The upper halves of YMM0-15, 256 bytes by definition: a
        // fixed-size copy.
        const AVX_SIZE: usize = 256;
        if info.raw_size_offset(Xfeature::Avx.index()) != (AVX_SIZE as u32, XSAVE_MIN_SIZE as u32) {
            return None;
        }
        total += AVX_SIZE;
        let (Some(d), Some(s)) = (
            dst.get_mut(XSAVE_MIN_SIZE..total),
            src.get(XSAVE_MIN_SIZE..total),
        ) else {
            return None;
        };
        if src_bv.contains(Xfeature::Avx) {
            copy_at::<L>(d, s);
        } else {
            zero_at::<L>(d);
        }
    }
    copy_legacy::<L>(src, dst, src_bv.bits());
    write_header(dst, src_bv.bits(), requested.bits() | XCOMP_BV_COMPACTED);
    Some(total)
}

/// [`compact`] with level-`L` copies (see [`crate::area`]'s `copy_at`).
#[inline(always)]
fn compact_in<const L: u8>(
    info: &XsaveInfo,
    src: &[u8],
    requested: XfeatureMask,
    dst: &mut [u8],
) -> Result<usize, ConvertError> {
    require_source(src, XSAVE_MIN_SIZE)?;
    let xcomp = header_xcomp_bv(src);
    if xcomp != 0 {
        return Err(ConvertError::NotStandard { xcomp_bv: xcomp });
    }
    let src_bv = XfeatureMask::from_bits(header_xstate_bv(src));
    let outside = src_bv - info.supported_xcr0();
    if !outside.is_empty() {
        return Err(ConvertError::Unsupported(outside));
    }
    let need = standard_end(info, src_bv);
    require_source(src, need)?;
    let total = compacted_end(info, requested)?;
    require_destination(dst, total)?;
    // Components held by the source (XSTATE_BV, plus SSE if MXCSR is live).
    let mut live = src_bv;
    let mxcsr_live = !mxcsr_is_init(src);
    if mxcsr_live {
        live = live.with(Xfeature::Sse);
    }
    let dropped = live - requested;
    for i in dropped.iter_indices() {
        let init = match i {
            0 => x87_is_init(src),
            1 => !mxcsr_live && (!src_bv.contains(Xfeature::Sse) || sse_is_init(src)),
            _ => {
                let (size, off) = info.raw_size_offset(i);
                all_zero(&src[off as usize..(off + size) as usize])
            }
        };
        if !init {
            return Err(ConvertError::StateNotRequested(XfeatureMask::from_bits(
                1 << i,
            )));
        }
    }
    let bv = live & requested;
    if bv.contains(Xfeature::Sse) && !src_bv.contains(Xfeature::Sse) {
        // Standard image with XSTATE_BV bit 1 clear but a live MXCSR: the XMM
        // registers are init, MXCSR comes from the image.
        copy_legacy::<L>(src, dst, bv.without(Xfeature::Sse).bits());
        zero_at::<L>(&mut dst[XMM_REGS]);
        dst[MXCSR].copy_from_slice(&src[MXCSR]);
    } else {
        copy_legacy::<L>(src, dst, bv.bits());
    }
    // Compacted offsets computed on the way: no table to fill first.
    walk_compacted(info, requested, |i, off, size| {
        let d = &mut dst[off..off + size];
        if bv.contains_index(i) {
            let std_off = info.raw_size_offset(i).1 as usize;
            copy_at::<L>(d, &src[std_off..std_off + size]);
        } else {
            zero_at::<L>(d);
        }
    });
    write_header(dst, bv.bits(), requested.bits() | XCOMP_BV_COMPACTED);
    Ok(total)
}

/// End of the highest standard-format component of `mask` (user components
/// only; at least 576). For all of the supported XCR0 (a whole image, the
/// usual case) it is precomputed in [`XsaveInfo`]: walking the components
/// on every call, here and in [`compacted_end`], cost a sixth of
/// compacting a 10 KiB AMX image.
fn standard_end(info: &XsaveInfo, mask: XfeatureMask) -> usize {
    if mask == info.supported_xcr0() {
        return info.xcr0_standard_end();
    }
    standard_end_walk(info, mask)
}

/// Compacted offsets of the components >= 2 of `mask` into `offs`; returns
/// the compacted size. The layout rule of [`XsaveInfo::layout`], without
/// building a [`crate::Layout`] (this is the conversions' hot path).
fn compacted_offsets(
    info: &XsaveInfo,
    mask: XfeatureMask,
    offs: &mut [u32; 64],
) -> Result<usize, ConvertError> {
    check_compactable(info, mask)?;
    // XsaveInfo guarantees that the compacted size of everything fits in u32.
    Ok(walk_compacted(info, mask, |i, off, _| {
        offs[i as usize] = off as u32
    }))
}

/// The compacted size of `mask` ([`compacted_offsets`] without the table;
/// precomputed for all of the supported XCR0, see [`standard_end`]).
fn compacted_end(info: &XsaveInfo, mask: XfeatureMask) -> Result<usize, ConvertError> {
    if mask == info.supported_xcr0() {
        // Compactable by construction: XsaveInfo rejects bit 63.
        return Ok(info.xcr0_compacted_end());
    }
    check_compactable(info, mask)?;
    Ok(walk_compacted(info, mask, |_, _, _| {}))
}

/// Whether `mask` has a compacted layout on this CPU: no bit 63, every
/// component enumerated.
fn check_compactable(info: &XsaveInfo, mask: XfeatureMask) -> Result<(), ConvertError> {
    if mask.contains_index(63) {
        return Err(LayoutError::Bit63.into());
    }
    let unsupported = mask - info.supported_all();
    if !unsupported.is_empty() {
        return Err(LayoutError::Unsupported(unsupported).into());
    }
    Ok(())
}

/// Converts a compacted-format image (as saved by XSAVEC, or by [`compact`])
/// to the standard format for `xcr0` (as XSAVE would have saved it), writing
/// the standard size for `xcr0` into `dst` (bytes past it are untouched).
///
/// Components not in XSTATE_BV get their init values; gaps between
/// components are zeroed. Errors if the image holds state `xcr0` cannot
/// represent (supervisor state, or components outside `xcr0`).
///
/// See [`compact`] for a round trip.
///
/// # Errors
/// The first failed check, in this order:
/// - [`ConvertError::SourceTooSmall`]: `src` is shorter than 576 bytes;
/// - [`ConvertError::NotCompacted`]: `src`'s XCOMP_BV bit 63 is clear;
/// - [`ConvertError::XstateBvOutsideXcompBv`]: `src`'s XSTATE_BV has bits
///   outside its XCOMP_BV;
/// - [`ConvertError::StateNotRequested`]: `src`'s XSTATE_BV has bits outside
///   `xcr0` (supervisor state included);
/// - [`ConvertError::Layout`]: `xcr0` has bit 63 ([`LayoutError::Bit63`]),
///   supervisor components ([`LayoutError::SupervisorInStandard`]) or
///   components outside the supported XCR0 ([`LayoutError::Unsupported`]),
///   or XCOMP_BV holds components `info` does not enumerate
///   ([`LayoutError::Unsupported`]);
/// - [`ConvertError::SourceTooSmall`]: `src` ends before the last component
///   its XSTATE_BV marks present (at its compacted offset);
/// - [`ConvertError::DestinationTooSmall`]: `dst` is shorter than the
///   standard size of `xcr0`.
///
/// # Examples
/// An XSAVEC image with XCOMP_BV = x87 | SSE | PKRU (AVX not requested),
/// as a guest kernel saves it, expanded for KVM_SET_XSAVE on an AMD host:
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
/// use xstate::{expand, ConvertError, XfeatureMask};
/// let xcomp_bv = 0x203u64 | 1 << 63;
/// let mut packed = vec![0u8; 584];
/// packed[24..28].copy_from_slice(&0x1f80u32.to_le_bytes()); // MXCSR
/// packed[512..520].copy_from_slice(&0x203u64.to_le_bytes()); // XSTATE_BV
/// packed[520..528].copy_from_slice(&xcomp_bv.to_le_bytes()); // XCOMP_BV
/// packed[576..580].copy_from_slice(&0x5555_5554u32.to_le_bytes()); // PKRU
/// let xcr0 = XfeatureMask::from_bits(0x207);
/// let mut standard = vec![0xffu8; 2440];
/// expand(&info, &packed, &mut standard, xcr0)?;
/// // PKRU moves to its standard offset; AVX is zero (init); XCOMP_BV is 0.
/// assert_eq!(standard[2432..2436], 0x5555_5554u32.to_le_bytes());
/// assert!(standard[576..832].iter().all(|&b| b == 0));
/// assert_eq!(standard[512..528], [3, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
/// // A guest XCR0 without PKRU cannot hold that state.
/// assert_eq!(
///     expand(&info, &packed, &mut standard, XfeatureMask::AVX),
///     Err(ConvertError::StateNotRequested(XfeatureMask::from_bits(0x200)))
/// );
/// # Ok::<(), ConvertError>(())
/// ```
pub fn expand(
    info: &XsaveInfo,
    src: &[u8],
    dst: &mut [u8],
    xcr0: XfeatureMask,
) -> Result<(), ConvertError> {
    #[cfg(target_arch = "x86_64")]
    match crate::area::level() {
        // SAFETY: `level` reported AVX-512F (CPUID and XCR0) on this CPU.
        crate::area::AVX512 => return unsafe { wide::expand_avx512(info, src, dst, xcr0) },
        // SAFETY: `level` reported AVX2 (CPUID and XCR0) on this CPU.
        crate::area::AVX2 => return unsafe { wide::expand_avx2(info, src, dst, xcr0) },
        _ => {}
    }
    expand_sse2(info, src, dst, xcr0)
}

/// [`expand`] with 16-byte moves, out of line so that [`expand`] itself
/// stays a dispatcher.
#[inline(never)]
fn expand_sse2(
    info: &XsaveInfo,
    src: &[u8],
    dst: &mut [u8],
    xcr0: XfeatureMask,
) -> Result<(), ConvertError> {
    expand_in::<SSE2>(info, src, dst, xcr0)
}

/// [`expand`] with level-`L` copies.
#[inline(always)]
fn expand_in<const L: u8>(
    info: &XsaveInfo,
    src: &[u8],
    dst: &mut [u8],
    xcr0: XfeatureMask,
) -> Result<(), ConvertError> {
    require_source(src, XSAVE_MIN_SIZE)?;
    let xcomp = header_xcomp_bv(src);
    if xcomp & XCOMP_BV_COMPACTED == 0 {
        return Err(ConvertError::NotCompacted { xcomp_bv: xcomp });
    }
    let comp = XfeatureMask::from_bits(xcomp & !XCOMP_BV_COMPACTED);
    let bv = XfeatureMask::from_bits(header_xstate_bv(src));
    let outside = bv - comp;
    if !outside.is_empty() {
        return Err(ConvertError::XstateBvOutsideXcompBv(outside));
    }
    let outside = bv - xcr0;
    if !outside.is_empty() {
        return Err(ConvertError::StateNotRequested(outside));
    }
    if xcr0.contains_index(63) {
        return Err(LayoutError::Bit63.into());
    }
    let sup = xcr0 & info.supported_xss();
    if !sup.is_empty() {
        return Err(LayoutError::SupervisorInStandard(sup).into());
    }
    let unsupported = xcr0 - info.supported_xcr0();
    if !unsupported.is_empty() {
        return Err(LayoutError::Unsupported(unsupported).into());
    }
    let mut offs = [0u32; 64];
    compacted_offsets(info, comp, &mut offs)?;
    // The source must hold every component it marks present.
    let mut need = XSAVE_MIN_SIZE;
    for i in bv.iter_indices().filter(|&i| i >= 2) {
        need = need.max(offs[i as usize] as usize + info.raw_size_offset(i).0 as usize);
    }
    require_source(src, need)?;
    let total = standard_end(info, xcr0);
    require_destination(dst, total)?;
    copy_legacy::<L>(src, dst, bv.bits());
    // Extended components in ascending standard offset, zeroing the gaps
    // (user components never overlap: checked by XsaveInfo).
    let mut cursor = XSAVE_MIN_SIZE;
    for &i in info.standard_order() {
        let i = u32::from(i);
        if !xcr0.contains_index(i) {
            continue;
        }
        let (size, off) = info.raw_size_offset(i);
        let (size, off) = (size as usize, off as usize);
        zero_at::<L>(&mut dst[cursor..off]);
        let d = &mut dst[off..off + size];
        if bv.contains_index(i) {
            let c = offs[i as usize] as usize;
            copy_at::<L>(d, &src[c..c + size]);
        } else {
            zero_at::<L>(d);
        }
        cursor = off + size;
    }
    zero_at::<L>(&mut dst[cursor..total]);
    write_header(dst, bv.bits(), 0);
    Ok(())
}

#[cfg(feature = "std")]
mod owned {
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
}

#[cfg(feature = "std")]
pub use owned::{compact_to_buf, expand_to_standard};

/// Why a conversion failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvertError {
    /// The source is shorter than its header or components require.
    SourceTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The destination is shorter than the converted image.
    DestinationTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// A standard-format source was expected but XCOMP_BV is not 0.
    NotStandard {
        /// The source's XCOMP_BV.
        xcomp_bv: u64,
    },
    /// A compacted-format source was expected but XCOMP_BV bit 63 is clear.
    NotCompacted {
        /// The source's XCOMP_BV.
        xcomp_bv: u64,
    },
    /// The source's XSTATE_BV names components the CPU does not support.
    Unsupported(XfeatureMask),
    /// The source's XSTATE_BV has bits outside its XCOMP_BV.
    XstateBvOutsideXcompBv(XfeatureMask),
    /// The source holds (non-init) state for components the target mask lacks.
    StateNotRequested(XfeatureMask),
    /// A layout could not be computed.
    Layout(LayoutError),
    /// The XCR0 value is invalid.
    Xcr0(Xcr0Error),
}

impl From<LayoutError> for ConvertError {
    fn from(e: LayoutError) -> Self {
        ConvertError::Layout(e)
    }
}

impl From<Xcr0Error> for ConvertError {
    fn from(e: Xcr0Error) -> Self {
        ConvertError::Xcr0(e)
    }
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConvertError::SourceTooSmall { need, have } => {
                write!(f, "xsave source too small: {have} bytes, need {need}")
            }
            ConvertError::DestinationTooSmall { need, have } => {
                write!(f, "xsave destination too small: {have} bytes, need {need}")
            }
            ConvertError::NotStandard { xcomp_bv } => write!(
                f,
                "xsave source is not in the standard format (XCOMP_BV {xcomp_bv:#x}, expected 0)"
            ),
            ConvertError::NotCompacted { xcomp_bv } => write!(
                f,
                "xsave source is not in the compacted format (XCOMP_BV {xcomp_bv:#x}, bit 63 clear)"
            ),
            ConvertError::Unsupported(m) => {
                write!(
                    f,
                    "xsave source holds components {m} ({m:#x}) the CPU does not support"
                )
            }
            ConvertError::XstateBvOutsideXcompBv(m) => {
                write!(
                    f,
                    "xsave source: XSTATE_BV has components {m} ({m:#x}) outside XCOMP_BV"
                )
            }
            ConvertError::StateNotRequested(m) => write!(
                f,
                "xsave source holds live state for components {m} ({m:#x}) the target mask lacks"
            ),
            ConvertError::Layout(e) => fmt::Display::fmt(e, f),
            ConvertError::Xcr0(e) => fmt::Display::fmt(e, f),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ConvertError {}

#[cfg(test)]
mod tests {
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
                return Some(wide::compact_short_avx512(info, src, requested, dst))
                    .filter(|&n| n != 0);
            }
            if l == crate::area::AVX2 {
                return Some(wide::compact_short_avx2(info, src, requested, dst))
                    .filter(|&n| n != 0);
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
}
