//! Crafted snapshots: a real snapshot of the guest (taken at its
//! `bench=snapshot-check` port write) is mutated one field at a time, its
//! CRCs resealed, and `vmm snapshot info` and `vmm restore` must give the
//! same answer, naming the field, leaving the file untouched (bytes and
//! mtime). Rules on the decoded state ("semantic"): `info` still describes
//! the file and says `restorable on this host: no: <reason>`, `restore`
//! refuses with exactly that reason. Rules on the container and the
//! section encodings ("structural"): both refuse with the same message.
//! Then the reading rules: devices, FIFOs, huge sparse files and absurd
//! section counts are refused before anything is read.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{kvm_or_skip, snapshot_check_args, vmm};
use vmm::arch::layout::RamRegion;
use vmm::snapshot::format::{read_table, reseal, Container};
use vmm::snapshot::state::Snapshot;
use xstate::XsaveBuf;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("vmm-snapval-{}-{name}.snap", std::process::id()))
}

/// One real snapshot of the guest, taken once per test process.
fn real_snapshot() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let path = temp("real");
        let mut args = snapshot_check_args(path.to_str().unwrap()).to_vec();
        args.extend(["--no-native", "--json"]);
        let out = vmm(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        bytes
    })
}

fn decoded() -> Snapshot {
    Snapshot::from_bytes(real_snapshot()).expect("the real snapshot decodes")
}

fn entry_at(b: &[u8], name: &str) -> (usize, u64, u64) {
    let t = read_table(b).unwrap();
    let i = t.iter().position(|e| e.name == name).unwrap();
    (64 + 64 * i, t[i].offset, t[i].length)
}

/// Write `bytes`, run `info` and `restore` on them, check the verdicts
/// agree and name `needle`, and that the file was not touched.
fn refused(name: &str, bytes: &[u8], needle: &str, semantic: bool) {
    let p = temp(name);
    std::fs::write(&p, bytes).unwrap();
    let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
    refused_at(&p, needle, semantic);
    assert_eq!(std::fs::read(&p).unwrap(), bytes, "{name}: file modified");
    assert_eq!(
        std::fs::metadata(&p).unwrap().modified().unwrap(),
        mtime,
        "{name}: mtime changed"
    );
    let _ = std::fs::remove_file(p);
}

fn refused_at(p: &Path, needle: &str, semantic: bool) {
    let ps = p.to_str().unwrap();
    let info = vmm(&["snapshot", "info", ps]);
    let restore = vmm(&["restore", ps, "--no-native", "--timeout", "30"]);
    let (ierr, rerr) = (text(&info.stderr), text(&restore.stderr));
    assert!(!ierr.contains("panicked") && !rerr.contains("panicked"));
    assert_eq!(restore.status.code(), Some(64), "restore {ps}: {rerr}");
    let reason = rerr
        .lines()
        .find_map(|l| l.strip_prefix("vmm: "))
        .unwrap_or_else(|| panic!("restore {ps} said: {rerr}"));
    assert!(
        reason.contains(needle),
        "restore: expected {needle:?} in {reason}"
    );
    assert!(reason.contains(ps), "the message names the file: {reason}");
    if semantic {
        assert_eq!(info.status.code(), Some(0), "info {ps}: {ierr}");
        let out = text(&info.stdout);
        assert!(
            out.contains(&format!("restorable on this host: no: {reason}\n")),
            "info and restore disagree on {ps}:\ninfo:\n{out}\nrestore: {reason}"
        );
    } else {
        assert_eq!(info.status.code(), Some(64), "info {ps}: {ierr}");
        assert_eq!(
            ierr.lines().find_map(|l| l.strip_prefix("vmm: ")),
            Some(reason),
            "info and restore disagree on {ps}"
        );
    }
}

