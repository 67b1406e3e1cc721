//! Entry points for the fuzz targets and their stable replay
//! (`vmm/tests/fuzz_bodies`): parsers of outside bytes that are not
//! otherwise part of the library's API. Not for other uses.

use std::path::Path;

/// `vmm bench peers`' HTTP/1.1 response reader on `bytes` as a peer's API
/// server would send them: the status and body, or why it refused them.
///
/// # Errors
/// What the reader refuses, as a message.
pub fn http_response(bytes: &[u8]) -> Result<(u16, String), String> {
    crate::bench::peers::http::read_response(&mut &bytes[..]).map_err(|e| e.to_string())
}

/// `vmm features import`'s detection and every format's parser on `text`,
/// as if read from a file named `fuzz`: the profile's XCR0, or why it was
/// refused.
///
/// # Errors
/// What the import refuses, as a message.
pub fn import(text: &str) -> Result<u64, String> {
    crate::features::import::parse_any(Path::new("fuzz"), text)
        .map(|p| p.cpu.supported_xcr0().bits())
        .map_err(|e| e.to_string())
}

/// THE snapshot validation `vmm snapshot info` and `vmm restore` share, on
/// a whole file's bytes, against the host the file says it was written
/// on (no KVM, see `HostFacts::as_written`): the table's bounds, the
/// sections' decoding, the memory bound from `meta`, then every rule.
/// Returns what only KVM could tell.
///
/// # Errors
/// The refusal, as `vmm` words it.
pub fn snapshot_check(bytes: &[u8]) -> Result<Vec<String>, String> {
    use crate::snapshot::format::{read_table, Container};
    use crate::snapshot::state::{bounds, Snapshot};
    let table = read_table(bytes).map_err(|e| e.to_string())?;
    bounds::check_table(&table).map_err(|e| e.to_string())?;
    let snap = Snapshot::from_container(&Container::parse(bytes).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let ram = snap.meta.mem_mib.saturating_mul(1 << 20);
    bounds::check_memory(&table, ram.min(crate::arch::layout::MAX_MEM_MIB << 20))
        .map_err(|e| e.to_string())?;
    let host = crate::snapshot::compat::HostFacts::as_written(&snap)
        .ok_or_else(|| "meta: the source KVM's leaf 0xD is inconsistent".to_string())?;
    crate::snapshot::compat::check(Path::new("fuzz"), &snap, &host)
        .map(|c| c.must_try)
        .map_err(|e| e.to_string())
}
