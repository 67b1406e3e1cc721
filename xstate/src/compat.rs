//! Whether saved extended state can live on another host: the rules a VMM
//! applies before restoring or migrating a vCPU, and the largest XCR0 a set
//! of hosts can all give a guest.
//!
//! These are rules of the XSAVE model, not of any one VMM view: a snapshot
//! restore, `vmm features compare` and any other user ask the same question
//! and get the same answer, naming the components by [`Described`].

use core::fmt;

use crate::feature::Xfeature;
use crate::info::XsaveInfo;
use crate::mask::XfeatureMask;
use crate::rules::Xcr0Error;

/// Why a saved xstate cannot be restored on a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incompatibility {
    /// XSTATE_BV or XCR0 has bit 63 or a bit of no component this model knows.
    UnknownBits {
        /// `"XSTATE_BV"` or `"XCR0"`.
        what: &'static str,
        /// The whole mask.
        mask: XfeatureMask,
        /// Its unknown bits.
        unknown: XfeatureMask,
    },
    /// The saved XCR0 breaks an architectural rule: no CPU could hold it.
    InvalidXcr0 {
        /// The saved XCR0.
        xcr0: XfeatureMask,
        /// The rule it breaks.
        error: Xcr0Error,
    },
    /// XSTATE_BV marks user state live that the saved XCR0 does not enable:
    /// the saved state is inconsistent (XRSTOR would fault).
    StateOutsideXcr0 {
        /// The image's XSTATE_BV.
        xstate_bv: XfeatureMask,
        /// The saved XCR0.
        xcr0: XfeatureMask,
        /// Live components outside it.
        outside: XfeatureMask,
    },
    /// Live user state of components the host cannot enable.
    StateUnsupported {
        /// Live components the host lacks.
        missing: XfeatureMask,
        /// What the host can enable.
        host_xcr0: XfeatureMask,
    },
    /// Live supervisor state (XSAVES) the host's IA32_XSS cannot hold.
    SupervisorUnsupported {
        /// Live supervisor components the host lacks.
        missing: XfeatureMask,
        /// The host's supported IA32_XSS.
        host_xss: XfeatureMask,
    },
    /// Components the guest enabled (though in their init state) that the
    /// host cannot enable: KVM would refuse the guest's XCR0.
    Xcr0Unsupported {
        /// The saved XCR0.
        xcr0: XfeatureMask,
        /// Its components the host lacks.
        missing: XfeatureMask,
        /// What the host can enable.
        host_xcr0: XfeatureMask,
    },
}

