//! SIGINT/SIGTERM/SIGHUP cleanup: the temporary files being written are
//! removed before the signal ends the process.

use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Once;

use super::sys::c_path;

/// Temporary files being written, as C paths the signal handler can
/// `unlink`. A slot's string is leaked when it is freed (a few dozen bytes
/// per write), so a handler running on another thread never reads freed
/// memory.
pub(super) static SLOTS: [AtomicPtr<libc::c_char>; 8] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; 8];

/// The signals that remove the temporary files before ending the process.
pub(super) const CLEANUP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Record a temporary file for the signal handler; `None` when all slots
/// are taken (more than 8 writes at once in one process: the extra files
/// are then only cleaned up by the next write's stale-file sweep).
pub(super) fn register(path: &Path) -> Option<usize> {
    let c = c_path(path).ok()?;
    let ptr = c.into_raw();
    for (i, slot) in SLOTS.iter().enumerate() {
        if slot
            .compare_exchange(
                std::ptr::null_mut(),
                ptr,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
        {
            return Some(i);
        }
    }
    // SAFETY: `ptr` came from `CString::into_raw` above and was never shared.
    drop(unsafe { CString::from_raw(ptr) });
    None
}

/// Forget slot `i` (its string is leaked, see [`SLOTS`]).
pub(super) fn unregister(i: usize) {
    SLOTS[i].store(std::ptr::null_mut(), Ordering::SeqCst);
}

/// The handler of [`CLEANUP_SIGNALS`]: unlink every temporary file being
/// written, then end the process by the same signal with its default
/// action, as if the handler had not been there. Only async-signal-safe
/// calls (`unlink`, `signal`, `raise`).
pub(super) extern "C" fn remove_temporaries_and_end(sig: libc::c_int) {
    for slot in &SLOTS {
        let p = slot.load(Ordering::SeqCst);
        if !p.is_null() {
            // SAFETY: a non-null slot holds a leaked, NUL-terminated CString
            // that is never freed.
            unsafe { libc::unlink(p) };
        }
    }
    // SAFETY: restoring the default action and re-raising are
    // async-signal-safe; the signal is delivered (and ends the process)
    // once this handler returns.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Install the handler that removes the temporary files being written
/// before SIGINT, SIGTERM or SIGHUP end the process, once.
/// A signal that is ignored (`nohup`, a background job's SIGINT) or already
/// has a handler of someone else's keeps it.
///
/// SIGXFSZ (a write past `ulimit -f`), whose default action kills the
/// process mid-write and leaves the temporary file, is ignored from then on
/// unless someone else handles it: the write fails with `EFBIG` instead, and
/// the failure is reported like any other.
pub fn install_signal_cleanup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: an all-zero sigaction is a valid value to read into.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reading the current action into a valid out-pointer.
        let read = unsafe { libc::sigaction(libc::SIGXFSZ, std::ptr::null(), &mut old) };
        if read == 0 && old.sa_sigaction == libc::SIG_DFL {
            // SAFETY: ignoring a signal installs no code.
            unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        }
        for sig in CLEANUP_SIGNALS {
            // SAFETY: an all-zero sigaction is a valid value to read into.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: reading the current action into a valid out-pointer.
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                continue;
            }
            // SAFETY: an all-zero sigaction is valid; the fields are set below.
            let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
            let handler: extern "C" fn(libc::c_int) = remove_temporaries_and_end;
            new.sa_sigaction = handler as libc::sighandler_t;
            new.sa_flags = libc::SA_RESTART;
            // SAFETY: `new.sa_mask` is a valid sigset_t to fill.
            unsafe { libc::sigfillset(&mut new.sa_mask) };
            // SAFETY: the handler only makes async-signal-safe calls; `new`
            // is valid for the call.
            unsafe { libc::sigaction(sig, &new, std::ptr::null_mut()) };
        }
    });
}
