//! [`XsaveInfo`]: what CPUID leaf 0xD enumerates, validated.
//!
//! The construction ([`XsaveInfo::from_leaf_0xd`]) is a pure function over a
//! closure returning the raw registers of each subleaf, so the same code runs
//! on the host (`native`), on KVM's supported-CPUID table (`kvm`), on a
//! recorded JSON dump (`serde`) and in the `no_std` guest kernel.
//!
//! Convention for the legacy components: CPUID does not describe x87 and SSE
//! (subleaves 0 and 1 have other meanings), so [`XsaveInfo::component`] reports
//! their fixed places in the 512-byte legacy region: x87 at offset 0, size 160
//! (FCW..FDP in bytes 0..24 and ST0-7 in 32..160) and SSE at offset 160, size
//! 256 (XMM0-15). SSE also owns MXCSR and MXCSR_MASK at bytes 24..32 of the x87
//! range; the buffer code treats those bytes specially.

use crate::area::XSAVE_MIN_SIZE;
use crate::feature::Xfeature;
use crate::mask::XfeatureMask;

mod error;
mod regs;

pub use error::InfoError;
#[cfg(target_arch = "x86_64")]
pub use regs::cpuid;
pub use regs::{CpuidRegs, Reg};

/// [`XSAVE_MIN_SIZE`] as the `u32` byte count CPUID reports sizes in.
const HEADER_END: u32 = XSAVE_MIN_SIZE as u32;

/// Placement and properties of one state component.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ComponentInfo {
    /// Size in bytes (CPUID.(0DH,i).EAX).
    pub size: u32,
    /// Offset in the standard format (CPUID.(0DH,i).EBX); 0 for supervisor
    /// components, which have no standard-format place.
    pub standard_offset: u32,
    /// In the compacted format the component starts on a 64-byte boundary
    /// (CPUID.(0DH,i).ECX bit 1).
    pub align64: bool,
    /// Extended feature disable (XFD) supports the component (ECX bit 2).
    pub xfd: bool,
    /// Supervisor state, enabled via IA32_XSS (ECX bit 0).
    pub supervisor: bool,
}

const X87_INFO: ComponentInfo = ComponentInfo {
    size: 160,
    standard_offset: 0,
    align64: false,
    xfd: false,
    supervisor: false,
};
const SSE_INFO: ComponentInfo = ComponentInfo {
    size: 256,
    standard_offset: 160,
    align64: false,
    xfd: false,
    supervisor: false,
};

/// Feature bits of CPUID.(EAX=0DH,ECX=1):EAX, named once for every reader
/// of that register (this crate, the VMM's views, the guest's report).
pub mod leaf_d1_eax {
    /// XSAVEOPT is available.
    pub const XSAVEOPT: u32 = 1 << 0;
    /// XSAVEC and the compacted format are available.
    pub const XSAVEC: u32 = 1 << 1;
    /// XGETBV with ECX = 1 (XINUSE) is available.
    pub const XGETBV1: u32 = 1 << 2;
    /// XSAVES/XRSTORS and IA32_XSS are available.
    pub const XSAVES: u32 = 1 << 3;
    /// Extended feature disable (IA32_XFD) is available.
    pub const XFD: u32 = 1 << 4;
}

/// Flags of CPUID.(EAX=0DH,ECX=i):ECX for a state component `i >= 2`.
pub mod leaf_d_ecx {
    /// The component is supervisor state (IA32_XSS), not user state (XCR0).
    pub const SUPERVISOR: u32 = 1 << 0;
    /// In the compacted format the component starts on a 64-byte boundary.
    pub const ALIGN64: u32 = 1 << 1;
    /// Extended feature disable (IA32_XFD) supports the component.
    pub const XFD: u32 = 1 << 2;
}

/// Feature bits of CPUID.(EAX=01H):ECX that decide whether leaf 0xD and the
/// XSAVE instructions can be used at all.
pub mod leaf_1_ecx {
    /// The CPU has XSAVE/XRSTOR, XSETBV/XGETBV and XCR0 (leaf 0xD exists).
    pub const XSAVE: u32 = 1 << 26;
    /// The OS set CR4.OSXSAVE: XGETBV and the XSAVE family do not #UD.
    pub const OSXSAVE: u32 = 1 << 27;
    /// Running under a hypervisor.
    pub const HYPERVISOR: u32 = 1 << 31;
}

