//! `bench=copy`: what a memory copy costs inside the guest, per method and
//! size, on cache-hot and on cold data, and what borrowing the vector
//! registers for one costs (an XSAVE+XRSTOR pair of the task's live state),
//! so that the crossovers ([`crossover`]) say which method to use when.
//!
//! # Methods ([`Method::ALL`])
//!
//! `rep movsb`, `rep movsq`, 16-, 32- and 64-byte vector loops (SSE2, AVX2,
//! AVX-512), and the same three loops with non-temporal stores followed by
//! their SFENCE. A vector method runs only when the guest's CPUID reports
//! its instructions and the XCR0 the guest kernel set enables their state
//! ([`Method::usable`]); the others stay 0 in the table.
//!
//! # Sizes and data
//!
//! 16 B to 64 MiB in powers of 4 ([`CopyReport::size`]). *Hot*: the same
//! source and destination every time. *Cold*: each copy `k` of a trial
//! takes the next slot of a rotation region at least twice the largest
//! cache (and twice the copy) so that nothing it touches was touched
//! recently; a cursor carries the rotation across trials and methods.
//! Sizes whose buffers do not fit the scratch memory, and cold sizes when
//! the region cannot be twice the largest cache, are not measured.
//!
//! Each cell is the fastest of [`TRIALS`] trials (a vCPU preempted during
//! one inflates it), after one warm-up, TSC-timed at CPL3 (fenced RDTSC).
//!
//! # Borrowing the vector registers
//!
//! A kernel that copies with vector registers first saves the task's live
//! state and restores it afterwards. [`borrow`] times XSAVE+XRSTOR (and
//! XSAVEC+XRSTOR when CPUID 0xD.1 has it) of the task's own state with the
//! requested-feature bitmap = the guest's XCR0, after loading a pattern
//! into the XMM registers only, into YMM, or into ZMM0-31 and the opmasks.
//! XSAVES, what a kernel would use, is CPL0-only and cannot be timed here:
//! CPL0 is emulated instruction by instruction on kvm_pvm hosts.

#[cfg(test)]
mod tests;

pub mod crossover;
mod kernels;

use core::arch::asm;

use xstate::Format;

use super::{carve, Env};
use crate::protocol::{CopyReport, COPY_LIVE_STATES, COPY_METHODS, COPY_SIZES};
use crate::workloads::live::Live;
use crate::workloads::CpuFeatures;

/// Trials per cell; the cell reports the fastest.
pub const TRIALS: u32 = 3;
/// Bytes each hot trial copies in all (at least one copy).
const HOT_BYTES: u64 = 4 << 20;
/// Bytes of rotation region each cold trial walks (at least one copy).
const COLD_BYTES: u64 = 4 << 20;
/// Most copies per trial (the small sizes).
const MAX_REPS: u64 = 1 << 16;
/// The largest cold rotation region (per source and destination): enough
/// for 64 MiB copies.
pub const MAX_REGION: usize = 128 << 20;
/// Bytes between the source and destination regions beyond their size, so
/// that they do not share their offsets modulo 4 KiB (store-to-load alias
/// prediction would slow the copy for a reason unrelated to its method).
const DST_SKEW: usize = 1024;
/// XSAVE+XRSTOR pairs per [`borrow`] trial.
const BORROW_PAIRS: u64 = 2000;

/// A copy method: one column family of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `rep movsb` (fast-string microcode; ERMSB/FSRM where the CPU has it).
    RepMovsb,
    /// `rep movsq`.
    RepMovsq,
    /// 16-byte SSE2 loads and stores.
    Sse2,
    /// 32-byte AVX loads and stores, VZEROUPPER at the end.
    Avx2,
    /// 64-byte AVX-512 loads and stores, VZEROUPPER at the end.
    Avx512,
    /// 16-byte loads, MOVNTDQ stores, SFENCE at the end.
    NtSse2,
    /// 32-byte loads, VMOVNTDQ stores, SFENCE at the end.
    NtAvx2,
    /// 64-byte loads, VMOVNTDQ stores, SFENCE at the end.
    NtAvx512,
}

