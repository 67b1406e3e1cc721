//! The conversions compiled for the wider vector levels: each only sets the
//! target feature and inlines the generic body.

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
