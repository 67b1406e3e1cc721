//! The port bus, with synthetic port accesses.

use super::*;

fn ram() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap()
}

#[test]
fn serial_capture_keeps_the_tail_and_counts_the_rest() {
    let mut d = Devices::new(SerialSink::Null);
    let mem = ram();
    // 3 MiB + 5 bytes, in writes of every size from 1 byte to 4 KiB.
    let total = 3 * SERIAL_CAPTURE_MAX + 5;
    let mut written = 0;
    let mut n = 1;
    while written < total {
        let len = n.min(total - written);
        let chunk: Vec<u8> = (written..written + len).map(|i| (i % 251) as u8).collect();
        d.port_write(&mem, SERIAL_PORT, &chunk);
        written += len;
        n = n % 4096 + 1;
    }
    let kept = d.serial_output();
    assert_eq!(kept.len(), SERIAL_CAPTURE_MAX);
    let first = total - SERIAL_CAPTURE_MAX;
    assert!(kept
        .iter()
        .enumerate()
        .all(|(i, &b)| b == ((first + i) % 251) as u8));
    assert_eq!(d.serial.writer().dropped(), first as u64);
    assert!(d.serial.writer().buf.capacity() <= 4 * SERIAL_CAPTURE_MAX);

    // One write larger than the capture keeps its own tail.
    let mut out = SerialOut {
        sink: SerialSink::Null,
        buf: Vec::new(),
        written: 0,
    };
    let big: Vec<u8> = (0..SERIAL_CAPTURE_MAX + 10).map(|i| i as u8).collect();
    out.write_all(&big).unwrap();
    assert_eq!(out.captured(), &big[10..]);
    assert_eq!(out.dropped(), 10);
}

#[test]
fn only_the_last_valid_report_is_kept() {
    let mem = ram();
    let mut d = Devices::new(SerialSink::Null);
    let mut r = Report::new();
    for i in 0..1000u64 {
        r.tsc_khz = i;
        mem.write_slice(r.as_bytes(), GuestAddress(0x1000)).unwrap();
        d.port_write(&mem, REPORT_PORT, &0x1000u32.to_le_bytes());
    }
    assert_eq!(d.report.as_ref().unwrap().tsc_khz, 999);
    assert_eq!(d.reports_dropped, 999);
    assert_eq!(d.report_errors.total(), 0);
}

#[test]
fn refused_reports_keep_the_first_reasons_and_count_the_rest() {
    let mem = ram();
    let mut d = Devices::new(SerialSink::Null);
    for i in 0..1000u32 {
        // Outside RAM, or RAM without a report.
        let addr: u32 = if i % 2 == 0 { 0xffff_f000 } else { 0 };
        d.port_write(&mem, REPORT_PORT, &addr.to_le_bytes());
    }
    assert!(d.report.is_none());
    assert_eq!(d.report_errors.items().len(), MAX_REPORT_ERRORS);
    assert_eq!(d.report_errors.dropped(), 1000 - MAX_REPORT_ERRORS as u64);
    let first = &d.report_errors.items()[0];
    assert!(
        first.starts_with("report address 0xfffff000 (+") && first.contains("not in guest RAM"),
        "{first}"
    );
}

#[test]
fn the_report_exit_port_delivers_the_report_and_ends_with_its_status() {
    let mem = ram();
    let mut d = Devices::new(SerialSink::Null);
    let mut r = Report::new();
    r.tsc_khz = 1234;
    mem.write_slice(r.as_bytes(), GuestAddress(0x2040)).unwrap();
    let v = guest::protocol::report_exit_value(0x2040, 37).unwrap();
    assert_eq!(v, 0x2040 | 37);
    match d.port_write(&mem, REPORT_EXIT_PORT, &v.to_le_bytes()) {
        PortAction::Exit(status) => assert_eq!(status, 37),
        other => panic!("{other:?}"),
    }
    assert_eq!(d.report.as_ref().unwrap().tsc_khz, 1234);
    assert_eq!((d.reports_dropped, d.report_errors.total()), (0, 0));
}

#[test]
fn a_bad_report_at_the_report_exit_port_is_refused_and_the_run_still_ends() {
    let mem = ram();
    let mut d = Devices::new(SerialSink::Null);
    // Outside RAM, status 3; then RAM without a report, status 0.
    for (v, want) in [(0xffff_f000u32 | 3, 3), (0x4000, 0)] {
        match d.port_write(&mem, REPORT_EXIT_PORT, &v.to_le_bytes()) {
            PortAction::Exit(status) => assert_eq!(status, want),
            other => panic!("{other:?}"),
        }
    }
    assert!(d.report.is_none());
    assert_eq!(d.report_errors.total(), 2);
    assert!(
        d.report_errors.items()[0].starts_with("report address 0xfffff000 (+"),
        "{:?}",
        d.report_errors.items()
    );
}

#[test]
fn edit_status_is_read_back_from_the_edit_port() {
    let mut d = Devices::new(SerialSink::Null);
    let mut v = [0u8; 4];
    d.port_read(XSTATE_EDIT_PORT, &mut v);
    assert_eq!(u32::from_le_bytes(v), guest::protocol::EDIT_STATUS_NONE);
    d.refuse_edit("x".repeat(10 * MAX_REASON_LEN));
    d.port_read(XSTATE_EDIT_PORT, &mut v);
    assert_eq!(u32::from_le_bytes(v), guest::protocol::EDIT_STATUS_REFUSED);
    assert_eq!(d.refused_requests.items()[0].len(), MAX_REASON_LEN);
    assert_eq!(d.unhandled_ports, 0);
}

/// A guest at a snapshot point reads the snapshot port: `vmm` always
/// answers that it acted on the request (taken, or declined without a
/// snapshot file), so the guest never waits for a release byte.
#[test]
fn the_snapshot_port_answers_sync_with_or_without_a_snapshot_file() {
    let mem = ram();
    for snapshots in [false, true] {
        let mut d = Devices::new(SerialSink::Null);
        d.snapshots = snapshots;
        let mid = guest::protocol::snapshot::point_request(SnapshotPhase::Mid);
        let action = d.port_write(&mem, SNAPSHOT_PORT, &mid.to_le_bytes());
        let want = if snapshots {
            PortAction::Snapshot(Some(SnapshotPhase::Mid))
        } else {
            PortAction::Continue
        };
        assert_eq!(action, want);
        let mut v = [0u8; 4];
        d.port_read(SNAPSHOT_PORT, &mut v);
        assert_eq!(u32::from_le_bytes(v), SNAPSHOT_SYNC);
        assert_eq!(d.unhandled_ports, u64::from(!snapshots));
    }
}

#[test]
fn first_n_counts_what_it_drops() {
    let mut f = FirstN::new(3);
    for i in 0..10 {
        f.push(i);
    }
    assert_eq!(f.items(), &[0, 1, 2]);
    assert_eq!((f.dropped(), f.total()), (7, 10));
    assert_eq!(
        bounded_reason("é".repeat(MAX_REASON_LEN)).len(),
        MAX_REASON_LEN
    );
}
