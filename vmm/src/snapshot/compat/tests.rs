//! Relayout between hosts moves every component to the target's offsets; the
//! patterned image it uses is shared with the restore tests.

use xstate::{Format, XsaveInfo};

use crate::snapshot::state::IrqchipState;
use crate::vstate::xfd::XfdMsrs;

use super::chips;
use super::events;
use super::image::relayout;
use super::*;
use xstate::buffer::XSAVE_MIN_SIZE;

/// A standard image with every register of every component of `xcr0`
/// holding a distinct pattern (x87 control words valid, MXCSR default).
pub(crate) fn pattern_image(info: &XsaveInfo, xcr0: XfeatureMask) -> XsaveBuf {
    let mut img = XsaveBuf::standard_for(info, xcr0).unwrap();
    let layout = info.layout(xcr0, Format::Standard).unwrap();
    {
        let mut v = img.view_mut();
        v.set_fcw(0x027f);
        v.set_fsw(0x0100);
        v.set_ftw(0xff);
        v.set_mxcsr(0x1f80 | 0x8000);
        for i in 0..8 {
            v.set_st(i, [0x40 + i as u8; 16].map(|b| b ^ 0x5a));
        }
        for i in 0..16 {
            let mut x = [0u8; 16];
            for (k, b) in x.iter_mut().enumerate() {
                *b = 0x80 ^ ((i as u8) << 4) ^ k as u8;
            }
            v.set_xmm(i, x);
        }
        for c in xcr0.iter_indices().filter(|&i| i >= 2) {
            if let Some(bytes) = v.component_by_index_mut(c, &layout) {
                for (k, b) in bytes.iter_mut().enumerate() {
                    *b = (c as u8).wrapping_mul(37) ^ (k as u8).wrapping_mul(3) | 1;
                }
            }
        }
        v.set_xstate_bv(xcr0.bits());
    }
    img
}

#[test]
fn relayout_moves_components_to_the_target_offsets() {
    let path = crate::features::profile::recorded_dump("intel-sapphire-rapids.json");
    let text = std::fs::read_to_string(path).unwrap();
    let spr = xstate::CpuidProfile::from_json(&text)
        .unwrap()
        .xsave_info()
        .unwrap();
    let xcr0 = XfeatureMask::from_bits(0x2e7); // AVX-512 and PKRU
    let img = pattern_image(&spr, xcr0);
    let (same, relaid) = relayout(&spr, &spr, &img, xcr0, xcr0).unwrap();
    assert!(!relaid);
    assert_eq!(same, img);

    // A target without AMX whose PKRU sits 64 bytes further up (and
    // whose sizes say so).
    let mut raw: [xstate::CpuidRegs; 64] = core::array::from_fn(|i| spr.raw_subleaf(i as u32));
    raw[17] = xstate::CpuidRegs::default();
    raw[18] = xstate::CpuidRegs::default();
    raw[0].eax &= !0x60000;
    raw[9].ebx += 64;
    let end = raw[9].ebx + raw[9].eax;
    raw[0].ebx = end;
    raw[0].ecx = end;
    let target =
        XsaveInfo::from_raw(raw).unwrap_or_else(|e| panic!("synthetic target leaf 0xD: {e}"));
    let (moved, relaid) = relayout(&spr, &target, &img, xcr0, xcr0).unwrap();
    assert!(relaid);
    let (from, to) = (
        spr.layout(xcr0, Format::Standard).unwrap(),
        target.layout(xcr0, Format::Standard).unwrap(),
    );
    assert_eq!(
        &moved.as_bytes()[..XSAVE_MIN_SIZE],
        &img.as_bytes()[..XSAVE_MIN_SIZE]
    );
    for i in xcr0.iter_indices().filter(|&i| i >= 2) {
        let (r, w) = (
            from.range_by_index(i).unwrap(),
            to.range_by_index(i).unwrap(),
        );
        assert_eq!(&moved.as_bytes()[w], &img.as_bytes()[r], "component {i}");
    }
    assert_ne!(from.offset_by_index(9), to.offset_by_index(9));
}

