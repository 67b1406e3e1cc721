//! Replays the fuzz corpus on stable: every seed in `fuzz/corpus/<target>/`
//! and every crash artifact in `fuzz/regressions/<target>/` goes through the
//! same body the cargo-fuzz target runs (`tests/fuzz_bodies/mod.rs`), so a
//! parser bug the fuzzer once found stays fixed without nightly.
//! `fuzz/README.md` says how to run the fuzzers and add a regression.

mod common;
mod fuzz_bodies;

use std::path::{Path, PathBuf};

use fuzz_bodies::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("fuzz")
}

/// The files directly in `dir` (none when it does not exist), sorted.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("read corpus directory").path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != ".gitkeep"))
        .collect();
    files.sort();
    files
}

/// Runs every file of `kind` (`corpus` or `regressions`) through its
/// target; returns how many ran per target. A panic names the file.
fn replay(kind: &str) -> Vec<(&'static str, usize)> {
    let mut counts = Vec::new();
    for &(name, body) in TARGETS {
        let files = files_in(&fuzz_dir().join(kind).join(name));
        for f in &files {
            let data = std::fs::read(f).expect("read corpus file");
            let result = std::panic::catch_unwind(|| body(&data));
            assert!(result.is_ok(), "{name}: {} panicked", f.display());
        }
        counts.push((name, files.len()));
    }
    counts
}

#[test]
fn every_seed_replays_without_panic() {
    let counts = replay("corpus");
    for (name, n) in counts {
        // Every target has seeds: an empty directory means a missing corpus.
        assert!(
            n >= 3,
            "fuzz/corpus/{name} has {n} seeds, expected at least 3"
        );
    }
}

/// The firmware-table seeds hold the CPU counts they were built with,
/// through the fuzz body's own memory model: the target's seeds reach the
/// parsers' success paths, not only their refusals.
#[test]
fn firmware_seeds_give_their_cpu_counts() {
    for (name, bytes, counts) in fuzz_bodies::firmware_seeds() {
        assert_eq!(fuzz_bodies::firmware_counts(&bytes), Some(counts), "{name}");
        let committed = fuzz_dir().join("corpus/firmware_tables").join(name);
        assert_eq!(
            std::fs::read(&committed).ok(),
            Some(bytes),
            "{} differs from firmware_seeds(): run write_seed_corpus",
            committed.display()
        );
    }
}

/// Seeds written valid must stay valid. A format change that leaves them
/// behind turns them into refusals, and the fuzzer into a test of the
/// first check only: until session 9 the report seeds were 11,816-byte
/// records of an older version, and the real snapshot was never in git
/// (`.gitignore` drops `*.snap`).
#[test]
fn the_valid_seeds_still_parse() {
    let seed = |target: &str, name: &str| {
        let path = fuzz_dir().join("corpus").join(target).join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let stale = "is stale: run write_seed_corpus (see its doc comment)";
    for name in ["empty", "two-results"] {
        guest::protocol::Report::from_bytes(&seed("report_record", name))
            .unwrap_or_else(|e| panic!("report_record/{name} {stale}: {e:?}"));
    }
    vmm::snapshot::state::Snapshot::from_bytes(&seed("snapshot_container", "real-tiny-guest"))
        .unwrap_or_else(|e| panic!("snapshot_container/real-tiny-guest {stale}: {e}"));
}

/// Seeds that take the validation past its first rules: the tiny guest
/// moved on into 64-bit mode (every rule passes), and two states KVM
/// would refuse (an injected exception 255 with every event flag set, a
/// reserved CR4 bit), from a real snapshot's bytes.
fn validation_seeds(file: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    use vmm::snapshot::state::Snapshot;
    let long_mode = |s: &mut Snapshot| {
        let r = &mut s.vcpus[0].sregs;
        (r.cr0, r.cr4, r.cr3, r.efer) = (0x8001_0033, 0x620, 0x10_3000, 0x500);
        (r.cs.l, r.cs.db) = (1, 0);
    };
    let mut s = Snapshot::from_bytes(file).expect("a fresh snapshot decodes");
    long_mode(&mut s);
    let mut events = s.clone();
    let e = events.vcpus[0].events.as_mut().expect("KVM has events");
    (e.exception.injected, e.exception.nr, e.flags) = (1, 255, u32::MAX);
    let mut cr4 = s.clone();
    cr4.vcpus[0].sregs.cr4 |= 1 << 31;
    vec![
        ("long-mode-guest", s.to_bytes()),
        ("kvm-refused-events", events.to_bytes()),
        ("kvm-refused-cr4", cr4.to_bytes()),
    ]
}

/// The seeds meant to pass the validation do (against the host they say
/// they were written on), so the fuzzer starts past its first rule.
#[test]
fn the_valid_seeds_pass_the_validation() {
    for name in ["real-tiny-guest", "long-mode-guest"] {
        let path = fuzz_dir().join("corpus/snapshot_container").join(name);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            vmm::fuzzing::snapshot_check(&bytes),
            Ok(Vec::new()),
            "{name}"
        );
    }
    for (name, bytes) in validation_seeds(
        &std::fs::read(fuzz_dir().join("corpus/snapshot_container/real-tiny-guest")).unwrap(),
    ) {
        let on_disk = std::fs::read(fuzz_dir().join("corpus/snapshot_container").join(name));
        assert!(
            on_disk.ok().as_deref() == Some(&bytes[..]),
            "{name} is stale: run write_seed_corpus"
        );
    }
}

