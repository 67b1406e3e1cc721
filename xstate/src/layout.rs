//! Standard and compacted layouts of an XSAVE area.
//!
//! Standard format (XSAVE, XSAVEOPT, standard XRSTOR, KVM_GET/SET_XSAVE): every
//! user component sits at the offset CPUID.(0DH,i).EBX gives it, whether or
//! not it is saved; the size is the end of the highest component (at least
//! 576). Supervisor components have no standard place.
//!
//! Compacted format (XSAVEC, XSAVES, compacted XRSTOR/XRSTORS; XCOMP_BV bit 63
//! set): the extended region starts at 576 and holds exactly the components of
//! XCOMP_BV in ascending order, packed, except that a component whose
//! CPUID.(0DH,i).ECX bit 1 is set starts at the next multiple of 64. x87 and
//! SSE stay in the legacy region in both formats.

use core::fmt;

use crate::area::XSAVE_MIN_SIZE;
use crate::feature::Xfeature;
use crate::info::{walk_compacted, XsaveInfo};
use crate::mask::XfeatureMask;

/// [`XSAVE_MIN_SIZE`] as the `u32` byte count layouts are measured in.
const HEADER_END: u32 = XSAVE_MIN_SIZE as u32;

/// The two formats of an XSAVE area.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Every component at its fixed CPUID offset (XCOMP_BV = 0).
    Standard,
    /// Components of XCOMP_BV packed in ascending order (XCOMP_BV bit 63 = 1).
    Compacted,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Standard => "standard",
            Format::Compacted => "compacted",
        })
    }
}

/// Offsets and sizes of the components of one mask in one format.
///
/// Built by [`XsaveInfo::layout`]. The standard format keeps PKRU at its
/// CPUID offset behind the unused AVX-512 space; the compacted format packs
/// it right after AVX:
///
/// # Examples
/// ```
/// # use xstate::{CpuidRegs, XsaveInfo};
/// # // x87, SSE, AVX and PKRU at their Intel standard offsets; XSAVEC.
/// # let info = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
/// #     0 => CpuidRegs::new(0x207, 2696, 2696, 0),
/// #     1 => CpuidRegs::new(0x7, 0, 0, 0),
/// #     2 => CpuidRegs::new(256, 576, 0, 0),
/// #     9 => CpuidRegs::new(8, 2688, 0, 0),
/// #     _ => CpuidRegs::default(),
/// # })
/// # .unwrap();
/// use xstate::{Format, Xfeature, XfeatureMask};
/// let xcr0 = XfeatureMask::from_bits(0x207); // x87, SSE, AVX, PKRU
/// let standard = info.layout(xcr0, Format::Standard)?;
/// assert_eq!(standard.offset(Xfeature::Pkru), Some(2688));
/// assert_eq!(standard.total_size(), 2696);
/// let compacted = info.layout(xcr0, Format::Compacted)?;
/// assert_eq!(compacted.offset(Xfeature::Pkru), Some(832));
/// assert_eq!(compacted.total_size(), 840);
/// # Ok::<(), xstate::LayoutError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    format: Format,
    mask: XfeatureMask,
    offsets: [u32; 64],
    sizes: [u32; 64],
    total: u32,
}

impl Layout {
    /// The format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The components laid out.
    pub fn mask(&self) -> XfeatureMask {
        self.mask
    }

    /// Offset of component `f`, if it is in the layout.
    pub fn offset(&self, f: Xfeature) -> Option<u32> {
        self.offset_by_index(f.index())
    }

    /// Size of component `f`, if it is in the layout.
    pub fn size_of(&self, f: Xfeature) -> Option<u32> {
        self.size_by_index(f.index())
    }

    /// Offset of component `i`, if it is in the layout.
    pub fn offset_by_index(&self, i: u32) -> Option<u32> {
        self.mask
            .contains_index(i)
            .then(|| self.offsets[i as usize])
    }

    /// Size of component `i`, if it is in the layout.
    pub fn size_by_index(&self, i: u32) -> Option<u32> {
        self.mask.contains_index(i).then(|| self.sizes[i as usize])
    }

    /// Byte range of component `i`, if it is in the layout.
    pub fn range_by_index(&self, i: u32) -> Option<core::ops::Range<usize>> {
        self.mask.contains_index(i).then(|| {
            let o = self.offsets[i as usize] as usize;
            o..o + self.sizes[i as usize] as usize
        })
    }

    /// Byte range of component `f`, if it is in the layout.
    pub fn range(&self, f: Xfeature) -> Option<core::ops::Range<usize>> {
        self.range_by_index(f.index())
    }

    /// Total size of the area in bytes (at least 576).
    pub fn total_size(&self) -> u32 {
        self.total
    }

    /// The known components with offset and size, ascending.
    pub fn iter(&self) -> impl Iterator<Item = (Xfeature, u32, u32)> + '_ {
        self.mask.iter().map(move |f| {
            (
                f,
                self.offsets[f.index() as usize],
                self.sizes[f.index() as usize],
            )
        })
    }

    /// Every component (by index) with offset and size, ascending.
    pub fn iter_indices(&self) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        self.mask
            .iter_indices()
            .map(move |i| (i, self.offsets[i as usize], self.sizes[i as usize]))
    }
}

