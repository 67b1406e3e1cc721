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

use core::arch::{asm, naked_asm};
use core::mem::offset_of;

use xstate::buffer::{offsets, XSAVE_MIN_SIZE};
use xstate::{init_image, Format, InitMode, Xfeature, XfeatureMask, XsaveInfo, XsaveRef};

use super::{carve, Env};

/// Contexts switched round-robin.
pub const CONTEXTS: usize = 4;
/// Stack bytes per context: the context body is assembly that needs only
/// the switch's frame (seven words).
const STACK_LEN: usize = 256;

/// The save strategies, named once in the xstate crate.
pub use xstate::SaveStrategy as Strategy;

/// The assembly switch routine of a strategy.
fn switch_fn(s: Strategy) -> usize {
    match s {
        Strategy::Xsave => switch_xsave as *const () as usize,
        Strategy::Xsaveopt => switch_xsaveopt as *const () as usize,
        Strategy::Xsavec => switch_xsavec as *const () as usize,
        Strategy::XsavecXinuse => switch_xsavec_xinuse as *const () as usize,
    }
}

/// What the contexts do between switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// `paddd xmm0`: SSE state only.
    Sse,
    /// `vpaddd ymm0`: the upper half of YMM0 stays live (needs AVX in XCR0).
    Avx,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Sse => "sse",
            Profile::Avx => "avx",
        }
    }
}

/// One saved context: its stack pointer while switched out, and its area.
#[repr(C)]
#[derive(Clone, Copy)]
struct Ctx {
    rsp: u64,
    area: u64,
}

/// Shared by the contexts of one run; the bodies address it through R12.
#[repr(C, align(64))]
struct Run {
    /// The increment of the vector work: 1 in every dword lane.
    ones: [u32; 8],
    /// Activations left; the context that takes it to 0 switches to `main`.
    remaining: u64,
    /// Requested-feature bitmap of every save and restore (XCR0).
    rfbm: u64,
    /// Address of the strategy's switch routine.
    switch: u64,
    _pad: u64,
    main: Ctx,
    ctx: [Ctx; CONTEXTS],
}

const RUN_REMAINING: usize = offset_of!(Run, remaining);
const RUN_RFBM: usize = offset_of!(Run, rfbm);
const RUN_SWITCH: usize = offset_of!(Run, switch);
const RUN_MAIN: usize = offset_of!(Run, main);
const _: () = assert!(offset_of!(Run, ones) == 0 && offset_of!(Ctx, area) == 8);

// The switch routines. Custom convention: RDI = the current context's `Ctx`
// (written), RSI = the next one's (read), R8 = requested-feature bitmap.
// Clobbers RAX, RCX, RDX, R9, R10 and the extended state (which becomes the
// next context's); RBX, RBP and R12-R15 travel with the context.
macro_rules! switch_routine {
    ($name:ident, $($save:literal),+) => {
        #[unsafe(naked)]
        unsafe extern "C" fn $name() {
            naked_asm!(
                "push rbx",
                "push rbp",
                "push r12",
                "push r13",
                "push r14",
                "push r15",
                "mov [rdi], rsp",
                "mov r10, [rdi + 8]",
                "mov rax, r8",
                "mov rdx, r8",
                "shr rdx, 32",
                $($save,)+
                "mov r10, [rsi + 8]",
                "mov rax, r8",
                "mov rdx, r8",
                "shr rdx, 32",
                "xrstor64 [r10]",
                "mov rsp, [rsi]",
                "pop r15",
                "pop r14",
                "pop r13",
                "pop r12",
                "pop rbp",
                "pop rbx",
                "ret",
            )
        }
    };
}

switch_routine!(switch_xsave, "xsave64 [r10]");
switch_routine!(switch_xsaveopt, "xsaveopt64 [r10]");
switch_routine!(switch_xsavec, "xsavec64 [r10]");
switch_routine!(
    switch_xsavec_xinuse,
    "mov ecx, 1",
    "xgetbv",
    "or eax, 3",
    "and eax, r8d",
    "mov r9, r8",
    "shr r9, 32",
    "and edx, r9d",
    "xsavec64 [r10]"
);