/// The supported XCR0 (0.EDX:EAX) and IA32_XSS (1.EDX:ECX) bits as
/// enumerated, before any check.
fn supported_masks(raw: &[CpuidRegs; 64]) -> (XfeatureMask, XfeatureMask) {
    let join = |lo: u32, hi: u32| XfeatureMask::from_bits(u64::from(lo) | (u64::from(hi) << 32));
    (join(raw[0].eax, raw[0].edx), join(raw[1].ecx, raw[1].edx))
}

/// The validated contents of CPUID leaf 0xD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XsaveInfo {
    /// Raw registers of every subleaf 0..64 (zero where not read).
    raw: [CpuidRegs; 64],
    xcr0: XfeatureMask,
    xss: XfeatureMask,
    /// Supported user components >= 2 in ascending standard offset (the
    /// conversions walk them in memory order to zero the gaps).
    std_order: [u8; 64],
    std_count: u8,
    /// End of the highest user component in the standard format, and the
    /// compacted size, both for all of the supported XCR0: what converting
    /// a whole image needs, computed once here instead of walking the
    /// components on every call (see `convert::standard_end`).
    xcr0_standard_end: u32,
    xcr0_compacted_end: u32,
}

impl XsaveInfo {
    /// Builds and validates from the raw subleaves of CPUID leaf 0xD.
    ///
    /// `read(i)` returns the registers of subleaf `i`. It is called for
    /// subleaves 0 and 1 and for every bit `i >= 2` set in the supported XCR0
    /// (0.EDX:EAX) or IA32_XSS (1.EDX:ECX) mask, in ascending order.
    ///
    /// # Errors
    /// The first rule the subleaves break, checked in this order:
    /// - [`InfoError::LegacyNotSupported`]: the supported XCR0 lacks x87, or
    ///   has a bit above SSE without SSE;
    /// - [`InfoError::ReservedBit`]: bit 63 of the supported XCR0 or IA32_XSS,
    ///   or bit 0 or 1 (x87, SSE) of IA32_XSS, is set;
    /// - [`InfoError::UserAndSupervisor`]: a bit is in both masks;
    /// - [`InfoError::MaxSizeTooSmall`]: 0.ECX, the maximum standard size,
    ///   is below 576 (legacy region plus header);
    ///
    /// then for each supported component `i >= 2`, ascending:
    /// - [`InfoError::MissingSubleaf`]: subleaf `i` is all zero or its EAX
    ///   (size) is 0;
    /// - [`InfoError::SupervisorFlagMismatch`]: ECX bit 0 disagrees with
    ///   whether bit `i` came from IA32_XSS;
    /// - [`InfoError::PastAddressSpace`]: a user component's EBX + EAX
    ///   (offset + size) overflows 32 bits;
    /// - [`InfoError::InsideLegacyRegion`]: a user component's offset is
    ///   below 576;
    /// - [`InfoError::PastMaxSize`]: a user component ends past 0.ECX;
    ///
    /// then over all of them:
    /// - [`InfoError::Overlap`]: two user components' standard ranges
    ///   overlap;
    /// - [`InfoError::CompactedTooLarge`]: the compacted size of every
    ///   supported component exceeds 4 GiB.
    ///
    /// # Examples
    /// ```
    /// use xstate::{CpuidRegs, Xfeature, XsaveInfo};
    /// // A CPU with x87, SSE and AVX; `read` would run CPUID(0xD, subleaf).
    /// let info = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
    ///     0 => CpuidRegs::new(0x7, 832, 832, 0),
    ///     1 => CpuidRegs::new(0x1, 0, 0, 0),
    ///     2 => CpuidRegs::new(256, 576, 0, 0),
    ///     _ => CpuidRegs::default(),
    /// })?;
    /// assert_eq!(info.supported_xcr0().bits(), 0x7);
    /// assert_eq!(info.component(Xfeature::Avx).map(|c| c.standard_offset), Some(576));
    /// assert!(info.has_xsaveopt() && !info.has_xsavec());
    /// # Ok::<(), xstate::InfoError>(())
    /// ```
    pub fn from_leaf_0xd(mut read: impl FnMut(u32) -> CpuidRegs) -> Result<Self, InfoError> {
        let mut raw = [CpuidRegs::default(); 64];
        raw[0] = read(0);
        raw[1] = read(1);
        for i in Self::component_subleaves(raw[0], raw[1]) {
            raw[i as usize] = read(i);
        }
        Self::from_raw(raw)
    }

