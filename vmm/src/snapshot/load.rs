//! Reading a snapshot file and putting its state into a new VM: the file
//! opened bounded and verified section by section before any byte of guest
//! state is trusted ([`open`], [`load_mapped`]; the stored pages are
//! [`super::pager`]'s), the stored pages' CRC32 as one section in bounded
//! pieces ([`verify_pages`], for `vmm snapshot info`), and the irqchip,
//! vCPU registers and COM1 loaded in the order KVM needs. Resuming the
//! guest is
//! [`crate::run::restore`]'s.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use kvm_bindings::{kvm_clock_data, kvm_mp_state, CpuId};

use vm_superio::Serial;

use super::error::SnapshotError;
use super::format::{Container, FormatError, SectionInfo, PAGES_SECTION};
use super::state::{bounds, IrqchipState, Meta, Snapshot, VcpuState, IRQCHIP_SECTIONS};
use crate::arch::boot::Platform;
use crate::arch::layout::MAX_MEM_MIB;
use crate::cpuid::{GuestCpuid, Policy};
use crate::devices::{Devices, SerialIrq, SerialSink};
use crate::error::{Error, Result, VcpuError};
use crate::vstate::vcpu::{self, MSR_IA32_TSC_DEADLINE};

/// The largest snapshot file this vmm reads: the largest guest RAM stored
/// page by page, plus 64 MiB for everything else (run list, vCPU state,
/// serial output). A larger file is refused from its size alone.
pub const MAX_SNAPSHOT_BYTES: u64 = (MAX_MEM_MIB << 20) + (64 << 20);

/// A snapshot file opened, verified and decoded but for its stored pages,
/// which stay in the file: what `vmm snapshot info` and `vmm restore`
/// both start from ([`open`]).
pub struct Opened {
    /// The section table.
    pub sections: Vec<SectionInfo>,
    /// The file's length.
    pub file_bytes: u64,
    /// Its container format version (2 or 3).
    pub version: u32,
    /// The decoded state; its memory's pages are
    /// [`super::sparse::SparseMemory::in_file`].
    pub snapshot: Snapshot,
    /// The file, open for reading (a restore maps the pages from it).
    pub file: File,
}

/// Open, verify and decode a snapshot file, reading nothing in bulk: a
/// regular file of at most [`MAX_SNAPSHOT_BYTES`]; its header and section
/// table checked, with every section's length against its kind (the
/// rules of docs/snapshot-format.md, "Section lengths"), before any
/// section body is read; then `meta`, whose RAM size bounds the memory
/// sections; then the other sections (each small by
/// now), CRC32 checked; the stored pages are left in the file, their
/// length checked against the page index. The file is only read.
///
/// # Errors
///
/// [`SnapshotError::Input`] for a file that cannot be used,
/// [`SnapshotError::Format`] naming the broken rule.
pub fn open(path: &Path) -> std::result::Result<Opened, SnapshotError> {
    open_with(path, |_| ()).map(|(o, ())| o)
}

/// [`open`], calling `on_open` on the file as soon as it is open, before
/// a byte of it is read (a restore takes its lease there).
fn open_with<T>(
    path: &Path,
    on_open: impl FnOnce(&File) -> T,
) -> std::result::Result<(Opened, T), SnapshotError> {
    let format = |source| SnapshotError::Format {
        path: path.to_path_buf(),
        source,
    };
    let read = |e| SnapshotError::from_read(path, e);
    let mut file = crate::input::open_regular(path, "snapshot", MAX_SNAPSHOT_BYTES)
        .map_err(|source| SnapshotError::Input { source })?;
    let opened = on_open(file.file());
    let file_bytes = file.len();
    let table = Container::read_table(&mut file).map_err(read)?;
    bounds::check_table(&table.entries).map_err(format)?;
    let mut c = Container::read_sections(&mut file, &table, |e| e.name == "meta").map_err(read)?;
    let meta = c
        .get("meta")
        .ok_or_else(|| format(FormatError::Malformed("section \"meta\" is missing".into())))
        .and_then(|b| Meta::from_section(b).map_err(format))?;
    // A RAM size no guest can have is the validation's to name; the
    // static bound holds meanwhile.
    let ram = meta.mem_mib.saturating_mul(1 << 20).min(MAX_MEM_MIB << 20);
    bounds::check_memory(&table.entries, ram).map_err(format)?;
    let rest = Container::read_sections(&mut file, &table, |e| {
        e.name != "meta" && e.name != PAGES_SECTION
    })
    .map_err(read)?;
    c.merge(rest, &table);
    let pages = table
        .entries
        .iter()
        .find(|e| e.name == PAGES_SECTION)
        .ok_or_else(|| {
            format(FormatError::Malformed(format!(
                "section \"{PAGES_SECTION}\" is missing"
            )))
        })?;
    let snapshot = Snapshot::from_container_mapped(&c, pages).map_err(format)?;
    let o = Opened {
        version: table.header.version,
        sections: table.entries,
        file_bytes,
        snapshot,
        file: file.into_file(),
    };
    Ok((o, opened))
}

