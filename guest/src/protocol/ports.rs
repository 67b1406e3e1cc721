//! The x86 ports (and the one MMIO address) through which the guest talks
//! to its VMM, and the exit status it ends the run with. Port I/O is the
//! only channel, so the same image runs under `vmm run` and under QEMU
//! (see the table in [`crate::protocol`]).

/// COM1: the 8250 UART the report is printed on.
pub const SERIAL_PORT: u16 = 0x3f8;
/// Debug exit (QEMU `isa-debug-exit` compatible): a 32-bit write ends the run.
pub const DEBUG_EXIT_PORT: u16 = 0xf4;
/// Cloud Hypervisor's ACPI shutdown port (its DSDT's sleep control
/// register): an 8-bit write of [`ACPI_S5_SHUTDOWN`] powers the VM off. The
/// guest writes it after [`DEBUG_EXIT_PORT`], for VMMs that ignore the latter.
pub const ACPI_SHUTDOWN_PORT: u16 = 0x600;
/// SLP_TYP = 5 (S5, soft off) in bits 2..=4, SLP_EN in bit 5.
pub const ACPI_S5_SHUTDOWN: u8 = (5 << 2) | (1 << 5);
/// The i8042 keyboard controller's command port: Firecracker ends the VM on
/// [`I8042_RESET`] there. Written after [`ACPI_SHUTDOWN_PORT`].
pub const I8042_COMMAND_PORT: u16 = 0x64;
/// i8042 command "pulse the CPU reset line".
pub const I8042_RESET: u8 = 0xfe;
/// A 32-bit write hands the VMM the guest-physical address of a [`Report`](crate::protocol::Report).
pub const REPORT_PORT: u16 = 0xf8;
/// Report and exit in one write: the guest-physical address of a
/// [`Report`](crate::protocol::Report) aligned to [`REPORT_EXIT_ALIGN`]
/// (below 4 GiB), ORed with the exit status (`0..=`[`GUEST_STATUS_MAX`],
/// which fits the alignment's six low bits): the VMM takes the report as
/// from [`REPORT_PORT`] and ends the run as [`DEBUG_EXIT_PORT`] would. See
/// [`report_exit_value`].
///
/// Why: each port write leaves the guest for the VMM's process and comes
/// back (~30-50 µs under nested virtualisation); a run that ends after
/// its report pays that once instead of twice. A VMM that ignores this
/// port sees the guest go on to [`DEBUG_EXIT_PORT`] and the shutdown ports.
pub const REPORT_EXIT_PORT: u16 = 0xfc;
/// The alignment [`REPORT_EXIT_PORT`] needs of the report's address: the
/// bits below it carry the exit status.
pub const REPORT_EXIT_ALIGN: u64 = 64;

/// The [`REPORT_EXIT_PORT`] value for a report at `addr` and exit
/// `status`; `None` when `addr` is not [`REPORT_EXIT_ALIGN`]-aligned below
/// 4 GiB or `status` is above [`GUEST_STATUS_MAX`] (send the report and
/// the exit apart then).
pub const fn report_exit_value(addr: u64, status: u32) -> Option<u32> {
    if !addr.is_multiple_of(REPORT_EXIT_ALIGN)
        || addr > u32::MAX as u64
        || status > GUEST_STATUS_MAX
    {
        return None;
    }
    Some(addr as u32 | status)
}

/// Split a [`REPORT_EXIT_PORT`] value into the report's address and the
/// exit status.
pub const fn split_report_exit(value: u32) -> (u64, u32) {
    let low = (REPORT_EXIT_ALIGN - 1) as u32;
    ((value & !low) as u64, value & low)
}