type Edit = fn(&mut Snapshot);

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn every_state_rule_gives_one_answer_naming_the_field() {
    if !kvm_or_skip("every_state_rule_gives_one_answer_naming_the_field") {
        return;
    }
    let base = decoded();
    let xcr0 = base.vcpus[0].xcr0().unwrap();
    assert!(
        xcr0 & 0x4 != 0,
        "the guest enabled AVX (XCR0 {xcr0:#x}): the rules below need it"
    );
    // The unmodified file is restorable: the refusals below are the edits'.
    let p = temp("unmodified");
    std::fs::write(&p, real_snapshot()).unwrap();
    let info = vmm(&["snapshot", "info", p.to_str().unwrap()]);
    assert!(
        text(&info.stdout).contains("restorable on this host: yes"),
        "{}{}",
        text(&info.stdout),
        text(&info.stderr)
    );
    let _ = std::fs::remove_file(p);

    let cases: &[(&str, Edit, &str)] = &[
        // mem_mib << 20 wraps to 64 MiB for 2^44 + 64.
        (
            "mem-overflow",
            |s| s.meta.mem_mib = (1 << 44) + 64,
            "meta.mem_mib: 17592186044480 MiB overflows",
        ),
        (
            "mem-bound",
            |s| s.meta.mem_mib = 1047553,
            "meta.mem_mib: 1047553 MiB is outside this vmm's guest RAM range 4..=1047552 MiB",
        ),
        (
            // Well-formed regions, but not where this vmm puts 64 MiB.
            "regions-elsewhere",
            |s| {
                s.memory.regions = vec![
                    RamRegion {
                        addr: 0,
                        len: 32 << 20,
                    },
                    RamRegion {
                        addr: 4 << 30,
                        len: 32 << 20,
                    },
                ]
            },
            "memory.regions: RAM at 0x0+0x2000000, 0x100000000+0x2000000, but this vmm lays \
             64 MiB out at 0x0+0x4000000",
        ),
        (
            "mem-mismatch",
            |s| s.meta.mem_mib = 32,
            "memory: holds 67108864 bytes of RAM, meta.mem_mib says 32 MiB",
        ),
        (
            "policy-zero",
            |s| s.meta.policy_xcr0 = 0,
            "meta.policy_xcr0: 0x0: invalid XCR0: x87 (bit 0) must always be set",
        ),
        (
            "policy-invalid",
            |s| s.meta.policy_xcr0 = 0x5,
            "meta.policy_xcr0: 0x5: invalid XCR0",
        ),
        (
            "policy-narrow",
            |s| s.meta.policy_xcr0 = 0x3,
            "meta.policy_xcr0: 0x3 is narrower than vcpu0's XCR0",
        ),
        (
            "init-xstate",
            |s| s.meta.init_xstate = "everything".into(),
            "meta.init_xstate: \"everything\" is not \"minimal\" or \"all\"",
        ),
        (
            "xstate-sync",
            |s| s.meta.xstate_sync = "sometimes".into(),
            "meta.xstate_sync: \"sometimes\" is not",
        ),
        (
            "xcr0-invalid",
            |s| set_xcr0(s, 0x5),
            "vcpu0.xcrs XCR0: 0x5: invalid XCR0",
        ),
        (
            "cr4-osxsave",
            |s| s.vcpus[0].sregs.cr4 &= !(1 << 18),
            "vcpu0.sregs.cr4: CR4 ",
        ),
        (
            "cpuid-1-xsave",
            |s| cpuid(s, 1, 0).ecx &= !(1 << 26),
            "vcpu0.cpuid leaf 0x1 ECX: ",
        ),
        (
            "cpuid-1-osxsave",
            |s| {
                s.vcpus[0].sregs.cr4 &= !(1 << 18);
                set_xcr0(s, 0x1);
                cpuid(s, 1, 0).ecx |= 1 << 27;
            },
            "has OSXSAVE (bit 27) set, yet CR4",
        ),
        (
            "cpuid-d-xcr0",
            |s| cpuid(s, 0xd, 0).eax &= !0x4,
            "vcpu0.cpuid leaf 0xd.0 EDX:EAX: ",
        ),
        (
            "xstate-longer",
            |s| {
                let mut b = s.vcpus[0].xstate.to_vec();
                b.extend_from_slice(&[0u8; 64]);
                s.vcpus[0].xstate = XsaveBuf::from_bytes(&b).unwrap();
            },
            "vcpu0.xstate: ",
        ),
        (
            // The file's own MXCSR_MASK claims every bit; this CPU's does not.
            "mxcsr-reserved",
            |s| {
                let mut b = s.vcpus[0].xstate.to_vec();
                b[24..28].copy_from_slice(&(0x1f80u32 | 1 << 20).to_le_bytes());
                b[28..32].copy_from_slice(&u32::MAX.to_le_bytes());
                s.vcpus[0].xstate = XsaveBuf::from_bytes(&b).unwrap();
            },
            "vcpu0.xstate MXCSR: 0x101f80 sets bits 0x100000 this CPU reserves",
        ),
        (
            "uart",
            |s| s.meta.serial.in_buffer = vec![0; 1 << 16],
            "meta.serial: ",
        ),
    ];
    for (name, edit, needle) in cases {
        let mut s = decoded();
        edit(&mut s);
        refused(name, &s.to_bytes(), needle, true);
    }
}

