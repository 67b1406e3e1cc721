use super::*;
use crate::cpuid::resolve_policy;
use crate::devices::Devices;
use crate::snapshot::compat::tests::pattern_image;
use crate::snapshot::save::{self, Trigger};
use crate::vstate::smp::Irqchip;
use crate::vstate::vcpu;
use xstate::{Xfeature, XfeatureMask};

/// KVM here, or `None` after saying the test is skipped; a skip fails
/// under `VMM_REQUIRE_KVM=1`.
fn host_or_skip(test: &str) -> Option<HostKvm> {
    match HostKvm::open() {
        Ok(host) => Some(host),
        Err(e) => {
            if std::env::var("VMM_REQUIRE_KVM").as_deref() == Ok("1") {
                panic!("{test}: VMM_REQUIRE_KVM=1 but KVM cannot be opened: {e}");
            }
            eprintln!("SKIPPED {test}: KVM unavailable ({e})");
            None
        }
    }
}

/// What both round trips below save with: the 8 MiB unit machine's
/// context (no CPUID check, lazy sync), writing to a per-process
/// temporary file named after `what`.
fn unit_save_context(
    host: &HostKvm,
    policy: &mut crate::cpuid::Policy,
    guest: &crate::cpuid::GuestCpuid,
    what: &str,
) -> (std::path::PathBuf, SaveContext) {
    policy.cpuid_check = None;
    let path = std::env::temp_dir().join(format!("vmm-unit-{what}-{}.snap", std::process::id()));
    let ctx = SaveContext::new(
        host,
        path.clone(),
        8,
        String::new(),
        policy,
        SyncPolicy::Lazy,
        0,
        guest.cpuid.as_slice().to_vec(),
    )
    .unwrap();
    (path, ctx)
}

