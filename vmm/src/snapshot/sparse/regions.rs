//! The `memory.regions` section (format 3): where guest RAM lies in the
//! guest's physical address space. The page index counts RAM offsets,
//! which run through the regions in order without a gap (see
//! [`crate::arch::layout::ram_pieces`]); this section says where each
//! region starts, so a RAM larger than the space below the 32-bit hole
//! (the rest of it from 4 GiB) is described by the file itself.
//!
//! ```text
//! section "memory.regions"
//!      0     4  number of regions n (0..=MAX_REGIONS; 0 only for no RAM)
//!      4     4  zero
//!      8  16*n  regions: guest physical address (u64), length in bytes
//!               (u64); page-aligned, ascending, not overlapping, their
//!               lengths adding up to the `memory` section's size
//! ```
//!
//! A format 2 file has no such section: its RAM is one region from
//! address 0.

use super::super::format::{le_u32, le_u64, FormatError};
use super::PAGE_SIZE;
use crate::arch::layout::RamRegion;

/// The section's name.
pub const REGIONS_SECTION: &str = "memory.regions";

/// Most regions a file may list (this vmm's memory map has two).
pub const MAX_REGIONS: usize = 16;

/// The section's bytes for `regions`.
pub fn regions_bytes(regions: &[RamRegion]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + 16 * regions.len());
    out.extend_from_slice(&(regions.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for r in regions {
        out.extend_from_slice(&r.addr.to_le_bytes());
        out.extend_from_slice(&r.len.to_le_bytes());
    }
    out
}

/// Decode and check the section for a RAM of `size` bytes (the `memory`
/// section's): every rule of the module's table, each refusal naming it.
/// A pure function over bytes.
pub fn regions_from(b: &[u8], size: u64) -> Result<Vec<RamRegion>, FormatError> {
    let bad = |m: String| FormatError::Malformed(format!("section \"{REGIONS_SECTION}\": {m}"));
    if b.len() < 8 {
        return Err(bad(format!(
            "{} bytes, shorter than its 8-byte header",
            b.len()
        )));
    }
    let n = le_u32(b, 0) as usize;
    if n > MAX_REGIONS {
        return Err(bad(format!("{n} regions, expected at most {MAX_REGIONS}")));
    }
    if le_u32(b, 4) != 0 {
        return Err(bad("reserved bytes 4..8 are not zero".into()));
    }
    if b.len() != 8 + 16 * n {
        return Err(bad(format!(
            "{} bytes for {n} regions, expected {}",
            b.len(),
            8 + 16 * n
        )));
    }
    let page = PAGE_SIZE as u64;
    let mut regions: Vec<RamRegion> = Vec::with_capacity(n);
    let mut total = 0u64;
    for k in 0..n {
        let (addr, len) = (le_u64(b, 8 + 16 * k), le_u64(b, 16 + 16 * k));
        let what = format!("region {k} ({len:#x} bytes at {addr:#x})");
        if len == 0 || !addr.is_multiple_of(page) || !len.is_multiple_of(page) {
            return Err(bad(format!("{what} is empty or not whole pages")));
        }
        if addr.checked_add(len).is_none() {
            return Err(bad(format!("{what} ends past the 64-bit address space")));
        }
        if let Some(prev) = regions.last().filter(|p| addr < p.end()) {
            return Err(bad(format!(
                "{what} overlaps or comes before region {} (ending at {:#x})",
                k - 1,
                prev.end()
            )));
        }
        total = total
            .checked_add(len)
            .ok_or_else(|| bad(format!("{what}: the lengths overflow")))?;
        regions.push(RamRegion { addr, len });
    }
    if total != size {
        return Err(bad(format!(
            "the regions hold {total} bytes, the \"memory\" section {size}"
        )));
    }
    Ok(regions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::layout::ram_regions;

    /// The map of 64 MiB, 3 GiB, 4 GiB and 16 GiB guests survives its
    /// section as it is.
    #[test]
    fn regions_round_trip() {
        for bytes in [64 << 20, 3 << 30, 4 << 30, 16 << 30] {
            let r = ram_regions(bytes);
            assert_eq!(regions_from(&regions_bytes(&r), bytes).unwrap(), r);
        }
    }

    /// Each broken rule is refused, naming it.
    #[test]
    fn bad_regions_are_refused_by_name() {
        let good = regions_bytes(&ram_regions(16 << 30));
        let size = 16 << 30;
        let with = |at: usize, v: u64| {
            let mut b = good.clone();
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            b
        };
        let mut count = good.clone();
        count[0..4].copy_from_slice(&[0; 4]);
        count.truncate(8);
        let mut many = good.clone();
        many[0] = 17;
        let mut reserved = good.clone();
        reserved[5] = 1;
        for (b, size, needle) in [
            (good[..4].to_vec(), size, "shorter than its 8-byte header"),
            (count, size, "the regions hold 0 bytes"),
            (many, size, "17 regions"),
            (reserved, size, "reserved bytes"),
            (good[..good.len() - 1].to_vec(), size, "bytes for 2 regions"),
            (with(8, 1), size, "not whole pages"),
            (
                with(32, 0),
                size,
                "region 1 (0x0 bytes at 0x100000000) is empty",
            ),
            (with(24, 1 << 30), size, "overlaps or comes before region 0"),
            (with(24, !0xfff), size, "past the 64-bit address space"),
            (good.clone(), size - 4096, "the regions hold"),
        ] {
            let e = regions_from(&b, size).unwrap_err().to_string();
            assert!(e.contains(needle), "{needle}: {e}");
            assert!(e.contains(REGIONS_SECTION), "{e}");
        }
    }
}
