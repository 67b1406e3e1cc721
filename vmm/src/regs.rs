//! Compatibility path: register dumps live in [`crate::vstate::dump`].

pub use crate::vstate::dump::RegisterDump;
