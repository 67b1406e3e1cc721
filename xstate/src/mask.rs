//! [`XfeatureMask`]: a set of state components, as held by XCR0, IA32_XSS,
//! XSTATE_BV, XCOMP_BV (without its bit 63) or a requested-feature bitmap.
//!
//! Masks parse from hex (`0x2e7`), from names (`x87,sse,avx`), and from edits of
//! a host set (`host,-avx512`, `-amx`, `+pkru`); they print as names with
//! [`Display`](core::fmt::Display) and as bits with `{:#x}`. [`XfeatureMask::validate_xcr0`]
//! applies the architectural XSETBV rules, one error variant per rule.

use core::fmt;
use core::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign, Not, Sub};

use crate::feature::Xfeature;

/// A set of XSAVE state components (bit `i` = component `i`).
///
/// Bit 63 is never a component (in XCOMP_BV it flags the compacted format);
/// [`XfeatureMask::from_bits`] keeps it so that invalid values can be reported,
/// but validation rejects it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct XfeatureMask(u64);

/// x87 | SSE | AVX.
const AVX512: u64 =
    Xfeature::Opmask.bit_const() | Xfeature::ZmmHi256.bit_const() | Xfeature::Hi16Zmm.bit_const();
const MPX: u64 = Xfeature::BndRegs.bit_const() | Xfeature::BndCsr.bit_const();
const AMX: u64 = Xfeature::XtileCfg.bit_const() | Xfeature::XtileData.bit_const();
const CET: u64 = Xfeature::CetU.bit_const() | Xfeature::CetS.bit_const();
/// Bits of the supervisor components this crate knows.
const SUPERVISOR: u64 = Xfeature::Pt.bit_const()
    | Xfeature::Pasid.bit_const()
    | Xfeature::CetU.bit_const()
    | Xfeature::CetS.bit_const()
    | Xfeature::Hdc.bit_const()
    | Xfeature::Uintr.bit_const()
    | Xfeature::Lbr.bit_const()
    | Xfeature::Hwp.bit_const();

impl Xfeature {
    const fn bit_const(self) -> u64 {
        1u64 << (self as u8)
    }
}

/// Named groups accepted by [`XfeatureMask::parse`] besides the component names.
const GROUPS: [(&str, u64); 4] = [("avx512", AVX512), ("amx", AMX), ("mpx", MPX), ("cet", CET)];

impl XfeatureMask {
    /// No components.
    pub const EMPTY: Self = Self(0);
    /// x87 | SSE: the legacy (FXSAVE) components every XCR0 value must allow.
    pub const LEGACY: Self = Self(0b11);
    /// x87 | SSE | AVX.
    pub const AVX: Self = Self(0b111);
    /// The three AVX-512 components.
    pub const AVX512: Self = Self(AVX512);
    /// BNDREGS | BNDCSR.
    pub const MPX: Self = Self(MPX);
    /// XTILECFG | XTILEDATA.
    pub const AMX: Self = Self(AMX);
    /// CET_U | CET_S.
    pub const CET: Self = Self(CET);
    /// Every supervisor component known to this crate.
    pub const SUPERVISOR: Self = Self(SUPERVISOR);
    /// Every component known to this crate (bits 0..=19).
    pub const ALL_KNOWN: Self = Self((1 << 20) - 1);

