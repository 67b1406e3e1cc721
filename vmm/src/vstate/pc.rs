//! The PC platform a stock Linux kernel needs, as Firecracker and Cloud
//! Hypervisor give it: a full in-kernel irqchip (both 8259 PICs, the
//! IOAPIC, the LAPICs), the in-kernel 8254 PIT (`KVM_CREATE_PIT2`), and
//! COM1's IRQ 4 wired to the irqchip through an eventfd (`KVM_IRQFD`).
//!
//! Without the PIT and an irqchip Linux cannot calibrate its TSC or get a
//! timer interrupt, and stops early in its boot (`tsc: Unable to calibrate
//! against PIT`, `Failed to register legacy timer interrupt`). The
//! embedded guest needs none of it (it polls, and reads its TSC rate from
//! CPUID), so only kernels that are not ours get it: see
//! `crate::arch::boot::Platform`.

use kvm_bindings::{kvm_pit_config, KVM_PIT_SPEAKER_DUMMY};
use kvm_ioctls::VmFd;
use vmm_sys_util::eventfd::EventFd;

use crate::devices::SerialIrq;
use crate::error::{Error, Result};

/// COM1's ISA interrupt line.
pub const COM1_IRQ: u32 = 4;

/// Create the in-kernel PIT (after the irqchip, which it feeds). Its PC
/// speaker port (0x61) is the dummy KVM offers, so a guest reading it for
/// the PIT's channel 2 gate gets an answer without an exit.
///
/// # Errors
///
/// KVM refusing `KVM_CREATE_PIT2` (no in-kernel irqchip, or one PIT already).
pub fn create_pit(vm: &VmFd) -> Result<()> {
    let config = kvm_pit_config {
        flags: KVM_PIT_SPEAKER_DUMMY,
        ..Default::default()
    };
    vm.create_pit2(config)
        .map_err(Error::kvm("KVM_CREATE_PIT2"))
}

/// COM1's interrupt as an eventfd KVM injects as [`COM1_IRQ`].
///
/// # Errors
///
/// No eventfd, or KVM refusing `KVM_IRQFD` (no in-kernel irqchip).
pub fn serial_irq(vm: &VmFd) -> Result<SerialIrq> {
    let evt = EventFd::new(libc::EFD_NONBLOCK)
        .map_err(|e| Error::kvm("eventfd for COM1 IRQ")(e.into()))?;
    vm.register_irqfd(&evt, COM1_IRQ)
        .map_err(Error::kvm("KVM_IRQFD (COM1's IRQ 4)"))?;
    Ok(SerialIrq::Line(evt))
}
