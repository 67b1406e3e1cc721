//! [`XfeatureMask`]: a set of state components, as held by XCR0, IA32_XSS,
//! XSTATE_BV, XCOMP_BV (without its bit 63) or a requested-feature bitmap.
//!
//! This module is the set type alone: constants for the architectural
//! groups, set algebra, iteration and printing (names with
//! [`Display`](core::fmt::Display), bits with `{:#x}`). Reading a mask from a
//! string is [`crate::parse`]; the rules a mask must follow to be an XCR0
//! value are [`crate::rules`].

use core::fmt;
use core::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign, Not, Sub};

use crate::feature::Xfeature;

/// A set of XSAVE state components (bit `i` = component `i`).
///
/// Bit 63 is never a component (in XCOMP_BV it flags the compacted format);
/// [`XfeatureMask::from_bits`] keeps it so that invalid values can be reported,
/// but validation rejects it.
///
/// # Examples
/// ```
/// use xstate::{Xfeature, XfeatureMask};
/// // The XCR0 of an Ice Lake client: x87, SSE, AVX, AVX-512 and PKRU.
/// let xcr0 = XfeatureMask::from_bits(0x2e7);
/// assert!(xcr0.contains_all(XfeatureMask::AVX512));
/// assert!(xcr0.contains(Xfeature::Pkru));
/// assert_eq!(xcr0.count(), 7);
/// // What an AVX2-only guest may keep: the AVX-512 trio removed.
/// let guest = xcr0 - XfeatureMask::AVX512;
/// assert_eq!(guest, XfeatureMask::AVX | Xfeature::Pkru);
/// assert_eq!(format!("{guest} = {guest:#x}"), "x87,sse,avx,pkru = 0x207");
/// // IA32_XSS bits are told apart from XCR0 bits.
/// let xss = XfeatureMask::from_bits(0x1800); // CET_U | CET_S
/// assert_eq!(xss.supervisor(), XfeatureMask::CET);
/// assert!(xss.user().is_empty());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct XfeatureMask(u64);

/// The bits of every known component (only the supervisor ones if
/// `supervisor_only`), computed from [`Xfeature`] so that the constants
/// below and the component list have one source of truth.
const fn known_bits(supervisor_only: bool) -> u64 {
    let mut bits = 0;
    let mut i = 0;
    while i < Xfeature::ALL.len() {
        let f = Xfeature::ALL[i];
        if !supervisor_only || f.is_supervisor() {
            bits |= f.bit();
        }
        i += 1;
    }
    bits
}

impl XfeatureMask {
    /// No components.
    pub const EMPTY: Self = Self(0);
    /// x87 | SSE: the legacy (FXSAVE) components every XCR0 value must allow.
    pub const LEGACY: Self = Self(0b11);
    /// x87 | SSE | AVX.
    pub const AVX: Self = Self(0b111);
    /// The three AVX-512 components (opmask, ZMM_Hi256, Hi16_ZMM).
    pub const AVX512: Self =
        Self(Xfeature::Opmask.bit() | Xfeature::ZmmHi256.bit() | Xfeature::Hi16Zmm.bit());
    /// BNDREGS | BNDCSR.
    pub const MPX: Self = Self(Xfeature::BndRegs.bit() | Xfeature::BndCsr.bit());
    /// XTILECFG | XTILEDATA.
    pub const AMX: Self = Self(Xfeature::XtileCfg.bit() | Xfeature::XtileData.bit());
    /// CET_U | CET_S.
    pub const CET: Self = Self(Xfeature::CetU.bit() | Xfeature::CetS.bit());
    /// Every supervisor component known to this crate
    /// ([`Xfeature::is_supervisor`]).
    pub const SUPERVISOR: Self = Self(known_bits(true));
    /// Every component known to this crate (bits 0..=19).
    pub const ALL_KNOWN: Self = Self(known_bits(false));

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
    pub const fn contains(self, f: Xfeature) -> bool {
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
    pub const fn with(self, f: Xfeature) -> Self {
        Self(self.0 | f.bit())
    }

    /// `self` with component `f` removed.
    pub const fn without(self, f: Xfeature) -> Self {
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
        Self(self.0 & !Self::SUPERVISOR.0)
    }

    /// The supervisor components (those IA32_XSS can hold).
    pub const fn supervisor(self) -> Self {
        Self(self.0 & Self::SUPERVISOR.0)
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

impl Xfeature {
    /// The component as a one-bit mask (defined here, not in
    /// [`crate::feature`], so that components never depend on masks).
    pub const fn mask(self) -> XfeatureMask {
        XfeatureMask(self.bit())
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
