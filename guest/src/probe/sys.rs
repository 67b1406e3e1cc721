//! The few Linux system calls the probe makes, through `syscall` (no
//! libc): each returns the kernel's result, a negative errno on failure.

use core::arch::asm;

/// `write(2)`.
const SYS_WRITE: usize = 1;
/// `read(2)`.
const SYS_READ: usize = 0;
/// `close(2)`.
const SYS_CLOSE: usize = 3;
/// `exit(2)`.
const SYS_EXIT: usize = 60;
/// `mount(2)`.
const SYS_MOUNT: usize = 165;
/// `reboot(2)`.
const SYS_REBOOT: usize = 169;
/// `ioperm(2)`.
const SYS_IOPERM: usize = 173;
/// `clock_gettime(2)`.
const SYS_CLOCK_GETTIME: usize = 228;
/// `openat(2)`.
const SYS_OPENAT: usize = 257;

/// `openat`'s directory for a path relative to the working directory.
const AT_FDCWD: isize = -100;
/// `CLOCK_MONOTONIC`.
const CLOCK_MONOTONIC: usize = 1;

/// A system call with up to five arguments.
///
/// # Safety
///
/// The arguments must be what call `n` expects: pointers valid for the
/// lengths it reads or writes.
unsafe fn syscall5(n: usize, a: [usize; 5]) -> isize {
    let ret: isize;
    // SAFETY: the kernel reads and writes only what the caller's
    // arguments name; `syscall` clobbers rcx and r11 and nothing else.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// `Err(errno)` for a negative result.
fn check(ret: isize) -> Result<usize, isize> {
    if ret < 0 {
        Err(-ret)
    } else {
        Ok(ret as usize)
    }
}

/// Writes all of `bytes` to `fd`.
pub fn write_all(fd: usize, mut bytes: &[u8]) -> Result<(), isize> {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is valid for its length.
        let n = check(unsafe {
            syscall5(SYS_WRITE, [fd, bytes.as_ptr() as usize, bytes.len(), 0, 0])
        })?;
        if n == 0 {
            return Err(0);
        }
        bytes = &bytes[n..];
    }
    Ok(())
}

/// Reads the whole file `path` (NUL-terminated) into `buf`; returns the
/// bytes read (the file is cut at `buf`'s length).
pub fn read_file(path: &[u8], buf: &mut [u8]) -> Result<usize, isize> {
    assert_eq!(path.last(), Some(&0));
    // SAFETY: `path` is NUL-terminated; O_RDONLY (0).
    let fd = check(unsafe {
        syscall5(
            SYS_OPENAT,
            [AT_FDCWD as usize, path.as_ptr() as usize, 0, 0, 0],
        )
    })?;
    let mut len = 0;
    let result = loop {
        let rest = &mut buf[len..];
        if rest.is_empty() {
            break Ok(len);
        }
        // SAFETY: `rest` is valid for writes of its length.
        match check(unsafe {
            syscall5(SYS_READ, [fd, rest.as_mut_ptr() as usize, rest.len(), 0, 0])
        }) {
            Ok(0) => break Ok(len),
            Ok(n) => len += n,
            Err(e) => break Err(e),
        }
    };
    // SAFETY: closes the descriptor opened above.
    let _ = unsafe { syscall5(SYS_CLOSE, [fd, 0, 0, 0, 0]) };
    result
}

/// `mount("proc", "/proc", "proc", 0, NULL)`.
pub fn mount_proc() -> Result<(), isize> {
    let (src, dir, fs) = (b"proc\0", b"/proc\0", b"proc\0");
    // SAFETY: three NUL-terminated strings, no data.
    check(unsafe {
        syscall5(
            SYS_MOUNT,
            [
                src.as_ptr() as usize,
                dir.as_ptr() as usize,
                fs.as_ptr() as usize,
                0,
                0,
            ],
        )
    })
    .map(drop)
}

/// `ioperm(from, num, 1)`: lets this process use ports `from..from+num`.
pub fn ioperm(from: u16, num: u16) -> Result<(), isize> {
    // SAFETY: no memory is passed.
    check(unsafe { syscall5(SYS_IOPERM, [from.into(), num.into(), 1, 0, 0]) }).map(drop)
}

/// `CLOCK_MONOTONIC` in nanoseconds (0 if the call fails).
pub fn monotonic_ns() -> u64 {
    let mut ts = [0i64; 2];
    // SAFETY: `ts` is a `struct timespec` (two 64-bit fields).
    let ret = unsafe {
        syscall5(
            SYS_CLOCK_GETTIME,
            [CLOCK_MONOTONIC, ts.as_mut_ptr() as usize, 0, 0, 0],
        )
    };
    if ret < 0 {
        return 0;
    }
    (ts[0] as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts[1] as u64)
}

/// `reboot(LINUX_REBOOT_CMD_RESTART)`: returns only on failure, with the
/// errno.
pub fn reboot_restart() -> isize {
    const MAGIC1: usize = 0xfee1_dead;
    const MAGIC2: usize = 672_274_793;
    const CMD_RESTART: usize = 0x0123_4567;
    // SAFETY: no memory is passed.
    let ret = unsafe { syscall5(SYS_REBOOT, [MAGIC1, MAGIC2, CMD_RESTART, 0, 0]) };
    -ret
}

/// `exit(status)`.
pub fn exit(status: usize) -> ! {
    // SAFETY: no memory is passed; the call does not return.
    unsafe {
        syscall5(SYS_EXIT, [status, 0, 0, 0, 0]);
    }
    loop {
        core::hint::spin_loop();
    }
}
