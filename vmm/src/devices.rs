//! The guest's devices: COM1 (vm-superio 8250), the debug-exit port and the
//! report port of `guest::protocol`. Everything else on the port bus reads as
//! all-ones and ignores writes, as on a PC with nothing decoding the address.
//!
//! # What a guest can make the VMM keep
//!
//! Whatever a guest writes, and for as long as it runs, the memory the VMM
//! keeps on its behalf is bounded ([`GUEST_RETAINED_MAX`], well under 64 MiB
//! above the VMM's idle size); what goes over a bound is counted, never kept:
//!
//! | channel | kept | counted |
//! |---------|------|---------|
//! | report port | the last valid report | `reports_dropped`: valid reports a later one replaced |
//! | report port, refused | the first [`MAX_REPORT_ERRORS`] reasons | `report_errors_dropped` |
//! | refused requests (xstate edit) | the first [`MAX_REFUSED_REQUESTS`] reasons | `requests_refused` |
//! | benchmark markers | the first [`MAX_MARKS`] | `marks_dropped` |
//! | COM1 capture | the last [`SERIAL_CAPTURE_MAX`] bytes | `serial_bytes_dropped` |
//!
//! The serial capture keeps the **tail**: what a guest prints last (its
//! report, a panic or fault message) is what explains how the run ended;
//! the pass-through to stdout/stderr is unchanged and complete.

use std::io::Write;

use std::time::Duration;

use guest::protocol::{
    split_report_exit, Report, DEBUG_EXIT_PORT, EDIT_STATUS_NONE, MARK_PORT, PARTS_WANTED,
    PART_PORT, REPORT_EXIT_PORT, REPORT_PORT, REP_PORT, SERIAL_PORT, SNAPSHOT_PORT, SNAPSHOT_SYNC,
    XSTATE_EDIT_PORT,
};

use guest::protocol::snapshot::point_of;
use guest::protocol::SnapshotPhase;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vm_superio::Serial;

mod pc;
pub use pc::{Com1, SerialIrq, SharedCom1, I8042_COMMAND_PORT};

/// Where the guest's serial output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SerialSink {
    /// The VMM's stdout (the default for `vmm run`).
    Stdout,
    /// The VMM's stderr (keeps stdout clean for `--json`).
    Stderr,
    /// Kept in memory, returned with the run's outcome.
    Capture,
    /// Dropped.
    Null,
}

/// Bytes of COM1 output kept for the outcome and snapshots: the last
/// 1 MiB (the guest's own report is a few KiB).
pub const SERIAL_CAPTURE_MAX: usize = 1 << 20;
/// Reasons for refused reports kept (the first ones: the first refusal is
/// the one that explains the others).
pub const MAX_REPORT_ERRORS: usize = 16;
/// Reasons for refused guest requests kept (the first ones).
pub const MAX_REFUSED_REQUESTS: usize = 16;
/// Benchmark markers kept (the first ones). `vmm bench exits` needs two
/// per result row, at most `2 * MAX_RESULTS` = 128 per run.
pub const MAX_MARKS: usize = 4096;
/// Longest reason string kept, in bytes (longer ones are cut).
pub const MAX_REASON_LEN: usize = 512;
/// Upper bound of what the bounded channels above can hold at once: the
/// serial buffer (up to twice its tail, see `SerialOut`), one kept report
/// plus the one being validated, the reasons and the markers.
pub const GUEST_RETAINED_MAX: usize = 2 * SERIAL_CAPTURE_MAX
    + 2 * Report::SIZE
    + (MAX_REPORT_ERRORS + MAX_REFUSED_REQUESTS) * MAX_REASON_LEN
    + MAX_MARKS * std::mem::size_of::<(u32, Duration)>();

const _: () = assert!(GUEST_RETAINED_MAX < 64 << 20);

/// A `Write` for the UART that sends bytes to the chosen sink and keeps a
/// copy of the last [`SERIAL_CAPTURE_MAX`] bytes, so the outcome can show
/// what the guest printed last.
pub struct SerialOut {
    sink: SerialSink,
    /// The guest's output; only its last [`SERIAL_CAPTURE_MAX`] bytes are
    /// the capture ([`SerialOut::captured`]). Trimmed when it reaches twice
    /// that, so trimming costs O(1) per byte.
    buf: Vec<u8>,
    /// Bytes the guest wrote in all.
    written: u64,
}

impl SerialOut {
    /// An empty output to `sink`.
    pub fn new(sink: SerialSink) -> Self {
        Self {
            sink,
            buf: Vec::new(),
            written: 0,
        }
    }

