//! Fixed-capacity ASCII text for skip reasons, formatted without allocation.

use core::fmt;

/// A NUL-padded ASCII buffer written through [`core::fmt::Write`]; text that
/// does not fit is cut off rather than failing, so a reason is never lost
/// entirely because it was a few characters too long.
#[derive(Clone, Copy)]
pub struct FixedText<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> FixedText<N> {
    /// Empty text.
    pub const fn new() -> Self {
        FixedText {
            buf: [0; N],
            len: 0,
        }
    }

    /// Text holding `s` (truncated to `N` bytes).
    pub fn of(s: &str) -> Self {
        let mut t = Self::new();
        t.push(s);
        t
    }

    /// Append `s`, truncating at capacity; non-ASCII bytes become `?`.
    pub fn push(&mut self, s: &str) {
        for &c in s.as_bytes() {
            if self.len == N {
                return;
            }
            self.buf[self.len] = if c.is_ascii() { c } else { b'?' };
            self.len += 1;
        }
    }

    /// The text written so far.
    pub fn as_str(&self) -> &str {
        // Only ASCII bytes are ever stored.
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }

    /// The NUL-padded field for a protocol record.
    pub fn field(&self) -> [u8; N] {
        self.buf
    }
}

impl<const N: usize> Default for FixedText<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> fmt::Write for FixedText<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push(s);
        Ok(())
    }
}

impl<const N: usize> fmt::Debug for FixedText<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<const N: usize> fmt::Display for FixedText<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<const N: usize> PartialEq for FixedText<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

/// Why a workload variant was skipped or failed: sized for
/// [`crate::protocol::SkipRecord::reason`].
pub type Reason = FixedText<{ crate::protocol::REASON_LEN }>;

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Write;

    #[test]
    fn formats_and_truncates() {
        let mut t = FixedText::<8>::new();
        write!(t, "xcr0 {:#x}", 0x3).unwrap();
        assert_eq!(t.as_str(), "xcr0 0x3");
        write!(t, "more").unwrap();
        assert_eq!(t.as_str(), "xcr0 0x3");
        assert_eq!(FixedText::<4>::of("abcdef").as_str(), "abcd");
        assert_eq!(FixedText::<4>::of("ab").field(), *b"ab\0\0");
    }
}
