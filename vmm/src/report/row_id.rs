//! The identity of a result row, shared by every join of rows.

/// What makes two result rows the same measurement: the workload, its
/// variant and its size. The guest's rows, the native side's, every
/// round's of a benchmark and every vCPU's are joined by it, and only by
/// it (never by comparing names field by field at each join).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowId<'a> {
    /// Workload name (`aes-128-ctr`, `dgemm`).
    pub name: &'a str,
    /// Implementation variant (`vaes`, `avx2`).
    pub variant: &'a str,
    /// Problem size.
    pub size: u64,
}