    /// Wraps raw bits (no validation).
    pub const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }

    /// The raw bits.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether component `f` is in the set.
    pub fn contains(self, f: Xfeature) -> bool {
        self.0 & f.bit() != 0
    }

    /// Whether bit `i` (0..64) is set.
    pub const fn contains_index(self, i: u32) -> bool {
        i < 64 && self.0 & (1u64 << i) != 0
    }

    /// Whether every component of `other` is in `self`.
    pub const fn contains_all(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Set union.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Set intersection.
    pub const fn intersection(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// Components of `self` that are not in `other`.
    pub const fn difference(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// `self` with component `f` added.
    pub fn with(self, f: Xfeature) -> Self {
        Self(self.0 | f.bit())
    }

    /// `self` with component `f` removed.
    pub fn without(self, f: Xfeature) -> Self {
        Self(self.0 & !f.bit())
    }

    /// Number of components in the set.
    pub const fn count(self) -> u32 {
        self.0.count_ones()
    }

    /// The known components in the set, ascending. Bits this crate has no
    /// [`Xfeature`] for are skipped; see [`XfeatureMask::iter_indices`].
    pub fn iter(self) -> impl Iterator<Item = Xfeature> {
        Xfeature::ALL.into_iter().filter(move |f| self.contains(*f))
    }

    /// Every set bit's index, ascending (including unknown components).
    pub fn iter_indices(self) -> impl Iterator<Item = u32> {
        let mut rest = self.0;
        core::iter::from_fn(move || {
            if rest == 0 {
                None
            } else {
                let i = rest.trailing_zeros();
                rest &= rest - 1;
                Some(i)
            }
        })
    }

    /// The user components (those XCR0 can hold): everything but the supervisor
    /// components known to this crate.
    pub const fn user(self) -> Self {
        Self(self.0 & !SUPERVISOR)
    }

    /// The supervisor components (those IA32_XSS can hold).
    pub const fn supervisor(self) -> Self {
        Self(self.0 & SUPERVISOR)
    }

    /// Closes the set under the architectural dependencies, for users who ask
    /// for e.g. `avx512` alone: x87 and SSE are always added; any AVX-512
    /// component brings all three plus AVX; AVX brings SSE; MPX and AMX
    /// components come in pairs. Supervisor bits are kept as they are.
    pub fn with_dependencies(self) -> Self {
        let mut b = self.0 | Self::LEGACY.0;
        if b & AVX512 != 0 {
            b |= AVX512 | Xfeature::Avx.bit();
        }
        if b & MPX != 0 {
            b |= MPX;
        }
        if b & AMX != 0 {
            b |= AMX;
        }
        Self(b)
    }

    /// Checks `self` as a value for XCR0 by the rules XSETBV enforces (plus the
    /// pairing of the two MPX components that operating systems require), and
    /// that `supported` (CPUID.(EAX=0DH,ECX=0):EDX:EAX) allows every bit.
    ///
    /// Each broken rule is its own [`Xcr0Error`] variant; rules are checked in
    /// the order of the variants, and the first broken one is reported.
    pub fn validate_xcr0(self, supported: XfeatureMask) -> Result<(), Xcr0Error> {
        let b = self.0;
        if b & Xfeature::X87.bit() == 0 {
            return Err(Xcr0Error::X87Missing);
        }
        let sup = b & SUPERVISOR;
        if sup != 0 {
            return Err(Xcr0Error::SupervisorBits(Self(sup)));
        }
        if b & (1 << 63) != 0 {
            return Err(Xcr0Error::ReservedBit63);
        }
        let unsupported = b & !supported.0;
        if unsupported != 0 {
            return Err(Xcr0Error::Unsupported(Self(unsupported)));
        }
        if b & Xfeature::Avx.bit() != 0 && b & Xfeature::Sse.bit() == 0 {
            return Err(Xcr0Error::AvxWithoutSse);
        }
        let avx512 = b & AVX512;
        if avx512 != 0 && avx512 != AVX512 {
            return Err(Xcr0Error::Avx512Partial(Self(avx512)));
        }
        if avx512 != 0 && b & Xfeature::Avx.bit() == 0 {
            return Err(Xcr0Error::Avx512WithoutAvx);
        }
        let mpx = b & MPX;
        if mpx != 0 && mpx != MPX {
            return Err(Xcr0Error::MpxPartial(Self(mpx)));
        }
        let amx = b & AMX;
        if amx != 0 && amx != AMX {
            return Err(Xcr0Error::AmxPartial(Self(amx)));
        }
        Ok(())
    }

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
    pub fn parse(s: &str, host: XfeatureMask) -> Result<Self, MaskError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(MaskError::Empty);
        }
        let mut acc = if s.starts_with('-') || s.starts_with('+') {
            host.0
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
        Ok(Self(acc))
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
            return Ok(host.0);
        }
        if name.eq_ignore_ascii_case("none") {
            return Ok(0);
        }
        if let Some(f) = Xfeature::from_short_name(name) {
            return Ok(f.bit());
        }
        if let Some((_, bits)) = GROUPS.iter().find(|(g, _)| g.eq_ignore_ascii_case(name)) {
            return Ok(*bits);
        }
        if name.len() > 3 && name.as_bytes()[..3].eq_ignore_ascii_case(b"bit") {
            // The first three bytes are ASCII, so index 3 is a char boundary.
            if let Ok(i) = name[3..].parse::<u32>() {
                if i < 63 {
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

impl fmt::Debug for XfeatureMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "XfeatureMask({:#x} = {})", self.0, self)
    }
}

/// Prints the component short names, comma-separated (`x87,sse,avx`);
/// unknown bits print as `bitN`; the empty mask prints as `none`. The output
/// parses back with [`XfeatureMask::parse`].
impl fmt::Display for XfeatureMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("none");
        }
        let mut first = true;
        for i in self.iter_indices() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            match Xfeature::from_index(i) {
                Some(x) => f.write_str(x.short_name())?,
                None => write!(f, "bit{i}")?,
            }
        }
        Ok(())
    }
}

