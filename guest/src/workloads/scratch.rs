//! Carving typed, 64-byte-aligned buffers out of the caller's scratch bytes.
//!
//! The workloads never allocate: the guest kernel hands them a region of its
//! identity-mapped memory and the VMM a heap buffer, as `&mut [u8]` of any
//! alignment.

/// Cache-line alignment of every carved buffer (also what AVX-512 loads like).
pub const ALIGN: usize = 64;

/// Bytes `count` elements of `T` take, rounded up to [`ALIGN`], plus the
/// worst-case alignment loss of one buffer.
pub const fn bytes_for<T>(count: usize) -> usize {
    (count * core::mem::size_of::<T>()).div_ceil(ALIGN) * ALIGN + ALIGN
}

/// What is left of the scratch region.
pub struct Scratch<'a> {
    rest: &'a mut [u8],
}

/// Element types any bit pattern is a valid value of.
///
/// # Safety
/// Implementors must be plain data: every bit pattern valid, no padding,
/// alignment at most [`ALIGN`].
pub unsafe trait Pod: Copy {}
// SAFETY: integers and floats are plain data of alignment <= 8.
unsafe impl Pod for u8 {}
// SAFETY: as above.
unsafe impl Pod for u32 {}
// SAFETY: as above.
unsafe impl Pod for u64 {}
// SAFETY: as above.
unsafe impl Pod for usize {}
// SAFETY: as above.
unsafe impl Pod for f64 {}

impl<'a> Scratch<'a> {
    /// Hands out `bytes` front to back.
    pub fn new(bytes: &'a mut [u8]) -> Self {
        Scratch { rest: bytes }
    }

    /// Bytes left (before alignment).
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// A 64-byte-aligned slice of `count` elements (contents unspecified:
    /// whatever the previous user left), or None when the scratch is short.
    pub fn take<T: Pod>(&mut self, count: usize) -> Option<&'a mut [T]> {
        let rest = core::mem::take(&mut self.rest);
        let pad = rest.as_ptr().align_offset(ALIGN);
        let need = count.checked_mul(core::mem::size_of::<T>())?;
        let Some(total) = pad.checked_add(need).filter(|&t| t <= rest.len()) else {
            self.rest = rest;
            return None;
        };
        let (head, tail) = rest.split_at_mut(total);
        // Keep the next buffer cache-line aligned too: the tail's own
        // alignment padding is applied on the next take.
        self.rest = tail;
        let bytes = &mut head[pad..];
        // SAFETY: `bytes` is exactly `count * size_of::<T>()` bytes starting
        // at a 64-byte boundary (>= align_of::<T>() for a Pod type), it is
        // exclusively borrowed for 'a, and every bit pattern is a valid T.
        Some(unsafe { core::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<T>(), count) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_bounded() {
        let mut backing = [0u8; 1024];
        let mut s = Scratch::new(&mut backing[3..]);
        let a = s.take::<f64>(10).unwrap();
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
        assert_eq!(a.len(), 10);
        let b = s.take::<u8>(5).unwrap();
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
        assert!(b.as_ptr() as usize >= a.as_ptr() as usize + 80);
        assert!(s.take::<f64>(1000).is_none());
        // A failed take leaves the rest usable.
        assert!(s.take::<f64>(8).is_some());
        assert!(s.take::<f64>(usize::MAX / 4).is_none());
        assert!(bytes_for::<f64>(10) >= 80 + 63);
    }
}
