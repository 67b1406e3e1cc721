/* boot/ap.s: application processors (SMP). The real-mode trampoline   */
/* the BSP copies below 1 MiB (kernel/smp.rs), the APs' 64-bit CPL0     */
/* entry, their GDT with one TSS per CPU (all sharing one I/O bitmap),   */
/* and the park system call. Assembled as one unit with the other parts */
/* (boot/mod.rs).                                                        */

    .pushsection .boot, "awx", @progbits

/* ---------------------------------------------------------------------- */
/* Trampoline: copied to AP_TRAMPOLINE (kernel/smp.rs) and entered by the */
/* SIPI in real mode with CS = page, IP = 0. Straight to long mode: the   */
/* same CR3/CR4/EFER/CR0 as the PVH path, then a far jump into the        */
/* kernel. 11 instructions, emulated.                                     */
/* ---------------------------------------------------------------------- */
    .code16
    .globl ap_trampoline
ap_trampoline:
    cli
    lgdtl %cs:(ap_tramp_gdtr - ap_trampoline)
    enable_long_mode            /* boot/entry.s */
    ljmpl ${kernel_cs}, $ap_long_entry
    .p2align 2
ap_tramp_gdtr:
    .word ap_gdt_end - ap_gdt - 1
    .long ap_gdt
    .globl ap_trampoline_end
ap_trampoline_end:

/* ---------------------------------------------------------------------- */
/* 64-bit CPL0: the CPU index is the LAPIC ID (the vCPU number under    */
/* KVM and QEMU, so `xfeatures.cpuN=` names vCPU N whatever order the APs */
/* wake in); its kernel stack and TSS, the IDT, CR4.OSXSAVE where the CPU */
/* has XSAVE (XCR0 stays at its reset value: the CPU sets its own at      */
/* CPL3), then iretq to ap_main(index) on its own user stack. An ID the   */
/* kernel has no slots for parks at once. 28 instructions, emulated.      */
/* ---------------------------------------------------------------------- */
    .code64
ap_long_entry:
    movl $0xfee00020, %eax      /* LAPIC ID register: ID in bits 31:24 */
    movl (%rax), %eax
    shrl $24, %eax
    cmpl ${max_cpus}, %eax
    jae sys_park
    testl %eax, %eax
    jz sys_park
    movl %eax, %esi             /* CPU index, 1.. (CPUID clobbers EBX) */
    movl %eax, %esp
    shll ${ap_kstack_shift}, %esp
    addl $ap_kernel_stacks, %esp  /* top of stack `index` = base + index << shift */
    lidt idt_ptr
    shll $4, %eax
    addl ${tss_sel}, %eax       /* TSS of CPU i: selector 0x28 + 16 i */
    ltr %ax
    movl $1, %eax
    cpuid
    btl $26, %ecx
    jnc 1f
    movl ${cr4_xsave}, %eax
    movq %rax, %cr4
1:  movl %esi, %edi
    movl %esi, %eax
    shll ${ap_ustack_shift}, %eax
    addl $ap_user_stacks, %eax
    pushq ${user_ds}
    pushq %rax
    pushq ${user_rflags}
    pushq ${user_cs}
    pushq $ap_user_entry
    iretq

ap_user_entry:                  /* CPL3 */
    fninit
    call ap_main                /* kernel/smp.rs */
    ud2

/* Park: halt with interrupts off for good. With the in-kernel irqchip  */
/* KVM keeps a halted vCPU inside KVM_RUN; the VMM kicks it at the end. */
sys_park:
    cli
    hlt
    jmp sys_park

/* ---------------------------------------------------------------------- */
/* The APs' GDT: the kernel GDT's five segments, then one 16-byte TSS     */
/* descriptor per CPU index (index 0, the BSP, keeps its own in gdt).     */
/* ---------------------------------------------------------------------- */
    .p2align 4
ap_gdt:
    .quad 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
    .quad 0x00cff2000000ffff
    .quad 0x00affa000000ffff
    .set AP_I, 0
    .rept {max_cpus}
    .set AP_TSS_ADDR, ap_tss - boot_start + KBASE + AP_I * 104
    .word ap_iobitmap_end - ap_tss - AP_I * 104 - 1
    .word AP_TSS_ADDR & 0xffff
    .byte (AP_TSS_ADDR >> 16) & 0xff
    .byte 0x89
    .byte 0
    .byte (AP_TSS_ADDR >> 24) & 0xff
    .long 0
    .long 0
    .set AP_I, AP_I + 1
    .endr
ap_gdt_end:

/* One 104-byte TSS per CPU index: RSP0 its kernel stack, IST1 its own   */
/* #DF stack, the I/O bitmap the shared one below (offsets from each    */
/* TSS's base, so one 8 KiB bitmap serves every CPU).                   */
    .p2align 4
ap_tss:
    .set AP_I, 0
    .rept {max_cpus}
    .long 0
    .quad ap_kernel_stacks + (AP_I << {ap_kstack_shift})
    .quad 0
    .quad 0
    .quad 0
    .quad ap_df_stacks + ((AP_I + 1) << {ap_kstack_shift})
    .fill 6, 8, 0
    .quad 0
    .word 0
    .word ap_iobitmap - ap_tss - AP_I * 104
    .set AP_I, AP_I + 1
    .endr
ap_iobitmap:
    .fill 8192, 1, 0
    .byte 0xff
ap_iobitmap_end:
    .popsection

/* Stacks: index i's kernel stack ends at ap_kernel_stacks + i << shift  */
/* (index 0 unused), its user stack likewise.                            */
    .pushsection .bss.ap_stacks, "aw", @nobits
    .p2align 12
ap_kernel_stacks_base:
    .skip ({max_cpus}) << {ap_kstack_shift}
    .set ap_kernel_stacks, ap_kernel_stacks_base
ap_df_stacks:
    .skip ({max_cpus}) << {ap_kstack_shift}
    .globl ap_user_stacks_base
ap_user_stacks_base:
    .skip ({max_cpus}) << {ap_ustack_shift}
    .set ap_user_stacks, ap_user_stacks_base
    .globl ap_user_stacks_end
ap_user_stacks_end:
/* Index i's CPL3 fault-reporter stack ends at ap_fault_stacks + i << shift */
/* (boot/faults.s; index 0, the BSP, has fault_stack_top).                  */
    .globl ap_fault_stacks_base
ap_fault_stacks_base:
    .skip ({max_cpus}) << {ap_fstack_shift}
    .set ap_fault_stacks, ap_fault_stacks_base
    .globl ap_fault_stacks_end
ap_fault_stacks_end:
    .popsection
