//! vCPU ioctls the VMM composes: the boot vCPU's configuration, XCR0 and
//! the other XCRs, xsave images in and out (`KVM_GET/SET_XSAVE[2]`), MSR
//! lists, and completing pending I/O without entering the guest.
//!
//! At creation the VMM sets XCR0 = 0x1 (the architectural reset value: the
//! guest enables more itself with XSETBV) and loads an xsave image from the
//! xstate crate whose XSTATE_BV marks only x87 and SSE as initialised. The
//! deliberately wrong `--init-xstate all` marks all of the policy's XCR0,
//! reproducing the illumos bug where AVX upper state looked live to the CPU.

use kvm_bindings::{kvm_msr_entry, Msrs, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::VcpuFd;
use vm_memory::GuestMemoryMmap;
use xstate::{InitMode, XfeatureMask, XsaveBuf, XsaveInfo};

use crate::arch::boot::BootEntry;
use crate::arch::regs::setup_entry;
use crate::cpuid::{self, CpuidCheck, GuestCpuid};
use crate::error::{Error, Result, VcpuError, XstateError};

/// XCR0 after reset: x87 only.
const XCR0_RESET: u64 = 0x1;

/// MSRs a 64-bit guest's state lives in, saved where KVM lists them in
/// KVM_GET_MSR_INDEX_LIST. Segment bases FS/GS and EFER also travel in
/// `kvm_sregs`; saving them here too is harmless and keeps the set
/// self-contained. The TSC goes last so it is restored last.
pub const SAVED_MSRS: &[(u32, &str)] = &[
    (0x0000_0174, "IA32_SYSENTER_CS"),
    (0x0000_0175, "IA32_SYSENTER_ESP"),
    (0x0000_0176, "IA32_SYSENTER_EIP"),
    (0x0000_0277, "IA32_PAT"),
    (0x0000_01a0, "IA32_MISC_ENABLE"),
    (MSR_IA32_XSS, "IA32_XSS"),
    (0xc000_0080, "EFER"),
    (0xc000_0081, "STAR"),
    (0xc000_0082, "LSTAR"),
    (0xc000_0083, "CSTAR"),
    (0xc000_0084, "SFMASK"),
    (0xc000_0100, "FS_BASE"),
    (0xc000_0101, "GS_BASE"),
    (0xc000_0102, "KERNEL_GS_BASE"),
    (0xc000_0103, "TSC_AUX"),
    (0x0000_003b, "IA32_TSC_ADJUST"),
    // KVM's paravirtual MSRs, which a Linux guest that finds KVM's
    // signature leaf enables: its clock (kvmclock), wall clock, steal
    // time, paravirtual EOI, async page faults (the interrupt vector
    // before the enable, which KVM checks against it) and poll control.
    // Each holds a guest address KVM writes to; lost, the restored guest's
    // kvmclock page stops being updated and its time stands still.
    (0x4b56_4d00, "KVM_WALL_CLOCK_NEW"),
    (0x4b56_4d01, "KVM_SYSTEM_TIME_NEW"),
    (0x4b56_4d03, "KVM_STEAL_TIME"),
    (0x4b56_4d04, "KVM_PV_EOI_EN"),
    (0x4b56_4d06, "KVM_ASYNC_PF_INT"),
    (0x4b56_4d02, "KVM_ASYNC_PF_EN"),
    (0x4b56_4d05, "KVM_POLL_CONTROL"),
    (0x0000_0010, "IA32_TSC"),
    // After the TSC it is compared with; loaded after the LAPIC too
    // (`snapshot::load`), as KVM ignores it unless the LAPIC timer is in
    // TSC-deadline mode.
    (MSR_IA32_TSC_DEADLINE, "IA32_TSC_DEADLINE"),
];

/// Whether MSR `index` at 0 is what a new vCPU has and means "not in use"
/// (KVM's paravirtual MSRs: off; the TSC deadline: disarmed): a snapshot
/// leaves it out then. A guest that never enabled them (ours) then needs
/// none of them, and KVM refuses some even at 0 without an in-kernel LAPIC
/// (`KVM_ASYNC_PF_INT`).
pub fn zero_is_unused(index: u32) -> bool {
    index == MSR_IA32_TSC_DEADLINE || (0x4b56_4d00..=0x4b56_4dff).contains(&index)
}

/// `IA32_TSC_DEADLINE`: the LAPIC timer's deadline in TSC-deadline mode
/// (Linux's timer on a CPU that offers it).
pub const MSR_IA32_TSC_DEADLINE: u32 = 0x0000_06e0;

/// `IA32_XSS`: the supervisor state components enabled (XCR0's counterpart).
pub const MSR_IA32_XSS: u32 = 0x0000_0da0;

/// The name of a saved MSR, for messages.
fn msr_name(index: u32) -> String {
    SAVED_MSRS
        .iter()
        .find(|(i, _)| *i == index)
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| format!("MSR {index:#x}"))
}

