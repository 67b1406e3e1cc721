//! Dynamic xfeatures: state components a process (or a VMM, for its
//! guests) must ask the OS for before it may use them, and what they cost
//! in buffer space.
//!
//! AMX tile data (XTILEDATA, bit 18) is 8 KiB per thread. Linux therefore
//! leaves it out of every thread's default xsave buffer and arms
//! extended feature disable (IA32_XFD) for it: the first tile instruction
//! of a thread that has not asked traps. A process asks with
//! `arch_prctl(ARCH_REQ_XCOMP_PERM, 18)`; a VMM asks for its guests with
//! `ARCH_REQ_XCOMP_GUEST_PERM` before it creates vCPUs, and until it has,
//! KVM leaves XTILECFG and XTILEDATA out of `KVM_GET_SUPPORTED_CPUID` and
//! sizes `KVM_CAP_XSAVE2` without them.
//!
//! Which components are dynamic is a property of the CPU, not a list: a
//! user component is dynamic when CPUID.(0DH,i).ECX bit 2 says XFD can
//! disable it ([`dynamic_components`]). On every CPU shipped so far that is
//! exactly XTILEDATA ([`XTILEDATA`]). The permission is asked for by the
//! highest component number wanted ([`permission_request`]).
//!
//! Everything here is a pure function over [`XsaveInfo`] and masks, so it
//! is checked against recorded CPUs (Sapphire Rapids, Granite Rapids) on any
//! host.

use crate::compat::largest_valid_xcr0;
use crate::feature::Xfeature;
use crate::info::XsaveInfo;
use crate::layout::LayoutError;
use crate::mask::XfeatureMask;

/// XTILEDATA, the one component Linux treats as dynamic (its
/// `XFEATURE_MASK_USER_DYNAMIC`), as a mask.
pub const XTILEDATA: XfeatureMask = XfeatureMask::from_bits(Xfeature::XtileData.bit());

/// The user components of `info` that XFD can disable (CPUID.(0DH,i).ECX
/// bit 2): the ones an OS may hand out only on request. Empty on CPUs
/// without XFD (CPUID.(0DH,1).EAX bit 4).
pub fn dynamic_components(info: &XsaveInfo) -> XfeatureMask {
    if !info.has_xfd() {
        return XfeatureMask::EMPTY;
    }
    info.xfd_capable() & info.supported_xcr0()
}

/// The components of `xcr0` that need a permission before a guest (or
/// thread) may use them: XTILEDATA, and any other component the CPU marks
/// XFD-capable. Decided from the mask alone where no CPU description is at
/// hand (a request for a host that lacks the feature still needs, and
/// fails, the permission).
pub fn needs_permission(xcr0: XfeatureMask, info: Option<&XsaveInfo>) -> XfeatureMask {
    let dynamic = info.map_or(XfeatureMask::EMPTY, dynamic_components) | XTILEDATA;
    xcr0 & dynamic
}

/// The argument of `ARCH_REQ_XCOMP_[GUEST_]PERM` for `wanted`: the highest
/// component number (the kernel grants that component and checks every
/// lower one it knows), or `None` when nothing is wanted.
pub fn permission_request(wanted: XfeatureMask) -> Option<u32> {
    wanted.iter_indices().last()
}

/// `xcr0` without its dynamic components, and without what is invalid
/// without them (XTILECFG without XTILEDATA): the XCR0 a guest gets when
/// the permission is not granted, as KVM filters its supported table.
pub fn without_dynamic(xcr0: XfeatureMask, dynamic: XfeatureMask) -> XfeatureMask {
    largest_valid_xcr0(xcr0 - dynamic) & xcr0
}

/// Buffer sizes for one XCR0 with and without its dynamic components.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DynamicSizes {
    /// The XCR0 measured.
    pub xcr0: XfeatureMask,
    /// Its dynamic components.
    pub dynamic: XfeatureMask,
    /// [`without_dynamic`] of `xcr0`.
    pub static_xcr0: XfeatureMask,
    /// Standard-format size of `xcr0` (what `KVM_CAP_XSAVE2` reports once
    /// the permission is granted).
    pub standard: u32,
    /// Standard-format size of `static_xcr0` (`KVM_CAP_XSAVE2` before it).
    pub standard_static: u32,
    /// Compacted-format size of `xcr0` with `xss`.
    pub compacted: u32,
    /// Compacted-format size of `static_xcr0` with `xss`.
    pub compacted_static: u32,
}

