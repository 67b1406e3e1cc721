//! The system-call interface of the kernel, and direct port I/O from CPL3.
//!
//! Calling convention: `call kernel_syscall_gate` (an `int3; ret`
//! trampoline whose `int3` is the only breakpoint the kernel treats as a
//! system call; see [`super::boot`] for why not `SYSCALL` or `INT 0x80`)
//! with RAX = number, RDI/RSI/RDX = arguments, result in RAX; RCX, RDX,
//! RSI, RDI and R11 are clobbered, all other registers (including all
//! vector registers) are preserved. The handlers are a few instructions of
//! assembly; every one of them is emulated on the development host (~0.7 µs
//! each; a `SYS_NOP` round trip is 7 plus the `call`/`ret`).
//!
//! | nr | name | arguments | result |
//! |----|------|-----------|--------|
//! | 0 | [`SYS_EXIT`] | status | does not return: writes status to the debug-exit port from CPL0 |
//! | 1 | [`SYS_NOP`] | — | 0: a bare CPL3→CPL0→CPL3 round trip |
//! | 2 | [`SYS_PORT_WRITES`] | port, value, count | 0 after `count` 32-bit `out`s at CPL0 (exit benchmark) |
//! | 3 | [`SYS_XSETBV`] | XCR index, value | 0, or [`SYS_ERR_REFUSED`] when the CPU raised #GP/#UD |
//! | 4 | [`SYS_HALT`] | — | does not return: the peer-VMM shutdown writes (ACPI S5, i8042 reset; see [`super::boot`]), then HLT with interrupts off |
//! | 5 | [`SYS_CPUID`] | leaf, subleaf | RAX = EBX:EAX, RDX = EDX:ECX of CPUID executed at CPL0 |
//! | 6 | [`SYS_MMIO_STORES`] | address, value, count | 0 after `count` 32-bit stores at CPL0 (exit benchmark) |
//! | 7 | [`SYS_CPUID_LOOP`] | leaf, count | 0 after `count` CPUIDs (subleaf 0) at CPL0 (exit benchmark) |
//! | 8 | [`SYS_PARK`] | — | does not return: HLT with interrupts off, nothing else (an AP that is done; see [`super::smp`]) |
//! | 9 | [`SYS_CPUID_MANY`] | entries, count | 0 after CPUID at CPL0 for each of `count` ≤ 32 [`CpuidQuery`] entries (results written into them); [`SYS_ERR_REFUSED`] above 32 |
//! | 10 | [`SYS_IDLE`] | — | does not return: HLT with interrupts on, for good (`hostile=idle-halt`; no timer or device is armed) |
//!
//! Unknown numbers return [`SYS_ERR_UNKNOWN`]. A new call is a handler
//! that ends with `iretq` (in boot.rs, or in the `global_asm!` of this file
//! for the benchmark loops), an entry at the end of `sys_table` in boot.rs,
//! and a constant here.

use guest::protocol::{ExitStatus, DEBUG_EXIT_PORT};

pub const SYS_EXIT: u64 = 0;
pub const SYS_NOP: u64 = 1;
pub const SYS_PORT_WRITES: u64 = 2;
pub const SYS_XSETBV: u64 = 3;
pub const SYS_HALT: u64 = 4;
pub const SYS_CPUID: u64 = 5;
pub const SYS_MMIO_STORES: u64 = 6;
pub const SYS_CPUID_LOOP: u64 = 7;
/// Halt this CPU for good, writing nothing (an AP whose work is done).
pub const SYS_PARK: u64 = 8;
/// CPUID at CPL0 for a list of leaves in one trip (see [`cpuid_many`]).
pub const SYS_CPUID_MANY: u64 = 9;
/// Halt for good with interrupts on (nothing is armed to send one).
pub const SYS_IDLE: u64 = 10;
/// The most entries one [`SYS_CPUID_MANY`] takes.
pub const CPUID_MANY_MAX: usize = 32;

/// The instruction raised an exception (#GP for an invalid XCR0 value).
pub const SYS_ERR_REFUSED: u64 = u64::MAX;
/// No such system call.
pub const SYS_ERR_UNKNOWN: u64 = u64::MAX - 1;

