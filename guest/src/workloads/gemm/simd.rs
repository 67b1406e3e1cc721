//! The few vector operations the DGEMM micro-kernel needs, per register
//! width. Every method is `inline(always)` and meant to be inlined into a
//! function compiled with the matching `#[target_feature]`; on its own it
//! would not be (that is what makes the generic kernel monomorphise into
//! three differently-encoded copies).

use core::arch::x86_64::*;

/// A vector of f64 lanes.
pub(super) trait F64Vec: Copy {
    const LANES: usize;
    unsafe fn zero() -> Self;
    /// Aligned load (packed panels are 64-byte aligned).
    unsafe fn load(p: *const f64) -> Self;
    unsafe fn loadu(p: *const f64) -> Self;
    unsafe fn storeu(p: *mut f64, v: Self);
    /// Every lane = `*p`.
    unsafe fn splat(p: *const f64) -> Self;
    /// `a * b + c` (fused where the ISA has FMA).
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self;
    unsafe fn add(a: Self, b: Self) -> Self;
    unsafe fn mul(a: Self, b: Self) -> Self;
}

/// SSE2: two lanes, no FMA (multiply, then add).
impl F64Vec for __m128d {
    const LANES: usize = 2;
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm_setzero_pd() }
    }
    #[inline(always)]
    unsafe fn load(p: *const f64) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm_load_pd(p) }
    }
    #[inline(always)]
    unsafe fn loadu(p: *const f64) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm_loadu_pd(p) }
    }
    #[inline(always)]
    unsafe fn storeu(p: *mut f64, v: Self) {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm_storeu_pd(p, v) }
    }
    #[inline(always)]
    unsafe fn splat(p: *const f64) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm_load1_pd(p) }
    }
    #[inline(always)]
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm_add_pd(_mm_mul_pd(a, b), c) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm_add_pd(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm_mul_pd(a, b) }
    }
}

/// AVX2 + FMA: four lanes, fused multiply-add.
impl F64Vec for __m256d {
    const LANES: usize = 4;
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm256_setzero_pd() }
    }
    #[inline(always)]
    unsafe fn load(p: *const f64) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm256_load_pd(p) }
    }
    #[inline(always)]
    unsafe fn loadu(p: *const f64) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm256_loadu_pd(p) }
    }
    #[inline(always)]
    unsafe fn storeu(p: *mut f64, v: Self) {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm256_storeu_pd(p, v) }
    }
    #[inline(always)]
    unsafe fn splat(p: *const f64) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm256_broadcast_sd(&*p) }
    }
    #[inline(always)]
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm256_fmadd_pd(a, b, c) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm256_add_pd(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm256_mul_pd(a, b) }
    }
}

/// AVX-512F: eight lanes, fused multiply-add.
impl F64Vec for __m512d {
    const LANES: usize = 8;
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm512_setzero_pd() }
    }
    #[inline(always)]
    unsafe fn load(p: *const f64) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm512_load_pd(p) }
    }
    #[inline(always)]
    unsafe fn loadu(p: *const f64) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm512_loadu_pd(p) }
    }
    #[inline(always)]
    unsafe fn storeu(p: *mut f64, v: Self) {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm512_storeu_pd(p, v) }
    }
    #[inline(always)]
    unsafe fn splat(p: *const f64) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm512_set1_pd(*p) }
    }
    #[inline(always)]
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm512_fmadd_pd(a, b, c) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm512_add_pd(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        // SAFETY: the caller upholds this function's contract (the CPU
        // features it is compiled for, and the pointers and lengths it is
        // given), which is all its intrinsics and pointer accesses rely on.
        unsafe { _mm512_mul_pd(a, b) }
    }
}
