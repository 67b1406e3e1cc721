//! User-level context switches between CPL3 contexts, one XSAVE strategy
//! at a time, and the boot-time choice of the cheapest strategy.
//!
//! # The benchmark
//!
//! [`CONTEXTS`] contexts, each with its own stack and its own 64-byte
//! aligned XSAVE area, run round-robin like the threads of a user-mode
//! thread library: a context does a little vector work on its own XMM0
//! (`paddd`; the `avx` profile uses `vpaddd` on YMM0, leaving its upper
//! half live) and switches to the next. A switch is what an OS does on a
//! task switch, minus the kernel entry: push the callee-saved registers,
//! save the extended state with the strategy's instruction and XCR0 as the
//! requested-feature bitmap, XRSTOR the next context's area, switch stacks,
//! pop, return. The first switch comes from the calling (main) context,
//! which gets its own area, and the last context switches back to it, so a
//! run of `n` activations is `n + 1` switches, timed as a whole with RDTSC.
//!
//! Strategies ([`Strategy`], names in [`crate::protocol::SWITCH_STRATEGIES`]): XSAVE,
//! XSAVEOPT (skips components in init state or unmodified since this
//! area's XRSTOR), XSAVEC (compacted, skips init components), and XSAVEC
//! with the request narrowed to XGETBV(1) | x87 | SSE (Linux's choice; the
//! legacy bits are kept so MXCSR is always saved). XSAVES/XRSTORS need
//! CPL0 and are not candidates for CPL3 contexts.
//!
//! A new context starts from the architectural initial image
//! ([`xstate::init_image`]): XSTATE_BV = x87 | SSE ([`InitMode::Minimal`]),
//! or, for comparison, all of XCR0 ([`InitMode::AllOfXcr0`], the illumos bug:
//! the CPU then treats the zeroed AVX and AVX-512 state as live and every
//! init-optimised save writes it).
//!
//! Every run is checked: afterwards each context's saved XMM0 (and YMM0's
//! upper half for `avx`) must hold exactly the number of turns it had, so a
//! strategy that lost or mixed up state fails its row.
//!
//! # Bytes per save
//!
//! [`bytes_per_save`] reads the header of a context's area after the run
//! (its last save): standard format, XSAVE: the end of the highest
//! component of the requested mask (XSAVE writes every requested
//! component); XSAVEOPT: the end of the highest component in XSTATE_BV (an
//! upper bound: the modified optimisation may write less, which software
//! cannot observe); compacted: the end of the highest XSTATE_BV component
//! in the compacted layout of XCOMP_BV. Never less than 576 (legacy region
//! and header).

use core::arch::asm;
use core::mem::offset_of;

use xstate::{init_image, Format, InitMode, Xfeature, XfeatureMask, XsaveInfo, XsaveRef};

use super::timed_asm::rdtsc_fenced_asm;
use super::{carve, Env};
use bytes::bytes_per_save as save_bytes;
use switch::{body_fn, switch_fn, Ctx, Run, RUN_MAIN};

mod bytes;
mod calibrate;
mod switch;
#[cfg(test)]
mod tests;

pub use bytes::bytes_per_save;
pub use calibrate::{calibrate, choose, Calibration, CALIBRATION_ACTIVATIONS, CALIBRATION_TRIALS};
pub use switch::{Profile, CONTEXTS};

/// Stack bytes per context: the context body is assembly that needs only
/// the switch's frame (seven words).
const STACK_LEN: usize = 256;

/// The save strategies, named once in the xstate crate.
pub use xstate::SaveStrategy as Strategy;

/// Scratch bytes [`run`] and [`calibrate`] need for `env`.
pub fn scratch_bytes(env: &Env) -> usize {
    (CONTEXTS + 1) * env.area_len() + CONTEXTS * STACK_LEN + 64 + 16
}

/// One measured run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measurement {
    /// Switches timed (activations + 1).
    pub switches: u64,
    /// TSC cycles of all of them.
    pub cycles: u64,
    /// Largest [`bytes_per_save`] over the contexts' last saves.
    pub bytes_per_save: u32,
    /// Every context's state came back with exactly its own turns.
    pub state_ok: bool,
}

impl Measurement {
    /// TSC cycles per switch, rounded.
    pub fn cycles_per_switch(&self) -> u64 {
        (self.cycles + self.switches / 2) / self.switches.max(1)
    }
}

