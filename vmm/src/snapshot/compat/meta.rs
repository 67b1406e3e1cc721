//! The `meta` section and the VM's shape: RAM size, modes, UART, the
//! source KVM's leaf 0xD and xfeatures, the policy, the record fields
//! `info` prints, the vCPU count against the sections, this vmm's guest
//! kernel and this KVM, and the interrupt hardware against the sections.

use xstate::{InitMode, XfeatureMask, XsaveInfo};

use super::fault::{incompatible, invalid, Fault};
use super::host::HostFacts;
use crate::arch::boot::Platform;
use crate::arch::layout::{ram_regions, RamRegion, CMDLINE_MAX, MAX_MEM_MIB, MIN_MEM_MIB};
use crate::snapshot::save::Trigger;
use crate::snapshot::sparse::REGIONS_SECTION;
use crate::snapshot::state::bounds::XSTATE_MAX;
use crate::snapshot::state::Snapshot;
use crate::vstate::smp::{Irqchip, GUEST_MAX_CPUS};
use crate::vstate::vcpu::SAVED_MSRS;
use crate::xstate_manager::SyncPolicy;

/// What `meta` says about the VM, checked.
pub(super) struct Shape {
    /// `meta.init_xstate`.
    pub init: InitMode,
    /// `meta.xstate_sync`.
    pub sync: SyncPolicy,
    /// `meta.irqchip`, consistent with the vCPUs and sections.
    pub irqchip: Irqchip,
    /// The source KVM's leaf 0xD, which lays the images out.
    pub source: XsaveInfo,
}

/// Every `meta` field, the vCPU count and the interrupt hardware.
pub(super) fn check(snap: &Snapshot, host: &HostFacts) -> Result<Shape, Fault> {
    let (init, sync) = check_modes(snap)?;
    check_record(snap)?;
    let irqchip = check_vcpu_count(snap, host)?;
    let source = snap
        .meta
        .source_info()
        .map_err(|e| invalid("meta.kvm_leaf_0xd", e.to_string()))?;
    check_source(snap, &source)?;
    let policy = snap.meta.policy();
    policy
        .validate_xcr0(XfeatureMask::from_bits(u64::MAX))
        .map_err(|e| invalid("meta.policy_xcr0", format!("{policy:#x}: {e}")))?;
    Ok(Shape {
        init,
        sync,
        irqchip,
        source,
    })
}

