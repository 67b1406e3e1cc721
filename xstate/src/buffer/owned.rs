//! [`XsaveBuf`]: an owned XSAVE area on the heap (`std`), for the VMM's
//! images of KVM_GET_XSAVE, snapshots and conversions, with the same typed
//! accessors as the borrowed views of [`super`].

use super::*;
use std::vec::Vec;

/// An owned, heap-allocated, 64-byte-aligned XSAVE area.
///
/// The storage is over-allocated by up to 63 bytes and the area starts at
/// the first 64-byte boundary inside it; the vector is never resized, so
/// the offset stays valid (and no `unsafe` is needed).
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
/// use xstate::{Format, Xfeature, XfeatureMask, XsaveBuf};
/// let layout = info.layout(XfeatureMask::from_bits(0x207), Format::Standard)?;
/// let mut buf = XsaveBuf::new(layout.total_size() as usize);
/// assert_eq!((buf.len(), buf.as_bytes().as_ptr() as usize % 64), (2440, 0));
/// // YMM3 = XMM3 (legacy region) + its upper half (AVX component).
/// buf.set_xmm(3, [1; 16]);
/// assert!(buf.set_ymm_hi(3, &layout, [2; 16]));
/// buf.set_xstate_bv(XfeatureMask::AVX);
/// assert_eq!(buf.ymm_hi(3, &layout), Some([2; 16]));
/// assert_eq!(buf.as_bytes()[576 + 3 * 16], 2); // AVX starts at 576
/// assert_eq!(buf.component(Xfeature::Pkru, &layout), Some(&[0u8; 8][..]));
/// # Ok::<(), xstate::LayoutError>(())
/// ```
pub struct XsaveBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl XsaveBuf {
    /// A zeroed area of `len` bytes (at least 576: smaller requests are
    /// rounded up to the legacy region plus header).
    pub fn new(len: usize) -> Self {
        let len = len.max(XSAVE_MIN_SIZE);
        let storage = vec![0u8; len + XSAVE_ALIGN - 1];
        let start = storage.as_ptr().align_offset(XSAVE_ALIGN);
        Self {
            storage,
            start,
            len,
        }
    }

    /// A copy of `bytes` in aligned memory.
    ///
    /// # Errors
    /// [`BufferError::TooSmall`] if `bytes` is shorter than 576 bytes
    /// (legacy region plus header).
    ///
    /// # Examples
    /// ```
    /// use xstate::{BufferError, XsaveBuf};
    /// // A KVM_GET_XSAVE image read back from a snapshot file.
    /// let mut image = vec![0u8; 4096];
    /// image[512] = 0x7; // XSTATE_BV: x87 | SSE | AVX
    /// let buf = XsaveBuf::from_bytes(&image)?;
    /// assert_eq!((buf.len(), buf.xstate_bv()), (4096, 0x7));
    /// assert_eq!(
    ///     XsaveBuf::from_bytes(&image[..100]),
    ///     Err(BufferError::TooSmall { need: 576, have: 100 })
    /// );
    /// # Ok::<(), BufferError>(())
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, BufferError> {
        require_len(bytes.len(), XSAVE_MIN_SIZE)?;
        let mut b = Self::new(bytes.len());
        b.bytes_mut().copy_from_slice(bytes);
        Ok(b)
    }

    fn bytes(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }

    /// A borrowed read-only view.
    pub fn view(&self) -> XsaveRef<'_> {
        XsaveRef {
            bytes: self.bytes(),
        }
    }

    /// A borrowed writable view.
    pub fn view_mut(&mut self) -> XsaveMut<'_> {
        let start = self.start;
        let len = self.len;
        XsaveMut {
            bytes: &mut self.storage[start..start + len],
        }
    }

    /// Copies into a plain vector.
    pub fn to_vec(&self) -> Vec<u8> {
        self.bytes().to_vec()
    }

    read_accessors!();
    write_accessors!();
}

impl Clone for XsaveBuf {
    fn clone(&self) -> Self {
        let mut b = Self::new(self.len);
        b.bytes_mut().copy_from_slice(self.bytes());
        b
    }
}

impl PartialEq for XsaveBuf {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}
impl Eq for XsaveBuf {}

impl fmt::Debug for XsaveBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_area(f, "XsaveBuf", self.bytes())
    }
}

impl AsRef<[u8]> for XsaveBuf {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}
impl AsMut<[u8]> for XsaveBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self.bytes_mut()
    }
}