/// Why a run could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunError {
    /// CPUID 0xD.1 lacks the strategy's instructions.
    Unsupported(Strategy),
    /// The `avx` profile needs AVX in XCR0.
    NoAvx,
    /// The contexts' work is SSE: XCR0 must switch SSE state.
    NoSse,
    /// The scratch buffer is smaller than [`scratch_bytes`].
    Scratch {
        /// Bytes a run needs.
        need: usize,
        /// Bytes it was given.
        have: usize,
    },
    /// The xstate model could not build the initial image.
    Image,
}

impl core::fmt::Display for RunError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RunError::Unsupported(s) => write!(f, "CPUID 0xD.1 lacks {}", s.name()),
            RunError::NoAvx => f.write_str("needs AVX: XCR0 lacks AVX state"),
            RunError::NoSse => f.write_str("needs SSE: XCR0 lacks SSE state"),
            RunError::Scratch { need, have } => {
                write!(f, "needs {need} bytes of scratch, got {have}")
            }
            RunError::Image => f.write_str("no initial image for XCR0"),
        }
    }
}

/// Runs `activations` context activations (at least [`CONTEXTS`]), i.e.
/// `activations + 1` switches, with `strategy`, `profile` and new contexts
/// starting from the initial image of `start`.
pub fn run(
    env: &Env,
    strategy: Strategy,
    profile: Profile,
    start: InitMode,
    activations: u64,
    scratch: &mut [u8],
) -> Result<Measurement, RunError> {
    check_run(env, strategy, profile)?;
    let need = scratch_bytes(env);
    if scratch.len() < need {
        return Err(RunError::Scratch {
            need,
            have: scratch.len(),
        });
    }
    let area_len = env.area_len();
    let activations = activations.max(CONTEXTS as u64);
    let (areas, rest) = carve(scratch, (CONTEXTS + 1) * area_len).ok_or(RunError::Scratch {
        need,
        have: need - 1,
    })?;

    for area in areas.chunks_exact_mut(area_len).skip(1) {
        init_image(&env.info, env.xcr0, start, area).map_err(|_| RunError::Image)?;
    }
    let area_addr = |i: usize| areas.as_ptr() as u64 + (i * area_len) as u64;
    let mut run = Run {
        ones: [1; 8],
        remaining: activations,
        rfbm: env.xcr0.bits(),
        switch: switch_fn(strategy) as u64,
        _pad: 0,
        main: Ctx {
            rsp: 0,
            area: area_addr(0),
        },
        ctx: [Ctx { rsp: 0, area: 0 }; CONTEXTS],
    };
    let run_addr = core::ptr::addr_of_mut!(run) as u64;
    start_contexts(&mut run, run_addr, rest, body_fn(profile), area_addr);

    let cycles: u64;
    // SAFETY: the strategy's instructions exist (checked above) and XCR0
    // as the guest set it is a subset of the XCR0 the hardware applies
    // (equal on hardware KVM, the host's superset on kvm_pvm). Every area is
    // 64-byte aligned and holds both formats of XCR0; the task areas hold
    // valid initial images for XCR0, and the main area is written by the
    // first save before the last switch restores from it. The contexts run
    // only the assembly bodies above on their own stacks inside `rest`
    // (laid out by `start_contexts`), touch only `run` (alive on this frame
    // throughout) and end by switching back here, which restores this
    // context's registers and extended state (including MXCSR and the x87
    // control word) exactly. RBX, RBP and R12-R15 are restored by the
    // switch; everything else is clobbered.
    unsafe {
        asm!(
            rdtsc_fenced_asm!(),
            "mov r12, rax",
            "call r9",
            rdtsc_fenced_asm!(),
            "sub rax, r12",
            in("rdi") run_addr + RUN_MAIN as u64,
            in("rsi") ctx_addr(run_addr, 0),
            in("r8") env.xcr0.bits(),
            in("r9") run.switch,
            out("r12") _,
            lateout("rax") cycles,
            clobber_abi("C"),
        );
    }
    // The contexts wrote `run` through raw pointers; make sure the compiler
    // does not reuse values it read before.
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);

    let (bytes_per_save, state_ok) =
        check_areas(env, strategy, profile, areas, area_len, activations);
    Ok(Measurement {
        switches: activations + 1,
        cycles,
        bytes_per_save,
        state_ok,
    })
}

