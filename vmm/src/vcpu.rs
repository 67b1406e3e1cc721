//! The boot vCPU: creation, CPUID, and the extended state it starts with.
//!
//! At creation the VMM sets XCR0 = 0x1 (the architectural reset value: the
//! guest enables more itself with XSETBV) and loads an xsave image from the
//! xstate crate whose XSTATE_BV marks only x87 and SSE as initialised. The
//! deliberately wrong `--init-xstate all` marks all of the policy's XCR0,
//! reproducing the illumos bug where AVX upper state looked live to the CPU.

use kvm_bindings::{kvm_xcr, kvm_xcrs, Xsave, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::VcpuFd;
use vm_memory::GuestMemoryMmap;
use xstate::{InitMode, XfeatureMask, XsaveBuf, XsaveInfo};

use crate::boot::{self, LoadedKernel};
use crate::cpuid::{self, CpuidCheck, GuestCpuid};
use crate::error::{Error, Result};

/// Size of the legacy `struct kvm_xsave` region.
pub const KVM_XSAVE_LEGACY_SIZE: usize = 4096;
/// XCR0 after reset: x87 only.
pub const XCR0_RESET: u64 = 0x1;

/// Give the boot vCPU the guest CPUID, the PVH entry state, XCR0 = reset
/// value and the initial xsave image.
pub fn configure_boot_vcpu(
    vcpu: &VcpuFd,
    mem: &GuestMemoryMmap,
    kernel: &LoadedKernel,
    guest_cpuid: &GuestCpuid,
    info: &XsaveInfo,
    init: InitMode,
    xsave2_size: usize,
) -> Result<CpuidCheck> {
    vcpu.set_cpuid2(&guest_cpuid.cpuid)
        .map_err(Error::kvm("KVM_SET_CPUID2"))?;
    let effective = vcpu
        .get_cpuid2(KVM_MAX_CPUID_ENTRIES)
        .map_err(Error::kvm("KVM_GET_CPUID2"))?;
    let check = cpuid::verify(guest_cpuid, &effective);

    let mut sregs = vcpu.get_sregs().map_err(Error::kvm("KVM_GET_SREGS"))?;
    let regs = boot::setup_vcpu_regs(mem, &mut sregs, kernel)?;
    vcpu.set_sregs(&sregs)
        .map_err(Error::kvm("KVM_SET_SREGS"))?;
    vcpu.set_regs(&regs).map_err(Error::kvm("KVM_SET_REGS"))?;

    set_xcr0(vcpu, XCR0_RESET)?;
    let image = initial_image(info, guest_cpuid.xcr0, init)?;
    set_xsave(vcpu, &image, xsave2_size)?;
    Ok(check)
}

/// The standard-format image a vCPU starts with for this XCR0.
pub fn initial_image(info: &XsaveInfo, xcr0: XfeatureMask, init: InitMode) -> Result<XsaveBuf> {
    XsaveBuf::init(info, xcr0, init)
        .map_err(|e| Error::Xstate(format!("initial xsave image for {xcr0:#x}: {e}")))
}

/// Set XCR0 with `KVM_SET_XCRS`.
pub fn set_xcr0(vcpu: &VcpuFd, xcr0: u64) -> Result<()> {
    let mut xcrs = kvm_xcrs {
        nr_xcrs: 1,
        ..Default::default()
    };
    xcrs.xcrs[0] = kvm_xcr {
        xcr: 0,
        reserved: 0,
        value: xcr0,
    };
    vcpu.set_xcrs(&xcrs).map_err(Error::kvm("KVM_SET_XCRS"))
}

/// Read XCR0 with `KVM_GET_XCRS`.
pub fn get_xcr0(vcpu: &VcpuFd) -> Result<u64> {
    let xcrs = vcpu.get_xcrs().map_err(Error::kvm("KVM_GET_XCRS"))?;
    xcrs.xcrs
        .iter()
        .take(xcrs.nr_xcrs as usize)
        .find(|x| x.xcr == 0)
        .map(|x| x.value)
        .ok_or_else(|| Error::Xstate("KVM_GET_XCRS returned no XCR0".into()))
}

/// Write a standard-format xsave image: `KVM_SET_XSAVE` when it fits the
/// legacy 4 KiB region, `KVM_SET_XSAVE2` sized by `KVM_CAP_XSAVE2` beyond
/// (AMX tile data alone is 8 KiB; truncating it is how VMMs lose it).
pub fn set_xsave(vcpu: &VcpuFd, image: &XsaveBuf, xsave2_size: usize) -> Result<()> {
    let refused = |e| Error::Xstate(format!("xsave image of {} bytes: {e}", image.len()));
    if image.len() <= KVM_XSAVE_LEGACY_SIZE || xsave2_size <= KVM_XSAVE_LEGACY_SIZE {
        let xsave = image.to_kvm_xsave().map_err(refused)?;
        // SAFETY: `xsave` is a complete legacy `kvm_xsave` (4 KiB) and the
        // image fits in it, so KVM reads nothing past its end.
        return unsafe { vcpu.set_xsave(&xsave) }.map_err(Error::kvm("KVM_SET_XSAVE"));
    }
    let xsave = image.to_kvm_xsave2(xsave2_size).map_err(refused)?;
    // SAFETY: the wrapper holds the full size KVM_CAP_XSAVE2 reported.
    unsafe { vcpu.set_xsave2(&xsave) }.map_err(Error::kvm("KVM_SET_XSAVE2"))
}

/// Read the vCPU's standard-format image (`KVM_GET_XSAVE2` where the state
/// can exceed 4 KiB).
pub fn get_xsave(vcpu: &VcpuFd, xsave2_size: usize) -> Result<XsaveBuf> {
    if xsave2_size <= KVM_XSAVE_LEGACY_SIZE {
        let xsave = vcpu.get_xsave().map_err(Error::kvm("KVM_GET_XSAVE"))?;
        return Ok(XsaveBuf::from_kvm_xsave(&xsave));
    }
    let mut xsave = Xsave::new(xstate::kvm::xsave2_fam_len(xsave2_size))
        .map_err(|e| Error::Xstate(format!("allocating a {xsave2_size}-byte kvm_xsave2: {e:?}")))?;
    // SAFETY: `xsave` holds the full size KVM_CAP_XSAVE2 reported.
    unsafe { vcpu.get_xsave2(&mut xsave) }.map_err(Error::kvm("KVM_GET_XSAVE2"))?;
    Ok(XsaveBuf::from_kvm_xsave2(&xsave))
}
