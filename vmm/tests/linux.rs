//! A stock Linux guest: Debian's cloud kernel booted by `vmm run` on the
//! PC platform (in-kernel irqchip and PIT, COM1 on IRQ 4, the i8042
//! reset), its `x86/fpu:` lines compared with vmm's layout for each
//! policy.
//!
//! The kernel comes from `scripts/hw-kvm.sh`'s cache: `VMM_LINUX_DIR` (the
//! harness sets it) or `target/hw-kvm/linux`, made from the cached
//! package's `vmlinuz` by `scripts/linux_guest.py` when missing. Linux
//! boots only on a hardware-style KVM (kvm_amd, kvm_intel; the harness
//! runs this binary on kvm_amd): on kvm_pvm, which emulates every CPL0
//! instruction, the same command must end with the emulation failure
//! named, and that is what is tested there.

mod common;

use common::linux::{
    bzimage_args, check_boot, hw_kvm_or_skip, kernel_or_skip, linux_args, restore_linux,
    snapshotted, vmm_json_retrying,
};
use common::{hex, in_hw_kvm_harness, kvm_or_skip};

/// Boot Linux with `--xfeatures policy` and return the JSON report.
fn boot(kernel: &str, entry: &str, policy: &str) -> (std::process::Output, serde_json::Value) {
    let mut args = linux_args(kernel, &[]);
    if entry == "pvh" {
        args.extend(["--entry", "pvh"]);
    }
    if policy != "kvm" {
        args.extend(["--xfeatures", policy]);
    }
    vmm_json_retrying(&args, policy)
}

