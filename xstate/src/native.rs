//! The XSAVE instructions on the running CPU (x86_64, feature `native`):
//! XGETBV, XSAVE, XSAVEOPT, XSAVEC, XSAVEC masked by XGETBV(1), XRSTOR, and a
//! save-strategy chooser that times them with RDTSC.
//!
//! The checked functions verify CPUID support, the area's alignment and size
//! and, for XRSTOR, the header (with [`crate::validate()`]) and that the image
//! would not change the x87 control word, the MXCSR control bits, the x87
//! stack, or PKRU, which the surrounding Rust code relies on. XSAVES/XRSTORS
//! need CPL 0 and are not offered. The `*_raw` functions skip every check for
//! benchmarks that have already checked once.

use std::fmt;
use std::sync::OnceLock;

use crate::area::{header_xstate_bv, offsets as o, rd_u16, rd_u32, HEADER_RESERVED};
use crate::area::{FCW_INIT, MXCSR_INIT, XSAVE_ALIGN, XSAVE_MIN_SIZE};
use crate::buffer::BufferError;
use crate::feature::Xfeature;
use crate::info::{cpuid, leaf_1_ecx, InfoError, XsaveInfo};
use crate::layout::Format;
use crate::mask::XfeatureMask;
use crate::strategy::SaveStrategy;
use crate::validate::validate;

mod chooser;
mod raw;

pub use chooser::{choose_save_strategy, StrategyReport};
use raw::{fnstcw, stmxcsr, xgetbv_raw};
pub use raw::{rdtsc, xrstor_raw, xsave_raw, xsavec_raw, xsavec_xinuse_raw, xsaveopt_raw};

/// What the checked functions need to know about the host, read once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Host {
    /// The host's leaf 0xD.
    pub(crate) info: XsaveInfo,
    /// XCR0 as the OS set it.
    pub(crate) xcr0: u64,
}

pub(crate) fn host() -> Result<&'static Host, NativeError> {
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
///
/// # Errors
/// [`NativeError::NoOsXsave`] if CPUID.1:ECX.OSXSAVE is clear (the OS has
/// not set CR4.OSXSAVE), [`NativeError::Info`] if `XsaveInfo::host` fails
/// (no XSAVE, or an inconsistent leaf 0xD). Both are cached: every later
/// call returns the same error.
///
/// # Examples
/// ```
/// use xstate::native::{host_info, host_xcr0, xgetbv};
/// let info = host_info()?;
/// let xcr0 = host_xcr0()?;
/// // The OS enables a valid subset of what leaf 0xD offers.
/// assert!(info.supported_xcr0().contains_all(xcr0));
/// assert_eq!(xcr0.validate_xcr0(info.supported_xcr0()), Ok(()));
/// assert_eq!(xgetbv(0), xcr0.bits());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn host_info() -> Result<XsaveInfo, NativeError> {
    Ok(host()?.info)
}

/// The host's XCR0 as the OS set it (cached; XCR0 does not change while a
/// process runs).
///
/// # Errors
/// [`NativeError::NoOsXsave`] if CPUID.1:ECX.OSXSAVE is clear (the OS has
/// not set CR4.OSXSAVE), [`NativeError::Info`] if `XsaveInfo::host` fails
/// (no XSAVE, or an inconsistent leaf 0xD). Both are cached: every later
/// call returns the same error.
///
/// See [`host_info`] for an example.
pub fn host_xcr0() -> Result<XfeatureMask, NativeError> {
    Ok(XfeatureMask::from_bits(host()?.xcr0))
}

/// XGETBV(`index`): 0 = XCR0, 1 = XINUSE (XCR0 & components not in init
/// state), with CPUID-checked support.
///
/// # Errors
/// - the host errors of [`host_info`]: [`NativeError::NoOsXsave`],
///   [`NativeError::Info`];
/// - [`NativeError::Unsupported`]: `index` is 1 and leaf 0xD.1 EAX has no
///   XGETBV1 (bit 2), or `index` is neither 0 nor 1.
///
/// # Examples
/// ```
/// use xstate::native::{host_xcr0, try_xgetbv, NativeError};
/// let xcr0 = host_xcr0()?.bits();
/// assert_eq!(try_xgetbv(0)?, xcr0);
/// match try_xgetbv(1) {
///     // XINUSE: only enabled components can be in use.
///     Ok(xinuse) => assert_eq!(xinuse & !xcr0, 0),
///     Err(e) => assert_eq!(e, NativeError::Unsupported("XGETBV with ECX=1")),
/// }
/// assert!(matches!(try_xgetbv(2), Err(NativeError::Unsupported(_))));
/// # Ok::<(), NativeError>(())
/// ```
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