impl XsaveInfo {
    /// Size of a standard-format area holding `mask` (user components only):
    /// the end of the highest component, at least 576.
    ///
    /// # Errors
    /// As [`XsaveInfo::layout`] with [`Format::Standard`]:
    /// [`LayoutError::Bit63`], [`LayoutError::Unsupported`],
    /// [`LayoutError::SupervisorInStandard`].
    ///
    /// # Examples
    /// ```
    /// # use xstate::{CpuidRegs, XsaveInfo};
    /// # // AMD EPYC 7763 (Zen 3): x87, SSE, AVX, PKRU; CET in IA32_XSS.
    /// # let info = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
    /// #     0 => CpuidRegs::new(0x207, 832, 2440, 0),
    /// #     1 => CpuidRegs::new(0xf, 848, 0x1800, 0),
    /// #     2 => CpuidRegs::new(256, 576, 0, 0),
    /// #     9 => CpuidRegs::new(8, 2432, 0, 0),
    /// #     11 => CpuidRegs::new(16, 0, 1, 0),
    /// #     12 => CpuidRegs::new(24, 0, 1, 0),
    /// #     _ => CpuidRegs::default(),
    /// # })
    /// # .unwrap();
    /// use xstate::{LayoutError, XfeatureMask};
    /// // On AMD, PKRU sits at 2432: the standard area of 0x207 is 2440 bytes.
    /// assert_eq!(info.standard_size(XfeatureMask::from_bits(0x207)), Ok(2440));
    /// assert_eq!(info.standard_size(XfeatureMask::AVX), Ok(832));
    /// // CET state has no standard-format place.
    /// assert_eq!(
    ///     info.standard_size(XfeatureMask::from_bits(0x1807)),
    ///     Err(LayoutError::SupervisorInStandard(XfeatureMask::CET))
    /// );
    /// ```
    pub fn standard_size(&self, mask: XfeatureMask) -> Result<u32, LayoutError> {
        Ok(self.layout(mask, Format::Standard)?.total_size())
    }

    /// Size of a compacted-format area with XCOMP_BV = `mask` (user and
    /// supervisor components).
    ///
    /// # Errors
    /// As [`XsaveInfo::layout`] with [`Format::Compacted`]:
    /// [`LayoutError::Bit63`], [`LayoutError::Unsupported`].
    ///
    /// # Examples
    /// ```
    /// # use xstate::{CpuidRegs, XsaveInfo};
    /// # // AMD EPYC 7763 (Zen 3): x87, SSE, AVX, PKRU; CET in IA32_XSS.
    /// # let info = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
    /// #     0 => CpuidRegs::new(0x207, 832, 2440, 0),
    /// #     1 => CpuidRegs::new(0xf, 848, 0x1800, 0),
    /// #     2 => CpuidRegs::new(256, 576, 0, 0),
    /// #     9 => CpuidRegs::new(8, 2432, 0, 0),
    /// #     11 => CpuidRegs::new(16, 0, 1, 0),
    /// #     12 => CpuidRegs::new(24, 0, 1, 0),
    /// #     _ => CpuidRegs::default(),
    /// # })
    /// # .unwrap();
    /// use xstate::{LayoutError, XfeatureMask};
    /// // XSAVEC of XCR0 0x207: 576 + AVX 256 + PKRU 8.
    /// assert_eq!(info.compacted_size(XfeatureMask::from_bits(0x207)), Ok(840));
    /// // XSAVES with IA32_XSS 0x1800 as well: + CET_U 16 + CET_S 24.
    /// assert_eq!(info.compacted_size(XfeatureMask::from_bits(0x1a07)), Ok(880));
    /// // AVX-512 is not enumerated on Zen 3.
    /// assert_eq!(
    ///     info.compacted_size(XfeatureMask::AVX512),
    ///     Err(LayoutError::Unsupported(XfeatureMask::AVX512))
    /// );
    /// ```
    pub fn compacted_size(&self, mask: XfeatureMask) -> Result<u32, LayoutError> {
        Ok(self.layout(mask, Format::Compacted)?.total_size())
    }

