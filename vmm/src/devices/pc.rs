//! What a stock PC guest (Linux) needs of the port bus beyond COM1's
//! registers: COM1's interrupt line, and the i8042 keyboard controller's
//! reset, the way Linux reboots a PC without ACPI (`reboot=k`, and
//! `panic=N` after a panic).
//!
//! With several vCPUs, Linux drives COM1 from whichever CPU it runs on:
//! one CPU enables the transmit interrupt, another takes it and reads the
//! interrupt identification. Every vCPU's bus then reaches the one COM1
//! behind a lock ([`Devices::share_com1`], [`Devices::pc_ap`]), and each
//! decodes the i8042 (a panic on an AP resets the machine too).
//!
//! The embedded guest polls COM1 and never touches the i8042: its bus
//! decodes neither ([`SerialIrq::Polled`], [`Devices::i8042`] off), and
//! each of its vCPUs keeps a COM1 of its own, so its exits stay what
//! `vmm bench exits` measured.

use std::sync::{Arc, Mutex, PoisonError};

use vm_superio::serial::NoEvents;
use vm_superio::{Serial, Trigger};
use vmm_sys_util::eventfd::EventFd;

use super::{Devices, PortAction, SerialOut, SerialSink};

/// The 8250 model of COM1.
pub type Com1 = Serial<SerialIrq, NoEvents, SerialOut>;
/// COM1 reached by every vCPU of a PC guest.
pub type SharedCom1 = Arc<Mutex<Com1>>;

/// The i8042's command/status port.
pub const I8042_COMMAND_PORT: u16 = 0x64;
/// The i8042 command that pulses the CPU's reset line.
pub const I8042_RESET: u8 = 0xfe;

/// COM1's interrupt: none (the guest polls), or an eventfd KVM injects as
/// IRQ 4 through the in-kernel irqchip (`KVM_IRQFD`).
pub enum SerialIrq {
    /// No interrupt: the embedded guest polls, and there is no PIC or
    /// IOAPIC to raise one (at most the vCPUs' LAPICs).
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

    /// Move COM1 (its registers, its IRQ line, its output) behind a lock
    /// this bus and every AP's ([`Devices::pc_ap`]) reach; this bus keeps
    /// a polled COM1 with nothing written in its place until
    /// [`Devices::unshare_com1`].
    pub fn share_com1(&mut self) -> SharedCom1 {
        let spare = Serial::new(
            SerialIrq::Polled,
            SerialOut::new(self.serial.writer().sink()),
        );
        let com1 = std::mem::replace(&mut self.serial, spare);
        let shared = Arc::new(Mutex::new(com1));
        self.shared_com1 = Some(Arc::clone(&shared));
        shared
    }

    /// Take the shared COM1 back (the vCPUs have stopped), with what the
    /// guest wrote through any of them; the APs' buses keep a polled one
    /// with nothing written.
    pub fn unshare_com1(&mut self) {
        if let Some(shared) = self.shared_com1.take() {
            let mut com1 = shared.lock().unwrap_or_else(PoisonError::into_inner);
            let sink = com1.writer().sink();
            let spare = Serial::new(SerialIrq::Polled, SerialOut::new(sink));
            self.serial = std::mem::replace(&mut *com1, spare);
        }
    }

    /// The bus of a PC guest's application processor: the boot
    /// processor's COM1 ([`Devices::share_com1`]) and the i8042 reset.
    pub fn pc_ap(sink: SerialSink, com1: SharedCom1) -> Self {
        let mut devices = Devices::new(sink);
        devices.shared_com1 = Some(com1);
        devices.i8042 = true;
        devices
    }

    /// Run `f` on COM1: the shared one when there is one, else this bus's.
    pub(super) fn com1<R>(&mut self, f: impl FnOnce(&mut Com1) -> R) -> R {
        match &self.shared_com1 {
            Some(shared) => f(&mut shared.lock().unwrap_or_else(PoisonError::into_inner)),
            None => f(&mut self.serial),
        }
    }

    /// COM1's registers, the shared COM1's while the vCPUs share it: what
    /// a snapshot keeps of the UART.
    pub fn com1_state(&self) -> vm_superio::serial::SerialState {
        self.read_com1(Com1::state)
    }

    /// What the guest wrote to COM1 (the kept tail), through the shared
    /// COM1 while the vCPUs share it.
    pub fn com1_output(&self) -> Vec<u8> {
        self.read_com1(|c| c.writer().captured().to_vec())
    }

    /// `f` of COM1 as the guest sees it: the shared one when there is one.
    fn read_com1<R>(&self, f: impl FnOnce(&Com1) -> R) -> R {
        match &self.shared_com1 {
            Some(shared) => f(&shared.lock().unwrap_or_else(PoisonError::into_inner)),
            None => f(&self.serial),
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

    /// A PC guest's APs reach the boot processor's COM1: a register one
    /// vCPU writes another reads, the interrupt line is the boot
    /// processor's, every vCPU's bytes end up in one output, which the
    /// boot processor's bus holds again once unshared; each AP decodes
    /// the i8042 reset.
    #[test]
    fn a_pc_guests_vcpus_share_one_com1() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let mut bsp =
            Devices::with_serial_irq(SerialSink::Null, SerialIrq::Line(evt.try_clone().unwrap()));
        bsp.i8042 = true;
        let port = guest::protocol::SERIAL_PORT;
        bsp.port_write(&mem, port, b"a");
        let com1 = bsp.share_com1();
        let mut ap = Devices::pc_ap(SerialSink::Null, com1);
        // The AP enables the transmit interrupt: the BSP's line fires,
        // and the BSP reads the interrupt enable register back.
        ap.port_write(&mem, port + 1, &[0x02]);
        assert_eq!(evt.read().unwrap(), 1);
        let mut ier = [0u8];
        bsp.port_read(port + 1, &mut ier);
        assert_eq!(ier, [0x02]);
        ap.port_write(&mem, port, b"b");
        bsp.port_write(&mem, port, b"c");
        assert_eq!(ap.port_write(&mem, 0x64, &[0xfe]), PortAction::Reset);
        bsp.unshare_com1();
        assert_eq!(bsp.serial_output(), b"abc");
        assert!(ap.serial_output().is_empty());
        // Unshared, the BSP's COM1 is its own again.
        bsp.port_write(&mem, port, b"d");
        assert_eq!(bsp.serial_output(), b"abcd");
    }
}
