//! Crafted snapshots: a real snapshot of the guest (taken at its
//! `bench=snapshot-check` port write) is mutated one field at a time, its
//! CRCs resealed, and `vmm snapshot info` and `vmm restore` must give the
//! same answer, naming the field, leaving the file untouched (bytes and
//! mtime). Rules on the decoded state ("semantic"): `info` still describes
//! the file and says `restorable on this host: no: <reason>`, `restore`
//! refuses with exactly that reason. Rules on the container and the
//! section encodings ("structural"): both refuse with the same message.
//! Then the reading rules: devices, FIFOs, huge sparse files and absurd
//! section counts are refused before anything is read.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::crafted::{
    entry_at, info_args, real_snapshot, refusal, restore_args, take_snapshot, temp_snapshot,
};
use common::{kvm_or_skip, vmm};
use vmm::internal::arch::layout::RamRegion;
use vmm::snapshot::format::{reseal, Container};
use vmm::snapshot::state::Snapshot;
use xstate::XsaveBuf;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The real snapshot as a VM without an irqchip would have written it (a
/// kernel without vmm's note; the embedded guest's vCPU has a LAPIC).
fn no_irqchip(s: &mut Snapshot) {
    s.meta.irqchip = "none".into();
    for v in &mut s.vcpus {
        v.lapic = None;
    }
}

fn decoded() -> Snapshot {
    Snapshot::from_bytes(real_snapshot()).expect("the real snapshot decodes")
}

/// Write `bytes`, run `info` and `restore` on them, check the verdicts
/// agree and name `needle`, and that the file was not touched.
fn refused(name: &str, bytes: &[u8], needle: &str, semantic: bool) {
    let p = temp_snapshot(name);
    std::fs::write(&p, bytes).unwrap();
    let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
    refused_at(&p, needle, semantic);
    assert_eq!(std::fs::read(&p).unwrap(), bytes, "{name}: file modified");
    assert_eq!(
        std::fs::metadata(&p).unwrap().modified().unwrap(),
        mtime,
        "{name}: mtime changed"
    );
    let _ = std::fs::remove_file(p);
}

fn refused_at(p: &Path, needle: &str, semantic: bool) {
    let ps = p.to_str().unwrap();
    let info = vmm(&info_args(ps));
    let restore = vmm(&restore_args(ps, "30"));
    let (ierr, rerr) = (text(&info.stderr), text(&restore.stderr));
    assert!(!ierr.contains("panicked") && !rerr.contains("panicked"));
    assert_eq!(restore.status.code(), Some(64), "restore {ps}: {rerr}");
    // The refusal, past any warning (a dynamic xfeature refused).
    let reason = refusal(&rerr).unwrap_or_else(|| panic!("restore {ps} said: {rerr}"));
    assert!(
        reason.contains(needle),
        "restore: expected {needle:?} in {reason}"
    );
    assert!(reason.contains(ps), "the message names the file: {reason}");
    assert!(
        !reason.contains("KVM_SET_") && !reason.contains("KVM_CREATE_"),
        "refused by KVM, not by the validation: {reason}"
    );
    if semantic {
        assert_eq!(info.status.code(), Some(0), "info {ps}: {ierr}");
        let out = text(&info.stdout);
        assert!(
            out.contains(&format!("restorable on this host: no: {reason}\n")),
            "info and restore disagree on {ps}:\ninfo:\n{out}\nrestore: {reason}"
        );
    } else {
        assert_eq!(info.status.code(), Some(64), "info {ps}: {ierr}");
        assert_eq!(
            refusal(&ierr),
            Some(reason),
            "info and restore disagree on {ps}"
        );
    }
}

type Edit = fn(&mut Snapshot);

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn every_state_rule_gives_one_answer_naming_the_field() {
    if !kvm_or_skip("every_state_rule_gives_one_answer_naming_the_field") {
        return;
    }
    let base = decoded();
    let xcr0 = base.vcpus[0].xcr0().unwrap();
    assert!(
        xcr0 & 0x4 != 0,
        "the guest enabled AVX (XCR0 {xcr0:#x}): the rules below need it"
    );
    // The unmodified file is restorable: the refusals below are the edits'.
    let p = temp_snapshot("unmodified");
    std::fs::write(&p, real_snapshot()).unwrap();
    let info = vmm(&["snapshot", "info", p.to_str().unwrap()]);
    assert!(
        text(&info.stdout).contains("restorable on this host: yes"),
        "{}{}",
        text(&info.stdout),
        text(&info.stderr)
    );
    let _ = std::fs::remove_file(p);

    let cases: &[(&str, Edit, &str)] = &[
        // mem_mib << 20 wraps to 64 MiB for 2^44 + 64.
        (
            "mem-overflow",
            |s| s.meta.mem_mib = (1 << 44) + 64,
            "meta.mem_mib: 17592186044480 MiB overflows",
        ),
        (
            "mem-bound",
            |s| s.meta.mem_mib = 1047553,
            "meta.mem_mib: 1047553 MiB is outside this vmm's guest RAM range 4..=1047552 MiB",
        ),
        (
            // Well-formed regions, but not where this vmm puts 64 MiB.
            "regions-elsewhere",
            |s| {
                s.memory.regions = vec![
                    RamRegion {
                        addr: 0,
                        len: 32 << 20,
                    },
                    RamRegion {
                        addr: 4 << 30,
                        len: 32 << 20,
                    },
                ]
            },
            "memory.regions: RAM at 0x0+0x2000000, 0x100000000+0x2000000, but this vmm lays \
             64 MiB out at 0x0+0x4000000",
        ),
        (
            "mem-mismatch",
            |s| s.meta.mem_mib = 32,
            "memory: holds 67108864 bytes of RAM, meta.mem_mib says 32 MiB",
        ),
        (
            "policy-zero",
            |s| s.meta.policy_xcr0 = 0,
            "meta.policy_xcr0: 0x0: invalid XCR0: x87 (bit 0) must always be set",
        ),
        (
            "policy-invalid",
            |s| s.meta.policy_xcr0 = 0x5,
            "meta.policy_xcr0: 0x5: invalid XCR0",
        ),
        (
            "policy-narrow",
            |s| s.meta.policy_xcr0 = 0x3,
            "meta.policy_xcr0: 0x3 is narrower than vcpu0's XCR0",
        ),
        (
            "init-xstate",
            |s| s.meta.init_xstate = "everything".into(),
            "meta.init_xstate: \"everything\" is not \"minimal\" or \"all\"",
        ),
        (
            "xstate-sync",
            |s| s.meta.xstate_sync = "sometimes".into(),
            "meta.xstate_sync: \"sometimes\" is not",
        ),
        (
            "xcr0-invalid",
            |s| set_xcr0(s, 0x5),
            "vcpu0.xcrs XCR0: 0x5: invalid XCR0",
        ),
        (
            "cr4-osxsave",
            |s| s.vcpus[0].sregs.cr4 &= !(1 << 18),
            "vcpu0.sregs.cr4: CR4 ",
        ),
        (
            "cpuid-1-xsave",
            |s| cpuid(s, 1, 0).ecx &= !(1 << 26),
            "vcpu0.cpuid leaf 0x1 ECX: ",
        ),
        (
            "cpuid-1-osxsave",
            |s| {
                s.vcpus[0].sregs.cr4 &= !(1 << 18);
                set_xcr0(s, 0x1);
                cpuid(s, 1, 0).ecx |= 1 << 27;
            },
            "has OSXSAVE (bit 27) set, yet CR4",
        ),
        (
            "cpuid-d-xcr0",
            |s| cpuid(s, 0xd, 0).eax &= !0x4,
            "vcpu0.cpuid leaf 0xd.0 EDX:EAX: ",
        ),
        (
            "xstate-longer",
            |s| {
                let mut b = s.vcpus[0].xstate.to_vec();
                b.extend_from_slice(&[0u8; 64]);
                s.vcpus[0].xstate = XsaveBuf::from_bytes(&b).unwrap();
            },
            "vcpu0.xstate: ",
        ),
        (
            // The file's own MXCSR_MASK claims every bit; this CPU's does not.
            "mxcsr-reserved",
            |s| {
                let mut b = s.vcpus[0].xstate.to_vec();
                b[24..28].copy_from_slice(&(0x1f80u32 | 1 << 20).to_le_bytes());
                b[28..32].copy_from_slice(&u32::MAX.to_le_bytes());
                s.vcpus[0].xstate = XsaveBuf::from_bytes(&b).unwrap();
            },
            "vcpu0.xstate MXCSR: 0x101f80 sets bits 0x100000 this CPU reserves",
        ),
        (
            // One byte more than the UART's 64-byte FIFO holds (a larger
            // one overflows `meta`'s own bound first).
            "uart",
            |s| s.meta.serial.in_buffer = vec![0; 65],
            "meta.serial: ",
        ),
    ];
    for (name, edit, needle) in cases {
        let mut s = decoded();
        edit(&mut s);
        refused(name, &s.to_bytes(), needle, true);
    }
}

/// Every field KVM checks when the restore loads it, and the rules a VM
/// entry applies after: one crafted file per rule (each item of issue
/// 37 among them), refused by the shared validation before any VM
/// exists, `info` and `restore` in the same words, never by KVM.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn every_rule_kvm_applies_is_checked_before_kvm() {
    if !kvm_or_skip("every_rule_kvm_applies_is_checked_before_kvm") {
        return;
    }
    let cases: &[(&str, Edit, &str)] = &[
        // KVM_SET_SREGS: CR0, CR4, EFER, CR3, the APIC base.
        ("cr0-high", |s| s.vcpus[0].sregs.cr0 |= 1 << 40, "vcpu0.sregs.cr0: CR0 0x10080010033 sets reserved bits"),
        ("cr0-nw", |s| s.vcpus[0].sregs.cr0 = (s.vcpus[0].sregs.cr0 | 1 << 29) & !(1 << 30), "vcpu0.sregs.cr0: CR0 0xa0010033 sets NW without CD"),
        ("cr0-pg", |s| s.vcpus[0].sregs.cr0 &= !1, "sets PG without PE"),
        ("cr4-reserved", |s| s.vcpus[0].sregs.cr4 |= 1 << 31, "vcpu0.sregs.cr4: CR4 0x80040620 sets bits 0x80000000 that are reserved"),
        ("cr4-smxe", |s| s.vcpus[0].sregs.cr4 |= 1 << 14, "sets SMXE (bit 14), which KVM never lets a guest have"),
        ("cr4-cpuid", |s| { s.vcpus[0].sregs.cr4 |= 1 << 12; cpuid(s, 7, 0).ecx &= !(1 << 16); }, "sets LA57 (bit 12), which needs LA57; the vCPU's CPUID does not offer it"),
        ("cr4-pae", |s| s.vcpus[0].sregs.cr4 &= !(1 << 5), "vcpu0.sregs.efer: CR0 0x80010033, CR4 0x40600, EFER 0x500: EFER.LME and CR0.PG are set (64-bit paging) without CR4.PAE"),
        ("efer-reserved", |s| s.vcpus[0].sregs.efer |= 1 << 40, "vcpu0.sregs.efer: EFER 0x10000000500 sets bits 0x10000000000"),
        ("efer-lma", |s| s.vcpus[0].sregs.efer &= !(1 << 10), "without EFER.LMA"),
        ("efer-svme", |s| { s.vcpus[0].sregs.efer |= 1 << 12; cpuid(s, 0x8000_0001, 0).ecx &= !(1 << 2); }, "sets SVME (bit 12), which needs SVM"),
        ("cr3-reserved", |s| s.vcpus[0].sregs.cr3 |= 1 << 60, "vcpu0.sregs.cr3: CR3 0x1000000000"),
        ("apic-base", |s| s.vcpus[0].sregs.apic_base = 0xdead_beef_dead_beef, "vcpu0.sregs.apic_base: 0xdeadbeefdeadbeef sets reserved bits"),
        ("cr8", |s| s.vcpus[0].sregs.cr8 = 0x10, "vcpu0.sregs.cr8: CR8 0x10"),
        ("cs-type", |s| s.vcpus[0].sregs.cs.type_ = 0x1f, "vcpu0.sregs.cs: type 31"),
        ("cs-l-d", |s| s.vcpus[0].sregs.cs.db = 1, "vcpu0.sregs.cs: CS.L and CS.D are both set"),
        ("idt-base", |s| s.vcpus[0].sregs.idt.base = 1 << 60, "vcpu0.sregs.idt: base 0x1000000000000000 is not canonical"),
        ("interrupt-bitmap", |s| s.vcpus[0].sregs.interrupt_bitmap[1] = 1, "vcpu0.sregs.interrupt_bitmap"),
        // KVM_SET_REGS, then the VM entry.
        ("rflags", |s| s.vcpus[0].regs.rflags |= 1 << 40, "vcpu0.regs.rflags"),
        ("rip", |s| s.vcpus[0].regs.rip = 1 << 63, "vcpu0.regs.rip: 0x8000000000000000 is not an address"),
        // KVM_SET_XCRS, KVM_SET_MSRS.
        ("xcr1", |s| s.vcpus[0].xcrs.push((1, 1)), "vcpu0.xcrs: XCR1 = 0x1: KVM saves and loads XCR0 only"),
        ("msr-unknown", |s| s.vcpus[0].msrs.push((0x1234, 0)), "vcpu0.msrs: MSR 0x1234 = 0x0 is not one this vmm saves"),
        ("msr-efer", |s| { s.vcpus[0].msrs.retain(|m| m.0 != 0xc000_0080); s.vcpus[0].msrs.push((0xc000_0080, 0xffff)); }, "vcpu0.msrs EFER: "),
        ("msr-pat", |s| set_msr(s, 0x277, 0x0202_0202_0202_0202), "vcpu0.msrs IA32_PAT: 0x202020202020202 has a byte that is no memory type"),
        ("msr-lstar", |s| set_msr(s, 0xc000_0082, 1 << 63), "vcpu0.msrs LSTAR: "),
        // KVM_SET_VCPU_EVENTS.
        ("exception-255", |s| { let e = &mut s.vcpus[0].events.as_mut().unwrap().exception; e.injected = 1; e.nr = 255; }, "vcpu0.events.exception: injected: vector 255 is no exception (0-31)"),
        ("exception-nmi", |s| { let e = &mut s.vcpus[0].events.as_mut().unwrap().exception; e.injected = 1; e.nr = 2; }, "vector 2 is the NMI"),
        ("event-flags", |s| s.vcpus[0].events.as_mut().unwrap().flags = u32::MAX, "vcpu0.events.flags: 0xffffffff marks exception payloads or triple faults valid"),
        ("event-smm", |s| s.vcpus[0].events.as_mut().unwrap().smi.smm = 1, "vcpu0.events.smi: smm 1"),
        ("event-irq", |s| { no_irqchip(s); let i = &mut s.vcpus[0].events.as_mut().unwrap().interrupt; i.injected = 1; i.nr = 0x40; }, "vcpu0.events.interrupt: an external interrupt is being injected in a VM without an interrupt controller"),
        // KVM_SET_MP_STATE.
        ("mp-halted", |s| { no_irqchip(s); s.vcpus[0].mp_state = Some(3); }, "vcpu0.mp_state: 3 (HALTED) needs an in-kernel LAPIC"),
        ("mp-uninitialised", |s| { no_irqchip(s); s.vcpus[0].mp_state = Some(1); }, "vcpu0.mp_state: 1 (UNINITIALIZED) needs an in-kernel LAPIC"),
        ("mp-huge", |s| s.vcpus[0].mp_state = Some(u32::MAX), "vcpu0.mp_state: 4294967295 is no x86 MP state"),
        // KVM_SET_DEBUGREGS.
        ("dr6", |s| s.vcpus[0].debugregs.as_mut().unwrap().dr6 |= 1 << 40, "vcpu0.debugregs.dr6: 0x100ffff0ff0 sets bits 63:32"),
        ("dr7", |s| s.vcpus[0].debugregs.as_mut().unwrap().dr7 |= 1 << 40, "vcpu0.debugregs.dr7: 0x10000000400 sets bits 63:32"),
        ("dr-flags", |s| s.vcpus[0].debugregs.as_mut().unwrap().flags = 1, "vcpu0.debugregs.flags"),
        // KVM_SET_CPUID2.
        ("cpuid-amx", |s| cpuid(s, 0xd, 0).eax |= 0x6_0000, "is not the guest's xfeature policy (meta.policy_xcr0 "),
        ("cpuid-vaddr", |s| { let e = cpuid(s, 0x8000_0008, 0); e.eax = (e.eax & !0xff00) | (50 << 8); }, "gives 50-bit virtual addresses; KVM accepts 48 or 57"),
        // KVM_SET_XSAVE: the image's header.
        ("xsave-reserved", |s| { let mut b = s.vcpus[0].xstate.to_vec(); b[540] = 1; s.vcpus[0].xstate = XsaveBuf::from_bytes(&b).unwrap(); }, "vcpu0.xstate: reserved xsave header bytes are not zero"),
        ("xsave-bv", |s| { let mut b = s.vcpus[0].xstate.to_vec(); b[512] |= 1 << 3; s.vcpus[0].xstate = XsaveBuf::from_bytes(&b).unwrap(); }, "vcpu0.xstate: "),
    ];
    for (name, edit, needle) in cases {
        let mut s = decoded();
        edit(&mut s);
        refused(name, &s.to_bytes(), needle, true);
    }
    // A policy and a leaf 0xD that both claim AMX, on a host without it.
    let _ = vmm::internal::arch::amx::permit_policy(xstate::XfeatureMask::AMX);
    let host = vmm::kvm::HostKvm::open().expect("KVM opens");
    if !host
        .xstate
        .supported_xcr0()
        .contains_all(xstate::XfeatureMask::AMX)
    {
        let mut s = decoded();
        s.meta.policy_xcr0 |= 0x6_0000;
        cpuid(&mut s, 0xd, 0).eax |= 0x6_0000;
        let policy = s.meta.policy_xcr0;
        refused(
            "policy-amx",
            &s.to_bytes(),
            &format!(
                "meta.policy_xcr0: the guest's CPUID policy {policy:#x} offers amx (components 17-18)"
            ),
            true,
        );
    }
}