    /// Where the output goes (an AP's serial writes go to the same place).
    pub fn sink(&self) -> SerialSink {
        self.sink
    }

    /// The last [`SERIAL_CAPTURE_MAX`] bytes the guest wrote.
    pub fn captured(&self) -> &[u8] {
        &self.buf[self.buf.len().saturating_sub(SERIAL_CAPTURE_MAX)..]
    }

    /// Bytes the guest wrote that [`SerialOut::captured`] no longer holds.
    pub fn dropped(&self) -> u64 {
        self.written - self.captured().len() as u64
    }
}

impl Write for SerialOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.written += buf.len() as u64;
        let keep = &buf[buf.len().saturating_sub(SERIAL_CAPTURE_MAX)..];
        if self.buf.len() + keep.len() > 2 * SERIAL_CAPTURE_MAX {
            let cut = (self.buf.len() + keep.len()).saturating_sub(SERIAL_CAPTURE_MAX);
            self.buf.drain(..cut.min(self.buf.len()));
        }
        self.buf.extend_from_slice(keep);
        match self.sink {
            SerialSink::Stdout => std::io::stdout().write_all(buf)?,
            SerialSink::Stderr => std::io::stderr().write_all(buf)?,
            SerialSink::Capture | SerialSink::Null => {}
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self.sink {
            SerialSink::Stdout => std::io::stdout().flush(),
            SerialSink::Stderr => std::io::stderr().flush(),
            SerialSink::Capture | SerialSink::Null => Ok(()),
        }
    }
}

/// What a port write asked the run loop to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortAction {
    /// Nothing more to do: re-enter the guest.
    Continue,
    /// The guest wrote its exit status.
    Exit(u32),
    /// A benchmark marker (`guest::protocol::MARK_PORT`): timestamp it.
    Mark(u32),
    /// Set XMM`n` to `xmm_edit_pattern(n)` through the xstate manager.
    EditXmm(u32),
    /// The guest asks for a snapshot (`SNAPSHOT_PORT`, only decoded when
    /// [`Devices::snapshots`] is set), at its point of that phase or not.
    Snapshot(Option<SnapshotPhase>),
    /// The guest pulsed the reset line (the i8042 reset command 0xFE).
    Reset,
}

/// The outcome of the guest handing over a report.
#[derive(Debug)]
pub enum ReportDelivery {
    /// A valid report.
    Accepted(Box<Report>),
    /// The address or the record was bad; nothing from it is trusted.
    Rejected(String),
}

/// The first `cap` items of a stream, and how many more there were: what a
/// guest can repeat without bound is kept this way.
#[derive(Clone, Debug, Default)]
pub struct FirstN<T> {
    items: Vec<T>,
    dropped: u64,
    cap: usize,
}

impl<T> FirstN<T> {
    /// An empty log keeping at most `cap` items.
    pub fn new(cap: usize) -> Self {
        Self {
            items: Vec::new(),
            dropped: 0,
            cap,
        }
    }

    /// Keep `item` if there is room; count it otherwise.
    pub fn push(&mut self, item: T) {
        if self.items.len() < self.cap {
            self.items.push(item);
        } else {
            self.dropped += 1;
        }
    }

    /// The items kept, in order.
    pub fn items(&self) -> &[T] {
        &self.items
    }

    /// The items kept, taken out.
    pub fn into_items(self) -> Vec<T> {
        self.items
    }

    /// Items pushed after the log was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Every item pushed, kept or not.
    pub fn total(&self) -> u64 {
        self.items.len() as u64 + self.dropped
    }
}

