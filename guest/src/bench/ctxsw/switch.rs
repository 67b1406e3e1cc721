//! The assembly of the context-switch benchmark: the four switch routines
//! (one per save strategy, each ending in XRSTOR) and the two context
//! bodies, with the `Run` record they share through fixed offsets. Kept
//! apart from the Rust that sets a run up and checks it ([`super`]).

use core::arch::naked_asm;
use core::mem::offset_of;

use xstate::SaveStrategy as Strategy;

/// Contexts switched round-robin.
pub const CONTEXTS: usize = 4;

/// What the contexts do between switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// `paddd xmm0`: SSE state only.
    Sse,
    /// `vpaddd ymm0`: the upper half of YMM0 stays live (needs AVX in XCR0).
    Avx,
}

impl Profile {
    /// Name in row variants (`sse`, `avx`).
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
pub(super) struct Ctx {
    pub(super) rsp: u64,
    pub(super) area: u64,
}

/// Shared by the contexts of one run; the bodies address it through R12.
#[repr(C, align(64))]
pub(super) struct Run {
    /// The increment of the vector work: 1 in every dword lane.
    pub(super) ones: [u32; 8],
    /// Activations left; the context that takes it to 0 switches to `main`.
    pub(super) remaining: u64,
    /// Requested-feature bitmap of every save and restore (XCR0).
    pub(super) rfbm: u64,
    /// Address of the strategy's switch routine.
    pub(super) switch: u64,
    pub(super) _pad: u64,
    pub(super) main: Ctx,
    pub(super) ctx: [Ctx; CONTEXTS],
}

const RUN_REMAINING: usize = offset_of!(Run, remaining);
const RUN_RFBM: usize = offset_of!(Run, rfbm);
const RUN_SWITCH: usize = offset_of!(Run, switch);
pub(super) const RUN_MAIN: usize = offset_of!(Run, main);
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

/// The assembly switch routine of a strategy.
pub(super) fn switch_fn(s: Strategy) -> usize {
    match s {
        Strategy::Xsave => switch_xsave as *const () as usize,
        Strategy::Xsaveopt => switch_xsaveopt as *const () as usize,
        Strategy::Xsavec => switch_xsavec as *const () as usize,
        Strategy::XsavecXinuse => switch_xsavec_xinuse as *const () as usize,
    }
}

/// The assembly body the contexts of a `profile` run.
pub(super) fn body_fn(profile: Profile) -> u64 {
    match profile {
        Profile::Sse => body_sse as *const () as u64,
        Profile::Avx => body_avx as *const () as u64,
    }
}
