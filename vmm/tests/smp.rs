//! `vmm run --vcpus N`: the APs start (INIT-SIPI-SIPI), each CPU reports its
//! own XCR0, an AP's exception ends the run naming that vCPU, bad counts are
//! refused by name, and the same guest runs SMP under QEMU.

mod common;

/// `--vcpus 2`: both CPUs report; CPU 1 runs the XCR0 its
/// `xfeatures.cpu1=0x3` asks for, CPU 0 the policy (KVM's mask by default).
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn two_vcpus_boot_and_report_their_own_xcr0() {
    if !common::kvm_or_skip("two_vcpus_boot_and_report_their_own_xcr0") {
        return;
    }
    let (out, v) =
        common::run_bare_json("120", &["--vcpus", "2", "--cmdline", "xfeatures.cpu1=0x3"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let policy = common::hex(&v["policy_xfeatures"]);
    let smp = &v["smp"];
    assert_eq!(smp["ap_start"], "init-sipi");
    assert_eq!(smp["ended_by"], 0);
    let vcpus = smp["vcpus"].as_array().unwrap();
    assert_eq!(vcpus.len(), 2);
    assert_eq!(vcpus[0]["index"], 0);
    assert_eq!(common::hex(&vcpus[0]["guest_xcr0"]), policy);
    assert_eq!(common::hex(&vcpus[0]["final_xcr0"]), policy);
    assert_eq!(vcpus[1]["index"], 1);
    assert_eq!(common::hex(&vcpus[1]["guest_xcr0"]), 0x3);
    assert_eq!(common::hex(&vcpus[1]["final_xcr0"]), 0x3);
    assert_eq!(vcpus[1]["end"], "stopped");
    // The totals stay where they were: vCPU 0's XCR0 and the summed exits.
    assert_eq!(common::hex(&v["guest_xcr0"]), policy);
    let sum: u64 = vcpus.iter().map(|c| c["exits"].as_u64().unwrap()).sum();
    assert_eq!(v["exits"].as_u64().unwrap(), sum);
}

/// `smp.vcpus[].phases` (the SMP path's breakdown) is there for every
/// vCPU and in the order the start-up implies: each thread starts before
/// its first return from KVM_RUN and leaves after it; the AP's first
/// return (INIT reached it) comes before the boot processor leaves (the
/// BSP waits for the AP's report), and the AP, parked, leaves only after
/// the BSP ended the run and it was kicked; no thread starts before setup
/// ended.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn the_smp_phases_are_reported_in_start_up_order() {
    if !common::kvm_or_skip("the_smp_phases_are_reported_in_start_up_order") {
        return;
    }
    let (out, v) = common::run_bare_json("120", &["--vcpus", "2"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let setup = v["timing_ms"]["setup"].as_f64().unwrap();
    let vcpus = v["smp"]["vcpus"].as_array().unwrap();
    assert_eq!(vcpus.len(), 2);
    let phase = |i: usize, name: &str| vcpus[i]["phases"][name].as_f64().unwrap();
    for i in 0..2 {
        let (start, first, left) = (
            phase(i, "thread_start_ms"),
            phase(i, "first_exit_ms"),
            phase(i, "left_ms"),
        );
        assert!(setup <= start, "vCPU {i}: {v}");
        assert!(start <= first && first <= left, "vCPU {i}: {v}");
    }
    assert_eq!(v["smp"]["ended_by"], 0);
    assert_eq!(vcpus[1]["end"], "stopped");
    assert!(phase(1, "first_exit_ms") <= phase(0, "left_ms"), "{v}");
    assert!(phase(0, "left_ms") <= phase(1, "left_ms"), "{v}");
    // Quiet (no --serial): the guest leaves the per-CPU lines to the VMM
    // (each serial byte is an exit); the vCPUs' reports carry them.
    let err = common::stderr(&out);
    assert!(!err.contains("guest: cpu"), "{err}");
    assert_eq!(
        common::hex(&vcpus[1]["guest_xcr0"]),
        common::hex(&v["policy_xfeatures"])
    );
}

/// No `cpus=` word (the VMM passes none): the guest counts its CPUs in the
/// MP table the VMM wrote and starts both; a `cpus=1` word still overrides
/// the table.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn the_guest_counts_cpus_from_the_mp_table() {
    if !common::kvm_or_skip("the_guest_counts_cpus_from_the_mp_table") {
        return;
    }
    let (out, v) = common::run_bare_json("120", &["--vcpus", "2"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let smp = &v["smp"];
    assert_eq!(smp["cpus_source"], "mptable", "{smp}");
    assert_eq!(smp["cpus_wanted"], 2);
    let vcpus = smp["vcpus"].as_array().unwrap();
    assert_eq!(vcpus.len(), 2);
    assert!(
        vcpus[1]["guest_xcr0"].is_string(),
        "vCPU 1 reported: {}",
        vcpus[1]
    );

    let (out, v) = common::run_bare_json("120", &["--vcpus", "2", "--cmdline", "cpus=1"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(v["smp"]["cpus_source"], "cmdline");
    assert_eq!(v["smp"]["cpus_wanted"], 1);
    assert!(
        v["smp"]["vcpus"][1]["guest_xcr0"].is_null(),
        "{}",
        v["smp"]["vcpus"][1]
    );
}

/// `xfeatures.cpuN=` only narrows the policy: a mask of every bit leaves
/// AP 1 at the policy (before, it got everything CPUID offered), and
/// words naming no AP or no mask are named on the console.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_per_cpu_xfeatures_word_cannot_widen_the_policy() {
    if !common::kvm_or_skip("a_per_cpu_xfeatures_word_cannot_widen_the_policy") {
        return;
    }
    let (out, v) = common::run_bare_json(
        "120",
        &[
            "--vcpus",
            "2",
            "--xfeatures",
            "0x3",
            "--cmdline",
            "xfeatures.cpu1=0xffffffffffffffff xfeatures.cpu5=0x3 xfeatures.cpux=1",
        ],
    );
    let stderr = common::stderr(&out);
    assert!(out.status.success(), "{stderr}");
    let vcpus = v["smp"]["vcpus"].as_array().unwrap();
    assert_eq!(vcpus.len(), 2);
    for c in vcpus {
        assert_eq!(common::hex(&c["guest_xcr0"]), 0x3, "{c}");
    }
    assert!(
        stderr.contains("guest: xfeatures.cpu5=0x3: no such AP"),
        "{stderr}"
    );
    assert!(
        stderr.contains("guest: xfeatures.cpux=1: no such CPU (at most 8) or no hex mask"),
        "{stderr}"
    );
}

/// With one vCPU there is no AP to start, but the per-CPU words are still
/// read: each is named as naming no AP, and the run ends normally.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn per_cpu_words_without_an_ap_are_named() {
    if !common::kvm_or_skip("per_cpu_words_without_an_ap_are_named") {
        return;
    }
    let (out, v) = common::run_bare_json("120", &["--cmdline", "xfeatures.cpu1=0x3 fault.cpu1=ud"]);
    let stderr = common::stderr(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(v["exit_status"], 0);
    assert!(
        stderr.contains("guest: xfeatures.cpu1=0x3: no such AP"),
        "{stderr}"
    );
    assert!(
        stderr.contains("guest: fault.cpu1=ud: no such AP or fault kind"),
        "{stderr}"
    );
}

/// With no override every AP takes the policy: three vCPUs, three reports.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn every_ap_takes_the_policy_by_default() {
    if !common::kvm_or_skip("every_ap_takes_the_policy_by_default") {
        return;
    }
    let (out, v) = common::run_bare_json("120", &["--vcpus", "3", "--xfeatures", "0x7"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let vcpus = v["smp"]["vcpus"].as_array().unwrap();
    assert_eq!(vcpus.len(), 3);
    for c in vcpus {
        assert_eq!(common::hex(&c["guest_xcr0"]), 0x7, "{c}");
        assert_eq!(common::hex(&c["final_xcr0"]), 0x7, "{c}");
    }
}

/// A guest that wants fewer CPUs than the VM has (`cpus=2` on three vCPUs)
/// starts only those, by APIC ID: vCPU 1 takes the policy and reports,
/// vCPU 2 stays in wait-for-SIPI (no report, no XCR0 of its own) and is
/// stopped when the run ends, which it does normally.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_guest_wanting_fewer_cpus_starts_only_those() {
    if !common::kvm_or_skip("a_guest_wanting_fewer_cpus_starts_only_those") {
        return;
    }
    for _ in 0..3 {
        let (out, v) = common::run_bare_json(
            "120",
            &["--vcpus", "3", "--xfeatures", "0x7", "--cmdline", "cpus=2"],
        );
        assert!(out.status.success(), "{}", common::stderr(&out));
        assert_eq!(v["smp"]["cpus_wanted"], 2, "{}", v["smp"]);
        let vcpus = v["smp"]["vcpus"].as_array().unwrap();
        assert_eq!(vcpus.len(), 3);
        assert_eq!(common::hex(&vcpus[1]["guest_xcr0"]), 0x7, "{}", vcpus[1]);
        assert!(vcpus[2]["guest_xcr0"].is_null(), "{}", vcpus[2]);
        assert_eq!(vcpus[2]["end"], "stopped", "{}", vcpus[2]);
    }
}

/// An exception on the AP ends the run with the guest's exception status
/// (2), from vCPU 1, with the fault in the report.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn an_ap_exception_names_the_vcpu() {
    if !common::kvm_or_skip("an_ap_exception_names_the_vcpu") {
        return;
    }
    let (out, v) =
        common::run_bare_json("120", &["--vcpus", "2", "--cmdline", "quiet fault.cpu1=ud"]);
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    assert_eq!(v["exit_status"], 2);
    assert_eq!(v["smp"]["ended_by"], 1);
    assert_eq!(v["fault"]["mnemonic"], "#UD", "{}", v["fault"]);
    let vcpus = v["smp"]["vcpus"].as_array().unwrap();
    assert!(
        vcpus[1]["end"].as_str().unwrap().contains("status 2"),
        "{}",
        vcpus[1]["end"]
    );
}

/// 0, above KVM's limit and above the guest's: each refused by name, with
/// the usage status, before a VM exists.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn bad_vcpu_counts_are_refused_by_name() {
    if !common::kvm_or_skip("bad_vcpu_counts_are_refused_by_name") {
        return;
    }
    for (n, says) in [
        ("0", "--vcpus 0: a guest needs at least one vCPU"),
        ("100000", "KVM allows at most"),
        ("9", "--vcpus 9: vmm runs at most 8 vCPUs with any kernel"),
    ] {
        let out = common::vmm(&["run", "--workload", "none", "--vcpus", n]);
        assert_eq!(out.status.code(), Some(68), "{n}: {}", common::stderr(&out));
        assert!(
            common::stderr(&out).contains(says),
            "{n}: {}",
            common::stderr(&out)
        );
    }
    let out = common::vmm(&["run", "--workload", "none", "--vcpus", "x"]);
    assert_eq!(out.status.code(), Some(68));
    // The limit is vmm's, not the kernel's: another kernel was told that
    // "the guest kernel supports at most 8 CPUs".
    let elf = common::temp_file("vcpus-limit.elf", &common::tiny_pvh_elf(&[0xf4], true));
    let out = common::vmm(&["run", "--kernel", elf.to_str().unwrap(), "--vcpus", "9"]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(68), "{err}");
    assert!(
        err.contains("vmm runs at most 8 vCPUs with any kernel"),
        "{err}"
    );
    assert!(!err.contains("the guest kernel supports"), "{err}");
}

/// The same guest image under QEMU microvm `-smp 2`: the guest counts two
/// CPUs in the ACPI MADT (through PVH's `rsdp_paddr`), its BSP starts the
/// second CPU with INIT-SIPI-SIPI and both report on the serial console.
#[cfg_attr(any(no_kvm, no_qemu), ignore = "needs /dev/kvm and qemu-system-x86_64")]
#[test]
fn qemu_smp2_reports_both_cpus() {
    if !common::kvm_or_skip("qemu_smp2_reports_both_cpus")
        || !common::qemu_or_skip("qemu_smp2_reports_both_cpus")
    {
        return;
    }
    let kernel = common::guest_kernel_file();
    let log = std::env::temp_dir().join(format!("vmm-qemu-smp-{}.log", std::process::id()));
    let out = common::qemu_microvm("host")
        .args([
            "-smp",
            "2",
            "-m",
            "64",
            "-display",
            "none",
            "-no-reboot",
            "-nodefaults",
        ])
        .arg("-serial")
        .arg(format!("file:{}", log.display()))
        .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=4"])
        // No `cpus=` word: the guest counts the CPUs in QEMU's ACPI MADT.
        .args(["-append", "workload=none xfeatures.cpu1=0x3"])
        .arg("-kernel")
        .arg(&kernel)
        .output()
        .expect("cannot start QEMU");
    let _ = std::fs::remove_file(&kernel);
    let serial = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert_eq!(
        out.status.code(),
        Some(1),
        "QEMU run failed:\n{serial}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(serial.contains("guest: 2 CPUs (from madt)"), "{serial}");
    assert!(serial.contains("guest: cpu0 xcr0 "), "{serial}");
    assert!(serial.contains("guest: cpu1 up "), "{serial}");
    assert!(serial.contains("xcr0 0x3 (x87 sse)"), "{serial}");
}

/// `bench=xstate-check` on two vCPUs with different XCR0s (vCPU 0 the
/// host-derived policy, with dirty AVX-512 state where the host has it;
/// vCPU 1 x87|SSE), the exits concurrent (a barrier in guest memory before
/// each check), under every sync policy: each vCPU gets its own register
/// pattern back bit for bit, and the VMM's XMM edit reached the right one.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn concurrent_xstate_check_sees_only_its_own_state_under_every_policy() {
    if !common::kvm_or_skip("concurrent_xstate_check_sees_only_its_own_state_under_every_policy") {
        return;
    }
    for policy in ["lazy", "eager", "eager-compact"] {
        let (out, v) = common::run_bare_json(
            "120",
            &[
                "--vcpus",
                "2",
                "--xstate-sync",
                policy,
                "--cmdline",
                "quiet bench=xstate-check exits=100 xfeatures.cpu1=0x3",
            ],
        );
        assert!(out.status.success(), "{policy}: {}", common::stderr(&out));
        let host = common::hex(&v["policy_xfeatures"]);
        let vcpus = v["smp"]["vcpus"].as_array().unwrap();
        assert_eq!(vcpus.len(), 2, "{policy}");
        assert_eq!(common::hex(&vcpus[0]["guest_xcr0"]), host, "{policy}");
        assert_eq!(common::hex(&vcpus[1]["guest_xcr0"]), 0x3, "{policy}");
        for c in vcpus {
            let rows: Vec<(&str, &str, u64)> = c["results"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["name"] == "xstate-check")
                .map(|r| {
                    (
                        r["variant"].as_str().unwrap(),
                        r["check"].as_str().unwrap(),
                        r["work"].as_u64().unwrap(),
                    )
                })
                .collect();
            assert_eq!(
                rows,
                [
                    ("pio", "pass", 100),
                    ("mmio", "pass", 100),
                    ("cpuid", "pass", 100),
                    ("edit", "pass", 1)
                ],
                "{policy} vcpu{}",
                c["index"]
            );
            // Each vCPU made its own exits to user space (PIO and MMIO;
            // KVM answers CPUID itself), through its own xstate manager.
            assert!(c["exits"].as_u64().unwrap() >= 200, "{policy}: {c}");
            assert!(
                c["xstate_stats"]["fetches"].as_u64().unwrap() >= 1,
                "{policy}: {c}"
            );
        }
    }
}

/// `bench=parallel` on two vCPUs: every AES-CTR and DGEMM variant vCPU 0
/// timed alone comes back measured on both vCPUs at once, with the
/// aggregate, the scaling and the same code on two host threads.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn parallel_bench_reports_scaling_and_native_threads() {
    if !common::kvm_or_skip("parallel_bench_reports_scaling_and_native_threads") {
        return;
    }
    let (out, v) = common::vmm_json(&[
        "run",
        "--workload",
        "none",
        "--timeout",
        "300",
        "--vcpus",
        "2",
        "--cmdline",
        "quiet bench=parallel",
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let rows = v["smp"]["parallel"].as_array().unwrap();
    let names: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["aes-128-ctr", "dgemm"].into_iter().collect());
    for r in rows {
        assert_eq!(r["check"], "pass", "{r}");
        assert_eq!(r["vcpus"], 2, "{r}");
        let per: Vec<f64> = r["per_vcpu"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(per.len(), 2, "{r}");
        let sum: f64 = per.iter().sum();
        assert!(
            (r["aggregate"].as_f64().unwrap() - sum).abs() <= 1e-9 * sum,
            "{r}"
        );
        let one = r["one_vcpu"].as_f64().unwrap();
        assert!(
            (r["scaling"].as_f64().unwrap() - sum / one).abs() <= 1e-9 * sum / one,
            "{r}"
        );
        assert_eq!(r["native_per_thread"].as_array().unwrap().len(), 2, "{r}");
        assert!(r["native_ratio"].as_f64().is_some(), "{r}");
        assert_eq!(
            r["per_vcpu_native_ratio"].as_array().unwrap().len(),
            2,
            "{r}"
        );
    }
    // Each vCPU's own rows are in its section, marked with the phase.
    let v1: Vec<&str> = v["smp"]["vcpus"][1]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["variant"].as_str().unwrap())
        .collect();
    assert_eq!(v1.len(), rows.len(), "{v1:?}");
    assert!(v1.iter().all(|s| s.ends_with("/smp")), "{v1:?}");
}

/// Two APs faulting at about the same time (`fault.cpu1=pf`,
/// `fault.cpu2=gp`): each CPU records its own exception (its own fault
/// record and reporter stack), so whichever vCPU ends the run reports its
/// own kind, and an AP that got as far reports its own, never the other's.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn each_ap_reports_its_own_fault() {
    if !common::kvm_or_skip("each_ap_reports_its_own_fault") {
        return;
    }
    let kinds = [None, Some("#PF"), Some("#GP")];
    for _ in 0..3 {
        let (out, v) = common::run_bare_json(
            "120",
            &[
                "--vcpus",
                "3",
                "--cmdline",
                "quiet fault.cpu1=pf fault.cpu2=gp",
            ],
        );
        assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
        let ended_by = v["smp"]["ended_by"].as_u64().unwrap() as usize;
        assert!(matches!(ended_by, 1 | 2), "{}", v["smp"]);
        assert_eq!(
            v["fault"]["mnemonic"].as_str(),
            kinds[ended_by],
            "{}",
            v["smp"]
        );
        for (i, c) in v["smp"]["vcpus"].as_array().unwrap().iter().enumerate() {
            let got = c["fault"]["mnemonic"].as_str();
            assert!(got.is_none() || got == kinds[i], "vcpu{i}: {c}");
            if i == ended_by {
                assert_eq!(got, kinds[i], "vcpu{i}: {c}");
            }
        }
    }
}

fn snap_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("vmm-smp-test-{}-{name}.snap", std::process::id()))
}

