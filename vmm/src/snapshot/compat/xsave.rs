//! A vCPU's extended state: XCR0 against the architecture, the policy and
//! the vCPU's CPUID and CR4; the stored image against its layout; what
//! this host can hold (components, IA32_XSS, sizes); the image re-laid out
//! for this host's standard offsets and checked as `KVM_SET_XSAVE` will.

use xstate::buffer::XSAVE_MIN_SIZE;
use xstate::info::leaf_1_ecx;
use xstate::{restorable_on, Xfeature, XfeatureMask, XsaveBuf, XsaveInfo};

use super::fault::{incompatible, invalid, Fault};
use super::host::HostFacts;
use super::image::{check_compacted, relayout};
use crate::snapshot::state::VcpuState;
use crate::vstate::vcpu::MSR_IA32_XSS;

/// CR4.OSXSAVE: XSETBV, XGETBV and the XSAVE family are enabled.
pub const CR4_OSXSAVE: u64 = 1 << 18;

/// What the xstate checks established for one vCPU.
#[derive(Clone, Debug)]
pub struct VcpuChecked {
    /// The vCPU's number.
    pub id: u32,
    /// Its XCR0 as saved.
    pub xcr0: XfeatureMask,
    /// The components in use in its saved image.
    pub xstate_bv: XfeatureMask,
    /// Its xsave image in this host's standard format for the guest's
    /// policy, ready for its xstate manager.
    pub standard: XsaveBuf,
    /// The source's standard offsets differed and the image was re-laid out.
    pub relaid: bool,
}

/// XCR0 as KVM_GET_XCRS gave it, checked against the architectural rules.
fn checked_xcr0(v: &VcpuState) -> Result<XfeatureMask, Fault> {
    let field = format!("vcpu{}.xcrs", v.id);
    let xcr0 = XfeatureMask::from_bits(
        v.xcr0()
            .ok_or_else(|| invalid(field.as_str(), "holds no XCR0"))?,
    );
    xcr0.validate_xcr0(XfeatureMask::from_bits(u64::MAX))
        .map_err(|e| invalid(format!("{field} XCR0"), format!("{xcr0:#x}: {e}")))?;
    Ok(xcr0)
}

/// The saved CPUID table, CR4 and XCR0 must tell one story: KVM checks CR4
/// against the CPUID it holds, and the guest read its XCR0 limits from the
/// table.
fn check_cpuid_vs_state(v: &VcpuState, xcr0: XfeatureMask) -> Result<(), Fault> {
    let id = v.id;
    let osxsave = v.sregs.cr4 & CR4_OSXSAVE != 0;
    if !osxsave && xcr0 != XfeatureMask::from_bits(1) {
        return Err(invalid(
            format!("vcpu{id}.sregs.cr4"),
            format!(
                "CR4 {:#x} has OSXSAVE (bit 18) clear, yet XCR0 is {xcr0:#x}: without OSXSAVE the guest cannot have set XCR0 beyond x87",
                v.sregs.cr4
            ),
        ));
    }
    let leaf = |f: u32, i: u32| v.cpuid.iter().find(|e| e.function == f && e.index == i);
    let ecx1 = leaf(1, 0).map(|e| e.ecx).unwrap_or(0);
    if osxsave && ecx1 & leaf_1_ecx::XSAVE == 0 {
        return Err(invalid(
            format!("vcpu{id}.cpuid leaf 0x1 ECX"),
            format!(
                "{ecx1:#010x} has XSAVE (bit 26) clear, yet CR4 {:#x} has OSXSAVE set",
                v.sregs.cr4
            ),
        ));
    }
    if !osxsave && ecx1 & leaf_1_ecx::OSXSAVE != 0 {
        return Err(invalid(
            format!("vcpu{id}.cpuid leaf 0x1 ECX"),
            format!(
                "{ecx1:#010x} has OSXSAVE (bit 27) set, yet CR4 {:#x} has OSXSAVE clear",
                v.sregs.cr4
            ),
        ));
    }
    if xcr0.bits() != 1 || leaf(0xd, 0).is_some() {
        let offered = leaf(0xd, 0)
            .map(|e| XfeatureMask::from_bits(u64::from(e.eax) | (u64::from(e.edx) << 32)))
            .unwrap_or(XfeatureMask::EMPTY);
        let beyond = xcr0 - offered;
        if !beyond.is_empty() {
            return Err(invalid(
                format!("vcpu{id}.cpuid leaf 0xd.0 EDX:EAX"),
                format!(
                    "{offered:#x} does not offer {} that XCR0 {xcr0:#x} enables",
                    beyond.describe()
                ),
            ));
        }
    }
    Ok(())
}

