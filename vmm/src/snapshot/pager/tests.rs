//! The pager without a VM: pages from a file into RAM, up front and on
//! demand (the test thread's own reads fault them in), each verified.

use std::io::Write;

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::{PageError, PageSource, Pages, PagesMode};
use crate::snapshot::format::SectionInfo;
use crate::snapshot::sparse::{SparseMemory, PAGE_SIZE};
use crate::vstate::machine::allocate_ram;

/// Where the pages sit in the test file (page-aligned, as in a snapshot).
const AT: u64 = 2 * PAGE_SIZE as u64;

/// 64 MiB of RAM with data in a few runs and a report record (its magic
/// and size at a 64-byte boundary) running from page 40 into page 41,
/// which is not stored (zero).
fn ram() -> Vec<u8> {
    let mut ram = vec![0u8; 64 << 20];
    for (page, len) in [(0usize, 3usize), (40, 1), (100, 70), (9000, 2)] {
        for p in page..page + len {
            for (i, b) in ram[p * PAGE_SIZE..(p + 1) * PAGE_SIZE]
                .iter_mut()
                .enumerate()
            {
                *b = (p * 7 + i * 13 + 1) as u8;
            }
        }
    }
    let rec = 41 * PAGE_SIZE - 128;
    ram[rec..rec + 8].copy_from_slice(&guest::protocol::REPORT_MAGIC.to_le_bytes());
    ram[rec + 12..rec + 16].copy_from_slice(&512u32.to_le_bytes());
    ram
}

/// The file of `memory`'s pages (at [`AT`]), `edit` applied to its bytes,
/// and the memory's index pointing into it.
/// The file is closed once written: a file open for writing cannot be
/// leased.
fn file_of(
    memory: &SparseMemory,
    edit: impl FnOnce(&mut Vec<u8>),
) -> (tempfile::TempPath, SparseMemory) {
    let mut bytes = vec![0u8; AT as usize];
    bytes.extend_from_slice(&memory.data);
    edit(&mut bytes);
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&bytes).unwrap();
    let f = f.into_temp_path();
    let mut index = memory.clone();
    index.data = Vec::new();
    index.in_file = Some(SectionInfo {
        name: "memory.pages".into(),
        offset: AT,
        length: memory.data.len() as u64,
        crc32: crc32fast::hash(&memory.data),
    });
    (f, index)
}

fn source(f: &tempfile::TempPath, index: &SparseMemory, lease: bool) -> PageSource {
    let file = std::fs::File::open(f).unwrap();
    let leased = lease && super::take_lease(&file).is_ok();
    PageSource::new(file, leased, index).unwrap()
}

fn fresh() -> GuestMemoryMmap {
    allocate_ram(64).unwrap()
}

/// Every byte of `mem` as `want` (read through the guest-memory accessors:
/// on demand, these reads fault the pages in).
fn assert_ram(mem: &GuestMemoryMmap, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    mem.read_slice(&mut got, GuestAddress(0)).unwrap();
    assert!(got == want, "guest RAM differs from the snapshot's");
}

#[test]
fn up_front_fills_verifies_and_keeps_the_report_record() {
    let ram = ram();
    let memory = SparseMemory::encode(&ram);
    assert_eq!(memory.page_crcs.len() as u64, memory.stored_pages());
    let (f, index) = file_of(&memory, |_| {});
    let mem = fresh();
    let pages = source(&f, &index, false).fill(&mem, true).unwrap();
    assert_eq!(
        pages.mode(),
        &PagesMode::UpFront {
            why: "--verify-memory".into()
        }
    );
    pages.wait().unwrap();
    assert_ram(&mem, &ram);
    let rec = (41 * PAGE_SIZE - 128) as u64;
    let kept = pages.kept();
    assert_eq!(kept.len(), 1, "one report record");
    assert_eq!(kept[0].0, rec);
    assert!(
        kept[0].1 == ram[rec as usize..rec as usize + 512],
        "it spans into the next page"
    );
}

