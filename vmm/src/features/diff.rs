//! Every disagreement `vmm features` spells out: between the host CPU, its
//! OS, KVM, the policy and the guest, and between each of their leaf 0xD
//! enumerations and the xstate crate's layouts. One small function per pair
//! of columns; [`disagreements`] runs them in the order the report lists
//! them.

use xstate::info::leaf_d1_eax;
use xstate::{Format, Xfeature, XfeatureMask, XsaveInfo};

use super::inputs::{GuestSeen, GuestState, Inputs};
use super::profile::check_consistent;

/// CPUID 0xD.i ECX bit 1: the component is 64-byte aligned when compacted.
const LEAF_D_ECX_ALIGN64: u32 = 1 << 1;

/// Every disagreement between the inputs, one sentence each.
pub fn disagreements(inp: &Inputs) -> Vec<String> {
    let cpu = &inp.cpu;
    let layout = inp.kvm.as_ref().unwrap_or(cpu);
    let mut dis = Vec::new();
    host_cpu_vs_os(cpu, inp.os_xcr0, &mut dis);
    if let Err(e) = check_consistent(cpu) {
        dis.push(format!("host CPU: {e}"));
    }
    if let Some(kvm) = &inp.kvm {
        host_cpu_vs_kvm(cpu, kvm, inp.os_xcr0, &mut dis);
    }
    if let GuestState::Booted { seen: g, .. } = &inp.guest {
        let policy = inp.policy_xcr0;
        guest_vs_policy(g, policy, layout.supported_xss(), &mut dis);
        guest_sizes(g, policy, layout, cpu, &mut dis);
        guest_components(g, layout, &mut dis);
    }
    dis
}

/// The host CPU against what its OS enabled (XGETBV(0)).
fn host_cpu_vs_os(cpu: &XsaveInfo, os_xcr0: Option<XfeatureMask>, dis: &mut Vec<String>) {
    if let Some(os) = os_xcr0 {
        let off = cpu.supported_xcr0() - os;
        if !off.is_empty() {
            dis.push(format!(
                "host CPU supports {} but the host OS did not enable it (XGETBV(0) = {os:#x})",
                off.describe()
            ));
        }
        let extra = os - cpu.supported_xcr0();
        if !extra.is_empty() {
            dis.push(format!(
                "host XCR0 {os:#x} enables {} that the CPU's CPUID 0xD does not enumerate",
                extra.describe()
            ));
        }
        if let Ok(size) = cpu.standard_size(os & cpu.supported_xcr0()) {
            let ebx = cpu.raw_subleaf(0).ebx;
            if ebx != size {
                dis.push(format!(
                    "host CPU CPUID 0xD.0 EBX {ebx} differs from xstate layout {size} of the \
                     enabled XCR0 {os:#x}"
                ));
            }
        }
    }
}

/// The host CPU against KVM's supported leaf 0xD.
fn host_cpu_vs_kvm(
    cpu: &XsaveInfo,
    kvm: &XsaveInfo,
    os_xcr0: Option<XfeatureMask>,
    dis: &mut Vec<String>,
) {
    for (what, c, k) in [
        ("", cpu.supported_xcr0(), kvm.supported_xcr0()),
        ("supervisor ", cpu.supported_xss(), kvm.supported_xss()),
    ] {
        if !(c - k).is_empty() {
            dis.push(format!(
                "host CPU supports {what}{} but KVM does not offer it",
                (c - k).describe()
            ));
        }
        if !(k - c).is_empty() {
            dis.push(format!(
                "KVM offers {what}{} that the host CPU's CPUID 0xD does not enumerate",
                (k - c).describe()
            ));
        }
    }
    if let Some(os) = os_xcr0 {
        let extra = kvm.supported_xcr0() - os;
        if !extra.is_empty() {
            dis.push(format!(
                "KVM offers {} that the host OS did not enable (XGETBV(0) = {os:#x})",
                extra.describe()
            ));
        }
    }
    layout_disagreements("host CPU", cpu, "KVM", kvm, dis);
    if let Err(e) = check_consistent(kvm) {
        dis.push(format!("KVM: {e}"));
    }
}

