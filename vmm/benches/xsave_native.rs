//! Time per XSAVE, XSAVEOPT, XSAVEC, XSAVEC masked by XGETBV(1) and XRSTOR on
//! the running CPU, for x87|SSE and x87|SSE|AVX, with the upper YMM state
//! clean (after VZEROUPPER) and dirty.

use std::arch::asm;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use xstate::native;
use xstate::SaveStrategy;
use xstate::{Xfeature, XfeatureMask, XsaveBuf};

/// Makes the upper YMM state dirty (nonzero upper halves) or clean.
fn set_upper_state(dirty: bool) {
    if dirty {
        // SAFETY: AVX is enabled (checked by the caller); only ymm15 is
        // written and it is declared clobbered.
        unsafe { asm!("vpcmpeqb ymm15, ymm15, ymm15", out("ymm15") _, options(nostack, nomem)) };
    } else {
        // SAFETY: AVX is enabled; VZEROUPPER only clears upper halves of
        // caller-saved vector registers.
        unsafe { asm!("vzeroupper", clobber_abi("C"), options(nostack, nomem)) };
    }
}

fn bench(c: &mut Criterion) {
    let info = native::host_info().expect("XSAVE support");
    let xcr0 = native::host_xcr0().expect("XCR0");
    let avx = xcr0.contains(Xfeature::Avx);
    let masks = [
        ("x87_sse", XfeatureMask::LEGACY),
        ("x87_sse_avx", XfeatureMask::from_bits(0x7)),
    ];
    for (mask_name, mask) in masks {
        if !xcr0.contains_all(mask) {
            eprintln!("{mask_name}: not enabled in XCR0 {xcr0:#x}, skipped");
            continue;
        }
        let size = info
            .standard_size(mask)
            .unwrap()
            .max(info.compacted_size(mask).unwrap());
        for dirty in [false, true] {
            if !avx && dirty {
                continue;
            }
            let state = if dirty { "dirty" } else { "clean" };
            let mut g = c.benchmark_group(format!("xsave_native/{mask_name}/{state}"));
            let mut buf = XsaveBuf::new(size as usize);
            for s in SaveStrategy::ALL {
                if !s.supported(&info) {
                    eprintln!("{s}: not supported on this CPU, skipped");
                    continue;
                }
                // One checked call validates support, size and alignment.
                match s {
                    SaveStrategy::Xsave => native::xsave(&mut buf, mask).unwrap(),
                    SaveStrategy::Xsaveopt => native::xsaveopt(&mut buf, mask).unwrap(),
                    SaveStrategy::Xsavec => native::xsavec(&mut buf, mask).unwrap(),
                    SaveStrategy::XsavecXinuse => {
                        native::xsavec_xinuse(&mut buf, mask).unwrap();
                    }
                }
                let p = buf.as_bytes_mut().as_mut_ptr();
                if avx {
                    set_upper_state(dirty);
                }
                g.bench_function(s.name(), |b| {
                    b.iter(|| {
                        // SAFETY: checked above with the same buffer and mask.
                        unsafe {
                            match s {
                                SaveStrategy::Xsave => native::xsave_raw(p, mask.bits()),
                                SaveStrategy::Xsaveopt => native::xsaveopt_raw(p, mask.bits()),
                                SaveStrategy::Xsavec => native::xsavec_raw(p, mask.bits()),
                                SaveStrategy::XsavecXinuse => {
                                    black_box(native::xsavec_xinuse_raw(p, mask.bits()));
                                }
                            }
                        }
                    })
                });
            }
            // XRSTOR of an image saved from the state being measured (so
            // restoring it keeps the upper state clean or dirty).
            if avx {
                set_upper_state(dirty);
            }
            native::xsave(&mut buf, mask).unwrap();
            native::xrstor(&buf, mask).expect("restorable image");
            let p = buf.as_bytes().as_ptr();
            g.bench_function("xrstor", |b| {
                // SAFETY: the image was validated by the checked xrstor above
                // and holds the current FP environment.
                b.iter(|| unsafe { native::xrstor_raw(p, mask.bits()) })
            });
            g.finish();
        }
    }
    // The chooser's own verdict for the two masks, for the record.
    for (name, mask, in_use) in [
        ("x87_sse", XfeatureMask::LEGACY, XfeatureMask::LEGACY),
        (
            "x87_sse_avx/clean",
            XfeatureMask::from_bits(0x7),
            XfeatureMask::LEGACY,
        ),
        (
            "x87_sse_avx/dirty",
            XfeatureMask::from_bits(0x7),
            XfeatureMask::from_bits(0x7),
        ),
    ] {
        if xcr0.contains_all(mask) {
            let r = native::choose_save_strategy(mask, in_use, 2000).unwrap();
            let figs: Vec<String> = r
                .figures
                .iter()
                .map(|(s, t)| format!("{s} {t:.0}"))
                .collect();
            eprintln!(
                "strategy {name}: choice {} (TSC ticks per save+xrstor: {})",
                r.choice,
                figs.join(", ")
            );
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