/// `reason`, cut to [`MAX_REASON_LEN`] bytes at a character boundary.
pub fn bounded_reason(mut reason: String) -> String {
    if reason.len() > MAX_REASON_LEN {
        let mut end = MAX_REASON_LEN;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

/// The port bus.
pub struct Devices {
    /// COM1 (unused while [`Devices::shared_com1`] holds it).
    pub serial: Com1,
    /// COM1 shared with the other vCPUs of a PC guest (see
    /// [`Devices::share_com1`]); `None` for the embedded guest.
    pub shared_com1: Option<SharedCom1>,
    /// The last valid report the guest handed over.
    pub report: Option<Box<Report>>,
    /// Valid reports a later one replaced.
    pub reports_dropped: u64,
    /// Why reports were refused: the first [`MAX_REPORT_ERRORS`].
    pub report_errors: FirstN<String>,
    /// Guest requests the VMM refused (an xstate edit the guest's XCR0
    /// cannot hold, ...): the first [`MAX_REFUSED_REQUESTS`] reasons.
    pub refused_requests: FirstN<String>,
    /// What an `in` from [`XSTATE_EDIT_PORT`] returns: the answer to the
    /// last edit request (`guest::protocol::EDIT_STATUS_*`).
    pub edit_status: u32,
    /// Accesses to ports nothing decodes (counted, not fatal, like hardware).
    pub unhandled_ports: u64,
    /// The native side of interleaved repetitions ([`REP_PORT`]); without
    /// it the port decodes nothing and the guest runs each row once.
    pub native: Option<Box<dyn NativeSide>>,
    /// Whether the run can take a snapshot: without, `SNAPSHOT_PORT`
    /// decodes nothing, like any port without a device.
    pub snapshots: bool,
    /// Whether the i8042's command port is decoded (a PC guest's reset,
    /// see [`I8042_RESET`]); the embedded guest's bus leaves it undecoded.
    pub i8042: bool,
}

/// The native side of interleaved repetitions, as the port bus drives it.
///
/// The machine knows nothing of how the host times the guest's workloads:
/// the tool that does (`crate::native::interleave::Interleaver`) implements
/// this, a run carries it in [`Devices::native`], and the caller reads its
/// results back through [`NativeSide::as_any`] when the run has ended.
pub trait NativeSide: Send {
    /// Repetitions each row gets: what an `in` from [`REP_PORT`] answers.
    fn reps(&self) -> u32;
    /// Whether the guest should signal each part on [`PART_PORT`].
    fn wants_parts(&self) -> bool;
    /// The guest ended a repetition; its record is at guest address `addr`.
    /// The vCPU waits in this exit while the native repetition runs.
    fn on_rep(&mut self, mem: &GuestMemoryMmap, addr: u64);
    /// The guest reached a part; its record is at guest address `addr`.
    fn on_part(&mut self, mem: &GuestMemoryMmap, addr: u64);
    /// The implementation, for the caller that made it.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// COM1 decodes eight ports from `SERIAL_PORT`.
const SERIAL_SPAN: u16 = 8;

impl Devices {
    /// A fresh bus: COM1 at reset, polled, no reports.
    pub fn new(sink: SerialSink) -> Self {
        Self::with_serial_irq(sink, SerialIrq::Polled)
    }

    /// A fresh bus whose COM1 raises `irq`.
    pub fn with_serial_irq(sink: SerialSink, irq: SerialIrq) -> Self {
        Self {
            serial: Serial::new(irq, SerialOut::new(sink)),
            shared_com1: None,
            report: None,
            reports_dropped: 0,
            report_errors: FirstN::new(MAX_REPORT_ERRORS),
            refused_requests: FirstN::new(MAX_REFUSED_REQUESTS),
            edit_status: EDIT_STATUS_NONE,
            unhandled_ports: 0,
            native: None,
            snapshots: false,
            i8042: false,
        }
    }

    /// A guest `out`. `data` holds `count * size` bytes for string I/O.
    pub fn port_write(&mut self, mem: &GuestMemoryMmap, port: u16, data: &[u8]) -> PortAction {
        match port {
            p if (SERIAL_PORT..SERIAL_PORT + SERIAL_SPAN).contains(&p) => {
                let offset = (p - SERIAL_PORT) as u8;
                self.com1(|com1| {
                    for &b in data {
                        // A failure (the output's, the IRQ eventfd's)
                        // costs that byte or interrupt; the guest goes on.
                        let _ = com1.write(offset, b);
                    }
                });
                PortAction::Continue
            }
            DEBUG_EXIT_PORT => PortAction::Exit(le_value(data)),
            REP_PORT if self.native.is_some() => {
                // The vCPU waits in this exit while the native repetition
                // runs to its end.
                if let Some(n) = self.native.as_mut() {
                    n.on_rep(mem, u64::from(le_value(data)));
                }
                PortAction::Continue
            }
            PART_PORT if self.native.is_some() => {
                // The vCPU waits in this exit while the native repetition
                // times its next part.
                if let Some(n) = self.native.as_mut() {
                    n.on_part(mem, u64::from(le_value(data)));
                }
                PortAction::Continue
            }
            MARK_PORT => PortAction::Mark(le_value(data)),
            SNAPSHOT_PORT if self.snapshots => PortAction::Snapshot(point_of(le_value(data))),
            XSTATE_EDIT_PORT => PortAction::EditXmm(le_value(data)),
            I8042_COMMAND_PORT if self.i8042 => self.i8042_write(data),
            REPORT_PORT => {
                self.take_report(mem, le_value(data) as u64);
                PortAction::Continue
            }
            REPORT_EXIT_PORT => {
                // The report first: a bad one is recorded as refused and
                // the run still ends with the status the guest gave.
                let (addr, status) = split_report_exit(le_value(data));
                self.take_report(mem, addr);
                PortAction::Exit(status)
            }
            _ => {
                self.unhandled_ports += 1;
                PortAction::Continue
            }
        }
    }

    /// A report handed over at `addr`: kept (replacing an earlier one,
    /// which is counted as dropped) or its refusal recorded.
    pub fn take_report(&mut self, mem: &GuestMemoryMmap, addr: u64) {
        match read_report(mem, addr) {
            ReportDelivery::Accepted(r) => {
                if self.report.replace(r).is_some() {
                    self.reports_dropped += 1;
                }
            }
            ReportDelivery::Rejected(e) => self.report_errors.push(bounded_reason(e)),
        }
    }

    /// A guest `in`: fills `data`.
    pub fn port_read(&mut self, port: u16, data: &mut [u8]) {
        match port {
            p if (SERIAL_PORT..SERIAL_PORT + SERIAL_SPAN).contains(&p) => {
                let offset = (p - SERIAL_PORT) as u8;
                self.com1(|com1| {
                    for b in data.iter_mut() {
                        *b = com1.read(offset);
                    }
                });
            }
            REP_PORT if self.native.is_some() => {
                put_le(data, self.native.as_ref().map_or(1, |n| n.reps()));
            }
            PART_PORT if self.native.is_some() => {
                let wanted = self.native.as_ref().is_some_and(|n| n.wants_parts());
                put_le(data, if wanted { PARTS_WANTED } else { 0 });
            }
            XSTATE_EDIT_PORT => put_le(data, self.edit_status),
            // `vmm` acts on snapshot requests itself (a snapshot taken in
            // the `out`, or none without a snapshot file): a guest at a
            // snapshot point must not wait to be released.
            SNAPSHOT_PORT => put_le(data, SNAPSHOT_SYNC),
            I8042_COMMAND_PORT if self.i8042 => Self::i8042_read(data),
            _ => {
                self.unhandled_ports += 1;
                data.fill(0xff);
            }
        }
    }

    /// The guest's serial output so far: its last [`SERIAL_CAPTURE_MAX`] bytes.
    pub fn serial_output(&self) -> &[u8] {
        self.serial.writer().captured()
    }

    /// A request the VMM refused: the guest's failure, answered to it
    /// (`edit_status`) and recorded for the report.
    pub fn refuse_edit(&mut self, reason: String) {
        self.edit_status = guest::protocol::EDIT_STATUS_REFUSED;
        self.refused_requests.push(bounded_reason(reason));
    }
}

/// The value of a 1-, 2- or 4-byte port write (the last element of a string
/// write), zero-extended.
pub fn le_value(data: &[u8]) -> u32 {
    let mut b = [0u8; 4];
    let n = data.len().min(4);
    b[..n].copy_from_slice(&data[data.len() - n..]);
    u32::from_le_bytes(b)
}

/// Answer a 1-, 2- or 4-byte port read with `value`'s low bytes (bytes past
/// the fourth of a wider read are zero).
fn put_le(data: &mut [u8], value: u32) {
    let v = value.to_le_bytes();
    for (i, b) in data.iter_mut().enumerate() {
        *b = v.get(i).copied().unwrap_or(0);
    }
}

/// Copy a report out of guest memory through bounds-checked accessors and
/// validate it before anything in it is believed.
fn read_report(mem: &GuestMemoryMmap, addr: u64) -> ReportDelivery {
    let mut buf = vec![0u8; Report::SIZE];
    if let Err(e) = mem.read_slice(&mut buf, GuestAddress(addr)) {
        return ReportDelivery::Rejected(format!(
            "report address {addr:#x} (+{} bytes) is not in guest RAM: {e}",
            Report::SIZE
        ));
    }
    match Report::from_bytes(&buf) {
        Ok(r) => ReportDelivery::Accepted(Box::new(r)),
        Err(e) => ReportDelivery::Rejected(format!("report at {addr:#x}: {e}")),
    }
}

#[cfg(test)]
mod tests;
