//! The mask grammar: reading an [`XfeatureMask`] from what a user types on a
//! command line or in a config file (`0x2e7`, `x87,sse,avx`, `avx512`,
//! `host,-avx`, `-amx`, `+pkru`).
//!
//! Two readings of the same tokens:
//! - [`XfeatureMask::resolve`], the **`--xfeatures` grammar** (a request for
//!   an XCR0): names imply their prerequisites and removals take their
//!   dependents along, by the one table in [`crate::rules::DEPENDENCIES`];
//!   the [`Resolution`] says what was implied and dropped.
//! - [`XfeatureMask::parse`], the **literal set**: exactly the bits named,
//!   for masks that are not XCR0 requests (an XSTATE_BV such as `avx`
//!   alone is a valid value there).
//!
//! # The `--xfeatures` grammar
//! A value is comma-separated tokens; blanks around tokens and the case of
//! names are ignored. A token is an optional `+` (add, the default) or `-`
//! (remove) followed by a term:
//! - a component name (`x87`, `sse`, `avx`, `bndregs`, `bndcsr`, `opmask`,
//!   `zmm_hi256`, `hi16_zmm`, `pkru`, `xtilecfg`, `xtiledata`, `apx`, the
//!   supervisor names, see [`Xfeature::short_name`]) or `bitN` (0 <= N < 63)
//!   for a component this crate has no name for;
//! - a group, the same as naming each member: `avx512` (opmask, zmm_hi256,
//!   hi16_zmm), `amx` (xtilecfg, xtiledata), `mpx` (bndregs, bndcsr), `cet`
//!   (cet_u, cet_s);
//! - `host` or `all`: every component the host (KVM, or the profile's CPU)
//!   supports; `none`: nothing;
//! - a number, `0x2e7` (hex, `_` allowed) or `743` (decimal): exactly those
//!   bits.
//!
//! Evaluation, left to right:
//! 1. The start is the empty set, or `host` when the first token is an edit
//!    (`-avx` means `host,-avx`; `+pkru` means `host,+pkru`).
//! 2. Adding a name or group adds it **and its prerequisites**, transitively:
//!    `avx` -> x87, sse, avx; `avx512` -> x87, sse, avx, opmask, zmm_hi256,
//!    hi16_zmm; `amx` (or either AMX component) -> x87, sse, xtilecfg,
//!    xtiledata; `pkru` -> x87, sse, pkru. So x87 is always implied.
//! 3. Removing a name or group removes it **and everything that depends on
//!    it**: `host,-avx` also drops the AVX-512 components, `-sse` drops every
//!    component but x87, `-opmask` drops all of AVX-512. Removing `x87` is
//!    refused ([`MaskError::X87Removed`]): XCR0 bit 0 is always set.
//! 4. `host`, `all`, `none` and numbers are literal: no implication (a number
//!    is the escape hatch for an exact XCR0, checked by the XCR0 rules).
//! 5. A contradiction, a component that one token asks for (itself or as a
//!    prerequisite) and another removes, in either order (`avx512,-avx`,
//!    `-avx,avx512`), is refused naming both tokens
//!    ([`MaskError::Contradiction`]).
//!
//! The result is not yet validated: it still has to pass
//! [`XfeatureMask::validate_xcr0`] against what the host supports (which
//! refuses e.g. `amx` on a host without AMX, supervisor components, or a
//! number that breaks a rule).
//!
//! Parsing is `no_std` and allocation-free (the guest kernel parses masks
//! too), so an offending token is kept in a fixed-size [`Token`].

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
    /// Parses a literal set: exactly the components named, no implication
    /// (for XSTATE_BV and other masks that are not XCR0 requests; an XCR0
    /// request is [`XfeatureMask::resolve`]).
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
    /// # Errors
    /// The first bad token, left to right:
    /// - [`MaskError::Empty`]: `s` is empty or blank;
    /// - [`MaskError::EmptyToken`]: a token is empty (`x87,,sse`, a trailing
    ///   comma) or a bare `+`/`-`;
    /// - [`MaskError::BadNumber`]: a token starts with `0x`/`0X` or a digit
    ///   but is no hexadecimal or decimal `u64` (`0x`, `0xg`, `12ab`, more
    ///   than 64 bits);
    /// - [`MaskError::UnknownName`]: a token is none of a component name,
    ///   group, `bitN` (N < 64), `host`, `all` or `none`.
    ///
    /// The literal reading implies nothing, so it never returns
    /// [`MaskError::X87Removed`] or [`MaskError::Contradiction`].
    ///
    /// # Examples
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
            let (op, name) = Op::split(raw)?;
            let (bits, _) = Self::parse_term(name, host)?;
            match op {
                Op::Add => acc |= bits,
                Op::Remove => acc &= !bits,
            }
        }
        Ok(Self::from_bits(acc))
    }

    /// One term: its bits, and whether it is a name (component, group,
    /// `bitN`: implies prerequisites) or literal (number, `host`, `none`).
    fn parse_term(name: &str, host: XfeatureMask) -> Result<(u64, Term), MaskError> {
        if let Some(hex) = name.strip_prefix("0x").or_else(|| name.strip_prefix("0X")) {
            let hex = hex.replace_underscores();
            return u64::from_str_radix(hex.as_str(), 16)
                .map(|b| (b, Term::Literal))
                .map_err(|_| MaskError::BadNumber(Token::new(name)));
        }
        if name.as_bytes()[0].is_ascii_digit() {
            return name
                .parse::<u64>()
                .map(|b| (b, Term::Literal))
                .map_err(|_| MaskError::BadNumber(Token::new(name)));
        }
        if name.eq_ignore_ascii_case("host") || name.eq_ignore_ascii_case("all") {
            return Ok((host.bits(), Term::Literal));
        }
        if name.eq_ignore_ascii_case("none") {
            return Ok((0, Term::Literal));
        }
        if let Some(f) = Xfeature::from_short_name(name) {
            return Ok((f.bit(), Term::Name));
        }
        if let Some((_, group)) = GROUPS.iter().find(|(g, _)| g.eq_ignore_ascii_case(name)) {
            return Ok((group.bits(), Term::Name));
        }
        if name.len() > 3 && name.as_bytes()[..3].eq_ignore_ascii_case(b"bit") {
            // The first three bytes are ASCII, so index 3 is a char boundary.
            // Up to bit63: `Display` prints a mask with bit 63 (reserved in
            // XCR0, but a mask is any u64) as `bit63`, which must parse back.
            if let Ok(i) = name[3..].parse::<u32>() {
                if i < 64 {
                    return Ok((1u64 << i, Term::Name));
                }
            }
        }
        Err(MaskError::UnknownName(Token::new(name)))
    }

    /// Resolves an `--xfeatures` value by the grammar in the [module
    /// docs](crate::parse): names imply their prerequisites, removals take
    /// their dependents along (one table: [`crate::rules::DEPENDENCIES`]),
    /// contradictions are refused by name. `host` is what `host`/`all`
    /// stand for and where a leading edit starts. The result still has to
    /// pass [`XfeatureMask::validate_xcr0`].
    ///
    /// # Errors
    /// Checked token by token, left to right, the first bad one reported:
    /// - [`MaskError::Empty`], [`MaskError::EmptyToken`],
    ///   [`MaskError::BadNumber`], [`MaskError::UnknownName`]: as for
    ///   [`XfeatureMask::parse`];
    /// - [`MaskError::X87Removed`]: a removal whose term includes x87
    ///   (`-x87`, `-0x1`, or `-host`/`-all` when `host` holds x87), since
    ///   XCR0 bit 0 is always set;
    ///
    /// then, once every token has been read:
    /// - [`MaskError::Contradiction`]: one token asks for a component (itself
    ///   or as a prerequisite) that another removes (itself or as a
    ///   dependent), in either order (`avx512,-avx`, `-sse,pkru`).
    ///
    /// # Examples
    /// ```
    /// use xstate::XfeatureMask;
    /// // What a Sapphire Rapids host enables.
    /// let host = XfeatureMask::from_bits(0x602e7);
    /// let r = XfeatureMask::resolve("avx512", host).unwrap();
    /// assert_eq!(r.result.bits(), 0xe7);
    /// assert_eq!(r.implied.to_string(), "x87,sse,avx");
    /// let r = XfeatureMask::resolve("host,-avx", host).unwrap();
    /// assert_eq!(r.result.bits(), 0x60203);
    /// assert_eq!(r.dropped.to_string(), "opmask,zmm_hi256,hi16_zmm");
    /// assert_eq!(XfeatureMask::resolve("-avx", host), Ok(r));
    /// assert!(XfeatureMask::resolve("avx512,-avx", host).is_err());
    /// ```
    pub fn resolve(s: &str, host: XfeatureMask) -> Result<Resolution, MaskError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(MaskError::Empty);
        }
        let mut acc = if s.starts_with('-') || s.starts_with('+') {
            host
        } else {
            Self::EMPTY
        };
        let mut requested = Self::EMPTY;
        let mut removed = Self::EMPTY;
        let mut implied = Self::EMPTY;
        let mut dropped = Self::EMPTY;
        // Per bit, the 1-based index of the first token that asked for it by
        // name (itself or as a prerequisite), and of the first that removed
        // it (itself or as a dependent); 0: none. Compared at the end, so a
        // contradiction is found in either order.
        let mut asked_by = [0u16; 64];
        let mut removed_by = [0u16; 64];
        let every = Self::from_bits(!0 >> 1);
        for (n, raw) in s.split(',').enumerate() {
            let pos = u16::try_from(n + 1).unwrap_or(u16::MAX);
            let tok = raw.trim();
            let (op, name) = Op::split(tok)?;
            let (bits, term) = Self::parse_term(name, host)?;
            let bits = Self::from_bits(bits);
            match (op, term) {
                (Op::Add, Term::Literal) => acc |= bits,
                (Op::Add, Term::Name) => {
                    let closure = bits.prerequisites();
                    implied |= (closure - bits) - acc;
                    requested |= bits;
                    for i in closure.iter_indices() {
                        if asked_by[i as usize] == 0 {
                            asked_by[i as usize] = pos;
                        }
                    }
                    acc |= closure;
                }
                (Op::Remove, _) => {
                    if bits.contains(Xfeature::X87) {
                        return Err(MaskError::X87Removed(Token::new(tok)));
                    }
                    let closure = bits.dependents(every);
                    dropped |= (closure - bits) & acc;
                    removed |= bits;
                    for i in closure.iter_indices() {
                        if removed_by[i as usize] == 0 {
                            removed_by[i as usize] = pos;
                        }
                    }
                    acc = acc - closure;
                }
            }
        }
        if let Some(i) = (0..64).find(|&i| asked_by[i] != 0 && removed_by[i] != 0) {
            let token =
                |pos: u16| Token::new(s.split(',').nth(usize::from(pos) - 1).unwrap_or("").trim());
            return Err(MaskError::Contradiction {
                wants: token(asked_by[i]),
                removes: token(removed_by[i]),
                component: i as u32,
            });
        }
        Ok(Resolution {
            requested,
            removed,
            implied: implied & acc,
            dropped: dropped - acc,
            result: acc,
        })
    }
}

