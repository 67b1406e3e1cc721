//! The restored guest's serial input: how the harness releases a guest
//! waiting at its snapshot point under a peer ([`guest::protocol::snapshot`]).
//!
//! Both peers feed COM1 from their standard input, but Cloud Hypervisor
//! (`--serial tty`) only when that is a terminal (Firecracker also takes a
//! pipe): so the restoring peer gets the far end of a pseudo-terminal as
//! its stdin, and the harness writes one line to the near end once the
//! peer has resumed. A newline: it is one byte, and a whole line in the
//! terminal's default (canonical) mode, so it is passed on at once.

use std::fs::File;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;

use super::CycleError;

/// A pseudo-terminal: the near end the harness writes, the far end the
/// peer reads as its standard input.
pub(super) struct SerialInput {
    near: File,
    far: Option<OwnedFd>,
}

/// What the harness sends: any byte releases the guest.
const RELEASE: &[u8] = b"\n";

impl SerialInput {
    /// A new pseudo-terminal.
    pub(super) fn open() -> Result<Self, CycleError> {
        Self::open_io().map_err(|e| {
            CycleError::Vmm(format!(
                "no pseudo-terminal for the restored guest's serial input: {e}"
            ))
        })
    }

    fn open_io() -> std::io::Result<Self> {
        let (mut near, mut far) = (-1, -1);
        // SAFETY: openpty(3) writes two descriptors to the two valid
        // `c_int`s; name, termios and window size are optional (null).
        let rc = unsafe {
            libc::openpty(
                &mut near,
                &mut far,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: openpty succeeded: both are open descriptors that
        // nothing else owns.
        let (near, far) = unsafe { (OwnedFd::from_raw_fd(near), OwnedFd::from_raw_fd(far)) };
        // openpty does not mark them close-on-exec: their clones are (and
        // the originals close here), so no other child inherits either end
        // and the peer gets the far end only as its stdin.
        Ok(SerialInput {
            near: File::from(near.try_clone()?),
            far: Some(far.try_clone()?),
        })
    }

    /// The far end, for the peer's stdin (once; after that, null).
    pub(super) fn stdin(&mut self) -> Stdio {
        self.far.take().map_or_else(Stdio::null, Stdio::from)
    }

    /// Release the guest: one line on its serial input.
    pub(super) fn release(&mut self) -> Result<(), CycleError> {
        self.near.write_all(RELEASE).map_err(|e| {
            CycleError::Vmm(format!(
                "cannot send the release byte to the restored guest's serial input: {e}"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// What the harness writes to the near end is read at the far end, as
    /// a peer reads its stdin; neither end leaks into other children.
    #[test]
    fn a_release_reaches_the_far_end() {
        use std::os::fd::AsRawFd;
        let mut s = SerialInput::open().unwrap();
        for fd in [s.near.as_raw_fd(), s.far.as_ref().unwrap().as_raw_fd()] {
            let flags = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
            let flags = flags
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .unwrap();
            let flags = u32::from_str_radix(flags.trim(), 8).unwrap();
            assert_ne!(flags & libc::O_CLOEXEC as u32, 0, "fd {fd}: {flags:o}");
        }
        let far = s.far.take().unwrap();
        s.release().unwrap();
        let mut got = [0u8; 1];
        File::from(far).read_exact(&mut got).unwrap();
        assert_eq!(&got, RELEASE);
    }
}
