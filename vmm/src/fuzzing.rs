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