impl Method {
    /// Every method, in the table's order.
    pub const ALL: [Method; COPY_METHODS] = [
        Method::RepMovsb,
        Method::RepMovsq,
        Method::Sse2,
        Method::Avx2,
        Method::Avx512,
        Method::NtSse2,
        Method::NtAvx2,
        Method::NtAvx512,
    ];

    /// The name in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Method::RepMovsb => "rep movsb",
            Method::RepMovsq => "rep movsq",
            Method::Sse2 => "sse2",
            Method::Avx2 => "avx2",
            Method::Avx512 => "avx512",
            Method::NtSse2 => "nt-sse2",
            Method::NtAvx2 => "nt-avx2",
            Method::NtAvx512 => "nt-avx512",
        }
    }

    /// True for the methods that use vector registers (those a kernel must
    /// borrow).
    pub const fn is_vector(self) -> bool {
        !matches!(self, Method::RepMovsb | Method::RepMovsq)
    }

    /// True for the non-temporal methods.
    pub const fn is_nt(self) -> bool {
        matches!(self, Method::NtSse2 | Method::NtAvx2 | Method::NtAvx512)
    }

    /// Whether the CPU (as CPUID reports it) and the XCR0 the kernel set
    /// allow the method's instructions.
    pub fn usable(self, feat: &CpuFeatures) -> bool {
        match self {
            Method::RepMovsb | Method::RepMovsq => true,
            Method::Sse2 | Method::NtSse2 => feat.sse2,
            Method::Avx2 | Method::NtAvx2 => feat.avx2,
            Method::Avx512 | Method::NtAvx512 => feat.avx512f,
        }
    }

    /// Copies `len` bytes from `src` to `dst` `reps` times, advancing both
    /// by `stride` each time; returns the TSC cycles it took.
    ///
    /// # Safety
    ///
    /// The method must be [`usable`](Method::usable) on this CPU; `len` a
    /// multiple of 16, at least 16; `dst`, `src` and `stride` multiples of
    /// 64; and the `reps` source and destination ranges valid, the latter
    /// not overlapping the former.
    pub unsafe fn run(
        self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        reps: u64,
        stride: usize,
    ) -> u64 {
        let f = kernels::LOOPS[self as usize];
        let t0 = rdtsc_fenced();
        // SAFETY: the caller's contract is the routine's (module docs of
        // `kernels`); it touches only the ranges described.
        unsafe { f(dst, src, len, reps, stride) };
        rdtsc_fenced().wrapping_sub(t0)
    }
}