/// A 2-vCPU snapshot taken mid-workload (time-triggered, every vCPU
/// kicked out of KVM_RUN first) lists both vCPUs with their own XCR0,
/// restores in a new process, and the restored guest finishes with every
/// check passing; the AP keeps the XCR0 it had (0x3), the BSP the policy.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn two_vcpu_snapshot_restores_in_a_new_process() {
    if !common::kvm_or_skip("two_vcpu_snapshot_restores_in_a_new_process") {
        return;
    }
    let snap = snap_path("two");
    let workload = common::harness_sized("aes,gemm");
    let (out, v) = common::vmm_json(&[
        "run",
        "--vcpus",
        "2",
        "--workload",
        &workload,
        "--no-native",
        "--cmdline",
        "xfeatures.cpu1=0x3",
        "--snapshot-after",
        "0.3",
        "--snapshot-file",
        snap.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(v["exit_reason"], "snapshotted", "{v}");
    let policy = common::hex(&v["policy_xfeatures"]);

    let (info_out, info) = common::vmm_json(&["snapshot", "info", snap.to_str().unwrap()]);
    assert!(info_out.status.success(), "{}", common::stderr(&info_out));
    assert_eq!(info["trigger"], "time");
    assert_eq!(info["restorable_here"], true, "{info}");
    let vcpus = info["vcpus"].as_array().unwrap();
    assert_eq!(vcpus.len(), 2, "{info}");
    let names = common::section_names(&info);
    for want in ["vcpu0.lapic", "vcpu1.regs", "vcpu1.xstate", "vcpu1.lapic"] {
        assert!(names.contains(&want), "section {want} missing: {names:?}");
    }
    // A split irqchip (LAPICs only) where this KVM has one, as the run
    // makes it; the full one's PICs and IOAPIC otherwise.
    let split = split_irqchip();
    assert_eq!(
        info["irqchip"],
        if split { "split" } else { "kvm" },
        "{info}"
    );
    for chip in ["irqchip.pic_master", "irqchip.pic_slave", "irqchip.ioapic"] {
        assert_eq!(names.contains(&chip), !split, "section {chip}: {names:?}");
    }
    let snapshot = vmm::snapshot::state::Snapshot::from_bytes(&std::fs::read(&snap).unwrap())
        .expect("the file decodes");
    assert_eq!(snapshot.meta.vcpus, 2);
    assert_eq!(snapshot.vcpus[0].xcr0(), Some(policy));
    assert_eq!(snapshot.vcpus[1].xcr0(), Some(0x3));

    let before = std::fs::read(&snap).unwrap();
    let (out, v) = common::vmm_json(&[
        "restore",
        snap.to_str().unwrap(),
        "--no-native",
        "--timeout",
        "120",
    ]);
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", common::stderr(&out));
    assert_eq!(v["exit_reason"], "exited", "{v}");
    let results = v["results"].as_array().unwrap();
    for name in ["aes-128-ctr", "dgemm"] {
        assert!(
            results.iter().any(|r| r["name"] == name),
            "no {name} result after restore: {v}"
        );
    }
    for r in results {
        assert_eq!(r["check"], "pass", "{r}");
    }
    let vcpus = v["smp"]["vcpus"].as_array().unwrap();
    assert_eq!(vcpus.len(), 2);
    assert_eq!(common::hex(&vcpus[0]["final_xcr0"]), policy);
    assert_eq!(common::hex(&vcpus[1]["final_xcr0"]), 0x3);
    common::assert_unchanged_then_remove(&snap, &before);
}

/// The guest asks for the snapshot itself (`bench=snapshot-check` on the
/// BSP, which loads every register of its XCR0 first): with two vCPUs the
/// machine is paused and saved, and after the restore the BSP finds every
/// register bit for bit.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn guest_requested_two_vcpu_snapshot_keeps_registers() {
    if !common::kvm_or_skip("guest_requested_two_vcpu_snapshot_keeps_registers") {
        return;
    }
    let snap = snap_path("guest");
    let args = common::snapshot_check_args(snap.to_str().unwrap());
    let mut args: Vec<&str> = args.to_vec();
    args.extend_from_slice(&["--vcpus", "2", "--no-native"]);
    let (out, v) = common::vmm_json(&args);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(v["exit_reason"], "snapshotted", "{v}");
    let (out, v) = common::vmm_json(&["restore", snap.to_str().unwrap(), "--no-native"]);
    assert_eq!(out.status.code(), Some(0), "{v}\n{}", common::stderr(&out));
    let rows = common::rows_named(&v, "snapshot-check");
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["check"], "pass", "{}", rows[0]);
    assert_eq!(v["smp"]["vcpus"].as_array().map(Vec::len), Some(2));
    let _ = std::fs::remove_file(snap);
}