/// [`open`], for a restore: the snapshot, the open file, and whether it
/// holds a read lease, taken as soon as it was open, before a byte of it
/// was read (`super::pager::take_lease`: whoever would write it waits
/// until the restore has every page it needs).
///
/// # Errors
///
/// As [`open`].
pub fn load_mapped(path: &Path) -> std::result::Result<(Snapshot, File, bool), SnapshotError> {
    let (o, leased) = open_with(path, |f| super::pager::take_lease(f).is_ok())?;
    Ok((o.snapshot, o.file, leased))
}

/// Check the CRC32 of stored pages left in `file` (read in 1 MiB pieces):
/// `--verify-memory`. Nothing to do for pages already read (and checked).
pub fn verify_pages(
    path: &Path,
    snap: &Snapshot,
    file: &File,
) -> std::result::Result<(), SnapshotError> {
    let Some(e) = &snap.memory.in_file else {
        return Ok(());
    };
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; (1 << 20).min(e.length as usize)];
    let mut at = 0u64;
    while at < e.length {
        let n = buf.len().min((e.length - at) as usize);
        file.read_exact_at(&mut buf[..n], e.offset + at)
            .map_err(|source| SnapshotError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    let computed = hasher.finalize();
    if computed != e.crc32 {
        return Err(SnapshotError::Format {
            path: path.to_path_buf(),
            source: FormatError::Checksum {
                what: format!("section \"{PAGES_SECTION}\""),
                stored: e.crc32,
                computed,
            },
        });
    }
    Ok(())
}

/// The VM's interrupt controllers as saved: both PICs and the IOAPIC
/// (`KVM_SET_IRQCHIP`), and the PIT when the source had one
/// (`KVM_CREATE_PIT2`, then `KVM_SET_PIT2`).
pub(crate) fn load_irqchip(vm: &kvm_ioctls::VmFd, irq: &IrqchipState) -> Result<()> {
    for ((_, section), chip) in
        IRQCHIP_SECTIONS
            .iter()
            .zip([&irq.pic_master, &irq.pic_slave, &irq.ioapic])
    {
        vm.set_irqchip(chip)
            .map_err(|source| VcpuError::VmStateRefused {
                ioctl: "KVM_SET_IRQCHIP",
                section: section.to_string(),
                source,
            })?;
    }
    if let Some(pit) = &irq.pit {
        // As `vmm run` made it: the speaker port answered in the kernel.
        crate::vstate::pc::create_pit(vm)?;
        vm.set_pit2(pit)
            .map_err(|source| VcpuError::VmStateRefused {
                ioctl: "KVM_SET_PIT2",
                section: "pit".into(),
                source,
            })?;
    }
    if let Some(clock) = &irq.clock {
        // The time it had, not the flags KVM_GET_CLOCK reported with it
        // (KVM_SET_CLOCK refuses most of them).
        let clock = kvm_clock_data {
            clock: clock.clock,
            ..Default::default()
        };
        vm.set_clock(&clock)
            .map_err(|source| VcpuError::VmStateRefused {
                ioctl: "KVM_SET_CLOCK",
                section: "clock".into(),
                source,
            })?;
    }
    Ok(())
}

/// Load everything but the xsave image into a vCPU, in KVM's order.
/// Returns the guest's TSC rate.
pub(crate) fn load_vcpu(
    vcpu: &kvm_ioctls::VcpuFd,
    v: &VcpuState,
    saved_tsc_khz: u32,
    resolved: &GuestCpuid,
    policy: &mut Policy,
) -> Result<u32> {
    // The saved table, checked against the policy it was built from.
    let saved = GuestCpuid {
        cpuid: CpuId::from_entries(&v.cpuid).map_err(VcpuError::CpuidTable)?,
        ..resolved.clone()
    };
    policy.cpuid_check = Some(vcpu::set_cpuid(vcpu, &saved).map_err(|e| match e {
        Error::Kvm { what, source } if what == "KVM_SET_CPUID2" => refused(
            what,
            v,
            "cpuid",
            "CPUID table",
            format!(
                "likely: a leaf this KVM cannot offer ({} entries; leaf 0xD sizes or feature bits beyond KVM_GET_SUPPORTED_CPUID)",
                v.cpuid.len()
            ),
        )(source),
        e => e,
    })?);

    // The guest converts cycles with the rate it was told: keep it.
    let tsc_khz = keep_tsc_rate(vcpu, saved_tsc_khz);
    // KVM ignores a TSC deadline unless the LAPIC just loaded has its
    // timer in TSC-deadline mode: lost before it, the restored Linux's
    // next timer interrupt never comes.
    let (after_lapic, msrs): (Vec<_>, Vec<_>) = v
        .msrs
        .iter()
        .copied()
        .partition(|&(i, _)| loaded_after_the_lapic(v, i));
    set_registers(vcpu, v, &msrs)?;
    set_apic_and_events(vcpu, v)?;
    if !after_lapic.is_empty() {
        vcpu::set_msrs(vcpu, &after_lapic)?;
    }
    Ok(tsc_khz)
}

/// Whether MSR `index` of `v` is loaded after its LAPIC: the TSC deadline,
/// when the vCPU has an in-kernel LAPIC.
fn loaded_after_the_lapic(v: &VcpuState, index: u32) -> bool {
    index == MSR_IA32_TSC_DEADLINE && v.lapic.is_some()
}

/// The guest converts cycles with the rate it was told: keep it, when
/// KVM lets this vCPU run at it. Returns the vCPU's rate.
fn keep_tsc_rate(vcpu: &kvm_ioctls::VcpuFd, saved_tsc_khz: u32) -> u32 {
    let mut tsc_khz = vcpu.get_tsc_khz().unwrap_or(0);
    if saved_tsc_khz != 0 && tsc_khz != saved_tsc_khz {
        match vcpu.set_tsc_khz(saved_tsc_khz) {
            Ok(()) => tsc_khz = saved_tsc_khz,
            Err(e) => crate::output::terminal::line(format_args!(
                "vmm: warning: the guest's TSC ran at {saved_tsc_khz} kHz, this vCPU's at {tsc_khz} kHz \
                 and KVM_SET_TSC_KHZ failed ({e}): the guest's time measurements will be off"
            )),
        }
    }
    tsc_khz
}

/// The special and general registers, the XCRs and `msrs` (the vCPU's
/// MSRs but those loaded after its LAPIC), in KVM's order, each refusal
/// naming the fields that commonly cause it.
fn set_registers(vcpu: &kvm_ioctls::VcpuFd, v: &VcpuState, msrs: &[(u32, u64)]) -> Result<()> {
    let s = &v.sregs;
    vcpu.set_sregs(s).map_err(refused(
        "KVM_SET_SREGS",
        v,
        "sregs",
        "segment/control registers",
        format!(
            "likely: CR0 {:#x}, CR4 {:#x} or EFER {:#x} has bits this host's KVM does not allow \
             (CR4 features the vCPU's CPUID lacks, EFER.LMA without CR0.PG) or CS/SS \
             (selector {:#x}/{:#x}, type {}/{}, DPL {}/{}) are inconsistent",
            s.cr0,
            s.cr4,
            s.efer,
            s.cs.selector,
            s.ss.selector,
            s.cs.type_,
            s.ss.type_,
            s.cs.dpl,
            s.ss.dpl
        ),
    ))?;
    vcpu.set_regs(&v.regs).map_err(refused(
        "KVM_SET_REGS",
        v,
        "regs",
        "general registers",
        format!("likely: RFLAGS {:#x}", v.regs.rflags),
    ))?;
    vcpu::set_xcrs(vcpu, &v.xcrs).map_err(|e| match e {
        Error::Kvm { what, source } if what == "KVM_SET_XCRS" => refused(
            what,
            v,
            "xcrs",
            "extended control registers",
            format!(
                "likely: XCR0 {:#x} enables state the vCPU's CPUID leaf 0xD does not offer",
                v.xcr0().unwrap_or(0)
            ),
        )(source),
        e => e,
    })?;
    vcpu::set_msrs(vcpu, msrs)?;
    Ok(())
}

/// The LAPIC (after the special registers: its base and enable bit are in
/// sregs.apic_base), then the events, MP state and debug registers it
/// gates, each only when the snapshot has it.
fn set_apic_and_events(vcpu: &kvm_ioctls::VcpuFd, v: &VcpuState) -> Result<()> {
    if let Some(lapic) = &v.lapic {
        vcpu.set_lapic(lapic).map_err(refused(
            "KVM_SET_LAPIC",
            v,
            "lapic",
            "local APIC registers",
            format!(
                "likely: the APIC base {:#x} disables the local APIC",
                v.sregs.apic_base
            ),
        ))?;
    }
    if let Some(events) = &v.events {
        vcpu.set_vcpu_events(events).map_err(refused(
            "KVM_SET_VCPU_EVENTS",
            v,
            "events",
            "pending events",
            format!(
                "likely: exception injected {} vector {} / NMI {} / flags {:#x}",
                events.exception.injected, events.exception.nr, events.nmi.injected, events.flags
            ),
        ))?;
    }
    if let Some(mp_state) = v.mp_state {
        vcpu.set_mp_state(kvm_mp_state { mp_state })
            .map_err(refused(
                "KVM_SET_MP_STATE",
                v,
                "mp_state",
                "multiprocessing state",
                format!("likely: mp_state {mp_state} is not one this KVM accepts here"),
            ))?;
    }
    if let Some(d) = &v.debugregs {
        vcpu.set_debug_regs(d).map_err(refused(
            "KVM_SET_DEBUGREGS",
            v,
            "debugregs",
            "debug registers",
            format!(
                "likely: DR6 {:#x} or DR7 {:#x} has bits set above bit 31",
                d.dr6, d.dr7
            ),
        ))?;
    }
    Ok(())
}

/// The error for a state KVM refused: the ioctl, the vCPU, the section it
/// came from and the fields that commonly cause the refusal.
pub(crate) fn refused(
    ioctl: &'static str,
    v: &VcpuState,
    section: &str,
    what: &'static str,
    likely: String,
) -> impl FnOnce(kvm_ioctls::Error) -> Error {
    let section = format!("vcpu{}.{section}", v.id);
    let vcpu = v.id;
    move |source| {
        VcpuError::StateRefused {
            ioctl,
            vcpu,
            what,
            section,
            likely,
            source,
        }
        .into()
    }
}

/// The port bus with COM1 in its saved state.
///
/// A PC (`meta.platform` `pc`) gets its devices back as `vmm run` made
/// them: COM1's interrupt on IRQ 4 through `vm`'s irqchip (loaded before),
/// the i8042 reset.
pub(crate) fn restored_devices(
    sink: SerialSink,
    meta: &Meta,
    vm: &kvm_ioctls::VmFd,
) -> Result<Devices> {
    let pc = meta.platform() == Some(Platform::Pc);
    let fresh = Devices::new(sink);
    let out = fresh.serial.into_writer();
    let irq = if pc {
        crate::vstate::pc::serial_irq(vm)?
    } else {
        SerialIrq::Polled
    };
    let state = vm_superio::serial::SerialState::from(&meta.serial);
    let serial = Serial::from_state(&state, irq, vm_superio::serial::NoEvents, out)
        .map_err(|e| VcpuError::UartState(format!("{e:?}")))?;
    Ok(Devices {
        serial,
        i8042: pc,
        ..fresh
    })
}
