//! The xstate manager across exits: under every sync policy the guest's
//! x87, MXCSR, XMM and YMM registers survive thousands of exits of each kind
//! bit for bit, a VMM-side XMM edit reaches the guest, and images that do
//! not fit the guest's XCR0 are refused before KVM sees them.

mod common;

use common::{kvm_or_skip, rows_named, vmm_json};
use kvm_bindings::KVM_MAX_CPUID_ENTRIES;
use vmm::xstate_manager::{SyncPolicy, XstateManager};
use xstate::{InitMode, Xfeature, XfeatureMask, XsaveBuf, XsaveInfo};

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn registers_survive_exits_under_every_policy() {
    if !kvm_or_skip("registers_survive_exits_under_every_policy") {
        return;
    }
    for policy in ["lazy", "eager", "eager-compact"] {
        let (out, v) = vmm_json(&[
            "run",
            "--workload",
            "none",
            "--xstate-sync",
            policy,
            "--cmdline",
            "bench=xstate-check exits=10000",
        ]);
        assert!(out.status.success(), "{policy}: {v:#}");
        let rows = rows_named(&v, "xstate-check");
        let variants: Vec<&str> = rows
            .iter()
            .map(|r| r["variant"].as_str().unwrap())
            .collect();
        assert_eq!(
            variants,
            ["pio", "mmio", "cpuid", "edit"],
            "{policy}: {v:#}"
        );
        for r in &rows {
            assert_eq!(r["check"], "pass", "{policy}: {r}\n{v:#}");
        }
        // The exits really reached the VMM: 10 000 PIO and 10 000 MMIO at least.
        assert!(
            v["exits"].as_u64().unwrap() >= 20_000,
            "{policy}: {}",
            v["exits"]
        );
        let stats = &v["xstate_stats"];
        match policy {
            // Lazy fetched only for the edit, and wrote back once.
            "lazy" => {
                assert_eq!(stats["fetches"], 1, "{stats}");
                assert_eq!(stats["writebacks"], 1, "{stats}");
            }
            // Eager reads and writes the full image on every exit.
            "eager" => {
                assert!(stats["fetches"].as_u64().unwrap() >= 20_000, "{stats}");
                assert_eq!(stats["fetches"], stats["writebacks"], "{stats}");
            }
            // Eager-compact reads on every exit, writes back only the edit,
            // and stores far fewer bytes than it reads.
            _ => {
                assert!(stats["fetches"].as_u64().unwrap() >= 20_000, "{stats}");
                assert_eq!(stats["writebacks"], 1, "{stats}");
                assert!(
                    stats["compacted_bytes"].as_u64().unwrap()
                        < stats["standard_bytes"].as_u64().unwrap(),
                    "{stats}"
                );
            }
        }
    }
}

/// A vCPU with KVM's supported CPUID and its leaf 0xD.
fn vcpu() -> (kvm_ioctls::VmFd, kvm_ioctls::VcpuFd, XsaveInfo, usize) {
    let kvm = kvm_ioctls::Kvm::new().unwrap();
    let cpuid = kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES).unwrap();
    let info = XsaveInfo::from_kvm_cpuid(&cpuid).unwrap();
    let vm = kvm.create_vm().unwrap();
    let vcpu = vm.create_vcpu(0).unwrap();
    vcpu.set_cpuid2(&cpuid).unwrap();
    let size = xstate::kvm::kvm_xsave_size(&vm);
    (vm, vcpu, info, size)
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn edits_are_written_back_only_when_dirty_and_exactly() {
    if !kvm_or_skip("edits_are_written_back_only_when_dirty_and_exactly") {
        return;
    }
    let (_vm, vcpu, info, size) = vcpu();
    let xcr0 = info.supported_xcr0();
    let mut m = XstateManager::new(SyncPolicy::Lazy, info, xcr0, size);
    // At reset XCR0 is x87 alone: an SSE edit must be refused at write-back
    // (checked against the XCR0 in force, not just the policy) ...
    m.set_xmm(&vcpu, 7, [1; 16]).unwrap();
    let err = m.before_run(&vcpu).unwrap_err().to_string();
    assert!(err.contains("XCR0 0x1"), "{err}");
    assert_eq!(m.stats().writebacks, 0);
    // ... and accepted once the guest has enabled it.
    vmm::internal::vstate::vcpu::set_xcr0(&vcpu, xcr0.bits()).unwrap();
    let mut m = XstateManager::new(SyncPolicy::Lazy, info, xcr0, size);
    // Nothing happens on the exit path, nor before a run without edits.
    m.on_exit(&vcpu).unwrap();
    m.before_run(&vcpu).unwrap();
    assert_eq!(m.stats().fetches, 0);
    assert_eq!(m.stats().writebacks, 0);

    let pattern = *b"0123456789abcdef";
    m.set_xmm(&vcpu, 7, pattern).unwrap();
    // The cached state is compacted with only what is in use: x87 and SSE.
    let cached = m.state(&vcpu).unwrap();
    assert!(cached.is_compacted());
    assert_eq!(
        cached.xstate_bv_mask() - XfeatureMask::LEGACY,
        XfeatureMask::EMPTY
    );
    assert_eq!(cached.xmm(7), pattern);
    m.before_run(&vcpu).unwrap();
    assert_eq!((m.stats().fetches, m.stats().writebacks), (1, 1));

    // KVM holds exactly the edit.
    let back = vmm::internal::vstate::vcpu::get_xsave(&vcpu, size).unwrap();
    assert_eq!(back.xmm(7), pattern);
    for r in (0..16).filter(|&r| r != 7) {
        assert_eq!(back.xmm(r), [0; 16], "xmm{r}");
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn images_outside_the_guest_xcr0_are_refused() {
    if !kvm_or_skip("images_outside_the_guest_xcr0_are_refused") {
        return;
    }
    let (_vm, vcpu, info, size) = vcpu();
    if !info.supported_xcr0().contains(Xfeature::Avx) {
        eprintln!("SKIPPED part: KVM has no AVX state to misuse");
        return;
    }
    let guest_xcr0 = XfeatureMask::LEGACY;
    let mut m = XstateManager::new(SyncPolicy::Lazy, info, guest_xcr0, size);
    // AVX marked live in a guest whose XCR0 is x87|SSE.
    let mut bad = XsaveBuf::init(&info, info.supported_xcr0(), InitMode::Minimal).unwrap();
    bad.set_xstate_bv(bad.xstate_bv() | Xfeature::Avx.bit());
    let err = m.replace_standard(&bad).unwrap_err().to_string();
    assert!(
        err.contains("0x3") && err.to_lowercase().contains("xstate_bv"),
        "{err}"
    );
    // A compacted image where KVM takes the standard format.
    let good = XsaveBuf::init(&info, guest_xcr0, InitMode::Minimal).unwrap();
    let compacted = xstate::compacted_in_use(&info, &good, guest_xcr0).unwrap();
    let err = m.replace_standard(&compacted).unwrap_err().to_string();
    assert!(
        err.contains("compacted") || err.contains("XCOMP_BV"),
        "{err}"
    );
    // Reserved MXCSR bits.
    let mut bad = good.clone();
    bad.set_mxcsr(0xffff_0000);
    assert!(m.replace_standard(&bad).is_err());
    // Nothing reached KVM.
    m.before_run(&vcpu).unwrap();
    assert_eq!(m.stats().writebacks, 0);
    let _ = vcpu;
}