/// How an `--xfeatures` value was understood ([`XfeatureMask::resolve`]):
/// what the user named, what the grammar added or took away for them, and
/// the resulting set. Printed by `vmm run` so nothing changes silently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolution {
    /// Components named to be added (groups expanded; numbers and `host`
    /// are not names).
    pub requested: XfeatureMask,
    /// Components named to be removed.
    pub removed: XfeatureMask,
    /// Prerequisites the grammar added that were neither named nor already
    /// in the set (`avx512` from nothing: x87, sse, avx).
    pub implied: XfeatureMask,
    /// Dependents the grammar removed along with a named removal
    /// (`host,-avx` on an AVX-512 host: opmask, zmm_hi256, hi16_zmm).
    pub dropped: XfeatureMask,
    /// The resulting set (still to be validated as XCR0).
    pub result: XfeatureMask,
}

/// `x87,sse,avx (0x7); implied x87,sse; dropped ...` (the clauses only
/// when not empty).
impl fmt::Display for Resolution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:#x})", self.result, self.result)?;
        if !self.implied.is_empty() {
            write!(f, "; implied {}", self.implied)?;
        }
        if !self.dropped.is_empty() {
            write!(
                f,
                "; dropped {} (they depend on what was removed)",
                self.dropped
            )?;
        }
        Ok(())
    }
}

