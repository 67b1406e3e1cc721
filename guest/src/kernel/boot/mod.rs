//! The whole CPL0 side of the kernel, in assembly: PVH entry, descriptor
//! tables, page tables, the switch to long mode and to CPL3, exception
//! handlers and the system-call gate.
//!
//! # Why assembly, and why so little of it
//!
//! On the development host (a software-nested KVM, `kvm_pvm`) only 64-bit
//! CPL3 code runs natively; 32-bit and CPL0 code goes through KVM's
//! instruction emulator at ~0.7 µs per instruction, and that emulator has no
//! VEX encoding, so one AVX instruction emitted by the compiler at CPL0 would
//! end the run with `KVM_EXIT_INTERNAL_ERROR`. Hence:
//!
//! - every table (GDT, IDT, TSS with its I/O bitmap, page tables) is static
//!   data finished by the assembler and the linker; the boot path writes no
//!   table entry at run time;
//! - the boot path from the PVH entry to the first CPL3 instruction is 34
//!   instructions (11 in 32-bit mode, 23 in 64-bit mode with XSAVE); from
//!   vmm's direct 64-bit entry (`direct_start64`, declared by an ELF note
//!   `"vmm"` type 1; the VMM sets long mode itself, see
//!   `vmm/src/arch/regs.rs`) it is 31, and `.bss`, fresh RAM there, is not
//!   zeroed again;
//! - no Rust code ever runs at CPL0: Rust starts at CPL3 in
//!   `user_main` (main.rs) and a task fault is reflected to CPL3
//!   ([`crate::kernel::fault::kernel_on_fault`]).
//!
//! # Memory map (guest-physical = virtual, identity mapped)
//!
//! | range | use |
//! |-------|-----|
//! | `0x0000_0000..0x0000_1000` | not mapped: catches null-pointer dereferences |
//! | `0x0000_1000..0x0010_0000` | mapped; the VMM's `hvm_start_info`, memory map and command line usually live here |
//! | `0x0010_0000..__kernel_end` | the kernel image: `.boot` (this file) first, then text, rodata, data, bss (stacks) |
//! | `__kernel_end..` | free RAM for workloads ([`crate::kernel::arena`]) |
//! | `..0x1_0000_0000` | everything below 4 GiB is mapped with 2 MiB pages (4 KiB pages in the first 2 MiB), read/write/execute, user-accessible |
//!
//! # GDT
//!
//! | selector | descriptor |
//! |----------|------------|
//! | `0x08` | kernel code, 64-bit, DPL0 ([`KERNEL_CS`]) |
//! | `0x10` | kernel data, DPL0 ([`KERNEL_DS`]) |
//! | `0x1b` | user data, DPL3 ([`USER_DS`]) |
//! | `0x23` | user code, 64-bit, DPL3 ([`USER_CS`]) |
//! | `0x28` | 64-bit TSS ([`TSS_SEL`]): RSP0 = kernel stack, IST1 = #DF stack, I/O bitmap granting every port |
//!
//! The order (kernel CS, kernel DS, user DS, user CS) is the one
//! `SYSCALL`/`SYSRET` would need, should a CPU ever make them usable here.
//!
//! # Port I/O from CPL3
//!
//! The task runs with RFLAGS.IOPL=3 *and* a TSS I/O permission bitmap that
//! allows every port. On hardware KVM either grants the ports; on the
//! development host the IOPL written by IRETQ does not reach CPL3 (RFLAGS
//! reads IOPL=0 there) but the bitmap is honoured, so both are needed.
//!
//! # System calls
//!
//! The gate is `INT3` through a DPL3 #BP gate, but only the one `int3` in
//! `kernel_syscall_gate` (a two-instruction trampoline, `int3; ret`): the
//! #BP stub checks the return RIP and treats any other breakpoint as the
//! fault it is. Why not the usual instructions: on the development host
//! `INT n` from CPL3 raises #UD, and `SYSCALL` jumps to LSTAR without
//! leaving CPL3 (CS stays 0x23, so XSETBV there raises #GP), while
//! exceptions are delivered faithfully. [`crate::kernel::syscall`] has the
//! numbers and the calling convention.
//!
//! # IDT and faults
//!
//! Vectors 0..=31 are interrupt gates to one stub each, DPL0 except the #BP
//! system-call gate; #DF uses IST1.
//! Nothing raises other vectors (RFLAGS.IF is 0 everywhere), so the IDT ends
//! at 31. The common fault path records vector, error code, RIP, CR2 and CPL
//! in the faulting CPU's own `kernel_fault[cpu]` (a
//! [`guest::protocol::FaultRecord`]; the CPU is known by its TSS selector,
//! `STR`) and `iretq`s to [`crate::kernel::fault::kernel_on_fault`]`(cpu)`
//! at CPL3 on that CPU's own fresh stack, so two CPUs faulting at once do
//! not collide. The reporter prints,
//! fills the report, hands it to the VMM and exits with
//! `ExitStatus::Exception`. Two kinds of fault never reach CPL3:
//!
//! - a fault at one of the two XSETBV instructions is *fixed up*: boot
//!   leaves XCR0 at its reset value and flags `boot_xsetbv_failed` (the
//!   report then says the VMM's CPUID 0xD is inconsistent); the system call
//!   returns an error;
//! - a #DF, a fault before the first CPL3 instruction ran, or a fault while
//!   a fault is already being reported on the same CPU: the handler prints a fixed message
//!   with the vector and RIP on COM1 and writes `ExitStatus::Exception` to
//!   the debug-exit port itself. Nothing can triple-fault.
//!
//! # Ending the run under other VMMs
//!
//! Every way out (`SYS_EXIT`, `SYS_HALT`, the fatal path) writes the
//! debug-exit port first; `vmm` and QEMU's `isa-debug-exit` stop there.
//! Cloud Hypervisor and Firecracker ignore that port, so the same path goes
//! on with the shutdown each of them honours (ACPI S5 on port 0x600, an
//! i8042 reset on port 0x64; see [`guest::protocol::ports`]) and only then
//! halts. All of it runs at CPL0, so no I/O permission is involved.

