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

#[cfg(target_arch = "x86_64")]
mod wide;

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
mod owned;

#[cfg(feature = "std")]
pub use owned::{compact_to_buf, expand_to_standard};

mod error;

pub use error::ConvertError;

#[cfg(test)]
mod tests;
