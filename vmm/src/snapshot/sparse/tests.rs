//! The sparse encoding: zero pages left out, runs checked, the in-place
//! scan equal to the copying encoder.

use super::*;

/// Scanning in place keeps the same runs, the same bytes (by
/// reference, adjacent pages in one slice), and the CRC and length of
/// the bytes the copying encoder stores, blocks with gaps included.
#[test]
fn pages_in_place_match_the_copied_encoding() {
    let mut ram = vec![0u8; 64 * PAGE_SIZE];
    for (p, at) in [
        (0, 0),
        (1, 4095),
        (2, 17),
        (9, 100),
        (10, 0),
        (40, 5),
        (63, 4095),
    ] {
        ram[p * PAGE_SIZE + at] = (p as u8) | 0x80;
    }
    // Blocks as the pagemap gives them: page 63 and pages 30..50 are
    // scanned; the rest of 30..50 is zero.
    let blocks = [(0, 12), (30, 50), (63, 64)];
    let mut copied = SparseMemory::empty();
    let mut in_place = PagesInPlace::new();
    for (a, b) in blocks {
        let block = &ram[a * PAGE_SIZE..b * PAGE_SIZE];
        copied.append_at((a * PAGE_SIZE) as u64, block);
        in_place.scan_at((a * PAGE_SIZE) as u64, block);
    }
    copied.pad_to(ram.len() as u64);
    in_place.pad_to(ram.len() as u64);
    assert_eq!(in_place.memory.runs, vec![(0, 3), (9, 2), (40, 1), (63, 1)]);
    assert_eq!(in_place.memory.runs, copied.runs);
    assert_eq!(in_place.memory.size, copied.size);
    assert!(in_place.memory.data.is_empty());
    assert_eq!(in_place.slices.len(), 4);
    assert_eq!(in_place.len(), copied.data.len() as u64);
    assert_eq!(in_place.crc(), crc32fast::hash(&copied.data));
    // The slices point into `ram`: nothing was copied.
    assert_eq!(in_place.slices[0].as_ptr(), ram.as_ptr());
    assert!(in_place.to_owned_memory() == copied);
    assert!(!in_place.is_empty());
    assert!(PagesInPlace::new().is_empty());
}

#[test]
fn sparse_memory_skips_zero_pages() {
    let mut ram = vec![0u8; 64 * PAGE_SIZE];
    ram[0] = 1; // page 0
    ram[5 * PAGE_SIZE + 100] = 2; // pages 5..=6
    ram[6 * PAGE_SIZE + 4095] = 3;
    ram[63 * PAGE_SIZE] = 4; // last page
    let s = SparseMemory::encode(&ram);
    assert_eq!(s.runs, vec![(0, 1), (5, 2), (63, 1)]);
    assert_eq!(s.stored_pages(), 4);
    let bytes = s.to_bytes();
    assert_eq!(bytes.len(), 16 + 3 * 16 + 4 * PAGE_SIZE);
    let back = SparseMemory::from_bytes(&bytes).unwrap();
    assert_eq!(back, s);
    let mut out = vec![0u8; ram.len()];
    back.apply(|addr, data| {
        out[addr as usize..addr as usize + data.len()].copy_from_slice(data);
        Ok::<(), std::convert::Infallible>(())
    })
    .unwrap();
    assert_eq!(out, ram);
}

#[test]
fn sparse_memory_rejects_bad_runs() {
    let mut ram = vec![0u8; 8 * PAGE_SIZE];
    ram[PAGE_SIZE] = 1;
    ram[3 * PAGE_SIZE] = 1;
    let good = SparseMemory::encode(&ram).to_bytes();
    // Run 1 starting inside run 0 (overlap).
    let mut b = good.clone();
    b[32..40].copy_from_slice(&1u64.to_le_bytes());
    assert!(SparseMemory::from_bytes(&b).is_err());
    // A run past the end of memory.
    let mut b = good.clone();
    b[32..40].copy_from_slice(&8u64.to_le_bytes());
    assert!(SparseMemory::from_bytes(&b).is_err());
    // Missing page data.
    assert!(SparseMemory::from_bytes(&good[..good.len() - 1]).is_err());
    // Wrong page size.
    let mut b = good;
    b[8..12].copy_from_slice(&8192u32.to_le_bytes());
    assert!(SparseMemory::from_bytes(&b).is_err());
}

#[test]
fn appending_blocks_equals_encoding_at_once() {
    let mut ram = vec![0u8; 16 * PAGE_SIZE];
    for (i, at) in [
        0,
        4 * PAGE_SIZE - 1,
        4 * PAGE_SIZE,
        9 * PAGE_SIZE + 63,
        16 * PAGE_SIZE - 1,
    ]
    .into_iter()
    .enumerate()
    {
        ram[at] = i as u8 + 1;
    }
    let whole = SparseMemory::encode(&ram);
    let mut parts = SparseMemory::empty();
    for block in ram.chunks(3 * PAGE_SIZE) {
        parts.append(block);
    }
    assert_eq!(parts, whole);
    assert_eq!(whole.runs, vec![(0, 1), (3, 2), (9, 1), (15, 1)]);
}

/// `is_zero` finds a single nonzero byte anywhere, in a page, in several
/// pages at once and in a tail shorter than a page.
#[test]
fn is_zero_finds_any_nonzero_byte() {
    for len in [
        0,
        1,
        63,
        64,
        65,
        PAGE_SIZE - 1,
        PAGE_SIZE,
        3 * PAGE_SIZE + 7,
    ] {
        let mut b = vec![0u8; len];
        assert!(is_zero(&b), "len {len}");
        for at in [0, len / 2, len.saturating_sub(1)] {
            if at < len {
                b[at] = 0x80;
                assert!(!is_zero(&b), "len {len}, byte {at}");
                b[at] = 0;
            }
        }
    }
}
