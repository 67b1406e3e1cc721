//! Dynamic xfeatures (AMX) end to end. What each test expects is derived
//! from this host at run time, never assumed:
//!
//! - where the CPU has AMX (CPUID.7.0:EDX AMX-TILE and AMX-INT8, leaf 0xD
//!   XTILEDATA) and the kernel lets guests have it, `--xfeatures amx` boots
//!   and the guest's tile product passes its known-answer check;
//! - elsewhere (this project's CI host, an AMD EPYC without AMX) the same
//!   command must end with status 64 and the named permission error, and
//!   the tile rows say why they are not available.
//!
//! The tile instructions themselves therefore only execute on AMX hosts;
//! the tests say so on stderr where they do not.

mod common;

use common::{kvm_or_skip, rows_named, vmm, vmm_json};
use vmm::snapshot::format::Container;
use xstate::{Xfeature, XsaveInfo};

/// Whether this CPU has what the AMX workload needs: CPUID.7.0:EDX
/// AMX-TILE and AMX-INT8, and XTILEDATA in leaf 0xD.
fn cpu_has_amx() -> bool {
    let edx = guest::workloads::amx::cpuid7_edx();
    let tiles =
        guest::workloads::amx::CPUID7_EDX_AMX_TILE | guest::workloads::amx::CPUID7_EDX_AMX_INT8;
    edx & tiles == tiles
        && XsaveInfo::host().is_ok_and(|i| i.supported_xcr0().contains(Xfeature::XtileData))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn xfeatures_amx_is_granted_or_refused_by_name() {
    if !kvm_or_skip("xfeatures_amx_is_granted_or_refused_by_name") {
        return;
    }
    let args = [
        "run",
        "--xfeatures",
        "amx",
        "--workload",
        "amx",
        "--no-native",
        "--timeout",
        "120",
    ];
    // Where the CPU has AMX the kernel may still refuse (older than 5.17):
    // ask it the way vmm does, in this process, to know which to expect.
    let granted = cpu_has_amx()
        && matches!(
            vmm::internal::arch::amx::permit_guest(Some("amx")),
            Ok(vmm::internal::arch::amx::Permit::Granted(_))
        );
    if granted {
        let (out, v) = vmm_json(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let xcr0 = u64::from_str_radix(
            v["guest_xcr0"].as_str().unwrap().trim_start_matches("0x"),
            16,
        )
        .unwrap();
        assert_eq!(xcr0 & 0x60000, 0x60000, "guest XCR0 {xcr0:#x}");
        let rows = rows_named(&v, "amx-int8");
        assert_eq!(rows.len(), 1, "{v}");
        assert_eq!(
            rows[0]["check"], "pass",
            "the tile product's known answer: {v}"
        );
    } else {
        eprintln!(
            "this host cannot give guests AMX (CPU has AMX: {}): expecting the named refusal; \
             no tile instruction runs here",
            cpu_has_amx()
        );
        let out = vmm(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{err}");
        assert!(
            err.starts_with(
                "vmm: dynamic xfeature: AMX tile data TMM0-7 (xfeature 18) for the guest: \
                 arch_prctl(ARCH_REQ_XCOMP_GUEST_PERM, 18) failed: E"
            ),
            "{err}"
        );
        assert!(err.contains("(os error "), "the errno is named: {err}");
        if !cpu_has_amx() {
            assert!(err.contains("this host's CPU lacks it"), "{err}");
        }
        assert!(err.contains("\nhint: leave AMX out"), "{err}");
        assert!(out.stdout.is_empty(), "nothing ran: {}", text(&out.stdout));
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn amx_workload_row_says_why_it_cannot_run() {
    if !kvm_or_skip("amx_workload_row_says_why_it_cannot_run") {
        return;
    }
    // The default policy: AMX only where the host can give it.
    let (out, v) = vmm_json(&[
        "run",
        "--workload",
        "amx",
        "--no-native",
        "--timeout",
        "120",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let xcr0 = u64::from_str_radix(
        v["guest_xcr0"].as_str().unwrap().trim_start_matches("0x"),
        16,
    )
    .unwrap();
    let skipped: Vec<_> = v["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "amx-int8")
        .collect();
    if xcr0 & 0x60000 == 0x60000 {
        assert!(skipped.is_empty(), "{v}");
        let rows = rows_named(&v, "amx-int8");
        assert_eq!(rows.len(), 1, "{v}");
        assert_eq!(rows[0]["check"], "pass", "{v}");
    } else {
        eprintln!("guest XCR0 {xcr0:#x} has no AMX here: the row must say why");
        assert!(rows_named(&v, "amx-int8").is_empty(), "{v}");
        assert_eq!(skipped.len(), 1, "{v}");
        let reason = skipped[0]["reason"].as_str().unwrap();
        assert!(reason.starts_with("not available: "), "{reason}");
        // The reason is the guest's CPUID or, with AMX in CPUID, its XCR0.
        let xcr0_reason =
            format!("not available: XCR0 {xcr0:#x} lacks XTILECFG|XTILEDATA (0x60000)");
        assert!(
            reason == "not available: CPUID.7.0:EDX lacks AMX-TILE (bit 24)"
                || reason == "not available: CPUID.7.0:EDX lacks AMX-INT8 (bit 25)"
                || reason == xcr0_reason,
            "{reason}"
        );
        if !cpu_has_amx() {
            // KVM offers no AMX-TILE to a guest on a CPU without it.
            assert_eq!(
                reason, "not available: CPUID.7.0:EDX lacks AMX-TILE (bit 24)",
                "{v}"
            );
        }
    }
}

/// A snapshot carries the XFD MSRs exactly where this KVM lists them, and
/// restores either way.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn xfd_section_follows_the_host() {
    if !kvm_or_skip("xfd_section_follows_the_host") {
        return;
    }
    let kvm = kvm_ioctls::Kvm::new().expect("KVM opens");
    let listed = kvm.get_msr_index_list().expect("KVM_GET_MSR_INDEX_LIST");
    let has_xfd = vmm::internal::vstate::xfd::supported(listed.as_slice());
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("xfd.snap");
    let snap_s = snap.to_str().unwrap();
    let out = vmm(&common::snapshot_check_args(snap_s));
    assert!(snap.is_file(), "no snapshot: {}", text(&out.stderr));
    let c = Container::parse(&std::fs::read(&snap).unwrap()).unwrap();
    assert_eq!(
        c.get("vcpu0.xfd").is_some(),
        has_xfd,
        "vcpu0.xfd is written exactly where KVM lists IA32_XFD and IA32_XFD_ERR"
    );
    if !has_xfd {
        eprintln!("this KVM has no XFD MSRs: the section is absent, as checked");
    }
    let (out, info) = vmm_json(&["snapshot", "info", snap_s]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let vcpu = &info["vcpus"][0];
    assert_eq!(vcpu["ia32_xfd"].is_string(), has_xfd, "{info}");
    assert_eq!(vcpu["ia32_xfd_err"].is_string(), has_xfd, "{info}");
    let (out, v) = vmm_json(&["restore", snap_s, "--no-native", "--timeout", "60"]);
    assert_eq!(v["exit_status"], 0, "{v}\n{}", text(&out.stderr));
}
