//! COM1 output from CPL3, batched into as few VM exits as possible.
//!
//! Every port write from CPL3 is a VM exit (~31 µs on the development host),
//! so text is collected in a buffer and written with one `rep outsb` per
//! flush: KVM can hand a string port write to the VMM as one exit with a
//! count. The development host's kvm_pvm does not: there each byte is an
//! exit (counted in the VMM's exit totals), which is why a `quiet` guest
//! prints nothing it need not. The UART is not programmed and LSR is not
//! polled for output: the 8250 models of vm-superio and QEMU accept THR
//! writes immediately at their reset configuration. Input is read only at
//! a snapshot point ([`read_byte`]).

use core::fmt;
use guest::protocol::SERIAL_PORT;

/// Bytes a [`Console`] collects before it must flush.
pub const CONSOLE_BUFFER: usize = 1024;

/// A buffered writer to COM1. Flushes when full, on [`Console::flush`] and
/// when dropped; callers flush at the end of each block they print.
pub struct Console {
    buf: [u8; CONSOLE_BUFFER],
    len: usize,
}

impl Console {
    pub const fn new() -> Self {
        Console {
            buf: [0; CONSOLE_BUFFER],
            len: 0,
        }
    }

    /// Write the collected bytes to COM1 in one string port write.
    pub fn flush(&mut self) {
        write_bytes(&self.buf[..self.len]);
        self.len = 0;
    }

    fn push(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.len == CONSOLE_BUFFER {
                self.flush();
            }
            let n = bytes.len().min(CONSOLE_BUFFER - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            bytes = &bytes[n..];
        }
    }
}

impl Default for Console {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Write `bytes` to COM1 with a single `rep outsb`.
pub fn write_bytes(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    // SAFETY: the TSS I/O bitmap grants CPL3 every port; `rep outsb` reads
    // exactly `bytes.len()` bytes from `bytes` (DF is clear per the Rust
    // ABI) and touches no other memory.
    unsafe {
        core::arch::asm!(
            "rep outsb",
            in("dx") SERIAL_PORT,
            inout("rsi") bytes.as_ptr() => _,
            inout("rcx") bytes.len() => _,
            options(nostack, readonly, preserves_flags)
        );
    }
}

/// The line status register's offset from [`SERIAL_PORT`], and its
/// data-ready bit.
const LSR: u16 = 5;
const LSR_DATA_READY: u8 = 1;

/// One byte from COM1's input, if one has arrived (LSR data ready; the
/// receive buffer at the reset configuration's DLAB = 0).
pub fn read_byte() -> Option<u8> {
    (inb(SERIAL_PORT + LSR) & LSR_DATA_READY != 0).then(|| inb(SERIAL_PORT))
}

/// An 8-bit `in` from CPL3 (one VM exit).
fn inb(port: u16) -> u8 {
    let value: u8;
    // SAFETY: the TSS I/O bitmap (and IOPL=3) grants CPL3 every port; an
    // `in` touches no memory.
    unsafe {
        core::arch::asm!("in al, dx", in("dx") port, out("al") value,
            options(nostack, nomem, preserves_flags));
    }
    value
}
