//! The measured save-strategy chooser: times each save instruction paired
//! with XRSTOR on the running CPU and picks the cheapest, because the answer
//! differs between microarchitectures (XGETBV(1) is cheap on Skylake-X and
//! slow on Zen 3) and cannot be looked up.

use core::arch::asm;
use std::vec::Vec;

use super::raw::{fnstcw, stmxcsr};
use super::{host, xrstor, NativeError, NOT_RESTORABLE};
use crate::buffer::{BufferError, XsaveBuf};
use crate::feature::Xfeature;
use crate::info::XsaveInfo;
use crate::layout::Format;
use crate::mask::XfeatureMask;
use crate::strategy::SaveStrategy;

/// Runs `n` (save, XRSTOR) pairs on `area` and returns the TSC ticks taken.
///
/// # Safety
/// `area` must be valid for both formats' sizes of `rfbm`, the strategy
/// supported, and the current state restorable (see [`xrstor_raw`]).
unsafe fn timed_loop(strategy: SaveStrategy, area: *mut u8, rfbm: u64, n: u64) -> u64 {
    macro_rules! run {
        ($save:literal) => {{
            let (lo, hi): (u32, u32);
            let t0: u64;
            // SAFETY: guaranteed by the caller of timed_loop.
            unsafe {
                asm!(
                    "lfence",
                    "rdtsc",
                    "lfence",
                    "shl rdx, 32",
                    "or rax, rdx",
                    "mov r15, rax",
                    "2:",
                    $save,
                    "mov rax, r13",
                    "mov rdx, rax",
                    "shr rdx, 32",
                    "xrstor64 [r12]",
                    "dec r14",
                    "jnz 2b",
                    "lfence",
                    "rdtsc",
                    "lfence",
                    in("r12") area,
                    in("r13") rfbm,
                    inout("r14") n => _,
                    out("r15") t0,
                    lateout("eax") lo,
                    lateout("edx") hi,
                    clobber_abi("C"),
                    options(nostack),
                );
            }
            ((u64::from(hi) << 32) | u64::from(lo)).wrapping_sub(t0)
        }};
    }
    match strategy {
        SaveStrategy::Xsave => run!("mov rax, r13\nmov rdx, rax\nshr rdx, 32\nxsave64 [r12]"),
        SaveStrategy::Xsaveopt => run!("mov rax, r13\nmov rdx, rax\nshr rdx, 32\nxsaveopt64 [r12]"),
        SaveStrategy::Xsavec => run!("mov rax, r13\nmov rdx, rax\nshr rdx, 32\nxsavec64 [r12]"),
        SaveStrategy::XsavecXinuse => run!(
            "mov ecx, 1\nxgetbv\nor eax, 3\nmov rsi, r13\nand eax, esi\nshr rsi, 32\nand edx, esi\nxsavec64 [r12]"
        ),
    }
}

/// What [`choose_save_strategy`] measured.
#[derive(Clone, Debug, PartialEq)]
pub struct StrategyReport {
    /// The cheapest strategy.
    pub choice: SaveStrategy,
    /// Median TSC ticks per (save + XRSTOR) pair for each strategy the CPU
    /// supports, in [`SaveStrategy::ALL`] order.
    pub figures: Vec<(SaveStrategy, f64)>,
    /// Strategies the CPU cannot execute.
    pub unsupported: Vec<SaveStrategy>,
    /// The requested-feature bitmap used (requested & XCR0).
    pub requested: XfeatureMask,
    /// The components that were in use during the measurement.
    pub in_use: XfeatureMask,
}

impl StrategyReport {
    /// Ticks per pair of one strategy, if measured.
    pub fn figure(&self, s: SaveStrategy) -> Option<f64> {
        self.figures.iter().find(|(x, _)| *x == s).map(|(_, v)| *v)
    }
}

/// Fills the register-file components of `in_use` with a nonzero pattern so
/// that XRSTOR marks them in use; keeps FCW/MXCSR as the running code has them.
fn state_image(
    info: &XsaveInfo,
    xcr0: XfeatureMask,
    in_use: XfeatureMask,
) -> Result<XsaveBuf, NativeError> {
    let layout = info
        .layout(xcr0, Format::Standard)
        .map_err(|e| NativeError::Buffer(BufferError::Layout(e)))?;
    let mut img = XsaveBuf::new(layout.total_size() as usize);
    img.set_fcw(fnstcw());
    img.set_mxcsr(stmxcsr());
    for (f, _, _) in layout.iter() {
        if !in_use.contains(f) {
            continue;
        }
        match f {
            Xfeature::X87 => {}
            Xfeature::Sse => {
                for i in 0..16 {
                    img.set_xmm(i, [0x11u8.wrapping_mul(i as u8 + 1) | 1; 16]);
                }
            }
            _ => {
                if let Some(c) = img.component_mut(f, &layout) {
                    for (k, b) in c.iter_mut().enumerate() {
                        *b = (k as u8) | 1;
                    }
                }
            }
        }
    }
    img.set_xstate_bv(in_use);
    Ok(img)
}

/// Register-file components whose in-use state the chooser can establish
/// with an arbitrary pattern (AMX tile data needs a valid TILECFG and OS
/// permission; PKRU and supervisor state are not touched).
const PATTERN_OK: u64 = XfeatureMask::AVX.union(XfeatureMask::AVX512).bits();