/// The TSC between LFENCEs (nothing before it still runs, nothing after it
/// started).
fn rdtsc_fenced() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: LFENCE and RDTSC are allowed at CPL3 (CR4.TSD clear in the
    // guest; always on the Linux hosts the tests run on) and only read.
    unsafe {
        asm!("lfence", "rdtsc", "lfence", out("eax") lo, out("edx") hi,
            options(nomem, nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// The rotation region the scratch memory allows: the largest power of
/// two (at most [`MAX_REGION`]) such that a source and a destination
/// region of that size, plus alignment and skew, fit in `scratch_len`.
pub fn region_for(scratch_len: usize) -> usize {
    let usable = scratch_len.saturating_sub(64 + DST_SKEW) / 2;
    if usable < 64 {
        return 0;
    }
    let p = 1usize << (usize::BITS - 1 - usable.leading_zeros());
    p.min(MAX_REGION)
}

/// Scratch bytes that give the full table (64 MiB sizes, hot and cold).
pub const fn full_scratch_bytes() -> usize {
    2 * MAX_REGION + 64 + DST_SKEW
}

/// Whether the cold column of a size can be measured with rotation region
/// `region` when the largest cache is `llc` bytes: the region must hold
/// the copy twice and the cache twice (so a slot is evicted before reuse).
pub fn cold_fits(size: u64, region: u64, llc: u64) -> bool {
    region >= 2 * size && region >= 2 * llc
}

/// Runs the sweep of every usable method into `out.hot` and `out.cold`
/// (and `methods`, `cold_region`, `llc_bytes`, `valid`), with `scratch` as
/// buffer memory. `llc` is the largest cache in bytes (0 if unknown: the
/// cold columns then need no more than twice the copy).
///
/// # Safety
///
/// `feat` must describe this CPU and the XCR0 in force (the vector methods
/// run when it says they are usable).
pub unsafe fn sweep(feat: &CpuFeatures, llc: u64, scratch: &mut [u8], out: &mut CopyReport) {
    let region = region_for(scratch.len());
    out.valid = 1;
    out.llc_bytes = llc;
    out.cold_region = region as u64;
    let Some((mem, _)) = carve(scratch, 2 * region + DST_SKEW) else {
        return;
    };
    // Fault every page in (and give the source known bytes) before timing.
    for (i, b) in mem.iter_mut().enumerate() {
        *b = i as u8;
    }
    let src = mem.as_mut_ptr();
    // SAFETY: 2 * region + DST_SKEW bytes are in `mem`.
    let dst = unsafe { src.add(region + DST_SKEW) };
    let mut cursor = 0usize;
    for m in Method::ALL {
        if !m.usable(feat) {
            continue;
        }
        out.methods |= 1 << m as u32;
        for si in 0..COPY_SIZES {
            let size = CopyReport::size(si);
            if size as usize > region {
                break;
            }
            let len = size as usize;
            let reps = (HOT_BYTES / size).clamp(1, MAX_REPS);
            // SAFETY: `m` is usable (checked above, `feat` per the
            // contract); src and dst are 64-aligned (carve, DST_SKEW and
            // region are multiples of 64), len <= region, stride 0.
            let best = (0..=TRIALS)
                .map(|_| unsafe { m.run(dst, src, len, reps, 0) })
                .skip(1)
                .min()
                .unwrap_or(0);
            out.hot[m as usize][si] = best as f64 / reps as f64;

            if !cold_fits(size, region as u64, llc) {
                continue;
            }
            let stride = len.max(64);
            let reps = (COLD_BYTES.min(region as u64 / 2) / stride as u64).clamp(1, MAX_REPS);
            let span = reps as usize * stride;
            let mut best = u64::MAX;
            for _ in 0..=TRIALS {
                if cursor + span > region {
                    cursor = 0;
                }
                // SAFETY: as above; cursor + span <= region keeps every
                // copy inside the two regions, stride is a multiple of 64.
                let c = unsafe { m.run(dst.add(cursor), src.add(cursor), len, reps, stride) };
                cursor += span;
                best = best.min(c);
            }
            out.cold[m as usize][si] = best as f64 / reps as f64;
        }
    }
}

// The borrowing table has a column per live state.
const _: () = assert!(Live::ALL.len() == COPY_LIVE_STATES);

/// The save instructions of [`borrow`], in the table's order.
pub const SAVE_INSNS: [&str; 2] = ["xsave", "xsavec"];

/// Bytes of scratch [`borrow`] needs.
pub fn borrow_scratch_bytes(env: &Env) -> usize {
    2 * env.area_len() + 64
}

/// Times the XSAVE+XRSTOR pairs of the borrowing table into
/// `out.borrow_cycles`; a case the guest's XCR0 lacks, or XSAVEC when CPUID
/// 0xD.1 lacks it, stays 0. Leaves every vector component in its init state.
///
/// # Safety
///
/// `env.xcr0` must be enabled in the hardware XCR0 (the kernel set it).
pub unsafe fn borrow(env: &Env, scratch: &mut [u8], out: &mut CopyReport) {
    let len = env.area_len();
    let Ok(layout) = env.info.layout(env.xcr0, Format::Standard) else {
        return;
    };
    let Some((image, rest)) = carve(scratch, len) else {
        return;
    };
    let Some((area, _)) = carve(rest, len) else {
        return;
    };
    let rfbm = env.xcr0.bits();
    for (li, live) in Live::ALL.into_iter().enumerate() {
        let mask = live.mask();
        if !env.xcr0.contains_all(mask) {
            continue;
        }
        // A standard image with a pattern in the live components and the
        // init value (XSTATE_BV clear) everywhere else.
        image.fill(0);
        image[24..28].copy_from_slice(&0x1f80u32.to_le_bytes());
        for (i, off, size) in layout.iter_indices() {
            if mask.contains_index(i) {
                let (off, size) = (off as usize, size as usize);
                let range = if i == 1 { 160..416 } else { off..off + size };
                for (k, b) in image[range].iter_mut().enumerate() {
                    *b = (k as u8).wrapping_mul(29) | 1;
                }
            }
        }
        image[512..520].copy_from_slice(&mask.bits().to_le_bytes());
        for si in 0..SAVE_INSNS.len() {
            if si == 1 && !env.info.has_xsavec() {
                continue;
            }
            let mut best = u64::MAX;
            for _ in 0..=TRIALS {
                // SAFETY: both areas are 64-aligned and `len` bytes, enough
                // for XCR0 in either format; the image is a valid standard
                // area (reserved header bytes zero, MXCSR valid) for the
                // components of env.xcr0, which the hardware XCR0 enables.
                let c = unsafe { pairs(image.as_ptr(), area.as_mut_ptr(), rfbm, si == 1) };
                best = best.min(c);
            }
            out.borrow_cycles[si][li] = best as f64 / BORROW_PAIRS as f64;
        }
    }
    // Everything back to its init state: an image with XSTATE_BV = 0.
    image[512..576].fill(0);
    // SAFETY: as above; XSTATE_BV 0 loads the init value of every component.
    unsafe { xrstor(image.as_ptr(), rfbm) };
}

/// Loads `image`, then [`BORROW_PAIRS`] XSAVE(C)+XRSTOR pairs on `area`.
///
/// # Safety
///
/// See [`borrow`].
unsafe fn pairs(image: *const u8, area: *mut u8, rfbm: u64, compacted: bool) -> u64 {
    // SAFETY: per the contract.
    unsafe { xrstor(image, rfbm) };
    let (lo, hi) = (rfbm as u32, (rfbm >> 32) as u32);
    let t0 = rdtsc_fenced();
    // SAFETY: per the contract; the loop only saves and restores the
    // task's own state through `area`.
    unsafe {
        if compacted {
            asm!("2:", "xsavec64 [rdi]", "xrstor64 [rdi]", "dec rcx", "jnz 2b",
                in("rdi") area, inout("rcx") BORROW_PAIRS => _,
                in("eax") lo, in("edx") hi, clobber_abi("C"), options(nostack));
        } else {
            asm!("2:", "xsave64 [rdi]", "xrstor64 [rdi]", "dec rcx", "jnz 2b",
                in("rdi") area, inout("rcx") BORROW_PAIRS => _,
                in("eax") lo, in("edx") hi, clobber_abi("C"), options(nostack));
        }
    }
    rdtsc_fenced().wrapping_sub(t0)
}

/// XRSTOR of `image` with requested features `rfbm`.
///
/// # Safety
///
/// See [`borrow`].
unsafe fn xrstor(image: *const u8, rfbm: u64) {
    // SAFETY: per the contract.
    unsafe {
        asm!("xrstor64 [rdi]", in("rdi") image,
            in("eax") rfbm as u32, in("edx") (rfbm >> 32) as u32, clobber_abi("C"),
            options(nostack));
    }
}
