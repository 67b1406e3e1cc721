//! COM1's registers as a snapshot's `meta.serial` keeps them.

use serde::{Deserialize, Serialize};

/// The 8250 UART's registers (vm-superio's `SerialState`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SerialRegs {
    /// DLL.
    pub baud_divisor_low: u8,
    /// DLM.
    pub baud_divisor_high: u8,
    /// IER.
    pub interrupt_enable: u8,
    /// IIR.
    pub interrupt_identification: u8,
    /// LCR.
    pub line_control: u8,
    /// LSR.
    pub line_status: u8,
    /// MCR.
    pub modem_control: u8,
    /// MSR (the UART's modem status register).
    pub modem_status: u8,
    /// SCR.
    pub scratch: u8,
    /// Bytes received and not yet read by the guest.
    pub in_buffer: Vec<u8>,
}

/// `From<&$from> for $to`, copying the UART's registers and its input
/// buffer field by field: one list for both directions.
macro_rules! serial_regs_from {
    ($from:ty => $to:ty) => {
        impl From<&$from> for $to {
            fn from(s: &$from) -> Self {
                Self {
                    baud_divisor_low: s.baud_divisor_low,
                    baud_divisor_high: s.baud_divisor_high,
                    interrupt_enable: s.interrupt_enable,
                    interrupt_identification: s.interrupt_identification,
                    line_control: s.line_control,
                    line_status: s.line_status,
                    modem_control: s.modem_control,
                    modem_status: s.modem_status,
                    scratch: s.scratch,
                    in_buffer: s.in_buffer.clone(),
                }
            }
        }
    };
}

serial_regs_from!(vm_superio::serial::SerialState => SerialRegs);
serial_regs_from!(SerialRegs => vm_superio::serial::SerialState);