/// Times XSAVE, XSAVEOPT, XSAVEC and XSAVEC masked by XGETBV(1), each paired
/// with XRSTOR, on the running CPU with `requested` as the requested-feature
/// bitmap and `in_use` components holding non-init values, and picks the
/// cheapest.
///
/// Each strategy runs 9 batches of `iterations` pairs (at least 16) after a
/// warm-up batch; its figure is the median of the batch means in TSC ticks.
/// The choice is measured, never assumed: the XGETBV(1) variant wins where
/// XGETBV(1) is cheap and state is sparse (Skylake-X) and loses where
/// XGETBV(1) is slow (Zen 3).
///
/// # Errors
/// - the host errors of [`host_info`](super::host_info):
///   [`NativeError::NoOsXsave`], [`NativeError::Info`];
/// - [`NativeError::NotEnabled`]: `requested` has components outside the
///   host's XCR0;
/// - [`NativeError::NotRestorable`]: `requested` includes PKRU;
/// - [`NativeError::Buffer`] ([`BufferError::Layout`]): leaf 0xD cannot lay
///   out the host's XCR0 or `requested`, which a consistent CPU never
///   gives;
/// - the errors of [`xrstor`](super::xrstor) on the image that establishes
///   the in-use state before each strategy's run.
///
/// # Examples
/// ```
/// use xstate::native::{choose_save_strategy, host_info, host_xcr0};
/// use xstate::{SaveStrategy, XfeatureMask};
/// let info = host_info()?;
/// // A guest's AVX state: x87, SSE and AVX requested, SSE and AVX live.
/// let requested = host_xcr0()? & XfeatureMask::AVX;
/// let r = choose_save_strategy(requested, requested, 16)?;
/// let measured: Vec<_> = r.figures.iter().map(|(s, _)| *s).collect();
/// let supported: Vec<_> = SaveStrategy::ALL.into_iter().filter(|s| s.supported(&info)).collect();
/// assert_eq!(measured, supported);
/// // The choice is the cheapest measured pair of save + XRSTOR.
/// let best = r.figures.iter().map(|(_, t)| *t).fold(f64::INFINITY, f64::min);
/// assert_eq!(r.figure(r.choice), Some(best));
/// println!("{}: {best:.0} TSC ticks per save + XRSTOR", r.choice);
/// # Ok::<(), xstate::native::NativeError>(())
/// ```
pub fn choose_save_strategy(
    requested: XfeatureMask,
    in_use: XfeatureMask,
    iterations: u32,
) -> Result<StrategyReport, NativeError> {
    let h = host()?;
    let xcr0 = XfeatureMask::from_bits(h.xcr0);
    let outside = requested - xcr0;
    if !outside.is_empty() {
        return Err(NativeError::NotEnabled(outside));
    }
    if requested.bits() & NOT_RESTORABLE != 0 {
        return Err(NativeError::NotRestorable(XfeatureMask::from_bits(
            requested.bits() & NOT_RESTORABLE,
        )));
    }
    let in_use = in_use & requested & XfeatureMask::from_bits(PATTERN_OK);
    let img = state_image(&h.info, xcr0, in_use)?;
    let std_size = h
        .info
        .standard_size(requested)
        .map_err(|e| NativeError::Buffer(BufferError::Layout(e)))?;
    let cmp_size = h
        .info
        .compacted_size(requested)
        .map_err(|e| NativeError::Buffer(BufferError::Layout(e)))?;
    let mut work = XsaveBuf::new(std_size.max(cmp_size) as usize);
    let n = u64::from(iterations.max(16));
    let mut figures = Vec::new();
    let mut unsupported = Vec::new();
    for s in SaveStrategy::ALL {
        if !s.supported(&h.info) {
            unsupported.push(s);
            continue;
        }
        // Establish the in-use set (and FP environment) from the image.
        xrstor(&img, requested)?;
        work.as_bytes_mut().fill(0);
        let mut means = [0f64; 9];
        // SAFETY: `work` is aligned and large enough for both formats of
        // `requested`; the strategy is supported; the state being saved and
        // restored is the current one, which the image set up with the
        // running code's FCW/MXCSR and an empty x87 stack; PKRU excluded.
        unsafe {
            timed_loop(s, work.as_bytes_mut().as_mut_ptr(), requested.bits(), n);
            for m in means.iter_mut() {
                *m = timed_loop(s, work.as_bytes_mut().as_mut_ptr(), requested.bits(), n) as f64
                    / n as f64;
            }
        }
        means.sort_by(|a, b| a.total_cmp(b));
        figures.push((s, means[means.len() / 2]));
    }
    if xcr0.contains(Xfeature::Avx) {
        // Leave the upper vector state clean for the SSE code that follows.
        // SAFETY: AVX is enabled in XCR0; VZEROUPPER only zeroes upper halves
        // of vector registers, declared clobbered.
        unsafe {
            asm!(
                "vzeroupper",
                clobber_abi("C"),
                options(nostack, nomem, preserves_flags)
            )
        };
    }
    let choice = figures
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|x| x.0)
        .unwrap_or(SaveStrategy::Xsave);
    Ok(StrategyReport {
        choice,
        figures,
        unsupported,
        requested,
        in_use,
    })
}
