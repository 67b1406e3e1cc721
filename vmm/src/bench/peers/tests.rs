//! Tests of `vmm bench peers` that need no VMM.

use super::*;

fn masks(xcr0: u64, ebx: u32) -> GuestMasks {
    let mut r = Report::new();
    r.xcr0 = xcr0;
    r.cpuid_xcr0_supported = xcr0;
    r.cpuid7_ebx = ebx;
    GuestMasks::of(&r)
}

#[test]
fn differences_name_components_and_registers() {
    let ours = masks(0x2e7, 0x20);
    assert!(masks(0x2e7, 0x20).differences(&ours).is_empty());
    let d = masks(0x7, 0x0).differences(&ours);
    assert_eq!(
        d,
        vec![
            "xcr0 0x7: -opmask,zmm_hi256,hi16_zmm,pkru".to_string(),
            "xcr0_supported 0x7: -opmask,zmm_hi256,hi16_zmm,pkru".to_string(),
            "cpuid7_ebx 0x0 (vmm 0x20)".to_string(),
        ]
    );
}

#[test]
fn targets_from_the_environment() {
    let ours = PathBuf::from("/bin/sh");
    let (run, skipped) = targets(ours.clone(), |v| match v {
        "VMM_PEER_QEMU" => Some("/bin/true".into()),
        "VMM_PEER_FIRECRACKER" => Some("".into()),
        _ => None,
    })
    .unwrap();
    assert_eq!(
        run.iter().map(|t| t.vmm).collect::<Vec<_>>(),
        [Vmm::Vmm, Vmm::Qemu]
    );
    assert_eq!(run[1].binary, Path::new("/bin/true"));
    assert_eq!(
        skipped.iter().map(|s| s.vmm).collect::<Vec<_>>(),
        [Vmm::CloudHypervisor, Vmm::Firecracker]
    );
    assert!(skipped[0]
        .reason
        .contains("VMM_PEER_CLOUD_HYPERVISOR is not set"));
    let e = targets(ours, |v| {
        (v == "VMM_PEER_CLOUD_HYPERVISOR").then(|| "/etc/passwd".into())
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "VMM_PEER_CLOUD_HYPERVISOR=/etc/passwd: not an executable regular file"
    );
}

#[test]
fn exit_rows_are_cycles_per_exit() {
    let mut r = Report::new();
    let mut rec = guest::protocol::ResultRecord {
        name: guest::protocol::fixed_str("exit-pio"),
        variant: guest::protocol::fixed_str("cpl3-clean"),
        size: 0,
        work: 2000,
        cycles: 130_000_000,
        unit: WorkUnit::Events as u32,
        check: 1,
        residual: 0.0,
    };
    assert!(r.push_result(rec));
    rec.name = guest::protocol::fixed_str("aes-128-cbc");
    assert!(r.push_result(rec));
    let rows = exit_rows_of(&r);
    assert_eq!(
        rows,
        vec![(
            ("exit-pio".to_string(), "cpl3-clean".to_string()),
            (2000, 65_000.0)
        )]
    );
}

/// The snapshot cycle's words, as the table prints them, are the ones
/// every VMM's guest gets; the lines the harness waits for are the
/// guest's own.
#[test]
fn snapshot_cycle_words_and_lines() {
    use guest::protocol::SnapshotPhase;
    use snapshot::{guest_words, released_line, waiting_line};
    assert_eq!(
        guest_words(snapshot::SNAPSHOT_WORKLOAD, snapshot::SNAPSHOT_POINT),
        snapshot::SNAPSHOT_WORDS
    );
    assert_eq!(
        waiting_line(SnapshotPhase::Mid),
        "guest: snapshot point mid: waiting for a byte on COM1"
    );
    assert_eq!(
        released_line(SnapshotPhase::End),
        "guest: snapshot point end: released\n"
    );
}
