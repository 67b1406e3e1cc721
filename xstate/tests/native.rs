//! XSAVE instructions on this CPU: vector registers survive every save path
//! bit for bit, and the checked wrappers refuse what would fault.
#![cfg(target_arch = "x86_64")]

mod common;

use std::arch::asm;

use common::Rng;

use xstate::native::{self, NativeError};
use xstate::SaveStrategy;
use xstate::{compact, expand, Format, Xfeature, XfeatureMask, XsaveBuf};

fn avx_enabled() -> bool {
    native::host_xcr0().unwrap().contains(Xfeature::Avx)
}

/// Loads YMM0-15 (or XMM0-15 without AVX) from `src`, runs `$body` with the
/// save area in rdi, and stores the registers to `dst`, in one asm block so
/// the compiler cannot touch the registers in between.
macro_rules! around_regs {
    ($src:expr, $dst:expr, $area:expr, $mask:expr, $($body:literal),*) => {
        // SAFETY: the pointers are valid for 16 x 32 bytes and the area is an
        // aligned XSAVE buffer large enough for the mask; every register the
        // block touches is declared clobbered.
        unsafe {
            asm!(
                "vmovdqu ymm0, [rsi + 0]", "vmovdqu ymm1, [rsi + 32]", "vmovdqu ymm2, [rsi + 64]",
                "vmovdqu ymm3, [rsi + 96]", "vmovdqu ymm4, [rsi + 128]", "vmovdqu ymm5, [rsi + 160]",
                "vmovdqu ymm6, [rsi + 192]", "vmovdqu ymm7, [rsi + 224]", "vmovdqu ymm8, [rsi + 256]",
                "vmovdqu ymm9, [rsi + 288]", "vmovdqu ymm10, [rsi + 320]", "vmovdqu ymm11, [rsi + 352]",
                "vmovdqu ymm12, [rsi + 384]", "vmovdqu ymm13, [rsi + 416]", "vmovdqu ymm14, [rsi + 448]",
                "vmovdqu ymm15, [rsi + 480]",
                "mov eax, r8d", "mov rdx, r8", "shr rdx, 32",
                $($body,)*
                "vmovdqu [rcx + 0], ymm0", "vmovdqu [rcx + 32], ymm1", "vmovdqu [rcx + 64], ymm2",
                "vmovdqu [rcx + 96], ymm3", "vmovdqu [rcx + 128], ymm4", "vmovdqu [rcx + 160], ymm5",
                "vmovdqu [rcx + 192], ymm6", "vmovdqu [rcx + 224], ymm7", "vmovdqu [rcx + 256], ymm8",
                "vmovdqu [rcx + 288], ymm9", "vmovdqu [rcx + 320], ymm10", "vmovdqu [rcx + 352], ymm11",
                "vmovdqu [rcx + 384], ymm12", "vmovdqu [rcx + 416], ymm13", "vmovdqu [rcx + 448], ymm14",
                "vmovdqu [rcx + 480], ymm15",
                "vzeroupper",
                in("rsi") $src.as_ptr(),
                in("rcx") $dst.as_mut_ptr(),
                in("rdi") $area,
                in("r8") $mask,
                out("rax") _, out("rdx") _,
                clobber_abi("C"),
                options(nostack),
            );
        }
    };
}

#[test]
fn xsavec_xrstor_preserves_ymm() {
    if !avx_enabled() {
        eprintln!("skipped: AVX not enabled in XCR0 on this host");
        return;
    }
    let info = native::host_info().unwrap();
    let mask: u64 = 0x7;
    let mut rng = Rng(0x1234);
    for _ in 0..50 {
        let src = rng.regs();
        let mut dst = [[0u8; 32]; 16];
        let mut area =
            XsaveBuf::new(info.compacted_size(XfeatureMask::from_bits(mask)).unwrap() as usize);
        around_regs!(
            src,
            dst,
            area.as_bytes_mut().as_mut_ptr(),
            mask,
            "xsavec64 [rdi]",
            "vpxor ymm0, ymm0, ymm0",
            "vpcmpeqb ymm1, ymm1, ymm1",
            "vzeroall",
            "mov eax, r8d",
            "mov rdx, r8",
            "shr rdx, 32",
            "xrstor64 [rdi]"
        );
        assert_eq!(src, dst);
        assert!(area.is_compacted());
        assert_eq!(area.xcomp_bv(), (1 << 63) | mask);
        // The compacted image has the registers where the layout says.
        let l = info
            .layout(XfeatureMask::from_bits(mask), Format::Compacted)
            .unwrap();
        for (i, reg) in src.iter().enumerate() {
            assert_eq!(area.xmm(i), reg[..16]);
            assert_eq!(area.ymm_hi(i, &l).unwrap(), reg[16..]);
        }
    }
}

