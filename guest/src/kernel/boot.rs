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
//!   instructions (11 in 32-bit mode, 23 in 64-bit mode with XSAVE);
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
//! in `kernel_fault` (a [`guest::protocol::FaultRecord`]) and `iretq`s to
//! [`crate::kernel::fault::kernel_on_fault`] at CPL3 on a fresh stack, which prints,
//! fills the report, hands it to the VMM and exits with
//! `ExitStatus::Exception`. Two kinds of fault never reach CPL3:
//!
//! - a fault at one of the two XSETBV instructions is *fixed up*: boot
//!   leaves XCR0 at its reset value and flags `boot_xsetbv_failed` (the
//!   report then says the VMM's CPUID 0xD is inconsistent); the system call
//!   returns an error;
//! - a #DF, a fault before the first CPL3 instruction ran, or a fault while
//!   a fault is already being reported: the handler prints a fixed message
//!   with the vector and RIP on COM1 and writes `ExitStatus::Exception` to
//!   the debug-exit port itself. Nothing can triple-fault.

use guest::protocol::{ExitStatus, DEBUG_EXIT_PORT, SERIAL_PORT};

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

// The CPL0 side. AT&T syntax; `.boot` is placed first at KERNEL_BASE by
// linker.ld, which lets the assembler compute the split address fields of
// descriptors as KBASE + (symbol - boot_start).
core::arch::global_asm!(
    r#"
    .set KBASE, 0x100000

/* ---------------------------------------------------------------------- */
/* PVH ELF note: XEN_ELFNOTE_PHYS32_ENTRY (18), name "Xen", 8-byte entry.  */
/* ---------------------------------------------------------------------- */
    .pushsection .note.Xen, "a", @note
    .p2align 2
    .long 4
    .long 8
    .long 18
    .asciz "Xen"
    .p2align 2
    .quad pvh_start32
    .p2align 2
    .popsection

    .pushsection .boot, "awx", @progbits
    .globl boot_start
boot_start:

/* ---------------------------------------------------------------------- */
/* PVH entry: 32-bit protected mode, flat CS/DS, paging off, interrupts   */
/* off, EBX = guest-physical address of hvm_start_info.                   */
/* 11 instructions, all emulated on the development host.                 */
/* ---------------------------------------------------------------------- */
    .code32
    .globl pvh_start32
pvh_start32:
    lgdt gdt_ptr
    movl $pml4, %eax
    movl %eax, %cr3
    movl ${cr4_boot}, %eax
    movl %eax, %cr4
    movl ${msr_efer}, %ecx
    movl ${efer_boot}, %eax
    xorl %edx, %edx
    wrmsr
    movl ${cr0_long}, %eax
    movl %eax, %cr0
    ljmp ${kernel_cs}, $long_entry

/* ---------------------------------------------------------------------- */
/* 64-bit CPL0: stack, IDT, TSS, XSAVE, then iretq to CPL3.                */
/* 12 instructions, 23 when the CPU has XSAVE.                             */
/* ---------------------------------------------------------------------- */
    .code64
long_entry:
    movl %ebx, %edi             /* start_info for user_main, zero-extended */
    movl $kernel_stack_top, %esp
    lidt idt_ptr
    movw ${tss_sel}, %ax
    ltr %ax
    movl $1, %eax
    cpuid
    btl $26, %ecx               /* CPUID.1:ECX.XSAVE */
    jnc 1f
    movl ${cr4_xsave}, %eax
    movq %rax, %cr4
    /* XCR0 = exactly the user state CPUID 0xD.0 EDX:EAX enumerates. */
    movl $0xd, %eax
    xorl %ecx, %ecx
    cpuid
    xorl %ecx, %ecx
boot_xsetbv:
    xsetbv
boot_xsetbv_done:
1:
    pushq ${user_ds}
    pushq $user_stack_top
    pushq ${user_rflags}
    pushq ${user_cs}
    pushq $user_entry
    iretq

/* ---------------------------------------------------------------------- */
/* Exception stubs: push a 0 error code where the CPU pushes none, push   */
/* the vector, join fault_common. One 16-byte slot each.                   */
/* ---------------------------------------------------------------------- */
    .irp v, 0,1,2,4,5,6,7,9,15,16,18,19,20,22,23,24,25,26,27,28,31
    .p2align 4
isr_\v:
    pushq $0
    pushq $\v
    jmp fault_common
    .endr
    .irp v, 8,10,11,12,13,14,17,21,29,30
    .p2align 4
isr_\v:
    pushq $\v
    jmp fault_common
    .endr

/* Frame: 0 vector, 8 error code, 16 RIP, 24 CS, 32 RFLAGS, 40 RSP, 48 SS. */
fault_common:
    cmpq $boot_xsetbv, 16(%rsp)
    je 80f
    cmpq $sys_xsetbv_insn, 16(%rsp)
    je 81f
    cmpq $8, (%rsp)
    je fatal
    cmpl $0, kernel_fault
    jne fatal
    cmpl $0, user_ready
    je fatal
    movq (%rsp), %rax
    movl %eax, kernel_fault+4
    movq 8(%rsp), %rax
    movq %rax, kernel_fault+8
    movq 16(%rsp), %rax
    movq %rax, kernel_fault+16
    movq %cr2, %rax
    movq %rax, kernel_fault+24
    movq 24(%rsp), %rax
    andl $3, %eax
    movl %eax, kernel_fault+32
    movl $1, kernel_fault
    /* Reflect to the CPL3 reporter on its own stack. */
    pushq ${user_ds}
    pushq $fault_stack_top
    pushq ${user_rflags}
    pushq ${user_cs}
    pushq $fault_entry
    iretq

80: /* Boot XSETBV refused the CPUID 0xD.0 mask: keep the reset XCR0. */
    movl $1, boot_xsetbv_failed
    movq $boot_xsetbv_done, 16(%rsp)
    addq $16, %rsp
    iretq
81: /* System-call XSETBV refused the value: return an error. */
    movq $sys_xsetbv_refused, 16(%rsp)
    addq $16, %rsp
    iretq

/* Unrecoverable: say so on COM1 and leave through the debug-exit port. */
fatal:
    cld
    movq (%rsp), %rax
    movl %eax, %ecx
    shrl $4, %ecx
    andl $15, %ecx
    movb hex_digits(%rcx), %cl
    movb %cl, fatal_vector
    andl $15, %eax
    movb hex_digits(%rax), %al
    movb %al, fatal_vector+1
    movq 16(%rsp), %rax
    movl $fatal_rip + 15, %edi
    movl $16, %ecx
7:  movl %eax, %edx
    andl $15, %edx
    movb hex_digits(%rdx), %dl
    movb %dl, (%rdi)
    shrq $4, %rax
    decq %rdi
    decl %ecx
    jnz 7b
    movl $fatal_msg, %esi
    movl $fatal_msg_end - fatal_msg, %ecx
    movw ${serial_port}, %dx
    rep outsb
    movl ${exit_exception}, %eax
    movw ${debug_exit_port}, %dx
    outl %eax, %dx
2:  hlt
    jmp 2b

/* ---------------------------------------------------------------------- */
/* System calls: `call kernel_syscall_gate` with RAX = number, RDI/RSI/RDX */
/* = arguments; RAX = result. RCX, RDX, RSI, RDI and R11 are clobbered,   */
/* every other register is preserved. Numbers: see kernel/syscall.rs.     */
/* The #BP gate is DPL3; frame: 0 RIP, 8 CS, 16 RFLAGS, 24 RSP, 32 SS.    */
/* ---------------------------------------------------------------------- */
    .p2align 4
    .globl kernel_syscall_gate
kernel_syscall_gate:
    int3
syscall_gate_ret:
    ret

    .p2align 4
isr_3:
    cmpq $syscall_gate_ret, (%rsp)
    jne 9f
    cmpq $(sys_table_end - sys_table) / 8, %rax
    jae sys_unknown
    jmp *sys_table(,%rax,8)
9:  pushq $0                    /* a stray breakpoint: a fault like any */
    pushq $3
    jmp fault_common

sys_nop:
    xorl %eax, %eax
    iretq

sys_exit:
    movl %edi, %eax
    movw ${debug_exit_port}, %dx
    outl %eax, %dx
sys_halt:
3:  hlt
    jmp 3b

sys_port_writes:                /* port RDI, value RSI, count RDX */
    movl %esi, %eax
    movq %rdx, %rcx
    movl %edi, %edx
    testq %rcx, %rcx
    jz 5f
4:  outl %eax, %dx
    decq %rcx
    jnz 4b
5:  xorl %eax, %eax
    iretq

sys_xsetbv:                     /* XCR index RDI, value RSI */
    movl %esi, %eax
    movq %rsi, %rdx
    shrq $32, %rdx
    movl %edi, %ecx
sys_xsetbv_insn:
    xsetbv
    xorl %eax, %eax
    iretq
sys_xsetbv_refused:
    movq $-1, %rax
    iretq

sys_unknown:
    movq $-2, %rax
    iretq

sys_cpuid:                      /* leaf RDI, subleaf RSI -> RAX = EBX:EAX, RDX = EDX:ECX */
    movl %edi, %eax
    movl %esi, %ecx
    pushq %rbx
    cpuid
    shlq $32, %rbx
    orq %rbx, %rax
    shlq $32, %rdx
    orq %rcx, %rdx
    popq %rbx
    iretq

    .p2align 3
sys_table:
    .quad sys_exit
    .quad sys_nop
    .quad sys_port_writes
    .quad sys_xsetbv
    .quad sys_halt
    .quad sys_cpuid
    .quad sys_mmio_stores       /* kernel/syscall.rs */
    .quad sys_cpuid_loop        /* kernel/syscall.rs */
sys_table_end:

/* ---------------------------------------------------------------------- */
/* CPL3 trampolines (native on the development host).                      */
/* ---------------------------------------------------------------------- */
user_entry:
    /* Zero .bss (the loader need not have): stacks, Rust statics. */
    movq %rdi, %r12
    movl $__bss_start, %edi
    movl $__bss_end, %ecx
    subl %edi, %ecx
    xorl %eax, %eax
    cld
    rep stosb
    /* x87 control word 0x37f: the power-on value is 0x40. */
    fninit
    movl $1, user_ready
    movl %r12d, %edi
    call user_main              /* main.rs */
    ud2

fault_entry:
    call kernel_on_fault        /* kernel/fault.rs */
    ud2

/* ---------------------------------------------------------------------- */
/* Descriptor tables                                                       */
/* ---------------------------------------------------------------------- */
    .p2align 4
gdt:
    .quad 0
    .quad 0x00af9a000000ffff    /* 0x08 kernel code, L=1 */
    .quad 0x00cf92000000ffff    /* 0x10 kernel data */
    .quad 0x00cff2000000ffff    /* 0x18 user data, DPL3 */
    .quad 0x00affa000000ffff    /* 0x20 user code, L=1, DPL3 */
    .set TSS_ADDR, tss - boot_start + KBASE
    .word tss_end - tss - 1     /* 0x28 TSS, 16 bytes */
    .word TSS_ADDR & 0xffff
    .byte (TSS_ADDR >> 16) & 0xff
    .byte 0x89
    .byte 0
    .byte (TSS_ADDR >> 24) & 0xff
    .long 0
    .long 0
gdt_end:

    .p2align 3
    .word 0, 0, 0
gdt_ptr:
    .word gdt_end - gdt - 1
    .long gdt

    .p2align 3
    .word 0, 0, 0
idt_ptr:
    .word idt_end - idt - 1
    .quad idt

    .p2align 4
tss:
    .long 0
    .quad kernel_stack_top      /* RSP0 */
    .quad 0                     /* RSP1 */
    .quad 0                     /* RSP2 */
    .quad 0
    .quad df_stack_top          /* IST1 */
    .fill 6, 8, 0               /* IST2..IST7 */
    .quad 0
    .word 0
    .word io_bitmap - tss
io_bitmap:                      /* every port allowed, plus the 0xff end byte */
    .fill 8192, 1, 0
    .byte 0xff
tss_end:

    /* Interrupt gate: offset split 15:0 / 31:16 / 63:32 (all below 4 GiB). */
    .macro GATE target, attr
    .word (\target - boot_start + KBASE) & 0xffff
    .word {kernel_cs}
    .word \attr
    .word ((\target - boot_start + KBASE) >> 16) & 0xffff
    .long 0
    .long 0
    .endm

    .p2align 4
idt:
    .irp v, 0,1,2
    GATE isr_\v, 0x8e00
    .endr
    GATE isr_3, 0xee00          /* DPL3: the system-call gate */
    .irp v, 4,5,6,7
    GATE isr_\v, 0x8e00
    .endr
    GATE isr_8, 0x8e01          /* #DF on IST1 */
    .irp v, 9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    GATE isr_\v, 0x8e00
    .endr
idt_end:

hex_digits:
    .ascii "0123456789abcdef"
fatal_msg:
    .ascii "guest: fatal exception (vector 0x"
fatal_vector:
    .ascii "??) at rip 0x"
fatal_rip:
    .ascii "????????????????: a double fault, a fault during boot or a fault while reporting a fault; exiting\n"
fatal_msg_end:

/* ---------------------------------------------------------------------- */
/* State shared with Rust. In .boot (not .bss): written before .bss is    */
/* zeroed.                                                                 */
/* ---------------------------------------------------------------------- */
    .p2align 3
    .globl kernel_fault
kernel_fault:                   /* protocol::FaultRecord, 40 bytes */
    .fill 40, 1, 0
    .globl boot_xsetbv_failed
boot_xsetbv_failed:
    .long 0
user_ready:
    .long 0

/* ---------------------------------------------------------------------- */
/* Identity-mapped page tables, finished at assembly time. Every entry    */
/* is user-accessible and has A (and D for leaves) preset so the CPU      */
/* never writes to them.                                                   */
/* ---------------------------------------------------------------------- */
    .p2align 12
pml4:
    .quad pdpt + 0x27
    .fill 511, 8, 0
pdpt:
    .quad pd + 0x27
    .quad pd + 0x1000 + 0x27
    .quad pd + 0x2000 + 0x27
    .quad pd + 0x3000 + 0x27
    .fill 508, 8, 0
pd:                             /* 4 pages: 2048 entries cover 4 GiB */
    .quad pt0 + 0x27            /* first 2 MiB in 4 KiB pages */
    .set PAGE_ADDR, 0x200000
    .rept 2047
    .quad PAGE_ADDR + 0xe7      /* P RW US A D PS */
    .set PAGE_ADDR, PAGE_ADDR + 0x200000
    .endr
pt0:
    .quad 0                     /* page 0: not present */
    .set PAGE_ADDR, 0x1000
    .rept 511
    .quad PAGE_ADDR + 0x67      /* P RW US A D */
    .set PAGE_ADDR, PAGE_ADDR + 0x1000
    .endr
    .popsection

/* ---------------------------------------------------------------------- */
/* Stacks (zeroed by user_entry along with the rest of .bss).              */
/* ---------------------------------------------------------------------- */
    .pushsection .bss.kernel_stacks, "aw", @nobits
    .p2align 12
    .skip {user_stack_size}
user_stack_top:
    .skip {fault_stack_size}
fault_stack_top:
    .skip {kernel_stack_size}
kernel_stack_top:
    .skip {df_stack_size}
df_stack_top:
    .popsection
"#,
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
    exit_exception = const ExitStatus::Exception as u32,
    user_stack_size = const USER_STACK_SIZE,
    fault_stack_size = const FAULT_STACK_SIZE,
    kernel_stack_size = const KERNEL_STACK_SIZE,
    df_stack_size = const DF_STACK_SIZE,
    options(att_syntax)
);

// Shared with the assembly above; defined there (in `.boot`, not `.bss`,
// because the CPL0 path writes them before `.bss` is zeroed).
extern "C" {
    static kernel_fault: guest::protocol::FaultRecord;
    static boot_xsetbv_failed: u32;
}

/// The fault the CPL0 handler recorded, if any.
pub fn recorded_fault() -> guest::protocol::FaultRecord {
    // SAFETY: `kernel_fault` is a 40-byte, 8-aligned record defined in the
    // assembly above with the layout of `FaultRecord` (plain integers). Only
    // the CPL0 fault path writes it, and it does so before switching to the
    // CPL3 code that reads it; the volatile read keeps the compiler from
    // assuming it never changes.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(kernel_fault)) }
}

/// True when the boot XSETBV faulted: CPUID 0xD.0 EDX:EAX enumerated a mask
/// the CPU (as virtualised) refused, and XCR0 kept its reset value.
pub fn boot_xsetbv_faulted() -> bool {
    // SAFETY: a 4-byte flag defined in the assembly above, written only by
    // the CPL0 boot path before CPL3 code runs.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(boot_xsetbv_failed)) != 0 }
}
