//! The XSAVE instructions on the running CPU (x86_64, feature `native`):
//! XGETBV, XSAVE, XSAVEOPT, XSAVEC, XSAVEC masked by XGETBV(1), XRSTOR, and a
//! save-strategy chooser that times them with RDTSC.
//!
//! The checked functions verify CPUID support, the area's alignment and size
//! and, for XRSTOR, the header (with [`crate::validate`]) and that the image
//! would not change the x87 control word, the MXCSR control bits, the x87
//! stack, or PKRU, which the surrounding Rust code relies on. XSAVES/XRSTORS
//! need CPL 0 and are not offered. The `*_raw` functions skip every check for
//! benchmarks that have already checked once.

use core::arch::asm;
use std::fmt;
use std::sync::OnceLock;
use std::vec::Vec;

use crate::area::{header_xstate_bv, offsets as o, rd_u16, rd_u32, HEADER_RESERVED};
use crate::area::{FCW_INIT, MXCSR_INIT, XSAVE_ALIGN, XSAVE_MIN_SIZE};
use crate::buffer::{BufferError, XsaveBuf};
use crate::feature::Xfeature;
use crate::info::{cpuid, leaf_1_ecx, InfoError, XsaveInfo};
use crate::layout::Format;
use crate::mask::XfeatureMask;
use crate::strategy::SaveStrategy;
use crate::validate::validate;

/// What the checked functions need to know about the host, read once.
#[derive(Clone, Copy, Debug)]
struct Host {
    info: XsaveInfo,
    xcr0: u64,
}

fn host() -> Result<&'static Host, NativeError> {
    static HOST: OnceLock<Result<Host, NativeError>> = OnceLock::new();
    HOST.get_or_init(|| {
        if cpuid(1, 0).ecx & leaf_1_ecx::OSXSAVE == 0 {
            // No OSXSAVE: XGETBV/XSAVE would #UD.
            return Err(NativeError::NoOsXsave);
        }
        let info = XsaveInfo::host().map_err(NativeError::Info)?;
        // SAFETY: OSXSAVE is set (checked above), so XGETBV(0) is defined.
        let xcr0 = unsafe { xgetbv_raw(0) };
        Ok(Host { info, xcr0 })
    })
    .as_ref()
    .map_err(|e| *e)
}

/// The host's leaf-0xD enumeration (cached).
pub fn host_info() -> Result<XsaveInfo, NativeError> {
    Ok(host()?.info)
}

/// The host's XCR0 as the OS set it (cached; XCR0 does not change while a
/// process runs).
pub fn host_xcr0() -> Result<XfeatureMask, NativeError> {
    Ok(XfeatureMask::from_bits(host()?.xcr0))
}

