//! XSAVE areas in memory: typed access to the legacy region, the header and
//! each component, as a borrowed view over caller memory ([`XsaveRef`],
//! [`XsaveMut`]; `no_std`, no allocation) or, with `std`, an owned 64-byte
//! aligned heap buffer ([`XsaveBuf`]).
//!
//! The byte map these accessors follow is [`crate::area`] (re-exported here:
//! [`offsets`], [`XSAVE_MIN_SIZE`], ...). Checking an image before XRSTOR
//! is [`crate::validate()`]; building the initial image is [`crate::init`].

use core::fmt;

use crate::area::{self, header_xcomp_bv, header_xstate_bv, offsets as o};
pub use crate::area::{
    offsets, FCW_INIT, MXCSR_INIT, MXCSR_MASK_DEFAULT, XCOMP_BV_COMPACTED, XSAVE_ALIGN,
    XSAVE_MIN_SIZE,
};
use crate::area::{rd_16, rd_u16, rd_u32, rd_u64, wr_16, wr_u16, wr_u32, wr_u64};
use crate::feature::Xfeature;
use crate::layout::{Format, Layout, LayoutError};
use crate::mask::XfeatureMask;

/// Read accessors shared by the three buffer types (each has `fn bytes`).
macro_rules! read_accessors {
    () => {
        /// The whole area.
        pub fn as_bytes(&self) -> &[u8] {
            self.bytes()
        }
        /// Length of the area in bytes.
        pub fn len(&self) -> usize {
            self.bytes().len()
        }
        /// Always false: an area holds at least the legacy region and header.
        pub fn is_empty(&self) -> bool {
            self.bytes().is_empty()
        }
        /// XSTATE_BV: components whose state the area holds (clear = init state).
        pub fn xstate_bv(&self) -> u64 {
            header_xstate_bv(self.bytes())
        }
        /// XSTATE_BV as a mask.
        pub fn xstate_bv_mask(&self) -> XfeatureMask {
            XfeatureMask::from_bits(self.xstate_bv())
        }
        /// XCOMP_BV: bit 63 = compacted format, other bits = the components laid out.
        pub fn xcomp_bv(&self) -> u64 {
            header_xcomp_bv(self.bytes())
        }
        /// XCOMP_BV without bit 63, as a mask.
        pub fn xcomp_bv_mask(&self) -> XfeatureMask {
            XfeatureMask::from_bits(self.xcomp_bv() & !XCOMP_BV_COMPACTED)
        }
        /// Whether XCOMP_BV bit 63 marks the compacted format.
        pub fn is_compacted(&self) -> bool {
            self.xcomp_bv() & XCOMP_BV_COMPACTED != 0
        }
        /// The format named by XCOMP_BV bit 63.
        pub fn format(&self) -> Format {
            if self.is_compacted() {
                Format::Compacted
            } else {
                Format::Standard
            }
        }
        /// x87 control word.
        pub fn fcw(&self) -> u16 {
            rd_u16(self.bytes(), o::FCW)
        }
        /// x87 status word.
        pub fn fsw(&self) -> u16 {
            rd_u16(self.bytes(), o::FSW)
        }
        /// Abridged x87 tag word (bit i set = ST(i) physical register valid).
        pub fn ftw(&self) -> u8 {
            self.bytes()[o::FTW]
        }
        /// Last x87 opcode.
        pub fn fop(&self) -> u16 {
            rd_u16(self.bytes(), o::FOP)
        }
        /// Last x87 instruction pointer.
        pub fn fip(&self) -> u64 {
            rd_u64(self.bytes(), o::FIP)
        }
        /// Last x87 data pointer.
        pub fn fdp(&self) -> u64 {
            rd_u64(self.bytes(), o::FDP)
        }
        /// MXCSR.
        pub fn mxcsr(&self) -> u32 {
            rd_u32(self.bytes(), o::MXCSR)
        }
        /// MXCSR_MASK as saved.
        pub fn mxcsr_mask(&self) -> u32 {
            rd_u32(self.bytes(), o::MXCSR_MASK)
        }
        /// ST(i)/MM(i) slot, 16 bytes (80-bit value in the low 10).
        ///
        /// # Panics
        /// If `i >= 8`.
        pub fn st(&self, i: usize) -> [u8; 16] {
            assert!(i < 8, "x87 register index {i} out of range 0..8");
            rd_16(self.bytes(), o::ST0 + 16 * i)
        }
        /// XMM(i).
        ///
        /// # Panics
        /// If `i >= 16`.
        pub fn xmm(&self, i: usize) -> [u8; 16] {
            assert!(i < 16, "XMM register index {i} out of range 0..16");
            rd_16(self.bytes(), o::XMM0 + 16 * i)
        }
        /// Upper 128 bits of YMM(i) from the AVX component, if `layout` has it
        /// and the area covers it.
        ///
        /// # Panics
        /// If `i >= 16`.
        pub fn ymm_hi(&self, i: usize, layout: &Layout) -> Option<[u8; 16]> {
            assert!(i < 16, "YMM register index {i} out of range 0..16");
            self.component(Xfeature::Avx, layout)
                .map(|c| rd_16(c, 16 * i))
        }
        /// The bytes of component `f` under `layout` (`None` if the layout has
        /// no such component or the area is too short). For x87 and SSE this is
        /// their legacy range (0..160, 160..416; MXCSR is at bytes 24..28).
        pub fn component(&self, f: Xfeature, layout: &Layout) -> Option<&[u8]> {
            self.component_by_index(f.index(), layout)
        }
        /// Like `component`, by component index.
        pub fn component_by_index(&self, i: u32, layout: &Layout) -> Option<&[u8]> {
            layout.range_by_index(i).and_then(|r| self.bytes().get(r))
        }
        /// Whether header bytes 16..63 are all zero, as XRSTOR requires.
        pub fn header_reserved_is_zero(&self) -> bool {
            area::all_zero(&self.bytes()[area::HEADER_RESERVED])
        }
    };
}