/// What only KVM can tell: CR4.CET with a CPUID that offers CET is valid,
/// but whether KVM virtualises CET depends on its version. `info` says
/// the restore must try (table and JSON), and `restore` tries: the guest
/// runs, or KVM's refusal names the ioctl.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn what_only_kvm_can_tell_makes_restore_try() {
    if !kvm_or_skip("what_only_kvm_can_tell_makes_restore_try") {
        return;
    }
    let mut s = decoded();
    cpuid(&mut s, 7, 0).ecx |= 1 << 7; // CET_SS
    s.vcpus[0].sregs.cr4 |= 1 << 23;
    let p = temp_snapshot("must-try");
    std::fs::write(&p, s.to_bytes()).unwrap();
    let ps = p.to_str().unwrap();
    let why = "vcpu0.sregs.cr4: CET is set; whether this KVM virtualises it depends on its version";
    let info = vmm(&["snapshot", "info", ps]);
    assert_eq!(info.status.code(), Some(0), "{}", text(&info.stderr));
    assert!(
        text(&info.stdout).contains(&format!(
            "restorable on this host: restore must try: {why}\n"
        )),
        "{}",
        text(&info.stdout)
    );
    let (_, json) = common::vmm_json(&["snapshot", "info", ps]);
    assert_eq!(json["restore_verdict"], "must-try", "{json}");
    assert_eq!(json["restorable_here"], serde_json::Value::Null, "{json}");
    assert_eq!(json["restore_must_try"][0], why, "{json}");
    let restore = vmm(&["restore", ps, "--no-native", "--timeout", "30"]);
    let err = text(&restore.stderr);
    let _ = std::fs::remove_file(&p);
    match restore.status.code() {
        Some(0) => {}
        Some(64) => assert!(err.contains("KVM_SET_SREGS refused vCPU 0"), "{err}"),
        other => panic!("restore exited {other:?}: {err}"),
    }
    eprintln!(
        "this KVM {} CR4.CET",
        if restore.status.success() {
            "took"
        } else {
            "refused"
        }
    );
}