/// Exit benchmark: the PIO target port.
pub const BENCH_PIO_PORT: u16 = 0xf0;
/// Benchmark markers: a write of `i` starts row `i` (its future index in
/// [`Report::results`](crate::protocol::Report::results)), a write of `MARK_END | i` ends it.
pub const MARK_PORT: u16 = 0xec;
/// Set in a [`MARK_PORT`] value that ends a row.
pub const MARK_END: u32 = 0x8000_0000;
/// A write of `r` asks the VMM to set XMM`r & 15` to [`xmm_edit_pattern`].
/// A 32-bit `in` from the same port returns the answer to the last request:
/// [`EDIT_STATUS_DONE`], [`EDIT_STATUS_REFUSED`] or [`EDIT_STATUS_NONE`]
/// (all-ones where nothing decodes the port, e.g. under QEMU).
pub const XSTATE_EDIT_PORT: u16 = 0xe8;
/// [`XSTATE_EDIT_PORT`] read: the last edit request was applied (the
/// register holds the pattern when the guest runs again).
pub const EDIT_STATUS_DONE: u32 = 0;
/// [`XSTATE_EDIT_PORT`] read: the VMM refused the last edit request (the
/// guest's XCR0 cannot hold the state, e.g. SSE is not enabled); nothing
/// changed, and the VMM's report names the refusal. The run goes on.
pub const EDIT_STATUS_REFUSED: u32 = 1;
/// [`XSTATE_EDIT_PORT`] read: no edit was requested yet.
pub const EDIT_STATUS_NONE: u32 = 2;
/// A write asks the VMM to snapshot the VM here (see the module table).
pub const SNAPSHOT_PORT: u16 = 0xe4;
/// Exit benchmark: an unbacked guest-physical address (MMIO exit).
pub const BENCH_MMIO_ADDR: u64 = 0xd000_0000;

/// What the VMM writes into XMM`reg` for an [`XSTATE_EDIT_PORT`] request.
pub const fn xmm_edit_pattern(reg: u32) -> [u8; 16] {
    let mut p = [0u8; 16];
    let mut k = 0;
    while k < 16 {
        p[k] = 0xe0 ^ ((reg as u8 & 15) << 4) ^ k as u8;
        k += 1;
    }
    p
}

/// The highest value a guest may write to [`DEBUG_EXIT_PORT`]: guest
/// statuses are `0..=GUEST_STATUS_MAX` (0 success, 1 a workload check
/// failed, 2 a CPU exception, 3 setup failed, 4..=63 guest-defined). The
/// VMM forwards them as its process exit status; statuses above belong to
/// the VMM (64 its own error, 65 crash, 66 timeout, 67 the guest broke the
/// protocol, 68 usage error), and a guest writing one of those, or anything
/// else above 63, ends the run as a protocol violation (status 67).
pub const GUEST_STATUS_MAX: u32 = 63;

/// The value the guest writes to [`DEBUG_EXIT_PORT`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// Everything ran and every check passed.
    Success = 0,
    /// A workload's known-answer or residual check failed.
    CheckFailed = 1,
    /// A CPU exception in a guest task or in the kernel; see [`FaultRecord`](crate::protocol::FaultRecord).
    Exception = 2,
    /// The guest could not set itself up (bad boot info, CPUID it cannot use, ...).
    SetupFailed = 3,
}

impl ExitStatus {
    /// Decode a value written to [`DEBUG_EXIT_PORT`].
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Success),
            1 => Some(Self::CheckFailed),
            2 => Some(Self::Exception),
            3 => Some(Self::SetupFailed),
            _ => None,
        }
    }

    /// Short description for tables and error messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::CheckFailed => "check failed",
            Self::Exception => "guest exception",
            Self::SetupFailed => "guest setup failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_exit_values_round_trip_every_status() {
        for addr in [0u64, 64, 0x16_a380, 0xffff_ffc0] {
            for status in 0..=GUEST_STATUS_MAX {
                let v = report_exit_value(addr, status).unwrap();
                assert_eq!(split_report_exit(v), (addr, status));
            }
        }
    }

    #[test]
    fn report_exit_values_refuse_what_one_write_cannot_carry() {
        // Misaligned, above 4 GiB, a status the VMM owns.
        assert_eq!(report_exit_value(0x16_a388, 0), None);
        assert_eq!(report_exit_value(1 << 32, 0), None);
        assert_eq!(report_exit_value(0x1000, GUEST_STATUS_MAX + 1), None);
    }

    #[test]
    fn protocol_ports_are_four_aligned_and_clear_of_the_debug_exit() {
        for p in [
            REPORT_PORT,
            REPORT_EXIT_PORT,
            BENCH_PIO_PORT,
            MARK_PORT,
            XSTATE_EDIT_PORT,
            SNAPSHOT_PORT,
        ] {
            assert_eq!(p % 4, 0, "{p:#x}");
            assert!(
                !(DEBUG_EXIT_PORT..DEBUG_EXIT_PORT + 4).contains(&p),
                "{p:#x}"
            );
        }
    }
}
