/* boot/syscalls.s: the system-call gate (int3 in a trampoline), its  */
/* handlers and their table. Numbers and calling convention:           */
/* kernel/syscall.rs. Assembled as one unit with the other parts.      */

    .pushsection .boot, "awx", @progbits
/* ---------------------------------------------------------------------- */
/* System calls: `call kernel_syscall_gate` with RAX = number, RDI/RSI/RDX */
/* = arguments; RAX = result. RCX, RDX, RSI, RDI and R11 are clobbered,   */
/* every other register is preserved. Numbers: see kernel/syscall.rs.     */
/* The #BP gate is DPL3; frame: 0 RIP, 8 CS, 16 RFLAGS, 24 RSP, 32 SS.    */
/* ---------------------------------------------------------------------- */
/* The gate runs at CPL3: with the other CPL3 trampolines, in .text      */
/* (see user_entry in boot/entry.s), not on a page of .boot of its own.   */
    .pushsection .text.trampolines, "ax", @progbits
    .p2align 4
    .globl kernel_syscall_gate
kernel_syscall_gate:
    int3
syscall_gate_ret:
    ret
    .popsection

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
/* Reached only under a VMM that ignored the debug exit: stop the way  */
/* the others stop a guest. Cloud Hypervisor: ACPI S5 (an 8-bit write   */
/* of SLP_TYP 5 << 2 | SLP_EN 1 << 5 to its shutdown port); Firecracker: */
/* an i8042 CPU reset (command 0xfe). Then halt, should neither exist.   */
sys_halt:
peer_shutdown:
    movw ${acpi_shutdown_port}, %dx
    movb ${acpi_s5}, %al
    outb %al, %dx
    movw ${i8042_command_port}, %dx
    movb ${i8042_reset}, %al
    outb %al, %dx
3:  hlt
    jmp 3b

/* Idle for good: HLT with interrupts on and nothing armed to send one  */
/* (hostile=idle-halt). Only the VMM's halt watch ends it.             */
sys_idle:
    sti
    hlt
    jmp sys_idle

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

/* RDI = entries of 24 bytes (leaf, subleaf, then EAX, EBX, ECX, EDX    */
/* written here), RSI = their count (at most 32) -> 0, or -1 when the   */
/* count is too large. One trip to CPL0 for many leaves: 7 emulated     */
/* instructions a leaf instead of a whole system call each.             */
/* Unrolled: 32 copies of one entry's 7 instructions, entered at copy    */
/* 32 - count with RDI moved back as many entries, so copy k reads entry  */
/* k - (32 - count) (a loop's add, dec and jnz would be 3 more emulated   */
/* instructions per leaf, ~2 µs each under kvm_pvm).                      */
    .macro cpuid_many_entry k
cpuid_many_\k:
    movl (24 * \k)(%rdi), %eax
    movl (24 * \k + 4)(%rdi), %ecx
    cpuid
    movl %eax, (24 * \k + 8)(%rdi)
    movl %ebx, (24 * \k + 12)(%rdi)
    movl %ecx, (24 * \k + 16)(%rdi)
    movl %edx, (24 * \k + 20)(%rdi)
    .endm
sys_cpuid_many:
    cmpq $32, %rsi
    ja 7f
    pushq %rbx
    movl $32, %eax
    subl %esi, %eax
    imull $24, %eax, %ecx
    subq %rcx, %rdi
    jmp *cpuid_many_copies(, %rax, 8)
    .irp k, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    cpuid_many_entry \k
    .endr
cpuid_many_32:
    popq %rbx
    xorl %eax, %eax
    iretq
7:  movq $-1, %rax
    iretq
    .p2align 3
cpuid_many_copies:
    .irp k, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32
    .quad cpuid_many_\k
    .endr

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
    .quad sys_park              /* boot/ap.s */
    .quad sys_cpuid_many
    .quad sys_idle
sys_table_end:

    .popsection
