//! Which failures are the command line's own: the one rule behind exit
//! statuses 68 and 64.
//!
//! A refusal that depends only on what was typed (a value outside its
//! documented range, a malformed or architecturally invalid mask, an
//! unknown workload, a word the VMM owns, options that need each other)
//! is a usage error: the same command fails the same way on every host.
//! Everything else, where the command line is valid but this host, its
//! KVM or a file named on it cannot serve it, is the VMM's failure.

use super::MemoryError;
use super::{BaselineError, Error, PolicyError};
use xstate::Xcr0Error;

impl Error {
    /// Whether the command line alone is at fault, whatever the host: such
    /// a failure exits with the usage status (68), any other with the
    /// VMM's (64).
    ///
    /// # Examples
    ///
    /// ```
    /// use vmm::Error;
    ///
    /// assert!(Error::Argument("--snapshot-after needs --snapshot-file".into()).is_usage());
    /// assert!(!Error::Host("the native rows' memory could not be mapped".into()).is_usage());
    /// ```
    pub fn is_usage(&self) -> bool {
        match self {
            Error::Argument(_) => true,
            // Above KVM's limit is above the guest's 8 CPUs too: refused
            // on every host.
            Error::VcpuCount(_) => true,
            Error::Policy(e) => e.is_usage(),
            Error::Memory(e) => matches!(e, MemoryError::SizeOutOfRange(_)),
            Error::Baseline(e) => matches!(e, BaselineError::BadName { .. }),
            _ => false,
        }
    }
}

impl PolicyError {
    /// Whether the mask is refused for what it is (it does not parse, or
    /// breaks an XCR0 rule every CPU enforces), not for what this host
    /// lacks.
    pub fn is_usage(&self) -> bool {
        match self {
            PolicyError::Parse { .. } => true,
            PolicyError::Unsupported { source, .. } => !matches!(source, Xcr0Error::Unsupported(_)),
            _ => false,
        }
    }
}
