//! End-to-end tests of `vmm run`: boot the embedded guest on KVM with
//! different policies, and refuse bad input before any VM exists.

mod common;

use common::{hex, kvm_or_skip, stderr, temp_file, tiny_pvh_elf, vmm, vmm_json};
use serde_json::Value;

/// The guest's XCR0 equals the policy, and its CPUID 0xD view equals the
/// xstate crate's layout for that policy.
fn boot_with(mask: Option<&str>, expect_xcr0: Option<u64>) -> Value {
    let mut args = vec!["run", "--workload", "none"];
    if let Some(m) = mask {
        args.extend(["--xfeatures", m]);
    }
    let (out, v) = vmm_json(&args);
    assert!(
        out.status.success(),
        "vmm {args:?} failed: {:?}\n{v:#}\n{}",
        out.status,
        stderr(&out)
    );
    assert_eq!(v["exit_status"], 0, "{v:#}");
    assert_eq!(v["exit_reason"], "exited");
    let policy = hex(&v["policy_xfeatures"]);
    assert_eq!(
        hex(&v["guest_xcr0"]),
        policy,
        "guest XCR0 must equal the policy mask"
    );
    if let Some(x) = expect_xcr0 {
        assert_eq!(policy, x);
    }
    assert_eq!(hex(&v["final_xcr0"]), policy, "KVM's XCR0 at the end");
    let c = &v["guest_cpuid"];
    // The guest sees the table KVM holds. Hardware KVM keeps the policy's
    // leaf 0xD; kvm_pvm answers from the host, and the VMM says so.
    assert_eq!(
        c["xcr0_supported"], v["kvm_cpuid_xfeatures"],
        "CPUID 0xD.0 EDX:EAX"
    );
    assert_eq!(
        c["standard_size_max"], v["kvm_cpuid_standard_size"],
        "CPUID 0xD.0 ECX"
    );
    if v["kvm_cpuid_honored"] == true {
        assert_eq!(hex(&c["xcr0_supported"]), policy);
        // 0xD.0 ECX is computed by the VMM with the xstate crate.
        assert_eq!(
            c["standard_size_max"], v["standard_size"],
            "CPUID 0xD.0 ECX"
        );
    }
    // Whoever built the table, it agrees with the xstate crate's layout.
    let info = kvm_xsave_info();
    let seen = xstate::XfeatureMask::from_bits(hex(&c["xcr0_supported"]));
    assert_eq!(
        c["standard_size_max"],
        info.standard_size(seen).unwrap(),
        "CPUID 0xD.0 ECX vs xstate layout of {seen:#x}"
    );
    // KVM computes 0xD.0 EBX for the XCR0 in force: the policy.
    assert_eq!(
        c["standard_size_enabled"], v["standard_size"],
        "CPUID 0xD.0 EBX"
    );
    // The guest's own computation with the no_std xstate core agrees,
    // offsets included.
    assert_eq!(c["computed_standard_size"], v["standard_size"]);
    let mask = xstate::XfeatureMask::from_bits(policy);
    let layout = info.layout(mask, xstate::Format::Compacted).unwrap();
    assert_eq!(c["computed_compacted_size"], layout.total_size());
    for comp in c["components"].as_array().unwrap() {
        let f = xstate::Xfeature::from_index(comp["id"].as_u64().unwrap() as u32).unwrap();
        let std_off = info.component(f).map(|i| i.standard_offset);
        if f.index() >= 2 {
            assert_eq!(
                comp["standard_offset"].as_u64().map(|o| o as u32),
                std_off,
                "{f:?}"
            );
        }
        assert_eq!(
            comp["compacted_offset"].as_u64().map(|o| o as u32),
            layout.offset(f),
            "compacted offset of {f:?}"
        );
    }
    v
}