/// Give the boot vCPU the guest CPUID, the state of `entry` (PVH or the
/// direct 64-bit entry), XCR0 = reset value and the initial xsave image.
pub fn configure_boot_vcpu(
    vcpu: &VcpuFd,
    mem: &GuestMemoryMmap,
    entry: BootEntry,
    guest_cpuid: &GuestCpuid,
    info: &XsaveInfo,
    init: InitMode,
    xsave2_size: usize,
) -> Result<CpuidCheck> {
    let check = set_cpuid(vcpu, guest_cpuid)?;

    let mut sregs = vcpu.get_sregs().map_err(Error::kvm("KVM_GET_SREGS"))?;
    let regs = setup_entry(mem, &mut sregs, entry)?;
    vcpu.set_sregs(&sregs)
        .map_err(Error::kvm("KVM_SET_SREGS"))?;
    vcpu.set_regs(&regs).map_err(Error::kvm("KVM_SET_REGS"))?;

    set_xcr0(vcpu, XCR0_RESET)?;
    let image = initial_image(info, guest_cpuid.xcr0, init)?;
    set_xsave(vcpu, &image, xsave2_size)?;
    Ok(check)
}

/// Give an application processor the guest CPUID (its own APIC ID, see
/// `super::smp::cpuid_for`), XCR0 = reset value and the same initial
/// xsave image as the boot vCPU. Its registers stay KVM's INIT state: the
/// guest's SIPI decides where it starts.
pub fn configure_ap(
    vcpu: &VcpuFd,
    index: u32,
    guest_cpuid: &GuestCpuid,
    info: &XsaveInfo,
    init: InitMode,
    xsave2_size: usize,
) -> Result<()> {
    set_cpuid(vcpu, &super::smp::cpuid_for(guest_cpuid, index))?;
    set_xcr0(vcpu, XCR0_RESET)?;
    let image = initial_image(info, guest_cpuid.xcr0, init)?;
    set_xsave(vcpu, &image, xsave2_size)
}

/// `KVM_SET_CPUID2` with `table`, then read back what KVM holds and compare
/// it with the policy (some KVMs ignore the table: see [`CpuidCheck`]).
pub fn set_cpuid(vcpu: &VcpuFd, table: &GuestCpuid) -> Result<CpuidCheck> {
    vcpu.set_cpuid2(&table.cpuid)
        .map_err(Error::kvm("KVM_SET_CPUID2"))?;
    let effective = vcpu
        .get_cpuid2(KVM_MAX_CPUID_ENTRIES)
        .map_err(Error::kvm("KVM_GET_CPUID2"))?;
    Ok(cpuid::verify(table, &effective))
}

/// The standard-format image a vCPU starts with for this XCR0.
fn initial_image(info: &XsaveInfo, xcr0: XfeatureMask, init: InitMode) -> Result<XsaveBuf> {
    XsaveBuf::init(info, xcr0, init)
        .map_err(|source| XstateError::InitialImage { xcr0, source }.into())
}

pub use crate::xstate_manager::io::{get_xcr0, get_xcrs, get_xsave, set_xcr0, set_xcrs, set_xsave};

/// (index, value) of the MSRs read, and the indices KVM refused to read.
pub type MsrValues = (Vec<(u32, u64)>, Vec<u32>);

/// Read the vCPU's MSRs; those KVM refuses to read are returned apart.
pub fn get_msrs(vcpu: &VcpuFd, wanted: &[u32]) -> Result<MsrValues> {
    let mut want: Vec<u32> = wanted.to_vec();
    let mut unreadable = Vec::new();
    loop {
        let mut msrs = msr_list(want.iter().map(|&index| (index, 0)))?;
        let n = vcpu
            .get_msrs(&mut msrs)
            .map_err(Error::kvm("KVM_GET_MSRS"))?;
        if n == want.len() {
            let got = msrs.as_slice().iter().map(|e| (e.index, e.data)).collect();
            return Ok((got, unreadable));
        }
        // KVM stops at the first MSR it cannot read: drop it and retry.
        unreadable.push(want.remove(n));
    }
}

/// Write MSRs, (index, value) pairs, in order; an MSR KVM refuses is an
/// error naming it.
pub fn set_msrs(vcpu: &VcpuFd, values: &[(u32, u64)]) -> Result<()> {
    let msrs = msr_list(values.iter().copied())?;
    let n = vcpu.set_msrs(&msrs).map_err(Error::kvm("KVM_SET_MSRS"))?;
    if let Some(&(index, value)) = values.get(n) {
        return Err(VcpuError::MsrRefused {
            name: msr_name(index),
            index,
            value,
        }
        .into());
    }
    Ok(())
}

fn msr_list(values: impl Iterator<Item = (u32, u64)>) -> Result<Msrs> {
    let entries: Vec<kvm_msr_entry> = values
        .map(|(index, data)| kvm_msr_entry {
            index,
            reserved: 0,
            data,
        })
        .collect();
    Ok(Msrs::from_entries(&entries).map_err(VcpuError::MsrAlloc)?)
}

/// Complete the last exit's I/O without entering the guest: `KVM_RUN`
/// with `immediate_exit` set finishes the exit's emulation (loads an `IN`'s
/// data into RAX, steps RIP past an `OUT`) and returns `EINTR`. The vCPU's
/// registers are then the guest's own.
pub fn complete_pending_io(vcpu: &mut VcpuFd) -> Result<()> {
    vcpu.set_kvm_immediate_exit(1);
    let r = vcpu.run().map(|_| ());
    vcpu.set_kvm_immediate_exit(0);
    match r {
        Err(e) if e.errno() == libc::EINTR => Ok(()),
        Err(e) => Err(Error::Kvm {
            what: "KVM_RUN (immediate_exit, completing pending I/O)",
            source: e,
        }),
        Ok(()) => Err(VcpuError::ImmediateExitEntered.into()),
    }
}
