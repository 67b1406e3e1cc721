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
    apply_edit, build_image, build_image_for, compare, cpu_salt, fill_mask, pattern_byte, Mismatch,
    Reg, FCW_PATTERN, FSW_PATTERN, MXCSR_PATTERN,
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

/// The general registers in `kvm_regs` order, then RFLAGS: the names
/// [`GprMismatch`] reports.
pub const GPR_NAMES: [&str; 17] = [
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rsp", "rbp", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15", "rflags",
];

/// The distinct full-width pattern general register `i` holds across a
/// snapshot (RDX keeps the port in its low 16 bits for the `out`; RSP is
/// derived from the stack pointer, see [`run`]).
pub const fn gpr_pattern(i: usize) -> u64 {
    let p = 0x9e37_79b9_7f4a_7c15u64
        .wrapping_mul(i as u64 + 1)
        .rotate_left(i as u32 * 5)
        ^ 0x8000_0000_0000_0001;
    if i == 3 {
        (p & !0xffff) | SNAPSHOT_PORT as u64
    } else {
        p
    }
}

/// RFLAGS bits CPL3 code can set with POPF and that the snapshot check
/// loads: CF, PF, AF, ZF, SF, DF, OF and AC (bit 1 is always 1). TF
/// (single-step) and IF/IOPL (not CPL3's) are left alone.
pub const RFLAGS_PATTERN: u64 = 0x1 | 0x4 | 0x10 | 0x40 | 0x80 | 0x400 | 0x800 | 0x4_0000 | 0x2;

/// A general register (or RFLAGS) that changed across a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GprMismatch {
    /// The register's name.
    pub reg: &'static str,
    /// What it held when the guest requested the snapshot.
    pub expected: u64,
    /// What it held after the restore.
    pub got: u64,
}

impl fmt::Display for GprMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:#018x} != {:#018x}",
            self.reg, self.got, self.expected
        )
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
    /// For [`CheckExit::Snapshot`]: the first general register (or
    /// RFLAGS) that differs after the restore from what it held at the
    /// snapshot request.
    pub gpr: Option<GprMismatch>,
}

impl Outcome {
    /// True when the patterns loaded and came back unchanged.
    pub fn passed(&self) -> bool {
        self.load.is_none() && self.after.is_none() && self.gpr.is_none()
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
    /// The stack pointer S the snapshot path anchors to.
    saved_sp: u64,
    /// RSP's pattern: S - the pattern of R13 (see [`run`]).
    sp_pattern: u64,
    /// RFLAGS as the CPU held it right before the snapshot request.
    flags_before: u64,
    /// The 16 general registers and RFLAGS right after the restore.
    regs_after: [u64; 17],
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
    // SAFETY: forwarded to the caller's contract.
    unsafe { run_on(env, exit, count, scratch, 0) }
}

/// [`run`] with CPU `cpu`'s own pattern ([`build_image_for`]): CPUs
/// checking at the same time each expect their own bytes back, so state
/// that leaked from another vCPU shows up as a mismatch.
///
/// # Safety
/// As for [`run`].
pub unsafe fn run_on(
    env: &Env,
    exit: CheckExit,
    count: u64,
    scratch: &mut [u8],
    cpu: u32,
) -> Result<Outcome, CheckError> {
    let areas = Areas::carve(env, exit, scratch, cpu)?;
    let mut p = Params {
        image: areas.image.as_ptr() as u64,
        before: areas.before.as_mut_ptr() as u64,
        after: areas.after.as_mut_ptr() as u64,
        init: areas.init.as_ptr() as u64,
        rfbm: areas.mask.bits(),
        count: count.max(1),
        kind: exit.code(),
        edit: areas.edit,
        saved_sp: 0,
        sp_pattern: 0,
        flags_before: 0,
        regs_after: [0; 17],
    };
    // SAFETY: the caller grants ports/MMIO and the XCR0 components. The
    // areas `p` points at are those `Areas::carve` laid out: 64-byte
    // aligned, each the standard size of `areas.mask` rounded up to 64
    // bytes, borrowed exclusively by `areas`; `image` and `init` hold
    // valid standard-format images (`build_image_for`, `init_image`),
    // `init` the initial state. `p.count` is at least 1.
    let cycles = unsafe { check_block(&mut p) };
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    Ok(areas.outcome(env, exit, &p, cycles))
}

/// The five 64-byte aligned areas of one check, carved from the scratch
/// buffer. A type of its own so that the bookkeeping before and after the
/// timed [`check_block`] stays out of [`run_on`], which then only lays out
/// the block's parameters and runs it.
struct Areas<'a> {
    /// The components checked.
    mask: XfeatureMask,
    /// The pattern image the block loads.
    image: &'a [u8],
    /// The initial image the block loads last.
    init: &'a [u8],
    /// Where the block saves right after loading the pattern.
    before: &'a mut [u8],
    /// Where the block saves after the exits.
    after: &'a mut [u8],
    /// What `after` must hold: the pattern, with the edit applied.
    expected: &'a [u8],
    /// The XMM register [`CheckExit::Edit`] asks the VMM to set, else 0.
    edit: u32,
}