fn set_xcr0(s: &mut Snapshot, v: u64) {
    for x in &mut s.vcpus[0].xcrs {
        if x.0 == 0 {
            x.1 = v;
        }
    }
}

fn cpuid(s: &mut Snapshot, f: u32, i: u32) -> &mut kvm_bindings::kvm_cpuid_entry2 {
    s.vcpus[0]
        .cpuid
        .iter_mut()
        .find(|e| e.function == f && e.index == i)
        .unwrap()
}

/// Raw edits of the container or of a section's encoding, resealed.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn every_structural_rule_gives_one_answer() {
    if !kvm_or_skip("every_structural_rule_gives_one_answer") {
        return;
    }
    let good = real_snapshot();
    type Raw = fn(&mut Vec<u8>);
    let cases: &[(&str, Raw, &str)] = &[
        (
            "header-reserved",
            |b| {
                b[50] = 1;
                reseal(b);
            },
            "reserved header byte 50 is not zero",
        ),
        (
            "table-flags",
            |b| {
                let (e, _, _) = entry_at(b, "vcpu0.regs");
                b[e + 60] = 1;
                reseal(b);
            },
            "section \"vcpu0.regs\": reserved flags 0x1 are not zero",
        ),
        (
            "gap-padding",
            |b| {
                let (_, off, len) = entry_at(b, "vcpu0.regs");
                b[(off + len) as usize] = 0x55;
            },
            "padding byte at offset",
        ),
        (
            "overlap",
            |b| {
                let (e, off, _) = entry_at(b, "vcpu0.regs");
                let (e2, _, _) = entry_at(b, "vcpu0.sregs");
                b[e2 + 40..e2 + 48].copy_from_slice(&(off + 8).to_le_bytes());
                let _ = e;
                reseal(b);
            },
            "overlap",
        ),
        (
            "duplicate",
            |b| {
                let (e, _, _) = entry_at(b, "vcpu0.debugregs");
                b[e..e + 40].fill(0);
                b[e..e + 10].copy_from_slice(b"vcpu0.regs");
                reseal(b);
            },
            "section \"vcpu0.regs\" appears twice",
        ),
        (
            "unknown",
            |b| {
                let (e, _, _) = entry_at(b, "vcpu0.debugregs");
                b[e..e + 40].fill(0);
                b[e..e + 12].copy_from_slice(b"vcpu0.bogus!");
                reseal(b);
            },
            "unknown section \"vcpu0.bogus!\"",
        ),
        (
            "orphan",
            |b| {
                let (e, _, _) = entry_at(b, "vcpu0.debugregs");
                b[e..e + 40].fill(0);
                b[e..e + 15].copy_from_slice(b"vcpu1.debugregs");
                reseal(b);
            },
            "section \"vcpu1.debugregs\" belongs to no vCPU",
        ),
        (
            "two-xcr0",
            |b| {
                let mut c = Container::parse(b).unwrap();
                let x = c.get_mut("vcpu0.xcrs").unwrap();
                let first = x[..16].to_vec();
                x.extend_from_slice(&first);
                *b = c.to_bytes();
            },
            "section \"vcpu0.xcrs\" holds 0x0 twice",
        ),
        (
            "page-past-end",
            |b| {
                let mut s = Snapshot::from_bytes(b).unwrap();
                let last = s.memory.runs.len() - 1;
                s.memory.runs[last].0 = s.memory.size / 4096;
                *b = s.to_bytes();
            },
            "lies past the end of the 16384 pages of RAM",
        ),
        (
            "duplicate-page",
            |b| {
                let mut s = Snapshot::from_bytes(b).unwrap();
                s.memory.runs[1].0 = s.memory.runs[0].0;
                *b = s.to_bytes();
            },
            "stores page 0 again",
        ),
        (
            "truncated-pages",
            |b| {
                let mut s = Snapshot::from_bytes(b).unwrap();
                let n = s.memory.data.len() - 4096;
                s.memory.data.truncate(n);
                *b = s.to_bytes();
            },
            "bytes of page data for",
        ),
        (
            "regions-count",
            |b| {
                let mut c = Container::parse(b).unwrap();
                c.get_mut("memory.regions").unwrap()[0] = 17;
                *b = c.to_bytes();
            },
            "section \"memory.regions\": 17 regions, expected at most 16",
        ),
        (
            "regions-missing",
            |b| {
                let mut c = Container::parse(b).unwrap();
                c.sections.retain(|s| s.name != "memory.regions");
                *b = c.to_bytes();
            },
            "section \"memory.regions\" is missing",
        ),
        (
            "regions-in-format-2",
            |b| {
                let mut c = Container::parse(b).unwrap();
                c.version = 2;
                *b = c.to_bytes();
            },
            "section \"memory.regions\" in a format 2 file",
        ),
        (
            "section-count",
            |b| {
                b[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
                reseal(b);
            },
            "section count 4294967295 exceeds the limit of 1024",
        ),
    ];
    for (name, edit, needle) in cases {
        let mut b = good.to_vec();
        edit(&mut b);
        assert_ne!(&b[..], good, "{name}: the edit changed nothing");
        refused(name, &b, needle, false);
    }
}