/// Write accessors shared by [`XsaveMut`] and [`XsaveBuf`] (each has `fn bytes_mut`).
macro_rules! write_accessors {
    () => {
        /// The whole area, writable.
        pub fn as_bytes_mut(&mut self) -> &mut [u8] {
            self.bytes_mut()
        }
        /// Sets XSTATE_BV.
        pub fn set_xstate_bv(&mut self, bv: impl Into<u64>) {
            wr_u64(self.bytes_mut(), o::XSTATE_BV, bv.into());
        }
        /// Sets XCOMP_BV (including bit 63).
        pub fn set_xcomp_bv(&mut self, bv: u64) {
            wr_u64(self.bytes_mut(), o::XCOMP_BV, bv);
        }
        /// Sets the x87 control word.
        pub fn set_fcw(&mut self, v: u16) {
            wr_u16(self.bytes_mut(), o::FCW, v);
        }
        /// Sets the x87 status word.
        pub fn set_fsw(&mut self, v: u16) {
            wr_u16(self.bytes_mut(), o::FSW, v);
        }
        /// Sets the abridged x87 tag word.
        pub fn set_ftw(&mut self, v: u8) {
            self.bytes_mut()[o::FTW] = v;
        }
        /// Sets the last x87 opcode.
        pub fn set_fop(&mut self, v: u16) {
            wr_u16(self.bytes_mut(), o::FOP, v);
        }
        /// Sets MXCSR.
        pub fn set_mxcsr(&mut self, v: u32) {
            wr_u32(self.bytes_mut(), o::MXCSR, v);
        }
        /// Sets MXCSR_MASK.
        pub fn set_mxcsr_mask(&mut self, v: u32) {
            wr_u32(self.bytes_mut(), o::MXCSR_MASK, v);
        }
        /// Sets ST(i)/MM(i).
        ///
        /// # Panics
        /// If `i >= 8`.
        pub fn set_st(&mut self, i: usize, v: [u8; 16]) {
            assert!(i < 8, "x87 register index {i} out of range 0..8");
            wr_16(self.bytes_mut(), o::ST0 + 16 * i, v);
        }
        /// Sets XMM(i).
        ///
        /// # Panics
        /// If `i >= 16`.
        pub fn set_xmm(&mut self, i: usize, v: [u8; 16]) {
            assert!(i < 16, "XMM register index {i} out of range 0..16");
            wr_16(self.bytes_mut(), o::XMM0 + 16 * i, v);
        }
        /// Sets the upper half of YMM(i); returns false if `layout` has no AVX
        /// component or the area is too short.
        ///
        /// # Panics
        /// If `i >= 16`.
        pub fn set_ymm_hi(&mut self, i: usize, layout: &Layout, v: [u8; 16]) -> bool {
            assert!(i < 16, "YMM register index {i} out of range 0..16");
            match self.component_mut(Xfeature::Avx, layout) {
                Some(c) => {
                    c[16 * i..16 * i + 16].copy_from_slice(&v);
                    true
                }
                None => false,
            }
        }
        /// The bytes of component `f` under `layout`, writable.
        pub fn component_mut(&mut self, f: Xfeature, layout: &Layout) -> Option<&mut [u8]> {
            self.component_by_index_mut(f.index(), layout)
        }
        /// Like `component_mut`, by component index.
        pub fn component_by_index_mut(&mut self, i: u32, layout: &Layout) -> Option<&mut [u8]> {
            layout
                .range_by_index(i)
                .and_then(move |r| self.bytes_mut().get_mut(r))
        }
    };
}