/// Runs the standard-format or plain XSAVEC instruction `save` of
/// `strategy` after [`prepare_save`]'s checks.
fn checked_save(
    area: &mut [u8],
    mask: XfeatureMask,
    strategy: SaveStrategy,
    save: unsafe fn(*mut u8, u64),
) -> Result<(), NativeError> {
    let rfbm = prepare_save(area, mask, strategy)?;
    // SAFETY: `save` is the instruction of `strategy`; prepare_save checked
    // that the CPU supports it and that the area is aligned and large enough.
    unsafe { save(area.as_mut_ptr(), rfbm) };
    Ok(())
}

/// XSAVE of the components `mask & XCR0` into `area` (standard format).
///
/// The header is zeroed first, so the result is a well-formed standard
/// image (XCOMP_BV 0) whatever `area` held.
///
/// # Errors
/// - the host errors of [`host_info`]: [`NativeError::NoOsXsave`],
///   [`NativeError::Info`];
/// - [`NativeError::Buffer`]: `area` is not 64-byte aligned
///   ([`BufferError::Misaligned`]) or shorter than the standard size of
///   `mask & XCR0`, at least 576 bytes ([`BufferError::TooSmall`]);
///   [`BufferError::Layout`] if leaf 0xD cannot lay that mask out, which
///   a consistent CPU never gives.
///
/// # Examples
/// ```
/// use xstate::native::{host_info, host_xcr0, xsave};
/// use xstate::{validate, Format, XfeatureMask, XsaveBuf};
/// let info = host_info()?;
/// let xcr0 = host_xcr0()?;
/// let mut area = XsaveBuf::standard_for(&info, xcr0)?;
/// xsave(&mut area, xcr0)?;
/// // Rust runs with the default x87 and SSE control words.
/// assert_eq!((area.fcw(), area.mxcsr() & 0xffc0), (0x037f, 0x1f80));
/// assert!(xcr0.contains_all(area.xstate_bv_mask()));
/// assert_eq!(validate(area.as_bytes(), &info, xcr0, XfeatureMask::EMPTY), Ok(Format::Standard));
/// // Too short for the legacy region and header.
/// assert!(xsave(&mut XsaveBuf::new(576).as_bytes_mut()[..512], xcr0).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn xsave<A: AsMut<[u8]> + ?Sized>(area: &mut A, mask: XfeatureMask) -> Result<(), NativeError> {
    checked_save(area.as_mut(), mask, SaveStrategy::Xsave, xsave_raw)
}

/// XSAVEOPT of `mask & XCR0` into `area` (standard format).
///
/// # Errors
/// - the host errors of [`host_info`]: [`NativeError::NoOsXsave`],
///   [`NativeError::Info`];
/// - [`NativeError::Unsupported`]: leaf 0xD.1 EAX lacks XSAVEOPT (bit 0);
/// - [`NativeError::Buffer`]: `area` is not 64-byte aligned
///   ([`BufferError::Misaligned`]) or shorter than the standard size of
///   `mask & XCR0`, at least 576 bytes ([`BufferError::TooSmall`]);
///   [`BufferError::Layout`] if leaf 0xD cannot lay that mask out, which
///   a consistent CPU never gives.
///
/// # Examples
/// ```
/// use xstate::native::{host_info, host_xcr0, xsaveopt, NativeError};
/// use xstate::XsaveBuf;
/// let info = host_info()?;
/// let xcr0 = host_xcr0()?;
/// let mut area = XsaveBuf::standard_for(&info, xcr0)?;
/// match xsaveopt(&mut area, xcr0) {
///     Ok(()) => assert_eq!(area.xcomp_bv(), 0),
///     Err(e) => assert!(!info.has_xsaveopt() && e == NativeError::Unsupported("xsaveopt")),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn xsaveopt<A: AsMut<[u8]> + ?Sized>(
    area: &mut A,
    mask: XfeatureMask,
) -> Result<(), NativeError> {
    checked_save(area.as_mut(), mask, SaveStrategy::Xsaveopt, xsaveopt_raw)
}

