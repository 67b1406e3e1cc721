//! [`InfoError`]: every way CPUID leaf 0xD data can be inconsistent, one
//! variant per rule [`super::XsaveInfo::from_raw`] checks, with messages
//! naming the subleaf and component.

use core::fmt;

use crate::feature::Xfeature;
use crate::mask::XfeatureMask;

/// Why leaf 0xD data was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InfoError {
    /// The CPU has no XSAVE (CPUID.1:ECX.XSAVE = 0 or no leaf 0xD).
    NoXsave,
    /// The supported XCR0 lacks x87 (architecturally mandatory), or offers
    /// an extended user component (bit 2 and up) without SSE, which every
    /// one of them requires. x87 alone is valid: a hypervisor may offer
    /// no more (hardware KVM honours such a leaf 0xD), and an OS then runs
    /// without XSAVE-managed SSE state.
    LegacyNotSupported {
        /// Supported XCR0 as enumerated.
        xcr0: XfeatureMask,
    },
    /// Bit 63 of XCR0/IA32_XSS, or bit 0/1 of IA32_XSS, is enumerated.
    ReservedBit {
        /// Supported XCR0 as enumerated.
        xcr0: XfeatureMask,
        /// Supported IA32_XSS as enumerated.
        xss: XfeatureMask,
    },
    /// Components enumerated as both user (XCR0) and supervisor (IA32_XSS).
    UserAndSupervisor(XfeatureMask),
    /// 0.ECX (maximum standard size) is below 576 bytes.
    MaxSizeTooSmall(u32),
    /// A supported component's subleaf is all zero or reports size 0.
    MissingSubleaf(u32),
    /// ECX bit 0 of a subleaf disagrees with whether its bit is in IA32_XSS.
    SupervisorFlagMismatch(u32),
    /// A user component's offset + size does not fit in 32 bits.
    PastAddressSpace {
        /// Component index.
        index: u32,
        /// Enumerated standard offset.
        offset: u32,
        /// Enumerated size.
        size: u32,
    },
    /// A user component starts inside the legacy region or XSAVE header.
    InsideLegacyRegion {
        /// Component index.
        index: u32,
        /// Enumerated standard offset.
        offset: u32,
    },
    /// A user component ends past the maximum standard size (0.ECX).
    PastMaxSize {
        /// Component index.
        index: u32,
        /// Offset + size.
        end: u32,
        /// 0.ECX.
        max: u32,
    },
    /// The standard-format ranges of two user components overlap.
    Overlap {
        /// Lower component index.
        a: u32,
        /// Higher component index.
        b: u32,
    },
    /// The compacted size of all components exceeds 4 GiB.
    CompactedTooLarge(u64),
    /// No CPUID entry for leaf 0xD was found (e.g. in KVM's table).
    NoLeaf0xd,
    /// A recorded subleaf number is 64 or more.
    SubleafOutOfRange(u32),
    /// A recorded subleaf is listed twice.
    DuplicateSubleaf(u32),
    /// A recorded subleaf has data but its component is not enumerated as
    /// supported in subleaf 0 or 1.
    UnsupportedSubleafData(u32),
}

impl fmt::Display for InfoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InfoError::NoXsave => f.write_str("CPU does not support XSAVE (no CPUID leaf 0xD)"),
            InfoError::LegacyNotSupported { xcr0 } => {
                write!(
                    f,
                    "CPUID 0xD.0: supported XCR0 {xcr0:#x} lacks x87, or offers extended \
                     state without SSE"
                )
            }
            InfoError::ReservedBit { xcr0, xss } => write!(
                f,
                "CPUID 0xD: reserved bit set (XCR0 {xcr0:#x}, IA32_XSS {xss:#x}: bit 63, or \
                 bit 0/1 in IA32_XSS)"
            ),
            InfoError::UserAndSupervisor(m) => write!(
                f,
                "CPUID 0xD: components {m} ({m:#x}) enumerated as both XCR0 and IA32_XSS state"
            ),
            InfoError::MaxSizeTooSmall(s) => {
                write!(f, "CPUID 0xD.0: maximum XSAVE size {s} is below 576 bytes")
            }
            InfoError::MissingSubleaf(i) => write!(
                f,
                "CPUID 0xD.{i}: component {} is supported but its subleaf is missing or has size 0",
                Name(*i)
            ),
            InfoError::SupervisorFlagMismatch(i) => write!(
                f,
                "CPUID 0xD.{i}: ECX bit 0 (supervisor) disagrees with whether component {} is in \
                 IA32_XSS",
                Name(*i)
            ),
            InfoError::PastAddressSpace {
                index,
                offset,
                size,
            } => write!(
                f,
                "CPUID 0xD.{index}: component {} at offset {offset:#x} with size {size:#x} ends \
                 past 4 GiB",
                Name(*index)
            ),
            InfoError::InsideLegacyRegion { index, offset } => write!(
                f,
                "CPUID 0xD.{index}: component {} at offset {offset} lies inside the legacy region \
                 or XSAVE header (below 576)",
                Name(*index)
            ),
            InfoError::PastMaxSize { index, end, max } => write!(
                f,
                "CPUID 0xD.{index}: component {} ends at {end}, past the maximum XSAVE size {max} \
                 (0xD.0 ECX)",
                Name(*index)
            ),
            InfoError::Overlap { a, b } => write!(
                f,
                "CPUID 0xD: standard-format ranges of components {} and {} overlap",
                Name(*a),
                Name(*b)
            ),
            InfoError::CompactedTooLarge(s) => {
                write!(f, "CPUID 0xD: compacted XSAVE size {s} exceeds 4 GiB")
            }
            InfoError::NoLeaf0xd => f.write_str("CPUID table has no leaf 0xD entries"),
            InfoError::SubleafOutOfRange(i) => {
                write!(f, "CPUID 0xD: subleaf {i} out of range 0..64")
            }
            InfoError::DuplicateSubleaf(i) => write!(f, "CPUID 0xD: subleaf {i} listed twice"),
            InfoError::UnsupportedSubleafData(i) => write!(
                f,
                "CPUID 0xD.{i}: subleaf has data but component {} is not enumerated in subleaf 0 \
                 or 1",
                Name(*i)
            ),
        }
    }
}

/// Prints a component index as its short name when known.
struct Name(u32);

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Xfeature::from_index(self.0) {
            Some(x) => write!(f, "{} ({})", self.0, x.short_name()),
            None => write!(f, "{}", self.0),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for InfoError {}