/// APIC ID `id` in a CPUID table, where this vmm writes it for an AP
/// (leaf 1 EBX[31:24], the x2APIC ID of leaves 0xB and 0x1F).
fn set_apic_id(t: &mut [kvm_bindings::kvm_cpuid_entry2], id: u32) {
    for e in t {
        match e.function {
            1 => e.ebx = (e.ebx & 0x00ff_ffff) | (id << 24),
            0xb | 0x1f => e.edx = id,
            _ => {}
        }
    }
}

/// A two-vCPU snapshot, read back.
fn smp_snapshot() -> Snapshot {
    Snapshot::from_bytes(&take_snapshot("smp", &["--vcpus", "2"])).unwrap()
}

/// `s` with vCPU 1 copied up to `n` vCPUs (APIC IDs as this vmm gives
/// them), without the optional sections when `lean`.
fn with_vcpus(mut s: Snapshot, n: u32, lean: bool) -> Snapshot {
    let ap = s.vcpus[1].clone();
    for id in 2..n {
        let mut v = ap.clone();
        v.id = id;
        set_apic_id(&mut v.cpuid, id);
        if let Some(l) = v.lapic.as_mut() {
            l.regs[0x23] = id as _;
        }
        s.vcpus.push(v);
    }
    if lean {
        for v in &mut s.vcpus {
            (v.events, v.mp_state, v.debugregs) = (None, None, None);
        }
    }
    s.meta.vcpus = n;
    s
}

