//! [`ConvertError`]: why a conversion failed, shared by the borrowing and
//! the owned conversions and by the init-image writers.

use core::fmt;

use crate::layout::LayoutError;
use crate::mask::XfeatureMask;
use crate::rules::Xcr0Error;

/// Why a conversion failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvertError {
    /// The source is shorter than its header or components require.
    SourceTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The destination is shorter than the converted image.
    DestinationTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// A standard-format source was expected but XCOMP_BV is not 0.
    NotStandard {
        /// The source's XCOMP_BV.
        xcomp_bv: u64,
    },
    /// A compacted-format source was expected but XCOMP_BV bit 63 is clear.
    NotCompacted {
        /// The source's XCOMP_BV.
        xcomp_bv: u64,
    },
    /// The source's XSTATE_BV names components the CPU does not support.
    Unsupported(XfeatureMask),
    /// The source's XSTATE_BV has bits outside its XCOMP_BV.
    XstateBvOutsideXcompBv(XfeatureMask),
    /// The source holds (non-init) state for components the target mask lacks.
    StateNotRequested(XfeatureMask),
    /// A layout could not be computed.
    Layout(LayoutError),
    /// The XCR0 value is invalid.
    Xcr0(Xcr0Error),
}

impl From<LayoutError> for ConvertError {
    fn from(e: LayoutError) -> Self {
        ConvertError::Layout(e)
    }
}

impl From<Xcr0Error> for ConvertError {
    fn from(e: Xcr0Error) -> Self {
        ConvertError::Xcr0(e)
    }
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConvertError::SourceTooSmall { need, have } => {
                write!(f, "xsave source too small: {have} bytes, need {need}")
            }
            ConvertError::DestinationTooSmall { need, have } => {
                write!(f, "xsave destination too small: {have} bytes, need {need}")
            }
            ConvertError::NotStandard { xcomp_bv } => write!(
                f,
                "xsave source is not in the standard format (XCOMP_BV {xcomp_bv:#x}, expected 0)"
            ),
            ConvertError::NotCompacted { xcomp_bv } => write!(
                f,
                "xsave source is not in the compacted format (XCOMP_BV {xcomp_bv:#x}, bit 63 clear)"
            ),
            ConvertError::Unsupported(m) => {
                write!(
                    f,
                    "xsave source holds components {m} ({m:#x}) the CPU does not support"
                )
            }
            ConvertError::XstateBvOutsideXcompBv(m) => {
                write!(
                    f,
                    "xsave source: XSTATE_BV has components {m} ({m:#x}) outside XCOMP_BV"
                )
            }
            ConvertError::StateNotRequested(m) => write!(
                f,
                "xsave source holds live state for components {m} ({m:#x}) the target mask lacks"
            ),
            ConvertError::Layout(e) => fmt::Display::fmt(e, f),
            ConvertError::Xcr0(e) => fmt::Display::fmt(e, f),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ConvertError {}
