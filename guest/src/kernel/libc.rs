//! `memcpy`, `memmove`, `memset`, `memcmp` and `bcmp`: the C symbols the
//! compiler emits calls to, which a `-nostdlib` image must supply.
//!
//! Written in assembly so the compiler cannot recognise a copy loop and
//! turn it back into a call to `memcpy` (infinite recursion). Sizes up to
//! 32 bytes use overlapping loads and stores (no loop, no `rep` start-up
//! cost); above that `memcpy` and `memset` choose by size from a [`Policy`]:
//! an SSE2 loop (64 bytes an iteration) below `memcpy_rep_min`, `rep movsb`
//! / `rep stosb` from it on, and for `memcpy` non-temporal SSE2 stores (and
//! an SFENCE) from `memcpy_nt_min` on. The policy starts as
//! [`Policy::DEFAULT`] (the SSE2 loop up to 256 bytes, no non-temporal
//! stores) and `bench=copy` replaces it with what it measured
//! ([`set_policy`]); nothing is measured at boot, so boot stays as cheap as
//! it was. Only CPL3 code calls these (no Rust runs at CPL0), so the SSE
//! registers are free to use; nothing here is VEX-encoded, so they work
//! under any XCR0.

use core::sync::atomic::{AtomicU64, Ordering};

pub use guest::bench::copy::crossover::Policy;

/// `memcpy` sizes from this one up use `rep movsb` (read by the assembly).
#[no_mangle]
static GUEST_MEMCPY_REP_MIN: AtomicU64 = AtomicU64::new(Policy::DEFAULT.memcpy_rep_min);
/// `memcpy` sizes from this one up use non-temporal stores.
#[no_mangle]
static GUEST_MEMCPY_NT_MIN: AtomicU64 = AtomicU64::new(Policy::DEFAULT.memcpy_nt_min);
/// `memset` sizes from this one up use `rep stosb`.
#[no_mangle]
static GUEST_MEMSET_REP_MIN: AtomicU64 = AtomicU64::new(Policy::DEFAULT.memset_rep_min);

/// Makes `memcpy` and `memset` follow `p` from now on. The non-temporal
/// threshold is never below 33 bytes (the small paths come first anyway).
pub fn set_policy(p: Policy) {
    GUEST_MEMCPY_REP_MIN.store(p.memcpy_rep_min, Ordering::Relaxed);
    GUEST_MEMCPY_NT_MIN.store(p.memcpy_nt_min, Ordering::Relaxed);
    GUEST_MEMSET_REP_MIN.store(p.memset_rep_min, Ordering::Relaxed);
}

/// The policy in force.
pub fn policy() -> Policy {
    Policy {
        memcpy_rep_min: GUEST_MEMCPY_REP_MIN.load(Ordering::Relaxed),
        memcpy_nt_min: GUEST_MEMCPY_NT_MIN.load(Ordering::Relaxed),
        memset_rep_min: GUEST_MEMSET_REP_MIN.load(Ordering::Relaxed),
    }
}