/// Executes XGETBV.
///
/// # Safety
/// OSXSAVE must be set, and `index` must be 0, or 1 with XGETBV1 support.
pub unsafe fn xgetbv_raw(index: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: the caller guarantees the index is supported; XGETBV only
    // writes EDX:EAX.
    unsafe {
        asm!("xgetbv", in("ecx") index, out("eax") lo, out("edx") hi,
             options(nomem, nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// XGETBV(`index`): 0 = XCR0, 1 = XINUSE (XCR0 & components not in init
/// state), with CPUID-checked support.
pub fn try_xgetbv(index: u32) -> Result<u64, NativeError> {
    let h = host()?;
    match index {
        0 => Ok(h.xcr0),
        1 if h.info.has_xgetbv1() => {
            // SAFETY: OSXSAVE and XGETBV1 support checked.
            Ok(unsafe { xgetbv_raw(1) })
        }
        1 => Err(NativeError::Unsupported("XGETBV with ECX=1")),
        _ => Err(NativeError::Unsupported("XGETBV index other than 0 or 1")),
    }
}

/// XGETBV(`index`).
///
/// # Panics
/// If the CPU or OS does not support the index (see [`try_xgetbv`]).
pub fn xgetbv(index: u32) -> u64 {
    match try_xgetbv(index) {
        Ok(v) => v,
        Err(e) => panic!("xgetbv({index}): {e}"),
    }
}

fn check_area(area: &[u8], need: u32) -> Result<(), NativeError> {
    if area.as_ptr() as usize & (XSAVE_ALIGN - 1) != 0 {
        return Err(NativeError::Buffer(BufferError::Misaligned {
            addr: area.as_ptr() as usize,
        }));
    }
    if area.len() < need as usize {
        return Err(NativeError::Buffer(BufferError::TooSmall {
            need: need as usize,
            have: area.len(),
        }));
    }
    Ok(())
}

fn prepare_save(
    area: &mut [u8],
    mask: XfeatureMask,
    strategy: SaveStrategy,
) -> Result<u64, NativeError> {
    let h = host()?;
    if !strategy.supported(&h.info) {
        return Err(NativeError::Unsupported(strategy.name()));
    }
    let rfbm = XfeatureMask::from_bits(mask.bits() & h.xcr0);
    let need = match strategy.format() {
        Format::Standard => h.info.standard_size(rfbm),
        Format::Compacted => h.info.compacted_size(rfbm),
    }
    .map_err(|e| NativeError::Buffer(BufferError::Layout(e)))?;
    check_area(area, need.max(XSAVE_MIN_SIZE as u32))?;
    // XSAVE/XSAVEOPT write only the XSTATE_BV bits of RFBM and leave the rest
    // of the header alone; start from a clean header so the result is a
    // well-formed standard image whatever the area held before.
    if strategy.format() == Format::Standard {
        area[o::XSTATE_BV..XSAVE_MIN_SIZE].fill(0);
    } else {
        area[HEADER_RESERVED].fill(0);
    }
    Ok(rfbm.bits())
}

/// XSAVE of the components `mask & XCR0` into `area` (standard format).
pub fn xsave<A: AsMut<[u8]> + ?Sized>(area: &mut A, mask: XfeatureMask) -> Result<(), NativeError> {
    let area = area.as_mut();
    let rfbm = prepare_save(area, mask, SaveStrategy::Xsave)?;
    // SAFETY: support, alignment and size checked by prepare_save.
    unsafe { xsave_raw(area.as_mut_ptr(), rfbm) };
    Ok(())
}

/// XSAVEOPT of `mask & XCR0` into `area` (standard format).
pub fn xsaveopt<A: AsMut<[u8]> + ?Sized>(
    area: &mut A,
    mask: XfeatureMask,
) -> Result<(), NativeError> {
    let area = area.as_mut();
    let rfbm = prepare_save(area, mask, SaveStrategy::Xsaveopt)?;
    // SAFETY: support, alignment and size checked by prepare_save.
    unsafe { xsaveopt_raw(area.as_mut_ptr(), rfbm) };
    Ok(())
}

/// XSAVEC of `mask & XCR0` into `area` (compacted format, XCOMP_BV = RFBM).
pub fn xsavec<A: AsMut<[u8]> + ?Sized>(
    area: &mut A,
    mask: XfeatureMask,
) -> Result<(), NativeError> {
    let area = area.as_mut();
    let rfbm = prepare_save(area, mask, SaveStrategy::Xsavec)?;
    // SAFETY: support, alignment and size checked by prepare_save.
    unsafe { xsavec_raw(area.as_mut_ptr(), rfbm) };
    Ok(())
}

/// XSAVEC of `mask & XCR0 & (XGETBV(1) | x87 | SSE)`: only the components in
/// use (plus the legacy region, so MXCSR is always saved), dense.
/// Returns the mask that was saved.
pub fn xsavec_xinuse<A: AsMut<[u8]> + ?Sized>(
    area: &mut A,
    mask: XfeatureMask,
) -> Result<XfeatureMask, NativeError> {
    let area = area.as_mut();
    // Sized for the full mask: XINUSE can only be smaller.
    let rfbm = prepare_save(area, mask, SaveStrategy::XsavecXinuse)?;
    // SAFETY: support, alignment and size checked by prepare_save.
    let saved = unsafe { xsavec_xinuse_raw(area.as_mut_ptr(), rfbm) };
    Ok(XfeatureMask::from_bits(saved))
}

/// Components whose restore would change state the surrounding Rust code
/// (or the OS) depends on in ways the compiler cannot see.
/// PKRU: memory access rights.
const NOT_RESTORABLE: u64 = Xfeature::Pkru.bit();

fn fnstcw() -> u16 {
    let mut cw: u16 = 0;
    // SAFETY: FNSTCW only stores the x87 control word to the given location.
    unsafe {
        asm!("fnstcw word ptr [{}]", in(reg) &mut cw, options(nostack, preserves_flags));
    }
    cw
}

fn stmxcsr() -> u32 {
    let mut v: u32 = 0;
    // SAFETY: STMXCSR only stores MXCSR to the given location.
    unsafe {
        asm!("stmxcsr dword ptr [{}]", in(reg) &mut v, options(nostack, preserves_flags));
    }
    v
}

/// MXCSR control bits (DAZ, exception masks, rounding, FZ); the low six are
/// sticky status flags that may differ freely.
const MXCSR_CONTROL: u32 = 0xffc0;

/// XRSTOR of `mask & XCR0` from `area` (either format).
///
/// Refused before execution ([`NativeError`]) if the area is misaligned or too
/// short, its header is invalid for this CPU (the cases where XRSTOR would
/// raise #GP), `mask` includes PKRU, or the restore would change the x87
/// control word, the MXCSR control bits or leave x87 registers tagged valid
/// (Rust code relies on the default floating-point environment and an empty
/// x87 stack). Vector registers are declared clobbered.
pub fn xrstor<A: AsRef<[u8]> + ?Sized>(area: &A, mask: XfeatureMask) -> Result<(), NativeError> {
    let area = area.as_ref();
    let h = host()?;
    let rfbm = mask.bits() & h.xcr0;
    if rfbm & NOT_RESTORABLE != 0 {
        return Err(NativeError::NotRestorable(XfeatureMask::from_bits(
            rfbm & NOT_RESTORABLE,
        )));
    }
    if area.as_ptr() as usize & (XSAVE_ALIGN - 1) != 0 {
        return Err(NativeError::Buffer(BufferError::Misaligned {
            addr: area.as_ptr() as usize,
        }));
    }
    let xcr0 = XfeatureMask::from_bits(h.xcr0);
    let format = validate(area, &h.info, xcr0, XfeatureMask::EMPTY).map_err(NativeError::Buffer)?;
    let bv = header_xstate_bv(area);
    // The x87 environment after the restore.
    if rfbm & Xfeature::X87.bit() != 0 {
        let (fcw, ftw) = if bv & Xfeature::X87.bit() != 0 {
            (rd_u16(area, o::FCW), area[o::FTW])
        } else {
            (FCW_INIT, 0)
        };
        if fcw != fnstcw() || ftw != 0 {
            return Err(NativeError::WouldChangeFpEnv);
        }
    }
    // MXCSR after the restore.
    let sse_avx = Xfeature::Sse.bit() | Xfeature::Avx.bit();
    let image_mxcsr = rd_u32(area, o::MXCSR);
    let new_mxcsr = match format {
        Format::Standard if rfbm & sse_avx != 0 => Some(image_mxcsr),
        Format::Compacted if rfbm & Xfeature::Sse.bit() != 0 => {
            Some(if bv & Xfeature::Sse.bit() != 0 {
                image_mxcsr
            } else {
                MXCSR_INIT
            })
        }
        _ => None,
    };
    if let Some(m) = new_mxcsr {
        if m & MXCSR_CONTROL != stmxcsr() & MXCSR_CONTROL {
            return Err(NativeError::WouldChangeFpEnv);
        }
    }
    // SAFETY: the header is valid for this CPU and XCR0 (no #GP), the area is
    // aligned and covers the format's size, and the restored state keeps the
    // floating-point environment and PKRU as they are.
    unsafe { xrstor_raw(area.as_ptr(), rfbm) };
    Ok(())
}

/// Executes XSAVE.
///
/// # Safety
/// `area` must be 64-byte aligned and writable for the standard size of
/// `rfbm & XCR0`; OSXSAVE must be set.
#[inline]
pub unsafe fn xsave_raw(area: *mut u8, rfbm: u64) {
    // SAFETY: guaranteed by the caller; XSAVE reads registers and writes memory.
    unsafe {
        asm!("xsave64 [{}]", in(reg) area, in("eax") rfbm as u32, in("edx") (rfbm >> 32) as u32,
             options(nostack, preserves_flags));
    }
}

/// Executes XSAVEOPT.
///
/// # Safety
/// As [`xsave_raw`], and the CPU must support XSAVEOPT.
#[inline]
pub unsafe fn xsaveopt_raw(area: *mut u8, rfbm: u64) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        asm!("xsaveopt64 [{}]", in(reg) area, in("eax") rfbm as u32, in("edx") (rfbm >> 32) as u32,
             options(nostack, preserves_flags));
    }
}

/// Executes XSAVEC.
///
/// # Safety
/// `area` must be 64-byte aligned and writable for the compacted size of
/// `rfbm & XCR0`; the CPU must support XSAVEC.
#[inline]
pub unsafe fn xsavec_raw(area: *mut u8, rfbm: u64) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        asm!("xsavec64 [{}]", in(reg) area, in("eax") rfbm as u32, in("edx") (rfbm >> 32) as u32,
             options(nostack, preserves_flags));
    }
}