#[test]
fn a_flipped_byte_is_named_by_page_and_section() {
    let ram = ram();
    let memory = SparseMemory::encode(&ram);
    // Stored page 4 is guest page 100 (after pages 0..=2 and 40).
    let (f, index) = file_of(&memory, |b| b[AT as usize + 4 * PAGE_SIZE + 9] ^= 1);
    let e = source(&f, &index, false)
        .fill(&fresh(), true)
        .err()
        .unwrap();
    match &e {
        PageError::Corrupt {
            gpa, index, offset, ..
        } => {
            assert_eq!(
                (*gpa, *index, *offset),
                (100 * 4096, 4, AT + 4 * 4096),
                "{e}"
            );
        }
        other => panic!("{other}"),
    }
    let text = e.to_string();
    assert!(
        text.contains("stored page 4 (guest address 0x64000") && text.contains("\"memory.pages\""),
        "{text}"
    );
}

#[test]
fn a_file_without_page_checksums_is_read_up_front_and_checked_whole() {
    let ram = ram();
    let mut memory = SparseMemory::encode(&ram);
    memory.page_crcs.clear();
    let (f, index) = file_of(&memory, |_| {});
    let mem = fresh();
    let pages = source(&f, &index, true).fill(&mem, false).unwrap();
    assert!(matches!(pages.mode(), PagesMode::UpFront { why } if why.contains("memory.crc32")));
    assert_ram(&mem, &ram);
    let (f, index) = file_of(&memory, |b| b[AT as usize + 70 * PAGE_SIZE] ^= 0x80);
    let e = source(&f, &index, true)
        .fill(&fresh(), false)
        .err()
        .unwrap();
    assert!(matches!(e, PageError::SectionCorrupt { .. }), "{e}");
}

/// On demand, where this host allows a `userfaultfd` that sees kernel
/// faults (root, or `/dev/userfaultfd`) and a lease: every page the test
/// reads is faulted in and right, the rest arrive in the background.
#[test]
fn on_demand_serves_faults_and_fills_the_rest() {
    let ram = ram();
    let memory = SparseMemory::encode(&ram);
    let (f, index) = file_of(&memory, |_| {});
    let mem = fresh();
    let pages = source(&f, &index, true).fill(&mem, false).unwrap();
    if let PagesMode::UpFront { why } = pages.mode() {
        eprintln!("SKIPPED on demand here: {why}");
        assert_ram(&mem, &ram);
        return;
    }
    // A read in the middle of a run first: served as a fault.
    let mut probe = [0u8; 16];
    mem.read_slice(&mut probe, GuestAddress(150 * 4096))
        .unwrap();
    assert!(probe == ram[150 * 4096..150 * 4096 + 16]);
    pages.wait().unwrap();
    assert_ram(&mem, &ram);
    assert_eq!(pages.kept().len(), 1);
}

/// On demand, a corrupt page: the thread registered as a vCPU is kicked
/// (the kick's handler is a no-op), the failure is named, and the page
/// never shows its corrupt bytes (the fault is answered with zeros).
#[test]
fn on_demand_failure_is_recorded_and_never_reaches_ram() {
    let ram = ram();
    let memory = SparseMemory::encode(&ram);
    let (f, index) = file_of(&memory, |b| b[AT as usize + 10 * PAGE_SIZE + 1] ^= 0x10);
    let mem = fresh();
    let pages: Pages = source(&f, &index, true).fill(&mem, false).unwrap();
    if pages.mode() != &PagesMode::OnDemand {
        eprintln!("SKIPPED on demand here: {:?}", pages.mode());
        return;
    }
    let entry = pages.enter_vcpu();
    let e = pages.wait().err().unwrap();
    drop(entry);
    assert!(matches!(e, PageError::Corrupt { index: 10, .. }), "{e}");
    assert_eq!(pages.failure(), Some(e));
    // Stored page 10 is guest page 106.
    let mut got = vec![0u8; PAGE_SIZE];
    mem.read_slice(&mut got, GuestAddress(106 * 4096)).unwrap();
    assert!(
        got != ram[106 * 4096..107 * 4096],
        "the corrupt page reached RAM"
    );
}
