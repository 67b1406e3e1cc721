//! Each section round-trips through its codec; old and optional sections
//! read back as they were written.

use super::*;
use crate::vstate::vcpu::MSR_IA32_XSS;

#[test]
fn pod_round_trip() {
    let regs = kvm_regs {
        rax: 0x1122_3344_5566_7788,
        rip: 0x10_0000,
        rflags: 0x202,
        ..Default::default()
    };
    let b = pod_bytes(&regs);
    assert_eq!(b.len(), 144);
    assert_eq!(&b[..8], &0x1122_3344_5566_7788u64.to_le_bytes());
    let back: kvm_regs = pod_from("r", &b).unwrap();
    assert_eq!(back, regs);
    assert!(pod_from::<kvm_regs>("vcpu0.regs", &b[..100]).is_err());
    assert_eq!(std::mem::size_of::<kvm_sregs>(), 312);
    assert_eq!(std::mem::size_of::<kvm_vcpu_events>(), 64);
    assert_eq!(std::mem::size_of::<kvm_debugregs>(), 128);
}

/// A one-vCPU snapshot with the given XFD section.
fn with_xfd(xfd: Option<XfdMsrs>) -> Snapshot {
    Snapshot {
        meta: serde_json::from_value(serde_json::json!({
            "vmm_version": "0", "created_unix_s": 0, "trigger": "time", "mem_mib": 1,
            "cmdline": "", "policy_xcr0": 0x60003, "init_xstate": "minimal",
            "xstate_sync": "lazy", "kvm_xcr0": 0x602e7, "kvm_xss": 0, "kvm_leaf_0xd": [],
            "xsave2_size": 0x2b00, "tsc_khz": 0, "irqchip": "none",
            "serial": SerialRegs::default(), "exits": 0, "guest_ran_ms": 0.0
        }))
        .unwrap(),
        memory: SparseMemory::from_bytes(&SparseMemory::empty().to_bytes()).unwrap(),
        serial_output: Vec::new(),
        vcpus: vec![VcpuState {
            id: 0,
            cpuid: Vec::new(),
            regs: kvm_regs::default(),
            sregs: kvm_sregs::default(),
            xcrs: vec![(0, 0x60003)],
            msrs: Vec::new(),
            events: None,
            mp_state: None,
            debugregs: None,
            xfd,
            xstate: XsaveBuf::new(576),
            lapic: None,
        }],
        irqchip: None,
    }
}

#[test]
fn xfd_section_round_trips_and_is_optional() {
    use crate::vstate::xfd::{MSR_IA32_XFD, MSR_IA32_XFD_ERR};
    let armed = XfdMsrs {
        xfd: 1 << 18,
        xfd_err: 1 << 18,
    };
    let c = with_xfd(Some(armed)).to_container();
    let b = c.get("vcpu0.xfd").expect("section written");
    assert_eq!(b.len(), 32);
    assert_eq!(
        pairs_from("x", b).unwrap(),
        vec![(MSR_IA32_XFD, 1 << 18), (MSR_IA32_XFD_ERR, 1 << 18)]
    );
    let back = Snapshot::from_container(&c).unwrap();
    assert_eq!(back.vcpus[0].xfd, Some(armed));
    // A snapshot without the section (older, or a host without XFD).
    let c = with_xfd(None).to_container();
    assert!(c.get("vcpu0.xfd").is_none());
    assert_eq!(Snapshot::from_container(&c).unwrap().vcpus[0].xfd, None);
    // Anything but exactly the two MSRs is refused by name.
    let mut c = with_xfd(None).to_container();
    c.push("vcpu0.xfd", pairs_to_bytes(&[(MSR_IA32_XFD, 0), (0x10, 0)]));
    let e = Snapshot::from_container(&c).unwrap_err().to_string();
    assert!(
        e.contains("section \"vcpu0.xfd\" must hold exactly IA32_XFD"),
        "{e}"
    );
}

#[test]
fn pairs_and_cpuid_round_trip() {
    let p = vec![(0x10, 123), (0xc000_0080, 0xd01), (MSR_IA32_XSS, 0)];
    assert_eq!(pairs_from("m", &pairs_to_bytes(&p)).unwrap(), p);
    let e = kvm_cpuid_entry2 {
        function: 0xd,
        index: 1,
        flags: 1,
        eax: 0xf,
        ebx: 0x240,
        ecx: 0x1800,
        edx: 0,
        padding: [0; 3],
    };
    let f = kvm_cpuid_entry2 { index: 2, ..e };
    let b = cpuid_to_bytes(&[e, f]);
    assert_eq!(b.len(), 80);
    assert_eq!(cpuid_from("c", &b).unwrap(), vec![e, f]);
    assert!(cpuid_from("c", &b[..79]).is_err());
    let dup = cpuid_to_bytes(&[e, e]);
    let err = cpuid_from("vcpu0.cpuid", &dup).unwrap_err().to_string();
    assert!(err.contains("leaf 0xd.1 twice"), "{err}");
    let mut padded = b.clone();
    padded[30] = 1;
    let err = cpuid_from("vcpu0.cpuid", &padded).unwrap_err().to_string();
    assert!(err.contains("reserved padding"), "{err}");
    let p = pairs_to_bytes(&[(0, 7), (0, 7)]);
    let err = pairs_from("vcpu0.xcrs", &p).unwrap_err().to_string();
    assert!(err.contains("holds 0x0 twice"), "{err}");
    let mut p = pairs_to_bytes(&[(0, 7)]);
    p[5] = 1;
    let err = pairs_from("vcpu0.xcrs", &p).unwrap_err().to_string();
    assert!(err.contains("reserved padding"), "{err}");
}

/// A `meta` written before SMP has no `vcpus`: it reads as one vCPU.
#[test]
fn meta_without_vcpus_is_one_vcpu() {
    let json = serde_json::json!({
        "vmm_version": "0.1.0", "created_unix_s": 0, "trigger": "time", "mem_mib": 64,
        "cmdline": "", "policy_xcr0": 3, "init_xstate": "minimal", "xstate_sync": "lazy",
        "kvm_xcr0": 3, "kvm_xss": 0, "kvm_leaf_0xd": [], "xsave2_size": 0, "tsc_khz": 0,
        "irqchip": "none", "serial": SerialRegs::default(), "exits": 0, "guest_ran_ms": 0.0
    });
    let meta: Meta = serde_json::from_value(json).unwrap();
    assert_eq!(meta.vcpus, 1);
    assert!(meta.msrs_unreadable.is_empty());
}

#[test]
fn lapic_and_irqchip_sections_are_known() {
    let names = [
        "meta",
        "memory",
        "vcpu0.regs",
        "vcpu0.lapic",
        "vcpu1.regs",
        "vcpu1.lapic",
        "irqchip.pic_master",
        "irqchip.pic_slave",
        "irqchip.ioapic",
        "pit",
    ];
    check_section_names(names.iter().copied()).unwrap();
    let err = check_section_names(["meta", "vcpu0.regs", "vcpu1.lapic"].iter().copied())
        .unwrap_err()
        .to_string();
    assert!(err.contains("vcpu1.lapic"), "{err}");
    assert_eq!(std::mem::size_of::<kvm_lapic_state>(), 1024);
    assert_eq!(std::mem::size_of::<kvm_irqchip>(), 520);
    assert_eq!(std::mem::size_of::<kvm_pit_state2>(), 112);
}
