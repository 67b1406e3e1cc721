//! Snapshot and restore costs.
//!
//! - Sizes (printed once): the extended state per vCPU as a snapshot stores
//!   it (compacted, in-use components only) against the 4 KiB legacy
//!   `kvm_xsave` image and against the full standard image, for this host's
//!   KVM and for a Sapphire Rapids guest with AMX (from its recorded leaf 0xD).
//! - `snapshot/encode_64MiB`: the sparse encoding of a 64 MiB guest (the
//!   zero-page scan), no KVM.
//! - `snapshot/save_64MiB_guest`: a guest-requested snapshot of a 64 MiB
//!   guest: complete pending I/O, read the vCPU, encode RAM, write the file.
//! - `restore/to_first_exit`: `restore()` in-process, from the call to the
//!   guest's first exit (an upper bound of "to its first instruction").
//! - `restore/process`: `vmm restore` as a process, spawn to exit, of a
//!   snapshot whose guest exits right after resuming.
//! - `restore/setup_64MiB`, `restore/setup_2GiB`: `restore()` in-process,
//!   from the call to the VM ready for its first `KVM_RUN`, for the same
//!   guest with 64 MiB and with 2 GiB of RAM: the stored pages are mapped,
//!   not copied, so the two should be alike.
//!
//! KVM rows are skipped (with a note) where /dev/kvm cannot be opened.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use vmm::run::restore::{restore, RestoreOptions};
use vmm::run::SerialSink;
use vmm::run::{self, KernelImage, RunConfig, RunEnd};
use vmm::snapshot::sparse::SparseMemory;
use xstate::{CpuidProfile, Format, InitMode, XfeatureMask, XsaveBuf, XsaveInfo};

fn sizes() {
    let row = |what: &str, info: &XsaveInfo, xcr0: u64, in_use: u64| {
        let xcr0 = XfeatureMask::from_bits(xcr0);
        let in_use = XfeatureMask::from_bits(in_use);
        let standard = info.standard_size(xcr0).unwrap_or(0);
        let compact = info.compacted_size(in_use).unwrap_or(0);
        eprintln!(
            "  {what:<44} XCR0 {:#8x} in use {:#8x}: compact {compact:>5} B, standard {standard:>5} B, legacy kvm_xsave 4096 B",
            xcr0.bits(),
            in_use.bits()
        );
    };
    eprintln!("xstate bytes per vCPU in a snapshot");
    if let Ok(host) = vmm::kvm::HostKvm::open() {
        let x = host.xstate.supported_xcr0().bits();
        row(
            "this host's KVM, SSE live (workload idle)",
            &host.xstate.info,
            x,
            0x2,
        );
        row("this host's KVM, AVX live", &host.xstate.info, x, x & 0x7);
        row("this host's KVM, everything live", &host.xstate.info, x, x);
    }
    let path = concat!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
        "/xstate/tests/data/intel-sapphire-rapids.json"
    );
    if let Ok(p) = std::fs::read_to_string(path).map(|t| CpuidProfile::from_json(&t)) {
        let spr = p.expect("SPR profile").xsave_info().expect("SPR leaf 0xD");
        row("Sapphire Rapids AMX guest, tiles idle", &spr, 0x602e7, 0x2);
        row(
            "Sapphire Rapids AMX guest, AVX-512 live",
            &spr,
            0x602e7,
            0xe7,
        );
        row(
            "Sapphire Rapids AMX guest, tiles live",
            &spr,
            0x602e7,
            0x60003,
        );
        // The image KVM_GET_XSAVE2 hands over for the AMX guest.
        let full = XsaveBuf::init(&spr, XfeatureMask::from_bits(0x602e7), InitMode::Minimal)
            .map(|b| b.len())
            .unwrap_or(0);
        let layout = spr
            .layout(XfeatureMask::from_bits(0x602e7), Format::Standard)
            .unwrap();
        eprintln!(
            "  Sapphire Rapids KVM_GET_XSAVE2 image: {full} B (legacy 4 KiB KVM_GET_XSAVE truncates {} B of tile data)",
            layout.total_size().saturating_sub(4096)
        );
    }
}