#[test]
fn xsave_compact_expand_xrstor_preserves_ymm() {
    if !avx_enabled() {
        eprintln!("skipped: AVX not enabled in XCR0 on this host");
        return;
    }
    let info = native::host_info().unwrap();
    let xcr0 = native::host_xcr0().unwrap();
    let mask = XfeatureMask::from_bits(0x7);
    let mut rng = Rng(0x5678);
    for _ in 0..50 {
        let src = rng.regs();
        let mut scratch = [[0u8; 32]; 16];
        let mut std_area = XsaveBuf::new(info.standard_size(xcr0).unwrap() as usize);
        // XSAVE (standard format) of the loaded registers.
        around_regs!(
            src,
            scratch,
            std_area.as_bytes_mut().as_mut_ptr(),
            mask.bits(),
            "xsave64 [rdi]"
        );
        let l = info.layout(mask, Format::Standard).unwrap();
        for (i, reg) in src.iter().enumerate() {
            assert_eq!(std_area.xmm(i), reg[..16]);
            assert_eq!(std_area.ymm_hi(i, &l).unwrap(), reg[16..]);
        }
        // Software round trip.
        let mut cmp = XsaveBuf::new(info.compacted_size(mask).unwrap() as usize);
        compact(&info, std_area.as_bytes(), mask, cmp.as_bytes_mut()).unwrap();
        let mut back = XsaveBuf::new(std_area.len());
        expand(&info, cmp.as_bytes(), back.as_bytes_mut(), xcr0).unwrap();
        // Restore the converted images into fresh registers.
        for image in [&back, &cmp] {
            let mut dst = [[0u8; 32]; 16];
            let zero = [[0u8; 32]; 16];
            around_regs!(
                zero,
                dst,
                image.as_bytes().as_ptr(),
                mask.bits(),
                "xrstor64 [rdi]"
            );
            assert_eq!(src, dst, "restore from {:?}", image.format());
        }
        // Hardware XSAVEC of the same registers equals the software compaction.
        let mut hw = XsaveBuf::new(cmp.len());
        around_regs!(
            src,
            scratch,
            hw.as_bytes_mut().as_mut_ptr(),
            mask.bits(),
            "xsavec64 [rdi]"
        );
        let l = info.layout(mask, Format::Compacted).unwrap();
        assert_eq!(hw.xstate_bv() & 0x4, 0x4);
        for i in 0..16 {
            assert_eq!(hw.xmm(i), cmp.xmm(i));
            assert_eq!(hw.ymm_hi(i, &l), cmp.ymm_hi(i, &l));
        }
    }
}

#[test]
fn xgetbv_reports_xcr0_and_xinuse() {
    let info = native::host_info().unwrap();
    let xcr0 = native::xgetbv(0);
    assert_eq!(xcr0 & 3, 3);
    assert_eq!(xcr0 & !info.supported_xcr0().bits(), 0);
    XfeatureMask::from_bits(xcr0)
        .validate_xcr0(info.supported_xcr0())
        .unwrap();
    if info.has_xgetbv1() && avx_enabled() {
        let inuse: u64;
        // SAFETY: AVX and XGETBV1 are supported; the block clobbers only
        // declared registers.
        unsafe {
            asm!("vpcmpeqb ymm0, ymm0, ymm0", "mov ecx, 1", "xgetbv", "shl rdx, 32", "or rax, rdx",
                 "vzeroupper", out("rax") inuse, out("rdx") _, out("ecx") _, out("ymm0") _,
                 options(nostack, nomem));
        }
        assert_ne!(inuse & 0x4, 0, "AVX in use after writing ymm0: {inuse:#x}");
        assert_eq!(inuse & !xcr0, 0);
        assert_eq!(native::try_xgetbv(1).unwrap() & !xcr0, 0);
    }
    assert!(matches!(
        native::try_xgetbv(7),
        Err(NativeError::Unsupported(_))
    ));
}

