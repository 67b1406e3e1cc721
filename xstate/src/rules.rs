//! The architectural rules of XCR0: which component sets XSETBV accepts
//! ([`XfeatureMask::validate_xcr0`], one [`Xcr0Error`] variant per rule) and
//! the smallest rule-abiding superset of a request
//! ([`XfeatureMask::with_dependencies`]), both from the one table of
//! component prerequisites ([`DEPENDENCIES`]) that the `--xfeatures` grammar
//! also uses.
//!
//! Kept apart from the set type so that the rules read as one list, in the
//! order the Intel SDM gives them for XSETBV (Vol. 1, 13.3), and so that
//! callers who only need set algebra do not carry them.

use core::fmt;

use crate::feature::Xfeature;
use crate::mask::XfeatureMask;

/// XCR0 bit 63: reserved for a future extension of XCR0 itself.
const XCR0_RESERVED_BIT63: u64 = 1 << 63;

/// THE dependency table of the project: each component's direct
/// prerequisites. It drives both directions of the `--xfeatures` grammar
/// ([`XfeatureMask::resolve`]): naming a component implies the closure of
/// its prerequisites ([`XfeatureMask::prerequisites`]), removing one removes
/// every component that depends on it ([`XfeatureMask::dependents`]); and
/// [`XfeatureMask::with_dependencies`] is the same closure.
///
/// Where the entries come from:
/// - SSE requires x87, and every extended user component (bit 2 and up)
///   requires SSE: x87 is architecturally mandatory in XCR0 (SDM Vol. 1,
///   13.3), and x87|SSE is the legacy base that every XSAVE-using OS enables
///   (Linux refuses XSAVE without both); so `-sse` leaves x87 alone.
/// - AVX-512 (opmask, ZMM_Hi256, Hi16_ZMM) requires AVX, and its three
///   components require each other (XSETBV faults otherwise, SDM 13.3).
/// - MPX's BNDREGS and BNDCSR, and AMX's XTILECFG and XTILEDATA, require
///   their partner (AMX: XSETBV rule; MPX: what operating systems require).
/// - Supervisor components (IA32_XSS) have no entry: they never belong in
///   XCR0, and validation refuses them by name.
///
/// Unknown user components (`bitN`, N >= 20) require SSE like every other
/// extended component; see [`direct_prerequisites`].
pub const DEPENDENCIES: [(Xfeature, XfeatureMask); 11] = [
    (Xfeature::Sse, XfeatureMask::from_bits(Xfeature::X87.bit())),
    (Xfeature::Avx, XfeatureMask::from_bits(Xfeature::Sse.bit())),
    (
        Xfeature::BndRegs,
        XfeatureMask::from_bits(Xfeature::Sse.bit() | Xfeature::BndCsr.bit()),
    ),
    (
        Xfeature::BndCsr,
        XfeatureMask::from_bits(Xfeature::Sse.bit() | Xfeature::BndRegs.bit()),
    ),
    (
        Xfeature::Opmask,
        XfeatureMask::from_bits(
            Xfeature::Avx.bit() | Xfeature::ZmmHi256.bit() | Xfeature::Hi16Zmm.bit(),
        ),
    ),
    (
        Xfeature::ZmmHi256,
        XfeatureMask::from_bits(
            Xfeature::Avx.bit() | Xfeature::Opmask.bit() | Xfeature::Hi16Zmm.bit(),
        ),
    ),
    (
        Xfeature::Hi16Zmm,
        XfeatureMask::from_bits(
            Xfeature::Avx.bit() | Xfeature::Opmask.bit() | Xfeature::ZmmHi256.bit(),
        ),
    ),
    (Xfeature::Pkru, XfeatureMask::from_bits(Xfeature::Sse.bit())),
    (
        Xfeature::XtileCfg,
        XfeatureMask::from_bits(Xfeature::Sse.bit() | Xfeature::XtileData.bit()),
    ),
    (
        Xfeature::XtileData,
        XfeatureMask::from_bits(Xfeature::Sse.bit() | Xfeature::XtileCfg.bit()),
    ),
    (Xfeature::Apx, XfeatureMask::from_bits(Xfeature::Sse.bit())),
];

/// The direct prerequisites of bit `i`: its [`DEPENDENCIES`] entry; for a
/// user bit this crate has no [`Xfeature`] for (20..63), SSE; for x87 and
/// the supervisor components, nothing.
pub fn direct_prerequisites(i: u32) -> XfeatureMask {
    match Xfeature::from_index(i) {
        Some(f) => DEPENDENCIES
            .iter()
            .find(|(g, _)| *g == f)
            .map_or(XfeatureMask::EMPTY, |(_, deps)| *deps),
        None if i < 63 => Xfeature::Sse.mask(),
        None => XfeatureMask::EMPTY,
    }
}

impl XfeatureMask {
    /// `self` plus everything its components need, transitively, by
    /// [`DEPENDENCIES`] (`avx512` -> x87, sse, avx and all three AVX-512
    /// components). Empty stays empty.
    pub fn prerequisites(self) -> Self {
        let mut m = self;
        loop {
            let mut next = m;
            for i in m.iter_indices() {
                next |= direct_prerequisites(i);
            }
            if next == m {
                return m;
            }
            m = next;
        }
    }

    /// `self` plus every component (of `within`) that needs one of its
    /// components, transitively, by [`DEPENDENCIES`]: what removing `self`
    /// from `within` has to remove too (`avx` within a Sapphire Rapids XCR0
    /// -> avx, opmask, zmm_hi256, hi16_zmm).
    pub fn dependents(self, within: Self) -> Self {
        let mut m = self;
        loop {
            let mut next = m;
            for i in within.iter_indices() {
                if !direct_prerequisites(i).intersection(m).is_empty() {
                    next |= Self::from_bits(1u64 << i);
                }
            }
            if next == m {
                return m;
            }
            m = next;
        }
    }

