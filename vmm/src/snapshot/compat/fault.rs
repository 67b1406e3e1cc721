//! One broken rule, as the rule modules report it: the field and what is
//! wrong, refused as invalid (no host accepts it) or incompatible (this
//! host lacks something); [`super::check`] names the file.

use std::path::Path;

use crate::snapshot::error::SnapshotError;

/// One broken rule: the field, as `section.field`, and what is wrong
/// with it. The rule modules return these; [`check`] names the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No host accepts it.
    Invalid {
        /// `vcpu0.sregs.cr4`, `meta.vcpus`, ...
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// This host lacks something it needs.
    Incompatible {
        /// As for `Invalid`.
        field: String,
        /// What the state needs that this host lacks.
        problem: String,
    },
}

/// A field no host accepts.
pub(crate) fn invalid(field: impl Into<String>, problem: impl Into<String>) -> Fault {
    Fault::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

/// A field this host cannot hold.
pub(crate) fn incompatible(field: impl Into<String>, problem: impl Into<String>) -> Fault {
    Fault::Incompatible {
        field: field.into(),
        problem: problem.into(),
    }
}

impl Fault {
    /// The error for `path`.
    pub(crate) fn at(self, path: &Path) -> SnapshotError {
        match self {
            Fault::Invalid { field, problem } => SnapshotError::Invalid {
                path: path.to_path_buf(),
                field,
                problem,
            },
            Fault::Incompatible { field, problem } => SnapshotError::Incompatible {
                path: path.to_path_buf(),
                reason: format!("{field}: {problem}"),
            },
        }
    }
}