/// XSAVEC of `mask & XCR0` into `area` (compacted format, XCOMP_BV = RFBM).
///
/// # Errors
/// - the host errors of [`host_info`]: [`NativeError::NoOsXsave`],
///   [`NativeError::Info`];
/// - [`NativeError::Unsupported`]: leaf 0xD.1 EAX lacks XSAVEC (bit 1);
/// - [`NativeError::Buffer`]: `area` is not 64-byte aligned
///   ([`BufferError::Misaligned`]) or shorter than the compacted size of
///   `mask & XCR0`, at least 576 bytes ([`BufferError::TooSmall`]);
///   [`BufferError::Layout`] if leaf 0xD cannot lay that mask out, which
///   a consistent CPU never gives.
///
/// # Examples
/// ```
/// use xstate::native::{host_info, host_xcr0, xsave, xsavec, NativeError};
/// use xstate::{expand_to_standard, XsaveBuf};
/// let info = host_info()?;
/// let xcr0 = host_xcr0()?;
/// let mut packed = XsaveBuf::new(info.compacted_size(xcr0)? as usize);
/// if let Err(e) = xsavec(&mut packed, xcr0) {
///     assert!(!info.has_xsavec() && e == NativeError::Unsupported("xsavec"));
///     return Ok(());
/// }
/// assert_eq!(packed.xcomp_bv(), xcr0.bits() | 1 << 63);
/// // The same state as XSAVE saves it, once expanded.
/// let mut standard = XsaveBuf::standard_for(&info, xcr0)?;
/// xsave(&mut standard, xcr0)?;
/// let expanded = expand_to_standard(&info, &packed, xcr0)?;
/// assert_eq!((expanded.fcw(), expanded.mxcsr()), (standard.fcw(), standard.mxcsr()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn xsavec<A: AsMut<[u8]> + ?Sized>(
    area: &mut A,
    mask: XfeatureMask,
) -> Result<(), NativeError> {
    checked_save(area.as_mut(), mask, SaveStrategy::Xsavec, xsavec_raw)
}

/// XSAVEC of `mask & XCR0 & (XGETBV(1) | x87 | SSE)`: only the components in
/// use (plus the legacy region, so MXCSR is always saved), dense.
/// Returns the mask that was saved.
///
/// # Errors
/// - the host errors of [`host_info`]: [`NativeError::NoOsXsave`],
///   [`NativeError::Info`];
/// - [`NativeError::Unsupported`]: leaf 0xD.1 EAX lacks XSAVEC (bit 1) or
///   XGETBV1 (bit 2);
/// - [`NativeError::Buffer`]: `area` is not 64-byte aligned
///   ([`BufferError::Misaligned`]) or shorter than the compacted size of
///   `mask & XCR0`, at least 576 bytes ([`BufferError::TooSmall`]);
///   [`BufferError::Layout`] if leaf 0xD cannot lay that mask out, which
///   a consistent CPU never gives.
///
/// # Examples
/// ```
/// use xstate::native::{host_info, host_xcr0, xsavec_xinuse};
/// use xstate::{XfeatureMask, XsaveBuf};
/// let info = host_info()?;
/// let xcr0 = host_xcr0()?;
/// if !(info.has_xsavec() && info.has_xgetbv1()) {
///     return Ok(()); // NativeError::Unsupported("xsavec-xinuse")
/// }
/// let mut packed = XsaveBuf::new(info.compacted_size(xcr0)? as usize);
/// let saved = xsavec_xinuse(&mut packed, xcr0)?;
/// // x87 and SSE always, the rest only when in use: the image is dense.
/// assert!(saved.contains_all(XfeatureMask::LEGACY) && xcr0.contains_all(saved));
/// assert_eq!(packed.xcomp_bv(), saved.bits() | 1 << 63);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
pub(crate) const NOT_RESTORABLE: u64 = Xfeature::Pkru.bit();

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
///
/// # Errors
/// The first refusal, in this order:
/// - the host errors of [`host_info`]: [`NativeError::NoOsXsave`],
///   [`NativeError::Info`];
/// - [`NativeError::NotRestorable`]: `mask & XCR0` includes PKRU;
/// - [`NativeError::Buffer`]: `area` is not 64-byte aligned
///   ([`BufferError::Misaligned`]), or [`validate()`] refuses it for the
///   host's XCR0 (too short, XCOMP_BV or XSTATE_BV outside what XCR0
///   allows, compacted without XSAVEC, reserved header bytes set, MXCSR
///   reserved bits set);
/// - [`NativeError::WouldChangeFpEnv`]: the restore would load an x87
///   control word other than the running one or a tag word marking
///   registers valid, or MXCSR control bits (bits 6..16) other than the
///   running ones.
///
/// # Examples
/// ```
/// use xstate::native::{host_info, host_xcr0, xrstor, xsave, NativeError};
/// use xstate::{Xfeature, XsaveBuf};
/// let info = host_info()?;
/// // PKRU guards memory: never restored from user code.
/// let mask = host_xcr0()?.without(Xfeature::Pkru);
/// let mut area = XsaveBuf::standard_for(&info, mask)?;
/// xsave(&mut area, mask)?;
/// xrstor(&area, mask)?;
/// // An image with another rounding mode (MXCSR.RC = toward zero) is refused.
/// area.set_mxcsr(0x7f80);
/// assert_eq!(xrstor(&area, mask), Err(NativeError::WouldChangeFpEnv));
/// // So is one with a nonzero reserved header byte (XRSTOR would #GP).
/// area.set_mxcsr(0x1f80);
/// area.as_bytes_mut()[560] = 1;
/// assert!(matches!(xrstor(&area, mask), Err(NativeError::Buffer(_))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