/// What a term of the grammar is: a name (implies prerequisites) or literal.
#[derive(Clone, Copy)]
enum Term {
    Name,
    Literal,
}

/// The short name of bit `i` for messages (`bitN` when unknown).
struct BitName(u32);

impl fmt::Display for BitName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Xfeature::from_index(self.0) {
            Some(x) => f.write_str(x.short_name()),
            None => write!(f, "bit{}", self.0),
        }
    }
}

#[derive(Clone, Copy)]
enum Op {
    Add,
    Remove,
}

impl Op {
    /// A comma-separated token of the grammar: its operation (`+name` and
    /// `name` add, `-name` removes) and its term, spaces trimmed; an empty
    /// term is refused.
    fn split(raw: &str) -> Result<(Op, &str), MaskError> {
        let tok = raw.trim();
        let (op, name) = match tok.as_bytes().first() {
            Some(b'+') => (Op::Add, tok[1..].trim()),
            Some(b'-') => (Op::Remove, tok[1..].trim()),
            _ => (Op::Add, tok),
        };
        if name.is_empty() {
            return Err(MaskError::EmptyToken);
        }
        Ok((op, name))
    }
}

/// Underscore-free copy of a short numeric string, without allocation.
/// Leading zeros are dropped, so `0x` followed by any number of zeros and
/// a 64-bit value parses, as the decimal form does (Rust's integer parser
/// takes leading zeros of any length).
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

    fn push(&mut self, c: u8) {
        if self.len == self.buf.len() {
            self.overflow = true;
        } else {
            self.buf[self.len] = c;
            self.len += 1;
        }
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
        let mut zeros = false;
        for &c in self.as_bytes() {
            match c {
                b'_' => {}
                b'0' if d.len == 0 => zeros = true,
                _ => d.push(c),
            }
        }
        if d.len == 0 && zeros {
            d.push(b'0');
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
    /// The token was longer than what is kept: shown with a trailing `…`.
    cut: bool,
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
            cut: end < s.len(),
        }
    }

    /// The token text (its first 32 bytes at most: see [`Token::is_cut`]).
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("?")
    }

    /// Whether the token was longer than [`Token::as_str`] holds.
    pub fn is_cut(&self) -> bool {
        self.cut
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())?;
        if self.cut {
            f.write_str("…")?;
        }
        Ok(())
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
    /// A removal includes x87 (`-x87`, `-all`): XCR0 bit 0 is always set.
    X87Removed(Token),
    /// One token asks for `component` (itself or as a prerequisite) and
    /// another removes it (itself or as a dependent), e.g. `avx512,-avx`.
    Contradiction {
        /// The token that asks for the component.
        wants: Token,
        /// The token that removes it.
        removes: Token,
        /// The component's bit.
        component: u32,
    },
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
            MaskError::X87Removed(t) => write!(
                f,
                "`{t}` removes x87, which XCR0 always holds (bit 0 must be set)"
            ),
            MaskError::Contradiction {
                wants,
                removes,
                component,
            } => write!(
                f,
                "contradictory xfeatures: `{wants}` needs {}, which `{removes}` removes",
                BitName(*component)
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for MaskError {}
