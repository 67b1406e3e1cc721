//! The process exit statuses of `vmm`, shared by every subcommand so scripts
//! can tell a VMM failure from a guest crash or a timeout.

/// Process exit status when the VMM itself failed before or while booting.
pub const EXIT_VMM_ERROR: i32 = 64;
/// Process exit status when the guest crashed (triple fault, internal error, ...).
pub const EXIT_GUEST_CRASH: i32 = 65;
/// Process exit status when the guest exceeded `--timeout`.
pub const EXIT_TIMEOUT: i32 = 66;