use guest::protocol::record::MAX_CPUS;
use guest::protocol::{
    ExitStatus, ACPI_S5_SHUTDOWN, ACPI_SHUTDOWN_PORT, DEBUG_EXIT_PORT, I8042_COMMAND_PORT,
    I8042_RESET, SERIAL_PORT,
};

/// Kernel code selector (64-bit, DPL0).
pub const KERNEL_CS: u16 = 0x08;
/// Kernel data selector (also SYSCALL's SS).
pub const KERNEL_DS: u16 = 0x10;
/// User data/stack selector, RPL3.
pub const USER_DS: u16 = 0x18 | 3;
/// User code selector (64-bit), RPL3.
pub const USER_CS: u16 = 0x20 | 3;
/// Task-state segment selector.
pub const TSS_SEL: u16 = 0x28;

/// Size of the CPL3 stack `user_main` runs on.
pub const USER_STACK_SIZE: usize = 512 * 1024;
/// Size of the CPL3 stack the fault reporter runs on.
pub const FAULT_STACK_SIZE: usize = 64 * 1024;
/// Size of the CPL0 stack (RSP0): exception frames and system calls only.
pub const KERNEL_STACK_SIZE: usize = 4096;
/// Size of the #DF stack (IST1).
pub const DF_STACK_SIZE: usize = 4096;
/// log2 of each AP's CPL0 stack (and #DF stack) size (`boot/ap.s`).
pub const AP_KERNEL_STACK_SHIFT: u32 = 12;
/// log2 of each AP's CPL3 stack size (`boot/ap.s`): 128 KiB.
pub const AP_USER_STACK_SHIFT: u32 = 17;
/// log2 of each AP's CPL3 fault-reporter stack size (`boot/ap.s`): 64 KiB,
/// as the BSP's [`FAULT_STACK_SIZE`].
pub const AP_FAULT_STACK_SHIFT: u32 = 16;

/// CR0 in long mode: PE, MP (WAIT honours TS), ET, NE (native x87 errors),
/// WP, PG. EM and TS clear: x87/SSE instructions execute.
const CR0_LONG: u32 = 0x8001_0033;
/// CR4 for the switch to long mode: PAE, OSFXSR, OSXMMEXCPT.
const CR4_BOOT: u32 = 0x0000_0620;
/// CR4.OSXSAVE, set only when CPUID.1:ECX.XSAVE says the CPU has XSAVE.
const CR4_OSXSAVE: u32 = 1 << 18;
const MSR_EFER: u32 = 0xC000_0080;
/// IA32_EFER: LME (long mode).
const EFER_BOOT: u32 = 1 << 8;
// The SYSCALL/SYSRET selector order (see the GDT table above).
const _: () = assert!(
    KERNEL_DS == KERNEL_CS + 8 && USER_DS == (KERNEL_DS + 8) | 3 && USER_CS == (KERNEL_DS + 16) | 3
);