    /// Closes the set under the architectural dependencies, for users who ask
    /// for e.g. `avx512` alone: x87 and SSE are always added, then everything
    /// [`XfeatureMask::prerequisites`] adds by [`DEPENDENCIES`] (any AVX-512
    /// component brings all three plus AVX; MPX and AMX components come in
    /// pairs). Supervisor bits are kept as they are.
    ///
    /// # Examples
    /// ```
    /// use xstate::{Xfeature, XfeatureMask};
    /// // `avx512` alone is no valid XCR0; with its dependencies it is 0xe7.
    /// let closed = XfeatureMask::AVX512.with_dependencies();
    /// assert_eq!(closed.bits(), 0xe7);
    /// assert_eq!(closed.validate_xcr0(XfeatureMask::from_bits(0x2e7)), Ok(()));
    /// // Half of AMX brings the other half.
    /// assert_eq!(Xfeature::XtileData.mask().with_dependencies().bits(), 0x60003);
    /// ```
    pub fn with_dependencies(self) -> Self {
        (self | Self::LEGACY).prerequisites()
    }

    /// Checks `self` as a value for XCR0 by the rules XSETBV enforces (plus the
    /// pairing of the two MPX components that operating systems require), and
    /// that `supported` (CPUID.(EAX=0DH,ECX=0):EDX:EAX) allows every bit.
    ///
    /// Each broken rule is its own [`Xcr0Error`] variant; rules are checked in
    /// the order of the variants, and the first broken one is reported.
    ///
    /// # Errors
    /// - [`Xcr0Error::X87Missing`]: bit 0 is clear;
    /// - [`Xcr0Error::SupervisorBits`]: bits of supervisor components
    ///   (PT, PASID, CET, HDC, UINTR, LBR, HWP), which belong in IA32_XSS;
    /// - [`Xcr0Error::ReservedBit63`]: bit 63 is set;
    /// - [`Xcr0Error::AvxWithoutSse`]: AVX (bit 2) without SSE (bit 1);
    /// - [`Xcr0Error::Avx512Partial`]: some but not all of opmask,
    ///   ZMM_Hi256 and Hi16_ZMM (bits 5-7);
    /// - [`Xcr0Error::Avx512WithoutAvx`]: all of bits 5-7 without AVX;
    /// - [`Xcr0Error::MpxPartial`]: one of BNDREGS and BNDCSR (bits 3-4);
    /// - [`Xcr0Error::AmxPartial`]: one of XTILECFG and XTILEDATA
    ///   (bits 17-18);
    /// - [`Xcr0Error::Unsupported`]: bits outside `supported`, checked last
    ///   so that a mask no CPU accepts is refused for that rule, not for
    ///   what this CPU lacks.
    ///
    /// # Examples
    /// ```
    /// use xstate::{Xcr0Error, XfeatureMask};
    /// let supported = XfeatureMask::from_bits(0x2e7);
    /// let check = |bits| XfeatureMask::from_bits(bits).validate_xcr0(supported);
    /// assert_eq!(check(0x7), Ok(()));
    /// assert_eq!(check(0x5), Err(Xcr0Error::AvxWithoutSse));
    /// assert_eq!(
    ///     check(0x27),
    ///     Err(Xcr0Error::Avx512Partial(XfeatureMask::from_bits(0x20)))
    /// );
    /// // Half of AMX breaks a rule on every CPU, this one's lack of AMX aside.
    /// assert_eq!(
    ///     check(0x20007),
    ///     Err(Xcr0Error::AmxPartial(XfeatureMask::from_bits(0x20000)))
    /// );
    /// ```
    pub fn validate_xcr0(self, supported: XfeatureMask) -> Result<(), Xcr0Error> {
        if !self.contains(Xfeature::X87) {
            return Err(Xcr0Error::X87Missing);
        }
        let sup = self.supervisor();
        if !sup.is_empty() {
            return Err(Xcr0Error::SupervisorBits(sup));
        }
        if self.bits() & XCR0_RESERVED_BIT63 != 0 {
            return Err(Xcr0Error::ReservedBit63);
        }
        if self.contains(Xfeature::Avx) && !self.contains(Xfeature::Sse) {
            return Err(Xcr0Error::AvxWithoutSse);
        }
        let avx512 = self & Self::AVX512;
        if !avx512.is_empty() && avx512 != Self::AVX512 {
            return Err(Xcr0Error::Avx512Partial(avx512));
        }
        if !avx512.is_empty() && !self.contains(Xfeature::Avx) {
            return Err(Xcr0Error::Avx512WithoutAvx);
        }
        let mpx = self & Self::MPX;
        if !mpx.is_empty() && mpx != Self::MPX {
            return Err(Xcr0Error::MpxPartial(mpx));
        }
        let amx = self & Self::AMX;
        if !amx.is_empty() && amx != Self::AMX {
            return Err(Xcr0Error::AmxPartial(amx));
        }
        // Last: a mask no CPU takes is refused for that, whatever this one
        // supports (the usage-error rule of `vmm` rests on it).
        let unsupported = self - supported;
        if !unsupported.is_empty() {
            return Err(Xcr0Error::Unsupported(unsupported));
        }
        Ok(())
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
    /// Components the CPU (or the given supported set) does not support.
    Unsupported(XfeatureMask),
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
impl std::error::Error for Xcr0Error {}
