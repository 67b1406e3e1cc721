//! Known-good images pass; each rule refuses the image that breaks it.

use super::format::*;
use super::*;

const RAM: u64 = 64 << 20;
const LOAD_AT: u64 = 0x10_0000;

/// A program header to build: type, paddr, file bytes, memsz.
struct Seg {
    p_type: u32,
    paddr: u64,
    data: Vec<u8>,
    memsz: u64,
}

fn load(paddr: u64, data: &[u8]) -> Seg {
    Seg {
        p_type: PT_LOAD,
        paddr,
        data: data.to_vec(),
        memsz: data.len() as u64,
    }
}

fn note(name: &[u8], n_type: u32, desc: &[u8]) -> Vec<u8> {
    let mut n = Vec::new();
    n.extend_from_slice(&(name.len() as u32).to_le_bytes());
    n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
    n.extend_from_slice(&n_type.to_le_bytes());
    n.extend_from_slice(name);
    n.resize(n.len().next_multiple_of(4), 0);
    n.extend_from_slice(desc);
    n.resize(n.len().next_multiple_of(4), 0);
    n
}

fn pvh_note_bytes(entry: u64) -> Vec<u8> {
    note(
        XEN_NOTE_NAME,
        XEN_ELFNOTE_PHYS32_ENTRY,
        &entry.to_le_bytes(),
    )
}

fn notes(data: Vec<u8>) -> Seg {
    Seg {
        p_type: PT_NOTE,
        paddr: 0,
        memsz: data.len() as u64,
        data,
    }
}

/// An ELF64 x86-64 executable with these segments, their bytes after
/// the program header table in order.
fn elf(segs: &[Seg]) -> Vec<u8> {
    let phnum = segs.len() as u64;
    let mut e = Vec::new();
    e.extend_from_slice(ELF_MAGIC);
    e.extend_from_slice(&[ELFCLASS64, ELFDATA2LSB, 1, 0]);
    e.extend_from_slice(&[0; 8]);
    e.extend_from_slice(&ET_EXEC.to_le_bytes());
    e.extend_from_slice(&EM_X86_64.to_le_bytes());
    e.extend_from_slice(&1u32.to_le_bytes());
    e.extend_from_slice(&LOAD_AT.to_le_bytes()); // e_entry
    e.extend_from_slice(&EHDR_SIZE.to_le_bytes()); // e_phoff
    e.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    e.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    e.extend_from_slice(&(EHDR_SIZE as u16).to_le_bytes());
    e.extend_from_slice(&(PHDR_SIZE as u16).to_le_bytes());
    e.extend_from_slice(&(phnum as u16).to_le_bytes());
    e.extend_from_slice(&[64, 0, 0, 0, 0, 0]); // e_shentsize, e_shnum, e_shstrndx
    assert_eq!(e.len() as u64, EHDR_SIZE);
    let mut off = EHDR_SIZE + PHDR_SIZE * phnum;
    for s in segs {
        e.extend_from_slice(&s.p_type.to_le_bytes());
        e.extend_from_slice(&5u32.to_le_bytes());
        e.extend_from_slice(&off.to_le_bytes());
        e.extend_from_slice(&s.paddr.to_le_bytes());
        e.extend_from_slice(&s.paddr.to_le_bytes());
        e.extend_from_slice(&(s.data.len() as u64).to_le_bytes());
        e.extend_from_slice(&s.memsz.to_le_bytes());
        e.extend_from_slice(&4u64.to_le_bytes());
        off += s.data.len() as u64;
    }
    for s in segs {
        e.extend_from_slice(&s.data);
    }
    e
}

/// Offset of program header `i`'s field at `field`.
fn ph(i: u64, field: u64) -> usize {
    (EHDR_SIZE + i * PHDR_SIZE + field) as usize
}

