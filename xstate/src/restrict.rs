//! Leaf 0xD as a guest sees it when the VMM offers fewer components than the
//! host has ([`XsaveInfo::restricted`]).
//!
//! Kept out of [`crate::info`] because the restricted sizes come from
//! [`crate::layout`], which itself builds on the enumeration: enumeration
//! first, layouts on top, and this view on top of both.

use crate::info::{CpuidRegs, InfoError, XsaveInfo};
use crate::mask::XfeatureMask;

impl XsaveInfo {
    /// A copy restricted to `xcr0`/`xss` (bits outside the supported sets are
    /// ignored): what a guest would see in CPUID leaf 0xD if the VMM offers
    /// only these components. Subleaf 0.ECX becomes the standard size of the
    /// restricted set; 0.EBX and 1.EBX (which depend on the guest's enabled
    /// XCR0) are set to the sizes with everything offered enabled.
    ///
    /// x87 and SSE are always offered: a guest's XCR0 cannot drop them.
    ///
    /// # Errors
    /// - [`InfoError::CompactedTooLarge`] (holding 0): a size of the
    ///   restricted set cannot be computed; this happens only when `self`
    ///   enumerates x87 without SSE, since SSE is offered all the same;
    /// - otherwise the [`XsaveInfo::from_raw`] errors of the restricted
    ///   subleaves, which cannot occur for a subset of subleaves `self`
    ///   has already validated.
    ///
    /// # Examples
    /// ```
    /// use xstate::{CpuidRegs, XfeatureMask, XsaveInfo};
    /// // AMD EPYC 7763 (Zen 3): x87, SSE, AVX, PKRU; CET_U and CET_S in IA32_XSS.
    /// let host = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
    ///     0 => CpuidRegs::new(0x207, 832, 2440, 0),
    ///     1 => CpuidRegs::new(0xf, 848, 0x1800, 0),
    ///     2 => CpuidRegs::new(256, 576, 0, 0),
    ///     9 => CpuidRegs::new(8, 2432, 0, 0),
    ///     11 => CpuidRegs::new(16, 0, 1, 0),
    ///     12 => CpuidRegs::new(24, 0, 1, 0),
    ///     _ => CpuidRegs::default(),
    /// })?;
    /// // The guest is offered AVX but neither PKRU nor CET.
    /// let guest = host.restricted(XfeatureMask::AVX, XfeatureMask::EMPTY)?;
    /// assert_eq!(guest.supported_xcr0().bits(), 0x7);
    /// assert!(guest.supported_xss().is_empty());
    /// // 0xD.0 ECX shrinks from 2440 to the end of AVX.
    /// assert_eq!(guest.max_standard_size(), 832);
    /// assert_eq!(guest.raw_subleaf(9), CpuidRegs::default());
    /// # Ok::<(), xstate::InfoError>(())
    /// ```
    pub fn restricted(&self, xcr0: XfeatureMask, xss: XfeatureMask) -> Result<Self, InfoError> {
        let xcr0 = (xcr0 & self.supported_xcr0()) | XfeatureMask::LEGACY;
        let xss = xss & self.supported_xss();
        let offered = xcr0 | xss;
        let mut raw = [CpuidRegs::default(); 64];
        for i in 0..64u32 {
            if i < 2 || offered.contains_index(i) {
                raw[i as usize] = self.raw_subleaf(i);
            }
        }
        raw[0].eax = xcr0.bits() as u32;
        raw[0].edx = (xcr0.bits() >> 32) as u32;
        raw[1].ecx = xss.bits() as u32;
        raw[1].edx = (xss.bits() >> 32) as u32;
        let std_size = self
            .standard_size(xcr0)
            .map_err(|_| InfoError::CompactedTooLarge(0))?;
        raw[0].ebx = std_size;
        raw[0].ecx = std_size;
        raw[1].ebx = self
            .compacted_size(offered)
            .map_err(|_| InfoError::CompactedTooLarge(0))?;
        Self::from_raw(raw)
    }
}