/// A file whose `meta.vcpus` claims more vCPUs than it holds sections for
/// (or whose AP lost its LAPIC) is refused by `restore` and `info`, naming
/// the field, before any VM exists.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn a_file_claiming_more_vcpus_than_its_sections_is_refused() {
    if !common::kvm_or_skip("a_file_claiming_more_vcpus_than_its_sections_is_refused") {
        return;
    }
    let snap = snap_path("claim");
    let args = common::snapshot_check_args(snap.to_str().unwrap());
    let mut args: Vec<&str> = args.to_vec();
    args.extend_from_slice(&["--vcpus", "2", "--no-native"]);
    let (out, _) = common::vmm_json(&args);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let good = vmm::snapshot::state::Snapshot::from_bytes(&std::fs::read(&snap).unwrap()).unwrap();

    let mut bad = good.clone();
    bad.meta.vcpus = 3;
    let p = snap_path("claim3");
    std::fs::write(&p, bad.to_bytes()).unwrap();
    let out = common::vmm(&["restore", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64), "{}", common::stderr(&out));
    let err = common::stderr(&out);
    assert!(
        err.contains("meta.vcpus") && err.contains("says 3 vCPUs"),
        "{err}"
    );
    // `info` shows the file and the same refusal.
    let (out, info) = common::vmm_json(&["snapshot", "info", p.to_str().unwrap()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(info["restorable_here"], false);
    let why = info["restore_refusal"].as_str().unwrap();
    assert!(
        why.contains("meta.vcpus") && why.contains("says 3 vCPUs"),
        "{why}"
    );

    // Each fault is refused (exit 64) naming what `wants` lists.
    let refused = |bad: &vmm::snapshot::state::Snapshot, wants: &[&str]| {
        std::fs::write(&p, bad.to_bytes()).unwrap();
        let out = common::vmm(&["restore", p.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(64), "{}", common::stderr(&out));
        let err = common::stderr(&out);
        assert!(wants.iter().all(|w| err.contains(w)), "{wants:?}: {err}");
    };
    let mut bad = good.clone();
    bad.vcpus[1].lapic = None;
    refused(&bad, &["vcpu1.lapic"]);
    // The irqchip named in meta must be one this vmm knows, fit the
    // vCPU count and agree with the sections.
    let mut bad = good.clone();
    bad.meta.irqchip = "pic".into();
    refused(&bad, &["meta.irqchip", "\"pic\""]);
    let mut bad = good.clone();
    bad.meta.irqchip = "none".into();
    refused(&bad, &["meta.irqchip", "for 2 vCPUs"]);
    let mut bad = good.clone();
    if good.irqchip.is_some() {
        bad.irqchip = None;
    } else {
        bad.meta.irqchip = "kvm".into();
    }
    refused(&bad, &["irqchip.ioapic", "missing"]);
    let _ = std::fs::remove_file(p);
    let _ = std::fs::remove_file(snap);
}

/// One vCPU gets an MP table too, and the guest counts itself from it:
/// without one it searched all of 0xf0000..0x100000, a page fault on each
/// of sixteen pages before its first measurement.
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn one_vcpu_counts_itself_from_the_mp_table() {
    if !common::kvm_or_skip("one_vcpu_counts_itself_from_the_mp_table") {
        return;
    }
    let outcome = vmm::run::run(vmm::run::RunConfig {
        cmdline: "quiet workload=none".into(),
        serial: vmm::run::SerialSink::Null,
        timeout: Some(std::time::Duration::from_secs(60)),
        ..vmm::run::RunConfig::default()
    })
    .expect("the run");
    assert_eq!(outcome.end.failure(), None);
    let report = outcome.report.expect("the guest's report");
    assert_eq!(report.cpus_wanted, 1);
    assert_eq!(
        report.cpus_source,
        guest::firmware::CpuCountSource::MpTable as u32
    );
}

/// Whether this KVM makes split irqchips (both KVMs of the test bed do).
fn split_irqchip() -> bool {
    kvm_ioctls::Kvm::new()
        .unwrap()
        .check_extension(kvm_ioctls::Cap::SplitIrqchip)
}

/// The embedded guest's one vCPU has a LAPIC (the split irqchip), which
/// spares KVM two cross-CPU code patches per run (see `vstate::smp`); its
/// snapshot keeps the LAPIC and restores. A kernel without vmm's note keeps
/// the VM without an irqchip, where a HLT ends the run at once
/// (`run::halting_guest_ends_the_run`).
#[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
#[test]
fn one_vcpu_of_the_embedded_guest_has_a_lapic() {
    if !common::kvm_or_skip("one_vcpu_of_the_embedded_guest_has_a_lapic") {
        return;
    }
    let split = split_irqchip();
    let run = |kernel: vmm::run::KernelImage| {
        vmm::run::run(vmm::run::RunConfig {
            kernel,
            cmdline: "quiet workload=none".into(),
            serial: vmm::run::SerialSink::Null,
            timeout: Some(std::time::Duration::from_secs(60)),
            ..vmm::run::RunConfig::default()
        })
        .expect("the run")
    };
    let embedded = run(vmm::run::KernelImage::embedded());
    assert_eq!(embedded.end.failure(), None);
    assert_eq!(
        embedded.irqchip.name(),
        if split { "split" } else { "none" }
    );
    let hlt = vmm::run::KernelImage {
        name: "hlt".into(),
        bytes: std::borrow::Cow::Owned(common::tiny_pvh_elf(&[0xf4], true)),
    };
    assert_eq!(run(hlt).irqchip.name(), "none");

    let snap = std::env::temp_dir().join(format!("vmm-one-lapic-{}.snap", std::process::id()));
    let out = common::vmm(&common::snapshot_check_args(snap.to_str().unwrap()));
    assert!(out.status.success(), "{}", common::stderr(&out));
    let (info_out, info) = common::vmm_json(&["snapshot", "info", snap.to_str().unwrap()]);
    assert!(info_out.status.success(), "{}", common::stderr(&info_out));
    assert_eq!(
        info["irqchip"],
        if split { "split" } else { "none" },
        "{info}"
    );
    let names = common::section_names(&info);
    assert_eq!(names.contains(&"vcpu0.lapic"), split, "{names:?}");
    common::restore_checked(&snap);
}
