//! The fixed part of every XSAVE area, whatever its format: the 512-byte
//! legacy (FXSAVE64) region and the 64-byte XSAVE header, their byte map,
//! the init values of the two legacy components, and little-endian field
//! access.
//!
//! Every other module that touches bytes of an area (views, validation,
//! conversions, the initial image) names offsets and init values from here,
//! so each has one name.
//!
//! Legacy region (bytes 0..512):
//!
//! | bytes | field | component |
//! |---|---|---|
//! | 0..2 | FCW | x87 |
//! | 2..4 | FSW | x87 |
//! | 4 | FTW, abridged (1 bit per register, 1 = valid) | x87 |
//! | 6..8 | FOP | x87 |
//! | 8..16 | FIP | x87 |
//! | 16..24 | FDP | x87 |
//! | 24..28 | MXCSR | SSE (see [`crate::convert`]) |
//! | 28..32 | MXCSR_MASK (read-only CPU capability) | none |
//! | 32..160 | ST0-7 / MM0-7, 16 bytes each (10 used) | x87 |
//! | 160..416 | XMM0-15 | SSE |
//! | 416..512 | available to software | none |
//!
//! Header (bytes 512..576): XSTATE_BV (u64), XCOMP_BV (u64, bit 63 = compacted
//! format), then 48 bytes that must be zero.

use core::ops::Range;

/// Required alignment of an XSAVE area.
pub const XSAVE_ALIGN: usize = 64;
/// Minimum size of an XSAVE area (legacy region + header): also where the
/// extended region, and the first compacted component, starts.
pub const XSAVE_MIN_SIZE: usize = 576;
/// XCOMP_BV bit 63: the area is in the compacted format.
pub const XCOMP_BV_COMPACTED: u64 = 1 << 63;
/// x87 control word after FNINIT / in the x87 init state.
pub const FCW_INIT: u16 = 0x037f;
/// MXCSR at reset and in the SSE init state (all exceptions masked, round to
/// nearest).
pub const MXCSR_INIT: u32 = 0x1f80;
/// MXCSR_MASK to assume when an image holds 0 there (as FXSAVE defines).
pub const MXCSR_MASK_DEFAULT: u32 = 0xffbf;

/// Byte offsets inside the legacy region and header.
pub mod offsets {
    /// x87 control word.
    pub const FCW: usize = 0;
    /// x87 status word.
    pub const FSW: usize = 2;
    /// Abridged x87 tag word.
    pub const FTW: usize = 4;
    /// Last x87 opcode.
    pub const FOP: usize = 6;
    /// Last x87 instruction pointer.
    pub const FIP: usize = 8;
    /// Last x87 data pointer.
    pub const FDP: usize = 16;
    /// MXCSR.
    pub const MXCSR: usize = 24;
    /// MXCSR_MASK.
    pub const MXCSR_MASK: usize = 28;
    /// ST0/MM0 (8 registers, 16 bytes apart).
    pub const ST0: usize = 32;
    /// XMM0 (16 registers, 16 bytes apart).
    pub const XMM0: usize = 160;
    /// First byte of the software-available part of the legacy region.
    pub const SW_AVAILABLE: usize = 416;
    /// XSTATE_BV, the first header field (the legacy region ends here).
    pub const XSTATE_BV: usize = 512;
    /// XCOMP_BV.
    pub const XCOMP_BV: usize = 520;
    /// First reserved header byte (header bytes 16..63 must be zero).
    pub const HEADER_RESERVED: usize = 528;
}

use offsets as o;

/// x87 state before MXCSR: FCW, FSW, FTW, FOP, FIP, FDP.
pub(crate) const X87_ENV: Range<usize> = o::FCW..o::MXCSR;
/// x87 registers ST0-7.
pub(crate) const X87_REGS: Range<usize> = o::ST0..o::XMM0;
/// SSE registers XMM0-15.
pub(crate) const XMM_REGS: Range<usize> = o::XMM0..o::SW_AVAILABLE;
/// MXCSR.
pub(crate) const MXCSR: Range<usize> = o::MXCSR..o::MXCSR + 4;
/// MXCSR_MASK.
pub(crate) const MXCSR_MASK: Range<usize> = o::MXCSR_MASK..o::MXCSR_MASK + 4;
/// Header bytes 16..63, which must be zero.
pub(crate) const HEADER_RESERVED: Range<usize> = o::HEADER_RESERVED..XSAVE_MIN_SIZE;

pub(crate) fn rd_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(crate) fn rd_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}
pub(crate) fn rd_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}
pub(crate) fn rd_16(b: &[u8], at: usize) -> [u8; 16] {
    let mut a = [0; 16];
    a.copy_from_slice(&b[at..at + 16]);
    a
}
pub(crate) fn wr_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn wr_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn wr_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn wr_16(b: &mut [u8], at: usize, v: [u8; 16]) {
    b[at..at + 16].copy_from_slice(&v);
}

/// XSTATE_BV of an area of at least [`XSAVE_MIN_SIZE`] bytes.
pub(crate) fn header_xstate_bv(b: &[u8]) -> u64 {
    rd_u64(b, o::XSTATE_BV)
}
/// XCOMP_BV of an area of at least [`XSAVE_MIN_SIZE`] bytes.
pub(crate) fn header_xcomp_bv(b: &[u8]) -> u64 {
    rd_u64(b, o::XCOMP_BV)
}

