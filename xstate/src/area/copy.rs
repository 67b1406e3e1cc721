//! Copying and zeroing the components of an XSAVE area (8 to 8192 bytes)
//! with the widest vector moves this CPU allows, in line: no call to
//! `memcpy` (its size dispatch and, past its threshold, the `rep movs`
//! start-up cost more than the copy of a 64- or 256-byte component) and no
//! 16-byte-only loop where 64-byte moves exist.
//!
//! The loops move two vectors an iteration, so the compiler does not turn
//! them back into `memcpy`/`memset` calls (its idiom recognition wants one
//! store per iteration), and finish with one overlapping vector at the end
//! instead of a remainder loop (source and destination never overlap: they
//! are distinct slices). The vector width is chosen once per process from
//! CPUID and XCR0 (AVX-512F with its state enabled, else AVX2, else SSE2,
//! which every x86-64 CPU has). The conversions of [`crate::convert`] are
//! compiled once per level and pick theirs at entry, so [`copy_at`] and
//! [`zero_at`] inline into them with the level's vector moves (a function
//! compiled for AVX-512 cannot be inlined into one that is not).

use core::sync::atomic::{AtomicU8, Ordering};

/// Vector width level: 16-byte SSE2 moves (every x86-64 CPU).
pub(crate) const SSE2: u8 = 1;
/// Vector width level: 32-byte AVX moves.
pub(crate) const AVX2: u8 = 2;
/// Vector width level: 64-byte AVX-512F moves.
pub(crate) const AVX512: u8 = 3;

/// The detected level; 0 = not detected yet.
static LEVEL: AtomicU8 = AtomicU8::new(0);

/// The widest usable level: AVX-512F / AVX2 need their CPUID bits and
/// XCR0 enabling their state (XGETBV, once CPUID says the OS set
/// CR4.OSXSAVE).
#[cfg(target_arch = "x86_64")]
fn detect() -> u8 {
    use crate::info::cpuid;
    // Leaf 7 is read only when leaf 0 says it exists.
    let (l1, max) = (cpuid(1, 0), cpuid(0, 0).eax);
    const OSXSAVE: u32 = 1 << 27;
    const AVX: u32 = 1 << 28;
    if l1.ecx & OSXSAVE == 0 || l1.ecx & AVX == 0 || max < 7 {
        return SSE2;
    }
    let xcr0 = xgetbv0();
    let b7 = cpuid(7, 0).ebx;
    if xcr0 & 0xe6 == 0xe6 && b7 & (1 << 16) != 0 {
        AVX512
    } else if xcr0 & 0x6 == 0x6 && b7 & (1 << 5) != 0 {
        AVX2
    } else {
        SSE2
    }
}