// Context bodies, entered by the first switch into the context with
// R12 = the `Run`, R14 = own `Ctx`, R15 = the next context's `Ctx`.
macro_rules! body_routine {
    ($name:ident, $work:literal) => {
        #[unsafe(naked)]
        unsafe extern "C" fn $name() {
            naked_asm!(
                "2:",
                $work,
                "dec qword ptr [r12 + {remaining}]",
                "jz 3f",
                "mov rdi, r14",
                "mov rsi, r15",
                "mov r8, [r12 + {rfbm}]",
                "call qword ptr [r12 + {switch}]",
                "jmp 2b",
                "3:",
                "mov rdi, r14",
                "lea rsi, [r12 + {main}]",
                "mov r8, [r12 + {rfbm}]",
                "call qword ptr [r12 + {switch}]",
                "ud2",
                remaining = const RUN_REMAINING,
                rfbm = const RUN_RFBM,
                switch = const RUN_SWITCH,
                main = const RUN_MAIN,
            )
        }
    };
}

body_routine!(body_sse, "paddd xmm0, xmmword ptr [r12]");
body_routine!(body_avx, "vpaddd ymm0, ymm0, ymmword ptr [r12]");

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
    Scratch { need: usize, have: usize },
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
    if !strategy.supported(&env.info) {
        return Err(RunError::Unsupported(strategy));
    }
    if !env.xcr0.contains(Xfeature::Sse) {
        return Err(RunError::NoSse);
    }
    if profile == Profile::Avx && !env.has_avx() {
        return Err(RunError::NoAvx);
    }
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
    let stacks = &mut rest[..CONTEXTS * STACK_LEN + 16];
    let stacks_base = (stacks.as_mut_ptr() as usize).next_multiple_of(16);

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
    let body = match profile {
        Profile::Sse => body_sse as *const () as u64,
        Profile::Avx => body_avx as *const () as u64,
    };
    let run_addr = core::ptr::addr_of_mut!(run) as u64;
    let ctx_addr = |i: usize| run_addr + (offset_of!(Run, ctx) + i * 16) as u64;
    for i in 0..CONTEXTS {
        let top = stacks_base + (i + 1) * STACK_LEN;
        // The frame a switch routine leaves: R15, R14, R13, R12, RBP, RBX,
        // return address (then one word so the body starts as if called).
        let frame = [
            ctx_addr((i + 1) % CONTEXTS),
            ctx_addr(i),
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

    let cycles: u64;
    // SAFETY: the strategy's instructions exist (checked above) and XCR0
    // as the guest set it is a subset of the XCR0 the hardware applies
    // (equal on hardware KVM, the host's superset on kvm_pvm). Every area is
    // 64-byte aligned and holds both formats of XCR0; the task areas hold
    // valid initial images for XCR0, and the main area is written by the
    // first save before the last switch restores from it. The contexts run
    // only the assembly bodies above on their own stacks inside `stacks`,
    // touch only `run` (alive on this frame throughout) and end by switching
    // back here, which restores this context's registers and extended state
    // (including MXCSR and the x87 control word) exactly. RBX, RBP and
    // R12-R15 are restored by the switch; everything else is clobbered.
    unsafe {
        asm!(
            "lfence",
            "rdtsc",
            "lfence",
            "shl rdx, 32",
            "or rax, rdx",
            "mov r12, rax",
            "call r9",
            "lfence",
            "rdtsc",
            "lfence",
            "shl rdx, 32",
            "or rax, rdx",
            "sub rax, r12",
            in("rdi") run_addr + RUN_MAIN as u64,
            in("rsi") ctx_addr(0),
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

    let mut bytes = 0;
    let mut state_ok = true;
    for i in 0..CONTEXTS {
        let area = &areas[(i + 1) * area_len..(i + 2) * area_len];
        bytes = bytes.max(bytes_per_save(&env.info, strategy, env.xcr0, area));
        let turns =
            activations / CONTEXTS as u64 + u64::from((i as u64) < activations % CONTEXTS as u64);
        state_ok &= saved_counter_ok(&env.info, env.xcr0, area, profile, turns as u32);
    }
    Ok(Measurement {
        switches: activations + 1,
        cycles,
        bytes_per_save: bytes,
        state_ok,
    })
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

/// Bytes the last save wrote into `area` (see the module documentation for
/// the rule per strategy); `rfbm` is the requested-feature bitmap the
/// strategy was given.
pub fn bytes_per_save(
    info: &XsaveInfo,
    strategy: Strategy,
    rfbm: XfeatureMask,
    area: &[u8],
) -> u32 {
    let min = XSAVE_MIN_SIZE as u32;
    if area.len() < XSAVE_MIN_SIZE {
        return 0;
    }
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&area[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let xstate_bv = XfeatureMask::from_bits(word(offsets::XSTATE_BV));
    let xcomp_bv = word(offsets::XCOMP_BV);
    let (mask, layout_mask, format) = match strategy {
        Strategy::Xsave => (rfbm, rfbm, Format::Standard),
        Strategy::Xsaveopt => (xstate_bv & rfbm, rfbm, Format::Standard),
        Strategy::Xsavec | Strategy::XsavecXinuse => {
            let xcomp = XfeatureMask::from_bits(xcomp_bv & !xstate::buffer::XCOMP_BV_COMPACTED);
            (xstate_bv & xcomp, xcomp, Format::Compacted)
        }
    };
    let Ok(layout) = info.layout(layout_mask, format) else {
        return min;
    };
    mask.iter_indices()
        .filter_map(|i| layout.range_by_index(i))
        .map(|r| r.end as u32)
        .fold(min, u32::max)
}

/// What the boot calibration measured and chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Calibration {
    /// Minimum over the trials of TSC cycles per switch, per strategy in
    /// [`Strategy::ALL`] order; `None` when unsupported or failed.
    pub cycles: [Option<u64>; 4],
    /// The strategy chosen by [`choose`].
    pub choice: Option<Strategy>,
    /// TSC cycles the calibration took in all.
    pub total_cycles: u64,
}

/// Picks the strategy with the fewest cycles per switch (the first of
/// equals in [`Strategy::ALL`] order); `None` when nothing was measured.
/// The choice is the fastest measured, so within any tolerance of it.
pub fn choose(cycles: &[Option<u64>; 4]) -> Option<Strategy> {
    Strategy::ALL
        .iter()
        .zip(cycles)
        .filter_map(|(s, c)| c.map(|c| (*s, c)))
        .min_by_key(|&(_, c)| c)
        .map(|(s, _)| s)
}

/// Trials per strategy in [`calibrate`].
pub const CALIBRATION_TRIALS: u32 = 7;
/// Activations per trial in [`calibrate`].
pub const CALIBRATION_ACTIVATIONS: u64 = 255;

/// The boot-time chooser: every supported strategy, SSE contexts started
/// from the minimal initial state, [`CALIBRATION_TRIALS`] trials of
/// [`CALIBRATION_ACTIVATIONS`] activations, interleaved across strategies
/// so that drift (frequency, a noisy neighbour) hits them alike; each
/// strategy's figure is its fastest trial. About 7 x 4 x 256 switches: well
/// under a millisecond at a few hundred cycles each.
///
/// A trial whose contexts did not get their own state back disqualifies
/// the strategy.
pub fn calibrate(env: &Env, scratch: &mut [u8]) -> Calibration {
    let t0 = rdtsc();
    let mut cycles = [None; 4];
    let mut failed = [false; 4];
    for _ in 0..CALIBRATION_TRIALS {
        for s in Strategy::ALL {
            let k = s as usize;
            if failed[k] {
                continue;
            }
            match run(
                env,
                s,
                Profile::Sse,
                InitMode::Minimal,
                CALIBRATION_ACTIVATIONS,
                scratch,
            ) {
                Ok(m) if m.state_ok => {
                    let c = m.cycles_per_switch();
                    cycles[k] = Some(cycles[k].map_or(c, |old: u64| old.min(c)));
                }
                _ => {
                    failed[k] = true;
                    cycles[k] = None;
                }
            }
        }
    }
    Calibration {
        cycles,
        choice: choose(&cycles),
        total_cycles: rdtsc().wrapping_sub(t0),
    }
}

fn rdtsc() -> u64 {
    crate::workloads::timing::rdtsc_fenced()
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::bench::test_scratch;
    use xstate::CpuidRegs;

    /// CPUID 0xD of an AVX-512 CPU (Skylake-X values).
    fn skx_info() -> XsaveInfo {
        XsaveInfo::from_leaf_0xd(|sub| match sub {
            0 => CpuidRegs::new(0xe7, 2688, 2688, 0),
            1 => CpuidRegs::new(0xf, 2432, 0x100, 0),
            2 => CpuidRegs::new(256, 576, 0, 0),
            5 => CpuidRegs::new(64, 1088, 0, 0),
            6 => CpuidRegs::new(512, 1152, 0, 0),
            7 => CpuidRegs::new(1024, 1664, 0, 0),
            8 => CpuidRegs::new(128, 0, 1, 0),
            _ => CpuidRegs::default(),
        })
        .unwrap()
    }

    fn area_with(xstate_bv: u64, xcomp_bv: u64) -> std::vec::Vec<u8> {
        let mut a = std::vec![0u8; 4096];
        a[512..520].copy_from_slice(&xstate_bv.to_le_bytes());
        a[520..528].copy_from_slice(&xcomp_bv.to_le_bytes());
        a
    }

    #[test]
    fn bytes_per_save_rules() {
        let info = skx_info();
        let xcr0 = XfeatureMask::from_bits(0xe7);
        // XSAVE writes every requested component: the standard size.
        let a = area_with(0x3, 0);
        assert_eq!(bytes_per_save(&info, Strategy::Xsave, xcr0, &a), 2688);
        // XSAVEOPT: the end of the highest component in XSTATE_BV.
        assert_eq!(bytes_per_save(&info, Strategy::Xsaveopt, xcr0, &a), 576);
        let a = area_with(0x7, 0);
        assert_eq!(bytes_per_save(&info, Strategy::Xsaveopt, xcr0, &a), 832);
        let a = area_with(0x27, 0);
        assert_eq!(bytes_per_save(&info, Strategy::Xsaveopt, xcr0, &a), 1152);
        // XSAVEC with XCOMP_BV = XCR0: AVX at 576, opmask at 832.
        let c = 0x8000_0000_0000_00e7;
        assert_eq!(
            bytes_per_save(&info, Strategy::Xsavec, xcr0, &area_with(0x3, c)),
            576
        );
        assert_eq!(
            bytes_per_save(&info, Strategy::Xsavec, xcr0, &area_with(0x7, c)),
            832
        );
        assert_eq!(
            bytes_per_save(&info, Strategy::Xsavec, xcr0, &area_with(0xe7, c)),
            2432
        );
        // Masked by XINUSE: a sparse set is dense (opmask right after legacy).
        let c = 0x8000_0000_0000_0023;
        assert_eq!(
            bytes_per_save(&info, Strategy::XsavecXinuse, xcr0, &area_with(0x23, c)),
            576 + 64
        );
        // Too short an area says nothing.
        assert_eq!(bytes_per_save(&info, Strategy::Xsave, xcr0, &[0u8; 100]), 0);
    }

    #[test]
    fn chooser_picks_fastest_supported() {
        assert_eq!(choose(&[None; 4]), None);
        assert_eq!(
            choose(&[Some(400), Some(380), Some(420), Some(455)]),
            Some(Strategy::Xsaveopt)
        );
        assert_eq!(
            choose(&[Some(400), None, None, Some(300)]),
            Some(Strategy::XsavecXinuse)
        );
        // Ties go to the earlier (simpler) strategy.
        assert_eq!(
            choose(&[Some(300), Some(300), None, None]),
            Some(Strategy::Xsave)
        );
        let names: std::vec::Vec<_> = Strategy::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names, crate::protocol::SWITCH_STRATEGIES);
    }

    #[test]
    fn strategies_need_their_cpuid_bits() {
        let info = skx_info();
        assert!(Strategy::ALL.iter().all(|s| s.supported(&info)));
        let plain = XsaveInfo::from_leaf_0xd(|sub| match sub {
            0 => CpuidRegs::new(0x7, 832, 832, 0),
            2 => CpuidRegs::new(256, 576, 0, 0),
            _ => CpuidRegs::default(),
        })
        .unwrap();
        assert!(Strategy::Xsave.supported(&plain));
        assert!(!Strategy::Xsaveopt.supported(&plain));
        assert!(!Strategy::XsavecXinuse.supported(&plain));
        let env = Env {
            info: plain,
            xcr0: XfeatureMask::from_bits(0x7),
        };
        let mut s = test_scratch(scratch_bytes(&env));
        assert_eq!(
            run(
                &env,
                Strategy::Xsavec,
                Profile::Sse,
                InitMode::Minimal,
                8,
                &mut s
            ),
            Err(RunError::Unsupported(Strategy::Xsavec))
        );
        assert_eq!(
            run(
                &env,
                Strategy::Xsave,
                Profile::Sse,
                InitMode::Minimal,
                8,
                &mut s[..100]
            ),
            Err(RunError::Scratch {
                need: scratch_bytes(&env),
                have: 100
            })
        );
    }

    /// The real thing on the host CPU: every strategy, both profiles, both
    /// initial states; each context must get exactly its own state back.
    #[test]
    fn switches_preserve_each_contexts_state_on_host() {
        let env = Env::host();
        let mut scratch = test_scratch(scratch_bytes(&env));
        for s in Strategy::ALL {
            if !s.supported(&env.info) {
                continue;
            }
            for p in [Profile::Sse, Profile::Avx] {
                if p == Profile::Avx && !env.has_avx() {
                    continue;
                }
                for start in [InitMode::Minimal, InitMode::AllOfXcr0] {
                    for n in [4u64, 7, 101] {
                        let m = run(&env, s, p, start, n, &mut scratch).unwrap();
                        assert!(m.state_ok, "{s:?} {p:?} {start:?} {n}");
                        assert_eq!(m.switches, n + 1);
                        assert!(m.cycles > 0);
                        assert!(m.bytes_per_save >= 576, "{m:?}");
                    }
                }
            }
        }
        // SSE contexts from the minimal state: XSAVEC writes the legacy
        // region and header only. (From all of XCR0 it writes at least as
        // much; how much more depends on whether the CPU tracks the zeroed
        // upper state as in use, which differs between CPUs.)
        if Strategy::Xsavec.supported(&env.info) && env.has_avx() {
            let lean = run(
                &env,
                Strategy::Xsavec,
                Profile::Sse,
                InitMode::Minimal,
                40,
                &mut scratch,
            )
            .unwrap();
            let fat = run(
                &env,
                Strategy::Xsavec,
                Profile::Sse,
                InitMode::AllOfXcr0,
                40,
                &mut scratch,
            )
            .unwrap();
            assert_eq!(lean.bytes_per_save, 576);
            assert!(
                fat.bytes_per_save >= lean.bytes_per_save,
                "{fat:?} {lean:?}"
            );
            let avx = run(
                &env,
                Strategy::Xsavec,
                Profile::Avx,
                InitMode::Minimal,
                40,
                &mut scratch,
            )
            .unwrap();
            assert_eq!(avx.bytes_per_save, 576 + 256, "{avx:?}");
        }
    }

    #[test]
    fn calibration_chooses_a_measured_minimum() {
        let env = Env::host();
        let mut scratch = test_scratch(scratch_bytes(&env));
        let c = calibrate(&env, &mut scratch);
        let choice = c.choice.expect("XSAVE is always a candidate");
        let best = c.cycles.iter().flatten().min().copied().unwrap();
        assert_eq!(c.cycles[choice as usize], Some(best));
        assert!(c.cycles[0].is_some());
        for s in Strategy::ALL {
            assert_eq!(
                c.cycles[s as usize].is_some(),
                s.supported(&env.info),
                "{s:?}"
            );
        }
        assert!(c.total_cycles > 0);
    }
}
