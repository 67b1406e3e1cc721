//! The host's KVM: opening `/dev/kvm`, checking the capabilities the VMM
//! relies on, and what KVM can give a guest.

use kvm_bindings::{CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Cap, Kvm};

use crate::cpuid::KvmXstate;
use crate::error::{Error, Result};

/// An open `/dev/kvm` with its supported CPUID and xstate view.
pub struct HostKvm {
    pub kvm: Kvm,
    /// `KVM_GET_SUPPORTED_CPUID`.
    pub supported_cpuid: CpuId,
    /// Leaf 0xD of the supported CPUID, parsed.
    pub xstate: KvmXstate,
    /// `KVM_CAP_XSAVE2`: the xsave buffer size KVM needs for everything the
    /// guest may enable (0 when the capability is absent: 4 KiB suffices).
    pub xsave2_size: usize,
}

impl HostKvm {
    /// Open `/dev/kvm` and check what the VMM needs. A missing device or a
    /// permission problem is a one-line error.
    pub fn open() -> Result<Self> {
        let kvm = Kvm::new().map_err(Error::KvmUnavailable)?;
        for (cap, name) in [
            (Cap::Xsave, "KVM_CAP_XSAVE"),
            (Cap::Xcrs, "KVM_CAP_XCRS"),
            (Cap::ExtCpuid, "KVM_CAP_EXT_CPUID"),
            (Cap::UserMemory, "KVM_CAP_USER_MEMORY"),
        ] {
            if !kvm.check_extension(cap) {
                return Err(Error::KvmCapability(name));
            }
        }
        let supported_cpuid = kvm
            .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
            .map_err(Error::kvm("KVM_GET_SUPPORTED_CPUID"))?;
        let xstate = KvmXstate::from_supported(&supported_cpuid)?;
        let xsave2_size = kvm.check_extension_int(Cap::Xsave2).max(0) as usize;
        Ok(Self {
            kvm,
            supported_cpuid,
            xstate,
            xsave2_size,
        })
    }
}