/// RFLAGS for CPL3: IOPL=3 (port I/O; see the module docs), IF=0 (no
/// interrupts are used), bit 1 (always 1).
const USER_RFLAGS: u32 = 0x3002;

// The CPL0 side, in four parts assembled as one unit (in this order): the
// descriptors compute their split address fields at assembly time as
// KBASE + (symbol - boot_start), which needs the stubs and the tables in
// the same object. AT&T syntax; `.boot` is placed first at KERNEL_BASE by
// linker.ld. The parts reach Rust through two exported symbols,
// `user_main` (main.rs: the start info's address, and CPUID 0xD.0 EDX:EAX
// as the XCR0 the entry set, 0 without XSAVE) and `kernel_on_fault`
// (kernel/fault.rs).
core::arch::global_asm!(
    include_str!("entry.s"),
    include_str!("faults.s"),
    include_str!("syscalls.s"),
    include_str!("tables.s"),
    include_str!("ap.s"),
    cr4_boot = const CR4_BOOT,
    cr4_xsave = const CR4_BOOT | CR4_OSXSAVE,
    msr_efer = const MSR_EFER,
    efer_boot = const EFER_BOOT,
    cr0_long = const CR0_LONG,
    kernel_cs = const KERNEL_CS,
    user_ds = const USER_DS,
    user_cs = const USER_CS,
    tss_sel = const TSS_SEL,
    user_rflags = const USER_RFLAGS,
    serial_port = const SERIAL_PORT,
    debug_exit_port = const DEBUG_EXIT_PORT,
    acpi_shutdown_port = const ACPI_SHUTDOWN_PORT,
    acpi_s5 = const ACPI_S5_SHUTDOWN,
    i8042_command_port = const I8042_COMMAND_PORT,
    i8042_reset = const I8042_RESET,
    exit_exception = const ExitStatus::Exception as u32,
    user_stack_size = const USER_STACK_SIZE,
    fault_stack_size = const FAULT_STACK_SIZE,
    kernel_stack_size = const KERNEL_STACK_SIZE,
    df_stack_size = const DF_STACK_SIZE,
    max_cpus = const guest::protocol::record::MAX_CPUS,
    ap_kstack_shift = const AP_KERNEL_STACK_SHIFT,
    ap_ustack_shift = const AP_USER_STACK_SHIFT,
    ap_fstack_shift = const AP_FAULT_STACK_SHIFT,
    options(att_syntax)
);

// Shared with the assembly above; defined there (in `.boot`, not `.bss`,
// because the CPL0 path writes them before `.bss` is zeroed).
extern "C" {
    static kernel_fault: [guest::protocol::FaultRecord; MAX_CPUS as usize];
    static boot_xsetbv_failed: u32;
}

/// The fault the CPL0 handler recorded for CPU `cpu`, if any (an empty
/// record past [`MAX_CPUS`]).
pub fn recorded_fault(cpu: usize) -> guest::protocol::FaultRecord {
    if cpu >= MAX_CPUS as usize {
        return guest::protocol::FaultRecord::default();
    }
    // SAFETY: `kernel_fault` is MAX_CPUS 40-byte, 8-aligned records defined
    // in the assembly above with the layout of `FaultRecord` (plain
    // integers), `cpu` is in range. Only the CPL0 fault path of CPU `cpu`
    // writes record `cpu`, and it does so before switching to the CPL3 code
    // that reads it; the volatile read keeps the compiler from assuming it
    // never changes.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(kernel_fault[cpu])) }
}

/// True when the boot XSETBV faulted: CPUID 0xD.0 EDX:EAX enumerated a mask
/// the CPU (as virtualised) refused, and XCR0 kept its reset value.
pub fn boot_xsetbv_faulted() -> bool {
    // SAFETY: a 4-byte flag defined in the assembly above, written only by
    // the CPL0 boot path before CPL3 code runs.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(boot_xsetbv_failed)) != 0 }
}