/// Every rule of one vCPU's extended state, and whether this host can
/// hold it.
pub(super) fn check_vcpu(
    v: &VcpuState,
    source: &XsaveInfo,
    policy: XfeatureMask,
    host: &HostFacts,
) -> Result<VcpuChecked, Fault> {
    let id = v.id;
    let xname = format!("vcpu{id}.xstate");
    let xcr0 = checked_xcr0(v)?;
    let beyond = xcr0 - policy;
    if !beyond.is_empty() {
        return Err(invalid(
            "meta.policy_xcr0",
            format!(
                "{policy:#x} is narrower than vcpu{id}'s XCR0 {xcr0:#x} (lacks {}): the guest cannot have enabled what its CPUID did not offer",
                beyond.describe()
            ),
        ));
    }
    check_cpuid_vs_state(v, xcr0)?;
    let image = &v.xstate;
    if image.len() < XSAVE_MIN_SIZE {
        return Err(invalid(
            xname.as_str(),
            format!("{} bytes, shorter than an xsave header", image.len()),
        ));
    }
    let xstate_bv = image.xstate_bv_mask();
    let xss = XfeatureMask::from_bits(v.msr(MSR_IA32_XSS).unwrap_or(0));
    check_host_support(id, xcr0, xss, xstate_bv, policy, &host.info)?;
    // The image must be what the saver writes: compacted, in-use only,
    // consistent with the saved XCR0 and the source's layout. (The VMM
    // compacts in software, so the source CPU's XSAVEC support is moot.)
    check_compacted(image, source, xcr0).map_err(|e| invalid(xname.as_str(), e))?;
    check_component_sizes(id, source, &host.info, xstate_bv)?;
    // The guest's policy covers its XCR0 (checked above; the manager's
    // images are sized by the policy).
    let standard_src = xstate::expand_to_standard(source, image, policy)
        .map_err(|e| invalid(xname.as_str(), e.to_string()))?;
    let (standard, relaid) = relayout(source, &host.info, &standard_src, policy, xstate_bv)
        .map_err(|e| {
            incompatible(
                xname.as_str(),
                format!("re-laying out the xsave image: {e}"),
            )
        })?;
    // What KVM_SET_XSAVE checks: MXCSR against THIS CPU's MXCSR_MASK
    // whenever x87, SSE or AVX state is in use.
    let legacy = Xfeature::X87.bit() | Xfeature::Sse.bit() | Xfeature::Avx.bit();
    let mxcsr = standard.view().mxcsr();
    if standard.xstate_bv() & legacy != 0 && mxcsr & !host.mxcsr_mask != 0 {
        return Err(invalid(
            format!("{xname} MXCSR"),
            format!(
                "{mxcsr:#x} sets bits {:#x} this CPU reserves (its MXCSR_MASK is {:#x})",
                mxcsr & !host.mxcsr_mask,
                host.mxcsr_mask
            ),
        ));
    }
    // What the xstate manager will check before KVM_SET_XSAVE.
    xstate::validate(standard.as_bytes(), &host.info, policy, XfeatureMask::EMPTY).map_err(
        |e| {
            invalid(
                xname.as_str(),
                format!("as this host's standard image: {e}"),
            )
        },
    )?;
    Ok(VcpuChecked {
        id,
        xcr0,
        xstate_bv,
        standard,
        relaid,
    })
}

/// What the saved state needs that this host lacks, the precise refusal
/// first: the components in use (`xstate_bv`) under the vCPU's `xcr0`,
/// then the guest's CPUID `policy` and its supervisor `xss`.
fn check_host_support(
    id: u32,
    xcr0: XfeatureMask,
    xss: XfeatureMask,
    xstate_bv: XfeatureMask,
    policy: XfeatureMask,
    host: &XsaveInfo,
) -> Result<(), Fault> {
    restorable_on(xcr0, xstate_bv, host)
        .map_err(|e| incompatible(format!("vcpu{id}.xstate"), e.to_string()))?;
    let missing = policy - host.supported_xcr0();
    if !missing.is_empty() {
        return Err(incompatible(
            "meta.policy_xcr0",
            format!(
                "the guest's CPUID policy {policy:#x} offers {}; this host supports {:#x}",
                missing.describe(),
                host.supported_xcr0()
            ),
        ));
    }
    let missing = xss - host.supported_xss();
    if !missing.is_empty() {
        return Err(incompatible(
            format!("vcpu{id}.msrs IA32_XSS"),
            format!(
                "{xss:#x} enables supervisor {}; this host supports {:#x}",
                missing.describe(),
                host.supported_xss()
            ),
        ));
    }
    Ok(())
}

/// Every user component in use has the same size in the snapshot's
/// layout (`source`) as on this host: a relayout moves components, it
/// cannot resize them.
fn check_component_sizes(
    id: u32,
    source: &XsaveInfo,
    host: &XsaveInfo,
    xstate_bv: XfeatureMask,
) -> Result<(), Fault> {
    for i in xstate_bv.user().iter_indices().filter(|&i| i >= 2) {
        let (s, t) = (source.component_by_index(i), host.component_by_index(i));
        let (Some(s), Some(t)) = (s, t) else { continue };
        if s.size != t.size {
            return Err(incompatible(
                format!("vcpu{id}.xstate"),
                format!(
                    "{} is {} bytes on this host and {} bytes in the snapshot",
                    XfeatureMask::from_bits(1 << i).describe(),
                    t.size,
                    s.size
                ),
            ));
        }
    }
    Ok(())
}
