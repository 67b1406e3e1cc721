//! A snapshot's lengths are claims: a sparse file can claim a gigabyte in
//! a few hundred kilobytes of disk. `vmm snapshot info` and `vmm restore`
//! bound every section by what its kind can need before reading it, read
//! the stored pages in bounded pieces (a restore copies each into RAM, or
//! maps the zero page for one of zeros), and read what they must read
//! in bounded pieces: their peak RSS (the child's `ru_maxrss`, its VmHWM)
//! stays far below what a file claims, and both give the same verdict.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::crafted::{entry_at, info_args, real_snapshot, restore_args, said, temp_snapshot};
use common::{kvm_or_skip, vmm_peak, Peak};
use vmm::snapshot::format::reseal;
use vmm::snapshot::state::Snapshot;

/// The peak RSS no `info` or `restore` of these files may exceed, in KiB:
/// an ordinary restore of the test guest peaks near 30 MiB; reading a
/// claimed gigabyte would take at least 1 GiB.
const BOUND_KIB: u64 = 200 << 10;

/// A gigabyte, the length the files below claim.
const GIB: u64 = 1 << 30;

/// A page of guest RAM.
const PAGE: u64 = 4096;

/// `info` and `restore` of `path`, each measured.
fn both(name: &str, path: &Path) -> (Peak, Peak) {
    let p = path.to_str().unwrap();
    let info = vmm_peak(&format!("{name}-info"), &info_args(p));
    let restore = vmm_peak(&format!("{name}-restore"), &restore_args(p, "120"));
    eprintln!(
        "{name}: info exit {:?} peak {} KiB; restore exit {:?} peak {} KiB",
        info.code, info.peak_rss_kib, restore.code, restore.peak_rss_kib
    );
    for (what, m) in [("info", &info), ("restore", &restore)] {
        assert!(
            !m.stderr.contains("panicked"),
            "{name} {what}: {}",
            m.stderr
        );
        assert!(
            m.peak_rss_kib < BOUND_KIB,
            "{name} {what}: peak RSS {} KiB, the bound is {BOUND_KIB} KiB\n{}",
            m.peak_rss_kib,
            m.stderr
        );
    }
    (info, restore)
}

/// The first `vmm: ` line of a child's stderr.
fn said_first(p: &Peak) -> &str {
    said(&p.stderr).next().unwrap_or("")
}

/// `bytes` with section `name` moved to the end of the file and claiming
/// `len` bytes there (its old place zeroed: alignment padding), the file
/// written sparse: the head on disk, the claimed section a hole.
fn claiming(path: &Path, bytes: &[u8], name: &str, len: u64) {
    let (entry, off, old) = entry_at(bytes, name);
    let mut head = bytes.to_vec();
    let at = if name == "memory.pages" {
        off
    } else {
        head[off as usize..(off + old) as usize].fill(0);
        bytes.len() as u64
    };
    head[entry + 40..entry + 48].copy_from_slice(&at.to_le_bytes());
    head[entry + 48..entry + 56].copy_from_slice(&len.to_le_bytes());
    head[32..40].copy_from_slice(&(at + len).to_le_bytes());
    reseal(&mut head);
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&head[..head.len().min(at as usize)]).unwrap();
    f.set_len(at + len).unwrap();
}

/// Every kind of section claiming a gigabyte in a sparse file is refused
/// from the table alone by both commands, with the same words, naming
/// the section and its bound; neither reads it.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_claimed_gigabyte_is_refused_before_it_is_read() {
    if !kvm_or_skip("a_claimed_gigabyte_is_refused_before_it_is_read") {
        return;
    }
    let good = real_snapshot();
    for (name, want) in [
        ("serial", "its kind is 0 to 1048576 bytes"),
        ("meta", "its kind is 2 to 65536 bytes"),
        ("vcpu0.cpuid", "not a whole number of 40-byte entries"),
        ("vcpu0.msrs", "at most 25 can be loaded"),
        ("vcpu0.xstate", "its kind is 576 to 16384 bytes"),
        ("vcpu0.regs", "its kind is exactly 144"),
        (
            "memory",
            "the page index of 67108864 bytes of RAM is at most 131088",
        ),
        (
            "memory.pages",
            "more than the 67108864 bytes of RAM it stores pages of",
        ),
    ] {
        let path = temp_snapshot(&format!("claim-{name}"));
        claiming(&path, good, name, GIB);
        let (info, restore) = both(name, &path);
        let _ = std::fs::remove_file(&path);
        assert_eq!(info.code, Some(64), "{name} info: {}", info.stderr);
        assert_eq!(restore.code, Some(64), "{name} restore: {}", restore.stderr);
        assert_eq!(
            said_first(&info),
            said_first(&restore),
            "{name}: info and restore disagree"
        );
        let needle = format!("section \"{name}\" is {GIB} bytes");
        assert!(
            said_first(&restore).contains(&needle) && said_first(&restore).contains(want),
            "{name}: expected {needle:?} and {want:?} in {}",
            said_first(&restore)
        );
    }
}

/// `n` more stored pages of zeros (a hole of the file): their CRC32s in
/// `memory.crc32`, which a restore checks every page against.
fn zero_page_crcs(s: &mut Snapshot, n: u64) {
    let zero = crc32fast::hash(&[0u8; 4096]);
    s.memory
        .page_crcs
        .extend(std::iter::repeat_n(zero, n as usize));
}

/// The CRC32 of `len` zero bytes appended, by doubling a MiB's (the
/// test computes a gigabyte's checksum without hashing a gigabyte).
fn zeros(len: u64) -> crc32fast::Hasher {
    assert!(len.is_multiple_of(1 << 20));
    let mut unit = crc32fast::Hasher::new();
    unit.update(&vec![0u8; 1 << 20]);
    let mut acc = crc32fast::Hasher::new();
    let mut n = len >> 20;
    while n > 0 {
        if n & 1 == 1 {
            acc.combine(&unit);
        }
        let twice = unit.clone();
        unit.combine(&twice);
        n >>= 1;
    }
    acc
}