/// Several vCPUs: more than this vmm's guest kernel runs (9, and 102
/// as issue 37 found) are refused from the section table; each AP is
/// the APIC ID its sections say; the MP states KVM refuses are refused
/// first.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn every_rule_of_several_vcpus_gives_one_answer() {
    if !kvm_or_skip("every_rule_of_several_vcpus_gives_one_answer") {
        return;
    }
    let good = smp_snapshot();
    for (n, lean) in [(9, false), (102, true)] {
        let s = with_vcpus(good.clone(), n, lean);
        refused(
            &format!("vcpus-{n}"),
            &s.to_bytes(),
            &format!("the sections of {n} vCPUs; this vmm's guest kernel runs at most 8"),
            false,
        );
    }
    let cases: &[(&str, Edit, &str)] = &[
        (
            "lapic-id",
            |s| s.vcpus[1].lapic.as_mut().unwrap().regs[0x23] = 5,
            "vcpu1.lapic ID: the ID register 0x05000000 says APIC ID 5; vcpu1 is APIC ID 1",
        ),
        (
            "cpuid-apic-id",
            |s| set_apic_id(&mut s.vcpus[1].cpuid, 3),
            "vcpu1.cpuid leaf 0x1.0 EBX[31:24]: APIC ID 3; vcpu1 is APIC ID 1",
        ),
        (
            "bsp-uninitialised",
            |s| s.vcpus[0].mp_state = Some(1),
            "vcpu0.mp_state: 1 (UNINITIALIZED): the boot vCPU is never waiting",
        ),
        (
            "ap-reset-hold",
            |s| s.vcpus[1].mp_state = Some(9),
            "vcpu1.mp_state: 9 (AP_RESET_HOLD) is for SEV-ES guests only",
        ),
        (
            "sipi-vector",
            |s| s.vcpus[1].events.as_mut().unwrap().sipi_vector = 0x100,
            "vcpu1.events.sipi_vector",
        ),
    ];
    for (name, edit, needle) in cases {
        let mut s = good.clone();
        edit(&mut s);
        refused(name, &s.to_bytes(), needle, true);
    }
}

