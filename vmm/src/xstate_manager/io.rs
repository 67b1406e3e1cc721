//! The vCPU ioctls that move extended state: the XCRs (`KVM_GET/SET_XCRS`)
//! and the xsave image (`KVM_GET/SET_XSAVE`, `KVM_GET/SET_XSAVE2` beyond
//! the legacy 4 KiB). They live with the xstate manager, the one owner of
//! the guest's xsave state; [`crate::vstate::vcpu`] re-exports them for the
//! machine's other users (boot, snapshot, verify).

use kvm_bindings::{kvm_xcr, kvm_xcrs, Xsave};
use kvm_ioctls::VcpuFd;
use xstate::kvm::KVM_XSAVE_REGION_SIZE;
use xstate::XsaveBuf;

use crate::error::{Error, Result, XstateError};

/// Set the extended control registers, (XCR number, value) pairs, with
/// `KVM_SET_XCRS`.
pub fn set_xcrs(vcpu: &VcpuFd, values: &[(u32, u64)]) -> Result<()> {
    let mut xcrs = kvm_xcrs::default();
    if values.len() > xcrs.xcrs.len() {
        return Err(XstateError::TooManyXcrs {
            count: values.len(),
            max: xcrs.xcrs.len(),
        }
        .into());
    }
    xcrs.nr_xcrs = values.len() as u32;
    for (slot, &(xcr, value)) in xcrs.xcrs.iter_mut().zip(values) {
        *slot = kvm_xcr {
            xcr,
            reserved: 0,
            value,
        };
    }
    vcpu.set_xcrs(&xcrs).map_err(Error::kvm("KVM_SET_XCRS"))
}

/// The extended control registers KVM holds, (XCR number, value) pairs.
pub fn get_xcrs(vcpu: &VcpuFd) -> Result<Vec<(u32, u64)>> {
    let xcrs = vcpu.get_xcrs().map_err(Error::kvm("KVM_GET_XCRS"))?;
    Ok(xcrs
        .xcrs
        .iter()
        .take(xcrs.nr_xcrs as usize)
        .map(|x| (x.xcr, x.value))
        .collect())
}

/// Set XCR0 with `KVM_SET_XCRS`.
pub fn set_xcr0(vcpu: &VcpuFd, xcr0: u64) -> Result<()> {
    set_xcrs(vcpu, &[(0, xcr0)])
}

/// Read XCR0 with `KVM_GET_XCRS`.
pub fn get_xcr0(vcpu: &VcpuFd) -> Result<u64> {
    get_xcrs(vcpu)?
        .into_iter()
        .find(|&(xcr, _)| xcr == 0)
        .map(|(_, value)| value)
        .ok_or_else(|| XstateError::NoXcr0.into())
}

/// Write a standard-format xsave image: `KVM_SET_XSAVE` when it fits the
/// legacy 4 KiB region, `KVM_SET_XSAVE2` sized by `KVM_CAP_XSAVE2` beyond
/// (AMX tile data alone is 8 KiB; truncating it is how VMMs lose it).
pub fn set_xsave(vcpu: &VcpuFd, image: &XsaveBuf, xsave2_size: usize) -> Result<()> {
    let refused = |source| XstateError::KvmImage {
        len: image.len(),
        source,
    };
    if image.len() <= KVM_XSAVE_REGION_SIZE || xsave2_size <= KVM_XSAVE_REGION_SIZE {
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
    if xsave2_size <= KVM_XSAVE_REGION_SIZE {
        let xsave = vcpu.get_xsave().map_err(Error::kvm("KVM_GET_XSAVE"))?;
        return Ok(XsaveBuf::from_kvm_xsave(&xsave));
    }
    let mut xsave = Xsave::new(xstate::kvm::xsave2_fam_len(xsave2_size)).map_err(|source| {
        XstateError::Xsave2Alloc {
            size: xsave2_size,
            source,
        }
    })?;
    // SAFETY: `xsave` holds the full size KVM_CAP_XSAVE2 reported.
    unsafe { vcpu.get_xsave2(&mut xsave) }.map_err(Error::kvm("KVM_GET_XSAVE2"))?;
    Ok(XsaveBuf::from_kvm_xsave2(&xsave))
}
