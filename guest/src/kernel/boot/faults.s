/* boot/faults.s: exception stubs, the common fault path that reflects */
/* a fault to the CPL3 reporter, and the fatal path for what cannot be */
/* reported. Assembled as one unit with the other parts (boot/mod.rs). */

    .pushsection .boot, "awx", @progbits
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
    cmpl $0, user_ready
    je fatal
    /* Which CPU: its TSS selector is 0x28 + 16 * index (boot/ap.s); its */
    /* record is kernel_fault[index], its reporter stack its own.        */
    str %ecx
    subl ${tss_sel}, %ecx
    shrl $4, %ecx
    cmpl ${max_cpus}, %ecx
    jae fatal
    imull $40, %ecx, %edi
    cmpl $0, kernel_fault(%rdi)
    jne fatal
    movq (%rsp), %rax
    movl %eax, kernel_fault+4(%rdi)
    movq 8(%rsp), %rax
    movq %rax, kernel_fault+8(%rdi)
    movq 16(%rsp), %rax
    movq %rax, kernel_fault+16(%rdi)
    movq %cr2, %rax
    movq %rax, kernel_fault+24(%rdi)
    movq 24(%rsp), %rax
    andl $3, %eax
    movl %eax, kernel_fault+32(%rdi)
    movl $1, kernel_fault(%rdi)
    movl $fault_stack_top, %eax
    testl %ecx, %ecx
    jz 1f
    movl %ecx, %eax
    shll ${ap_fstack_shift}, %eax
    addl $ap_fault_stacks, %eax
1:  movl %ecx, %edi             /* kernel_on_fault(cpu) */
    /* Reflect to the CPL3 reporter on its own stack. */
    pushq ${user_ds}
    pushq %rax
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
    jmp peer_shutdown

hex_digits:
    .ascii "0123456789abcdef"
fatal_msg:
    .ascii "guest: fatal exception (vector 0x"
fatal_vector:
    .ascii "??) at rip 0x"
fatal_rip:
    .ascii "????????????????: a double fault, a fault during boot or a fault while reporting a fault; exiting\n"
fatal_msg_end:

    .popsection