impl<'a> Areas<'a> {
    /// Checks that `scratch` is large enough and carves and fills the
    /// areas: `image` with CPU `cpu`'s pattern, `init` with the initial
    /// state, `expected` with what the "after" save must find.
    fn carve(
        env: &Env,
        exit: CheckExit,
        scratch: &'a mut [u8],
        cpu: u32,
    ) -> Result<Self, CheckError> {
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
        build_image_for(&env.info, mask, image, cpu).ok_or(CheckError::Image)?;
        init_image(&env.info, mask, InitMode::Minimal, init).map_err(|_| CheckError::Image)?;
        expected.copy_from_slice(image);
        let edit = match exit {
            CheckExit::Edit(r) => {
                apply_edit(expected, r);
                r
            }
            _ => 0,
        };
        Ok(Areas {
            mask,
            image,
            init,
            before,
            after,
            expected,
            edit,
        })
    }

    /// What the block's two saves (and, for a snapshot, its general
    /// registers in `p`) show, with the `cycles` it timed.
    fn outcome(&self, env: &Env, exit: CheckExit, p: &Params, cycles: u64) -> Outcome {
        let (mask, image, after) = (self.mask, self.image, &*self.after);
        let load = compare(&env.info, mask, image, self.before);
        let after_m = compare(&env.info, mask, self.expected, after);
        let edit_ignored = match exit {
            CheckExit::Edit(r) => {
                let at = offsets::XMM0 + 16 * (r as usize & 15);
                after_m.is_some() && after[at..at + 16] == image[at..at + 16]
            }
            _ => false,
        };
        let gpr = match exit {
            CheckExit::Snapshot => snapshot_gpr_mismatch(p),
            _ => None,
        };
        Outcome {
            mask,
            load,
            after: after_m,
            edit_ignored,
            cycles,
            gpr,
        }
    }
}

/// The snapshot path of [`check_block`], as an `asm!` template piece
/// (Intel syntax): a piece of its own so that the block, which must stay
/// one `asm!` (no compiled code between its two saves), reads in parts.
///
/// It fills all 16 general registers with distinct 64-bit patterns and
/// RFLAGS with [`RFLAGS_PATTERN`] right before its `out`, and reads them
/// right after it, before anything else runs. RSP cannot be restored from
/// memory without a register, so its pattern is S - P13 (S: the stack
/// pointer, P13: R13's pattern); after the `out`, `lea rsp, [rsp + r13]`
/// (which changes no flag) gives S back if both survived, and the stack
/// then holds everything else.
///
/// Register contract of the including block:
/// - on entry (local label `25`) R12 points at the [`Params`] and R10
///   holds the start TSC;
/// - the block must give the named operands `saved_sp`, `sp_pattern`,
///   `flags_before` and `regs` (offsets into [`Params`]), `flags_pat`
///   ([`RFLAGS_PATTERN`]) and `p0`-`p5`, `p7`-`p15` ([`gpr_pattern`]);
/// - every callee-saved register, RFLAGS and R10 are saved on the stack
///   first and restored before the text leaves by `jmp 29f`; RAX, RCX,
///   RDX, RSI, RDI, R8, R9 and R11 are clobbered.
macro_rules! snapshot_path_asm {
    () => {
        concat!(
            "25:\n",
            "push rbx\n",
            "push rbp\n",
            "push r12\n",
            "push r13\n",
            "push r14\n",
            "push r15\n",
            "push r10\n",
            "pushfq\n",
            "mov [r12 + {saved_sp}], rsp\n",
            "mov rax, rsp\n",
            "mov rcx, {p13}\n",
            "sub rax, rcx\n",
            "mov [r12 + {sp_pattern}], rax\n",
            "push {flags_pat}\n",
            "popfq\n",
            // From here to the end of the read-back, no instruction changes
            // a flag until RFLAGS is saved again.
            "pushfq\n",
            "pop qword ptr [r12 + {flags_before}]\n",
            "mov rax, {p0}\n",
            "mov rbx, {p1}\n",
            "mov rcx, {p2}\n",
            "mov rdx, {p3}\n",
            "mov rsi, {p4}\n",
            "mov rdi, {p5}\n",
            "mov rbp, {p7}\n",
            "mov r8, {p8}\n",
            "mov r9, {p9}\n",
            "mov r10, {p10}\n",
            "mov r11, {p11}\n",
            "mov r13, {p13}\n",
            "mov r14, {p14}\n",
            "mov r15, {p15}\n",
            "mov rsp, [r12 + {sp_pattern}]\n",
            "mov r12, {p12}\n",
            "out dx, eax\n",
            "lea rsp, [rsp + r13]\n",
            "pushfq\n",
            "push r12\n",
            // [rsp]: R12, [rsp + 8]: RFLAGS, [rsp + 16]: the original
            // RFLAGS, then R10, R15, R14, R13, R12 (the Params pointer).
            "mov r12, [rsp + 56]\n",
            "mov [r12 + {regs} + 0], rax\n",
            "mov [r12 + {regs} + 8], rbx\n",
            "mov [r12 + {regs} + 16], rcx\n",
            "mov [r12 + {regs} + 24], rdx\n",
            "mov [r12 + {regs} + 32], rsi\n",
            "mov [r12 + {regs} + 40], rdi\n",
            "mov rax, rsp\n",
            "add rax, 16\n",
            "sub rax, r13\n",
            "mov [r12 + {regs} + 48], rax\n",
            "mov [r12 + {regs} + 56], rbp\n",
            "mov [r12 + {regs} + 64], r8\n",
            "mov [r12 + {regs} + 72], r9\n",
            "mov [r12 + {regs} + 80], r10\n",
            "mov [r12 + {regs} + 88], r11\n",
            "mov [r12 + {regs} + 104], r13\n",
            "mov [r12 + {regs} + 112], r14\n",
            "mov [r12 + {regs} + 120], r15\n",
            "pop rax\n",
            "mov [r12 + {regs} + 96], rax\n",
            "pop rax\n",
            "mov [r12 + {regs} + 128], rax\n",
            "popfq\n",
            "pop r10\n",
            "pop r15\n",
            "pop r14\n",
            "pop r13\n",
            "pop r12\n",
            "pop rbp\n",
            "pop rbx\n",
            "jmp 29f\n",
        )
    };
}