/// `info` and `restore` refuse devices, FIFOs and huge sparse files from
/// what the file is, before reading it.
#[test]
fn unreadable_inputs_are_refused_before_reading() {
    let dir = std::env::temp_dir().join(format!("vmm-snapval-{}-inputs", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let sparse = dir.join("sparse");
    let huge = vmm::run::restore::MAX_SNAPSHOT_BYTES + 1;
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(huge)
        .unwrap();
    let huge_needle = format!("is {huge} bytes; the limit is");
    for (path, needle) in [
        (
            Path::new("/dev/zero"),
            "is a character device, not a regular file",
        ),
        (fifo.as_path(), "is a FIFO, not a regular file"),
        (sparse.as_path(), huge_needle.as_str()),
    ] {
        let ps = path.to_str().unwrap();
        for args in [vec!["snapshot", "info", ps], vec!["restore", ps]] {
            let t = Instant::now();
            let out = vmm(&args);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
            assert!(err.contains(needle) && err.contains(ps), "{args:?}: {err}");
            // Not a speed assert: reading 4 GiB or waiting on the FIFO
            // would take far longer than this generous bound.
            assert!(t.elapsed() < Duration::from_secs(60), "{args:?}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The guest's own check of its general registers across a snapshot: a
/// restore that changes one of them (here the file is edited so R9 loses
/// bit 0, then RFLAGS loses DF) is caught by the guest, naming it.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn guest_sees_a_general_register_changed_by_the_restore() {
    if !kvm_or_skip("guest_sees_a_general_register_changed_by_the_restore") {
        return;
    }
    // Run on the unmodified file first: all 16 GPRs and RFLAGS survive.
    let cases: &[(&str, Edit, Option<&str>)] = &[
        ("gpr-intact", |_| {}, None),
        ("gpr-r9", |s| s.vcpus[0].regs.r9 ^= 1, Some("r9 ")),
        (
            "gpr-df",
            |s| s.vcpus[0].regs.rflags &= !0x400,
            Some("rflags "),
        ),
        ("gpr-r15", |s| s.vcpus[0].regs.r15 ^= 1 << 63, Some("r15 ")),
    ];
    for (name, edit, want) in cases {
        let mut s = decoded();
        edit(&mut s);
        let p = temp(name);
        std::fs::write(&p, s.to_bytes()).unwrap();
        let (out, v) = common::vmm_json(&["restore", p.to_str().unwrap(), "--no-native"]);
        let _ = std::fs::remove_file(&p);
        let row = v["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "snapshot-check")
            .cloned()
            .unwrap_or_else(|| panic!("{name}: no snapshot-check row: {v:#}"));
        match want {
            None => {
                assert!(out.status.success(), "{name}: {v:#}");
                assert_eq!(row["check"], "pass", "{name}: {v:#}");
            }
            Some(reg) => {
                assert_eq!(row["check"], "fail", "{name}: {v:#}");
                let reason = v["skipped"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|r| r["name"] == "snapshot-check")
                    .map(|r| r["reason"].as_str().unwrap().to_string())
                    .unwrap_or_default();
                assert!(
                    reason.starts_with(reg) && reason.contains("after 1 snapshot"),
                    "{name}: expected the guest to name {reg:?}: {reason:?}\n{v:#}"
                );
                if *name == "gpr-df" {
                    // "rflags SEEN != WANTED": the values differ in DF alone,
                    // whatever else the KVM keeps in RFLAGS (kvm_amd keeps
                    // the guest's AC and IOPL, kvm_pvm does not).
                    let hexes: Vec<u64> = reason
                        .split_whitespace()
                        .filter_map(|w| u64::from_str_radix(w.strip_prefix("0x")?, 16).ok())
                        .collect();
                    assert_eq!(hexes.len(), 2, "{reason}");
                    assert_eq!(hexes[0] ^ hexes[1], 0x400, "{reason}");
                }
            }
        }
    }
}