/// Leaf 0xD of KVM's supported CPUID, through the xstate crate.
fn kvm_xsave_info() -> xstate::XsaveInfo {
    let kvm = kvm_ioctls::Kvm::new().unwrap();
    let cpuid = kvm
        .get_supported_cpuid(kvm_bindings::KVM_MAX_CPUID_ENTRIES)
        .unwrap();
    xstate::XsaveInfo::from_kvm_cpuid(&cpuid).unwrap()
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn boots_with_full_kvm_mask() {
    if !kvm_or_skip("boots_with_full_kvm_mask") {
        return;
    }
    let v = boot_with(None, None);
    assert_eq!(v["policy_xfeatures"], v["kvm_xfeatures"]);
    assert_eq!(v["init_xstate"], "minimal");
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn boots_with_x87_sse_only() {
    if !kvm_or_skip("boots_with_x87_sse_only") {
        return;
    }
    let v = boot_with(Some("x87,sse"), Some(0x3));
    assert_eq!(v["standard_size"], 576);
    // Every flag whose state is masked is hidden from the guest.
    let hidden: Vec<&str> = v["hidden_cpuid_flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    // ... where KVM offered it (kvm_pvm's supported table has no AVX flag).
    let kvm = kvm_ioctls::Kvm::new().unwrap();
    let supported = kvm
        .get_supported_cpuid(kvm_bindings::KVM_MAX_CPUID_ENTRIES)
        .unwrap();
    let offers_avx = supported
        .as_slice()
        .iter()
        .any(|e| e.function == 1 && e.ecx & (1 << 28) != 0);
    assert_eq!(hidden.contains(&"avx"), offers_avx, "{hidden:?}");
    // Where KVM ignores the table the VMM says what leaks through.
    if v["kvm_cpuid_honored"] == false {
        assert!(!v["exposed_despite_policy"].as_array().unwrap().is_empty() || !offers_avx);
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn boots_with_hex_mask_0x7() {
    if !kvm_or_skip("boots_with_hex_mask_0x7") {
        return;
    }
    let (out, v) = vmm_json(&["run", "--workload", "none", "--xfeatures", "host"]);
    assert!(out.status.success(), "{v:#}");
    if hex(&v["kvm_xfeatures"]) & 0x7 == 0x7 {
        let v = boot_with(Some("0x7"), Some(0x7));
        assert_eq!(v["standard_size"], 832);
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn invalid_masks_fail_before_boot() {
    if !kvm_or_skip("invalid_masks_fail_before_boot") {
        return;
    }
    for (mask, needle) in [
        ("0x5", "sse"),
        ("x87,sse,bogus", "bogus"),
        ("0x2", "x87"),
        ("avx512,-avx", "contradictory"),
        ("-x87", "x87"),
    ] {
        let out = vmm(&["run", "--xfeatures", mask]);
        let err = stderr(&out);
        // Refused for what it is, on every host: a usage error.
        assert_eq!(out.status.code(), Some(68), "{mask}: {err}");
        assert!(err.contains("--xfeatures"), "{mask}: {err}");
        assert!(err.to_lowercase().contains(needle), "{mask}: {err}");
        assert!(out.stdout.is_empty(), "no guest may run for {mask}");
    }
    // A bit KVM lacks: some component above what it supports.
    let (_, v) = vmm_json(&["run", "--workload", "none"]);
    let kvm = hex(&v["kvm_xfeatures"]);
    let missing = [0x2e7u64, 0x602e7, 0x207]
        .into_iter()
        .find(|m| m & !kvm != 0);
    if let Some(m) = missing {
        let out = vmm(&["run", "--xfeatures", &format!("{m:#x}")]);
        assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
        assert!(stderr(&out).contains("support"), "{}", stderr(&out));
    }
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn broken_images_are_refused() {
    if !kvm_or_skip("broken_images_are_refused") {
        return;
    }
    let good = tiny_pvh_elf(&[0xf4], true);
    let truncated = temp_file("truncated.elf", &vmm::GUEST_KERNEL[..200]);
    let no_note = temp_file("nonote.elf", &tiny_pvh_elf(&[0xf4], false));
    let not_elf = temp_file("notelf.bin", b"MZ this is not an ELF");
    let cut = temp_file("cut.elf", &good[..good.len() - 3]);
    for (path, needle) in [
        (&truncated, "ELF"),
        (&no_note, "PVH"),
        (&not_elf, "not an ELF"),
        (&cut, "ELF"),
    ] {
        let out = vmm(&["run", "--kernel", path.to_str().unwrap()]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(64), "{}: {err}", path.display());
        assert!(err.contains(needle), "{}: {err}", path.display());
        let _ = std::fs::remove_file(path);
    }
    let missing = vmm(&["run", "--kernel", "/nonexistent/kernel.elf"]);
    assert_eq!(missing.status.code(), Some(64));
    assert!(stderr(&missing).contains("/nonexistent/kernel.elf"));
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn triple_fault_is_reported_with_registers() {
    if !kvm_or_skip("triple_fault_is_reported_with_registers") {
        return;
    }
    // ud2 with an empty IDT: #UD -> #DF -> shutdown.
    let path = temp_file("ud2.elf", &tiny_pvh_elf(&[0x0f, 0x0b], true));
    let (out, v) = vmm_json(&["run", "--kernel", path.to_str().unwrap(), "--timeout", "20"]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(65), "{v:#}");
    assert_eq!(v["exit_reason"], "crashed");
    let reason = v["crash"]["reason"].as_str().unwrap();
    assert!(reason.contains("triple"), "{reason}");
    assert!(v["crash"]["registers"]["regs"]["rip"].is_u64());

    // The table says the same.
    let path = temp_file("ud2b.elf", &tiny_pvh_elf(&[0x0f, 0x0b], true));
    let out = vmm(&["run", "--kernel", path.to_str().unwrap(), "--timeout", "20"]);
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(65));
    assert!(
        text.contains("triple-faulted") && text.contains("rip"),
        "{text}"
    );
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn halting_guest_ends_the_run() {
    if !kvm_or_skip("halting_guest_ends_the_run") {
        return;
    }
    let path = temp_file("hlt.elf", &tiny_pvh_elf(&[0xf4], true));
    let (out, v) = vmm_json(&["run", "--kernel", path.to_str().unwrap(), "--timeout", "20"]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(65), "{v:#}");
    assert!(v["crash"]["reason"].as_str().unwrap().contains("HLT"));
}

/// Several vCPUs have LAPICs, where a HLT stays in KVM. `cli; hlt` on the
/// boot vCPU with the AP never started is a run nothing can go on with:
/// the halt watch names both waits; so is `sti; hlt` with no timer armed
/// and no device (it ran to the timeout before). Halts that something
/// could still end are left to the timeout: LINT1 unmasked in NMI mode
/// with interrupts off, or the LAPIC timer counting with them on.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn only_a_halt_nothing_can_end_is_ended_by_the_watch() {
    if !kvm_or_skip("only_a_halt_nothing_can_end_is_ended_by_the_watch") {
        return;
    }
    // `timeout`: seconds; the watch needs two rounds of 0.5 s, the runs
    // that must not be judged last the whole timeout.
    let run_for = |timeout: &str, name: &str, code: &[u8]| {
        let path = temp_file(name, &tiny_pvh_elf(code, true));
        let args = ["run", "--kernel", path.to_str().unwrap(), "--vcpus", "2"];
        let (out, v) = vmm_json(&[&args[..], &["--timeout", timeout]].concat());
        let _ = std::fs::remove_file(&path);
        (out.status.code(), v)
    };
    let run = |name: &str, code: &[u8]| run_for("3", name, code);
    // cli; hlt
    let (code, v) = run_for("60", "cli-hlt.elf", &[0xfa, 0xf4]);
    assert_eq!(code, Some(vmm::report::EXIT_GUEST_CRASH), "{v:#}");
    let reason = v["crash"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("vCPU 0 halted with interrupts disabled (HLT, to resume at rip 0x100002)")
            && reason.contains("vCPU 1 waits for INIT-SIPI"),
        "{reason}"
    );
    // sti; hlt: nothing is armed to send an interrupt.
    let (code, v) = run_for("60", "sti-hlt.elf", &[0xfb, 0xf4]);
    assert_eq!(code, Some(vmm::report::EXIT_GUEST_CRASH), "{v:#}");
    let reason = v["crash"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(
            "vCPU 0 halted with interrupts enabled and none due (HLT, to resume at rip 0x100002)"
        ) && reason.contains("no LAPIC timer armed"),
        "{reason}"
    );
    // The LAPIC enabled, its timer one-shot (vector 0x40, divide by 128)
    // from 0xffffffff, about 550 s at KVM's 1 GHz bus: an interrupt is
    // due, so `sti; hlt` is left to the timeout.
    let mut code = vec![0xc7, 0x05, 0xf0, 0x00, 0xe0, 0xfe, 0xff, 0x01, 0x00, 0x00];
    code.extend_from_slice(&[0xc7, 0x05, 0xe0, 0x03, 0xe0, 0xfe, 0x0a, 0x00, 0x00, 0x00]);
    code.extend_from_slice(&[0xc7, 0x05, 0x20, 0x03, 0xe0, 0xfe, 0x40, 0x00, 0x00, 0x00]);
    code.extend_from_slice(&[0xc7, 0x05, 0x80, 0x03, 0xe0, 0xfe, 0xff, 0xff, 0xff, 0xff]);
    code.extend_from_slice(&[0xfb, 0xf4]);
    let (code, v) = run("timer-hlt.elf", &code);
    assert_eq!(code, Some(vmm::report::EXIT_TIMEOUT), "{v:#}");
    // The LAPIC enabled (SVR 0x1ff), LINT1 unmasked in NMI mode, then
    // cli; hlt: an NMI may still come (32-bit code, paging off).
    let mut code = vec![0xc7, 0x05, 0xf0, 0x00, 0xe0, 0xfe, 0xff, 0x01, 0x00, 0x00];
    code.extend_from_slice(&[0xc7, 0x05, 0x60, 0x03, 0xe0, 0xfe, 0x00, 0x04, 0x00, 0x00]);
    code.extend_from_slice(&[0xfa, 0xf4]);
    let (code, v) = run("nmi-hlt.elf", &code);
    assert_eq!(code, Some(vmm::report::EXIT_TIMEOUT), "{v:#}");
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn runaway_guest_times_out() {
    if !kvm_or_skip("runaway_guest_times_out") {
        return;
    }
    // jmp $ : spins forever.
    let path = temp_file("spin.elf", &tiny_pvh_elf(&[0xeb, 0xfe], true));
    let (out, v) = vmm_json(&["run", "--kernel", path.to_str().unwrap(), "--timeout", "1"]);
    assert_eq!(out.status.code(), Some(66), "{v:#}");
    assert_eq!(v["exit_reason"], "timed_out");
    // Where it was: the `jmp $` at the PVH entry, 1 MiB, in 32-bit
    // protected mode without paging.
    let at = &v["stopped_at"];
    assert_eq!(at["regs"]["rip"], 0x10_0000, "{v:#}");
    assert_eq!(
        at["sregs"]["cr0"].as_u64().unwrap() & 0x8000_0001,
        1,
        "{v:#}"
    );
    assert!(v["crash"].is_null(), "a stop is not a crash: {v:#}");
    let out = vmm(&["run", "--kernel", path.to_str().unwrap(), "--timeout", "1"]);
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("guest stopped by --timeout at:\n  rip 0x0000000000100000"),
        "{text}"
    );
}

/// An SMP guest that hangs: `--timeout` reports where every vCPU was,
/// not only the boot CPU (a CPU spinning while another waits is what an
/// SMP hang looks like).
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn runaway_smp_guest_reports_every_vcpu() {
    if !kvm_or_skip("runaway_smp_guest_reports_every_vcpu") {
        return;
    }
    let path = temp_file("spin2.elf", &tiny_pvh_elf(&[0xeb, 0xfe], true));
    let args = [
        "run",
        "--kernel",
        path.to_str().unwrap(),
        "--vcpus",
        "2",
        "--timeout",
        "1",
    ];
    let (out, v) = vmm_json(&args);
    assert_eq!(out.status.code(), Some(66), "{v:#}");
    let vcpus = v["smp"]["vcpus"].as_array().expect("an SMP section");
    assert_eq!(vcpus.len(), 2, "{v:#}");
    // The boot CPU at its `jmp $`; the AP never got its SIPI, so it is
    // where a CPU comes out of INIT: the reset vector's offset.
    assert_eq!(vcpus[0]["stopped_at"]["regs"]["rip"], 0x10_0000, "{v:#}");
    assert_eq!(vcpus[0]["stopped_at"], v["stopped_at"], "{v:#}");
    assert_eq!(vcpus[1]["stopped_at"]["regs"]["rip"], 0xfff0, "{v:#}");
    // The table says the same for the AP.
    let out = vmm(&args);
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("vCPU 1 stopped by --timeout at:\n  rip 0x000000000000fff0"),
        "{text}"
    );
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn exit_status_mirrors_the_guest() {
    if !kvm_or_skip("exit_status_mirrors_the_guest") {
        return;
    }
    // 32-bit: mov eax, 7; out 0xf4, eax
    let code = [0xb8, 7, 0, 0, 0, 0xe7, 0xf4];
    let path = temp_file("exit7.elf", &tiny_pvh_elf(&code, true));
    let (out, v) = vmm_json(&["run", "--kernel", path.to_str().unwrap(), "--timeout", "20"]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(7), "{v:#}");
    assert_eq!(v["exit_status"], 7);
    assert!(v["guest_xcr0"].is_null(), "no report was handed over");
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn bad_report_address_is_refused_not_trusted() {
    if !kvm_or_skip("bad_report_address_is_refused_not_trusted") {
        return;
    }
    // 32-bit: mov eax, 0xfffffff0; out 0xf8, eax; xor eax, eax; out 0xf4, eax
    let code = [
        0xb8, 0xf0, 0xff, 0xff, 0xff, 0xe7, 0xf8, 0x31, 0xc0, 0xe7, 0xf4,
    ];
    let path = temp_file("badreport.elf", &tiny_pvh_elf(&code, true));
    let (out, v) = vmm_json(&["run", "--kernel", path.to_str().unwrap(), "--timeout", "20"]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(0), "{v:#}");
    let errors = v["report_errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{v:#}");
    assert!(errors[0].as_str().unwrap().contains("0xfffffff0"), "{v:#}");
    assert!(v["guest_xcr0"].is_null());
}

#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn guest_exceptions_are_caught_and_reported() {
    if !kvm_or_skip("guest_exceptions_are_caught_and_reported") {
        return;
    }
    // The guest kernel catches a CPL3 exception, reports vector and RIP,
    // and ends the run with status 2 (no triple fault).
    for (kind, vector, mnemonic) in [
        ("ud", 6, "#UD"),
        ("de", 0, "#DE"),
        ("pf", 14, "#PF"),
        ("gp", 13, "#GP"),
    ] {
        let (out, v) = vmm_json(&[
            "run",
            "--workload",
            "none",
            "--cmdline",
            &format!("fault={kind}"),
        ]);
        assert_eq!(out.status.code(), Some(2), "{kind}: {v:#}");
        assert_eq!(v["exit_status"], 2);
        assert_eq!(v["exit_reason"], "exited");
        let f = &v["fault"];
        assert_eq!(f["vector"], vector, "{kind}: {v:#}");
        assert_eq!(f["mnemonic"], mnemonic);
        assert_eq!(f["cpl"], 3);
        assert!(hex(&f["rip"]) >= 0x10_0000, "{f}");
        if kind == "pf" {
            assert!(hex(&f["cr2"]) < 0x1000, "{f}");
        }
    }
}

/// The VMM's policy word survives the longest command line it accepts: the
/// guest keeps XCR0 inside `--xfeatures 0x3` (on kvm_pvm, which ignores the
/// CPUID table, only that word limits it). Appended last and cut by the
/// guest, it was lost and the run ended with status 67 (issue 37 §5).
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn the_policy_word_survives_the_longest_command_line() {
    if !kvm_or_skip("the_policy_word_survives_the_longest_command_line") {
        return;
    }
    let room = guest::protocol::CMDLINE_MAX - guest::protocol::VMM_WORDS_MAX;
    // What vmm adds before the user's words: "quiet workload=none ".
    let user = "w".repeat(room - "quiet workload=none ".len());
    let (out, v) = vmm_json(&[
        "run",
        "--workload",
        "none",
        "--no-native",
        "--xfeatures",
        "0x3",
        "--cmdline",
        &user,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert_eq!(
        hex(&v["final_xcr0"]) & !0x3,
        0,
        "XCR0 stays inside 0x3: {v:#}"
    );
}