#[test]
fn every_regression_replays_without_panic() {
    replay("regressions");
}

#[test]
fn every_corpus_directory_is_a_target() {
    // A directory whose name matches no target would never be replayed.
    for kind in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz_dir().join(kind)) else {
            continue;
        };
        for e in entries {
            let name = e.expect("read").file_name();
            let name = name.to_string_lossy();
            assert!(
                TARGETS.iter().any(|(t, _)| *t == name),
                "fuzz/{kind}/{name} is not a fuzz target"
            );
        }
    }
}

#[test]
fn section_framing_round_trips() {
    let mut c = vmm::snapshot::format::Container::new();
    c.push("meta", b"{}".to_vec());
    c.push("vcpu0.regs", vec![1; 144]);
    c.push("memory", Vec::new());
    let framed = fuzz_bodies::frames_of(&c);
    assert_eq!(fuzz_bodies::sections_from_frames(&framed), c);
}

/// Writes the seed corpus (`fuzz/corpus/`): real encodings made by the code
/// under test plus a few malformed ones. Run it when a format changes:
/// `cargo test --test fuzz_replay -- --ignored write_seed_corpus` (needs
/// KVM for the snapshot seeds: it takes a snapshot of a tiny guest).
#[test]
#[ignore = "writes fuzz/corpus; run by hand when a format changes"]
fn write_seed_corpus() {
    use guest::protocol::{fixed_str, Report, ResultRecord, SkipRecord, WorkUnit};
    use vmm::snapshot::format::Container;
    use vmm::snapshot::sparse::{SparseMemory, PAGE_SIZE};
    use xstate::{compacted_in_use, CpuidProfile, InitMode, XfeatureMask, XsaveBuf};

    let write = |target: &str, name: &str, bytes: &[u8]| {
        let dir = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&dir).expect("create corpus directory");
        std::fs::write(dir.join(name), bytes).expect("write seed");
    };

    // Snapshots: a real one of the tiny register kernel. The committed one
    // is kept while it still parses (it was written on a Zen 3 host:
    // policy and KVM XCR0 0x7, which the validation tests' messages name);
    // only a format change that refuses it, or VMM_SEED_NEW=1, takes a new
    // one on this host. The seeds derived from it are written again either
    // way.
    let committed = fuzz_dir().join("corpus/snapshot_container/real-tiny-guest");
    let file = match std::fs::read(&committed) {
        Ok(bytes)
            if std::env::var_os("VMM_SEED_NEW").is_none()
                && vmm::snapshot::state::Snapshot::from_bytes(&bytes).is_ok() =>
        {
            bytes
        }
        _ => take_seed_snapshot(),
    };
    let c = Container::parse(&file).expect("a fresh snapshot parses");
    // No `.snap` extension: `.gitignore` keeps snapshot files out of git.
    write("snapshot_container", "real-tiny-guest", &file);
    write("snapshot_container", "truncated-header", &file[..40]);
    write("snapshot_container", "truncated-table", &file[..100]);
    // The format before this one (the page index and the pages in one
    // section): refused by its version.
    let mut v1 = file.clone();
    v1[8] = 1;
    write("snapshot_container", "version-1", &v1);
    let mut flipped = file.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    write("snapshot_container", "section-checksum", &flipped);
    for (name, bytes) in validation_seeds(&file) {
        write("snapshot_container", name, &bytes);
    }

    write(
        "snapshot_sections",
        "real-tiny-guest",
        &fuzz_bodies::frames_of(&c),
    );
    let without = |name: &str| Container {
        sections: c
            .sections
            .iter()
            .filter(|s| s.name != name)
            .cloned()
            .collect(),
        ..Container::new()
    };
    write(
        "snapshot_sections",
        "no-xstate",
        &fuzz_bodies::frames_of(&without("vcpu0.xstate")),
    );
    let mut short = c.clone();
    short.get_mut("vcpu0.regs").expect("regs").truncate(100);
    write(
        "snapshot_sections",
        "short-regs",
        &fuzz_bodies::frames_of(&short),
    );

    let meta = c.get("meta").expect("meta");
    write("snapshot_meta", "real-tiny-guest.json", meta);
    write("snapshot_meta", "empty-object.json", b"{}");
    let mut m: serde_json::Value = serde_json::from_slice(meta).expect("meta JSON");
    m["kvm_leaf_0xd"] = serde_json::json!([]);
    write(
        "snapshot_meta",
        "no-leaf-0xd.json",
        &serde_json::to_vec_pretty(&m).expect("JSON"),
    );

    // Sparse memory: the real one, a hand-made one, and broken ones.
    // The fuzz body takes the index and the pages back to back.
    let mut memory = c.get("memory").expect("memory").to_vec();
    memory.extend_from_slice(c.get("memory.pages").expect("memory.pages"));
    write("sparse_memory", "real-tiny-guest", &memory);
    let mut ram = vec![0u8; 8 * PAGE_SIZE];
    ram[0] = 1;
    ram[3 * PAGE_SIZE + 7] = 2;
    ram[4 * PAGE_SIZE] = 3;
    let small = SparseMemory::encode(&ram).to_bytes();
    write("sparse_memory", "three-pages", &small);
    write("sparse_memory", "missing-data", &small[..small.len() - 1]);
    let mut overlap = small.clone();
    overlap[32..40].copy_from_slice(&0u64.to_le_bytes());
    write("sparse_memory", "overlapping-runs", &overlap);

    // Report records.
    let mut r = Report::new();
    r.cpuid_xcr0_supported = 0x602e7;
    r.xcr0 = 0x2e7;
    r.tsc_khz = 2_000_000;
    r.push_result_aux(
        ResultRecord {
            name: fixed_str("aes-128-cbc"),
            variant: fixed_str("aesni-sse"),
            size: 4096,
            work: 4096,
            cycles: 10_000,
            unit: WorkUnit::Bytes as u32,
            check: 1,
            residual: 0.0,
        },
        0,
    );
    r.push_result_aux(
        ResultRecord {
            name: fixed_str("ctxsw"),
            variant: fixed_str("xsavec"),
            size: 0,
            work: 100,
            cycles: 50_000,
            unit: WorkUnit::Events as u32,
            check: 1,
            residual: 0.0,
        },
        960,
    );
    r.push_skipped(SkipRecord {
        name: fixed_str("dgemm"),
        variant: fixed_str("avx512"),
        reason: fixed_str("CPUID lacks AVX-512F (XCR0 0x7)"),
    });
    write("report_record", "empty", Report::new().as_bytes());
    write("report_record", "two-results", r.as_bytes());
    let mut bad = *r
        .as_bytes()
        .first_chunk::<{ Report::SIZE }>()
        .expect("size");
    bad[0] ^= 0xff;
    write("report_record", "bad-magic", &bad);
    let mut too_many = r;
    too_many.result_count = 65;
    write("report_record", "too-many-results", too_many.as_bytes());

    // Masks.
    for (name, text) in [
        ("hex", "0x2e7"),
        ("names", "x87,sse,avx"),
        ("host-minus-avx512", "host,-avx512"),
        ("minus-amx", "-amx"),
        ("plus-pkru", "+pkru"),
        ("unknown", "avx1024"),
        ("bit-n", "x87, sse, bit62"),
        ("empty-token", "x87,,sse"),
        ("decimal", "743"),
    ] {
        write("xfeature_mask", name, text.as_bytes());
    }

    // CPUID profiles: the recorded ones, and two broken ones.
    let data = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("xstate/tests/data");
    for f in files_in(&data)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "json"))
    {
        let text = std::fs::read(&f).expect("profile");
        write(
            "cpuid_profile",
            &f.file_name().expect("name").to_string_lossy(),
            &text,
        );
    }
    let spr = std::fs::read_to_string(data.join("intel-sapphire-rapids.json")).expect("spr");
    write(
        "cpuid_profile",
        "truncated.json",
        &spr.as_bytes()[..spr.len() / 2],
    );
    let mut p: serde_json::Value = serde_json::from_str(&spr).expect("JSON");
    let first = p["leaf_0xd"][0].clone();
    p["leaf_0xd"].as_array_mut().expect("array").push(first);
    write(
        "cpuid_profile",
        "duplicate-subleaf.json",
        &serde_json::to_vec_pretty(&p).expect("JSON"),
    );

    // ELF images.
    write(
        "elf_loader",
        "tiny-pvh.elf",
        &common::tiny_pvh_elf(&[0xf4], true),
    );
    write(
        "elf_loader",
        "tiny-no-note.elf",
        &common::tiny_pvh_elf(&[0xf4], false),
    );
    write(
        "elf_loader",
        "guest-header-region.elf",
        &vmm::GUEST_KERNEL[..4096],
    );
    write("elf_loader", "not-elf", b"MZ\x90\x00not an ELF");

    // Command lines.
    for (name, text) in [
        ("vmm-default", "quiet workload=aes,gemm xfeatures=0x2e7"),
        ("bench", "bench=exits,,ctxsw exits=500 console=ttyS0"),
        ("bad-numbers", "exits=0x exits=ten xfeatures=zz"),
        ("fault", "selftest fault=pf\tworkload=none\n"),
        ("empty", ""),
    ] {
        write("guest_cmdline", name, text.as_bytes());
    }

    // XSAVE images: `[cpu][xcr0][xss][image]` (cpu 0 Sapphire Rapids, 1 Zen 3).
    let info = |f: &str| {
        CpuidProfile::from_json(&std::fs::read_to_string(data.join(f)).expect("profile"))
            .expect("profile")
            .xsave_info()
            .expect("info")
    };
    let frame = |cpu: u8, xcr0: u64, image: &[u8]| {
        let mut v = vec![cpu];
        v.extend_from_slice(&xcr0.to_le_bytes());
        v.extend_from_slice(&0u64.to_le_bytes());
        v.extend_from_slice(image);
        v
    };
    for (name, bytes, _) in fuzz_bodies::firmware_seeds() {
        write("firmware_tables", name, &bytes);
    }
    for (cpu, file, xcr0) in [
        (0u8, "intel-sapphire-rapids.json", 0x602e7u64),
        (1, "amd-zen3-milan.json", 0x207),
    ] {
        let info = info(file);
        let mask = XfeatureMask::from_bits(xcr0);
        let mut std_img = XsaveBuf::init(&info, mask, InitMode::Minimal).expect("init");
        std_img.set_xmm(3, [0x5a; 16]);
        let bytes = std_img.as_bytes();
        write(
            "xsave_buffer",
            &format!("standard-{cpu}"),
            &frame(cpu, xcr0, bytes),
        );
        let comp = compacted_in_use(&info, &std_img, mask).expect("compact");
        write(
            "xsave_buffer",
            &format!("compacted-{cpu}"),
            &frame(cpu, xcr0, comp.as_bytes()),
        );
        let mut bad_mxcsr = comp.as_bytes().to_vec();
        bad_mxcsr[26] = 0xff;
        write(
            "xsave_buffer",
            &format!("bad-mxcsr-{cpu}"),
            &frame(cpu, xcr0, &bad_mxcsr),
        );
    }
}

/// A snapshot of the tiny register kernel taken now, for the seed corpus.
fn take_seed_snapshot() -> Vec<u8> {
    let kernel = common::temp_file(
        "fuzz-seed-regs.elf",
        &common::tiny_pvh_elf(&common::snapshot_regs_kernel(), true),
    );
    let snap = std::env::temp_dir().join(format!("vmm-fuzz-seed-{}.snap", std::process::id()));
    let out = common::vmm(&[
        "run",
        "--kernel",
        kernel.to_str().expect("utf-8 path"),
        "--mem",
        "4",
        // Every host these sessions land on offers x87|SSE|AVX: the seed's
        // policy is the same wherever it is written (the validation
        // tests' messages name it).
        "--xfeatures",
        "0x7",
        "--snapshot-file",
        snap.to_str().expect("utf-8 path"),
        "--no-native",
        "--json",
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let file = std::fs::read(&snap).expect("snapshot written");
    let _ = std::fs::remove_file(&snap);
    let _ = std::fs::remove_file(&kernel);
    file
}