/// A real one-vCPU snapshot (the fuzz corpus's seed, taken at the PVH
/// entry: 32-bit protected mode), decoded.
fn pvh_seed() -> Snapshot {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fuzz/corpus/snapshot_container/real-tiny-guest"
    );
    Snapshot::from_bytes(&std::fs::read(path).unwrap()).unwrap()
}

/// The seed moved on into 64-bit mode as the guest kernel runs it:
/// paging with PAE, long mode, 64-bit code.
fn seed() -> Snapshot {
    let mut s = pvh_seed();
    let r = &mut s.vcpus[0].sregs;
    r.cr0 = 0x8001_0033;
    r.cr4 = 0x620;
    r.cr3 = 0x10_3000;
    r.efer = 0x500;
    r.cs.l = 1;
    r.cs.db = 0;
    s
}

/// The verdict of [`check`] on `s` against the host it was written on.
fn verdict(s: &Snapshot) -> Result<Vec<String>, String> {
    let host = HostFacts::as_written(s).unwrap();
    check(Path::new("t.snap"), s, &host)
        .map(|c| c.must_try)
        .map_err(|e| e.to_string())
}

type Edit = fn(&mut Snapshot);

/// Each edit of the seed is refused with a verdict containing its text.
fn each_refused(cases: &[(Edit, &str)]) {
    for (edit, want) in cases {
        let mut s = seed();
        edit(&mut s);
        let got = verdict(&s).unwrap_err();
        assert!(got.contains(want), "want {want:?}, got {got}");
    }
}

fn set_msr(s: &mut Snapshot, index: u32, value: u64) {
    let v = &mut s.vcpus[0];
    match v.msrs.iter_mut().find(|m| m.0 == index) {
        Some(m) => m.1 = value,
        None => v.msrs.push((index, value)),
    }
}

fn leaf(s: &mut Snapshot, f: u32, i: u32) -> &mut kvm_bindings::kvm_cpuid_entry2 {
    s.vcpus[0]
        .cpuid
        .iter_mut()
        .find(|e| e.function == f && e.index == i)
        .unwrap()
}