/// Every bit of the vCPU's extended state survives snapshot and
/// restore into another VM: XCR0 and the KVM_GET_XSAVE image compared
/// byte for byte over the guest's standard size.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn xsave_state_survives_bit_for_bit() {
    let Some(host) = host_or_skip("xsave_state_survives_bit_for_bit") else {
        return;
    };
    let xcr0 = host.xstate.supported_xcr0()
        & (XfeatureMask::LEGACY.with(Xfeature::Avx) | XfeatureMask::AVX512);
    let (mut policy, guest) = resolve_policy(
        &host,
        Some(&format!("{:#x}", xcr0.bits())),
        xstate::InitMode::Minimal,
        0,
    )
    .unwrap();
    let mut m = Machine::create(&host.kvm, 8).unwrap();
    m.vcpu.set_cpuid2(&guest.cpuid).unwrap();
    // A consistent state: XCR0 beyond x87 needs CR4.OSXSAVE.
    let mut sregs = m.vcpu.get_sregs().unwrap();
    sregs.cr4 |= crate::snapshot::compat::CR4_OSXSAVE;
    sregs.fs.base = 0x1234_5678_9abc_d000;
    sregs.gs.base = 0x0fed_cba9_8765_4000;
    m.vcpu.set_sregs(&sregs).unwrap();
    vcpu::set_xcr0(&m.vcpu, xcr0.bits()).unwrap();
    let img = pattern_image(&host.xstate.info, xcr0);
    vcpu::set_xsave(&m.vcpu, &img, host.xsave2_size).unwrap();
    // The reference as KVM holds it once the vCPU has been through
    // KVM_RUN (the CPU's own MXCSR_MASK then appears in the image).
    vcpu::complete_pending_io(&mut m.vcpu).unwrap();
    let reference = vcpu::get_xsave(&m.vcpu, host.xsave2_size).unwrap();
    // Every general register a distinct full-width pattern.
    let mut regs = m.vcpu.get_regs().unwrap();
    let p =
        |i: u64| 0x0123_4567_89ab_cdefu64.rotate_left(4 * i as u32) ^ (i * 0x1111_1111_1111_1111);
    (
        regs.rax, regs.rbx, regs.rcx, regs.rdx, regs.rsi, regs.rdi, regs.rsp, regs.rbp,
    ) = (p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7));
    (
        regs.r8, regs.r9, regs.r10, regs.r11, regs.r12, regs.r13, regs.r14, regs.r15,
    ) = (p(8), p(9), p(10), p(11), p(12), p(13), p(14), p(15));
    regs.rflags = 0x2 | 0x1 | 0x4 | 0x10 | 0x40 | 0x80 | 0x400 | 0x800;
    m.vcpu.set_regs(&regs).unwrap();
    let n = host.xstate.info.standard_size(xcr0).unwrap() as usize;
    // Every component of the guest's XCR0, and past it at most PKRU:
    // KVM reports the guest's PKRU register in its image whenever the
    // host has PKU (a Zen 3 here: XSTATE_BV 0x207 for an XCR0 of 0x7),
    // whatever the guest's XCR0 says.
    assert_eq!(
        reference.xstate_bv() & !Xfeature::Pkru.bit(),
        xcr0.bits(),
        "KVM took every component (XSTATE_BV {:#x})",
        reference.xstate_bv()
    );

    let (path, ctx) = unit_save_context(&host, &mut policy, &guest, "xsave");
    let mut xm = XstateManager::new(SyncPolicy::Lazy, host.xstate.info, xcr0, host.xsave2_size);
    let devices = Devices::new(SerialSink::Null);
    let snap = save::capture(
        &ctx,
        Trigger::Guest,
        save::Running {
            vcpu: &mut m.vcpu,
            mem: &m.mem,
            xstate: &mut xm,
            devices: &devices,
            exits: 0,
            ran: Duration::ZERO,
        },
    )
    .unwrap();
    // Stored compacted, in use only: every component is live here.
    assert_eq!(
        snap.vcpus[0].xstate.len() as u32,
        host.xstate.info.compacted_size(xcr0).unwrap()
    );
    let bytes = snap.to_bytes();
    let back = Snapshot::from_bytes(&bytes).unwrap();
    let validated = validate(&path, &back, &host).unwrap();
    assert_eq!(validated.checked.xstate_bv, xcr0);
    assert_eq!(back.vcpus[0].regs, regs, "the file holds the patterns");
    let standard = validated.checked.standard.clone();
    let launch = build(
        &back,
        validated,
        &host,
        &RestoreOptions::default(),
        Instant::now(),
        None,
    )
    .unwrap();
    let vcpu = &launch.machine.vcpu;
    assert_eq!(vcpu::get_xcr0(vcpu).unwrap(), xcr0.bits());
    let restored = vcpu::get_xsave(vcpu, host.xsave2_size).unwrap();
    let (mut a, mut b) = (
        reference.as_bytes()[..n].to_vec(),
        restored.as_bytes()[..n].to_vec(),
    );
    // XSTATE_BV's PKRU bit (byte 513, bit 1) is KVM's, not the guest's,
    // when PKRU is outside the guest's XCR0: set in the reference, which
    // went through KVM_RUN (KVM saved the FPU with the host's PKRU
    // loaded), clear in the restore, which has not run yet.
    if !xcr0.contains(Xfeature::Pkru) {
        for image in [&mut a, &mut b] {
            image[512 + 1] &= !((Xfeature::Pkru.bit() >> 8) as u8);
        }
    }
    if let Some(i) = (0..n).find(|&i| a[i] != b[i]) {
        panic!(
            "xsave byte {i} differs after restore: {:#04x} -> {:#04x}",
            a[i], b[i]
        );
    }
    // Every state, read back from KVM, bit for bit against the file.
    let report =
        crate::snapshot::verify::verify_loaded(vcpu, &back.vcpus[0], &standard, host.xsave2_size)
            .unwrap();
    assert!(report.compared > 100, "{report:?}");
    assert!(
        report.mismatches.is_empty(),
        "state changed across snapshot/restore: {}",
        report
            .mismatches
            .iter()
            .map(|m| m.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    );
    eprintln!(
        "host-owned differences (documented): {:?}",
        report.host_owned
    );
}