/// On a hardware-style KVM, Linux boots through PVH for each policy (0x3,
/// 0x7, the full XCR0 KVM offers and that less PKRU), prints its x86/fpu
/// lines, panics for want of a root and resets the machine: the run ends
/// with `reset` (exit status 70) and Linux's values agree with vmm's.
#[test]
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
fn linux_xstate_report_matches_vmm_for_each_policy() {
    let test = "linux_xstate_report_matches_vmm_for_each_policy";
    if !hw_kvm_or_skip(test) {
        return;
    }
    let Some(vmlinux) = kernel_or_skip(test, "vmlinux") else {
        return;
    };
    // The full XCR0 first: the other policies are derived from it.
    let t0 = std::time::Instant::now();
    let (out, full) = boot(&vmlinux, "pvh", "kvm");
    eprintln!(
        "linux boot (pvh, full xcr0) took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    check_boot(&out, &full, "kvm");
    let kvm = hex(&full["policy_xfeatures"]);
    let mut policies = vec![0x3u64, 0x7];
    if kvm & 0x200 != 0 {
        policies.push(kvm & !0x200);
    }
    policies.dedup();
    for p in policies.into_iter().filter(|&p| p != kvm) {
        let policy = format!("{p:#x}");
        let t0 = std::time::Instant::now();
        let (out, v) = boot(&vmlinux, "pvh", &policy);
        eprintln!(
            "linux boot (pvh, {policy}) took {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        check_boot(&out, &v, &policy);
    }
}

/// On kvm_pvm, which emulates every CPL0 instruction, Linux cannot boot:
/// the run must end, well before its time limit, with the emulation
/// failure named with its instruction bytes and where it was; never a
/// hang.
#[test]
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
fn linux_on_kvm_pvm_ends_with_the_emulation_failure() {
    let test = "linux_on_kvm_pvm_ends_with_the_emulation_failure";
    if !kvm_or_skip(test) {
        return;
    }
    if in_hw_kvm_harness() {
        common::skip(test, "kvm_amd boots Linux (the policy test runs instead)");
        return;
    }
    let Some(vmlinux) = kernel_or_skip(test, "vmlinux") else {
        return;
    };
    let (out, v) = boot(&vmlinux, "pvh", "kvm");
    if v["exit_reason"] == "reset" {
        common::skip(test, "this KVM boots Linux (a hardware-style KVM)");
        return;
    }
    let why = v["exit_description"].as_str().unwrap_or_default();
    assert_eq!(
        v["exit_reason"],
        "crashed",
        "{why}\n{}",
        common::stderr(&out)
    );
    assert!(
        why.contains("emulation failure") && why.contains("instruction bytes"),
        "{why}"
    );
    assert!(why.contains("at rip 0x"), "{why}");
}

/// Boot the bzImage with the initramfs on `vcpus` vCPUs under
/// `--xfeatures 0x3`; returns the output, the JSON report and the console
/// (on stderr with `--json`). Checks the boot ended with Linux's reset
/// and an oracle that agrees.
fn boot_initrd(test: &str, vcpus: &str) -> Option<(serde_json::Value, String)> {
    let (Some(bz), Some(initrd)) = (
        kernel_or_skip(test, "bzImage"),
        kernel_or_skip(test, "initrd.cpio"),
    ) else {
        return None;
    };
    let t0 = std::time::Instant::now();
    let what = format!("bzImage + initrd, {vcpus} vCPUs");
    let args = bzimage_args(
        &bz,
        &initrd,
        &["--vcpus", vcpus, "--serial", "--xfeatures", "0x3"],
    );
    let (out, v) = vmm_json_retrying(&args, &what);
    eprintln!(
        "linux boot ({what}) took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    check_boot(&out, &v, "0x3");
    assert_eq!(v["timing_ms"]["boot_entry"], "linux64");
    Some((v, common::stderr(&out)))
}

/// What the initrd's init printed after its second's sleep: the
/// `VMM-INITRD slept:` line and the next (grep's `ttyS` and `LOC` lines).
fn slept_lines(console: &str) -> String {
    let at = console
        .find("VMM-INITRD slept:")
        .unwrap_or_else(|| panic!("no line from the initrd's init after its sleep:\n{console}"));
    console[at..].lines().take(2).collect::<Vec<_>>().join("\n")
}

/// The line of the initrd's init that starts with `VMM-INITRD {what}`.
fn initrd_line<'a>(console: &'a str, what: &str) -> &'a str {
    let want = format!("VMM-INITRD {what}");
    console
        .lines()
        .find(|l| l.contains(&want))
        .unwrap_or_else(|| panic!("no {want:?} line from the initrd's init:\n{console}"))
}

/// The bzImage through the Linux boot protocol with `--initrd`, under
/// `--xfeatures 0x3`, with its local APIC on (no `nolapic`): Linux finds
/// the RSDP the zero page names, the IOAPIC in the MADT and COM1 in the
/// DSDT, and the initramfs (`RAMDISK:`); its `/init` prints
/// `/proc/cpuinfo`'s flags on its tty (COM1's transmit interrupt, GSI 4
/// through the IOAPIC), sleeps a second (the local APIC timer's
/// interrupts), prints again and reboots: the run ends with `reset`, the
/// oracle agrees, and the flags the policy hides are absent. Before the
/// ACPI tables, this kernel (no `CONFIG_X86_MPPARSE`) found no IOAPIC and
/// its interrupts stopped 1.6 s into the boot.
#[test]
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
fn linux_bzimage_boots_its_initrd_and_reboots() {
    let test = "linux_bzimage_boots_its_initrd_and_reboots";
    if !hw_kvm_or_skip(test) {
        return;
    }
    let Some((_, console)) = boot_initrd(test, "1") else {
        return;
    };
    for want in [
        "ACPI: RSDP 0x00000000000E0000",
        "IOAPIC[0]: apic_id 1, version 17, address 0xfec00000, GSI 0-23",
        "RAMDISK: [mem ",
        "Run /init as init process",
    ] {
        assert!(
            console.contains(want),
            "no {want:?} in the console:\n{console}"
        );
    }
    let flags = initrd_line(&console, "flags");
    let words: Vec<&str> = flags.split_whitespace().collect();
    assert!(words.contains(&"sse2"), "{flags}");
    for hidden in ["avx", "avx2", "fma", "f16c", "pku", "vaes"] {
        assert!(
            !words.contains(&hidden),
            "{hidden} shown under 0x3: {flags}"
        );
    }
    assert!(initrd_line(&console, "cpus").ends_with("cpus 1"));
    // After the second's sleep: COM1's interrupt through the IOAPIC, the
    // local timer's on the LAPIC.
    let slept = slept_lines(&console);
    assert!(
        slept.contains("IO-APIC") && slept.contains("ttyS") && slept.contains("LOC:"),
        "{slept}"
    );
    eprintln!("{flags}\n{slept}");
}

/// `--vcpus 2`: Linux finds both local APICs in the MADT, starts the AP
/// with INIT-SIPI through its LAPIC, and its init sees two CPUs; COM1,
/// driven from either CPU, is the one both vCPUs reach.
#[test]
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
fn linux_brings_up_both_vcpus() {
    let test = "linux_brings_up_both_vcpus";
    if !hw_kvm_or_skip(test) {
        return;
    }
    let Some((v, console)) = boot_initrd(test, "2") else {
        return;
    };
    assert!(
        console.contains("smp: Brought up 1 node, 2 CPUs"),
        "{console}"
    );
    assert!(
        initrd_line(&console, "cpus").ends_with("cpus 2"),
        "{console}"
    );
    assert!(slept_lines(&console).contains("LOC:"), "{console}");
    assert_eq!(v["smp"]["vcpus"].as_array().map(Vec::len), Some(2), "{v:#}");
    assert_eq!(v["smp"]["ap_start"], "init-sipi");
}

/// A minimal valid bzImage: protocol 2.15, 64-bit, 64 KiB of kernel
/// loaded at 1 MiB, initrds anywhere below 2 GiB, and `init_size` 32 MiB
/// from its preferred 16 MiB (so it needs RAM up to 0x3000000).
fn minimal_bzimage() -> Vec<u8> {
    let mut bz = vec![0u8; 5 * 512 + 0x1_0000];
    bz[0x1f1] = 4;
    bz[0x1f4..0x1f8].copy_from_slice(&(0x1_0000u32 / 16).to_le_bytes());
    bz[0x202..0x206].copy_from_slice(b"HdrS");
    bz[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
    bz[0x211] = 1;
    bz[0x214..0x218].copy_from_slice(&(1u32 << 20).to_le_bytes());
    bz[0x22c..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    bz[0x236] = 1;
    bz[0x258..0x260].copy_from_slice(&(16u64 << 20).to_le_bytes());
    bz[0x260..0x264].copy_from_slice(&(32u32 << 20).to_le_bytes());
    bz
}

/// Bad kernels and initrds are refused before any VM exists, naming the
/// fault: a file that is neither an ELF nor a bzImage, a truncated
/// bzImage, one too big for --mem, an initrd that does not fit.
#[test]
fn bad_bzimages_and_initrds_are_refused_naming_the_fault() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let bz = minimal_bzimage();
    let cases = [
        (
            write("junk", &[0x55; 4096]),
            None,
            "64",
            "nor a bzImage (no \"HdrS\" at 0x202)",
        ),
        (
            write("cut", &bz[..0x1000]),
            None,
            "64",
            "invalid bzImage: truncated: 4096 bytes",
        ),
        (
            write("bz", &bz),
            None,
            "40",
            "needs RAM up to 0x3000000 to decompress itself",
        ),
        (
            write("bz2", &bz),
            Some(write("big", &vec![0; 20 << 20])),
            "64",
            "bytes do not fit in guest RAM between the kernel's end 0x3000000",
        ),
    ];
    for (kernel, initrd, mem, want) in cases {
        let mut args = vec!["run", "--kernel", &kernel, "--mem", mem, "--no-native"];
        if let Some(i) = &initrd {
            args.extend(["--initrd", i.as_str()]);
        }
        let out = common::vmm(&args);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(64), "{kernel}: {err}");
        assert!(err.contains(want), "{kernel}: want {want:?} in {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// A stock Linux is snapshotted mid-boot (`--snapshot-after`, 3 s into
/// a 10-18 s boot under TCG) and restored in a new process, on one vCPU
/// and on two: the file holds the PC (the IOAPIC and PICs, the PIT, the
/// KVM clock, each vCPU's LAPIC, COM1 with its IRQ), and the restored
/// Linux finishes its boot: its init prints through the tty (COM1's
/// interrupt), sleeps a second on its timer's interrupts and reboots; the
/// restored run ends with `reset` (status 70) and Linux's x86/fpu lines,
/// from before the snapshot, still agree with vmm's layout.
#[test]
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
fn a_linux_guest_snapshotted_mid_boot_finishes_in_a_new_process() {
    let test = "a_linux_guest_snapshotted_mid_boot_finishes_in_a_new_process";
    if !hw_kvm_or_skip(test) {
        return;
    }
    let (Some(bz), Some(initrd)) = (
        kernel_or_skip(test, "bzImage"),
        kernel_or_skip(test, "initrd.cpio"),
    ) else {
        return;
    };
    for vcpus in ["1", "2"] {
        let dir = tempfile::tempdir().unwrap();
        let snap = dir.path().join("linux.snap");
        let snap = snap.to_str().unwrap();
        let t0 = std::time::Instant::now();
        let what = format!("{vcpus} vCPUs");
        let args = bzimage_args(
            &bz,
            &initrd,
            &[
                "--vcpus",
                vcpus,
                "--xfeatures",
                "0x3",
                "--snapshot-file",
                snap,
                "--snapshot-after",
                "3",
            ],
        );
        // A triple fault before the snapshot writes no file: the boot
        // runs again as every other Linux boot of the tests does.
        let (out, v) = vmm_json_retrying(&args, &what);
        let (before, info) = snapshotted(&what, &out, &v, snap);
        let to_snapshot = t0.elapsed().as_secs_f64();
        assert!(
            !before.contains("VMM-INITRD"),
            "{what}: the boot reached its init before the snapshot:\n{before}"
        );
        let names = common::section_names(&info);
        for want in ["irqchip.ioapic", "pit", "clock", "vcpu0.lapic"] {
            assert!(names.contains(&want), "{what}: no {want} in {names:?}");
        }
        let (out, v, after, restored) = restore_linux(snap);
        eprintln!("{what}: boot to the snapshot {to_snapshot:.1} s, restored run {restored:.1} s");
        check_boot(&out, &v, "0x3");
        assert!(
            initrd_line(&after, "cpus").ends_with(&format!("cpus {vcpus}")),
            "{after}"
        );
        let slept = slept_lines(&after);
        assert!(
            slept.contains("ttyS") && slept.contains("LOC:"),
            "{vcpus} vCPUs: {slept}"
        );
    }
}
