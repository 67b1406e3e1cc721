//! `linux-probe`: a static Linux user program, run as `/init` (pid 1) of
//! a stock Linux guest by `vmm/tests/linux_probe.rs` (docs/run.md, "A
//! stock Linux guest").
//!
//! It mounts `/proc` and prints, on its standard output (the console):
//!
//! - `VMM-PROBE flags ...`: the `flags` line of `/proc/cpuinfo` (what
//!   Linux shows of the guest's CPUID);
//! - `VMM-PROBE xcr0 0x...`: its own XGETBV(0), or `none` when
//!   CPUID.1:ECX.OSXSAVE is clear;
//! - `VMM-PROBE checksum 0x... avx2|sse2`: the
//!   [`guest::linux_probe`] checksum, through the AVX2 loop when CPUID
//!   and XCR0 offer AVX2, else the SSE2 loop; half-way through, the loop
//!   writes a plain snapshot request to port 0xe4 (after `ioperm`), where
//!   `vmm` with a snapshot file saves the guest;
//! - `VMM-PROBE loop-us N`: how long the loop took;
//! - `VMM-PROBE done`;
//!
//! and reboots (`LINUX_REBOOT_CMD_RESTART`), so the run ends with
//! `reset`. A failed system call prints `VMM-PROBE error WHAT ERRNO` and
//! the program still reboots; should the reboot itself fail, it exits,
//! and the kernel's panic for a dead init resets the machine
//! (`panic=-1`).
//!
//! No libc: `_start` below, system calls in [`sys`], static non-PIE link
//! (`guest/build.rs`), built and embedded by `vmm/build.rs` with the
//! feature `linux-probe`.
#![no_std]
#![no_main]

// The C symbols the compiler calls (`memcpy`, `memset`, `bcmp`, ...):
// the guest kernel's, which need nothing but SSE2 and CPL3.
#[path = "../kernel/libc.rs"]
#[allow(dead_code)]
mod libc;
mod sys;

use core::fmt::Write;
use guest::linux_probe::{self, Block, Path, Request, LANES, PROBE_BLOCKS, PROBE_ROUNDS};
use guest::protocol::SNAPSHOT_PORT;
use guest::workloads::CpuFeatures;

core::arch::global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "and rsp, -16",
    "call {main}",
    "ud2",
    main = sym probe_main,
);

/// Standard output.
const STDOUT: usize = 1;

/// A line being formatted on the stack, written out whole.
struct Line {
    buf: [u8; 4096],
    len: usize,
}

impl Line {
    fn new() -> Self {
        Line {
            buf: [0; 4096],
            len: 0,
        }
    }

    /// Writes the line and a newline to standard output.
    fn emit(mut self) {
        if self.len < self.buf.len() {
            self.buf[self.len] = b'\n';
            self.len += 1;
        }
        // Nowhere to report a console that does not take the line.
        let _ = sys::write_all(STDOUT, &self.buf[..self.len]);
    }
}

impl Write for Line {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(self.buf.len() - 1 - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Prints one `VMM-PROBE` line.
macro_rules! say {
    ($($arg:tt)*) => {{
        let mut line = Line::new();
        let _ = write!(line, "VMM-PROBE ");
        let _ = write!(line, $($arg)*);
        line.emit();
    }};
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    say!("error panic {}", info.message());
    reboot()
}

/// Reboots; never returns (see the crate's doc for a failing reboot).
fn reboot() -> ! {
    let errno = sys::reboot_restart();
    say!("error reboot {errno}");
    sys::exit(1)
}

/// The program, entered from `_start` on an aligned stack.
extern "C" fn probe_main() -> ! {
    if let Err(what) = probe() {
        say!("error {} {}", what.0, what.1);
    }
    reboot()
}

/// A failed system call: what and its errno.
struct Failed(&'static str, isize);

/// Everything between start-up and the reboot.
fn probe() -> Result<(), Failed> {
    sys::mount_proc().map_err(|e| Failed("mount-proc", e))?;
    // The request port: 4 ports for the 32-bit `out`.
    sys::ioperm(SNAPSHOT_PORT, 4).map_err(|e| Failed("ioperm", e))?;
    print_flags()?;
    let cpuid1 = xstate::info::cpuid(1, 0);
    let features = CpuFeatures::detect();
    if cpuid1.ecx & xstate::info::leaf_1_ecx::OSXSAVE != 0 {
        say!("xcr0 {:#x}", features.xcr0);
    } else {
        say!("xcr0 none");
    }
    let mut data: [Block; PROBE_BLOCKS] = [[0; LANES]; PROBE_BLOCKS];
    linux_probe::fill(&mut data);
    let path = Path::for_cpu(&features);
    let t0 = sys::monotonic_ns();
    // SAFETY: ioperm gave this process ports 0xe4-0xe7; the write is a
    // snapshot request to the VMM, which ignores it without a snapshot
    // file.
    let sum =
        unsafe { linux_probe::checksum_with_request(path, &data, PROBE_ROUNDS, Request::SNAPSHOT) };
    let us = sys::monotonic_ns().wrapping_sub(t0) / 1000;
    match sum {
        Some(sum) => say!("checksum {sum:#018x} {}", path.name()),
        None => say!("error checksum-path {}", path.name()),
    }
    say!("loop-us {us}");
    say!("done");
    Ok(())
}

/// Prints the `flags` line of `/proc/cpuinfo` (the first CPU's).
fn print_flags() -> Result<(), Failed> {
    let mut buf = [0u8; 16384];
    let len =
        sys::read_file(b"/proc/cpuinfo\0", &mut buf).map_err(|e| Failed("read-cpuinfo", e))?;
    let text = core::str::from_utf8(&buf[..len]).map_err(|_| Failed("cpuinfo-utf8", 0))?;
    let line = text
        .lines()
        .find(|l| l.starts_with("flags"))
        .ok_or(Failed("cpuinfo-no-flags", 0))?;
    let flags = line.split_once(':').map_or("", |(_, v)| v.trim());
    say!("flags {flags}");
    Ok(())
}
