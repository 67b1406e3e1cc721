//! What a stock PC guest (Linux) needs of the port bus beyond COM1's
//! registers: COM1's interrupt line, and the i8042 keyboard controller's
//! reset, the way Linux reboots a PC without ACPI (`reboot=k`, and
//! `panic=N` after a panic).
//!
//! The embedded guest polls COM1 and never touches the i8042: its bus
//! decodes neither ([`SerialIrq::Polled`], [`Devices::i8042`] off), so its
//! exits stay what `vmm bench exits` measured.

use vm_superio::Trigger;
use vmm_sys_util::eventfd::EventFd;

use super::{Devices, PortAction};

/// The i8042's command/status port.
pub const I8042_COMMAND_PORT: u16 = 0x64;
/// The i8042 command that pulses the CPU's reset line.
pub const I8042_RESET: u8 = 0xfe;

/// COM1's interrupt: none (the guest polls), or an eventfd KVM injects as
/// IRQ 4 through the in-kernel irqchip (`KVM_IRQFD`).
pub enum SerialIrq {
    /// No interrupt: the embedded guest polls, and no irqchip may exist.
    Polled,
    /// Signalled on every interrupt condition the 8250 model raises.
    Line(EventFd),
}

impl Trigger for SerialIrq {
    type E = std::io::Error;
    fn trigger(&self) -> Result<(), Self::E> {
        match self {
            SerialIrq::Polled => Ok(()),
            SerialIrq::Line(evt) => evt.write(1),
        }
    }
}

impl Devices {
    /// An `out` to the i8042 command port: the reset command ends the run,
    /// anything else is ignored (no keyboard or mouse is attached).
    pub(super) fn i8042_write(&mut self, data: &[u8]) -> PortAction {
        if data.first() == Some(&I8042_RESET) {
            PortAction::Reset
        } else {
            PortAction::Continue
        }
    }

    /// An `in` from the i8042 status port: both buffers empty, so a guest
    /// waiting to send its reset command (Linux's `kb_wait`) sends it at
    /// once, and its i8042 driver finds no device to read.
    pub(super) fn i8042_read(data: &mut [u8]) {
        data.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::SerialSink;
    use vm_memory::{GuestAddress, GuestMemoryMmap};

    /// With the i8042 decoded, 0xFE on port 0x64 resets and other commands
    /// are ignored; the status reads empty. Without, the port decodes
    /// nothing (all ones, counted), as it always did.
    #[test]
    fn i8042_reset_only_on_a_pc_bus() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let mut pc = Devices::new(SerialSink::Null);
        pc.i8042 = true;
        assert_eq!(pc.port_write(&mem, 0x64, &[0xfe]), PortAction::Reset);
        assert_eq!(pc.port_write(&mem, 0x64, &[0xad]), PortAction::Continue);
        let mut status = [0xffu8];
        pc.port_read(0x64, &mut status);
        assert_eq!((status, pc.unhandled_ports), ([0], 0));

        let mut plain = Devices::new(SerialSink::Null);
        assert_eq!(plain.port_write(&mem, 0x64, &[0xfe]), PortAction::Continue);
        plain.port_read(0x64, &mut status);
        assert_eq!((status, plain.unhandled_ports), ([0xff], 2));
    }

    /// A line IRQ signals its eventfd when the guest enables the
    /// transmitter-empty interrupt (what Linux's 8250 driver does to send).
    #[test]
    fn serial_irq_line_signals_its_eventfd() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let mut d =
            Devices::with_serial_irq(SerialSink::Null, SerialIrq::Line(evt.try_clone().unwrap()));
        // IER: THR empty interrupt.
        d.port_write(&mem, guest::protocol::SERIAL_PORT + 1, &[0x02]);
        assert_eq!(evt.read().unwrap(), 1);
    }
}
