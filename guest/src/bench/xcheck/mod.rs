//! Registers survive VM exits bit for bit, and a VMM-side edit is seen.
//!
//! One assembly block per check: XRSTOR a pattern image (every x87, SSE,
//! AVX and AVX-512 register and control word distinct and non-default),
//! XSAVE it back ("before": proves the CPU really holds the patterns), run
//! `count` exits (or one [`XSTATE_EDIT_PORT`] request), XSAVE ("after"),
//! XRSTOR the initial state for the compiled code that follows. No
//! compiled code runs between the two saves, so any difference is the
//! hypervisor's doing. [`compare`] names the first register that differs.
//!
//! Components checked: XCR0 & (x87 | SSE | AVX | opmask | ZMM_Hi256 |
//! Hi16_ZMM) ([`fill_mask`]). PKRU (it gates memory access), AMX (needs a
//! valid tile configuration) and MPX are left alone.
//!
//! The image is in the standard format; a component whose XSTATE_BV bit
//! the "after" save clears (the CPU or the VMM put it back to its init
//! state) is compared as its init value, so a lost component shows up as
//! its first register reading zero.

use core::arch::asm;
use core::fmt;
use core::mem::offset_of;

use xstate::buffer::offsets;
use xstate::{init_image, InitMode, XfeatureMask};

use super::timed_asm::{exit_loops_asm, rdtsc_fenced_asm};
use super::{carve, Env};
use crate::protocol::{BENCH_MMIO_ADDR, BENCH_PIO_PORT, SNAPSHOT_PORT, XSTATE_EDIT_PORT};

mod pattern;
#[cfg(test)]
mod tests;

pub use pattern::{
    apply_edit, build_image, compare, fill_mask, pattern_byte, Mismatch, Reg, FCW_PATTERN,
    FSW_PATTERN, MXCSR_PATTERN,
};

/// What happens between the two saves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckExit {
    /// `count` 32-bit `out`s to [`BENCH_PIO_PORT`].
    Pio,
    /// `count` 32-bit stores to [`BENCH_MMIO_ADDR`].
    Mmio,
    /// `count` CPUIDs (leaf 0).
    Cpuid,
    /// One write of the register number to [`XSTATE_EDIT_PORT`]: the VMM is
    /// to set that XMM register to [`xmm_edit_pattern`](crate::protocol::xmm_edit_pattern).
    Edit(u32),
    /// Nothing (tests: the pattern round trip alone).
    Nothing,
    /// One write to [`SNAPSHOT_PORT`]: a VMM with a snapshot file saves the
    /// VM there and stops; the registers must come back after a restore.
    Snapshot,
}

impl CheckExit {
    fn code(self) -> u32 {
        match self {
            CheckExit::Pio => 0,
            CheckExit::Mmio => 1,
            CheckExit::Cpuid => 2,
            CheckExit::Edit(_) => 3,
            CheckExit::Snapshot => 5,
            CheckExit::Nothing => 4,
        }
    }
}

/// Bytes [`run`] needs.
pub fn scratch_bytes(env: &Env) -> usize {
    let std = env
        .info
        .standard_size(fill_mask(env.xcr0))
        .unwrap_or(xstate::buffer::XSAVE_MIN_SIZE as u32) as usize;
    5 * std.next_multiple_of(64) + 64
}

/// Why a check could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckError {
    /// The scratch buffer is smaller than [`scratch_bytes`].
    Scratch {
        /// Bytes a check needs.
        need: usize,
        /// Bytes it was given.
        have: usize,
    },
    /// The xstate model has no layout for XCR0.
    Image,
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::Scratch { need, have } => write!(f, "needs {need} bytes, got {have}"),
            CheckError::Image => f.write_str("no pattern image for XCR0"),
        }
    }
}

/// What one check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The components checked.
    pub mask: XfeatureMask,
    /// The first register that did not take the pattern (the CPU refused
    /// it: a guest-side problem, not the VMM's).
    pub load: Option<Mismatch>,
    /// The first register that differs after the exits from what it must
    /// hold (the pattern, with the edit applied for [`CheckExit::Edit`]).
    pub after: Option<Mismatch>,
    /// For [`CheckExit::Edit`]: the edited register still held its old
    /// pattern (the VMM did not apply the request at all).
    pub edit_ignored: bool,
    /// TSC cycles between the two saves.
    pub cycles: u64,
}

impl Outcome {
    /// True when the patterns loaded and came back unchanged.
    pub fn passed(&self) -> bool {
        self.load.is_none() && self.after.is_none()
    }
}

#[repr(C)]
struct Params {
    image: u64,
    before: u64,
    after: u64,
    init: u64,
    rfbm: u64,
    count: u64,
    kind: u32,
    edit: u32,
}

