//! The exit handling with synthetic exits: no KVM, no vCPU.

use guest::protocol::{PART_PORT, REP_PORT, SERIAL_PORT};
use vm_memory::GuestAddress;

use super::*;
use crate::devices::SerialSink;

fn machine() -> (Devices, GuestMemoryMmap, ExitCounts) {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap();
    (Devices::new(SerialSink::Null), mem, ExitCounts::default())
}

fn port(next: Next) -> (PortAction, bool) {
    match next {
        Next::Port(action, protocol) => (action, protocol),
        other => panic!("not a port exit: {other:?}"),
    }
}

#[test]
fn the_debug_exit_port_ends_with_the_status_and_counts_once() {
    let (mut devices, mem, mut exits) = machine();
    let data = 7u32.to_le_bytes();
    let step = Step::Exit(VcpuExit::IoOut(DEBUG_EXIT_PORT, &data));
    let next = handle_exit(step, &mut devices, &mem, &mut exits);
    assert_eq!(port(next), (PortAction::Exit(7), true));
    assert_eq!((exits.total, exits.io, exits.mmio), (1, 1, 0));
}

#[test]
fn the_snapshot_port_asks_for_a_snapshot_only_when_one_can_be_taken() {
    let (mut devices, mem, mut exits) = machine();
    let data = [0u8; 4];
    let step = || Step::Exit(VcpuExit::IoOut(SNAPSHOT_PORT, &data));
    let next = handle_exit(step(), &mut devices, &mem, &mut exits);
    assert_eq!(port(next), (PortAction::Continue, true));
    assert_eq!(devices.unhandled_ports, 1, "nothing decodes it");
    devices.snapshots = true;
    let next = handle_exit(step(), &mut devices, &mem, &mut exits);
    assert_eq!(port(next), (PortAction::Snapshot(None), true));
    assert_eq!((devices.unhandled_ports, exits.total), (1, 2));
}

#[test]
fn markers_and_edits_go_to_the_loop_and_only_edits_are_protocol_exits() {
    let (mut devices, mem, mut exits) = machine();
    let data = 3u32.to_le_bytes();
    let mark = handle_exit(
        Step::Exit(VcpuExit::IoOut(MARK_PORT, &data)),
        &mut devices,
        &mem,
        &mut exits,
    );
    assert_eq!(port(mark), (PortAction::Mark(3), false));
    let edit = handle_exit(
        Step::Exit(VcpuExit::IoOut(XSTATE_EDIT_PORT, &data)),
        &mut devices,
        &mem,
        &mut exits,
    );
    assert_eq!(port(edit), (PortAction::EditXmm(3), true));
}

#[test]
fn unknown_ports_and_mmio_read_as_all_ones_and_are_counted() {
    let (mut devices, mem, mut exits) = machine();
    let mut data = [0u8; 2];
    let next = handle_exit(
        Step::Exit(VcpuExit::IoIn(0x1234, &mut data)),
        &mut devices,
        &mem,
        &mut exits,
    );
    assert_eq!(port(next), (PortAction::Continue, false));
    assert_eq!((data, devices.unhandled_ports), ([0xff; 2], 1));
    let mut data = [0u8; 8];
    let next = handle_exit(
        Step::Exit(VcpuExit::MmioRead(0xfee0_0000, &mut data)),
        &mut devices,
        &mem,
        &mut exits,
    );
    assert_eq!(port(next), (PortAction::Continue, false));
    assert_eq!(data, [0xff; 8]);
    assert_eq!((exits.total, exits.io, exits.mmio), (2, 1, 1));
}

#[test]
fn without_a_native_side_the_native_ports_decode_nothing() {
    let (mut devices, mem, mut exits) = machine();
    let data = 0x100u32.to_le_bytes();
    for p in [REP_PORT, PART_PORT] {
        let next = handle_exit(
            Step::Exit(VcpuExit::IoOut(p, &data)),
            &mut devices,
            &mem,
            &mut exits,
        );
        assert_eq!(port(next), (PortAction::Continue, false));
    }
    assert_eq!(devices.unhandled_ports, 2);
}

#[test]
fn serial_output_reaches_com1_not_the_loop() {
    let (mut devices, mem, mut exits) = machine();
    let next = handle_exit(
        Step::Exit(VcpuExit::IoOut(SERIAL_PORT, b"x")),
        &mut devices,
        &mem,
        &mut exits,
    );
    assert_eq!(port(next), (PortAction::Continue, false));
    assert_eq!(devices.unhandled_ports, 0);
}