/// `TooSmall` unless `have >= need`: the one length check of every entry
/// point that takes an area.
pub(crate) fn require_len(have: usize, need: usize) -> Result<(), BufferError> {
    if have < need {
        return Err(BufferError::TooSmall { need, have });
    }
    Ok(())
}

fn check_view(len: usize, addr: usize) -> Result<(), BufferError> {
    require_len(len, XSAVE_MIN_SIZE)?;
    if addr & (XSAVE_ALIGN - 1) != 0 {
        return Err(BufferError::Misaligned { addr });
    }
    Ok(())
}

/// A read-only XSAVE area over caller memory (64-byte aligned, >= 576 bytes).
#[derive(Clone, Copy)]
pub struct XsaveRef<'a> {
    bytes: &'a [u8],
}

impl<'a> XsaveRef<'a> {
    /// Wraps `bytes`, checking the 64-byte alignment XSAVE requires and the
    /// 576-byte minimum size.
    ///
    /// # Errors
    /// - [`BufferError::TooSmall`]: `bytes` is shorter than 576 bytes
    ///   (legacy region plus header), checked first;
    /// - [`BufferError::Misaligned`]: `bytes` does not start on a 64-byte
    ///   boundary (XSAVE and XRSTOR raise #GP on such an area).
    ///
    /// # Examples
    /// ```
    /// use xstate::{BufferError, Format, XsaveRef};
    /// #[repr(C, align(64))]
    /// struct Area([u8; 832]);
    /// let mut area = Area([0; 832]);
    /// area.0[24..28].copy_from_slice(&0x1f80u32.to_le_bytes()); // MXCSR
    /// area.0[512] = 0x3; // XSTATE_BV: x87 | SSE
    /// let view = XsaveRef::new(&area.0)?;
    /// assert_eq!((view.mxcsr(), view.xstate_bv()), (0x1f80, 0x3));
    /// assert_eq!(view.format(), Format::Standard); // XCOMP_BV = 0
    /// assert_eq!(
    ///     XsaveRef::new(&area.0[..512]).unwrap_err(),
    ///     BufferError::TooSmall { need: 576, have: 512 }
    /// );
    /// assert!(matches!(XsaveRef::new(&area.0[8..]), Err(BufferError::Misaligned { .. })));
    /// # Ok::<(), BufferError>(())
    /// ```
    pub fn new(bytes: &'a [u8]) -> Result<Self, BufferError> {
        check_view(bytes.len(), bytes.as_ptr() as usize)?;
        Ok(Self { bytes })
    }

    fn bytes(&self) -> &[u8] {
        self.bytes
    }

    /// The underlying slice with the view's lifetime.
    pub fn into_bytes(self) -> &'a [u8] {
        self.bytes
    }

    read_accessors!();
}

/// A writable XSAVE area over caller memory (64-byte aligned, >= 576 bytes),
/// e.g. a static buffer in the guest kernel.
pub struct XsaveMut<'a> {
    bytes: &'a mut [u8],
}

impl<'a> XsaveMut<'a> {
    /// Wraps `bytes`, checking alignment and minimum size.
    ///
    /// # Errors
    /// As [`XsaveRef::new`]: [`BufferError::TooSmall`] below 576 bytes,
    /// [`BufferError::Misaligned`] off a 64-byte boundary.
    ///
    /// # Examples
    /// ```
    /// use xstate::buffer::{offsets, FCW_INIT, MXCSR_INIT};
    /// use xstate::{XfeatureMask, XsaveMut};
    /// // A static-style buffer as the guest kernel keeps one, no allocation.
    /// #[repr(C, align(64))]
    /// struct Area([u8; 576]);
    /// let mut area = Area([0; 576]);
    /// let mut xs = XsaveMut::new(&mut area.0)?;
    /// xs.set_fcw(FCW_INIT);
    /// xs.set_mxcsr(MXCSR_INIT);
    /// xs.set_xmm(15, [0xab; 16]);
    /// xs.set_xstate_bv(XfeatureMask::LEGACY);
    /// assert_eq!(xs.xmm(15), [0xab; 16]);
    /// // XMM15 is the last of the 16-byte slots from offset 160.
    /// assert_eq!(area.0[offsets::XMM0 + 15 * 16], 0xab);
    /// assert_eq!(area.0[offsets::XSTATE_BV], 0x3);
    /// # Ok::<(), xstate::BufferError>(())
    /// ```
    pub fn new(bytes: &'a mut [u8]) -> Result<Self, BufferError> {
        check_view(bytes.len(), bytes.as_ptr() as usize)?;
        Ok(Self { bytes })
    }