fn set_u64(e: &mut [u8], at: usize, v: u64) {
    e[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn good() -> Vec<u8> {
    elf(&[load(LOAD_AT, &[0xf4; 16]), notes(pvh_note_bytes(LOAD_AT))])
}

fn err(image: &[u8]) -> String {
    check_image(image, RAM).unwrap_err().to_string()
}

#[test]
fn accepts_a_minimal_pvh_kernel_and_the_embedded_guest() {
    let plan = check_image(&good(), RAM).unwrap();
    assert_eq!(plan.entry, LOAD_AT);
    assert_eq!(plan.end, LOAD_AT + 16);
    assert_eq!(
        plan.segments,
        [LoadSegment {
            index: 0,
            paddr: LOAD_AT,
            offset: EHDR_SIZE + 2 * PHDR_SIZE,
            filesz: 16,
            memsz: 16,
            writable: false
        }]
    );
    // A 4-byte descriptor is the 32-bit address itself.
    let short = note(
        XEN_NOTE_NAME,
        XEN_ELFNOTE_PHYS32_ENTRY,
        &0x10_0004u32.to_le_bytes(),
    );
    let plan = check_image(&elf(&[load(LOAD_AT, &[0; 16]), notes(short)]), RAM).unwrap();
    assert_eq!(plan.entry, 0x10_0004);
    // Other notes before it are skipped.
    let mut n = note(b"GNU\0", 3, &[1, 2, 3, 4, 5]);
    n.extend(pvh_note_bytes(LOAD_AT + 8));
    let plan = check_image(&elf(&[load(LOAD_AT, &[0; 16]), notes(n)]), RAM).unwrap();
    assert_eq!(plan.entry, LOAD_AT + 8);

    // `p_flags` with PF_W: a writable segment.
    let mut w = good();
    w[EHDR_SIZE as usize + 4] = 6;
    assert!(check_image(&w, RAM).unwrap().segments[0].writable);

    let plan = check_image(crate::GUEST_KERNEL, RAM).unwrap();
    assert!(plan.entry >= LOAD_AT && plan.end <= RAM, "{plan:?}");
    // The embedded guest: code and read-only data, then its writable data
    // from a 32 KiB boundary (one prefetch group of KVM's shadow MMU; see
    // guest/linker.ld).
    let kinds: Vec<bool> = plan.segments.iter().map(|s| s.writable).collect();
    assert_eq!(kinds, [false, true], "{plan:?}");
    assert!(plan.segments[1].paddr.is_multiple_of(32 << 10), "{plan:?}");
}

#[test]
fn refuses_load_segments_below_1_mib() {
    let e = err(&elf(&[
        load(0x8000, &[0xf4]),
        notes(pvh_note_bytes(0x8000)),
    ]));
    assert_eq!(
        e,
        "PT_LOAD segment 0 at 0x8000 is below 1 MiB (0x100000), where the boot structures \
         would overwrite it"
    );
}

#[test]
fn refuses_segments_that_do_not_fit_in_ram() {
    // p_memsz larger than RAM.
    let mut big = load(LOAD_AT, &[0xf4]);
    big.memsz = RAM;
    let e = err(&elf(&[big, notes(pvh_note_bytes(LOAD_AT))]));
    assert!(
        e.starts_with("PT_LOAD segment 0 at 0x100000 with p_memsz 0x4000000 does not fit"),
        "{e}"
    );
    // An end that overflows u64.
    let mut wrap = load(LOAD_AT, &[0xf4]);
    wrap.memsz = u64::MAX;
    assert!(matches!(
        check_image(&elf(&[wrap, notes(pvh_note_bytes(LOAD_AT))]), RAM),
        Err(ImageError::LoadPastRam { index: 0, .. })
    ));
    // In the MMIO hole.
    let e = err(&elf(&[
        load(0xc000_0000, &[0xf4]),
        notes(pvh_note_bytes(LOAD_AT)),
    ]));
    assert!(e.contains("segment 0 at 0xc0000000"), "{e}");
}

#[test]
fn refuses_overlapping_segments() {
    let e = err(&elf(&[
        load(LOAD_AT, &[0xf4; 0x100]),
        notes(pvh_note_bytes(LOAD_AT)),
        load(LOAD_AT + 0x80, &[0x90; 0x10]),
    ]));
    assert_eq!(
        e,
        "PT_LOAD segments 0 and 2 overlap at 0x100080: the later would silently overwrite \
         the earlier"
    );
    // Adjacent is fine.
    check_image(
        &elf(&[
            load(LOAD_AT, &[0xf4; 0x100]),
            notes(pvh_note_bytes(LOAD_AT)),
            load(LOAD_AT + 0x100, &[0x90; 0x10]),
        ]),
        RAM,
    )
    .unwrap();
}

#[test]
fn refuses_bad_pvh_entries_naming_the_rule() {
    for (entry, rule) in [
        (0, "is 0"),
        (0x1_0010_0000, "above 4 GiB"),
        (0xfee0_0000, "MMIO hole"),
        (RAM + 0x1000, "past the end of guest RAM"),
        (0x8000, "below 1 MiB"),
        (LOAD_AT + 0x10_0000, "not inside any PT_LOAD"),
        // One past the loaded bytes.
        (LOAD_AT + 16, "not inside any PT_LOAD"),
    ] {
        let e = err(&elf(&[
            load(LOAD_AT, &[0xf4; 16]),
            notes(pvh_note_bytes(entry)),
        ]));
        assert!(
            e.starts_with(&format!("PVH entry {entry:#x} ")) && e.contains(rule),
            "{entry:#x}: {e}"
        );
    }
}

#[test]
fn refuses_notes_that_overrun_their_segment() {
    // descsz 0xfffffff0.
    let mut n = pvh_note_bytes(LOAD_AT);
    n[4..8].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let e = err(&elf(&[load(LOAD_AT, &[0xf4]), notes(n)]));
    assert_eq!(
        e,
        format!(
            "PT_NOTE segment 1: the note at offset {:#x} (namesz 0x4, descsz 0xfffffff0) \
             runs past the end of the segment",
            EHDR_SIZE + 2 * PHDR_SIZE + 1
        )
    );
    // A truncated header.
    let e = err(&elf(&[load(LOAD_AT, &[0xf4]), notes(vec![4, 0, 0, 0, 8])]));
    assert!(
        e.contains("PT_NOTE segment 1") && e.contains("runs past"),
        "{e}"
    );
    // A PT_NOTE whose filesz is 1 TB.
    let mut image = good();
    set_u64(&mut image, ph(1, 32), 1 << 40);
    let e = err(&image);
    assert!(
        e.starts_with("segment 1: its 0x10000000000 file bytes at offset"),
        "{e}"
    );
    // A descriptor that is not an address.
    let n = note(XEN_NOTE_NAME, XEN_ELFNOTE_PHYS32_ENTRY, &[0; 6]);
    let e = err(&elf(&[load(LOAD_AT, &[0xf4]), notes(n)]));
    assert!(e.contains("descriptor is 0x6 bytes"), "{e}");
    // Two PVH notes.
    let mut n = pvh_note_bytes(LOAD_AT);
    n.extend(pvh_note_bytes(LOAD_AT));
    let e = err(&elf(&[load(LOAD_AT, &[0xf4]), notes(n)]));
    assert!(e.starts_with("more than one PVH entry note"), "{e}");
    let e = err(&elf(&[
        load(LOAD_AT, &[0xf4]),
        notes(pvh_note_bytes(LOAD_AT)),
        notes(pvh_note_bytes(LOAD_AT)),
    ]));
    assert!(e.contains("segments 1 and 2"), "{e}");
}

#[test]
fn refuses_broken_headers_and_tables() {
    assert_eq!(check_image(b"MZ", RAM), Err(ImageError::NotElf));
    assert_eq!(
        check_image(b"\x7fEL", RAM),
        Err(ImageError::TooShort { len: 3 })
    );
    let g = good();
    assert_eq!(
        check_image(&g[..100], RAM),
        Err(ImageError::PhdrTable {
            phoff: 64,
            phnum: 2,
            len: 100
        })
    );
    // The last code byte cut off.
    assert!(matches!(
        check_image(&g[..g.len() - 1], RAM),
        Err(ImageError::SegmentPastEof { index: 1, .. })
    ));
    let mut e = g.clone();
    e[4] = 1;
    assert_eq!(check_image(&e, RAM), Err(ImageError::Class(1)));
    let mut e = g.clone();
    e[5] = 2;
    assert_eq!(check_image(&e, RAM), Err(ImageError::Endianness(2)));
    let mut e = g.clone();
    e[16] = 3;
    assert_eq!(check_image(&e, RAM), Err(ImageError::Type(3)));
    let mut e = g.clone();
    e[18] = 0xb7;
    assert_eq!(check_image(&e, RAM), Err(ImageError::Machine(0xb7)));
    let mut e = g.clone();
    e[54] = 32;
    assert_eq!(check_image(&e, RAM), Err(ImageError::PhentSize(32)));
    let mut e = g.clone();
    set_u64(&mut e, 32, u64::MAX - 8);
    assert!(matches!(
        check_image(&e, RAM),
        Err(ImageError::PhdrTable { .. })
    ));
    let mut e = g.clone();
    set_u64(&mut e, 24, 0x1000);
    assert_eq!(check_image(&e, RAM), Err(ImageError::ElfEntryLow(0x1000)));
    // filesz > memsz.
    let mut e = g.clone();
    set_u64(&mut e, ph(0, 40), 8);
    assert_eq!(
        check_image(&e, RAM),
        Err(ImageError::FileLargerThanMemory {
            index: 0,
            filesz: 16,
            memsz: 8
        })
    );
    // No PVH note, no PT_LOAD.
    assert_eq!(
        check_image(&elf(&[load(LOAD_AT, &[0xf4])]), RAM),
        Err(ImageError::NoPvhEntry)
    );
    assert_eq!(
        check_image(&elf(&[notes(pvh_note_bytes(LOAD_AT))]), RAM),
        Err(ImageError::NoLoad)
    );
}

#[test]
fn never_panics_on_truncations_or_single_byte_changes() {
    let g = good();
    for n in 0..g.len() {
        let _ = check_image(&g[..n], RAM);
    }
    for i in 0..g.len() {
        for v in [0u8, 0x7f, 0x80, 0xff] {
            let mut e = g.clone();
            e[i] = v;
            let _ = check_image(&e, RAM);
        }
    }
}

fn entry64_note_bytes(entry: u64) -> Vec<u8> {
    note(VMM_NOTE_NAME, VMM_NOTE_ENTRY64, &entry.to_le_bytes())
}

#[test]
fn reads_the_optional_direct_entry_note() {
    assert_eq!(check_image(&good(), RAM).unwrap().entry64, None);
    let mut n = pvh_note_bytes(LOAD_AT);
    n.extend(entry64_note_bytes(LOAD_AT + 4));
    let plan = check_image(&elf(&[load(LOAD_AT, &[0; 16]), notes(n)]), RAM).unwrap();
    assert_eq!((plan.entry, plan.entry64), (LOAD_AT, Some(LOAD_AT + 4)));
    // Another owner's note of the same type is not ours.
    let mut n = pvh_note_bytes(LOAD_AT);
    n.extend(note(
        b"GNU\0",
        VMM_NOTE_ENTRY64,
        &(LOAD_AT + 4).to_le_bytes(),
    ));
    let plan = check_image(&elf(&[load(LOAD_AT, &[0; 16]), notes(n)]), RAM).unwrap();
    assert_eq!(plan.entry64, None);
    // The embedded guest declares one, inside its image.
    let plan = check_image(crate::GUEST_KERNEL, RAM).unwrap();
    let e64 = plan.entry64.expect("the embedded guest has a direct entry");
    assert!(
        e64 >= LOAD_AT && e64 < plan.end && e64 != plan.entry,
        "{plan:?}"
    );
}

#[test]
fn refuses_bad_direct_entries_naming_the_rule() {
    let with = |extra: Vec<u8>| {
        let mut n = pvh_note_bytes(LOAD_AT);
        n.extend(extra);
        err(&elf(&[load(LOAD_AT, &[0; 16]), notes(n)]))
    };
    assert_eq!(
        with(note(VMM_NOTE_NAME, VMM_NOTE_ENTRY64, &[1, 2, 3, 4])),
        "PT_NOTE segment 1: the vmm 64-bit entry note's descriptor is 0x4 bytes; it must be 8"
    );
    let mut two = entry64_note_bytes(LOAD_AT);
    two.extend(entry64_note_bytes(LOAD_AT));
    assert_eq!(
        with(two),
        "more than one vmm 64-bit entry note (in PT_NOTE segments 1 and 1)"
    );
    for (entry, rule) in [
        (
            LOAD_AT + 16,
            "is not inside any PT_LOAD segment's file bytes",
        ),
        (0x8_0000, "is below 1 MiB"),
        (RAM, "is past the end of guest RAM"),
    ] {
        let e = with(entry64_note_bytes(entry));
        assert!(
            e.starts_with(&format!("vmm 64-bit entry {entry:#x} ")) && e.contains(rule),
            "{entry:#x}: {e}"
        );
    }
    // Above the first GiB, which the direct entry's page tables map.
    let big = 2u64 << 30;
    let mut n = pvh_note_bytes(LOAD_AT);
    n.extend(entry64_note_bytes(1 << 30));
    let e = check_image(&elf(&[load(LOAD_AT, &[0; 16]), notes(n)]), big)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "vmm 64-bit entry 0x40000000 is above the first GiB, which is all the direct entry's page tables map"
    );
}

/// A Xen guest-OS note "linux" (what a PVH Linux carries) marks the image
/// Linux, and only that note: another name, type or owner does not; the
/// embedded guest is not Linux.
#[test]
fn reads_the_linux_guest_os_note() {
    let with = |extra: Vec<u8>| {
        let mut n = pvh_note_bytes(LOAD_AT);
        n.extend(extra);
        check_image(&elf(&[load(LOAD_AT, &[0; 16]), notes(n)]), RAM)
            .unwrap()
            .linux
    };
    assert!(with(note(XEN_NOTE_NAME, 6, b"linux\0")));
    assert!(!with(note(XEN_NOTE_NAME, 6, b"netbsd\0")));
    assert!(!with(note(XEN_NOTE_NAME, 7, b"linux\0")));
    assert!(!with(note(b"GNU\0", 6, b"linux\0")));
    assert!(!check_image(&good(), RAM).unwrap().linux);
    assert!(!check_image(crate::GUEST_KERNEL, RAM).unwrap().linux);
}