impl DynamicSizes {
    /// Sizes of `xcr0` (user state) and `xss` (supervisor state, compacted
    /// only) laid out by `info`.
    ///
    /// # Errors
    /// - [`LayoutError::Bit63`]: `xcr0` or `xss` has bit 63;
    /// - [`LayoutError::Unsupported`]: `xcr0` or `xss` has components `info`
    ///   does not enumerate;
    /// - [`LayoutError::SupervisorInStandard`]: `xcr0` has supervisor
    ///   components.
    ///
    /// # Examples
    /// ```
    /// use xstate::dynamic::{dynamic_components, permission_request, DynamicSizes, XTILEDATA};
    /// use xstate::{CpuidRegs, XfeatureMask, XsaveInfo};
    /// // Sapphire Rapids user state: AVX-512, PKRU and AMX; XTILEDATA is
    /// // XFD-capable (0xD.18 ECX bit 2), both tile components 64-byte aligned.
    /// let spr = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
    ///     0 => CpuidRegs::new(0x602e7, 11008, 11008, 0),
    ///     1 => CpuidRegs::new(0x1f, 0, 0, 0),
    ///     2 => CpuidRegs::new(256, 576, 0, 0),
    ///     5 => CpuidRegs::new(64, 1088, 0, 0),
    ///     6 => CpuidRegs::new(512, 1152, 0, 0),
    ///     7 => CpuidRegs::new(1024, 1664, 0, 0),
    ///     9 => CpuidRegs::new(8, 2688, 0, 0),
    ///     17 => CpuidRegs::new(64, 2752, 0x2, 0),
    ///     18 => CpuidRegs::new(8192, 2816, 0x6, 0),
    ///     _ => CpuidRegs::default(),
    /// })
    /// .unwrap();
    /// assert_eq!(dynamic_components(&spr), XTILEDATA);
    /// // ARCH_REQ_XCOMP_GUEST_PERM is asked for component 18.
    /// assert_eq!(permission_request(XTILEDATA), Some(18));
    /// let s = DynamicSizes::of(&spr, spr.supported_xcr0(), XfeatureMask::EMPTY)?;
    /// // Without the permission KVM drops XTILEDATA and, with it, XTILECFG.
    /// assert_eq!(s.static_xcr0.bits(), 0x2e7);
    /// // KVM_CAP_XSAVE2: 11008 bytes with AMX, 2696 (PKRU's end) without.
    /// assert_eq!((s.standard, s.standard_static), (11008, 2696));
    /// assert_eq!(s.standard_extra(), 8312);
    /// assert_eq!((s.compacted, s.compacted_static), (10752, 2440));
    /// # Ok::<(), xstate::LayoutError>(())
    /// ```
    pub fn of(
        info: &XsaveInfo,
        xcr0: XfeatureMask,
        xss: XfeatureMask,
    ) -> Result<Self, LayoutError> {
        let dynamic = xcr0 & dynamic_components(info);
        let static_xcr0 = without_dynamic(xcr0, dynamic);
        Ok(Self {
            xcr0,
            dynamic,
            static_xcr0,
            standard: info.standard_size(xcr0)?,
            standard_static: info.standard_size(static_xcr0)?,
            compacted: info.compacted_size(xcr0 | xss)?,
            compacted_static: info.compacted_size(static_xcr0 | xss)?,
        })
    }