/// XGETBV(0); only called when CPUID.1:ECX.OSXSAVE is set.
#[cfg(target_arch = "x86_64")]
fn xgetbv0() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: OSXSAVE is set (checked by the caller), so XGETBV with ECX=0
    // is defined at any privilege level; it only reads XCR0.
    unsafe {
        core::arch::asm!("xgetbv", in("ecx") 0, out("eax") lo, out("edx") hi,
            options(nomem, nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// The widest level this CPU and its XCR0 allow (detected once).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn level() -> u8 {
    match LEVEL.load(Ordering::Relaxed) {
        0 => detect_once(),
        l => l,
    }
}

/// The level detected so far: 0 before the first [`level`] call (the
/// conversions' dispatchers branch on it without a call, and send 0 to a
/// cold path that detects).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn detected_level() -> u8 {
    LEVEL.load(Ordering::Relaxed)
}

/// The first call's detection, out of line so that [`level`] stays a load
/// and a test in the conversions' entry points.
#[cfg(target_arch = "x86_64")]
#[cold]
#[inline(never)]
fn detect_once() -> u8 {
    let l = detect();
    LEVEL.store(l, Ordering::Relaxed);
    l
}

/// Copies `src` to `dst` (equal lengths) at level `l`, which must not be
/// above [`level`]. A parameter, not a change of the detected level: tests
/// running at once (the conversions') rely on that level.
///
/// # Panics
/// If the lengths differ (as `copy_from_slice` does).
#[cfg(test)]
pub(crate) fn copy_bytes(l: u8, dst: &mut [u8], src: &[u8]) {
    match l {
        AVX512 => copy_at::<AVX512>(dst, src),
        AVX2 => copy_at::<AVX2>(dst, src),
        _ => copy_at::<SSE2>(dst, src),
    }
}

/// Zeroes `dst` at level `l` (see [`copy_bytes`]).
#[cfg(test)]
pub(crate) fn zero_bytes(l: u8, dst: &mut [u8]) {
    match l {
        AVX512 => zero_at::<AVX512>(dst),
        AVX2 => zero_at::<AVX2>(dst),
        _ => zero_at::<SSE2>(dst),
    }
}

/// Copies `src` to `dst` (equal lengths) with level-`L` moves. Inlined
/// into its caller, which must itself be compiled for level `L` (see
/// [`crate::convert`]'s entry points) so the vector code inlines too.
///
/// # Panics
/// If the lengths differ (as `copy_from_slice` does), or (debug builds) if
/// `L` is above [`level`].
#[inline(always)]
pub(crate) fn copy_at<const L: u8>(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_bytes: length mismatch");
    let n = dst.len();
    #[cfg(target_arch = "x86_64")]
    {
        debug_assert!(L <= level());
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        // SAFETY: `d` and `s` are valid for `n` bytes each and do not
        // overlap (a `&mut` and a `&` slice); each function is called with
        // `n` at least its vector width; callers only instantiate a level
        // that [`level`] reported for this CPU.
        unsafe {
            if L >= AVX512 && n >= 64 {
                return copy_avx512(d, s, n);
            } else if L >= AVX2 && n >= 32 {
                return copy_avx2(d, s, n);
            } else if n >= 16 {
                return copy_sse2(d, s, n);
            }
        }
    }
    if n >= 8 {
        // Two overlapping 8-byte moves (PKRU is 8 bytes).
        let (a, b) = (rd8(src, 0), rd8(src, n - 8));
        dst[..8].copy_from_slice(&a);
        dst[n - 8..].copy_from_slice(&b);
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}

fn rd8(b: &[u8], at: usize) -> [u8; 8] {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    a
}

/// Zeroes `dst` with level-`L` stores; see [`copy_at`].
#[inline(always)]
pub(crate) fn zero_at<const L: u8>(dst: &mut [u8]) {
    let n = dst.len();
    #[cfg(target_arch = "x86_64")]
    {
        debug_assert!(L <= level());
        let d = dst.as_mut_ptr();
        // SAFETY: `d` is valid for `n` bytes; as for `copy_at`.
        unsafe {
            if L >= AVX512 && n >= 64 {
                return zero_avx512(d, n);
            } else if L >= AVX2 && n >= 32 {
                return zero_avx2(d, n);
            } else if n >= 16 {
                return zero_sse2(d, n);
            }
        }
    }
    if n >= 8 {
        dst[..8].fill(0);
        dst[n - 8..].fill(0);
    } else {
        for d in dst.iter_mut() {
            *d = 0;
        }
    }
}

/// Defines a copy and a zero function for one vector type: two vectors an
/// iteration, one more if a whole one is left, then the last `W` bytes
/// (overlapping what was already written).
macro_rules! width {
    ($copy:ident, $zero:ident, $feat:literal, $w:literal, $ty:ty, $load:ident, $store:ident, $zerov:ident) => {
        /// # Safety
        /// `d` and `s` valid for `n` bytes, not overlapping; `n >= W`; the
        /// CPU and XCR0 allow the target feature.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feat)]
        #[inline]
        unsafe fn $copy(d: *mut u8, s: *const u8, n: usize) {
            use core::arch::x86_64::*;
            let mut i = 0;
            // SAFETY: every access is inside [0, n) (i + 2W <= n, i + W <=
            // n, n - W >= 0), per the contract.
            unsafe {
                while i + 2 * $w <= n {
                    let a = $load(s.add(i) as *const $ty);
                    let b = $load(s.add(i + $w) as *const $ty);
                    $store(d.add(i) as *mut $ty, a);
                    $store(d.add(i + $w) as *mut $ty, b);
                    i += 2 * $w;
                }
                if i + $w <= n {
                    $store(d.add(i) as *mut $ty, $load(s.add(i) as *const $ty));
                    i += $w;
                }
                if i < n {
                    $store(
                        d.add(n - $w) as *mut $ty,
                        $load(s.add(n - $w) as *const $ty),
                    );
                }
            }
        }

        /// # Safety
        /// `d` valid for `n` bytes; `n >= W`; the CPU and XCR0 allow the
        /// target feature.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feat)]
        #[inline]
        unsafe fn $zero(d: *mut u8, n: usize) {
            use core::arch::x86_64::*;
            let z = $zerov();
            let mut i = 0;
            // SAFETY: as for the copy.
            unsafe {
                while i + 2 * $w <= n {
                    $store(d.add(i) as *mut $ty, z);
                    $store(d.add(i + $w) as *mut $ty, z);
                    i += 2 * $w;
                }
                if i < n {
                    $store(d.add(n - $w) as *mut $ty, z);
                    if i + $w < n {
                        $store(d.add(i) as *mut $ty, z);
                    }
                }
            }
        }
    };
}

width!(
    copy_sse2,
    zero_sse2,
    "sse2",
    16,
    __m128i,
    _mm_loadu_si128,
    _mm_storeu_si128,
    _mm_setzero_si128
);
width!(
    copy_avx2,
    zero_avx2,
    "avx2",
    32,
    __m256i,
    _mm256_loadu_si256,
    _mm256_storeu_si256,
    _mm256_setzero_si256
);
width!(
    copy_avx512,
    zero_avx512,
    "avx512f",
    64,
    __m512i,
    _mm512_loadu_si512,
    _mm512_storeu_si512,
    _mm512_setzero_si512
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length from 0 to 1100 bytes at odd offsets, at every level
    /// this CPU allows: exactly the range is copied or zeroed.
    #[test]
    fn copy_and_zero_touch_exactly_their_range_at_every_level() {
        let src: [u8; 1200] = core::array::from_fn(|i| (i as u8).wrapping_mul(31) | 1);
        for l in SSE2..=level() {
            for len in 0..1100 {
                let mut dst = [0xeeu8; 1200];
                copy_bytes(l, &mut dst[3..3 + len], &src[5..5 + len]);
                assert_eq!(&dst[3..3 + len], &src[5..5 + len], "level {l} len {len}");
                assert!(dst[..3].iter().chain(&dst[3 + len..]).all(|&b| b == 0xee));
                zero_bytes(l, &mut dst[7..7 + len]);
                assert!(
                    dst[7..7 + len].iter().all(|&b| b == 0),
                    "level {l} len {len}"
                );
                assert!(dst[..7].iter().all(|&b| b != 0));
                assert!(dst[7 + len..].iter().all(|&b| b == 0xee));
            }
        }
    }
}
