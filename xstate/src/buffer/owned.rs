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