#[test]
fn checked_wrappers() {
    let info = native::host_info().unwrap();
    // PKRU guards memory and is never restored from user code (the
    // wrappers refuse it): the host's XCR0 without it (a Zen 3 has it).
    let xcr0 = native::host_xcr0().unwrap().without(Xfeature::Pkru);
    let mut std_area = XsaveBuf::standard_for(&info, xcr0).unwrap();
    native::xsave(&mut std_area, xcr0).unwrap();
    assert_eq!(std_area.xcomp_bv(), 0);
    assert_eq!(
        xstate::validate(std_area.as_bytes(), &info, xcr0, XfeatureMask::EMPTY),
        Ok(Format::Standard)
    );
    native::xrstor(&std_area, xcr0).unwrap();
    if info.has_xsaveopt() {
        native::xsaveopt(&mut std_area, xcr0).unwrap();
        native::xrstor(&std_area, xcr0).unwrap();
    }
    if info.has_xsavec() {
        let mut c = XsaveBuf::new(info.compacted_size(xcr0).unwrap() as usize);
        native::xsavec(&mut c, xcr0).unwrap();
        assert_eq!(c.xcomp_bv(), (1 << 63) | xcr0.bits());
        native::xrstor(&c, xcr0).unwrap();
        // The compacted image expands to what XSAVE saved of the same state.
        let e = xstate::expand_to_standard(&info, &c, xcr0).unwrap();
        assert_eq!(e.mxcsr(), std_area.mxcsr());
        assert_eq!(e.fcw(), std_area.fcw());
    }
    if info.has_xgetbv1() && info.has_xsavec() {
        let mut c = XsaveBuf::new(info.compacted_size(xcr0).unwrap() as usize);
        let saved = native::xsavec_xinuse(&mut c, xcr0).unwrap();
        assert!(xcr0.contains_all(saved));
        assert_eq!(c.xcomp_bv(), (1 << 63) | saved.bits());
        native::xrstor(&c, xcr0).unwrap();
    }
    // Refusals instead of faults.
    let mut small = XsaveBuf::new(576);
    if avx_enabled() {
        assert!(matches!(
            native::xsave(&mut small, xcr0),
            Err(NativeError::Buffer(_))
        ));
    }
    let mut bad = std_area.clone();
    bad.set_xstate_bv(1u64 << 40);
    assert!(matches!(
        native::xrstor(&bad, xcr0),
        Err(NativeError::Buffer(_))
    ));
    let mut bad = std_area.clone();
    bad.as_bytes_mut()[560] = 1;
    assert!(matches!(
        native::xrstor(&bad, xcr0),
        Err(NativeError::Buffer(_))
    ));
    let mut bad = std_area.clone();
    bad.set_fcw(0x27f); // double precision
    bad.set_xstate_bv(bad.xstate_bv() | 1);
    assert_eq!(
        native::xrstor(&bad, xcr0),
        Err(NativeError::WouldChangeFpEnv)
    );
    let mut bad = std_area.clone();
    bad.set_mxcsr(0x7f80); // round toward zero
    assert_eq!(
        native::xrstor(&bad, xcr0),
        Err(NativeError::WouldChangeFpEnv)
    );
    let mut raw = vec![0u8; 2000];
    let off = raw.as_ptr().align_offset(64) + 8;
    assert!(matches!(
        native::xsave(&mut raw[off..off + 1024], XfeatureMask::LEGACY),
        Err(NativeError::Buffer(xstate::BufferError::Misaligned { .. }))
    ));
}

#[test]
fn strategy_chooser_measures_every_supported_strategy() {
    let info = native::host_info().unwrap();
    let host = native::host_xcr0().unwrap();
    // Every restorable component the host enables (not PKRU: see
    // checked_wrappers), and PKRU refused where the host has it.
    let xcr0 = host.without(Xfeature::Pkru);
    if host.contains(Xfeature::Pkru) {
        assert!(matches!(
            native::choose_save_strategy(host, XfeatureMask::LEGACY, 10),
            Err(NativeError::NotRestorable(m)) if m == XfeatureMask::from_bits(Xfeature::Pkru.bit())
        ));
    }
    let in_use = XfeatureMask::LEGACY;
    let r = native::choose_save_strategy(xcr0, in_use, 200).unwrap();
    let expected: Vec<SaveStrategy> = SaveStrategy::ALL
        .into_iter()
        .filter(|s| s.supported(&info))
        .collect();
    assert_eq!(r.figures.iter().map(|f| f.0).collect::<Vec<_>>(), expected);
    for (s, ticks) in &r.figures {
        assert!(*ticks > 0.0 && ticks.is_finite(), "{s}: {ticks}");
    }
    let best = r.figures.iter().map(|f| f.1).fold(f64::INFINITY, f64::min);
    assert_eq!(r.figure(r.choice), Some(best));
    assert_eq!(r.requested, xcr0);
    eprintln!("{r:?}");
    // Components not enabled are refused.
    assert!(matches!(
        native::choose_save_strategy(xcr0 | XfeatureMask::from_bits(1 << 18), in_use, 10),
        Err(NativeError::NotEnabled(_))
    ));
}
