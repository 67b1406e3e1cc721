//! Software standard <-> compacted conversion of a full buffer with 2 and
//! with all components in use, against a plain copy of the bytes in use in
//! the same group, so the ratio comes from one run. Targets (issue 16 §2):
//! `compact` within 1.5x of `memcpy_in_use` with 2 components in use, 1.2x
//! with all of them (components are copied as fixed-size blocks, no `rep
//! movs` start-up: `xstate::area::copy_bytes`).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use xstate::{compact, expand, CpuidProfile, InitMode, XfeatureMask, XsaveBuf, XsaveInfo};

fn spr() -> XsaveInfo {
    CpuidProfile::from_json(include_str!(
        "../xstate/tests/data/intel-sapphire-rapids.json"
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

fn bench(c: &mut Criterion) {
    let info = spr();
    let xcr0 = info.supported_xcr0();
    for (name, in_use) in [("2_in_use", XfeatureMask::LEGACY), ("all_in_use", xcr0)] {
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
            b.iter(|| {
                compact(
                    &info,
                    black_box(std_img.as_bytes()),
                    in_use,
                    out_cmp.as_bytes_mut(),
                )
                .unwrap()
            })
        });
        g.bench_function("memcpy_in_use", |b| {
            b.iter(|| {
                out_cmp
                    .as_bytes_mut()
                    .copy_from_slice(black_box(&std_img.as_bytes()[..cmp_size]))
            })
        });
        g.bench_function("expand", |b| {
            b.iter(|| {
                expand(
                    &info,
                    black_box(cmp.as_bytes()),
                    out_std.as_bytes_mut(),
                    xcr0,
                )
                .unwrap()
            })
        });
        g.bench_function("memcpy_standard", |b| {
            b.iter(|| {
                out_std
                    .as_bytes_mut()
                    .copy_from_slice(black_box(std_img.as_bytes()))
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