    /// Bytes the dynamic components add to a standard-format buffer.
    pub fn standard_extra(&self) -> u32 {
        self.standard - self.standard_static
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::info::CpuidRegs;

    /// Leaf 0xD of a recorded CPU (`tests/data/*.json`, inside the crate
    /// so that its packaged copy tests itself), read with serde_json alone
    /// so the test needs no crate feature.
    fn profile_info(json: &str) -> XsaveInfo {
        let v: serde_json::Value = serde_json::from_str(json).expect("profile JSON");
        let hex = |e: &serde_json::Value, r: &str| {
            let s: &str = e[r].as_str().expect("hex string");
            u32::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex")
        };
        let mut raw = [CpuidRegs::default(); 64];
        for e in v["leaf_0xd"].as_array().expect("leaf_0xd") {
            let i = e["subleaf"].as_u64().expect("subleaf") as usize;
            raw[i] = CpuidRegs::new(hex(e, "eax"), hex(e, "ebx"), hex(e, "ecx"), hex(e, "edx"));
        }
        XsaveInfo::from_raw(raw).expect("valid leaf 0xD")
    }

    fn spr() -> XsaveInfo {
        profile_info(include_str!("../tests/data/intel-sapphire-rapids.json"))
    }

    fn gnr() -> XsaveInfo {
        profile_info(include_str!("../tests/data/intel-granite-rapids.json"))
    }

    fn zen4() -> XsaveInfo {
        profile_info(include_str!("../tests/data/amd-zen4-genoa.json"))
    }

    #[test]
    fn amx_cpus_have_exactly_xtiledata_dynamic() {
        for (name, info) in [("spr", spr()), ("gnr", gnr())] {
            assert_eq!(info.supported_xcr0().bits(), 0x602e7, "{name}");
            assert!(info.has_xfd(), "{name}");
            // 0xD.18 ECX = 0x6 (aligned, XFD); 0xD.17 ECX = 0x2 (aligned only).
            assert_eq!(dynamic_components(&info), XTILEDATA, "{name}");
            assert!(!info.component(Xfeature::XtileCfg).unwrap().xfd, "{name}");
        }
        // Zen 4 has no XFD and no AMX: nothing is dynamic.
        assert_eq!(dynamic_components(&zen4()), XfeatureMask::EMPTY);
    }

    #[test]
    fn sizes_from_the_recorded_dumps() {
        for (name, info) in [("spr", spr()), ("gnr", gnr())] {
            let xcr0 = XfeatureMask::from_bits(0x602e7);
            // The dump's own answer: 0xD.0 EBX = ECX = 0x2b00 with XCR0 0x602e7.
            assert_eq!(info.max_standard_size(), 0x2b00, "{name}");
            // IA32_XSS in force when 0xD.1 EBX (0x2a80) was recorded: PT (bit 8).
            let xss = XfeatureMask::from_bits(1 << 8);
            let s = DynamicSizes::of(&info, xcr0, xss).unwrap();
            assert_eq!(
                s,
                DynamicSizes {
                    xcr0,
                    dynamic: XTILEDATA,
                    // XTILECFG goes too: it is invalid without XTILEDATA.
                    static_xcr0: XfeatureMask::from_bits(0x2e7),
                    standard: 0x2b00,
                    // PKRU ends at 0xa80 + 8.
                    standard_static: 0xa88,
                    // 0xD.1 EBX as recorded: 2568, XTILECFG 64-aligned at 2624
                    // (+64), XTILEDATA at 2688 (+8192).
                    compacted: 0x2a80,
                    // 576 + AVX 256 + opmask 64 + ZMM_Hi256 512 + Hi16_ZMM 1024
                    // + PT 128 (bit 8, before PKRU) + PKRU 8.
                    compacted_static: 2568,
                },
                "{name}"
            );
            assert_eq!(s.standard_extra(), 0x2b00 - 0xa88, "{name}");
            // Tile data alone is 8 KiB at 0xb00: the 4 KiB kvm_xsave cannot hold it.
            let tiles = info.component(Xfeature::XtileData).unwrap();
            assert_eq!((tiles.size, tiles.standard_offset), (0x2000, 0xb00));
        }
    }

    #[test]
    fn permission_is_asked_for_the_highest_dynamic_component() {
        let info = spr();
        let amx = XfeatureMask::from_bits(0x60003);
        assert_eq!(needs_permission(amx, Some(&info)), XTILEDATA);
        assert_eq!(needs_permission(amx, None), XTILEDATA);
        assert_eq!(
            needs_permission(XfeatureMask::from_bits(0x2e7), Some(&info)),
            XfeatureMask::EMPTY
        );
        assert_eq!(permission_request(XTILEDATA), Some(18));
        assert_eq!(permission_request(XfeatureMask::EMPTY), None);
        // A host without AMX: the request still names the feature (and fails there).
        assert_eq!(needs_permission(amx, Some(&zen4())), XTILEDATA);
        assert_eq!(
            without_dynamic(amx, XTILEDATA),
            XfeatureMask::LEGACY,
            "XTILECFG without XTILEDATA is not a valid XCR0"
        );
    }
}