/// Two vCPUs with different XCR0s (the AVX-512 class beside x87|SSE)
/// and different register patterns: after capture_smp, the file and a
/// restore into another VM, both vCPUs' xsave images, XCR0s, registers
/// and LAPIC IDs read back from KVM match, bit for bit. With a split
/// irqchip (what `vmm run` makes where KVM has it) and with the full
/// one (a KVM without it, and the files of earlier versions): the
/// restored VM has the source's, and only the full one has the
/// `irqchip.*` sections.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn every_vcpu_survives_an_smp_snapshot_bit_for_bit() {
    let Some(host) = host_or_skip("every_vcpu_survives_an_smp_snapshot_bit_for_bit") else {
        return;
    };
    let split = host.kvm.check_extension(kvm_ioctls::Cap::SplitIrqchip);
    if !split {
        eprintln!("this KVM has no KVM_CAP_SPLIT_IRQCHIP: the full irqchip only");
    }
    smp_round_trip(&host, Irqchip::Full);
    if split {
        smp_round_trip(&host, Irqchip::Split);
    }
}

/// The image KVM held before the snapshot, as the vCPU can see it: its
/// XSTATE_BV restricted to the vCPU's XCR0, which is all a snapshot
/// keeps. An XSAVE without the init optimisation (QEMU's TCG, under
/// kvm_amd) saves the guest's registers under the host's XCR0 and marks
/// components outside the guest's XCR0 in use; their contents must then
/// be their init values (all zero), or the snapshot would lose state.
fn only_within_xcr0(
    info: &xstate::XsaveInfo,
    reference: &xstate::XsaveBuf,
    xcr0: XfeatureMask,
    vcpu: usize,
) -> Vec<u8> {
    let mut bytes = reference.as_bytes().to_vec();
    let bv = reference.view().xstate_bv();
    let outside = XfeatureMask::from_bits(bv & !xcr0.bits());
    for c in outside.iter_indices().filter(|&c| c >= 2) {
        let f = Xfeature::from_index(c).unwrap();
        let comp = info.component(f).unwrap();
        let at = comp.standard_offset as usize;
        let data = &bytes[at..at + comp.size as usize];
        assert!(
            data.iter().all(|&b| b == 0),
            "vCPU {vcpu}: component {c} outside XCR0 {:#x} is in use and not init",
            xcr0.bits()
        );
    }
    bytes[512..520].copy_from_slice(&(bv & xcr0.bits()).to_le_bytes());
    bytes
}