/// The seed is restorable where it was written; each edit breaks one
/// rule, and the refusal names the field.
#[test]
fn every_field_rule_names_its_field() {
    assert_eq!(verdict(&pvh_seed()), Ok(Vec::new()));
    assert_eq!(verdict(&seed()), Ok(Vec::new()));
    let cases: &[(Edit, &str)] = &[
        (|s| s.vcpus[0].sregs.cr0 |= 1 << 63, "vcpu0.sregs.cr0: CR0 0x8000000080010033 sets reserved bits"),
        (|s| s.vcpus[0].sregs.cr4 |= 1 << 14, "vcpu0.sregs.cr4: CR4 0x4620 sets SMXE"),
        (|s| s.vcpus[0].sregs.cr4 |= 1 << 19, "sets KL (bit 19), which KVM never lets a guest have"),
        (|s| s.vcpus[0].sregs.cr4 |= 1 << 26, "sets bits 0x4000000 that are reserved"),
        (|s| s.vcpus[0].sregs.efer |= 1 << 15, "vcpu0.sregs.efer: EFER 0x8500 sets bits 0x8000"),
        (|s| s.vcpus[0].sregs.efer &= !(1 << 10), "EFER.LME and CR0.PG are set (64-bit paging) without EFER.LMA"),
        (|s| { s.vcpus[0].sregs.efer |= 1 << 11; leaf(s, 0x8000_0001, 0).edx &= !(1 << 20); }, "sets NXE (bit 11), which needs NX"),
        (|s| { s.vcpus[0].sregs.cr0 = 0x11; s.vcpus[0].sregs.efer = 0; }, "CS.L (64-bit code) is set outside IA-32e mode"),
        (|s| s.vcpus[0].sregs.cr3 |= 1 << 52, "vcpu0.sregs.cr3: CR3"),
        (|s| { s.vcpus[0].sregs.apic_base |= 1 << 10; leaf(s, 1, 0).ecx &= !(1 << 21); }, "vcpu0.sregs.apic_base: 0xfee00d00 enables x2APIC mode; the vCPU's CPUID does not offer X2APIC"),
        (|s| s.vcpus[0].sregs.apic_base = 0xfee00400, "vcpu0.sregs.apic_base: 0xfee00400 enables x2APIC mode with the APIC disabled"),
        (|s| s.vcpus[0].sregs.apic_base = 1 << 48, "vcpu0.sregs.apic_base: 0x1000000000000 sets reserved bits (0-7, 9, 48-63)"),
        (|s| s.vcpus[0].sregs.ss.dpl = 4, "vcpu0.sregs.ss: type"),
        (|s| s.vcpus[0].sregs.gdt.padding[1] = 1, "vcpu0.sregs.gdt: reserved padding"),
        (|s| s.vcpus[0].sregs.fs.base = 1 << 50, "vcpu0.sregs.fs: base 0x4000000000000 is not canonical"),
        (|s| s.vcpus[0].sregs.interrupt_bitmap[1] = 1, "vcpu0.sregs.interrupt_bitmap: an external interrupt"),
        (|s| s.vcpus[0].regs.rflags &= !2, "vcpu0.regs.rflags"),
        (|s| s.vcpus[0].regs.rflags |= 1 << 17, "sets VM (virtual-8086 mode) in IA-32e mode"),
        (|s| s.vcpus[0].xcrs.push((5, 0)), "vcpu0.xcrs: XCR5 = 0x0: KVM saves and loads XCR0 only"),
        (|s| set_msr(s, 0x277, 0x0807_0406_0007_0406), "vcpu0.msrs IA32_PAT: 0x807040600070406 has a byte"),
        (|s| set_msr(s, 0xc000_0080, 0xd01), "vcpu0.msrs EFER: 0xd01 disagrees with vcpu0.sregs EFER"),
        (|s| set_msr(s, 0xc000_0100, 1), "vcpu0.msrs FS_BASE: 0x1 disagrees"),
        (|s| set_msr(s, 0xc000_0102, 1 << 60), "vcpu0.msrs KERNEL_GS_BASE: 0x1000000000000000 is not a canonical"),
        (|s| set_msr(s, 0xc000_0103, 1 << 32), "vcpu0.msrs TSC_AUX: 0x100000000 sets bits 63:32"),
        (|s| set_msr(s, 0x174, 1 << 40), "vcpu0.msrs IA32_SYSENTER_CS"),
        (|s| set_msr(s, 0xda0, 1 << 8), "vcpu0.msrs IA32_XSS: 0x100 enables supervisor"),
        (|s| set_msr(s, 0x3a, 1), "vcpu0.msrs: MSR 0x3a = 0x1 is not one this vmm saves"),
        (|s| s.vcpus[0].xfd = Some(XfdMsrs { xfd: 1 << 18, xfd_err: 0 }), "vcpu0.xfd: XFD MSRs are set"),
        (|s| s.vcpus[0].events.as_mut().unwrap().flags |= 0x20, "vcpu0.events.flags: 0x2d marks"),
        (|s| s.vcpus[0].events.as_mut().unwrap().flags |= 0x40, "vcpu0.events.flags: 0x4d has bits KVM does not define"),
        (|s| { let e = &mut s.vcpus[0].events.as_mut().unwrap().exception; e.injected = 1; e.nr = 13; }, "vector 13 pushes an error code; has_error_code is 0"),
        (|s| { let e = &mut s.vcpus[0].events.as_mut().unwrap().exception; e.injected = 1; e.nr = 15; }, "vector 15 is reserved"),
        (|s| { let e = &mut s.vcpus[0].events.as_mut().unwrap().exception; e.injected = 1; e.nr = 6; e.has_error_code = 1; }, "vector 6 pushes no error code; has_error_code is 1"),
        (|s| s.vcpus[0].events.as_mut().unwrap().exception.pending = 1, "vcpu0.events.exception: a pending exception"),
        (|s| s.vcpus[0].events.as_mut().unwrap().exception_payload = 1, "a pending exception not also injected, or a payload"),
        (|s| s.vcpus[0].events.as_mut().unwrap().exception.pending = 1, "a pending exception not also injected, or a payload"),
        (|s| s.vcpus[0].events.as_mut().unwrap().interrupt.shadow = 4, "vcpu0.events.interrupt: injected 0 soft 0 shadow 0x4"),
        (|s| s.vcpus[0].events.as_mut().unwrap().nmi.masked = 2, "vcpu0.events.nmi"),
        (|s| s.vcpus[0].events.as_mut().unwrap().sipi_vector = 1, "vcpu0.events.sipi_vector"),
        (|s| s.vcpus[0].events.as_mut().unwrap().smi.latched_init = 1, "vcpu0.events.smi"),
        (|s| s.vcpus[0].events.as_mut().unwrap().reserved[3] = 1, "vcpu0.events.reserved"),
        (|s| s.vcpus[0].mp_state = Some(9), "vcpu0.mp_state: 9 (AP_RESET_HOLD) is for SEV-ES guests only"),
        (|s| s.vcpus[0].mp_state = Some(7), "vcpu0.mp_state: 7 is no x86 MP state"),
        (|s| s.vcpus[0].debugregs.as_mut().unwrap().reserved[8] = 1, "vcpu0.debugregs.flags"),
        (|s| leaf(s, 0xd, 0).eax |= 1 << 9, "vcpu0.cpuid leaf 0xd.0 EDX:EAX: 0x207 is not the guest's xfeature policy"),
        (|s| leaf(s, 0xd, 1).ecx |= 1 << 11, "vcpu0.cpuid leaf 0xd.1 EDX:ECX: 0x800 offers more than the source KVM had"),
        (|s| leaf(s, 0xd, 2).eax = 512, "vcpu0.cpuid leaf 0xd.2 EAX: avx (component 2) is 512 bytes in the vCPU's CPUID, 256 bytes on this host"),
        (|s| leaf(s, 0x8000_0008, 0).eax = 0x3064, "vcpu0.cpuid leaf 0x80000008 EAX: gives 100-bit physical addresses"),
        (|s| leaf(s, 1, 0).flags = 8, "vcpu0.cpuid leaf 0x1.0: flags 0x8 has bits KVM does not define"),
        (|s| leaf(s, 1, 0).index = 3, "a leaf without KVM_CPUID_FLAG_SIGNIFCANT_INDEX has one entry"),
        (|s| s.meta.trigger = "cron".into(), "meta.trigger: \"cron\" is not"),
        (|s| s.meta.cmdline = "quiet\u{1b}[2J".into(), "meta.cmdline: holds '\\u{1b}'"),
        (|s| s.meta.guest_ran_ms = -1.0, "meta.guest_ran_ms: -1 is not a duration"),
        (|s| s.meta.kvm_xcr0 = 0x3, "meta.kvm_xcr0: 0x3 disagrees with meta.kvm_leaf_0xd"),
        (
            // A component of XCR0 not in use, claimed a gigabyte: the
            // layout it gives is never allocated.
            |s| {
                let d = &mut s.meta.kvm_leaf_0xd;
                d[0].ecx = xstate::Hex32(0x4000_0340);
                d[0].ebx = xstate::Hex32(0x4000_0340);
                d[2].eax = xstate::Hex32(0x4000_0100);
            },
            "meta.kvm_leaf_0xd: subleaf 0 ECX describes a 1073742656-byte xsave area",
        ),
        (|s| s.meta.xsave2_size = 512, "meta.xsave2_size: 512 bytes"),
        (|s| s.meta.msrs_unreadable = vec![0x10], "meta.msrs_unreadable: MSR 0x10 is listed as unreadable, yet vcpu0 holds it"),
        (|s| s.meta.msrs_unreadable = vec![0x3a], "meta.msrs_unreadable: MSR 0x3a is not one this vmm saves"),
    ];
    for (i, (edit, needle)) in cases.iter().enumerate() {
        let mut s = seed();
        edit(&mut s);
        let got = verdict(&s);
        let err = got
            .as_ref()
            .err()
            .unwrap_or_else(|| panic!("case {i} ({needle}): {got:?}"));
        assert!(
            err.contains(needle),
            "case {i}: expected {needle:?} in {err}"
        );
        assert!(err.starts_with("snapshot t.snap "), "{err}");
    }
}