extern "C" {
    /// `int3; ret` in boot.rs; not callable from Rust (custom convention).
    fn kernel_syscall_gate();
}

/// Raw system call with up to three arguments.
///
/// # Safety
/// The call must be one whose effect the caller can uphold (e.g. an XCR0
/// change must not drop state a live value depends on).
pub unsafe fn syscall3(nr: u64, a: u64, b: u64, c: u64) -> u64 {
    let ret: u64;
    // SAFETY: the gate enters our own kernel, which runs the handler on
    // its own stack (RSP0) and clobbers at most RCX, RDX, RSI, RDI and R11
    // besides the RAX result. The `call` pushes a return address, so the
    // block may use the stack (no `nostack`: the red zone is kept free).
    unsafe {
        core::arch::asm!(
            "call {gate}",
            gate = sym kernel_syscall_gate,
            inlateout("rax") nr => ret,
            inlateout("rdi") a => _,
            inlateout("rsi") b => _,
            inlateout("rdx") c => _,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    ret
}

/// CPUID executed at CPL0.
///
/// On a hypervisor that lets CPL3 run natively without CPUID faulting (the
/// development host), CPUID at CPL3 shows the host's answer, while CPUID at
/// CPL0 is emulated by KVM and shows the VMM's CPUID policy. Returns
/// `(eax, ebx, ecx, edx)`.
pub fn cpuid_cpl0(leaf: u32, subleaf: u32) -> (u32, u32, u32, u32) {
    let (lo, hi): (u64, u64);
    // SAFETY: SYS_CPUID only executes CPUID; RAX and RDX carry the result
    // (RDX is one of the clobbered argument registers, read back here).
    unsafe {
        core::arch::asm!(
            "call {gate}",
            gate = sym kernel_syscall_gate,
            inlateout("rax") SYS_CPUID => lo,
            inlateout("rdi") u64::from(leaf) => _,
            inlateout("rsi") u64::from(subleaf) => _,
            lateout("rdx") hi,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    (lo as u32, (lo >> 32) as u32, hi as u32, (hi >> 32) as u32)
}

/// One leaf for [`cpuid_many`]: what to ask, and the answer. The layout
/// is the system call's (boot/syscalls.s reads and writes it by offset).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuidQuery {
    pub leaf: u32,
    pub subleaf: u32,
    pub eax: u32,
    pub ebx: u32,
    pub ecx: u32,
    pub edx: u32,
}

// The handler's offsets: leaf 0, subleaf 4, EAX..EDX 8..24.
const _: () = assert!(core::mem::size_of::<CpuidQuery>() == 24);

/// [`cpuid_cpl0`] for every entry of `queries`, in one system call per
/// [`CPUID_MANY_MAX`] entries: each CPL0 instruction is emulated on the
/// development host, and a system call's entry and exit cost more
/// instructions than the CPUID itself.
pub fn cpuid_many(queries: &mut [CpuidQuery]) {
    for chunk in queries.chunks_mut(CPUID_MANY_MAX) {
        // SAFETY: the handler writes only the `chunk.len()` entries at the
        // pointer (24 bytes each, the layout of `CpuidQuery`), which are
        // this exclusive borrow; the count is within its limit.
        let ret = unsafe {
            syscall3(
                SYS_CPUID_MANY,
                chunk.as_mut_ptr() as u64,
                chunk.len() as u64,
                0,
            )
        };
        debug_assert_eq!(ret, 0);
    }
}

/// End the run with `status` through the CPL0 exit path.
pub fn exit(status: ExitStatus) -> ! {
    // SAFETY: SYS_EXIT never returns and has no other effect.
    unsafe { syscall3(SYS_EXIT, status as u64, 0, 0) };
    halt_forever()
}

/// One empty round trip to CPL0 and back.
pub fn nop() {
    // SAFETY: SYS_NOP has no effect.
    unsafe { syscall3(SYS_NOP, 0, 0, 0) };
}

/// Perform `count` 32-bit writes of `value` to `port` from CPL0.
pub fn port_writes(port: u16, value: u32, count: u64) {
    // SAFETY: port writes have no effect on guest memory; the caller picks a
    // port whose device tolerates them.
    unsafe { syscall3(SYS_PORT_WRITES, port.into(), value.into(), count) };
}

/// Perform `count` 32-bit stores of `value` to `addr` from CPL0.
///
/// # Safety
/// `addr` must be mapped and writable, and a store there must not corrupt
/// memory anything relies on (the exit benchmark uses unbacked
/// guest-physical memory, where each store is an MMIO exit).
pub unsafe fn mmio_stores(addr: u64, value: u32, count: u64) {
    // SAFETY: forwarded to the caller's contract.
    unsafe { syscall3(SYS_MMIO_STORES, addr, value.into(), count) };
}

/// Execute CPUID(`leaf`, 0) `count` times at CPL0 (where KVM emulates it
/// on every host).
pub fn cpuid_loop(leaf: u32, count: u64) {
    // SAFETY: CPUID has no side effects; the handler preserves RBX.
    unsafe { syscall3(SYS_CPUID_LOOP, leaf.into(), count, 0) };
}

// The exit-benchmark loops at CPL0, entered through `sys_table` in boot.rs
// on the kernel stack with the CPL3 return frame on it. As short as the
// other handlers: every instruction here is emulated on the development
// host.
core::arch::global_asm!(
    r#"
    .pushsection .text.kernel_bench_calls, "ax", @progbits
    .globl sys_mmio_stores
sys_mmio_stores:                /* address RDI, value RSI, count RDX */
    movq %rdx, %rcx
    testq %rcx, %rcx
    jz 2f
1:  movl %esi, (%rdi)
    decq %rcx
    jnz 1b
2:  xorl %eax, %eax
    iretq

    .globl sys_cpuid_loop
sys_cpuid_loop:                 /* leaf RDI, count RSI */
    pushq %rbx
    testq %rsi, %rsi
    jz 4f
3:  movl %edi, %eax
    xorl %ecx, %ecx
    cpuid
    decq %rsi
    jnz 3b
4:  popq %rbx
    xorl %eax, %eax
    iretq
    .popsection
"#,
    options(att_syntax)
);

/// A 32-bit `out` from CPL3 (one VM exit).
pub fn outl(port: u16, value: u32) {
    // SAFETY: the TSS I/O bitmap (and IOPL=3) grants CPL3 every port; an
    // `out` touches no memory.
    unsafe {
        core::arch::asm!("out dx, eax", in("dx") port, in("eax") value,
            options(nostack, nomem, preserves_flags));
    }
}

/// A 32-bit `in` from CPL3 (one VM exit).
pub fn inl(port: u16) -> u32 {
    let value: u32;
    // SAFETY: the TSS I/O bitmap (and IOPL=3) grants CPL3 every port; an
    // `in` touches no memory.
    unsafe {
        core::arch::asm!("in eax, dx", in("dx") port, out("eax") value,
            options(nostack, nomem, preserves_flags));
    }
    value
}

/// Hand the VMM the run's exit status, from CPL3. Does not return.
pub fn exit_direct(status: ExitStatus) -> ! {
    outl(DEBUG_EXIT_PORT, status as u32);
    halt_forever()
}

/// Stop the vCPU for good (for a VMM that ignored the debug-exit write).
pub fn halt_forever() -> ! {
    // SAFETY: SYS_HALT never returns and has no other effect.
    unsafe { syscall3(SYS_HALT, 0, 0, 0) };
    // Unreachable unless the gate is broken; HLT is privileged at CPL3.
    loop {
        core::hint::spin_loop();
    }
}

/// Halt this CPU for good with interrupts on: `hostile=idle-halt`, a
/// kernel's idle loop with nothing left to wake it.
pub fn idle_forever() -> ! {
    // SAFETY: SYS_IDLE never returns and has no other effect.
    unsafe { syscall3(SYS_IDLE, 0, 0, 0) };
    loop {
        core::hint::spin_loop();
    }
}

/// Halt this CPU for good without the shutdown writes of [`halt_forever`]:
/// an AP that has reported parks here until the VMM ends the run.
pub fn park_forever() -> ! {
    // SAFETY: SYS_PARK never returns and has no other effect.
    unsafe { syscall3(SYS_PARK, 0, 0, 0) };
    loop {
        core::hint::spin_loop();
    }
}