    /// The subleaves above 1 that [`XsaveInfo::from_leaf_0xd`] reads, given
    /// subleaves 0 and 1: one per supported XCR0 or IA32_XSS component.
    /// A caller that must fetch leaves ahead (the guest, where each CPUID
    /// is an emulated system call) asks for exactly these.
    pub fn component_subleaves(sub0: CpuidRegs, sub1: CpuidRegs) -> impl Iterator<Item = u32> {
        let mut raw = [CpuidRegs::default(); 64];
        (raw[0], raw[1]) = (sub0, sub1);
        let (xcr0, xss) = supported_masks(&raw);
        (xcr0 | xss).iter_indices().filter(|&i| i >= 2)
    }

    /// Builds and validates from an array of every subleaf's registers
    /// (subleaves that are not supported components are ignored).
    ///
    /// # Errors
    /// The first broken rule, as listed for [`XsaveInfo::from_leaf_0xd`]:
    /// [`InfoError::LegacyNotSupported`], [`InfoError::ReservedBit`],
    /// [`InfoError::UserAndSupervisor`], [`InfoError::MaxSizeTooSmall`],
    /// [`InfoError::MissingSubleaf`], [`InfoError::SupervisorFlagMismatch`],
    /// [`InfoError::PastAddressSpace`], [`InfoError::InsideLegacyRegion`],
    /// [`InfoError::PastMaxSize`], [`InfoError::Overlap`],
    /// [`InfoError::CompactedTooLarge`].
    ///
    /// # Examples
    /// ```
    /// use xstate::{CpuidRegs, InfoError, XsaveInfo};
    /// // x87, SSE and AVX, as a Zen 3 KVM guest sees leaf 0xD.
    /// let mut raw = [CpuidRegs::default(); 64];
    /// raw[0] = CpuidRegs::new(0x7, 832, 832, 0);
    /// raw[1] = CpuidRegs::new(0xf, 0, 0, 0);
    /// raw[2] = CpuidRegs::new(256, 576, 0, 0);
    /// assert_eq!(XsaveInfo::from_raw(raw)?.max_standard_size(), 832);
    /// // A hypervisor that puts AVX over the XMM registers is refused.
    /// raw[2].ebx = 160;
    /// assert_eq!(
    ///     XsaveInfo::from_raw(raw),
    ///     Err(InfoError::InsideLegacyRegion { index: 2, offset: 160 })
    /// );
    /// # Ok::<(), InfoError>(())
    /// ```
    pub fn from_raw(raw: [CpuidRegs; 64]) -> Result<Self, InfoError> {
        let (xcr0, xss) = supported_masks(&raw);
        let max_standard = check_masks(&raw, xcr0, xss)?;
        check_subleaves(&raw, xcr0, xss, max_standard)?;
        let mut std_order = [0u8; 64];
        let mut std_count = 0usize;
        for i in xcr0.iter_indices().filter(|&i| i >= 2) {
            std_order[std_count] = i as u8;
            std_count += 1;
        }
        std_order[..std_count].sort_unstable_by_key(|&i| (raw[i as usize].ebx, i));
        let mut info = Self {
            raw,
            xcr0,
            xss,
            std_order,
            std_count: std_count as u8,
            xcr0_standard_end: 0,
            xcr0_compacted_end: 0,
        };
        // Keep only what was validated; stale data of unsupported subleaves
        // would otherwise make equal CPUs compare unequal.
        for i in 2..64u32 {
            if !(xcr0 | xss).contains_index(i) {
                info.raw[i as usize] = CpuidRegs::default();
            }
        }
        // By the conversions' own layout rules, on the validated subleaves;
        // both fit in u32 (the standard end is bounded by 0.ECX, every
        // compacted size by the check above). XCR0 is compactable: bit 63
        // was rejected.
        info.xcr0_standard_end = standard_end_walk(&info, xcr0) as u32;
        info.xcr0_compacted_end = walk_compacted(&info, xcr0, |_, _, _| {}) as u32;
        Ok(info)
    }

