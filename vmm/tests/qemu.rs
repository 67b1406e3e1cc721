//! Interoperability: the very guest image `vmm` embeds boots under QEMU
//! (`-M microvm`, the PVH loader) and prints the same xstate report.

mod common;

use common::{guest_kernel_file, kvm_or_skip, qemu_microvm, qemu_or_skip, vmm};

/// The xstate lines of a guest serial report: what must not depend on the
/// VMM (command line, arena placement and timing lines are left out).
fn xstate_lines(serial: &str) -> Vec<String> {
    serial
        .lines()
        .filter(|l| {
            l.starts_with("guest: XCR0")
                || l.starts_with("guest: IA32_XSS")
                || l.starts_with("guest: variants")
                || l.starts_with("guest: standard size")
                || l.starts_with("guest:   ")
                || l.starts_with("guest: exit")
        })
        .map(str::to_string)
        .collect()
}

#[cfg_attr(any(no_kvm, no_qemu), ignore = "needs /dev/kvm and qemu-system-x86_64")]
#[test]
fn guest_boots_under_qemu_microvm_with_the_same_report() {
    if !kvm_or_skip("guest_boots_under_qemu_microvm_with_the_same_report")
        || !qemu_or_skip("guest_boots_under_qemu_microvm_with_the_same_report")
    {
        return;
    }
    let kernel = guest_kernel_file();
    let out = qemu_microvm("host")
        .args([
            "-m",
            "64",
            "-nographic",
            "-no-reboot",
            "-nodefaults",
            "-serial",
            "stdio",
        ])
        .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=4"])
        .args(["-append", "workload=none"])
        .arg("-kernel")
        .arg(&kernel)
        .output()
        .expect("cannot start QEMU");
    let _ = std::fs::remove_file(&kernel);
    let serial = String::from_utf8_lossy(&out.stdout);
    // isa-debug-exit: (status << 1) | 1, so a guest success is 1.
    assert_eq!(
        out.status.code(),
        Some(1),
        "QEMU run failed:\n{serial}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(serial.contains("guest: exit: success"), "{serial}");

    // The same image under vmm, printing its own serial report. QEMU gives
    // the guest everything KVM supports, so run vmm with the same mask.
    let ours = vmm(&["run", "--workload", "none", "--serial"]);
    assert!(
        ours.status.success(),
        "{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    let our_serial = String::from_utf8_lossy(&ours.stdout);
    let (a, b) = (xstate_lines(&serial), xstate_lines(&our_serial));
    assert!(
        a.len() >= 6,
        "too little of the report under QEMU:\n{serial}"
    );
    assert_eq!(a, b, "QEMU:\n{serial}\nvmm:\n{our_serial}");
}

/// The guest's serial record under QEMU (which has no report port): it
/// still ends QEMU with the debug-exit status after the peer-VMM shutdown
/// writes were added, and `vmm features` reads the record back with what
/// does not depend on the VMM equal to the binary report of a `vmm` run.
#[cfg_attr(any(no_kvm, no_qemu), ignore = "needs /dev/kvm and qemu-system-x86_64")]
#[test]
fn guest_record_under_qemu_reads_back_like_vmm_s_report() {
    let name = "guest_record_under_qemu_reads_back_like_vmm_s_report";
    if !kvm_or_skip(name) || !qemu_or_skip(name) {
        return;
    }
    let kernel = guest_kernel_file();
    let log = std::env::temp_dir().join(format!("vmm-qemu-serial-{}.log", std::process::id()));
    let out = common::qemu_microvm_to_log("host", "workload=none", &kernel, &log);
    let _ = std::fs::remove_file(&kernel);
    let serial = std::fs::read_to_string(&log).unwrap_or_default();
    // isa-debug-exit: (status << 1) | 1, so a guest success is 1.
    assert_eq!(
        out.status.code(),
        Some(1),
        "QEMU run failed:\n{serial}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(serial.matches("VMMREC1 ").count(), 1, "{serial}");

    let (o, f) = common::vmm_json(&["features", "--guest-log", log.to_str().unwrap()]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let (o, run) = common::vmm_json(&["run", "--workload", "none"]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let g = &f["columns"]["guest"];
    let cpuid = &run["guest_cpuid"];
    // QEMU -cpu host offers what KVM supports, as vmm does by default.
    assert_eq!(common::hex(&g["xcr0"]), common::hex(&run["guest_xcr0"]));
    assert_eq!(
        common::hex(&g["xcr0_supported"]),
        common::hex(&cpuid["xcr0_supported"])
    );
    for k in [
        "standard_size_max",
        "standard_size_enabled",
        "computed_standard_size",
        "computed_compacted_size",
    ] {
        assert_eq!(g[k], cpuid[k], "{k}");
    }

    // compare: the QEMU record beside a vmm run's record of the same guest.
    let ours = vmm(&["run", "--workload", "none", "--serial"]);
    assert!(ours.status.success(), "{}", common::stderr(&ours));
    let ours_log = common::temp_file("vmm-serial.log", &ours.stdout);
    let (o, c) = common::vmm_json(&[
        "features",
        "compare",
        log.to_str().unwrap(),
        ours_log.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert_eq!(c["guests"].as_array().unwrap().len(), 2);
    assert_eq!(c["hosts"][0]["xcr0"], c["hosts"][1]["xcr0"]);
    for comp in c["components"].as_array().unwrap() {
        assert_eq!(comp["present"][0], comp["present"][1], "{comp}");
        assert_eq!(comp["sizes_agree"], true, "{comp}");
        assert_eq!(comp["offsets_agree"], true, "{comp}");
    }
    // Same structure: the same strategies were measurable under both.
    let measured = |i: usize| -> Vec<bool> {
        c["guests"][i]["switch_cycles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| !p[1].is_null())
            .collect()
    };
    assert_eq!(measured(0), measured(1));
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&ours_log);
}