    fn bytes(&self) -> &[u8] {
        self.bytes
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self.bytes
    }

    /// A read-only view of the same area.
    pub fn as_ref(&self) -> XsaveRef<'_> {
        XsaveRef { bytes: self.bytes }
    }

    read_accessors!();
    write_accessors!();
}

impl AsRef<[u8]> for XsaveRef<'_> {
    fn as_ref(&self) -> &[u8] {
        self.bytes
    }
}
impl AsRef<[u8]> for XsaveMut<'_> {
    fn as_ref(&self) -> &[u8] {
        self.bytes
    }
}
impl AsMut<[u8]> for XsaveMut<'_> {
    fn as_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
}

impl fmt::Debug for XsaveRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_area(f, "XsaveRef", self.bytes)
    }
}
impl fmt::Debug for XsaveMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_area(f, "XsaveMut", self.bytes)
    }
}

fn debug_area(f: &mut fmt::Formatter<'_>, name: &str, b: &[u8]) -> fmt::Result {
    f.debug_struct(name)
        .field("len", &b.len())
        .field("xstate_bv", &format_args!("{:#x}", header_xstate_bv(b)))
        .field("xcomp_bv", &format_args!("{:#x}", header_xcomp_bv(b)))
        .field("fcw", &format_args!("{:#x}", rd_u16(b, o::FCW)))
        .field("mxcsr", &format_args!("{:#x}", rd_u32(b, o::MXCSR)))
        .finish_non_exhaustive()
}

#[cfg(feature = "std")]
pub use owned::XsaveBuf;

#[cfg(feature = "std")]
mod owned;

/// Why an XSAVE area was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferError {
    /// The area is shorter than its header or format requires.
    TooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The area does not start on a 64-byte boundary.
    Misaligned {
        /// Its address.
        addr: usize,
    },
    /// Standard format (XCOMP_BV bit 63 clear) but XCOMP_BV is not zero.
    XcompBvInStandard(u64),
    /// Compacted format but the CPU has no XSAVEC / compacted XRSTOR.
    CompactedUnsupported,
    /// Standard format: XSTATE_BV has bits outside XCR0.
    XstateBvOutsideXcr0(XfeatureMask),
    /// Compacted format: XCOMP_BV has bits outside XCR0 | IA32_XSS.
    XcompBvOutsideEnabled(XfeatureMask),
    /// Compacted format: XSTATE_BV has bits outside XCOMP_BV.
    XstateBvOutsideXcompBv(XfeatureMask),
    /// Header bytes 16..63 must be zero; the first nonzero byte's offset.
    ReservedHeaderBytes {
        /// Offset in the area.
        offset: usize,
    },
    /// MXCSR sets bits reserved by MXCSR_MASK.
    MxcsrReserved {
        /// MXCSR in the image.
        mxcsr: u32,
        /// The mask applied.
        mask: u32,
    },
    /// The size needed could not be computed.
    Layout(LayoutError),
}

impl fmt::Display for BufferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BufferError::TooSmall { need, have } => {
                write!(f, "xsave area too small: {have} bytes, need {need}")
            }
            BufferError::Misaligned { addr } => {
                write!(f, "xsave area at {addr:#x} is not 64-byte aligned")
            }
            BufferError::XcompBvInStandard(v) => write!(
                f,
                "xsave header: XCOMP_BV {v:#x} must be 0 in the standard format (bit 63 clear)"
            ),
            BufferError::CompactedUnsupported => {
                f.write_str("xsave header: compacted format (XCOMP_BV bit 63) but the CPU has no XSAVEC")
            }
            BufferError::XstateBvOutsideXcr0(m) => {
                write!(f, "xsave header: XSTATE_BV has components {m} ({m:#x}) outside XCR0")
            }
            BufferError::XcompBvOutsideEnabled(m) => write!(
                f,
                "xsave header: XCOMP_BV has components {m} ({m:#x}) outside XCR0 | IA32_XSS"
            ),
            BufferError::XstateBvOutsideXcompBv(m) => write!(
                f,
                "xsave header: XSTATE_BV has components {m} ({m:#x}) outside XCOMP_BV"
            ),
            BufferError::ReservedHeaderBytes { offset } => write!(
                f,
                "xsave header: reserved byte at offset {offset} is nonzero (header bytes 16..63 must be 0)"
            ),
            BufferError::MxcsrReserved { mxcsr, mask } => write!(
                f,
                "xsave legacy region: MXCSR {mxcsr:#x} sets bits reserved by MXCSR_MASK {mask:#x}"
            ),
            BufferError::Layout(e) => write!(f, "xsave area: {e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BufferError {}