fn smp_round_trip(host: &HostKvm, kind: Irqchip) {
    let wide = host.xstate.supported_xcr0()
        & (XfeatureMask::LEGACY.with(Xfeature::Avx) | XfeatureMask::AVX512);
    let narrow = XfeatureMask::LEGACY;
    let (mut policy, guest) = resolve_policy(
        host,
        Some(&format!("{:#x}", wide.bits())),
        xstate::InitMode::Minimal,
        0,
    )
    .unwrap();
    let (mut m, mut ap_fds) = Machine::create_smp(&host.kvm, 8, 2, kind).unwrap();
    let mut ap = ap_fds.pop().unwrap();
    // One vCPU's consistent state: its CPUID, CR4.OSXSAVE, XCR0, an
    // xsave image of patterns (`salt` makes the XMM registers differ
    // between vCPUs) and distinct general registers. Returns the image
    // as KVM holds it after KVM_RUN and the registers.
    let prepare = |vcpu: &mut kvm_ioctls::VcpuFd, index: u32, xcr0: XfeatureMask| {
        let table = crate::vstate::smp::cpuid_for(&guest, index);
        vcpu.set_cpuid2(&table.cpuid).unwrap();
        let mut sregs = vcpu.get_sregs().unwrap();
        sregs.cr4 |= crate::snapshot::compat::CR4_OSXSAVE;
        vcpu.set_sregs(&sregs).unwrap();
        vcpu::set_xcr0(vcpu, xcr0.bits()).unwrap();
        let mut img = pattern_image(&host.xstate.info, xcr0);
        for i in 0..16 {
            img.view_mut()
                .set_xmm(i, [(0x30 * index as u8) ^ (i as u8) ^ 0xa5; 16]);
        }
        vcpu::set_xsave(vcpu, &img, host.xsave2_size).unwrap();
        vcpu::complete_pending_io(vcpu).unwrap();
        let reference = vcpu::get_xsave(vcpu, host.xsave2_size).unwrap();
        let mut regs = vcpu.get_regs().unwrap();
        regs.rax = 0x1111_0000_0000_0000 * (u64::from(index) + 1) + 0xabcd;
        regs.r15 = 0x0f0f_0f0f_0f0f_0f0f ^ u64::from(index);
        vcpu.set_regs(&regs).unwrap();
        (reference, regs)
    };
    let (ref0, regs0) = prepare(&mut m.vcpu, 0, wide);
    let (ref1, regs1) = prepare(&mut ap, 1, narrow);

    let (path, ctx) = unit_save_context(host, &mut policy, &guest, "smp");
    let new_xm = || XstateManager::new(SyncPolicy::Lazy, host.xstate.info, wide, host.xsave2_size);
    let (mut xm0, mut xm1) = (new_xm(), new_xm());
    let devices = Devices::new(SerialSink::Null);
    let snap = save::capture_smp(
        &ctx,
        Trigger::Time,
        save::PausedSmp {
            vm: &m.vm,
            irqchip: kind,
            vcpus: vec![
                save::PausedVcpu {
                    vcpu: &mut m.vcpu,
                    xstate: &mut xm0,
                },
                save::PausedVcpu {
                    vcpu: &mut ap,
                    xstate: &mut xm1,
                },
            ],
            mem: &m.mem,
            devices: &devices,
            exits: 0,
            ran: Duration::ZERO,
        },
    )
    .unwrap();
    assert_eq!(snap.meta.vcpus, 2);
    assert_eq!(snap.meta.irqchip, kind.name());
    // Each vCPU compacted with only its own components.
    assert_eq!(
        snap.vcpus[1].xstate.len() as u32,
        host.xstate.info.compacted_size(narrow).unwrap()
    );
    let back = Snapshot::from_bytes(&snap.to_bytes()).unwrap();
    assert_eq!(back.irqchip.is_some(), kind == Irqchip::Full);
    let validated = validate(&path, &back, host).unwrap();
    assert_eq!(validated.checked.vcpus.len(), 2);
    assert_eq!(validated.checked.vcpus[1].xcr0, narrow);
    let standards: Vec<_> = validated
        .checked
        .vcpus
        .iter()
        .map(|c| c.standard.clone())
        .collect();
    let launch = build(
        &back,
        validated,
        host,
        &RestoreOptions::default(),
        Instant::now(),
        None,
    )
    .unwrap();
    assert_eq!(launch.machine.aps.len(), 1);
    assert_eq!(launch.machine.irqchip, kind);
    let restored = [&launch.machine.vcpu, &launch.machine.aps[0].vcpu];
    for (i, (fd, (reference, regs, xcr0))) in restored
        .iter()
        .zip([(&ref0, regs0, wide), (&ref1, regs1, narrow)])
        .enumerate()
    {
        assert_eq!(vcpu::get_xcr0(fd).unwrap(), xcr0.bits(), "vCPU {i} XCR0");
        assert_eq!(fd.get_regs().unwrap(), regs, "vCPU {i} registers");
        let n = host.xstate.info.standard_size(xcr0).unwrap() as usize;
        let now = vcpu::get_xsave(fd, host.xsave2_size).unwrap();
        let reference = only_within_xcr0(&host.xstate.info, reference, xcr0, i);
        let (a, b) = (&reference[..n], &now.as_bytes()[..n]);
        if let Some(k) = (0..n).find(|&k| a[k] != b[k]) {
            panic!(
                "vCPU {i}: xsave byte {k} differs: {:#04x} -> {:#04x}",
                a[k], b[k]
            );
        }
        let report = crate::snapshot::verify::verify_loaded(
            fd,
            &back.vcpus[i],
            &standards[i],
            host.xsave2_size,
        )
        .unwrap();
        assert!(
            report.mismatches.is_empty(),
            "vCPU {i} changed across snapshot/restore: {:?}",
            report.mismatches
        );
        // The xAPIC ID register (offset 0x20, ID in bits 31:24).
        let lapic = fd.get_lapic().unwrap();
        assert_eq!(lapic.regs[0x23] as u8, i as u8, "vCPU {i} APIC ID");
        assert_eq!(
            lapic.regs[..0x30],
            back.vcpus[i].lapic.unwrap().regs[..0x30],
            "vCPU {i} LAPIC ID/version"
        );
    }
}
