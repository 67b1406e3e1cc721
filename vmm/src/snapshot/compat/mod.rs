//! Is a snapshot valid, and can this host hold its state? THE validation
//! of a decoded snapshot, shared by `vmm snapshot info` and `vmm restore`
//! ([`validate`]): everything that can be checked without a VM, so that
//! `info` and `restore` always give the same answer and `restore` never
//! creates a VM for a state it would refuse later.
//!
//! Two kinds of refusal, each naming one field:
//! - [`SnapshotError::Invalid`]: the state breaks a rule no host accepts
//!   (`meta.mem_mib` overflowing, an invalid XCR0 or policy, a CPUID that
//!   contradicts XCR0, reserved MXCSR bits, an image longer than its
//!   layout, ...);
//! - [`SnapshotError::Incompatible`]: the state is valid but this host
//!   lacks something it needs (the saved XCR0 and XSTATE_BV against this
//!   KVM's leaf 0xD with [`restorable_on`], the logic of
//!   `vmm features compare`; the policy; IA32_XSS; component sizes).
//!
//! Then the image is re-laid out for this host's standard offsets and the
//! guest's CPUID policy is resolved against this KVM, ready for
//! [`crate::run::restore`] to consume.

use std::path::Path;
use std::sync::OnceLock;

use kvm_ioctls::Cap;
use xstate::buffer::XSAVE_MIN_SIZE;
use xstate::info::leaf_1_ecx;
use xstate::{restorable_on, InitMode, Xfeature, XfeatureMask, XsaveBuf, XsaveInfo};

use super::error::SnapshotError;
use super::state::{Snapshot, VcpuState};
use crate::arch::layout::{ram_regions, RamRegion, MAX_MEM_MIB, MIN_MEM_MIB};
use crate::cpuid::{resolve_policy, GuestCpuid, Policy};
use crate::kvm::HostKvm;
use crate::snapshot::sparse::REGIONS_SECTION;
use crate::vstate::smp::Irqchip;
use crate::vstate::vcpu::MSR_IA32_XSS;
use crate::xstate_manager::SyncPolicy;

mod image;

use image::{check_compacted, relayout};

/// CR4.OSXSAVE: XSETBV, XGETBV and the XSAVE family are enabled.
pub const CR4_OSXSAVE: u64 = 1 << 18;

/// MXCSR_MASK FXSAVE defines for a CPU that reports 0 there.
const MXCSR_MASK_DEFAULT: u32 = 0xffbf;

/// What a snapshot's state is checked against: this host's KVM leaf 0xD and
/// this CPU's MXCSR_MASK (what the kernel checks MXCSR against in
/// `KVM_SET_XSAVE`; the file's own MXCSR_MASK field describes the source CPU
/// and is not trusted).
#[derive(Clone, Copy, Debug)]
pub struct HostFacts {
    /// This KVM's leaf 0xD (KVM_GET_SUPPORTED_CPUID).
    pub info: XsaveInfo,
    /// The MXCSR bits this CPU allows.
    pub mxcsr_mask: u32,
}

impl HostFacts {
    /// The facts of the KVM `host` and this CPU.
    pub fn of(host: &HostKvm) -> Self {
        Self {
            info: host.xstate.info,
            mxcsr_mask: host_mxcsr_mask(),
        }
    }
}

/// This CPU's MXCSR_MASK, read once with XSAVE of the legacy region (the
/// default 0xFFBF where the CPU reports 0 or cannot XSAVE: then neither can
/// KVM, and the default is what the kernel assumes too).
pub fn host_mxcsr_mask() -> u32 {
    static MASK: OnceLock<u32> = OnceLock::new();
    *MASK.get_or_init(|| {
        let read = || -> Option<u32> {
            let info = xstate::native::host_info().ok()?;
            let mut buf = XsaveBuf::standard_for(&info, XfeatureMask::LEGACY).ok()?;
            xstate::native::xsave(buf.as_bytes_mut(), XfeatureMask::LEGACY).ok()?;
            let b = buf.as_bytes();
            Some(u32::from_le_bytes(b[28..32].try_into().ok()?))
        };
        match read() {
            Some(0) | None => MXCSR_MASK_DEFAULT,
            Some(m) => m,
        }
    })
}