/// Compares the placement of the components two leaf 0xD enumerations share.
fn layout_disagreements(
    a_name: &str,
    a: &XsaveInfo,
    b_name: &str,
    b: &XsaveInfo,
    out: &mut Vec<String>,
) {
    for i in (a.supported_all() & b.supported_all())
        .iter_indices()
        .filter(|&i| i >= 2)
    {
        let (Some(x), Some(y)) = (a.component_by_index(i), b.component_by_index(i)) else {
            continue;
        };
        let name = Xfeature::from_index(i).map_or("?", Xfeature::short_name);
        if x.size != y.size || x.standard_offset != y.standard_offset {
            out.push(format!(
                "{name}: {a_name} CPUID 0xD.{i} has size {} at standard offset {}, {b_name} \
                 size {} at {}",
                x.size, x.standard_offset, y.size, y.standard_offset
            ));
        }
        if x.align64 != y.align64 {
            out.push(format!(
                "{name}: {a_name} and {b_name} disagree on its 64-byte alignment when compacted \
                 (CPUID 0xD.{i} ECX bit 1)"
            ));
        }
    }
}

/// What the guest was offered and enabled against the policy.
fn guest_vs_policy(
    g: &GuestSeen,
    policy: XfeatureMask,
    policy_xss: XfeatureMask,
    dis: &mut Vec<String>,
) {
    // Where KVM replaced the policy's CPUID table, say so once: every
    // CPUID disagreement below follows from it.
    if g.kvm_cpuid_honored == Some(false) {
        dis.push(
            "KVM ignored the policy's CPUID table (KVM_GET_CPUID2 differs from KVM_SET_CPUID2): \
                 the guest's CPUID shows KVM's own leaves; its XCR0 follows the policy through the \
                 xfeatures= boot hint"
                .to_string(),
        );
    }
    for f in policy.iter() {
        if !g.xcr0_supported.contains(f) {
            dis.push(format!(
                "policy exposes {} but the guest's CPUID 0xD.0 does not advertise it",
                f.short_name()
            ));
        } else if !g.xcr0.contains(f) {
            dis.push(format!(
                "policy exposes {} but the guest did not enable it (guest XCR0 {:#x})",
                f.short_name(),
                g.xcr0
            ));
        }
    }
    let beyond = g.xcr0_supported - policy;
    if !beyond.is_empty() {
        dis.push(format!(
            "the guest's CPUID 0xD.0 advertises {} beyond the policy {policy:#x}",
            beyond.describe()
        ));
    }
    let beyond = g.xcr0 - policy;
    if !beyond.is_empty() {
        dis.push(format!(
            "the guest enabled {} in XCR0 {:#x}, beyond the policy {policy:#x}",
            beyond.describe(),
            g.xcr0
        ));
    }
    if g.xss_supported != policy_xss {
        dis.push(format!(
                "guest CPUID 0xD.1 EDX:ECX (IA32_XSS) {:#x} differs from what KVM offers {policy_xss:#x}",
                g.xss_supported
            ));
    }
    if let Some(inuse) = g.xinuse {
        let outside = inuse - g.xcr0;
        if !outside.is_empty() {
            dis.push(format!(
                "guest XINUSE {inuse:#x} has {} outside its XCR0 {:#x}",
                outside.describe(),
                g.xcr0
            ));
        }
    }
}

