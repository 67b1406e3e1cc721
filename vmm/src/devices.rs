//! The guest's devices: COM1 (vm-superio 8250), the debug-exit port and the
//! report port of `guest::protocol`. Everything else on the port bus reads as
//! all-ones and ignores writes, as on a PC with nothing decoding the address.

use std::io::Write;

use guest::protocol::{
    Report, DEBUG_EXIT_PORT, MARK_PORT, REPORT_PORT, SERIAL_PORT, XSTATE_EDIT_PORT,
};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vm_superio::{Serial, Trigger};

/// Serial interrupts go nowhere: the guest polls, and no irqchip exists.
pub struct NoInterrupt;

impl Trigger for NoInterrupt {
    type E = std::convert::Infallible;
    fn trigger(&self) -> Result<(), Self::E> {
        Ok(())
    }
}

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

/// A `Write` for the UART that sends bytes to the chosen sink and always
/// keeps a copy, so the outcome can show what the guest printed.
pub struct SerialOut {
    sink: SerialSink,
    /// Everything the guest wrote.
    pub captured: Vec<u8>,
}

impl Write for SerialOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.captured.extend_from_slice(buf);
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
#[derive(Debug)]
pub enum PortAction {
    /// Nothing more to do: re-enter the guest.
    Continue,
    /// The guest wrote its exit status.
    Exit(u32),
    /// A benchmark marker (`guest::protocol::MARK_PORT`): timestamp it.
    Mark(u32),
    /// Set XMM`n` to `xmm_edit_pattern(n)` through the xstate manager.
    EditXmm(u32),
}

/// The outcome of the guest handing over a report.
#[derive(Debug)]
pub enum ReportDelivery {
    /// A valid report.
    Accepted(Box<Report>),
    /// The address or the record was bad; nothing from it is trusted.
    Rejected(String),
}

/// The port bus.
pub struct Devices {
    /// COM1.
    pub serial: Serial<NoInterrupt, vm_superio::serial::NoEvents, SerialOut>,
    /// Every report the guest handed over, in order.
    pub reports: Vec<ReportDelivery>,
    /// Accesses to ports nothing decodes (counted, not fatal, like hardware).
    pub unhandled_ports: u64,
}

/// COM1 decodes eight ports from `SERIAL_PORT`.
const SERIAL_SPAN: u16 = 8;

impl Devices {
    /// A fresh bus: COM1 at reset, no reports.
    pub fn new(sink: SerialSink) -> Self {
        Self {
            serial: Serial::new(
                NoInterrupt,
                SerialOut {
                    sink,
                    captured: Vec::new(),
                },
            ),
            reports: Vec::new(),
            unhandled_ports: 0,
        }
    }

    /// A guest `out`. `data` holds `count * size` bytes for string I/O.
    pub fn port_write(&mut self, mem: &GuestMemoryMmap, port: u16, data: &[u8]) -> PortAction {
        match port {
            p if (SERIAL_PORT..SERIAL_PORT + SERIAL_SPAN).contains(&p) => {
                let offset = (p - SERIAL_PORT) as u8;
                for &b in data {
                    // The 8250 model never fails for a trigger that cannot.
                    let _ = self.serial.write(offset, b);
                }
                PortAction::Continue
            }
            DEBUG_EXIT_PORT => PortAction::Exit(le_value(data)),
            MARK_PORT => PortAction::Mark(le_value(data)),
            XSTATE_EDIT_PORT => PortAction::EditXmm(le_value(data)),
            REPORT_PORT => {
                let delivery = read_report(mem, le_value(data) as u64);
                self.reports.push(delivery);
                PortAction::Continue
            }
            _ => {
                self.unhandled_ports += 1;
                PortAction::Continue
            }
        }
    }

    /// A guest `in`: fills `data`.
    pub fn port_read(&mut self, port: u16, data: &mut [u8]) {
        match port {
            p if (SERIAL_PORT..SERIAL_PORT + SERIAL_SPAN).contains(&p) => {
                let offset = (p - SERIAL_PORT) as u8;
                for b in data.iter_mut() {
                    *b = self.serial.read(offset);
                }
            }
            _ => {
                self.unhandled_ports += 1;
                data.fill(0xff);
            }
        }
    }

    /// The guest's serial output so far.
    pub fn serial_output(&self) -> &[u8] {
        &self.serial.writer().captured
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