/// A CR4 or EFER feature the vCPU's CPUID offers and this KVM's
/// supported CPUID does not report: restore must try (KVM decides from
/// the host CPU); one neither offers is refused.
#[test]
fn what_only_kvm_can_tell_is_must_try() {
    let mut s = seed();
    leaf(&mut s, 7, 0).ebx |= 1; // FSGSBASE
    s.vcpus[0].sregs.cr4 |= 1 << 16;
    let mut host = HostFacts::as_written(&s).unwrap();
    let c = check(Path::new("t.snap"), &s, &host).unwrap();
    assert!(c.must_try.is_empty(), "{:?}", c.must_try);
    for e in &mut host.cpuid {
        if (e.function, e.index) == (7, 0) {
            e.ebx &= !1;
        }
    }
    let c = check(Path::new("t.snap"), &s, &host).unwrap();
    assert_eq!(c.must_try.len(), 1, "{:?}", c.must_try);
    assert!(
        c.must_try[0].starts_with("vcpu0.sregs.cr4: FSGSBASE is set and this KVM's supported CPUID does not report FSGSBASE"),
        "{:?}",
        c.must_try
    );
    // CET: the CPUID offers it, whether KVM virtualises it is its version's.
    // (The seed's CR0 has WP.)
    let mut s = seed();
    leaf(&mut s, 7, 0).ecx |= 1 << 7;
    s.vcpus[0].sregs.cr4 |= 1 << 23;
    assert!(verdict(&s).unwrap()[0].contains("CET is set; whether this KVM virtualises it"));
    s.vcpus[0].sregs.cr0 &= !(1 << 16);
    assert!(verdict(&s).unwrap_err().contains("sets CET without CR0.WP"));
}