/// Whether `env` can run `strategy` with `profile` at all: the errors a
/// run reports before it touches its scratch buffer, kept apart from the
/// setup of [`run`].
fn check_run(env: &Env, strategy: Strategy, profile: Profile) -> Result<(), RunError> {
    if !strategy.supported(&env.info) {
        return Err(RunError::Unsupported(strategy));
    }
    if !env.xcr0.contains(Xfeature::Sse) {
        return Err(RunError::NoSse);
    }
    if profile == Profile::Avx && !env.has_avx() {
        return Err(RunError::NoAvx);
    }
    Ok(())
}

/// Gives every context of `run` (at `run_addr`) a stack in the first
/// `CONTEXTS * STACK_LEN + 16` bytes of `rest` that holds the frame a
/// switch routine leaves, returning into `body`, and its area
/// (`area_addr(i + 1)` for context `i`). The setup before the timed
/// switches, apart from [`run`] so that it reads as the run itself.
fn start_contexts(
    run: &mut Run,
    run_addr: u64,
    rest: &mut [u8],
    body: u64,
    area_addr: impl Fn(usize) -> u64,
) {
    let stacks = &mut rest[..CONTEXTS * STACK_LEN + 16];
    let stacks_base = (stacks.as_mut_ptr() as usize).next_multiple_of(16);
    for i in 0..CONTEXTS {
        let top = stacks_base + (i + 1) * STACK_LEN;
        // The frame a switch routine leaves: R15, R14, R13, R12, RBP, RBX,
        // return address (then one word so the body starts as if called).
        let frame = [
            ctx_addr(run_addr, (i + 1) % CONTEXTS),
            ctx_addr(run_addr, i),
            i as u64,
            run_addr,
            0,
            0,
            body,
            0,
        ];
        let rsp = top - frame.len() * 8;
        // SAFETY: `[rsp, top)` lies inside `stacks` (STACK_LEN >= 64 per
        // context, base aligned within the slice's 16 spare bytes), which
        // this function borrows exclusively.
        unsafe { core::ptr::copy_nonoverlapping(frame.as_ptr(), rsp as *mut u64, frame.len()) };
        run.ctx[i] = Ctx {
            rsp: rsp as u64,
            area: area_addr(i + 1),
        };
    }
}

/// The address of context `i`'s [`Ctx`] in the [`Run`] at `run_addr`:
/// named once because the frames [`start_contexts`] builds and the first
/// switch of [`run`] both need it.
fn ctx_addr(run_addr: u64, i: usize) -> u64 {
    run_addr + (offset_of!(Run, ctx) + i * 16) as u64
}

/// The largest [`bytes_per_save`] over the contexts' areas (the
/// `area_len`-byte pieces of `areas` after the main one) and whether every context saved exactly its
/// own turns of `activations`: the bookkeeping after the timed switches,
/// apart from [`run`].
fn check_areas(
    env: &Env,
    strategy: Strategy,
    profile: Profile,
    areas: &[u8],
    area_len: usize,
    activations: u64,
) -> (u32, bool) {
    let mut bytes = 0;
    let mut state_ok = true;
    for i in 0..CONTEXTS {
        let area = &areas[(i + 1) * area_len..(i + 2) * area_len];
        bytes = bytes.max(save_bytes(&env.info, strategy, env.xcr0, area));
        let turns =
            activations / CONTEXTS as u64 + u64::from((i as u64) < activations % CONTEXTS as u64);
        state_ok &= saved_counter_ok(&env.info, env.xcr0, area, profile, turns as u32);
    }
    (bytes, state_ok)
}

/// Whether the context saved in `area` holds `turns` in every dword lane
/// of XMM0 (and of YMM0's upper half for [`Profile::Avx`]).
fn saved_counter_ok(
    info: &XsaveInfo,
    xcr0: XfeatureMask,
    area: &[u8],
    profile: Profile,
    turns: u32,
) -> bool {
    let Ok(view) = XsaveRef::new(area) else {
        return false;
    };
    let lanes = |v: [u8; 16]| {
        v.chunks_exact(4)
            .all(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) == turns)
    };
    let bv = view.xstate_bv_mask();
    if !bv.contains(Xfeature::Sse) || !lanes(view.xmm(0)) {
        return false;
    }
    if profile == Profile::Sse {
        return true;
    }
    let layout = match view.format() {
        Format::Standard => info.layout(xcr0, Format::Standard),
        Format::Compacted => info.layout(
            XfeatureMask::from_bits(view.xcomp_bv() & !xstate::buffer::XCOMP_BV_COMPACTED),
            Format::Compacted,
        ),
    };
    match layout {
        Ok(l) => bv.contains(Xfeature::Avx) && view.ymm_hi(0, &l).is_some_and(lanes),
        Err(_) => false,
    }
}