#[test]
fn an_interrupted_run_is_not_an_exit_and_a_halt_ends_the_run() {
    let (mut devices, mem, mut exits) = machine();
    let eintr = Step::from(Err(kvm_ioctls::Error::new(libc::EINTR)));
    let next = handle_exit(eintr, &mut devices, &mem, &mut exits);
    assert!(matches!(next, Next::Interrupted), "{next:?}");
    let hlt = Step::from(Ok(VcpuExit::Hlt));
    match handle_exit(hlt, &mut devices, &mem, &mut exits) {
        Next::Fatal(Fatal::Exit(why)) => assert!(why.contains("HLT"), "{why}"),
        other => panic!("a halt must end the run: {other:?}"),
    }
    let failed = Step::from(Err(kvm_ioctls::Error::new(libc::EFAULT)));
    let next = handle_exit(failed, &mut devices, &mem, &mut exits);
    assert!(matches!(next, Next::Fatal(Fatal::RunFailed(_))), "{next:?}");
    assert_eq!(exits.total, 0, "none of them is a guest exit");
}

#[test]
fn the_raw_loop_looks_only_at_markers_the_report_and_the_exit() {
    let (mut devices, mem, _) = machine();
    let mut marks = FirstN::new(4);
    let start = Instant::now();
    let data = 9u32.to_le_bytes();
    let mut raw = |p: u16| {
        handle_raw_exit(
            Step::Exit(VcpuExit::IoOut(p, &data)),
            &mut devices,
            &mem,
            &mut marks,
            start,
        )
    };
    assert!(matches!(raw(MARK_PORT), RawNext::Continue));
    assert!(matches!(raw(XSTATE_EDIT_PORT), RawNext::Continue));
    assert!(matches!(raw(SNAPSHOT_PORT), RawNext::Continue));
    assert!(matches!(raw(DEBUG_EXIT_PORT), RawNext::Exit(9)));
    assert!(matches!(raw(REPORT_PORT), RawNext::Report));
    assert_eq!(marks.items().len(), 1);
    assert_eq!(marks.items()[0].0, 9);
    // The report at address 9 is refused, but the status still ends it.
    let exit = (9u32 << 16).to_le_bytes();
    let next = handle_raw_exit(
        Step::Exit(VcpuExit::IoOut(REPORT_EXIT_PORT, &exit)),
        &mut devices,
        &mem,
        &mut marks,
        start,
    );
    assert!(matches!(next, RawNext::Exit(_)), "{next:?}");
}

#[test]
fn a_stop_is_a_timeout_only_with_the_limit_that_caused_it() {
    let limit = Some(Duration::from_secs(3));
    assert!(matches!(
        LoopExit::Stopped.into_end(limit),
        RunEnd::TimedOut(d) if d == Duration::from_secs(3)
    ));
    assert!(matches!(
        LoopExit::Ended(RunEnd::Exited(0)).into_end(limit),
        RunEnd::Exited(0)
    ));
    assert!(matches!(
        LoopExit::Paused(Trigger::Guest).into_end(None),
        RunEnd::TimedOut(d) if d.is_zero()
    ));
}

/// kvm_pvm's emulation failure in Linux's SLUB (`lock cmpxchg16b`), as
/// `KVM_EXIT_INTERNAL_ERROR` gave it: its 15 instruction bytes decoded;
/// no flag, or no room, gives none, never a panic.
#[test]
fn emulation_failure_instruction_bytes_are_decoded() {
    let data = [1, 0x7420_4dc7_0f48_f00f, 0x894d_0824_448b_4c66, 0x1000];
    assert_eq!(
        emulation_failure_bytes(&data).as_deref(),
        Some("f0 48 0f c7 4d 20 74 66 4c 8b 44 24 08 4d 89")
    );
    assert_eq!(emulation_failure_bytes(&[0, 0x0f]), None);
    assert_eq!(emulation_failure_bytes(&[1]), None);
    assert_eq!(emulation_failure_bytes(&[1, 0x00]), None);
    assert_eq!(
        emulation_failure_bytes(&[1, 0x90ff]).as_deref(),
        Some("90 00 00 00 00 00 00")
    );
}
