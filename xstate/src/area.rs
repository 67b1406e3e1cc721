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

mod copy;
pub(crate) use copy::{copy_at, zero_at, SSE2};
#[cfg(target_arch = "x86_64")]
pub(crate) use copy::{detected_level, level, AVX2, AVX512};

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
/// In line, as one 64-byte block (one bounds check, no `memset` call):
/// the conversions' short paths end with it.
#[inline(always)]
pub(crate) fn write_header(a: &mut [u8], xstate_bv: u64, xcomp_bv: u64) {
    let mut h = [0u8; XSAVE_MIN_SIZE - o::XSTATE_BV];
    h[..8].copy_from_slice(&xstate_bv.to_le_bytes());
    h[8..16].copy_from_slice(&xcomp_bv.to_le_bytes());
    a[o::XSTATE_BV..XSAVE_MIN_SIZE].copy_from_slice(&h);
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
#[inline(always)]
pub(crate) fn write_x87_init(a: &mut [u8]) {
    a[X87_ENV].fill(0);
    a[X87_REGS].fill(0);
    wr_u16(a, o::FCW, FCW_INIT);
}

/// Writes the SSE init value.
#[inline(always)]
pub(crate) fn write_sse_init(a: &mut [u8]) {
    a[XMM_REGS].fill(0);
    wr_u32(a, o::MXCSR, MXCSR_INIT);
}