/// Executes XGETBV(1) and XSAVEC with RFBM = `rfbm & XINUSE`; returns that mask.
///
/// # Safety
/// As [`xsavec_raw`], and the CPU must support XGETBV with ECX = 1.
#[inline]
pub unsafe fn xsavec_xinuse_raw(area: *mut u8, rfbm: u64) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: guaranteed by the caller.
    unsafe {
        asm!(
            "mov ecx, 1",
            "xgetbv",
            // x87 and SSE are always saved, so MXCSR is never lost.
            "or eax, 3",
            "and eax, {lo:e}",
            "and edx, {hi:e}",
            "xsavec64 [{a}]",
            a = in(reg) area,
            lo = in(reg) rfbm as u32,
            hi = in(reg) (rfbm >> 32) as u32,
            out("ecx") _,
            out("eax") lo,
            out("edx") hi,
            options(nostack),
        );
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Executes XRSTOR.
///
/// # Safety
/// `area` must be 64-byte aligned, readable for its format's size and hold
/// a header XRSTOR accepts; the restored state must not break what the
/// calling code relies on (floating-point control words, x87 stack, PKRU).
/// Every vector and x87 register is clobbered.
#[inline]
pub unsafe fn xrstor_raw(area: *const u8, rfbm: u64) {
    // SAFETY: guaranteed by the caller; the clobbers tell the compiler that
    // all caller-saved (vector, x87, mask) registers change.
    unsafe {
        asm!("xrstor64 [{}]", in(reg) area, in("eax") rfbm as u32, in("edx") (rfbm >> 32) as u32,
             clobber_abi("C"), options(nostack, preserves_flags));
    }
}

/// Reads the time-stamp counter, ordered after earlier instructions.
#[inline]
pub fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: LFENCE and RDTSC only read the TSC into EDX:EAX.
    unsafe {
        asm!("lfence", "rdtsc", "lfence", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

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

/// Why a native operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NativeError {
    /// CR4.OSXSAVE is clear: the OS has not enabled XSAVE.
    NoOsXsave,
    /// The CPU lacks the instruction or XGETBV index.
    Unsupported(&'static str),
    /// Leaf 0xD could not be read or is inconsistent.
    Info(InfoError),
    /// The area is misaligned, too small or has an invalid header.
    Buffer(BufferError),
    /// Components not enabled in XCR0.
    NotEnabled(XfeatureMask),
    /// Components this crate will not XRSTOR from user code (PKRU).
    NotRestorable(XfeatureMask),
    /// The image would change the x87 control word, MXCSR control bits or
    /// leave x87 registers tagged valid.
    WouldChangeFpEnv,
}

impl fmt::Display for NativeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NativeError::NoOsXsave => {
                f.write_str("XSAVE is not enabled by the OS (CR4.OSXSAVE = 0)")
            }
            NativeError::Unsupported(what) => write!(f, "the CPU does not support {what}"),
            NativeError::Info(e) => write!(f, "{e}"),
            NativeError::Buffer(e) => write!(f, "{e}"),
            NativeError::NotEnabled(m) => {
                write!(f, "components {m} ({m:#x}) are not enabled in XCR0")
            }
            NativeError::NotRestorable(m) => {
                write!(f, "refusing to XRSTOR {m} ({m:#x}) from user code")
            }
            NativeError::WouldChangeFpEnv => f.write_str(
                "refusing XRSTOR: the image would change the x87 control word, the MXCSR control \
                 bits or leave x87 registers in use",
            ),
        }
    }
}

impl std::error::Error for NativeError {}
