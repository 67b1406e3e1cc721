//! Snapshot and restore end to end: `vmm run --snapshot-after/--snapshot-file`,
//! `vmm restore`, `vmm snapshot info`, and the refusals (corrupted,
//! truncated, other format version, state this host cannot hold).

mod common;

use std::path::{Path, PathBuf};

use common::{
    kvm_or_skip, restore_checked, rows_named, snapshot_check_args, snapshot_regs_kernel,
    tiny_pvh_elf, vmm, vmm_json,
};
use vmm::snapshot::format::{Container, FORMAT_VERSION};
use vmm::snapshot::state::Snapshot;
use xstate::{CpuidProfile, Format, InitMode, XfeatureMask, XsaveBuf};

fn snap_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "vmm-snapshot-test-{}-{name}.snap",
        std::process::id()
    ))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Take a guest-requested snapshot of the tiny register kernel (fast: no
/// workload, no boot of the real guest).
fn tiny_snapshot(name: &str) -> PathBuf {
    let kernel = common::temp_file(
        &format!("{name}-regs.elf"),
        &tiny_pvh_elf(&snapshot_regs_kernel(), true),
    );
    let snap = snap_path(name);
    let out = vmm(&[
        "run",
        "--kernel",
        kernel.to_str().unwrap(),
        "--snapshot-file",
        snap.to_str().unwrap(),
        "--no-native",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "snapshot run failed: {:?}\n{}\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    let _ = std::fs::remove_file(kernel);
    assert!(snap.is_file(), "no snapshot written: {}", text(&out.stdout));
    snap
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn mid_run_snapshot_restores_in_a_new_process() {
    if !kvm_or_skip("mid_run_snapshot_restores_in_a_new_process") {
        return;
    }
    let snap = snap_path("midrun");
    // Under TCG the full sizes take 65 s to restore on an idle Zen 4 host
    // and more than the restore's 120 s on a busy one or a Zen 3.
    let workload = common::harness_sized("aes,gemm");
    let (out, v) = vmm_json(&[
        "run",
        "--workload",
        &workload,
        "--no-native",
        "--snapshot-after",
        "0.3",
        "--snapshot-file",
        snap.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(v["exit_reason"], "snapshotted", "{v}");
    assert_eq!(
        v["results"].as_array().map(Vec::len),
        Some(0),
        "stopped before reporting"
    );

    let (info_out, info) = vmm_json(&["snapshot", "info", snap.to_str().unwrap()]);
    assert!(info_out.status.success(), "{}", text(&info_out.stderr));
    assert_eq!(info["trigger"], "time");
    assert_eq!(info["mem_mib"], 64);
    assert_eq!(info["restorable_here"], true, "{info}");
    let pages = info["memory_pages"].as_u64().unwrap();
    let stored = info["memory_pages_stored"].as_u64().unwrap();
    assert_eq!(pages, 64 * 256);
    assert!(
        stored > 0 && stored < pages / 10,
        "a 64 MiB guest is mostly zeros: {stored} of {pages} stored"
    );
    let vcpu = &info["vcpus"][0];
    assert!(
        vcpu["xstate_compacted_bytes"].as_u64().unwrap()
            <= vcpu["xstate_standard_bytes"].as_u64().unwrap(),
        "{vcpu}"
    );
    let names = common::section_names(&info);
    for want in [
        "meta",
        "memory",
        "vcpu0.regs",
        "vcpu0.sregs",
        "vcpu0.xcrs",
        "vcpu0.msrs",
        "vcpu0.xstate",
        "vcpu0.cpuid",
    ] {
        assert!(
            names.contains(&want),
            "section {want} missing from {names:?}"
        );
    }

    let before = std::fs::read(&snap).unwrap();
    let (out, v) = vmm_json(&[
        "restore",
        snap.to_str().unwrap(),
        "--no-native",
        "--timeout",
        "120",
    ]);
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", text(&out.stderr));
    assert_eq!(v["exit_reason"], "exited", "{v}");
    assert_eq!(v["exit_status"], 0);
    let results = v["results"].as_array().unwrap();
    for name in ["aes-128-cbc", "aes-128-ctr", "dgemm"] {
        assert!(
            results.iter().any(|r| r["name"] == name),
            "no {name} result after restore: {v}"
        );
    }
    for r in results {
        assert_eq!(r["check"], "pass", "{r}");
    }
    common::assert_unchanged_then_remove(&snap, &before);
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn guest_requested_snapshot_keeps_registers() {
    if !kvm_or_skip("guest_requested_snapshot_keeps_registers") {
        return;
    }
    let snap = tiny_snapshot("guestreq");
    let (info_out, info) = vmm_json(&["snapshot", "info", snap.to_str().unwrap()]);
    assert!(info_out.status.success(), "{}", text(&info_out.stderr));
    assert_eq!(info["trigger"], "guest");
    // The snapshot is taken at the OUT exit; RIP points past it once the
    // pending I/O is completed (immediate_exit).
    let decoded = Snapshot::from_bytes(&std::fs::read(&snap).unwrap()).unwrap();
    assert_eq!(decoded.vcpus[0].regs.rax, 0x1122_3344);
    assert_eq!(
        decoded.vcpus[0].regs.rip,
        0x10_0000 + 7 * 5 + 2,
        "RIP after the OUT"
    );

    let (out, v) = vmm_json(&[
        "restore",
        snap.to_str().unwrap(),
        "--no-native",
        "--timeout",
        "30",
    ]);
    assert_eq!(
        v["exit_status"],
        0,
        "status 10+i means register i changed across snapshot/restore: {v}\n{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
    let _ = std::fs::remove_file(snap);
}

/// Run `vmm restore` (and `vmm snapshot info` for a file that is not a
/// valid snapshot) on a bad file: status 64, a message naming the file and
/// containing `needle`, no panic, the file unchanged.
fn assert_refused(path: &Path, needle: &str) {
    assert_refused_by(path, needle, true)
}

fn assert_refused_by(path: &Path, needle: &str, info_too: bool) {
    let before = std::fs::read(path).unwrap();
    let mut commands = vec![vec!["restore", path.to_str().unwrap(), "--no-native"]];
    if info_too {
        commands.push(vec!["snapshot", "info", path.to_str().unwrap()]);
    }
    for args in commands {
        let out = vmm(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(
            err.contains(&path.display().to_string()),
            "{args:?}: the message names the file: {err}"
        );
        assert!(
            err.contains(needle),
            "{args:?}: expected {needle:?} in: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(out.stdout.is_empty() || args[0] == "snapshot", "{args:?}");
    }
    assert_eq!(
        std::fs::read(path).unwrap(),
        before,
        "the file was modified"
    );
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn corrupted_truncated_and_versioned_files_are_refused() {
    if !kvm_or_skip("corrupted_truncated_and_versioned_files_are_refused") {
        return;
    }
    let snap = tiny_snapshot("bad");
    let good = std::fs::read(&snap).unwrap();
    let table = vmm::snapshot::format::read_table(&good).unwrap();

    // One bit flipped inside vcpu0.regs.
    let regs = table.iter().find(|e| e.name == "vcpu0.regs").unwrap();
    let mut bad = good.clone();
    bad[regs.offset as usize + 8] ^= 0x10;
    let p = snap_path("flipped");
    std::fs::write(&p, &bad).unwrap();
    assert_refused(&p, "checksum mismatch");
    assert_refused(&p, "section \"vcpu0.regs\"");

    // Truncated: half the file.
    std::fs::write(&p, &good[..good.len() / 2]).unwrap();
    assert_refused(&p, "truncated");
    // Truncated inside the header.
    std::fs::write(&p, &good[..30]).unwrap();
    assert_refused(&p, "truncated");

    // A future format version.
    let mut bad = good.clone();
    bad[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    std::fs::write(&p, &bad).unwrap();
    assert_refused(&p, &format!("format version {}", FORMAT_VERSION + 1));

    // Not a snapshot at all.
    std::fs::write(
        &p,
        b"hello, this is not a snapshot file at all........................",
    )
    .unwrap();
    assert_refused(&p, "not a vmm snapshot");

    // A missing file.
    let missing = snap_path("does-not-exist");
    let out = vmm(&["restore", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        text(&out.stderr).contains("cannot open snapshot"),
        "{}",
        text(&out.stderr)
    );

    let _ = std::fs::remove_file(p);
    let _ = std::fs::remove_file(snap);
}

fn spr_profile() -> CpuidProfile {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .join("xstate/tests/data/intel-sapphire-rapids.json");
    CpuidProfile::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A real snapshot rewritten as if taken on a Sapphire Rapids host with AMX
/// tiles in use: the source leaf 0xD, XCR0 0x602e7 and a compacted image
/// whose XSTATE_BV is 0x60000, checksums fixed.
fn amx_snapshot(good: &[u8]) -> Vec<u8> {
    let mut snap = Snapshot::from_bytes(good).unwrap();
    let profile = spr_profile();
    let spr = profile.xsave_info().unwrap();
    let xcr0 = XfeatureMask::from_bits(0x602e7);
    let mut standard = XsaveBuf::init(&spr, xcr0, InitMode::Minimal).unwrap();
    let layout = spr.layout(xcr0, Format::Standard).unwrap();
    {
        let mut v = standard.view_mut();
        // TILECFG: palette 1, then TILEDATA with a pattern.
        v.component_by_index_mut(17, &layout).unwrap()[0] = 1;
        for (k, b) in v
            .component_by_index_mut(18, &layout)
            .unwrap()
            .iter_mut()
            .enumerate()
        {
            *b = (k % 251) as u8 | 1;
        }
        v.set_xstate_bv(0x60000u64);
    }
    let compacted = xstate::compacted_in_use(&spr, &standard, xcr0).unwrap();
    assert_eq!(compacted.xstate_bv(), 0x60000);
    snap.vcpus[0].xstate = compacted;
    for x in &mut snap.vcpus[0].xcrs {
        if x.0 == 0 {
            x.1 = xcr0.bits();
        }
    }
    // A consistent state on the source: CR4.OSXSAVE set and the guest's
    // CPUID offering XSAVE and the components XCR0 enables.
    snap.vcpus[0].sregs.cr4 |= 1 << 18;
    for e in &mut snap.vcpus[0].cpuid {
        match (e.function, e.index) {
            (1, 0) => e.ecx |= 1 << 26,
            (0xd, 0) => e.eax |= xcr0.bits() as u32,
            _ => {}
        }
    }
    snap.meta.kvm_leaf_0xd = CpuidProfile::entries_of(&spr);
    snap.meta.kvm_xcr0 = spr.supported_xcr0().bits();
    snap.meta.kvm_xss = spr.supported_xss().bits();
    snap.meta.policy_xcr0 = xcr0.bits();
    snap.to_bytes()
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn amx_snapshot_is_refused_on_a_host_without_amx() {
    if !kvm_or_skip("amx_snapshot_is_refused_on_a_host_without_amx") {
        return;
    }
    // As `vmm restore` does before it reads KVM's table: where AMX can be
    // had, KVM only lists it once this process may give it to guests.
    let _ = vmm::internal::arch::amx::permit_policy(XfeatureMask::from_bits(0x602e7));
    let host = vmm::kvm::HostKvm::open().expect("KVM opens");
    if host.xstate.supported_xcr0().contains_all(XfeatureMask::AMX) {
        common::skip(
            "amx_snapshot_is_refused_on_a_host_without_amx",
            "this host's KVM supports AMX",
        );
        return;
    }
    let snap = tiny_snapshot("amx");
    let bytes = amx_snapshot(&std::fs::read(&snap).unwrap());
    // The rewritten file is a valid container: only the host check fails.
    Container::parse(&bytes).expect("checksums fixed");
    let p = snap_path("amx-rewritten");
    std::fs::write(&p, &bytes).unwrap();
    let host_xcr0 = host.xstate.supported_xcr0().bits();
    assert_refused_by(
        &p,
        &format!("state uses amx (components 17-18); this host supports {host_xcr0:#x}"),
        false,
    );
    // `snapshot info` still describes it, and says why it cannot be restored here.
    let (out, info) = vmm_json(&["snapshot", "info", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(info["restorable_here"], false);
    assert_eq!(info["vcpus"][0]["xstate_bv"], "0x60000");
    assert!(info["vcpus"][0]["components_in_use"]
        .as_str()
        .unwrap()
        .contains("amx"));
    assert!(
        info["restore_refusal"]
            .as_str()
            .unwrap()
            .contains("state uses amx"),
        "{info}"
    );
    let _ = std::fs::remove_file(p);
    let _ = std::fs::remove_file(snap);
}

#[test]
fn amx_state_is_compact_in_a_snapshot() {
    // No KVM needed: the sizes a Sapphire Rapids guest's state takes.
    let spr = spr_profile().xsave_info().unwrap();
    let xcr0 = XfeatureMask::from_bits(0x602e7);
    let standard_size = spr.standard_size(xcr0).unwrap();
    assert!(
        standard_size > 11 * 1024 - 512,
        "AMX standard image {standard_size} B"
    );
    let standard = XsaveBuf::init(&spr, xcr0, InitMode::Minimal).unwrap();
    // Idle tiles and clean upper state: only the legacy region and header.
    let idle = xstate::compacted_in_use(&spr, &standard, xcr0).unwrap();
    assert_eq!(idle.len(), 576);
}

#[test]
fn snapshot_needs_a_file() {
    let out = vmm(&["run", "--snapshot-after", "1"]);
    assert_eq!(
        out.status.code(),
        Some(68),
        "clap refuses it (usage status): {}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("--snapshot-file"),
        "{}",
        text(&out.stderr)
    );
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn every_register_survives_snapshot_and_restore_bit_for_bit() {
    if !kvm_or_skip("every_register_survives_snapshot_and_restore_bit_for_bit") {
        return;
    }
    // The guest loads x87 (FCW too), MXCSR and every vector register of its
    // XCR0 (XMM, YMM, and ZMM/opmask where enabled) with distinct patterns,
    // saves them with XSAVE, requests a snapshot, and after the restore
    // saves again and compares every component byte for byte.
    let path = snap_path("regs");
    let (out, v) = vmm_json(&snapshot_check_args(path.to_str().unwrap()));
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["exit_reason"], "snapshotted", "{v:#}");
    let v = restore_checked(&path);
    assert!(v["skipped"].as_array().unwrap().is_empty(), "{v:#}");
}

/// The stored pages are a page-aligned section with a CRC32 per page
/// (`memory.crc32`); `vmm snapshot info` checks the section's CRC32, a
/// restore every page (`--verify-memory`: all before the guest starts,
/// status 69 naming the page); a file cut inside them, a corrupted page
/// index and a version-1 file are refused by name before any VM exists
/// (never a SIGBUS).
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn memory_pages_are_verified_and_refused_by_name_when_damaged() {
    if !kvm_or_skip("memory_pages_are_verified_and_refused_by_name_when_damaged") {
        return;
    }
    let snap = tiny_snapshot("pages");
    let good = std::fs::read(&snap).unwrap();
    let table = vmm::snapshot::format::read_table(&good).unwrap();
    let pages = table.iter().find(|e| e.name == "memory.pages").unwrap();
    let index = table.iter().find(|e| e.name == "memory").unwrap();
    let (_, info) = vmm_json(&["snapshot", "info", snap.to_str().unwrap()]);
    let stored = info["memory_pages_stored"].as_u64().unwrap();
    assert!(stored > 0, "{info}");
    assert_eq!(pages.offset % 4096, 0, "memory.pages is page-aligned");
    assert_eq!(pages.length, stored * 4096);
    assert_eq!(
        (index.length - 16) % 16,
        0,
        "16 bytes per run after the header"
    );

    // One CRC32 per stored page.
    let crcs = table.iter().find(|e| e.name == "memory.crc32").unwrap();
    assert_eq!(crcs.length, stored * 4);

    // The restore, pages on demand and all up front.
    for extra in [None, Some("--verify-memory")] {
        let mut args = vec!["restore", snap.to_str().unwrap(), "--no-native"];
        args.extend(extra);
        let (out, v) = vmm_json(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {v}");
        assert_eq!(v["exit_reason"], "exited", "{v}");
    }

    let p = snap_path("pages-bad");
    // One stored byte flipped: info names the section (64), restore
    // --verify-memory the page, before the guest starts (69).
    let mut bad = good.clone();
    bad[pages.offset as usize + 5] ^= 0x01;
    std::fs::write(&p, &bad).unwrap();
    for (args, status, needle) in [
        (
            vec!["snapshot", "info", p.to_str().unwrap()],
            64,
            "section \"memory.pages\" checksum mismatch",
        ),
        (
            vec![
                "restore",
                p.to_str().unwrap(),
                "--no-native",
                "--verify-memory",
            ],
            69,
            "stored page 0 (guest address 0x",
        ),
    ] {
        let out = vmm(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(err.contains(&p.display().to_string()), "{err}");
    }

    // Cut inside the stored pages: refused by name by restore and info.
    std::fs::write(&p, &good[..pages.offset as usize + 4096 + 100]).unwrap();
    assert_refused(&p, "truncated");
    assert_refused(&p, "section \"memory.pages\" ends at byte");

    // The page index corrupted: refused eagerly.
    let mut bad = good.clone();
    bad[index.offset as usize + 20] ^= 0x04;
    std::fs::write(&p, &bad).unwrap();
    assert_refused(&p, "section \"memory\" checksum mismatch");

    // A version-1 file (index and pages in one section) by its version.
    let mut bad = good.clone();
    bad[8..12].copy_from_slice(&1u32.to_le_bytes());
    std::fs::write(&p, &bad).unwrap();
    assert_refused(&p, "format version 1");

    let _ = std::fs::remove_file(p);
    let _ = std::fs::remove_file(snap);
}

/// A guest with 32 and 256 times the RAM writes a snapshot about as
/// small (only pages that can hold data are scanned and stored), and it
/// restores with its checks passing; the 16 GiB one has RAM above 4 GiB,
/// which its file's memory map says.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn large_guest_snapshot_stays_small_and_restores() {
    if !kvm_or_skip("large_guest_snapshot_stays_small_and_restores") {
        return;
    }
    let mut sizes = Vec::new();
    for mib in ["64", "2048", "16384"] {
        let path = snap_path(&format!("large-{mib}"));
        let mut args = snapshot_check_args(path.to_str().unwrap()).to_vec();
        args.extend(["--mem", mib, "--no-native"]);
        let (out, v) = vmm_json(&args);
        assert!(out.status.success(), "{v:#}");
        assert_eq!(v["exit_reason"], "snapshotted", "{v:#}");
        let (_, info) = vmm_json(&["snapshot", "info", path.to_str().unwrap()]);
        assert_eq!(info["mem_mib"].as_u64().unwrap().to_string(), mib);
        let regions: Vec<(u64, u64)> = info["memory_regions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["addr"].as_u64().unwrap(), r["bytes"].as_u64().unwrap()))
            .collect();
        let bytes = mib.parse::<u64>().unwrap() << 20;
        let want = match bytes.checked_sub(3 << 30) {
            Some(high) => vec![(0, 3 << 30), (4 << 30, high)],
            None => vec![(0, bytes)],
        };
        assert_eq!(regions, want, "{info:#}");
        let len = std::fs::metadata(&path).unwrap().len();
        sizes.push((len, info["memory_pages_stored"].as_u64().unwrap()));
        let (out, v) = vmm_json(&["restore", path.to_str().unwrap(), "--no-native"]);
        let _ = std::fs::remove_file(&path);
        assert!(out.status.success(), "{v:#}");
        let rows = rows_named(&v, "snapshot-check");
        assert_eq!(rows.len(), 1, "{v:#}");
        assert_eq!(rows[0]["check"], "pass", "{v:#}");
    }
    let (small, small_pages) = sizes[0];
    for (large, large_pages) in &sizes[1..] {
        assert!(
            *large <= small + (1 << 20) && *large_pages <= small_pages + 256,
            "{large} bytes ({large_pages} pages); 64 MiB: {small} bytes ({small_pages} pages)"
        );
    }
}

/// A 16 GiB guest boots with the rest of its RAM above 4 GiB and says so
/// on its console: the memory map it read has 13 GiB there (our guest
/// maps and uses only the first 4 GiB; its arena is far below).
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_16_gib_guest_sees_its_ram_above_4_gib() {
    if !kvm_or_skip("a_16_gib_guest_sees_its_ram_above_4_gib") {
        return;
    }
    let out = vmm(&[
        "run",
        "--mem",
        "16384",
        "--workload",
        "none",
        "--no-native",
        "--serial",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("of 16383 MiB of RAM, 13312 MiB of it above 4 GiB"),
        "{stdout}"
    );
}

/// A format 2 file (written before `memory.regions`: RAM one region from
/// address 0) still restores, its checks passing, and `vmm snapshot info`
/// shows its version and the region it implies.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_format_2_snapshot_still_restores() {
    if !kvm_or_skip("a_format_2_snapshot_still_restores") {
        return;
    }
    let path = snap_path("format-2");
    let mut args = snapshot_check_args(path.to_str().unwrap()).to_vec();
    args.push("--no-native");
    let (out, v) = vmm_json(&args);
    assert!(out.status.success(), "{v:#}");
    let mut c = Container::parse(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(c.version, FORMAT_VERSION);
    c.sections.retain(|s| s.name != "memory.regions");
    c.version = 2;
    std::fs::write(&path, c.to_bytes()).unwrap();
    let (_, info) = vmm_json(&["snapshot", "info", path.to_str().unwrap()]);
    assert_eq!(info["format_version"], 2, "{info:#}");
    assert_eq!(
        info["memory_regions"],
        serde_json::json!([{ "addr": 0, "bytes": 64 << 20 }]),
        "{info:#}"
    );
    restore_checked(&path);
}

/// A restored guest snapshotted again: its RAM then holds pages of the
/// first file that the guest has not touched yet, which the second
/// snapshot must still store (it waits until every page is in); the
/// second file restores with every check passing.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_restored_guest_snapshots_again() {
    if !kvm_or_skip("a_restored_guest_snapshots_again") {
        return;
    }
    let (first, second) = (snap_path("again-1"), snap_path("again-2"));
    let (out, v) = vmm_json(&[
        "run",
        "--workload",
        "aes,gemm",
        "--no-native",
        "--snapshot-after",
        "0.3",
        "--snapshot-file",
        first.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{v}");
    assert_eq!(v["exit_reason"], "snapshotted", "{v}");
    let (out, v) = vmm_json(&[
        "restore",
        first.to_str().unwrap(),
        "--no-native",
        "--snapshot-after",
        "0.1",
        "--snapshot-file",
        second.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{v}\n{}", text(&out.stderr));
    assert_eq!(v["exit_reason"], "snapshotted", "{v}");
    let stored = |p: &Path| {
        let (_, info) = vmm_json(&["snapshot", "info", p.to_str().unwrap()]);
        info["memory_pages_stored"].as_u64().unwrap()
    };
    assert!(
        stored(&second) >= stored(&first) / 2,
        "the second snapshot lost the first one's pages: {} -> {}",
        stored(&first),
        stored(&second)
    );
    let (out, v) = vmm_json(&["restore", second.to_str().unwrap(), "--no-native"]);
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", text(&out.stderr));
    assert_eq!(v["exit_reason"], "exited", "{v}");
    let results = v["results"].as_array().unwrap();
    assert!(!results.is_empty(), "{v}");
    for r in results {
        assert_eq!(r["check"], "pass", "{r}");
    }
    let _ = std::fs::remove_file(first);
    let _ = std::fs::remove_file(second);
}

/// A restored guest's rows were not repeated on the port, so their native
/// side runs once, after the guest: the table says so instead of printing
/// the ratio like an interleaved one (issue 38 §5).
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_restored_runs_native_ratios_say_they_were_timed_once() {
    if !kvm_or_skip("a_restored_runs_native_ratios_say_they_were_timed_once") {
        return;
    }
    let snap = snap_path("once");
    let s = snap.to_str().unwrap();
    let (out, v) = vmm_json(&[
        "run",
        "--workload",
        "quick",
        "--no-native",
        "--snapshot-after",
        "0.05",
        "--snapshot-file",
        s,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    if v["exit_reason"] != "snapshotted" {
        // The guest was done before the deadline: nothing to restore.
        let _ = std::fs::remove_file(&snap);
        common::skip(
            "a_restored_runs_native_ratios_say_they_were_timed_once",
            "the guest was done before the snapshot deadline: nothing to restore",
        );
        return;
    }
    let out = vmm(&["restore", s, "--timeout", "120"]);
    let _ = std::fs::remove_file(&snap);
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}\n{}", text(&out.stderr));
    // The row timed across the snapshot has no ratio (it is not a
    // measurement); every other measured row is timed once, after the guest.
    let once = table
        .lines()
        .filter(|l| !l.trim_start().starts_with("once:"))
        .filter(|l| l.contains(" once"))
        .count();
    assert!(once > 0, "no ratio marked once:\n{table}");
    assert!(table.contains("once: the host's side ran once"), "{table}");
}

/// `snapshot=PHASE` (the guest names its snapshot point): `vmm` takes the
/// snapshot there and records the point (`point-mid`), and answers the
/// guest's read of the port, so the guest never prints its waiting line
/// nor waits for a release byte, with a snapshot file or without. The
/// point is between two rows: the restored run has every row, none marked
/// as timed across the snapshot. A phase the guest does not know is named
/// and ends the run as a set-up failure (status 3), not a wait.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn the_guest_snapshots_at_the_point_it_names() {
    if !kvm_or_skip("the_guest_snapshots_at_the_point_it_names") {
        return;
    }
    let snap = snap_path("point");
    let s = snap.to_str().unwrap();
    let run = |workload: &str, extra: &[&str]| {
        let mut args = vec!["run", "--workload", workload, "--no-native", "--serial"];
        args.extend_from_slice(extra);
        vmm(&args)
    };
    let out = run(
        "aes",
        &["--cmdline", "snapshot=mid", "--snapshot-file", s, "--json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["exit_reason"], "snapshotted", "{v}");
    assert_eq!(v["snapshot"]["written"], true, "{v}");
    let (info_out, info) = vmm_json(&["snapshot", "info", s]);
    assert!(info_out.status.success(), "{}", text(&info_out.stderr));
    assert_eq!(info["trigger"], "point-mid");
    let (restored, r) = vmm_json(&["restore", s, "--no-native", "--timeout", "120"]);
    let _ = std::fs::remove_file(&snap);
    assert_eq!(
        restored.status.code(),
        Some(0),
        "{}",
        text(&restored.stderr)
    );
    let rows = r["results"].as_array().unwrap();
    assert!(rows.iter().any(|x| x["size"] == 8192), "{r}");
    for row in rows {
        assert_eq!(row["check"], "pass", "{row}");
        assert!(row["invalid"].is_null(), "{row}");
    }
    for out in [&out, &restored] {
        let console = text(&out.stderr) + &text(&out.stdout);
        assert!(!console.contains("snapshot point"), "{console}");
    }
    // Without a snapshot file: no snapshot, no wait, the run ends normally.
    let out = run("none", &["--cmdline", "snapshot=mid"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("snapshot point"));

    let out = run("none", &["--cmdline", "snapshot=bogus"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(
            "guest: unknown snapshot point \"bogus\" (known: [\"start\", \"mid\", \"end\"])"
        ),
        "{}",
        text(&out.stdout)
    );
}
