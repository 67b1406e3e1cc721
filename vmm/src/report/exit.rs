//! The process exit statuses of `vmm`, shared by every subcommand so scripts
//! can tell a VMM failure from a guest crash or a timeout.
//!
//! The space is split in two disjoint ranges:
//!
//! | status | meaning |
//! |--------|---------|
//! | 0..=63 | the guest's own status, forwarded from the debug-exit port (`guest::protocol::GUEST_STATUS_MAX`): 0 success, 1 a workload check failed, 2 a CPU exception in the guest, 3 the guest could not set itself up, 4..=63 guest-defined |
//! | 64 | [`EXIT_VMM_ERROR`] |
//! | 65 | [`EXIT_GUEST_CRASH`] |
//! | 66 | [`EXIT_TIMEOUT`] |
//! | 67 | [`EXIT_PROTOCOL_VIOLATION`] |
//! | 68 | [`EXIT_USAGE`] |
//! | 69 | [`EXIT_SNAPSHOT_MEMORY`] |
//! | 70 | [`EXIT_GUEST_RESET`] |
//! | 71 | [`EXIT_XSTATE_MISMATCH`] |
//!
//! A guest cannot produce 64 and above: a debug-exit value above 63 is
//! itself a protocol violation (67).

/// Process exit status when the VMM itself failed before or while booting.
pub const EXIT_VMM_ERROR: i32 = 64;
/// Process exit status when the guest crashed (triple fault, internal
/// error, every vCPU halted with nothing able to wake it, ...).
pub const EXIT_GUEST_CRASH: i32 = 65;
/// Process exit status when the guest exceeded `--timeout`.
pub const EXIT_TIMEOUT: i32 = 66;
/// Process exit status when the guest broke the guest/VMM protocol: a
/// debug-exit status outside 0..=63, an XCR0 outside the xstate policy.
pub const EXIT_PROTOCOL_VIOLATION: i32 = 67;
/// Process exit status of a command-line usage error (an unknown option, a
/// missing value, a guest command-line word the VMM owns): not 2, which is
/// the guest's CPU-exception status.
pub const EXIT_USAGE: i32 = 68;
/// Process exit status of `vmm restore` when a page of the snapshot's
/// memory failed its checksum (`memory.crc32`, or the section's CRC32 in
/// older files) or could no longer be read from the file: before the first
/// `KVM_RUN`, or while the guest ran (it is stopped). Its own status, not
/// 64 or 65, because neither the VMM's setup nor the guest failed: the
/// file did, and a script should tell that from a guest crash. 69 is the
/// next free status above the VMM's range (sysexits' `EX_UNAVAILABLE`, a
/// coincidence: nothing else here follows sysexits).
pub const EXIT_SNAPSHOT_MEMORY: i32 = 69;
/// Process exit status when the guest reset the machine (a Linux guest's
/// `reboot`, or its `panic=N` after a panic: the i8042 reset command).
pub const EXIT_GUEST_RESET: i32 = 70;
/// Process exit status when a Linux guest's `x86/fpu:` lines differ from
/// vmm's xstate layout for the policy (the report names each field).
pub const EXIT_XSTATE_MISMATCH: i32 = 71;
