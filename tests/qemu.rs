//! Interoperability: the very guest image `vmm` embeds boots under QEMU
//! (`-M microvm`, the PVH loader) and prints the same xstate report.

mod common;

use std::process::Command;

use common::{guest_kernel_file, kvm_or_skip, vmm};

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

fn qemu_available(test: &str) -> bool {
    let ok = Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        if std::env::var("VMM_REQUIRE_KVM").as_deref() == Ok("1") {
            panic!("{test}: qemu-system-x86_64 is missing (.ci/run installs qemu-system-x86)");
        }
        eprintln!("SKIPPED {test}: qemu-system-x86_64 is not installed");
    }
    ok
}

#[test]
fn guest_boots_under_qemu_microvm_with_the_same_report() {
    if !kvm_or_skip("guest_boots_under_qemu_microvm_with_the_same_report")
        || !qemu_available("guest_boots_under_qemu_microvm_with_the_same_report")
    {
        return;
    }
    let kernel = guest_kernel_file();
    let out = Command::new("qemu-system-x86_64")
        .args([
            "-M",
            "microvm",
            "-enable-kvm",
            "-cpu",
            "host,arch-capabilities=off",
        ])
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