fn set_msr(s: &mut Snapshot, index: u32, value: u64) {
    let v = &mut s.vcpus[0];
    match v.msrs.iter_mut().find(|m| m.0 == index) {
        Some(m) => m.1 = value,
        None => v.msrs.push((index, value)),
    }
}

fn set_xcr0(s: &mut Snapshot, v: u64) {
    for x in &mut s.vcpus[0].xcrs {
        if x.0 == 0 {
            x.1 = v;
        }
    }
}

fn cpuid(s: &mut Snapshot, f: u32, i: u32) -> &mut kvm_bindings::kvm_cpuid_entry2 {
    s.vcpus[0]
        .cpuid
        .iter_mut()
        .find(|e| e.function == f && e.index == i)
        .unwrap()
}

/// Raw edits of the container or of a section's encoding, resealed.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn every_structural_rule_gives_one_answer() {
    if !kvm_or_skip("every_structural_rule_gives_one_answer") {
        return;
    }
    let good = real_snapshot();
    type Raw = fn(&mut Vec<u8>);
    let cases: &[(&str, Raw, &str)] = &[
        (
            "header-reserved",
            |b| {
                b[50] = 1;
                reseal(b);
            },
            "reserved header byte 50 is not zero",
        ),
        (
            "table-flags",
            |b| {
                let (e, _, _) = entry_at(b, "vcpu0.regs");
                b[e + 60] = 1;
                reseal(b);
            },
            "section \"vcpu0.regs\": reserved flags 0x1 are not zero",
        ),
        (
            "gap-padding",
            |b| {
                let (_, off, len) = entry_at(b, "vcpu0.regs");
                b[(off + len) as usize] = 0x55;
            },
            "padding byte at offset",
        ),
        (
            "overlap",
            |b| {
                let (e, off, _) = entry_at(b, "vcpu0.regs");
                let (e2, _, _) = entry_at(b, "vcpu0.sregs");
                b[e2 + 40..e2 + 48].copy_from_slice(&(off + 8).to_le_bytes());
                let _ = e;
                reseal(b);
            },
            "overlap",
        ),
        (
            "duplicate",
            |b| {
                let (e, _, _) = entry_at(b, "vcpu0.debugregs");
                b[e..e + 40].fill(0);
                b[e..e + 10].copy_from_slice(b"vcpu0.regs");
                reseal(b);
            },
            "section \"vcpu0.regs\" appears twice",
        ),
        (
            "unknown",
            |b| {
                let (e, _, _) = entry_at(b, "vcpu0.debugregs");
                b[e..e + 40].fill(0);
                b[e..e + 12].copy_from_slice(b"vcpu0.bogus!");
                reseal(b);
            },
            "unknown section \"vcpu0.bogus!\"",
        ),
        (
            "orphan",
            |b| {
                let (e, _, _) = entry_at(b, "vcpu0.debugregs");
                b[e..e + 40].fill(0);
                b[e..e + 15].copy_from_slice(b"vcpu1.debugregs");
                reseal(b);
            },
            "section \"vcpu1.debugregs\" belongs to no vCPU",
        ),
        (
            "two-xcr0",
            |b| {
                let mut c = Container::parse(b).unwrap();
                let x = c.get_mut("vcpu0.xcrs").unwrap();
                let first = x[..16].to_vec();
                x.extend_from_slice(&first);
                *b = c.to_bytes();
            },
            "section \"vcpu0.xcrs\" holds 0x0 twice",
        ),
        (
            "page-past-end",
            |b| {
                let mut s = Snapshot::from_bytes(b).unwrap();
                let last = s.memory.runs.len() - 1;
                s.memory.runs[last].0 = s.memory.size / 4096;
                *b = s.to_bytes();
            },
            "lies past the end of the 16384 pages of RAM",
        ),
        (
            "duplicate-page",
            |b| {
                let mut s = Snapshot::from_bytes(b).unwrap();
                s.memory.runs[1].0 = s.memory.runs[0].0;
                *b = s.to_bytes();
            },
            "stores page 0 again",
        ),
        (
            "truncated-pages",
            |b| {
                let mut s = Snapshot::from_bytes(b).unwrap();
                let n = s.memory.data.len() - 4096;
                s.memory.data.truncate(n);
                *b = s.to_bytes();
            },
            "bytes of page data for",
        ),
        (
            "regions-count",
            |b| {
                let mut c = Container::parse(b).unwrap();
                c.get_mut("memory.regions").unwrap()[0] = 17;
                *b = c.to_bytes();
            },
            "section \"memory.regions\": 17 regions, expected at most 16",
        ),
        (
            "regions-missing",
            |b| {
                let mut c = Container::parse(b).unwrap();
                c.sections.retain(|s| s.name != "memory.regions");
                *b = c.to_bytes();
            },
            "section \"memory.regions\" is missing",
        ),
        (
            "regions-in-format-2",
            |b| {
                let mut c = Container::parse(b).unwrap();
                c.version = 2;
                *b = c.to_bytes();
            },
            "section \"memory.regions\" in a format 2 file",
        ),
        (
            "section-count",
            |b| {
                b[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
                reseal(b);
            },
            "section count 4294967295 exceeds the limit of 1024",
        ),
    ];
    for (name, edit, needle) in cases {
        let mut b = good.to_vec();
        edit(&mut b);
        assert_ne!(&b[..], good, "{name}: the edit changed nothing");
        refused(name, &b, needle, false);
    }
}

