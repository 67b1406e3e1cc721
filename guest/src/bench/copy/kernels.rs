//! The copy loops, in assembly so that the compiler can neither turn them
//! into calls to `memcpy` nor pick another instruction sequence: each
//! method is exactly the instructions its name says.
//!
//! Every routine has the same contract (System V argument registers):
//! `copy_loop_NAME(dst rdi, src rsi, len rdx, reps rcx, stride r8)` makes
//! `reps` copies of `len` bytes, the k-th from `src + k * stride` to
//! `dst + k * stride` (stride 0: the same buffers every time). `len` is a
//! multiple of 16 and at least 16; `dst`, `src` and `stride` are multiples
//! of 64 (the non-temporal stores need aligned destinations). Each copy is
//! complete on its own, as a real `memcpy` call would be: the AVX loops end
//! with VZEROUPPER and the non-temporal ones with SFENCE (their stores are
//! weakly ordered until then). Clobbers RAX, RCX, RDX, RSI, RDI, R8-R11 and
//! vector registers 0-3.

/// The outer loop around a copy body (Intel syntax). The body copies RCX
/// bytes from RSI to RDI and may clobber RCX, RSI, RDI and vector
/// registers 0-3; its local labels are 4-7.
macro_rules! copy_fn {
    ($name:literal, $($body:expr),+ $(,)?) => {
        concat!(
            ".pushsection .text.", $name, ", \"ax\", @progbits\n",
            ".globl ", $name, "\n",
            ".type ", $name, ", @function\n",
            ".p2align 6\n",
            $name, ":\n",
            "mov r10, rdi\n",
            "mov r11, rsi\n",
            "mov r9, rcx\n",
            "xor eax, eax\n",
            "test r9, r9\n",
            "jz 3f\n",
            ".p2align 4\n",
            "2:\n",
            "lea rdi, [r10 + rax]\n",
            "lea rsi, [r11 + rax]\n",
            "mov rcx, rdx\n",
            $($body,)+
            "add rax, r8\n",
            "dec r9\n",
            "jnz 2b\n",
            "3:\n",
            "ret\n",
            ".size ", $name, ", . - ", $name, "\n",
            ".popsection\n",
        )
    };
}

/// 64-byte blocks with four 16-byte moves, then 16-byte moves.
macro_rules! sse_body {
    ($load:literal, $store:literal) => {
        concat!(
            "cmp rcx, 64\n",
            "jb 5f\n",
            "4:\n",
            $load,
            " xmm0, [rsi]\n",
            $load,
            " xmm1, [rsi + 16]\n",
            $load,
            " xmm2, [rsi + 32]\n",
            $load,
            " xmm3, [rsi + 48]\n",
            $store,
            " [rdi], xmm0\n",
            $store,
            " [rdi + 16], xmm1\n",
            $store,
            " [rdi + 32], xmm2\n",
            $store,
            " [rdi + 48], xmm3\n",
            "add rsi, 64\n",
            "add rdi, 64\n",
            "sub rcx, 64\n",
            "cmp rcx, 64\n",
            "jae 4b\n",
            "5:\n",
            "test rcx, rcx\n",
            "jz 7f\n",
            "6:\n",
            $load,
            " xmm0, [rsi]\n",
            $store,
            " [rdi], xmm0\n",
            "add rsi, 16\n",
            "add rdi, 16\n",
            "sub rcx, 16\n",
            "jnz 6b\n",
            "7:\n",
        )
    };
}

/// 128-byte blocks with four 32-byte moves, then 32-byte moves, then one
/// 16-byte move for a 16-byte rest (or a 16-byte copy).
macro_rules! avx_body {
    ($store:literal, $store16:literal) => {
        concat!(
            "cmp rcx, 128\n",
            "jb 5f\n",
            "4:\n",
            "vmovdqu ymm0, [rsi]\n",
            "vmovdqu ymm1, [rsi + 32]\n",
            "vmovdqu ymm2, [rsi + 64]\n",
            "vmovdqu ymm3, [rsi + 96]\n",
            $store,
            " [rdi], ymm0\n",
            $store,
            " [rdi + 32], ymm1\n",
            $store,
            " [rdi + 64], ymm2\n",
            $store,
            " [rdi + 96], ymm3\n",
            "add rsi, 128\n",
            "add rdi, 128\n",
            "sub rcx, 128\n",
            "cmp rcx, 128\n",
            "jae 4b\n",
            "5:\n",
            "cmp rcx, 32\n",
            "jb 6f\n",
            "vmovdqu ymm0, [rsi]\n",
            $store,
            " [rdi], ymm0\n",
            "add rsi, 32\n",
            "add rdi, 32\n",
            "sub rcx, 32\n",
            "jmp 5b\n",
            "6:\n",
            "test rcx, rcx\n",
            "jz 7f\n",
            "vmovdqu xmm0, [rsi]\n",
            $store16,
            " [rdi], xmm0\n",
            "7:\n",
            "vzeroupper\n",
        )
    };
}