/// Writes the header: both bit vectors, reserved bytes zeroed.
pub(crate) fn write_header(a: &mut [u8], xstate_bv: u64, xcomp_bv: u64) {
    wr_u64(a, o::XSTATE_BV, xstate_bv);
    wr_u64(a, o::XCOMP_BV, xcomp_bv);
    a[HEADER_RESERVED].fill(0);
}

/// Copies `src` to `dst` (equal lengths; a component or a legacy field) as
/// 64-byte blocks, then 16-, 8- and 1-byte pieces, each a fixed-size array
/// copy that the compiler lowers to vector moves in line: no call to
/// `memcpy` and no `rep movs` start-up, which costs more than the copy for
/// the small components of an XSAVE area (8 to 1024 bytes).
///
/// # Panics
/// If the lengths differ (as `copy_from_slice` does; callers slice both
/// with the same range).
#[inline]
pub(crate) fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_bytes: length mismatch");
    let mut d64 = dst.chunks_exact_mut(64);
    let mut s64 = src.chunks_exact(64);
    for (d, s) in (&mut d64).zip(&mut s64) {
        copy_block::<64>(d, s);
    }
    let mut d16 = d64.into_remainder().chunks_exact_mut(16);
    let mut s16 = s64.remainder().chunks_exact(16);
    for (d, s) in (&mut d16).zip(&mut s16) {
        copy_block::<16>(d, s);
    }
    let mut d8 = d16.into_remainder().chunks_exact_mut(8);
    let mut s8 = s16.remainder().chunks_exact(8);
    for (d, s) in (&mut d8).zip(&mut s8) {
        copy_block::<8>(d, s);
    }
    for (d, s) in d8.into_remainder().iter_mut().zip(s8.remainder()) {
        *d = *s;
    }
}

/// One `N`-byte block as a fixed-size array copy (both slices are `N`
/// bytes: they come from `chunks_exact(N)`).
#[inline(always)]
fn copy_block<const N: usize>(d: &mut [u8], s: &[u8]) {
    if let (Ok(d), Ok(s)) = (<&mut [u8; N]>::try_from(d), <&[u8; N]>::try_from(s)) {
        *d = *s;
    }
}

/// Zeroes `dst` as [`copy_bytes`] copies: fixed-size blocks, in line.
#[inline]
pub(crate) fn zero_bytes(dst: &mut [u8]) {
    let mut d64 = dst.chunks_exact_mut(64);
    for d in &mut d64 {
        if let Ok(d) = <&mut [u8; 64]>::try_from(d) {
            *d = [0; 64];
        }
    }
    let mut d8 = d64.into_remainder().chunks_exact_mut(8);
    for d in &mut d8 {
        if let Ok(d) = <&mut [u8; 8]>::try_from(d) {
            *d = [0; 8];
        }
    }
    for d in d8.into_remainder() {
        *d = 0;
    }
}

/// Whether every byte is zero (the init value of every component but x87
/// and SSE).
pub(crate) fn all_zero(b: &[u8]) -> bool {
    let mut chunks = b.chunks_exact(64);
    for c in &mut chunks {
        // Folding without early exit inside a block lets the compiler vectorise.
        if c.iter().fold(0u8, |a, &x| a | x) != 0 {
            return false;
        }
    }
    chunks.remainder().iter().all(|&x| x == 0)
}

/// Whether MXCSR holds its init value 0x1F80.
pub(crate) fn mxcsr_is_init(a: &[u8]) -> bool {
    a[MXCSR] == MXCSR_INIT.to_le_bytes()
}

/// Whether the x87 state of the legacy region is its init value.
pub(crate) fn x87_is_init(a: &[u8]) -> bool {
    a[0..2] == FCW_INIT.to_le_bytes() && all_zero(&a[2..o::MXCSR]) && all_zero(&a[X87_REGS])
}

/// Whether the SSE state (XMM0-15 and MXCSR) is its init value.
pub(crate) fn sse_is_init(a: &[u8]) -> bool {
    mxcsr_is_init(a) && all_zero(&a[XMM_REGS])
}

/// Writes the x87 init value.
pub(crate) fn write_x87_init(a: &mut [u8]) {
    a[X87_ENV].fill(0);
    a[X87_REGS].fill(0);
    wr_u16(a, o::FCW, FCW_INIT);
}

/// Writes the SSE init value.
pub(crate) fn write_sse_init(a: &mut [u8]) {
    a[XMM_REGS].fill(0);
    wr_u32(a, o::MXCSR, MXCSR_INIT);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length from 0 to 1100 bytes (every component size and every
    /// remainder of the 64/16/8-byte blocks), at odd offsets: exactly the
    /// range is copied or zeroed, nothing around it.
    #[test]
    fn copy_and_zero_bytes_touch_exactly_their_range() {
        let src: [u8; 1200] = core::array::from_fn(|i| (i as u8).wrapping_mul(31) | 1);
        for len in 0..1100 {
            let mut dst = [0xeeu8; 1200];
            copy_bytes(&mut dst[3..3 + len], &src[5..5 + len]);
            assert_eq!(&dst[3..3 + len], &src[5..5 + len], "len {len}");
            assert!(dst[..3].iter().chain(&dst[3 + len..]).all(|&b| b == 0xee));
            zero_bytes(&mut dst[7..7 + len]);
            assert!(dst[7..7 + len].iter().all(|&b| b == 0), "len {len}");
            assert!(dst[7 + len..].iter().all(|&b| b == 0xee));
        }
    }
}
