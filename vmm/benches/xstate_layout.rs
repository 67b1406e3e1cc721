//! Software standard <-> compacted conversion of a full buffer with 2, 3
//! and all components in use, against a plain copy of the bytes in use in
//! the same group, so the ratio comes from one run. Targets (issue 16 §2):
//! `compact` within 1.5x of `memcpy_in_use` with 2 components in use, 1.2x
//! with all of them (components are copied as fixed-size blocks, no `rep
//! movs` start-up: `xstate::area::copy_bytes`).
//!
//! Both sides get the same buffers (64-byte aligned `XsaveBuf`s), their
//! slices and the copy's length through `black_box`, so neither is folded
//! to a known size. After criterion's groups, a min-of-batches figure of
//! the same pairs, interleaved batch by batch, is printed on stderr
//! (`min-of-batches ...`): the fastest batch of each side, which noise on a
//! shared machine only slows.

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use xstate::{compact, expand, CpuidProfile, InitMode, XfeatureMask, XsaveBuf, XsaveInfo};

fn spr() -> XsaveInfo {
    CpuidProfile::from_json(include_str!(
        "../../xstate/tests/data/intel-sapphire-rapids.json"
    ))
    .unwrap()
    .xsave_info()
    .unwrap()
}

/// A standard image for `xcr0` with nonzero contents in `in_use`.
fn image(info: &XsaveInfo, xcr0: XfeatureMask, in_use: XfeatureMask) -> XsaveBuf {
    let mut b = XsaveBuf::init(info, xcr0, InitMode::Minimal).unwrap();
    let l = info.layout(xcr0, xstate::Format::Standard).unwrap();
    for (i, off, size) in l.iter_indices() {
        if in_use.contains_index(i) && i >= 1 {
            for (k, x) in b.as_bytes_mut()[off as usize..(off + size) as usize]
                .iter_mut()
                .enumerate()
            {
                *x = (k as u8) | 1;
            }
        }
    }
    b.set_xstate_bv(in_use);
    b
}

/// The cases: name and the components in use (also the requested mask).
fn cases(xcr0: XfeatureMask) -> [(&'static str, XfeatureMask); 3] {
    [
        ("2_in_use", XfeatureMask::LEGACY),
        ("3_in_use", XfeatureMask::from_bits(0x7)),
        ("all_in_use", xcr0),
    ]
}

/// `compact` of `src` into `dst`, everything through `black_box`.
fn run_compact(info: &XsaveInfo, src: &[u8], in_use: XfeatureMask, dst: &mut [u8]) -> usize {
    compact(
        black_box(info),
        black_box(src),
        black_box(in_use),
        black_box(dst),
    )
    .unwrap()
}

/// A copy of the first `n` bytes of `src` into `dst`, everything through
/// `black_box` (a call to the C library's `memcpy` of a run-time length).
fn run_memcpy(src: &[u8], dst: &mut [u8], n: usize) {
    let (src, dst, n) = (black_box(src), black_box(dst), black_box(n));
    dst[..n].copy_from_slice(&src[..n]);
}

fn bench(c: &mut Criterion) {
    let info = spr();
    let xcr0 = info.supported_xcr0();
    for (name, in_use) in cases(xcr0) {
        let std_img = image(&info, xcr0, in_use);
        // Dense compacted image of the components in use (what the VMM stores).
        let cmp_size = info.compacted_size(in_use).unwrap() as usize;
        let mut cmp = XsaveBuf::new(cmp_size);
        compact(&info, std_img.as_bytes(), in_use, cmp.as_bytes_mut()).unwrap();
        let mut out_std = XsaveBuf::new(std_img.len());
        let mut out_cmp = XsaveBuf::new(cmp_size);

        let mut g = c.benchmark_group(format!("xstate_layout/{name}"));
        g.throughput(Throughput::Bytes(cmp_size as u64));
        g.bench_function("compact", |b| {
            b.iter(|| run_compact(&info, std_img.as_bytes(), in_use, out_cmp.as_bytes_mut()))
        });
        g.bench_function("memcpy_in_use", |b| {
            b.iter(|| run_memcpy(std_img.as_bytes(), out_cmp.as_bytes_mut(), cmp_size))
        });
        g.bench_function("expand", |b| {
            b.iter(|| {
                expand(
                    black_box(&info),
                    black_box(cmp.as_bytes()),
                    black_box(out_std.as_bytes_mut()),
                    black_box(xcr0),
                )
                .unwrap()
            })
        });
        g.bench_function("memcpy_standard", |b| {
            b.iter(|| run_memcpy(std_img.as_bytes(), out_std.as_bytes_mut(), std_img.len()))
        });
        g.finish();
    }
    min_of_batches(&info, xcr0);
}

/// Calls per batch and batches per side of the min-of-batches figure.
const BATCH: u32 = 10_000;
const BATCHES: u32 = 300;

/// The min-of-batches figure: `compact` and `memcpy_in_use` batches
/// interleaved; each side's fastest batch, per call.
fn min_of_batches(info: &XsaveInfo, xcr0: XfeatureMask) {
    for (name, in_use) in cases(xcr0) {
        let std_img = image(info, xcr0, in_use);
        let cmp_size = info.compacted_size(in_use).unwrap() as usize;
        let mut out = XsaveBuf::new(cmp_size);
        let (mut best_c, mut best_m) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..BATCHES {
            let t = Instant::now();
            for _ in 0..BATCH {
                run_compact(info, std_img.as_bytes(), in_use, out.as_bytes_mut());
            }
            best_c = best_c.min(t.elapsed().as_secs_f64() * 1e9 / f64::from(BATCH));
            let t = Instant::now();
            for _ in 0..BATCH {
                run_memcpy(std_img.as_bytes(), out.as_bytes_mut(), cmp_size);
            }
            best_m = best_m.min(t.elapsed().as_secs_f64() * 1e9 / f64::from(BATCH));
        }
        eprintln!(
            "min-of-batches xstate_layout/{name}: compact {best_c:.2} ns, memcpy_in_use \
             {best_m:.2} ns ({cmp_size} B): {:.2}x",
            best_c / best_m
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
