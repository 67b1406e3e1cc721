//! Round trip, and every corruption detected and named.

use super::*;
use crate::arch::layout::PAGE_SIZE;

fn sample() -> Container {
    let mut c = Container::new();
    c.push("meta", b"{\"a\":1}".to_vec());
    c.push("memory", vec![7u8; 5000]);
    c.push(PAGES_SECTION, vec![9u8; 2 * PAGE_SIZE]);
    c.push("vcpu0.regs", (0..144u8).collect());
    c
}

#[test]
fn round_trip() {
    let c = sample();
    let bytes = c.to_bytes();
    assert_eq!(&bytes[..8], b"VMMSNAP\0");
    let table = read_table(&bytes).unwrap();
    assert_eq!(table.len(), 4);
    assert_eq!(
        table[2].offset % PAGE_SIZE as u64,
        0,
        "memory.pages is page-aligned"
    );
    assert!(table.iter().all(|e| e.offset % 64 == 0));
    assert_eq!(Container::parse(&bytes).unwrap(), c);
}

#[test]
fn every_flipped_byte_is_detected() {
    let bytes = sample().to_bytes();
    // Every byte is checked: header, table and sections by a checksum,
    // the alignment padding between sections by the zero rule.
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x40;
        assert!(
            Container::parse(&b).is_err(),
            "flip at byte {i} went unnoticed"
        );
    }
}

#[test]
fn checksum_message_names_the_section() {
    let mut bytes = sample().to_bytes();
    let e = read_table(&bytes).unwrap()[3].clone();
    bytes[e.offset as usize + 3] ^= 1;
    let err = Container::parse(&bytes).unwrap_err();
    assert!(matches!(err, FormatError::Checksum { .. }));
    assert!(err.to_string().contains("section \"vcpu0.regs\""), "{err}");
}

#[test]
fn truncation_and_version() {
    let bytes = sample().to_bytes();
    for n in [0, 5, 40, 100, bytes.len() - 1] {
        let err = Container::parse(&bytes[..n]).unwrap_err();
        assert!(matches!(err, FormatError::Truncated { .. }), "{n}: {err}");
    }
    // Version 1 (the index and the pages in one section) is refused by
    // its version, before anything else is looked at, and so is a version
    // after this vmm's; version 2 (no `memory.regions`) is read.
    let mut v2 = bytes.clone();
    v2[8] = 2;
    super::reseal(&mut v2);
    let read = Container::parse(&v2).unwrap();
    assert_eq!((read.version, &read.sections), (2, &sample().sections));
    for v in [1u8, 4] {
        let mut b = bytes.clone();
        b[8] = v;
        assert_eq!(
            Container::parse(&b).unwrap_err(),
            FormatError::Version { found: v.into() }
        );
    }
    let mut b = bytes;
    b[0] = b'X';
    assert!(matches!(
        Container::parse(&b).unwrap_err(),
        FormatError::BadMagic { .. }
    ));
}