/// The sizes the guest's CPUID gave and the guest computed against the
/// VMM's layout.
fn guest_sizes(
    g: &GuestSeen,
    policy: XfeatureMask,
    layout: &XsaveInfo,
    cpu: &XsaveInfo,
    dis: &mut Vec<String>,
) {
    let policy_std = layout.standard_size(policy).unwrap_or(0);
    if g.size_max != policy_std {
        dis.push(format!(
            "guest CPUID 0xD.0 ECX {} differs from xstate layout {policy_std}",
            g.size_max
        ));
    }
    let enabled = g.xcr0 & layout.supported_xcr0();
    if let Ok(size) = layout.standard_size(enabled) {
        if g.size_enabled != size {
            dis.push(format!(
                "guest CPUID 0xD.0 EBX {} differs from xstate layout {size} for its XCR0 {:#x}",
                g.size_enabled, g.xcr0
            ));
        }
        if g.computed_standard_size != size {
            dis.push(format!(
                "the guest computed standard size {} for its XCR0, the VMM {size}",
                g.computed_standard_size
            ));
        }
    }
    if let Ok(size) = layout.compacted_size(enabled) {
        // 0xD.1 EBX covers XCR0 | IA32_XSS as enabled; the guest's
        // IA32_XSS is not reported, so any supported XSS subset whose
        // size matches is accepted.
        let xss = g.xss_supported & cpu.supported_xss();
        let with_xss = layout
            .compacted_size(enabled | xss)
            .or_else(|_| cpu.compacted_size(enabled | xss))
            .ok();
        let xsavec_or_s = g.xsave_features & (leaf_d1_eax::XSAVEC | leaf_d1_eax::XSAVES) != 0;
        if xsavec_or_s && g.size_compacted != size && Some(g.size_compacted) != with_xss {
            dis.push(format!(
                "guest CPUID 0xD.1 EBX {} differs from xstate layout {size} (compacted, XCR0 \
                     {:#x})",
                g.size_compacted, g.xcr0
            ));
        }
        if g.computed_compacted_size != size {
            dis.push(format!(
                "the guest computed compacted size {} for its XCR0, the VMM {size}",
                g.computed_compacted_size
            ));
        }
    }
}

/// Each component the guest's CPUID enumerates against the VMM's layout.
fn guest_components(g: &GuestSeen, layout: &XsaveInfo, dis: &mut Vec<String>) {
    let enabled = g.xcr0 & layout.supported_xcr0();
    let guest_compacted = layout.layout(enabled, Format::Compacted).ok();
    for i in g
        .xcr0_supported
        .iter_indices()
        .filter(|&i| (2..20).contains(&i))
    {
        let Some(c) = layout.component_by_index(i) else {
            continue;
        };
        let (size, offset, flags, compacted) = g.components[i as usize];
        let name = Xfeature::from_index(i).map_or("?", Xfeature::short_name);
        if size != c.size || offset != c.standard_offset {
            dis.push(format!(
                "{name}: guest CPUID 0xD.{i} has size {size} at offset {offset}, xstate layout \
                     size {} at {}",
                c.size, c.standard_offset
            ));
        }
        if (flags & LEAF_D_ECX_ALIGN64 != 0) != c.align64 {
            dis.push(format!(
                "{name}: guest CPUID 0xD.{i} ECX alignment bit differs from the host's"
            ));
        }
        if let Some(want) = guest_compacted.as_ref().and_then(|l| l.offset_by_index(i)) {
            if compacted != want {
                dis.push(format!(
                    "{name}: the guest computed compacted offset {compacted}, the VMM {want}"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use xstate::XfeatureMask;

    #[test]
    fn describes_masks() {
        let d = |m: u64| XfeatureMask::from_bits(m).describe().to_string();
        assert_eq!(d(0xe0), "avx512 (components 5-7)");
        assert_eq!(d(0x60000), "amx (components 17-18)");
        assert_eq!(d(0x204), "avx, pkru (components 2, 9)");
        assert_eq!(d(0x1800), "cet (components 11-12)");
        assert_eq!(d(0x60), "opmask, zmm_hi256 (components 5-6)");
        assert_eq!(d(1 << 30), "bit30 (component 30)");
        assert_eq!(d(0), "nothing");
    }
}