impl fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Incompatibility::UnknownBits {
                what,
                mask,
                unknown,
            } => write!(
                f,
                "{what} {mask:#x} has bits {unknown:#x} that are no known state component \
                 (known: bits 0-19)"
            ),
            Incompatibility::InvalidXcr0 { xcr0, error } => {
                write!(f, "saved XCR0 {xcr0:#x}: {error}")
            }
            Incompatibility::StateOutsideXcr0 {
                xstate_bv,
                xcr0,
                outside,
            } => write!(
                f,
                "saved state is inconsistent: XSTATE_BV {xstate_bv:#x} uses {} outside XCR0 \
                 {xcr0:#x}",
                outside.describe()
            ),
            Incompatibility::StateUnsupported { missing, host_xcr0 } => write!(
                f,
                "state uses {}; this host supports {host_xcr0:#x}",
                missing.describe()
            ),
            Incompatibility::SupervisorUnsupported { missing, host_xss } => write!(
                f,
                "state uses supervisor {}; this host supports IA32_XSS {host_xss:#x}",
                missing.describe()
            ),
            Incompatibility::Xcr0Unsupported {
                xcr0,
                missing,
                host_xcr0,
            } => write!(
                f,
                "guest XCR0 {xcr0:#x} enables {} (not in use, but KVM_SET_XCRS would refuse \
                 it); this host supports {host_xcr0:#x}",
                missing.describe()
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Incompatibility {}

/// Whether a vCPU's saved extended state (its XCR0 and the XSTATE_BV of its
/// xsave image; supervisor bits of an XSAVES image included) can be restored
/// on `host`, which should be the target's KVM leaf 0xD (what KVM lets a guest
/// enable), or its CPU's where KVM's is unknown.
///
/// Checks, first failure reported: no unknown bits; `xcr0` is a valid XCR0;
/// the live user state lies inside `xcr0`; the host supports the live user
/// state, the live supervisor state and every component of `xcr0`.
///
/// Layout differences (a component at another standard offset) do not make
/// state unrestorable: a VMM re-lays the image out for the target.
///
/// # Errors
/// The first failed check, in this order:
/// - [`Incompatibility::UnknownBits`]: `xstate_bv`, then `xcr0`, has bit 63
///   or a bit above 19 (no component this crate knows);
/// - [`Incompatibility::InvalidXcr0`]: `xcr0` breaks an XCR0 rule on its
///   own (no x87, supervisor bits, AVX without SSE, part of AVX-512, MPX or
///   AMX);
/// - [`Incompatibility::StateOutsideXcr0`]: `xstate_bv` marks user state
///   live that `xcr0` does not enable;
/// - [`Incompatibility::StateUnsupported`]: live user state outside the
///   host's supported XCR0;
/// - [`Incompatibility::SupervisorUnsupported`]: live supervisor state
///   outside the host's supported IA32_XSS;
/// - [`Incompatibility::Xcr0Unsupported`]: `xcr0` enables components the
///   host lacks, though they hold no state (KVM_SET_XCRS would refuse it).
///
/// # Examples
/// ```
/// use xstate::{restorable_on, CpuidRegs, Incompatibility, XfeatureMask, XsaveInfo};
/// // A host with x87, SSE and AVX (leaf 0xD.0 EAX = 0x7).
/// let host = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
///     0 => CpuidRegs { eax: 0x7, ebx: 832, ecx: 832, edx: 0 },
///     2 => CpuidRegs { eax: 256, ebx: 576, ecx: 0, edx: 0 },
///     _ => CpuidRegs::default(),
/// })
/// .unwrap();
/// let avx = XfeatureMask::from_bits(0x7);
/// assert!(restorable_on(avx, avx, &host).is_ok());
/// // Live AVX-512 state cannot land here.
/// let zmm = XfeatureMask::from_bits(0xe7);
/// assert!(restorable_on(zmm, zmm, &host).is_err());
/// // Nor can a guest XCR0 with AVX-512 enabled, even with only SSE live.
/// assert_eq!(
///     restorable_on(zmm, XfeatureMask::LEGACY, &host),
///     Err(Incompatibility::Xcr0Unsupported {
///         xcr0: zmm,
///         missing: XfeatureMask::AVX512,
///         host_xcr0: avx,
///     })
/// );
/// ```
pub fn restorable_on(
    xcr0: XfeatureMask,
    xstate_bv: XfeatureMask,
    host: &XsaveInfo,
) -> Result<(), Incompatibility> {
    for (what, mask) in [("XSTATE_BV", xstate_bv), ("XCR0", xcr0)] {
        let unknown = mask - XfeatureMask::ALL_KNOWN;
        if !unknown.is_empty() {
            return Err(Incompatibility::UnknownBits {
                what,
                mask,
                unknown,
            });
        }
    }
    // Validity of the saved XCR0 on its own (every known bit "supported").
    xcr0.validate_xcr0(XfeatureMask::ALL_KNOWN.user())
        .map_err(|error| Incompatibility::InvalidXcr0 { xcr0, error })?;
    let live_user = xstate_bv.user();
    let outside = live_user - xcr0;
    if !outside.is_empty() {
        return Err(Incompatibility::StateOutsideXcr0 {
            xstate_bv,
            xcr0,
            outside,
        });
    }
    let host_xcr0 = host.supported_xcr0();
    let missing = live_user - host_xcr0;
    if !missing.is_empty() {
        return Err(Incompatibility::StateUnsupported { missing, host_xcr0 });
    }
    let host_xss = host.supported_xss();
    let missing = xstate_bv.supervisor() - host_xss;
    if !missing.is_empty() {
        return Err(Incompatibility::SupervisorUnsupported { missing, host_xss });
    }
    let missing = xcr0 - host_xcr0;
    if !missing.is_empty() {
        return Err(Incompatibility::Xcr0Unsupported {
            xcr0,
            missing,
            host_xcr0,
        });
    }
    Ok(())
}

/// The largest valid XCR0 inside `mask`: supervisor bits, bit 63 and
/// unknown bits removed, then every component whose architectural partners
/// are missing (AVX without SSE, part of AVX-512 or AVX-512 without AVX, half
/// of MPX or AMX). x87 and SSE are kept: every XSAVE host has them.
///
/// # Examples
/// ```
/// use xstate::{largest_valid_xcr0, XfeatureMask};
/// // What both a Sapphire Rapids (0x602e7) and a Zen 3 (0x207) host can
/// // give a guest that migrates between them.
/// let common = XfeatureMask::from_bits(0x602e7) & XfeatureMask::from_bits(0x207);
/// assert_eq!(largest_valid_xcr0(common).bits(), 0x207);
/// // Half of AVX-512 and half of AMX are no valid XCR0: both go.
/// assert_eq!(largest_valid_xcr0(XfeatureMask::from_bits(0x20267)).bits(), 0x207);
/// // CET (IA32_XSS) and bit 63 never belong in XCR0.
/// assert_eq!(largest_valid_xcr0(XfeatureMask::from_bits(1 << 63 | 0x1807)).bits(), 0x7);
/// ```
pub fn largest_valid_xcr0(mask: XfeatureMask) -> XfeatureMask {
    let mut m = (mask & XfeatureMask::ALL_KNOWN).user() | XfeatureMask::LEGACY;
    loop {
        let before = m;
        if !m.contains(Xfeature::Sse) {
            m = m.without(Xfeature::Avx);
        }
        if !m.contains_all(XfeatureMask::AVX512) || !m.contains(Xfeature::Avx) {
            m = m - XfeatureMask::AVX512;
        }
        if !m.contains_all(XfeatureMask::MPX) {
            m = m - XfeatureMask::MPX;
        }
        if !m.contains_all(XfeatureMask::AMX) {
            m = m - XfeatureMask::AMX;
        }
        if m == before {
            return m;
        }
    }
}

/// A mask described for messages ([`XfeatureMask::describe`]): complete
/// groups by name (`mpx`, `avx512`, `cet`, `amx`), other components by short
/// name, then the bit numbers with consecutive runs as ranges:
/// `avx512 (components 5-7)`, `avx, pkru (components 2, 9)`; `nothing` for
/// the empty mask.
///
/// # Examples
/// ```
/// use xstate::XfeatureMask;
/// let m = XfeatureMask::from_bits(0xe0 | 0x200);
/// assert_eq!(m.describe().to_string(), "avx512, pkru (components 5-7, 9)");
/// assert_eq!(XfeatureMask::EMPTY.describe().to_string(), "nothing");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Described(pub XfeatureMask);

impl XfeatureMask {
    /// This mask described for messages (see [`Described`]).
    pub const fn describe(self) -> Described {
        Described(self)
    }
}

impl fmt::Display for Described {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const GROUPS: [(&str, XfeatureMask); 4] = [
            ("mpx", XfeatureMask::MPX),
            ("avx512", XfeatureMask::AVX512),
            ("cet", XfeatureMask::CET),
            ("amx", XfeatureMask::AMX),
        ];
        let mask = self.0;
        if mask.is_empty() {
            return f.write_str("nothing");
        }
        let mut rest = mask;
        let mut first = true;
        for i in mask.iter_indices() {
            if !rest.contains_index(i) {
                continue;
            }
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            if let Some((g, m)) = GROUPS
                .iter()
                .find(|(_, m)| m.contains_index(i) && mask.contains_all(*m))
            {
                f.write_str(g)?;
                rest = rest - *m;
                continue;
            }
            match Xfeature::from_index(i) {
                Some(x) => f.write_str(x.short_name())?,
                None => write!(f, "bit{i}")?,
            }
            rest = rest - XfeatureMask::from_bits(1 << i);
        }
        let noun = if mask.count() == 1 {
            "component"
        } else {
            "components"
        };
        write!(f, " ({noun} ")?;
        // Bit numbers, consecutive runs as ranges.
        let mut bits = mask.iter_indices().peekable();
        let mut first = true;
        while let Some(lo) = bits.next() {
            let mut hi = lo;
            while bits.peek() == Some(&(hi + 1)) {
                hi += 1;
                bits.next();
            }
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            if hi == lo {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        f.write_str(")")
    }
}
