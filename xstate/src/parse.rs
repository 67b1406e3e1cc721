//! The mask grammar: reading an [`XfeatureMask`] from what a user types on a
//! command line or in a config file (`0x2e7`, `x87,sse,avx`,
//! `host,-avx512`, `-amx`, `+pkru`).
//!
//! Parsing is `no_std` and allocation-free (the guest kernel parses masks
//! too), so an offending token is kept in a fixed-size [`Token`]. Parsing
//! does not validate: a parsed mask still has to pass
//! [`XfeatureMask::validate_xcr0`] before it is used as XCR0.

use core::fmt;

use crate::feature::Xfeature;
use crate::mask::XfeatureMask;

/// Named groups accepted by [`XfeatureMask::parse`] besides the component names.
const GROUPS: [(&str, XfeatureMask); 4] = [
    ("avx512", XfeatureMask::AVX512),
    ("amx", XfeatureMask::AMX),
    ("mpx", XfeatureMask::MPX),
    ("cet", XfeatureMask::CET),
];

impl XfeatureMask {
    /// Parses a mask.
    ///
    /// Accepted forms, comma-separated tokens, whitespace and case ignored:
    /// - a number: `0x2e7` (hex) or `743` (decimal);
    /// - a component short name (`x87`, `zmm_hi256`, ...) or `bitN` for an
    ///   unknown component N;
    /// - a group: `avx512`, `amx`, `mpx`, `cet`;
    /// - `host` or `all`: the `host` set passed in; `none`: nothing;
    /// - `+token` adds, `-token` removes; a bare token adds.
    ///
    /// Tokens apply left to right starting from the empty set, except that a
    /// string whose first token is an edit (`-avx512`, `+pkru`) starts from
    /// `host`. Parsing does not validate: see [`XfeatureMask::validate_xcr0`].
    ///
    /// ```
    /// use xstate::XfeatureMask;
    /// // What a Sapphire Rapids host enables.
    /// let host = XfeatureMask::from_bits(0x602e7);
    /// let parse = |s| XfeatureMask::parse(s, host).map(XfeatureMask::bits);
    /// assert_eq!(parse("x87,sse,avx"), Ok(0x7));
    /// assert_eq!(parse("0x2e7"), Ok(0x2e7));
    /// assert_eq!(parse("-amx"), Ok(0x2e7));
    /// assert_eq!(parse("host,-avx512"), Ok(0x60207));
    /// assert!(parse("avx1024").is_err());
    /// ```
    pub fn parse(s: &str, host: XfeatureMask) -> Result<Self, MaskError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(MaskError::Empty);
        }
        let mut acc = if s.starts_with('-') || s.starts_with('+') {
            host.bits()
        } else {
            0
        };
        for raw in s.split(',') {
            let tok = raw.trim();
            let (op, name) = match tok.as_bytes().first() {
                Some(b'+') => (Op::Add, tok[1..].trim()),
                Some(b'-') => (Op::Remove, tok[1..].trim()),
                _ => (Op::Add, tok),
            };
            if name.is_empty() {
                return Err(MaskError::EmptyToken);
            }
            let bits = Self::parse_term(name, host)?;
            match op {
                Op::Add => acc |= bits,
                Op::Remove => acc &= !bits,
            }
        }
        Ok(Self::from_bits(acc))
    }

    fn parse_term(name: &str, host: XfeatureMask) -> Result<u64, MaskError> {
        if let Some(hex) = name.strip_prefix("0x").or_else(|| name.strip_prefix("0X")) {
            let hex = hex.replace_underscores();
            return u64::from_str_radix(hex.as_str(), 16)
                .map_err(|_| MaskError::BadNumber(Token::new(name)));
        }
        if name.as_bytes()[0].is_ascii_digit() {
            return name
                .parse::<u64>()
                .map_err(|_| MaskError::BadNumber(Token::new(name)));
        }
        if name.eq_ignore_ascii_case("host") || name.eq_ignore_ascii_case("all") {
            return Ok(host.bits());
        }
        if name.eq_ignore_ascii_case("none") {
            return Ok(0);
        }
        if let Some(f) = Xfeature::from_short_name(name) {
            return Ok(f.bit());
        }
        if let Some((_, group)) = GROUPS.iter().find(|(g, _)| g.eq_ignore_ascii_case(name)) {
            return Ok(group.bits());
        }
        if name.len() > 3 && name.as_bytes()[..3].eq_ignore_ascii_case(b"bit") {
            // The first three bytes are ASCII, so index 3 is a char boundary.
            // Up to bit63: `Display` prints a mask with bit 63 (reserved in
            // XCR0, but a mask is any u64) as `bit63`, which must parse back.
            if let Ok(i) = name[3..].parse::<u32>() {
                if i < 64 {
                    return Ok(1u64 << i);
                }
            }
        }
        Err(MaskError::UnknownName(Token::new(name)))
    }
}

#[derive(Clone, Copy)]
enum Op {
    Add,
    Remove,
}

/// Underscore-free copy of a short numeric string, without allocation.
struct Digits {
    buf: [u8; 32],
    len: usize,
    overflow: bool,
}

impl Digits {
    fn as_str(&self) -> &str {
        if self.overflow {
            // Forces a parse error for absurdly long numbers.
            return "x";
        }
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("x")
    }
}

trait ReplaceUnderscores {
    fn replace_underscores(&self) -> Digits;
}

impl ReplaceUnderscores for str {
    fn replace_underscores(&self) -> Digits {
        let mut d = Digits {
            buf: [0; 32],
            len: 0,
            overflow: false,
        };
        for &c in self.as_bytes() {
            if c == b'_' {
                continue;
            }
            if d.len == d.buf.len() {
                d.overflow = true;
                break;
            }
            d.buf[d.len] = c;
            d.len += 1;
        }
        d
    }
}

/// A short copy of an offending input token, kept without allocation so that
/// errors can name it in `no_std` (truncated to 32 bytes).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Token {
    buf: [u8; 32],
    len: u8,
}

impl Token {
    fn new(s: &str) -> Self {
        let mut end = s.len().min(32);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let mut buf = [0; 32];
        buf[..end].copy_from_slice(&s.as_bytes()[..end]);
        Self {
            buf,
            len: end as u8,
        }
    }

    /// The token text.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("?")
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a mask string did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskError {
    /// The string was empty.
    Empty,
    /// A comma-separated token was empty (`x87,,sse` or a bare `-`).
    EmptyToken,
    /// A token is neither a number, a component, a group nor `host`/`all`/`none`.
    UnknownName(Token),
    /// A token looked like a number but is not a valid 64-bit value.
    BadNumber(Token),
}

impl fmt::Display for MaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaskError::Empty => f.write_str("empty xfeature mask"),
            MaskError::EmptyToken => f.write_str("empty token in xfeature mask"),
            MaskError::UnknownName(t) => write!(
                f,
                "unknown xfeature `{t}` (expected a component such as x87, sse, avx, zmm_hi256, \
                 a group avx512/amx/mpx/cet, host, all, none, or a number like 0x2e7)"
            ),
            MaskError::BadNumber(t) => write!(f, "invalid number `{t}` in xfeature mask"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for MaskError {}