/// The measured assembly block of one check, on the [`Params`] at `p`;
/// returns the TSC cycles between the two saves. A function of its own
/// (always inlined into [`run_on`], so the code is the same as when it
/// was written there) so that the block's contract is stated once, apart
/// from the bookkeeping around it.
///
/// # Safety
/// - Ports/MMIO as [`run`] needs them for `p.kind`, and XCR0 as the
///   hardware applies it includes the components of `p.rfbm`.
/// - `p.image`, `p.before`, `p.after` and `p.init` point at 64-byte
///   aligned areas of the standard size of `p.rfbm`, which nothing else
///   accesses during the call; `p.image` and `p.init` hold valid
///   standard-format images (reserved header bytes zero, MXCSR within
///   every CPU's MXCSR_MASK), `p.init` the initial state; `p.count` >= 1.
#[inline(always)]
unsafe fn check_block(p: &mut Params) -> u64 {
    let cycles: u64;
    // SAFETY: the caller grants ports/MMIO, the XCR0 components and the
    // areas (see the contract above). Between the pattern XRSTOR and the
    // final XRSTOR of the initial image only this block's integer
    // instructions run, and the block ends with the architectural initial
    // state (empty x87 stack, default FCW/MXCSR, zeroed vector registers)
    // for `p.rfbm`; every vector register is declared clobbered. RBX (CPUID)
    // is kept in R9; R12 is only read except on the snapshot path, which
    // saves every callee-saved register, RFLAGS and R10 on the stack first
    // and restores them before leaving (see `snapshot_path_asm`).
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
            snapshot_path_asm!(),
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
            saved_sp = const offset_of!(Params, saved_sp),
            sp_pattern = const offset_of!(Params, sp_pattern),
            flags_before = const offset_of!(Params, flags_before),
            regs = const offset_of!(Params, regs_after),
            flags_pat = const RFLAGS_PATTERN,
            p0 = const gpr_pattern(0),
            p1 = const gpr_pattern(1),
            p2 = const gpr_pattern(2),
            p3 = const gpr_pattern(3),
            p4 = const gpr_pattern(4),
            p5 = const gpr_pattern(5),
            p7 = const gpr_pattern(7),
            p8 = const gpr_pattern(8),
            p9 = const gpr_pattern(9),
            p10 = const gpr_pattern(10),
            p11 = const gpr_pattern(11),
            p12 = const gpr_pattern(12),
            p13 = const gpr_pattern(13),
            p14 = const gpr_pattern(14),
            p15 = const gpr_pattern(15),
            in("r12") p as *mut Params,
            lateout("rax") cycles,
            clobber_abi("C"),
        );
    }
    cycles
}

/// The first general register (or RFLAGS) whose value after the restore
/// is not what the snapshot path loaded.
fn snapshot_gpr_mismatch(p: &Params) -> Option<GprMismatch> {
    let expected = |i: usize| match i {
        6 => p.sp_pattern,
        16 => p.flags_before,
        _ => gpr_pattern(i),
    };
    if p.flags_before & RFLAGS_PATTERN != RFLAGS_PATTERN {
        return Some(GprMismatch {
            reg: "rflags (as loaded)",
            expected: RFLAGS_PATTERN,
            got: p.flags_before,
        });
    }
    (0..17).find_map(|i| {
        (p.regs_after[i] != expected(i)).then(|| GprMismatch {
            reg: GPR_NAMES[i],
            expected: expected(i),
            got: p.regs_after[i],
        })
    })
}