/// The host's own limits: an MSR it does not list, XFD it lacks, fewer
/// vCPUs, no split irqchip, components it lacks in the CPUID.
#[test]
fn what_this_host_lacks_is_incompatible() {
    let s = seed();
    let run = |edit: &dyn Fn(&mut HostFacts)| {
        let mut host = HostFacts::as_written(&s).unwrap();
        edit(&mut host);
        check(Path::new("t.snap"), &s, &host)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let e = run(&|h| h.msrs.retain(|&i| i != 0x10)).unwrap_err();
    assert!(e.contains("cannot be restored on this host: vcpu0.msrs IA32_TSC: MSR 0x10: this KVM does not list it"), "{e}");
    let e = run(&|h| h.max_vcpus = 0).unwrap_err();
    assert!(
        e.contains("meta.vcpus: it holds 1 vCPUs; this KVM allows at most 0"),
        "{e}"
    );
    let mut s = seed();
    s.vcpus[0].xfd = Some(XfdMsrs {
        xfd: 0,
        xfd_err: 1 << 18,
    });
    let mut host = HostFacts::as_written(&s).unwrap();
    host.msrs.retain(|&i| i != crate::vstate::xfd::MSR_IA32_XFD);
    let e = check(Path::new("t.snap"), &s, &host)
        .unwrap_err()
        .to_string();
    assert!(e.contains("vcpu0.xfd: IA32_XFD 0x0 / IA32_XFD_ERR 0x40000 arm components; this KVM lists no XFD MSRs"), "{e}");
}

/// MP states that need a LAPIC are fine with one; "uninitialised" only
/// for an AP.
#[test]
fn mp_states_follow_the_lapic_and_the_vcpu() {
    let mut v = seed().vcpus[0].clone();
    for m in [1, 2, 3, 4] {
        v.mp_state = Some(m);
        let bsp = events::check_mp_state(&v, true);
        assert_eq!(bsp.is_err(), m == 1, "{m}: {bsp:?}");
        assert!(events::check_mp_state(&v, false).is_err());
        v.id = 1;
        assert_eq!(events::check_mp_state(&v, true), Ok(()));
        v.id = 0;
    }
}

/// The full irqchip's chips: as KVM resets them they pass; each field
/// beyond what the chip holds is named.
#[test]
fn irqchip_fields_are_within_the_chips() {
    let good = reset_chips();
    assert_eq!(chips::check_irqchip(&good), Ok(()));
    irqchip_edits_are_named(&good);
}

/// The full irqchip's chips and PIT as KVM resets them.
fn reset_chips() -> IrqchipState {
    use kvm_bindings::{kvm_irqchip, kvm_pit_state2};
    use zerocopy::{FromZeros, IntoBytes};
    let chip = |id: u32, bytes: &[u8]| {
        let mut c = kvm_irqchip::new_zeroed();
        c.chip_id = id;
        c.as_mut_bytes()[8..8 + bytes.len()].copy_from_slice(bytes);
        c
    };
    let mut pic = [0u8; 16];
    pic[15] = 0xf8;
    let mut slave = pic;
    slave[15] = 0xde;
    let mut ioapic = [0u8; 24];
    ioapic[..8].copy_from_slice(&0xfec0_0000u64.to_le_bytes());
    let mut pit = kvm_pit_state2::new_zeroed();
    for c in &mut pit.channels {
        c.mode = 0xff;
        c.count = 0x1_0000;
    }
    IrqchipState {
        pic_master: chip(0, &pic),
        pic_slave: chip(1, &slave),
        ioapic: chip(2, &ioapic),
        pit: Some(pit),
        clock: None,
    }
}

/// Each edit of `good` beyond what a chip holds is refused, naming it.
fn irqchip_edits_are_named(good: &IrqchipState) {
    use zerocopy::IntoBytes;
    type ChipEdit = fn(&mut IrqchipState);
    let cases: &[(ChipEdit, &str)] = &[
        (|i| i.pic_master.chip_id = 2, "irqchip.pic_master.chip_id"),
        (
            |i| i.pic_slave.as_mut_bytes()[8 + 5] = 0x21,
            "irqchip.pic_slave.irq_base",
        ),
        (
            |i| i.pic_master.as_mut_bytes()[8 + 15] = 0xff,
            "irqchip.pic_master.elcr",
        ),
        (
            |i| i.pic_master.as_mut_bytes()[8 + 7] = 2,
            "irqchip.pic_master.flags",
        ),
        (
            |i| i.pic_master.as_mut_bytes()[8 + 40] = 1,
            "irqchip.pic_master",
        ),
        (
            |i| i.ioapic.as_mut_bytes()[8] = 1,
            "irqchip.ioapic.base_address",
        ),
        (
            |i| i.ioapic.as_mut_bytes()[8 + 12] = 0x10,
            "irqchip.ioapic.ioregsel",
        ),
        (|i| i.pit.as_mut().unwrap().flags = 4, "pit.flags"),
        (
            |i| i.pit.as_mut().unwrap().channels[1].mode = 9,
            "pit.channels[1]",
        ),
        (
            |i| i.pit.as_mut().unwrap().channels[2].count = 0x2_0000,
            "pit.channels[2]",
        ),
    ];
    for (edit, field) in cases {
        let mut i = good.clone();
        edit(&mut i);
        match chips::check_irqchip(&i) {
            Err(Fault::Invalid { field: f, .. }) => assert_eq!(&f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}

/// One vCPU of the embedded guest may have the split irqchip (a LAPIC):
/// then it needs its `vcpu0.lapic`, may be halted, and needs a KVM that
/// makes split irqchips; without one, no `vcpu0.lapic` and no halting.
#[test]
fn one_vcpu_may_have_the_split_irqchip() {
    fn split(s: &mut Snapshot) {
        s.meta.irqchip = "split".into();
        s.vcpus[0].lapic = Some(kvm_bindings::kvm_lapic_state::default());
    }
    let mut s = seed();
    split(&mut s);
    assert!(verdict(&s).is_ok(), "{:?}", verdict(&s));
    s.vcpus[0].mp_state = Some(3);
    assert!(
        verdict(&s).is_ok(),
        "HALTED with a LAPIC: {:?}",
        verdict(&s)
    );
    let mut host = HostFacts::as_written(&s).unwrap();
    host.split_irqchip = false;
    let e = check(Path::new("t.snap"), &s, &host)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("meta.irqchip: its VM had a split irqchip"),
        "{e}"
    );
    let cases: &[(Edit, &str)] = &[
        (
            |s| {
                split(s);
                s.vcpus[0].lapic = None;
            },
            "vcpu0.lapic: missing",
        ),
        (
            |s| s.vcpus[0].lapic = Some(kvm_bindings::kvm_lapic_state::default()),
            "vcpu0.lapic: present in a VM without an irqchip",
        ),
        (
            |s| s.vcpus[0].mp_state = Some(3),
            "vcpu0.mp_state: 3 (HALTED) needs an in-kernel LAPIC",
        ),
    ];
    each_refused(cases);
}

/// `meta.platform`: a PC has the full irqchip with its PIT whatever the
/// vCPU count, one vCPU included; the minimal platform's one vCPU none;
/// an unknown platform is named.
#[test]
fn the_platform_decides_the_irqchip() {
    fn pc(s: &mut Snapshot) {
        s.meta.platform = "pc".into();
        s.meta.irqchip = "kvm".into();
        s.irqchip = Some(reset_chips());
        s.vcpus[0].lapic = Some(kvm_bindings::kvm_lapic_state::default());
    }
    let cases: &[(Edit, &str)] = &[
        (
            |s| s.meta.platform = "isa".into(),
            "meta.platform: \"isa\" is not \"minimal\" or \"pc\"",
        ),
        (
            |s| s.meta.platform = "pc".into(),
            "meta.irqchip: \"none\" on a PC",
        ),
        (
            |s| {
                s.meta.irqchip = "kvm".into();
                s.irqchip = Some(reset_chips());
            },
            "meta.irqchip: \"kvm\" for one vCPU",
        ),
        (
            |s| {
                pc(s);
                s.irqchip.as_mut().unwrap().pit = None;
            },
            "pit: missing: a PC",
        ),
    ];
    each_refused(cases);
    // A one-vCPU PC passes the platform's rules (whatever its zeroed
    // LAPIC then fails).
    let mut s = seed();
    pc(&mut s);
    if let Err(e) = verdict(&s) {
        for rule in ["meta.platform", "meta.irqchip", "irqchip.ioapic", ": pit"] {
            assert!(!e.contains(rule), "{e}");
        }
    }
}

/// Without `KVM_CAP_EXCEPTION_PAYLOAD`, KVM (Linux 6.1) reports a pending
/// exception as pending and injected, and loads it as injected: such a
/// state restores. A two-vCPU Linux snapshotted 3 s into its boot on
/// kvm_amd had one (a page fault on its way in), and its file was refused.
#[test]
fn a_pending_exception_kvm_also_calls_injected_restores() {
    let mut s = seed();
    let e = s.vcpus[0].events.as_mut().unwrap();
    e.exception.injected = 1;
    e.exception.pending = 1;
    e.exception.nr = 14;
    e.exception.has_error_code = 1;
    e.exception.error_code = 2;
    assert_eq!(verdict(&s), Ok(Vec::new()));
}
