/* boot/entry.s: PVH entry, the switch to long mode and to CPL3, and */
/* the CPL3 trampolines into Rust. First of the parts that          */
/* kernel/boot/mod.rs assembles as one unit (its constants fill    */
/* the named holes); it opens .boot with boot_start.              */

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

/* ---------------------------------------------------------------------- */
/* vmm's direct 64-bit entry note: name "vmm", type 1, 8-byte entry. A    */
/* VMM that knows it (vmm/src/arch/regs.rs) starts the vCPU at            */
/* direct_start64 in long mode instead of at the PVH entry; others ignore */
/* a note they do not know.                                                */
/* ---------------------------------------------------------------------- */
    .pushsection .note.vmm, "a", @note
    .p2align 2
    .long 4
    .long 8
    .long 1
    .asciz "vmm"
    .p2align 2
    .quad direct_start64
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
/* Paging with the kernel's identity map, PAE, long mode, then CR0.PG:  */
/* the switch to long mode, shared with the AP trampoline (boot/ap.s,  */
/* assembled later in the same unit). The far jump that follows it      */
/* enters 64-bit code.                                                   */
    .macro enable_long_mode
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
    .endm

    .code32
    .globl pvh_start32
pvh_start32:
    lgdt gdt_ptr
    enable_long_mode
    ljmp ${kernel_cs}, $long_entry

/* ---------------------------------------------------------------------- */
/* vmm's direct entry: 64-bit CPL0, paging on (the VMM's identity map of   */
/* the first GiB), CR0/CR4/EFER as pvh_start32 sets them, flat CS 0x08,    */
/* EBX = hvm_start_info as for PVH, RSI = where to put the TSC of this     */
/* first instruction (start-up timing), .bss already zero (fresh RAM).     */
/* 7 instructions, then the PVH path's long_entry.                         */
/* ---------------------------------------------------------------------- */
    .code64
    .globl direct_start64
direct_start64:
    rdtsc
    movl %eax, (%rsi)
    movl %edx, 4(%rsi)
    lgdt gdt_ptr64
    movl $pml4, %eax
    movq %rax, %cr3
    movl $1, bss_zeroed
    jmp long_entry

/* ---------------------------------------------------------------------- */
/* 64-bit CPL0: stack, IDT, TSS, XSAVE, then iretq to CPL3.                */
/* 15 instructions, 23 when the CPU has XSAVE. EDX:EAX reach user_entry   */
/* as CPUID 0xD.0 EDX:EAX (the XCR0 set here), or 0 without XSAVE.        */
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
    jc 2f
    xorl %eax, %eax             /* no XSAVE: no XCR0 to hand over */
    xorl %edx, %edx
    jmp 1f
2:  movl ${cr4_xsave}, %eax
    movq %rax, %cr4
    /* XCR0 = exactly the user state CPUID 0xD.0 EDX:EAX enumerates. */
    movl $0xd, %eax
    xorl %ecx, %ecx
    cpuid                       /* EDX:EAX kept for user_entry */
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


    .popsection

/* ---------------------------------------------------------------------- */
/* CPL3 trampolines (native on the development host). In .text, first     */
/* (linker.ld): the page they share with the hot start of .text is one    */
/* guest page fault fewer than a page of .boot of their own, which CPL3   */
/* would otherwise touch for them alone.                                  */
/* ---------------------------------------------------------------------- */
    .pushsection .text.trampolines, "ax", @progbits
user_entry:
    /* Zero .bss (the loader need not have): stacks, Rust statics. */
    /* Not after the direct entry: its VMM hands over fresh, zero RAM, */
    /* and touching every .bss page costs ~150 page faults.            */
    movq %rdi, %r12
    shlq $32, %rdx              /* CPUID 0xD.0 EDX:EAX from long_entry */
    movl %eax, %eax
    orq %rdx, %rax
    movq %rax, %r13
    cmpl $0, bss_zeroed
    jne 2f
    movl $__bss_start, %edi
    movl $__bss_end, %ecx
    subl %edi, %ecx
    xorl %eax, %eax
    cld
    rep stosb
2:
    /* x87 control word 0x37f: the power-on value is 0x40. */
    fninit
    movl $1, user_ready
    movl %r12d, %edi
    movq %r13, %rsi
    call user_main              /* main.rs */
    ud2

fault_entry:
    call kernel_on_fault        /* kernel/fault.rs */
    ud2

    .popsection