/// What [`check`] established: the state is valid and fits this host.
/// The xstate fields are vCPU 0's; [`Checked::vcpus`] has every vCPU's.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The guest's XCR0 as saved.
    pub xcr0: XfeatureMask,
    /// The components in use in the saved image.
    pub xstate_bv: XfeatureMask,
    /// The xsave image in this host's standard format for the guest's
    /// policy, ready for the xstate manager.
    pub standard: XsaveBuf,
    /// The source's standard offsets differed and the image was re-laid out.
    pub relaid: bool,
    /// The vCPU's initial-xstate mode (`meta.init_xstate`).
    pub init: InitMode,
    /// The xstate sync policy the snapshot was taken with (`meta.xstate_sync`).
    pub sync: SyncPolicy,
    /// Every vCPU's checks, in index order (the fields above are vCPU 0's).
    pub vcpus: Vec<VcpuChecked>,
    /// The interrupt hardware the VM had (`meta.irqchip`), which the
    /// restore rebuilds.
    pub irqchip: Irqchip,
}

/// What [`validate`] established, consumed by the restore: the checked state
/// and the guest CPUID its policy resolves to on this KVM.
#[derive(Clone, Debug)]
pub struct Validated {
    /// The state checks.
    pub checked: Checked,
    /// The guest's xstate policy on this host.
    pub policy: Policy,
    /// The CPUID table that policy resolves to (the saved table is loaded;
    /// this one is what KVM's answer is compared with).
    pub guest: GuestCpuid,
}

/// THE validation of a decoded snapshot against this host, without a VM:
/// `vmm snapshot info` reports its answer, `vmm restore` consumes it.
pub fn validate(path: &Path, snap: &Snapshot, host: &HostKvm) -> Result<Validated, SnapshotError> {
    let checked = check(path, snap, &HostFacts::of(host))?;
    if checked.irqchip == Irqchip::Split && !host.kvm.check_extension(Cap::SplitIrqchip) {
        return Err(SnapshotError::Incompatible {
            path: path.to_path_buf(),
            reason: "its VM had a split irqchip (LAPICs only); this KVM cannot make one \
                     (no KVM_CAP_SPLIT_IRQCHIP)"
                .into(),
        });
    }
    let max = crate::vstate::smp::kvm_max_vcpus(&host.kvm);
    if snap.vcpus.len() as u32 > max {
        return Err(SnapshotError::Incompatible {
            path: path.to_path_buf(),
            reason: format!(
                "it holds {} vCPUs; this KVM allows at most {max} per VM (KVM_CAP_MAX_VCPUS)",
                snap.vcpus.len()
            ),
        });
    }
    let spec = format!("{:#x}", snap.meta.policy_xcr0);
    let (policy, guest) = resolve_policy(host, Some(&spec), checked.init, snap.meta.tsc_khz)
        .map_err(|e| SnapshotError::Incompatible {
            path: path.to_path_buf(),
            reason: format!("the guest's CPUID policy: {e}"),
        })?;
    Ok(Validated {
        checked,
        policy,
        guest,
    })
}

/// One field's fault.
fn invalid(path: &Path, field: impl Into<String>, problem: String) -> SnapshotError {
    SnapshotError::Invalid {
        path: path.to_path_buf(),
        field: field.into(),
        problem,
    }
}

/// XCR0 as KVM_GET_XCRS gave it, checked against the architectural rules.
fn checked_xcr0(path: &Path, v: &VcpuState) -> Result<XfeatureMask, SnapshotError> {
    let field = format!("vcpu{}.xcrs", v.id);
    let xcr0 = XfeatureMask::from_bits(
        v.xcr0()
            .ok_or_else(|| invalid(path, &field, "holds no XCR0".into()))?,
    );
    xcr0.validate_xcr0(XfeatureMask::from_bits(u64::MAX))
        .map_err(|e| invalid(path, format!("{field} XCR0"), format!("{xcr0:#x}: {e}")))?;
    Ok(xcr0)
}

