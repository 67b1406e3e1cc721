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