core::arch::global_asm!(
    r#"
    .pushsection .text.memcpy, "ax", @progbits
    .globl memcpy
    .type memcpy, @function
    .p2align 4
/* memcpy(rdi dst, rsi src, rdx n) -> rax dst. Regions do not overlap. */
memcpy:
    movq %rdi, %rax
    cmpq $16, %rdx
    ja .Lcpy_gt16
    /* 0..=16: every byte is loaded before any is stored, so this small   */
    /* path is also correct for overlapping regions (memmove uses it).    */
.Lcpy_le16:
    cmpq $8, %rdx
    jae .Lcpy_8_16
    cmpq $4, %rdx
    jae .Lcpy_4_7
    testq %rdx, %rdx
    je .Lcpy_ret
    movzbl (%rsi), %ecx
    movzbl -1(%rsi,%rdx), %r8d
    movq %rdx, %r9
    shrq $1, %r9
    movzbl (%rsi,%r9), %r10d
    movb %cl, (%rdi)
    movb %r10b, (%rdi,%r9)
    movb %r8b, -1(%rdi,%rdx)
.Lcpy_ret:
    ret
.Lcpy_4_7:
    movl (%rsi), %ecx
    movl -4(%rsi,%rdx), %r8d
    movl %ecx, (%rdi)
    movl %r8d, -4(%rdi,%rdx)
    ret
.Lcpy_8_16:
    movq (%rsi), %rcx
    movq -8(%rsi,%rdx), %r8
    movq %rcx, (%rdi)
    movq %r8, -8(%rdi,%rdx)
    ret
.Lcpy_gt16:
    cmpq $32, %rdx
    ja .Lcpy_gt32
    movups (%rsi), %xmm0
    movups -16(%rsi,%rdx), %xmm1
    movups %xmm0, (%rdi)
    movups %xmm1, -16(%rdi,%rdx)
    ret
.Lcpy_gt32:
    cmpq GUEST_MEMCPY_NT_MIN(%rip), %rdx
    jae .Lcpy_nt
    cmpq GUEST_MEMCPY_REP_MIN(%rip), %rdx
    jae .Lcpy_rep
    /* SSE2: 64-byte then 16-byte chunks forward, the last 16 bytes      */
    /* loaded first and stored last (they may overlap the last chunk).   */
    movups -16(%rsi,%rdx), %xmm1
    leaq -16(%rdi,%rdx), %r8
    movq %rdx, %rcx
.Lcpy_loop64:
    cmpq $80, %rcx
    jbe .Lcpy_loop
    movups (%rsi), %xmm0
    movups 16(%rsi), %xmm2
    movups 32(%rsi), %xmm3
    movups 48(%rsi), %xmm4
    movups %xmm0, (%rdi)
    movups %xmm2, 16(%rdi)
    movups %xmm3, 32(%rdi)
    movups %xmm4, 48(%rdi)
    addq $64, %rsi
    addq $64, %rdi
    subq $64, %rcx
    jmp .Lcpy_loop64
.Lcpy_loop:
    movups (%rsi), %xmm0
    movups %xmm0, (%rdi)
    addq $16, %rsi
    addq $16, %rdi
    subq $16, %rcx
    cmpq $16, %rcx
    ja .Lcpy_loop
    movups %xmm1, (%r8)
    ret
.Lcpy_rep:
    movq %rdx, %rcx
    rep movsb
    ret
.Lcpy_nt:
    /* Non-temporal: the first and last 16 bytes with ordinary stores,   */
    /* the rest with MOVNTDQ from the first 16-byte aligned destination, */
    /* then SFENCE (the streaming stores are weakly ordered until then). */
    movups (%rsi), %xmm0
    movups -16(%rsi,%rdx), %xmm1
    leaq -16(%rdi,%rdx), %r8
    movups %xmm0, (%rdi)
    movq %rdi, %rcx
    negq %rcx
    andq $15, %rcx
    addq %rcx, %rdi
    addq %rcx, %rsi
    subq %rcx, %rdx
.Lnt_loop64:
    cmpq $64, %rdx
    jb .Lnt_loop16
    movups (%rsi), %xmm0
    movups 16(%rsi), %xmm2
    movups 32(%rsi), %xmm3
    movups 48(%rsi), %xmm4
    movntdq %xmm0, (%rdi)
    movntdq %xmm2, 16(%rdi)
    movntdq %xmm3, 32(%rdi)
    movntdq %xmm4, 48(%rdi)
    addq $64, %rsi
    addq $64, %rdi
    subq $64, %rdx
    jmp .Lnt_loop64
.Lnt_loop16:
    cmpq $16, %rdx
    jb .Lnt_done
    movups (%rsi), %xmm0
    movntdq %xmm0, (%rdi)
    addq $16, %rsi
    addq $16, %rdi
    subq $16, %rdx
    jmp .Lnt_loop16
.Lnt_done:
    sfence
    movups %xmm1, (%r8)
    ret
    .size memcpy, . - memcpy
    .popsection

    .pushsection .text.memmove, "ax", @progbits
    .globl memmove
    .type memmove, @function
    .p2align 4
/* memmove(rdi dst, rsi src, rdx n) -> rax dst. Regions may overlap. */
memmove:
    movq %rdi, %rax
    cmpq $16, %rdx
    jbe .Lcpy_le16
    /* Forward is safe unless dst lies inside (src, src + n). */
    movq %rdi, %rcx
    subq %rsi, %rcx
    cmpq %rdx, %rcx
    jae .Lmove_fwd
    testq %rcx, %rcx
    je .Lmove_ret
    /* Backward, 16-byte chunks from the end, the first 16 bytes loaded  */
    /* first and stored last.                                             */
    movups (%rsi), %xmm1
    movq %rdi, %r8
    movq %rdx, %rcx
.Lmove_back:
    movups -16(%rsi,%rcx), %xmm0
    movups %xmm0, -16(%rdi,%rcx)
    subq $16, %rcx
    cmpq $16, %rcx
    ja .Lmove_back
    movups %xmm1, (%r8)
.Lmove_ret:
    ret
.Lmove_fwd:
    /* dst <= src or disjoint: the forward 16-byte loop of memcpy is safe */
    /* (each chunk is loaded before the store that could overlap it);     */
    /* rep movsb is not used here because its overlap behaviour on fast- */
    /* string hardware is only defined for disjoint or dst < src - 64.    */
    movups -16(%rsi,%rdx), %xmm1
    leaq -16(%rdi,%rdx), %r8
    movq %rdx, %rcx
.Lmove_loop:
    movups (%rsi), %xmm0
    movups %xmm0, (%rdi)
    addq $16, %rsi
    addq $16, %rdi
    subq $16, %rcx
    cmpq $16, %rcx
    ja .Lmove_loop
    movups %xmm1, (%r8)
    ret
    .size memmove, . - memmove
    .popsection

    .pushsection .text.memset, "ax", @progbits
    .globl memset
    .type memset, @function
    .p2align 4
/* memset(rdi dst, esi byte, rdx n) -> rax dst. */
memset:
    movq %rdi, %rax
    movzbl %sil, %ecx
    movabsq $0x0101010101010101, %r8
    imulq %rcx, %r8
    cmpq $16, %rdx
    ja .Lset_gt16
    cmpq $8, %rdx
    jae .Lset_8_16
    cmpq $4, %rdx
    jae .Lset_4_7
    testq %rdx, %rdx
    je .Lset_ret
    movb %r8b, (%rdi)
    movb %r8b, -1(%rdi,%rdx)
    cmpq $2, %rdx
    jbe .Lset_ret
    movb %r8b, 1(%rdi)
.Lset_ret:
    ret
.Lset_4_7:
    movl %r8d, (%rdi)
    movl %r8d, -4(%rdi,%rdx)
    ret
.Lset_8_16:
    movq %r8, (%rdi)
    movq %r8, -8(%rdi,%rdx)
    ret
.Lset_gt16:
    cmpq GUEST_MEMSET_REP_MIN(%rip), %rdx
    jae .Lset_rep
    movq %r8, %xmm0
    punpcklqdq %xmm0, %xmm0
    movups %xmm0, -16(%rdi,%rdx)
    movq %rdi, %r9
    movq %rdx, %rcx
.Lset_loop:
    movups %xmm0, (%r9)
    addq $16, %r9
    subq $16, %rcx
    cmpq $16, %rcx
    ja .Lset_loop
    ret
.Lset_rep:
    movq %rdi, %r9
    movq %rdx, %rcx
    movl %r8d, %eax
    rep stosb
    movq %r9, %rax
    ret
    .size memset, . - memset
    .popsection

    .pushsection .text.memcmp, "ax", @progbits
    .globl memcmp
    .type memcmp, @function
    .globl bcmp
    .type bcmp, @function
    .p2align 4
/* memcmp(rdi a, rsi b, rdx n) -> eax <0, 0, >0 by the first differing   */
/* byte (unsigned). bcmp only needs zero/non-zero and shares the code.   */
memcmp:
bcmp:
    xorl %eax, %eax
.Lcmp_qwords:
    cmpq $8, %rdx
    jb .Lcmp_bytes
    movq (%rdi), %rcx
    cmpq (%rsi), %rcx
    jne .Lcmp_bytes8
    addq $8, %rdi
    addq $8, %rsi
    subq $8, %rdx
    jmp .Lcmp_qwords
.Lcmp_bytes8:
    movl $8, %edx
.Lcmp_bytes:
    testq %rdx, %rdx
    je .Lcmp_ret
    movzbl (%rdi), %eax
    movzbl (%rsi), %ecx
    subl %ecx, %eax
    jne .Lcmp_ret
    incq %rdi
    incq %rsi
    decq %rdx
    jmp .Lcmp_bytes
.Lcmp_ret:
    ret
    .size memcmp, . - memcmp
    .size bcmp, . - bcmp
    .popsection
"#,
    options(att_syntax)
);