/// The saved CPUID table, CR4 and XCR0 must tell one story: KVM checks CR4
/// against the CPUID it holds, and the guest read its XCR0 limits from the
/// table.
fn check_cpuid_vs_state(
    path: &Path,
    v: &VcpuState,
    xcr0: XfeatureMask,
) -> Result<(), SnapshotError> {
    let id = v.id;
    let osxsave = v.sregs.cr4 & CR4_OSXSAVE != 0;
    if !osxsave && xcr0 != XfeatureMask::from_bits(1) {
        return Err(invalid(
            path,
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
            path,
            format!("vcpu{id}.cpuid leaf 0x1 ECX"),
            format!(
                "{ecx1:#010x} has XSAVE (bit 26) clear, yet CR4 {:#x} has OSXSAVE set",
                v.sregs.cr4
            ),
        ));
    }
    if !osxsave && ecx1 & leaf_1_ecx::OSXSAVE != 0 {
        return Err(invalid(
            path,
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
                path,
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

/// The `meta` fields the restore interprets: RAM size and its bound, the
/// memory section's size, the init and sync modes, the UART registers.
fn check_meta(path: &Path, snap: &Snapshot) -> Result<(InitMode, SyncPolicy), SnapshotError> {
    let m = &snap.meta;
    let mem_bytes = m.mem_mib.checked_mul(1 << 20).ok_or_else(|| {
        invalid(
            path,
            "meta.mem_mib",
            format!("{} MiB overflows a 64-bit byte count", m.mem_mib),
        )
    })?;
    if !(MIN_MEM_MIB..=MAX_MEM_MIB).contains(&m.mem_mib) {
        return Err(invalid(
            path,
            "meta.mem_mib",
            format!(
                "{} MiB is outside this vmm's guest RAM range {MIN_MEM_MIB}..={MAX_MEM_MIB} MiB",
                m.mem_mib
            ),
        ));
    }
    if snap.memory.size != mem_bytes {
        return Err(invalid(
            path,
            "memory",
            format!(
                "holds {} bytes of RAM, meta.mem_mib says {} MiB",
                snap.memory.size, m.mem_mib
            ),
        ));
    }
    // Restore lays RAM out by this vmm's map; the guest was told the
    // file's.
    let (file_map, map) = (snap.memory.ram_regions(), ram_regions(mem_bytes));
    if file_map != map {
        let show = |r: &[RamRegion]| {
            r.iter()
                .map(|r| format!("{:#x}+{:#x}", r.addr, r.len))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(invalid(
            path,
            REGIONS_SECTION,
            format!(
                "RAM at {}, but this vmm lays {} MiB out at {}",
                show(&file_map),
                m.mem_mib,
                show(&map)
            ),
        ));
    }
    let init = match m.init_xstate.as_str() {
        "minimal" => InitMode::Minimal,
        "all" => InitMode::AllOfXcr0,
        other => {
            return Err(invalid(
                path,
                "meta.init_xstate",
                format!("{other:?} is not \"minimal\" or \"all\""),
            ))
        }
    };
    let sync = [
        SyncPolicy::Lazy,
        SyncPolicy::Eager,
        SyncPolicy::EagerCompact,
    ]
    .into_iter()
    .find(|p| p.name() == m.xstate_sync)
    .ok_or_else(|| {
        invalid(
            path,
            "meta.xstate_sync",
            format!(
                "{:?} is not \"lazy\", \"eager\" or \"eager-compact\"",
                m.xstate_sync
            ),
        )
    })?;
    let state = vm_superio::serial::SerialState::from(&m.serial);
    vm_superio::serial::Serial::from_state(
        &state,
        crate::devices::NoInterrupt,
        vm_superio::serial::NoEvents,
        std::io::sink(),
    )
    .map_err(|e| invalid(path, "meta.serial", format!("{e:?}")))?;
    Ok((init, sync))
}

/// Check a decoded snapshot against a host's facts, without KVM: every
/// field rule, then what this host can hold, for every vCPU. A pure
/// function (no ioctl).
pub fn check(path: &Path, snap: &Snapshot, host: &HostFacts) -> Result<Checked, SnapshotError> {
    let (init, sync) = check_meta(path, snap)?;
    let irqchip = check_vcpu_count(path, snap)?;
    let source = snap
        .meta
        .source_info()
        .map_err(|e| invalid(path, "meta.kvm_leaf_0xd", e.to_string()))?;
    let policy = snap.meta.policy();
    policy
        .validate_xcr0(XfeatureMask::from_bits(u64::MAX))
        .map_err(|e| invalid(path, "meta.policy_xcr0", format!("{policy:#x}: {e}")))?;
    let vcpus = snap
        .vcpus
        .iter()
        .map(|v| check_vcpu(path, v, &source, policy, host))
        .collect::<Result<Vec<_>, _>>()?;
    let first = vcpus[0].clone();
    Ok(Checked {
        xcr0: first.xcr0,
        xstate_bv: first.xstate_bv,
        standard: first.standard,
        relaid: first.relaid,
        init,
        sync,
        vcpus,
        irqchip,
    })
}

/// `meta.vcpus` against the vCPU sections, and the interrupt hardware
/// (`meta.irqchip`) against the count and the sections: several vCPUs need
/// LAPICs (one `vcpuN.lapic` each), a full irqchip the `irqchip.*`
/// sections, a split one none of them, one vCPU no irqchip at all.
fn check_vcpu_count(path: &Path, snap: &Snapshot) -> Result<Irqchip, SnapshotError> {
    let n = snap.vcpus.len();
    if n == 0 || snap.meta.vcpus as usize != n {
        return Err(invalid(
            path,
            "meta.vcpus",
            format!(
                "says {} vCPUs; the file holds the sections of {n} (vcpu0 .. vcpu{})",
                snap.meta.vcpus,
                n.saturating_sub(1)
            ),
        ));
    }
    let name = &snap.meta.irqchip;
    let kind = Irqchip::from_name(name).ok_or_else(|| {
        invalid(
            path,
            "meta.irqchip",
            format!("{name:?} is not \"none\", \"kvm\" or \"split\""),
        )
    })?;
    if (n == 1) == kind.has_lapics() {
        return Err(invalid(
            path,
            "meta.irqchip",
            if n == 1 {
                format!("{name:?} for one vCPU: this vmm gives a one-vCPU VM no irqchip")
            } else {
                format!("\"none\" for {n} vCPUs: their APs start through in-kernel LAPICs")
            },
        ));
    }
    let chip = snap.irqchip.is_some();
    if chip != kind.has_ioapic() {
        return Err(invalid(
            path,
            "irqchip.ioapic",
            if chip {
                format!("present, but meta.irqchip {name:?} has no PICs or IOAPIC to load it into")
            } else {
                format!("missing: a VM of {n} vCPUs with a full irqchip needs its PICs' and IOAPIC's state")
            },
        ));
    }
    for v in &snap.vcpus {
        if v.lapic.is_some() != kind.has_lapics() {
            return Err(invalid(
                path,
                format!("vcpu{}.lapic", v.id),
                if kind.has_lapics() {
                    "missing: every vCPU of a VM with an irqchip has a local APIC".into()
                } else {
                    "present in a VM without an irqchip (meta.irqchip \"none\")".into()
                },
            ));
        }
    }
    Ok(kind)
}

/// What [`check`] established for one vCPU.
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

/// Every rule of one vCPU's state, and whether this host can hold it.
fn check_vcpu(
    path: &Path,
    v: &VcpuState,
    source: &XsaveInfo,
    policy: XfeatureMask,
    host: &HostFacts,
) -> Result<VcpuChecked, SnapshotError> {
    let incompatible = |reason: String| SnapshotError::Incompatible {
        path: path.to_path_buf(),
        reason,
    };
    let id = v.id;
    let xname = format!("vcpu{id}.xstate");
    let xcr0 = checked_xcr0(path, v)?;
    let beyond = xcr0 - policy;
    if !beyond.is_empty() {
        return Err(invalid(
            path,
            "meta.policy_xcr0",
            format!(
                "{policy:#x} is narrower than vcpu{id}'s XCR0 {xcr0:#x} (lacks {}): the guest cannot have enabled what its CPUID did not offer",
                beyond.describe()
            ),
        ));
    }
    check_cpuid_vs_state(path, v, xcr0)?;
    let image = &v.xstate;
    if image.len() < XSAVE_MIN_SIZE {
        return Err(invalid(
            path,
            &xname,
            format!("{} bytes, shorter than an xsave header", image.len()),
        ));
    }
    let xstate_bv = image.xstate_bv_mask();
    let xss = XfeatureMask::from_bits(v.msr(MSR_IA32_XSS).unwrap_or(0));
    check_host_support(path, id, xcr0, xss, xstate_bv, policy, &host.info)?;
    // The image must be what the saver writes: compacted, in-use only,
    // consistent with the saved XCR0 and the source's layout. (The VMM
    // compacts in software, so the source CPU's XSAVEC support is moot.)
    check_compacted(image, source, xcr0).map_err(|e| invalid(path, &xname, e))?;
    check_component_sizes(path, source, &host.info, xstate_bv)?;
    // The guest's policy covers its XCR0 (checked above; the manager's
    // images are sized by the policy).
    let standard_src = xstate::expand_to_standard(source, image, policy)
        .map_err(|e| invalid(path, &xname, e.to_string()))?;
    let (standard, relaid) = relayout(source, &host.info, &standard_src, policy, xstate_bv)
        .map_err(|e| incompatible(format!("re-laying out the xsave image: {e}")))?;
    // What KVM_SET_XSAVE checks: MXCSR against THIS CPU's MXCSR_MASK
    // whenever x87, SSE or AVX state is in use.
    let legacy = Xfeature::X87.bit() | Xfeature::Sse.bit() | Xfeature::Avx.bit();
    let mxcsr = standard.view().mxcsr();
    if standard.xstate_bv() & legacy != 0 && mxcsr & !host.mxcsr_mask != 0 {
        return Err(invalid(
            path,
            format!("{xname} MXCSR"),
            format!(
                "{mxcsr:#x} sets bits {:#x} this CPU reserves (its MXCSR_MASK is {:#x})",
                mxcsr & !host.mxcsr_mask,
                host.mxcsr_mask
            ),
        ));
    }
    // What the xstate manager will check before KVM_SET_XSAVE.
    xstate::validate(standard.as_bytes(), &host.info, policy, XfeatureMask::EMPTY)
        .map_err(|e| invalid(path, &xname, format!("as this host's standard image: {e}")))?;
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
    path: &Path,
    id: u32,
    xcr0: XfeatureMask,
    xss: XfeatureMask,
    xstate_bv: XfeatureMask,
    policy: XfeatureMask,
    host: &XsaveInfo,
) -> Result<(), SnapshotError> {
    let incompatible = |reason: String| SnapshotError::Incompatible {
        path: path.to_path_buf(),
        reason,
    };
    restorable_on(xcr0, xstate_bv, host).map_err(|e| incompatible(format!("vcpu{id}: {e}")))?;
    let missing = policy - host.supported_xcr0();
    if !missing.is_empty() {
        return Err(incompatible(format!(
            "the guest's CPUID policy {policy:#x} offers {}; this host supports {:#x}",
            missing.describe(),
            host.supported_xcr0()
        )));
    }
    let missing = xss - host.supported_xss();
    if !missing.is_empty() {
        return Err(incompatible(format!(
            "vcpu{id}: IA32_XSS {xss:#x} enables supervisor {}; this host supports {:#x}",
            missing.describe(),
            host.supported_xss()
        )));
    }
    Ok(())
}

/// Every user component in use has the same size in the snapshot's
/// layout (`source`) as on this host: a relayout moves components, it
/// cannot resize them.
fn check_component_sizes(
    path: &Path,
    source: &XsaveInfo,
    host: &XsaveInfo,
    xstate_bv: XfeatureMask,
) -> Result<(), SnapshotError> {
    let incompatible = |reason: String| SnapshotError::Incompatible {
        path: path.to_path_buf(),
        reason,
    };
    for i in xstate_bv.user().iter_indices().filter(|&i| i >= 2) {
        let (s, t) = (source.component_by_index(i), host.component_by_index(i));
        let (Some(s), Some(t)) = (s, t) else { continue };
        if s.size != t.size {
            return Err(incompatible(format!(
                "{} is {} bytes on this host and {} bytes in the snapshot",
                XfeatureMask::from_bits(1 << i).describe(),
                t.size,
                s.size
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