/// The fields the restore interprets: RAM size and its bound, the memory
/// section's size, the init and sync modes, the UART registers.
fn check_modes(snap: &Snapshot) -> Result<(InitMode, SyncPolicy), Fault> {
    let m = &snap.meta;
    let mem_bytes = m.mem_mib.checked_mul(1 << 20).ok_or_else(|| {
        invalid(
            "meta.mem_mib",
            format!("{} MiB overflows a 64-bit byte count", m.mem_mib),
        )
    })?;
    if !(MIN_MEM_MIB..=MAX_MEM_MIB).contains(&m.mem_mib) {
        return Err(invalid(
            "meta.mem_mib",
            format!(
                "{} MiB is outside this vmm's guest RAM range {MIN_MEM_MIB}..={MAX_MEM_MIB} MiB",
                m.mem_mib
            ),
        ));
    }
    if snap.memory.size != mem_bytes {
        return Err(invalid(
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
        crate::devices::SerialIrq::Polled,
        vm_superio::serial::NoEvents,
        std::io::sink(),
    )
    .map_err(|e| invalid("meta.serial", format!("{e:?}")))?;
    Ok((init, sync))
}

/// The fields `info` prints and the restore keeps: what triggered the
/// snapshot, the writer's version, the command line, how the pages were
/// written and how long the guest ran; text is printable ASCII of a
/// bounded length (it reaches the terminal).
fn check_record(snap: &Snapshot) -> Result<(), Fault> {
    let m = &snap.meta;
    if !matches!(m.trigger.as_str(), "time" | "guest") && !Trigger::is_point(&m.trigger) {
        return Err(invalid(
            "meta.trigger",
            format!(
                "{:?} is not \"time\", \"guest\" or a guest's point (\"point-start\", \"point-mid\", \"point-end\")",
                m.trigger
            ),
        ));
    }
    for (field, text, max) in [
        ("meta.vmm_version", &m.vmm_version, 64),
        ("meta.cmdline", &m.cmdline, CMDLINE_MAX - 1),
        ("meta.memory_write", &m.memory_write, 128),
    ] {
        if text.len() > max {
            return Err(invalid(
                field,
                format!("{} bytes, at most {max}", text.len()),
            ));
        }
        if let Some(c) = text.chars().find(|c| !(' '..='~').contains(c)) {
            return Err(invalid(
                field,
                format!("holds {c:?}: only printable ASCII is written"),
            ));
        }
    }
    if !(m.guest_ran_ms.is_finite() && m.guest_ran_ms >= 0.0) {
        return Err(invalid(
            "meta.guest_ran_ms",
            format!("{} is not a duration", m.guest_ran_ms),
        ));
    }
    if m.xsave2_size != 0 && m.xsave2_size < xstate::kvm::KVM_XSAVE_REGION_SIZE as u64 {
        return Err(invalid(
            "meta.xsave2_size",
            format!(
                "{} bytes, less than KVM's {}-byte xsave region",
                m.xsave2_size,
                xstate::kvm::KVM_XSAVE_REGION_SIZE
            ),
        ));
    }
    Ok(())
}

/// The source KVM's leaf 0xD describes an xsave area no larger than a
/// `vcpuN.xstate` section may be (the validation lays images out by it:
/// a claimed gigabyte would be allocated), and its XCR0 and IA32_XSS as
/// recorded are its leaf 0xD's.
fn check_source(snap: &Snapshot, source: &XsaveInfo) -> Result<(), Fault> {
    let m = &snap.meta;
    let area = u64::from(source.raw_subleaf(0).ecx);
    if area > XSTATE_MAX {
        return Err(invalid(
            "meta.kvm_leaf_0xd",
            format!(
                "subleaf 0 ECX describes a {area}-byte xsave area; this vmm takes at most \
                 {XSTATE_MAX} (AMX makes the largest about 11 KiB)"
            ),
        ));
    }
    for (field, got, want) in [
        ("meta.kvm_xcr0", m.kvm_xcr0, source.supported_xcr0()),
        ("meta.kvm_xss", m.kvm_xss, source.supported_xss()),
    ] {
        if got != want.bits() {
            return Err(invalid(
                field,
                format!(
                    "{got:#x} disagrees with meta.kvm_leaf_0xd, which says {:#x}",
                    want.bits()
                ),
            ));
        }
    }
    Ok(())
}

/// `meta.platform`, and what a PC needs: the full irqchip (`meta.irqchip`
/// `kvm`) with its PIT, whatever the vCPU count (a stock Linux takes its
/// interrupts through the IOAPIC and calibrates against the PIT).
fn check_platform(snap: &Snapshot, kind: Irqchip) -> Result<Platform, Fault> {
    let name = &snap.meta.platform;
    let platform = snap.meta.platform().ok_or_else(|| {
        invalid(
            "meta.platform",
            format!("{name:?} is not \"minimal\" or \"pc\""),
        )
    })?;
    if platform == Platform::Pc {
        if kind != Irqchip::Full {
            return Err(invalid(
                "meta.irqchip",
                format!(
                    "{:?} on a PC (meta.platform \"pc\"): a PC has the full irqchip, \"kvm\"",
                    snap.meta.irqchip
                ),
            ));
        }
        if snap.irqchip.as_ref().is_some_and(|c| c.pit.is_none()) {
            return Err(invalid(
                "pit",
                "missing: a PC (meta.platform \"pc\") has an in-kernel PIT",
            ));
        }
    }
    Ok(platform)
}

/// `meta.vcpus` against the vCPU sections, this vmm's guest kernel and
/// this KVM; the interrupt hardware (`meta.irqchip`) against the count,
/// the sections and this KVM: several vCPUs need LAPICs (one `vcpuN.lapic`
/// each), a full irqchip the `irqchip.*` sections, a split one none of
/// them and `KVM_CAP_SPLIT_IRQCHIP`; one vCPU has the split irqchip or
/// none (`crate::vstate::smp`, "One vCPU"), except on a PC.
fn check_vcpu_count(snap: &Snapshot, host: &HostFacts) -> Result<Irqchip, Fault> {
    let n = snap.vcpus.len();
    if n == 0 || snap.meta.vcpus as usize != n {
        return Err(invalid(
            "meta.vcpus",
            format!(
                "says {} vCPUs; the file holds the sections of {n} (vcpu0 .. vcpu{})",
                snap.meta.vcpus,
                n.saturating_sub(1)
            ),
        ));
    }
    if n > GUEST_MAX_CPUS as usize {
        return Err(invalid(
            "meta.vcpus",
            format!("{n} vCPUs; this vmm's guest kernel runs at most {GUEST_MAX_CPUS}"),
        ));
    }
    if n as u64 > u64::from(host.max_vcpus) {
        return Err(incompatible(
            "meta.vcpus",
            format!(
                "it holds {n} vCPUs; this KVM allows at most {} per VM (KVM_CAP_MAX_VCPUS)",
                host.max_vcpus
            ),
        ));
    }
    let name = &snap.meta.irqchip;
    let kind = Irqchip::from_name(name).ok_or_else(|| {
        invalid(
            "meta.irqchip",
            format!("{name:?} is not \"none\", \"kvm\" or \"split\""),
        )
    })?;
    // A PC has the full irqchip for one vCPU too (checked there).
    let pc = check_platform(snap, kind)? == Platform::Pc;
    if !pc && n == 1 && kind == Irqchip::Full {
        return Err(invalid(
            "meta.irqchip",
            format!(
                "{name:?} for one vCPU: this vmm gives a one-vCPU VM the split irqchip or none"
            ),
        ));
    }
    if n > 1 && !kind.has_lapics() {
        return Err(invalid(
            "meta.irqchip",
            format!("\"none\" for {n} vCPUs: their APs start through in-kernel LAPICs"),
        ));
    }
    let chip = snap.irqchip.is_some();
    if chip != kind.has_ioapic() {
        return Err(invalid(
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
                format!("vcpu{}.lapic", v.id),
                if kind.has_lapics() {
                    "missing: every vCPU of a VM with an irqchip has a local APIC"
                } else {
                    "present in a VM without an irqchip (meta.irqchip \"none\")"
                },
            ));
        }
    }
    if kind == Irqchip::Split && !host.split_irqchip {
        return Err(incompatible(
            "meta.irqchip",
            "its VM had a split irqchip (LAPICs only); this KVM cannot make one \
             (no KVM_CAP_SPLIT_IRQCHIP)",
        ));
    }
    Ok(kind)
}

/// `meta.msrs_unreadable` names MSRs this vmm saves, none of them saved
/// after all.
pub(super) fn check_unreadable(snap: &Snapshot) -> Result<(), Fault> {
    for &i in &snap.meta.msrs_unreadable {
        if !SAVED_MSRS.iter().any(|&(s, _)| s == i) {
            return Err(invalid(
                "meta.msrs_unreadable",
                format!("MSR {i:#x} is not one this vmm saves"),
            ));
        }
        if let Some(v) = snap.vcpus.iter().find(|v| v.msr(i).is_some()) {
            return Err(invalid(
                "meta.msrs_unreadable",
                format!(
                    "MSR {i:#x} is listed as unreadable, yet vcpu{} holds it",
                    v.id
                ),
            ));
        }
    }
    Ok(())
}
