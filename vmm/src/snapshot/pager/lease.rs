//! A read lease on the snapshot file (`fcntl(F_SETLEASE, F_RDLCK)`) while
//! its pages are copied in on demand: the kernel then makes whoever opens
//! the file for writing, or truncates it, wait until the lease is given up
//! (closing the file does), or fails them with `EAGAIN` when they asked not
//! to block. So the bytes the pager reads are the bytes the restore
//! started from, without copying the whole file first.
//!
//! A lease is refused when the file is already open for writing (then
//! nothing could hold its bytes still), to a user who does not own it
//! (without `CAP_LEASE`), and on file systems without leases; the pages are
//! then read up front ([`super::PageSource::fill`]). If the holder does not
//! give it up within `/proc/sys/fs/lease-break-time` (45 s by default) the
//! kernel breaks it; a page read after that is still checked against its
//! CRC32, so a change then is a named failure, never the guest's.

use std::fs::File;
use std::os::fd::AsRawFd;

/// Take a read lease on `file` (opened read-only), which lasts until it is
/// closed.
///
/// The lease's break notice is `SIGIO`, whose default action would end
/// the process: it is ignored from here on (`vmm` uses no `SIGIO`; the
/// notice only says that someone waits, and the pager ends the wait by
/// finishing).
///
/// # Errors
/// The kernel's refusal (`EAGAIN`: open for writing elsewhere; `EACCES`:
/// not the owner; `EINVAL`: no leases here).
pub fn take_lease(file: &File) -> std::io::Result<()> {
    // SAFETY: setting SIGIO's disposition to "ignore" installs no handler
    // and touches no memory; no part of vmm relies on SIGIO.
    if unsafe { libc::signal(libc::SIGIO, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: F_SETLEASE on a descriptor `file` owns; no pointer is passed.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