    /// End of the highest user component of the supported XCR0 in the
    /// standard format (at least 576).
    #[inline]
    pub(crate) fn xcr0_standard_end(&self) -> usize {
        self.xcr0_standard_end as usize
    }

    /// Compacted size of the supported XCR0's components.
    #[inline]
    pub(crate) fn xcr0_compacted_end(&self) -> usize {
        self.xcr0_compacted_end as usize
    }

    /// Supported user components >= 2, ascending by standard offset.
    pub(crate) fn standard_order(&self) -> &[u8] {
        &self.std_order[..self.std_count as usize]
    }

    /// Size and standard offset of component `i` (raw, unchecked).
    #[inline]
    pub(crate) fn raw_size_offset(&self, i: u32) -> (u32, u32) {
        let r = &self.raw[i as usize & 63];
        (r.eax, r.ebx)
    }

    /// Whether component `i` is 64-byte aligned in the compacted format.
    #[inline]
    pub(crate) fn raw_align64(&self, i: u32) -> bool {
        self.raw[i as usize & 63].ecx & leaf_d_ecx::ALIGN64 != 0
    }

    /// Supported XCR0 bits (CPUID.(0DH,0).EDX:EAX).
    pub fn supported_xcr0(&self) -> XfeatureMask {
        self.xcr0
    }

    /// Supported IA32_XSS bits (CPUID.(0DH,1).EDX:ECX).
    pub fn supported_xss(&self) -> XfeatureMask {
        self.xss
    }

    /// Every supported component, user and supervisor.
    pub fn supported_all(&self) -> XfeatureMask {
        self.xcr0 | self.xss
    }

    /// The component's placement, or `None` if the CPU does not support it.
    /// x87 and SSE report their fixed legacy places (see the module docs).
    pub fn component(&self, f: Xfeature) -> Option<ComponentInfo> {
        self.component_by_index(f.index())
    }

    /// Like [`XsaveInfo::component`], by bit index (also for components this
    /// crate has no [`Xfeature`] for).
    pub fn component_by_index(&self, i: u32) -> Option<ComponentInfo> {
        if i >= 64 || !self.supported_all().contains_index(i) {
            return None;
        }
        match i {
            0 => Some(X87_INFO),
            1 => Some(SSE_INFO),
            _ => {
                let r = self.raw[i as usize];
                let supervisor = r.ecx & leaf_d_ecx::SUPERVISOR != 0;
                Some(ComponentInfo {
                    size: r.eax,
                    standard_offset: if supervisor { 0 } else { r.ebx },
                    align64: r.ecx & leaf_d_ecx::ALIGN64 != 0,
                    xfd: r.ecx & leaf_d_ecx::XFD != 0,
                    supervisor,
                })
            }
        }
    }

    /// XSAVEOPT is supported.
    pub fn has_xsaveopt(&self) -> bool {
        self.raw[1].eax & leaf_d1_eax::XSAVEOPT != 0
    }

    /// XSAVEC and the compacted form of XRSTOR are supported.
    pub fn has_xsavec(&self) -> bool {
        self.raw[1].eax & leaf_d1_eax::XSAVEC != 0
    }

    /// XGETBV with ECX = 1 (the XINUSE bitmap) is supported.
    pub fn has_xgetbv1(&self) -> bool {
        self.raw[1].eax & leaf_d1_eax::XGETBV1 != 0
    }

    /// XSAVES/XRSTORS and IA32_XSS are supported.
    pub fn has_xsaves(&self) -> bool {
        self.raw[1].eax & leaf_d1_eax::XSAVES != 0
    }