/// Runs one check.
///
/// # Safety
/// As for [`super::exits::timed_loop`]: port access for `Pio`/`Edit`, an
/// unbacked writable [`BENCH_MMIO_ADDR`] for `Mmio`; and XCR0 as the
/// hardware applies it must include `env.xcr0`'s checked components.
pub unsafe fn run(
    env: &Env,
    exit: CheckExit,
    count: u64,
    scratch: &mut [u8],
) -> Result<Outcome, CheckError> {
    let mask = fill_mask(env.xcr0);
    let need = scratch_bytes(env);
    if scratch.len() < need {
        return Err(CheckError::Scratch {
            need,
            have: scratch.len(),
        });
    }
    let len = env
        .info
        .standard_size(mask)
        .map_err(|_| CheckError::Image)? as usize;
    let piece = len.next_multiple_of(64);
    let (bufs, _) = carve(scratch, 5 * piece).ok_or(CheckError::Image)?;
    bufs.fill(0);
    let (image, rest) = bufs.split_at_mut(piece);
    let (init, rest) = rest.split_at_mut(piece);
    let (before, rest) = rest.split_at_mut(piece);
    let (after, expected) = rest.split_at_mut(piece);
    build_image(&env.info, mask, image).ok_or(CheckError::Image)?;
    init_image(&env.info, mask, InitMode::Minimal, init).map_err(|_| CheckError::Image)?;
    expected.copy_from_slice(image);
    let edit = match exit {
        CheckExit::Edit(r) => {
            apply_edit(expected, r);
            r
        }
        _ => 0,
    };
    let p = Params {
        image: image.as_ptr() as u64,
        before: before.as_mut_ptr() as u64,
        after: after.as_mut_ptr() as u64,
        init: init.as_ptr() as u64,
        rfbm: mask.bits(),
        count: count.max(1),
        kind: exit.code(),
        edit,
    };
    let cycles: u64;
    // SAFETY: the caller grants ports/MMIO and the XCR0 components. Every
    // area is 64-byte aligned and `len` (the standard size of `mask`)
    // long; the images are valid standard-format images (reserved header
    // bytes zero, MXCSR within every CPU's MXCSR_MASK). Between the pattern
    // XRSTOR and the final XRSTOR of the initial image only this block's
    // integer instructions run, and the block ends with the architectural
    // initial state (empty x87 stack, default FCW/MXCSR, zeroed vector
    // registers) for `mask`; every vector register is declared clobbered.
    // RBX (CPUID) is kept in R9; R12 is only read.
    unsafe {
        asm!(
            "mov rax, [r12 + {rfbm}]",
            "mov rdx, rax",
            "shr rdx, 32",
            "mov rdi, [r12 + {image}]",
            "xrstor64 [rdi]",
            "mov rdi, [r12 + {before}]",
            "xsave64 [rdi]",
            "mov r8, [r12 + {count}]",
            "mov ecx, [r12 + {kind}]",
            rdtsc_fenced_asm!(),
            "mov r10, rax",
            "cmp ecx, 1",
            "je 21f",
            "cmp ecx, 2",
            "je 22f",
            "cmp ecx, 3",
            "je 23f",
            "cmp ecx, 5",
            "je 25f",
            "cmp ecx, 4",
            "je 29f",
            exit_loops_asm!(),
            "jmp 29f",
            "25:",
            "xor eax, eax",
            "mov edx, {snap_port}",
            "out dx, eax",
            "jmp 29f",
            "23:",
            "mov eax, [r12 + {edit}]",
            "mov edx, {edit_port}",
            "out dx, eax",
            "29:",
            rdtsc_fenced_asm!(),
            "sub rax, r10",
            "mov r10, rax",
            "mov rax, [r12 + {rfbm}]",
            "mov rdx, rax",
            "shr rdx, 32",
            "mov rdi, [r12 + {after}]",
            "xsave64 [rdi]",
            "mov rdi, [r12 + {init}]",
            "xrstor64 [rdi]",
            "mov rax, r10",
            rfbm = const offset_of!(Params, rfbm),
            image = const offset_of!(Params, image),
            before = const offset_of!(Params, before),
            after = const offset_of!(Params, after),
            init = const offset_of!(Params, init),
            count = const offset_of!(Params, count),
            kind = const offset_of!(Params, kind),
            edit = const offset_of!(Params, edit),
            pio = const BENCH_PIO_PORT,
            mmio = const BENCH_MMIO_ADDR,
            edit_port = const XSTATE_EDIT_PORT,
            snap_port = const SNAPSHOT_PORT,
            in("r12") &p,
            lateout("rax") cycles,
            clobber_abi("C"),
            options(nostack),
        );
    }
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    let load = compare(&env.info, mask, image, before);
    let after_m = compare(&env.info, mask, expected, after);
    let edit_ignored = match exit {
        CheckExit::Edit(r) => {
            let at = offsets::XMM0 + 16 * (r as usize & 15);
            after_m.is_some() && after[at..at + 16] == image[at..at + 16]
        }
        _ => false,
    };
    Ok(Outcome {
        mask,
        load,
        after: after_m,
        edit_ignored,
        cycles,
    })
}