/// 256-byte blocks with four 64-byte moves, then 64-byte moves, then one
/// 32- and one 16-byte move for what is left (sizes are multiples of 16).
macro_rules! avx512_body {
    ($store:literal, $store32:literal, $store16:literal) => {
        concat!(
            "cmp rcx, 256\n",
            "jb 5f\n",
            "4:\n",
            "vmovdqu64 zmm0, [rsi]\n",
            "vmovdqu64 zmm1, [rsi + 64]\n",
            "vmovdqu64 zmm2, [rsi + 128]\n",
            "vmovdqu64 zmm3, [rsi + 192]\n",
            $store,
            " [rdi], zmm0\n",
            $store,
            " [rdi + 64], zmm1\n",
            $store,
            " [rdi + 128], zmm2\n",
            $store,
            " [rdi + 192], zmm3\n",
            "add rsi, 256\n",
            "add rdi, 256\n",
            "sub rcx, 256\n",
            "cmp rcx, 256\n",
            "jae 4b\n",
            "5:\n",
            "cmp rcx, 64\n",
            "jb 6f\n",
            "vmovdqu64 zmm0, [rsi]\n",
            $store,
            " [rdi], zmm0\n",
            "add rsi, 64\n",
            "add rdi, 64\n",
            "sub rcx, 64\n",
            "jmp 5b\n",
            "6:\n",
            "cmp rcx, 32\n",
            "jb 8f\n",
            "vmovdqu ymm0, [rsi]\n",
            $store32,
            " [rdi], ymm0\n",
            "add rsi, 32\n",
            "add rdi, 32\n",
            "sub rcx, 32\n",
            "8:\n",
            "test rcx, rcx\n",
            "jz 7f\n",
            "vmovdqu xmm0, [rsi]\n",
            $store16,
            " [rdi], xmm0\n",
            "7:\n",
            "vzeroupper\n",
        )
    };
}

core::arch::global_asm!(
    copy_fn!("copy_loop_movsb", "rep movsb\n"),
    copy_fn!("copy_loop_movsq", "shr rcx, 3\n", "rep movsq\n"),
    copy_fn!("copy_loop_sse2", sse_body!("movdqu", "movdqu")),
    copy_fn!("copy_loop_avx2", avx_body!("vmovdqu", "vmovdqu")),
    copy_fn!(
        "copy_loop_avx512",
        avx512_body!("vmovdqu64", "vmovdqu", "vmovdqu")
    ),
    copy_fn!(
        "copy_loop_nt_sse2",
        sse_body!("movdqu", "movntdq"),
        "sfence\n"
    ),
    copy_fn!(
        "copy_loop_nt_avx2",
        avx_body!("vmovntdq", "vmovntdq"),
        "sfence\n"
    ),
    copy_fn!(
        "copy_loop_nt_avx512",
        avx512_body!("vmovntdq", "vmovntdq", "vmovntdq"),
        "sfence\n"
    ),
);

extern "sysv64" {
    fn copy_loop_movsb(dst: *mut u8, src: *const u8, len: usize, reps: u64, stride: usize);
    fn copy_loop_movsq(dst: *mut u8, src: *const u8, len: usize, reps: u64, stride: usize);
    fn copy_loop_sse2(dst: *mut u8, src: *const u8, len: usize, reps: u64, stride: usize);
    fn copy_loop_avx2(dst: *mut u8, src: *const u8, len: usize, reps: u64, stride: usize);
    fn copy_loop_avx512(dst: *mut u8, src: *const u8, len: usize, reps: u64, stride: usize);
    fn copy_loop_nt_sse2(dst: *mut u8, src: *const u8, len: usize, reps: u64, stride: usize);
    fn copy_loop_nt_avx2(dst: *mut u8, src: *const u8, len: usize, reps: u64, stride: usize);
    fn copy_loop_nt_avx512(dst: *mut u8, src: *const u8, len: usize, reps: u64, stride: usize);
}

/// One of the routines above, by method index ([`super::Method::ALL`]).
pub(super) type CopyLoop = unsafe extern "sysv64" fn(*mut u8, *const u8, usize, u64, usize);

/// The routines in [`super::Method::ALL`] order.
pub(super) const LOOPS: [CopyLoop; 8] = [
    copy_loop_movsb,
    copy_loop_movsq,
    copy_loop_sse2,
    copy_loop_avx2,
    copy_loop_avx512,
    copy_loop_nt_sse2,
    copy_loop_nt_avx2,
    copy_loop_nt_avx512,
];