    /// Extended feature disable (IA32_XFD) is supported.
    pub fn has_xfd(&self) -> bool {
        self.raw[1].eax & leaf_d1_eax::XFD != 0
    }

    /// Components that XFD can disable.
    pub fn xfd_capable(&self) -> XfeatureMask {
        let mut m = XfeatureMask::EMPTY;
        for i in self.supported_all().iter_indices().filter(|&i| i >= 2) {
            if self.raw[i as usize].ecx & leaf_d_ecx::XFD != 0 {
                m |= XfeatureMask::from_bits(1 << i);
            }
        }
        m
    }

    /// Raw registers of subleaf `i` (zero for subleaves that are neither 0, 1
    /// nor a supported component, or `i >= 64`).
    pub fn raw_subleaf(&self, i: u32) -> CpuidRegs {
        self.raw.get(i as usize).copied().unwrap_or_default()
    }

    /// The subleaves that carry information: 0, 1 and each supported
    /// component, ascending, with their raw registers.
    pub fn subleaves(&self) -> impl Iterator<Item = (u32, CpuidRegs)> + '_ {
        let all = self.supported_all();
        (0..64u32)
            .filter(move |&i| i < 2 || all.contains_index(i))
            .map(move |i| (i, self.raw[i as usize]))
    }

    /// Maximum standard-format size for all supported user state
    /// (CPUID.(0DH,0).ECX).
    pub fn max_standard_size(&self) -> u32 {
        self.raw[0].ecx
    }

    /// The running CPU's leaf 0xD, read with CPUID (feature `native`).
    ///
    /// # Errors
    /// - [`InfoError::NoXsave`]: the highest basic leaf (CPUID.0:EAX) is
    ///   below 0xD, or CPUID.1:ECX.XSAVE (bit 26) is clear;
    /// - otherwise any error of [`XsaveInfo::from_leaf_0xd`]: a CPU's own
    ///   leaf 0xD is consistent, but a hypervisor's need not be.
    ///
    /// # Examples
    /// ```
    /// use xstate::{Format, Xfeature, XsaveInfo};
    /// let info = XsaveInfo::host()?;
    /// let xcr0 = info.supported_xcr0();
    /// assert!(xcr0.contains(Xfeature::X87));
    /// assert!(xcr0.validate_xcr0(xcr0).is_ok());
    /// // Everything the CPU supports fits in the size 0xD.0 ECX reports.
    /// let standard = info.layout(xcr0, Format::Standard)?;
    /// assert!(standard.total_size() <= info.max_standard_size());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(all(feature = "native", target_arch = "x86_64"))]
    pub fn host() -> Result<Self, InfoError> {
        let max_leaf = cpuid(0, 0).eax;
        let has_xsave = cpuid(1, 0).ecx & leaf_1_ecx::XSAVE != 0;
        if max_leaf < 0xd || !has_xsave {
            return Err(InfoError::NoXsave);
        }
        Self::from_leaf_0xd(|i| cpuid(0xd, i))
    }
}

/// The checks of [`XsaveInfo::from_raw`] on the masks alone: x87 (and SSE
/// under anything wider) offered, no reserved bit, no component both user
/// and supervisor, and a maximum standard size that holds the header.
/// Returns that size (leaf 0xD.0 ECX).
fn check_masks(
    raw: &[CpuidRegs; 64],
    xcr0: XfeatureMask,
    xss: XfeatureMask,
) -> Result<u32, InfoError> {
    // x87 is mandatory; SSE only once anything above it is offered.
    let extended = xcr0.bits() & !XfeatureMask::LEGACY.bits() != 0;
    if !xcr0.contains(Xfeature::X87) || (extended && !xcr0.contains(Xfeature::Sse)) {
        return Err(InfoError::LegacyNotSupported { xcr0 });
    }
    if xcr0.contains_index(63) {
        return Err(InfoError::ReservedBit { xcr0, xss });
    }
    if xss.contains_index(63) || xss.contains_index(0) || xss.contains_index(1) {
        return Err(InfoError::ReservedBit { xcr0, xss });
    }
    let both = xcr0 & xss;
    if !both.is_empty() {
        return Err(InfoError::UserAndSupervisor(both));
    }
    let max_standard = raw[0].ecx;
    if max_standard < HEADER_END {
        return Err(InfoError::MaxSizeTooSmall(max_standard));
    }
    Ok(max_standard)
}