/// The real snapshot made a guest of 1 GiB (one region from address 0, as
/// a 1 GiB guest has), and the first page past the RAM it stored.
fn as_gigabyte_guest() -> (Snapshot, u64) {
    let mut s = Snapshot::from_bytes(real_snapshot()).unwrap();
    let from = s.memory.size / PAGE;
    s.meta.mem_mib = 1024;
    s.memory.size = GIB;
    s.memory.regions.clear();
    (s, from)
}

/// `s` written as a sparse file named after `name`: its head and stored
/// pages on disk, then `hole` more bytes of stored pages, zeros, that are
/// a hole of the file (their CRC32 computed with [`zeros`]).
fn write_with_hole(s: &Snapshot, hole: u64, name: &str) -> PathBuf {
    let pages_len = s.memory.data.len() as u64 + hole;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&s.memory.data);
    crc.combine(&zeros(hole));
    let head = s.head_bytes(pages_len, crc.finalize());
    let path = temp_snapshot(name);
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&head).unwrap();
    f.write_all(&s.memory.data).unwrap();
    f.set_len(head.len() as u64 + pages_len).unwrap();
    path
}

/// `info` and `restore` of `path` (removed after), each measured: `info`
/// finds it restorable on this host and `restore` runs the guest to its
/// end.
fn both_succeed(name: &str, path: &Path) -> (Peak, Peak) {
    let (info, restore) = both(name, path);
    let _ = std::fs::remove_file(path);
    assert_eq!(info.code, Some(0), "{}", info.stderr);
    assert!(
        info.stdout.contains("restorable on this host: yes"),
        "{}",
        info.stdout
    );
    assert_eq!(
        restore.code,
        Some(0),
        "{}\n{}",
        restore.stdout,
        restore.stderr
    );
    (info, restore)
}

/// A guest of 1 GiB whose stored pages are a gigabyte of a sparse file
/// (the real guest's pages, then a run of 960 MiB that is a hole): a
/// valid snapshot. `info` checks every stored page's CRC32 and `restore`
/// verifies them, copying in (or mapping the zero page for) each, and runs
/// the guest to its end, both in bounded memory.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_gigabyte_of_stored_pages_keeps_info_and_restore_small() {
    if !kvm_or_skip("a_gigabyte_of_stored_pages_keeps_info_and_restore_small") {
        return;
    }
    let (mut s, from) = as_gigabyte_guest();
    let to = GIB / PAGE;
    s.memory.runs.push((from, to - from));
    zero_page_crcs(&mut s, to - from);
    let path = write_with_hole(&s, (to - from) * PAGE, "gigabyte");
    let on_disk = std::fs::metadata(&path).unwrap();
    eprintln!(
        "{} bytes long, {} KiB on disk",
        on_disk.len(),
        std::os::unix::fs::MetadataExt::blocks(&on_disk) / 2
    );
    let (info, restore) = both_succeed("gigabyte", &path);
    let stored = format!(
        "memory        1024 MiB: {} of 262144 pages stored",
        s.memory.stored_pages()
    );
    assert!(info.stdout.contains(&stored), "{}", info.stdout);
    assert!(
        restore.stdout.contains("snapshot-check"),
        "{}",
        restore.stdout
    );
}

/// A `memory.pages` section that is not page-aligned in the file (its
/// bytes moved 64 bytes down, the file resealed): both commands refuse
/// it, with the same words, before anything is mapped.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn unaligned_pages_are_refused_by_both() {
    if !kvm_or_skip("unaligned_pages_are_refused_by_both") {
        return;
    }
    let good = real_snapshot();
    let (entry, off, len) = entry_at(good, "memory.pages");
    let (off, len) = (off as usize, len as usize);
    let mut b = good[..off - 64].to_vec();
    b.extend_from_slice(&good[off..off + len]);
    b[entry + 40..entry + 48].copy_from_slice(&((off - 64) as u64).to_le_bytes());
    let total = b.len() as u64;
    b[32..40].copy_from_slice(&total.to_le_bytes());
    reseal(&mut b);
    let path = temp_snapshot("unaligned");
    std::fs::write(&path, &b).unwrap();
    let (info, restore) = both("unaligned", &path);
    let _ = std::fs::remove_file(&path);
    assert_eq!((info.code, restore.code), (Some(64), Some(64)));
    assert_eq!(
        said_first(&info),
        said_first(&restore),
        "info and restore disagree"
    );
    assert!(
        said_first(&restore).contains(&format!(
            "section \"memory.pages\" at offset {} is not page-aligned",
            off - 64
        )),
        "{}",
        said_first(&restore)
    );
}

/// A guest of 1 GiB with every other page above its first 64 MiB stored
/// as a one-page run (122,880 runs; the pages a hole): the runs cost no
/// memory for their zeros, and the guest runs to its end.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn runs_past_the_mapped_ones_cost_only_their_data() {
    if !kvm_or_skip("runs_past_the_mapped_ones_cost_only_their_data") {
        return;
    }
    let (mut s, from) = as_gigabyte_guest();
    let extra: Vec<(u64, u64)> = (from..GIB / PAGE).step_by(2).map(|p| (p, 1)).collect();
    let hole = extra.len() as u64 * PAGE;
    zero_page_crcs(&mut s, extra.len() as u64);
    s.memory.runs.extend(extra);
    let path = write_with_hole(&s, hole, "many-runs");
    both_succeed("many-runs", &path);
}