impl fmt::LowerHex for XfeatureMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

impl fmt::UpperHex for XfeatureMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::UpperHex::fmt(&self.0, f)
    }
}

impl BitOr for XfeatureMask {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl BitOr<Xfeature> for XfeatureMask {
    type Output = Self;
    fn bitor(self, rhs: Xfeature) -> Self {
        self.with(rhs)
    }
}

impl BitOr for Xfeature {
    type Output = XfeatureMask;
    fn bitor(self, rhs: Self) -> XfeatureMask {
        XfeatureMask(self.bit() | rhs.bit())
    }
}

impl BitOrAssign for XfeatureMask {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for XfeatureMask {
    type Output = Self;
    fn bitand(self, rhs: Self) -> Self {
        self.intersection(rhs)
    }
}

impl BitAndAssign for XfeatureMask {
    fn bitand_assign(&mut self, rhs: Self) {
        self.0 &= rhs.0;
    }
}

impl Sub for XfeatureMask {
    type Output = Self;
    fn sub(self, rhs: Self) -> Self {
        self.difference(rhs)
    }
}

impl Not for XfeatureMask {
    type Output = Self;
    fn not(self) -> Self {
        Self(!self.0)
    }
}

impl From<Xfeature> for XfeatureMask {
    fn from(f: Xfeature) -> Self {
        Self(f.bit())
    }
}

impl From<XfeatureMask> for u64 {
    fn from(m: XfeatureMask) -> u64 {
        m.0
    }
}

impl From<Xfeature> for u64 {
    fn from(f: Xfeature) -> u64 {
        f.bit()
    }
}

impl FromIterator<Xfeature> for XfeatureMask {
    fn from_iter<I: IntoIterator<Item = Xfeature>>(iter: I) -> Self {
        Self(iter.into_iter().fold(0, |acc, f| acc | f.bit()))
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

/// A rule of XCR0 that a mask breaks (see [`XfeatureMask::validate_xcr0`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Xcr0Error {
    /// Bit 0 (x87) must always be set.
    X87Missing,
    /// Supervisor components belong in IA32_XSS, never in XCR0.
    SupervisorBits(XfeatureMask),
    /// Bit 63 is reserved.
    ReservedBit63,
    /// Components the CPU (or the given supported set) does not support.
    Unsupported(XfeatureMask),
    /// AVX (bit 2) requires SSE (bit 1).
    AvxWithoutSse,
    /// Opmask, ZMM_Hi256 and Hi16_ZMM (bits 5-7) must be all set or all clear;
    /// holds the ones that were set.
    Avx512Partial(XfeatureMask),
    /// The AVX-512 components require AVX.
    Avx512WithoutAvx,
    /// BNDREGS and BNDCSR (bits 3-4) must be enabled together.
    MpxPartial(XfeatureMask),
    /// XTILECFG and XTILEDATA (bits 17-18) must be enabled together.
    AmxPartial(XfeatureMask),
}

impl fmt::Display for Xcr0Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Xcr0Error::X87Missing => f.write_str("invalid XCR0: x87 (bit 0) must always be set"),
            Xcr0Error::SupervisorBits(m) => write!(
                f,
                "invalid XCR0: supervisor components {m} ({m:#x}) belong in IA32_XSS, not XCR0"
            ),
            Xcr0Error::ReservedBit63 => f.write_str("invalid XCR0: bit 63 is reserved"),
            Xcr0Error::Unsupported(m) => {
                write!(
                    f,
                    "invalid XCR0: components {m} ({m:#x}) are not supported by the CPU"
                )
            }
            Xcr0Error::AvxWithoutSse => {
                f.write_str("invalid XCR0: AVX (bit 2) requires SSE (bit 1)")
            }
            Xcr0Error::Avx512Partial(m) => write!(
                f,
                "invalid XCR0: the AVX-512 components opmask, zmm_hi256 and hi16_zmm must be \
                 enabled together (only {m} set)"
            ),
            Xcr0Error::Avx512WithoutAvx => {
                f.write_str("invalid XCR0: the AVX-512 components require AVX (bit 2)")
            }
            Xcr0Error::MpxPartial(m) => write!(
                f,
                "invalid XCR0: MPX bndregs and bndcsr must be enabled together (only {m} set)"
            ),
            Xcr0Error::AmxPartial(m) => write!(
                f,
                "invalid XCR0: AMX xtilecfg and xtiledata must be enabled together (only {m} set)"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for MaskError {}
#[cfg(feature = "std")]
impl std::error::Error for Xcr0Error {}