/// The checks of [`XsaveInfo::from_raw`] on the subleaves of the offered
/// components: each present with the right supervisor flag, user ones
/// inside the standard area and not overlapping, and the compacted size
/// within 32 bits.
fn check_subleaves(
    raw: &[CpuidRegs; 64],
    xcr0: XfeatureMask,
    xss: XfeatureMask,
    max_standard: u32,
) -> Result<(), InfoError> {
    // Per-component checks.
    for i in (xcr0 | xss).iter_indices().filter(|&i| i >= 2) {
        let r = raw[i as usize];
        if r.is_zero() || r.eax == 0 {
            return Err(InfoError::MissingSubleaf(i));
        }
        let supervisor = xss.contains_index(i);
        if (r.ecx & leaf_d_ecx::SUPERVISOR != 0) != supervisor {
            return Err(InfoError::SupervisorFlagMismatch(i));
        }
        if supervisor {
            continue;
        }
        let end = r
            .ebx
            .checked_add(r.eax)
            .ok_or(InfoError::PastAddressSpace {
                index: i,
                offset: r.ebx,
                size: r.eax,
            })?;
        if r.ebx < HEADER_END {
            return Err(InfoError::InsideLegacyRegion {
                index: i,
                offset: r.ebx,
            });
        }
        if end > max_standard {
            return Err(InfoError::PastMaxSize {
                index: i,
                end,
                max: max_standard,
            });
        }
    }
    // Overlaps between user components (quadratic over <= 62 entries).
    for i in xcr0.iter_indices().filter(|&i| i >= 2) {
        for j in xcr0.iter_indices().filter(|&j| j > i) {
            let (a, b) = (raw[i as usize], raw[j as usize]);
            if a.ebx < b.ebx + b.eax && b.ebx < a.ebx + a.eax {
                return Err(InfoError::Overlap { a: i, b: j });
            }
        }
    }
    // Compacted sizes must fit in 32 bits too (sum of all sizes + padding).
    let mut total: u64 = u64::from(HEADER_END);
    for i in (xcr0 | xss).iter_indices().filter(|&i| i >= 2) {
        total = total.div_ceil(64) * 64 + u64::from(raw[i as usize].eax);
    }
    if total > u64::from(u32::MAX) {
        return Err(InfoError::CompactedTooLarge(total));
    }
    Ok(())
}

/// End of the highest standard-format component of `mask` (user components
/// only; at least 576), by walking them: what [`XsaveInfo`] precomputes for
/// its XCR0, and what the conversions use for other masks.
pub(crate) fn standard_end_walk(info: &XsaveInfo, mask: XfeatureMask) -> usize {
    let mut end = XSAVE_MIN_SIZE;
    for i in mask.iter_indices().filter(|&i| i >= 2) {
        let (size, off) = info.raw_size_offset(i);
        end = end.max(off as usize + size as usize);
    }
    end
}

/// The compacted layout rule, once: each component >= 2 of `mask` in
/// ascending order, placed after the previous one (64-byte aligned when
/// CPUID 0xD.i ECX[1] says so), told to `place(index, offset, size)`.
/// Returns the compacted size. `mask` must be compactable on this CPU (no
/// bit 63, every component enumerated: the conversions check it first).
#[inline(always)]
pub(crate) fn walk_compacted(
    info: &XsaveInfo,
    mask: XfeatureMask,
    mut place: impl FnMut(u32, usize, usize),
) -> usize {
    let mut next = XSAVE_MIN_SIZE;
    for i in mask.iter_indices().filter(|&i| i >= 2) {
        if info.raw_align64(i) {
            next = next.next_multiple_of(64);
        }
        let size = info.raw_size_offset(i).0 as usize;
        place(i, next, size);
        next += size;
    }
    next
}
