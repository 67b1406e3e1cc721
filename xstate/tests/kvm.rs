//! KVM conversions: leaf 0xD from KVM's CPUID table, and standard images in
//! `kvm_xsave` / KVM_GET_XSAVE2 form. Runs against /dev/kvm when it opens.

mod common;

use kvm_bindings::{kvm_cpuid_entry2, kvm_xsave, CpuId, Xsave};
use xstate::kvm::{write_kvm_xsave, xsave2_fam_len, KvmXsaveError, KVM_XSAVE_REGION_SIZE};
use xstate::{Format, InfoError, InitMode, XfeatureMask, XsaveBuf, XsaveInfo};

fn entries(info: &XsaveInfo) -> Vec<kvm_cpuid_entry2> {
    let mut v = vec![kvm_cpuid_entry2 {
        function: 1,
        eax: 0xa00f11,
        ..Default::default()
    }];
    for (i, r) in info.subleaves() {
        v.push(kvm_cpuid_entry2 {
            function: 0xd,
            index: i,
            flags: 1,
            eax: r.eax,
            ebx: r.ebx,
            ecx: r.ecx,
            edx: r.edx,
            ..Default::default()
        });
    }
    v
}

#[test]
fn info_from_kvm_table() {
    for file in common::DUMPS {
        let info = common::info(file);
        let cpuid = CpuId::from_entries(&entries(&info)).unwrap();
        assert_eq!(XsaveInfo::from_kvm_cpuid(&cpuid).unwrap(), info, "{file}");
    }
    let cpuid = CpuId::from_entries(&[kvm_cpuid_entry2 {
        function: 1,
        ..Default::default()
    }])
    .unwrap();
    assert_eq!(XsaveInfo::from_kvm_cpuid(&cpuid), Err(InfoError::NoLeaf0xd));
}

#[test]
fn kvm_xsave_round_trip() {
    let info = common::icl();
    let xcr0 = XfeatureMask::from_bits(0x2e7);
    let mut b = XsaveBuf::init(&info, xcr0, InitMode::Minimal).unwrap();
    let l = info.layout(xcr0, Format::Standard).unwrap();
    b.set_xmm(1, [0x11; 16]);
    b.set_ymm_hi(2, &l, [0x22; 16]);
    b.as_bytes_mut()[2688] = 0x55; // PKRU
    b.set_xstate_bv(0x207u64);
    let k = b.to_kvm_xsave().unwrap();
    assert_eq!(k.region[512 / 4], 0x207);
    assert_eq!(k.region[2688 / 4], 0x55);
    assert_eq!(k.region[24 / 4], 0x1f80);
    let back = XsaveBuf::from_kvm_xsave(&k);
    assert_eq!(back.len(), 4096);
    assert_eq!(&back.as_bytes()[..b.len()], b.as_bytes());
    assert!(back.as_bytes()[b.len()..].iter().all(|&x| x == 0));
    let mut k2 = kvm_xsave::default();
    write_kvm_xsave(b.as_bytes(), &mut k2).unwrap();
    assert_eq!(k2.region, k.region);
}

#[test]
fn kvm_xsave2_carries_amx() {
    let info = common::spr();
    let xcr0 = XfeatureMask::from_bits(0x602e7);
    let mut b = XsaveBuf::init(&info, xcr0, InitMode::Minimal).unwrap();
    let last = b.len() - 1;
    b.as_bytes_mut()[last] = 0xee; // last byte of TMM7
    b.set_xstate_bv(0x40003u64);
    // The legacy 4 KiB structure cannot carry it.
    assert_eq!(
        b.to_kvm_xsave().unwrap_err(),
        KvmXsaveError::TooLarge {
            limit: 4096,
            offset: last
        }
    );
    let x: Xsave = b.to_kvm_xsave2(11008).unwrap();
    assert_eq!(x.as_slice().len(), xsave2_fam_len(11008));
    assert_eq!(x.as_slice().len(), (11008 - 4096) / 4);
    assert_eq!(x.as_fam_struct_ref().xsave.region[512 / 4], 0x40003);
    let back = XsaveBuf::from_kvm_xsave2(&x);
    assert_eq!(back.len(), 11008);
    assert!(back == b);
    assert!(b.to_kvm_xsave2(8192).is_err());
    assert_eq!(KVM_XSAVE_REGION_SIZE, 4096);
}

#[test]
fn against_dev_kvm() {
    let kvm = match kvm_ioctls::Kvm::new() {
        Ok(k) => k,
        Err(e) => {
            assert!(
                std::env::var_os("VMM_REQUIRE_KVM").is_none(),
                "VMM_REQUIRE_KVM is set but /dev/kvm does not open: {e}"
            );
            eprintln!("skipped: /dev/kvm does not open: {e}");
            return;
        }
    };
    let cpuid = kvm
        .get_supported_cpuid(kvm_bindings::KVM_MAX_CPUID_ENTRIES)
        .unwrap();
    let info = XsaveInfo::from_kvm_cpuid(&cpuid).unwrap();
    assert!(info.supported_xcr0().contains_all(XfeatureMask::LEGACY));
    let vm = kvm.create_vm().unwrap();
    let size = xstate::kvm::kvm_xsave_size(&vm);
    assert!(size >= 4096);
    let vcpu = vm.create_vcpu(0).unwrap();
    // A fresh vCPU's image is the architectural reset state.
    let img = XsaveBuf::from_kvm_xsave(&vcpu.get_xsave().unwrap());
    assert_eq!(img.fcw(), 0x37f);
    assert_eq!(img.mxcsr(), 0x1f80);
    assert_eq!(img.xcomp_bv(), 0);
    let xcr0 = info.supported_xcr0();
    xstate::validate(img.as_bytes(), &info, xcr0, XfeatureMask::EMPTY).unwrap();
    // Write a state and read it back through KVM.
    let mut w = XsaveBuf::init(&info, xcr0, InitMode::Minimal).unwrap();
    w.set_xmm(7, [0x77; 16]);
    let k = w.to_kvm_xsave().unwrap();
    // SAFETY: `k` is a full 4096-byte kvm_xsave and the image fits in it.
    unsafe { vcpu.set_xsave(&k).unwrap() };
    let r = XsaveBuf::from_kvm_xsave(&vcpu.get_xsave().unwrap());
    assert_eq!(r.xmm(7), [0x77; 16]);
    assert_eq!(r.xstate_bv() & 0x3, 0x3);
    eprintln!(
        "KVM supported XCR0 {:#x}, XSS {:#x}, KVM_CAP_XSAVE2 size {size}",
        xcr0,
        info.supported_xss()
    );
}
