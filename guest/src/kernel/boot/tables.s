/* boot/tables.s: GDT, TSS with its I/O bitmap, IDT, the state shared */
/* with Rust, identity page tables and the stacks: all static data   */
/* finished by the assembler and linker. Must be assembled in one    */
/* unit with the stubs (the descriptors split their addresses).      */

    .pushsection .boot, "awx", @progbits
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
gdt_ptr64:                      /* the same GDT, for LGDT in 64-bit mode */
    .word gdt_end - gdt - 1
    .quad gdt

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

/* ---------------------------------------------------------------------- */
/* State shared with Rust. In .data (not .bss): written before .bss is    */
/* zeroed. First in .data (linker.ld), on the page the report starts on,  */
/* which CPL3 writes anyway: CPL3 reads and writes these flags, and in    */
/* .boot they cost a guest page fault of their own.                       */
/* ---------------------------------------------------------------------- */
    .pushsection .data.boot_shared, "aw", @progbits
    .p2align 3
    .globl kernel_fault
kernel_fault:                   /* protocol::FaultRecord (40 bytes) per CPU */
    .fill 40 * {max_cpus}, 1, 0
    .globl boot_xsetbv_failed
boot_xsetbv_failed:
    .long 0
user_ready:
    .long 0
bss_zeroed:                     /* 1: the entry path found .bss zero */
    .long 0
    .popsection

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