fn tiny_snapshot(dir: &std::path::Path) -> Option<PathBuf> {
    tiny_snapshot_of(dir, 64)
}

fn tiny_snapshot_of(dir: &std::path::Path, mem_mib: u64) -> Option<PathBuf> {
    let elf = common::tiny_pvh_elf(&common::snapshot_regs_kernel(), true);
    let snap = dir.join(format!("bench-{mem_mib}.snap"));
    let outcome = run::run(RunConfig {
        mem_mib,
        kernel: KernelImage {
            name: "regs kernel".into(),
            bytes: elf.into(),
        },
        serial: SerialSink::Null,
        snapshot_file: Some(snap.clone()),
        snapshot_force: true,
        ..RunConfig::default()
    })
    .ok()?;
    matches!(outcome.end, RunEnd::Snapshotted(_)).then_some(snap)
}

fn benches(c: &mut Criterion) {
    sizes();
    let mut ram = vec![0u8; 64 << 20];
    for (k, b) in ram.iter_mut().step_by(4096 * 97).enumerate() {
        *b = k as u8 | 1;
    }
    c.bench_function("snapshot/encode_64MiB", |b| {
        b.iter(|| SparseMemory::encode(std::hint::black_box(&ram)))
    });

    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        eprintln!("SKIPPED the KVM rows: /dev/kvm cannot be opened");
        return;
    }
    let dir = std::env::temp_dir().join(format!("vmm-bench-snapshot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let elf = common::tiny_pvh_elf(&common::snapshot_regs_kernel(), true);
    let snap_file = dir.join("save.snap");
    c.bench_function("snapshot/save_64MiB_guest", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let o = run::run(RunConfig {
                    kernel: KernelImage {
                        name: "regs kernel".into(),
                        bytes: elf.clone().into(),
                    },
                    serial: SerialSink::Null,
                    snapshot_file: Some(snap_file.clone()),
                    snapshot_force: true,
                    ..RunConfig::default()
                })
                .expect("snapshot run");
                total += o.snapshot_time.expect("a snapshot was taken");
            }
            total
        })
    });
    let Some(snap) = tiny_snapshot(&dir) else {
        eprintln!("SKIPPED the restore rows: no snapshot");
        return;
    };
    eprintln!(
        "  snapshot file of the 64 MiB guest: {} bytes",
        std::fs::metadata(&snap).map(|m| m.len()).unwrap_or(0)
    );
    let opts = || RestoreOptions {
        serial: SerialSink::Null,
        timeout: Some(Duration::from_secs(30)),
        ..RestoreOptions::default()
    };
    c.bench_function("restore/to_first_exit", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let o = restore(&snap, opts()).expect("restore");
                assert!(matches!(o.end, RunEnd::Exited(0)), "{:?}", o.end);
                total += o.first_exit.expect("an exit");
            }
            total
        })
    });
    for (name, mib) in [("restore/setup_64MiB", 64), ("restore/setup_2GiB", 2048)] {
        let Some(snap) = tiny_snapshot_of(&dir, mib) else {
            eprintln!("SKIPPED {name}: no snapshot");
            continue;
        };
        c.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let o = restore(&snap, opts()).expect("restore");
                    assert!(matches!(o.end, RunEnd::Exited(0)), "{:?}", o.end);
                    total += o.setup_time;
                }
                total
            })
        });
    }
    let bin = common::vmm_bin();
    c.bench_function("restore/process", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let st = std::process::Command::new(&bin)
                    .args(["restore", snap.to_str().unwrap(), "--no-native", "--json"])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .expect("vmm restore");
                assert!(st.success());
            }
            t.elapsed()
        })
    });
    let _ = std::fs::remove_dir_all(dir);
}

criterion_group! {
    name = snapshot;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3));
    targets = benches
}
criterion_main!(snapshot);