/// `info` and `restore` refuse devices, FIFOs and huge sparse files from
/// what the file is, before reading it.
#[test]
fn unreadable_inputs_are_refused_before_reading() {
    let dir = std::env::temp_dir().join(format!("vmm-snapval-{}-inputs", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let sparse = dir.join("sparse");
    let huge = vmm::run::restore::MAX_SNAPSHOT_BYTES + 1;
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(huge)
        .unwrap();
    let huge_needle = format!("is {huge} bytes; the limit is");
    for (path, needle) in [
        (
            Path::new("/dev/zero"),
            "is a character device, not a regular file",
        ),
        (fifo.as_path(), "is a FIFO, not a regular file"),
        (sparse.as_path(), huge_needle.as_str()),
    ] {
        let ps = path.to_str().unwrap();
        for args in [vec!["snapshot", "info", ps], vec!["restore", ps]] {
            let t = Instant::now();
            let out = vmm(&args);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
            assert!(err.contains(needle) && err.contains(ps), "{args:?}: {err}");
            // Not a speed assert: reading 4 GiB or waiting on the FIFO
            // would take far longer than this generous bound.
            assert!(t.elapsed() < Duration::from_secs(60), "{args:?}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The guest's own check of its general registers across a snapshot: a
/// restore that changes one of them (here the file is edited so R9 loses
/// bit 0, then RFLAGS loses DF) is caught by the guest, naming it.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn guest_sees_a_general_register_changed_by_the_restore() {
    if !kvm_or_skip("guest_sees_a_general_register_changed_by_the_restore") {
        return;
    }
    // Run on the unmodified file first: all 16 GPRs and RFLAGS survive.
    let cases: &[(&str, Edit, Option<&str>)] = &[
        ("gpr-intact", |_| {}, None),
        ("gpr-r9", |s| s.vcpus[0].regs.r9 ^= 1, Some("r9 ")),
        (
            "gpr-df",
            |s| s.vcpus[0].regs.rflags &= !0x400,
            Some("rflags "),
        ),
        ("gpr-r15", |s| s.vcpus[0].regs.r15 ^= 1 << 63, Some("r15 ")),
    ];
    for (name, edit, want) in cases {
        let mut s = decoded();
        edit(&mut s);
        let p = temp_snapshot(name);
        std::fs::write(&p, s.to_bytes()).unwrap();
        let (out, v) = common::vmm_json(&["restore", p.to_str().unwrap(), "--no-native"]);
        let _ = std::fs::remove_file(&p);
        let row = v["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "snapshot-check")
            .cloned()
            .unwrap_or_else(|| panic!("{name}: no snapshot-check row: {v:#}"));
        match want {
            None => {
                assert!(out.status.success(), "{name}: {v:#}");
                assert_eq!(row["check"], "pass", "{name}: {v:#}");
            }
            Some(reg) => {
                assert_eq!(row["check"], "fail", "{name}: {v:#}");
                let reason = v["skipped"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|r| r["name"] == "snapshot-check")
                    .map(|r| r["reason"].as_str().unwrap().to_string())
                    .unwrap_or_default();
                assert!(
                    reason.starts_with(reg) && reason.contains("after 1 snapshot"),
                    "{name}: expected the guest to name {reg:?}: {reason:?}\n{v:#}"
                );
                if *name == "gpr-df" {
                    // "rflags SEEN != WANTED": the values differ in DF alone,
                    // whatever else the KVM keeps in RFLAGS (kvm_amd keeps
                    // the guest's AC and IOPL, kvm_pvm does not).
                    let hexes: Vec<u64> = reason
                        .split_whitespace()
                        .filter_map(|w| u64::from_str_radix(w.strip_prefix("0x")?, 16).ok())
                        .collect();
                    assert_eq!(hexes.len(), 2, "{reason}");
                    assert_eq!(hexes[0] ^ hexes[1], 0x400, "{reason}");
                }
            }
        }
    }
}