    /// Lays out `mask` in `format`.
    ///
    /// Every bit must be supported; supervisor components only exist in the
    /// compacted format; bit 63 is never a component. The mask need not be a
    /// valid XCR0 (a compacted area's XCOMP_BV may be any subset, e.g. only the
    /// components in use).
    ///
    /// # Errors
    /// - [`LayoutError::Bit63`]: `mask` has bit 63 (XCOMP_BV's format flag);
    /// - [`LayoutError::Unsupported`]: bits outside the supported XCR0 and
    ///   IA32_XSS;
    /// - [`LayoutError::SupervisorInStandard`]: [`Format::Standard`] with
    ///   supervisor (IA32_XSS) components.
    ///
    /// # Examples
    /// ```
    /// # use xstate::{CpuidRegs, XsaveInfo};
    /// # // AMD EPYC 7763 (Zen 3): x87, SSE, AVX, PKRU; CET in IA32_XSS.
    /// # let info = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
    /// #     0 => CpuidRegs::new(0x207, 832, 2440, 0),
    /// #     1 => CpuidRegs::new(0xf, 848, 0x1800, 0),
    /// #     2 => CpuidRegs::new(256, 576, 0, 0),
    /// #     9 => CpuidRegs::new(8, 2432, 0, 0),
    /// #     11 => CpuidRegs::new(16, 0, 1, 0),
    /// #     12 => CpuidRegs::new(24, 0, 1, 0),
    /// #     _ => CpuidRegs::default(),
    /// # })
    /// # .unwrap();
    /// use xstate::{Format, LayoutError, Xfeature, XfeatureMask};
    /// // XSAVES of XCR0 0x207 and IA32_XSS 0x1800: XCOMP_BV = 0x1a07.
    /// let xcomp_bv = XfeatureMask::from_bits(0x1a07);
    /// let l = info.layout(xcomp_bv, Format::Compacted)?;
    /// let placed: Vec<_> = l.iter().map(|(f, off, size)| (f.short_name(), off, size)).collect();
    /// assert_eq!(
    ///     placed,
    ///     [
    ///         ("x87", 0, 160),
    ///         ("sse", 160, 256),
    ///         ("avx", 576, 256),
    ///         ("pkru", 832, 8),
    ///         ("cet_u", 840, 16),
    ///         ("cet_s", 856, 24),
    ///     ]
    /// );
    /// assert_eq!(l.total_size(), 880);
    /// // Standard format: AVX at its CPUID offset, 576, size 256.
    /// let std = info.layout(XfeatureMask::AVX, Format::Standard)?;
    /// assert_eq!(std.range(Xfeature::Avx), Some(576..832));
    /// assert_eq!(
    ///     info.layout(xcomp_bv, Format::Standard),
    ///     Err(LayoutError::SupervisorInStandard(XfeatureMask::CET))
    /// );
    /// # Ok::<(), LayoutError>(())
    /// ```
    pub fn layout(&self, mask: XfeatureMask, format: Format) -> Result<Layout, LayoutError> {
        if mask.contains_index(63) {
            return Err(LayoutError::Bit63);
        }
        let unsupported = mask - self.supported_all();
        if !unsupported.is_empty() {
            return Err(LayoutError::Unsupported(unsupported));
        }
        let mut l = Layout {
            format,
            mask,
            offsets: [0; 64],
            sizes: [0; 64],
            total: HEADER_END,
        };
        match format {
            Format::Standard => {
                let sup = mask & self.supported_xss();
                if !sup.is_empty() {
                    return Err(LayoutError::SupervisorInStandard(sup));
                }
                for i in mask.iter_indices() {
                    // Supported (checked above), so present.
                    let c = self
                        .component_by_index(i)
                        .ok_or(LayoutError::Unsupported(XfeatureMask::from_bits(1 << i)))?;
                    l.offsets[i as usize] = c.standard_offset;
                    l.sizes[i as usize] = c.size;
                    // Validated by XsaveInfo: fits in u32.
                    l.total = l.total.max(c.standard_offset + c.size);
                }
            }
            Format::Compacted => {
                // x87 and SSE keep their legacy places in the compacted
                // format too; the rest follow the header by the one rule the
                // conversions also use.
                for i in mask.iter_indices().filter(|&i| i < 2) {
                    // Supported (checked above), so present.
                    let c = self
                        .component_by_index(i)
                        .ok_or(LayoutError::Unsupported(XfeatureMask::from_bits(1 << i)))?;
                    l.offsets[i as usize] = c.standard_offset;
                    l.sizes[i as usize] = c.size;
                }
                // Every offset and the end fit in u32: XsaveInfo refuses a
                // CPU whose compacted area of everything would not.
                let end = walk_compacted(self, mask, |i, off, size| {
                    l.offsets[i as usize] = off as u32;
                    l.sizes[i as usize] = size as u32;
                });
                l.total = end as u32;
            }
        }
        Ok(l)
    }
}

/// Why a layout could not be computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// Components the CPU does not support.
    Unsupported(XfeatureMask),
    /// Supervisor components have no place in the standard format.
    SupervisorInStandard(XfeatureMask),
    /// Bit 63 is the compacted-format flag of XCOMP_BV, not a component.
    Bit63,
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Unsupported(m) => {
                write!(f, "xsave layout: components {m} ({m:#x}) are not supported by the CPU")
            }
            LayoutError::SupervisorInStandard(m) => write!(
                f,
                "xsave layout: supervisor components {m} ({m:#x}) exist only in the compacted format"
            ),
            LayoutError::Bit63 => {
                f.write_str("xsave layout: bit 63 is the compacted-format flag, not a component")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for LayoutError {}
