//! The host's KVM: opening `/dev/kvm`, checking the capabilities the VMM
//! relies on, and what KVM can give a guest. Every capability is read here,
//! once, with one meaning.

use kvm_bindings::{CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Cap, Kvm};
use xstate::kvm::KVM_XSAVE_REGION_SIZE;
use xstate::{XfeatureMask, XsaveInfo};

use crate::error::{Error, Result};

/// The extended-state view of KVM's supported CPUID.
#[derive(Clone, Debug)]
pub struct KvmXstate {
    /// Leaf 0xD of `KVM_GET_SUPPORTED_CPUID`, parsed.
    pub info: XsaveInfo,
}

impl KvmXstate {
    /// Parse leaf 0xD of a supported-CPUID table.
    fn from_supported(supported: &CpuId) -> Result<Self> {
        let info = XsaveInfo::from_kvm_cpuid(supported).map_err(Error::KvmCpuid)?;
        Ok(Self { info })
    }

    /// User state KVM can give a guest.
    pub fn supported_xcr0(&self) -> XfeatureMask {
        self.info.supported_xcr0()
    }
}

/// An open `/dev/kvm` with its supported CPUID and xstate view.
pub struct HostKvm {
    /// The system file descriptor (VMs are created from it).
    pub kvm: Kvm,
    /// `KVM_GET_SUPPORTED_CPUID`.
    pub supported_cpuid: CpuId,
    /// Leaf 0xD of the supported CPUID, parsed.
    pub xstate: KvmXstate,
    /// The size of the xsave image KVM exchanges: `KVM_CAP_XSAVE2` (all the
    /// state a guest may enable), or the legacy 4 KiB `kvm_xsave` region
    /// where the capability is absent; never less than 4 KiB. Above 4 KiB
    /// the VMM must use `KVM_GET/SET_XSAVE2`.
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
        // 0 (absent) and anything below the legacy region mean the same:
        // KVM_GET_XSAVE's 4 KiB holds everything.
        let xsave2_size =
            (kvm.check_extension_int(Cap::Xsave2).max(0) as usize).max(KVM_XSAVE_REGION_SIZE);
        Ok(Self {
            kvm,
            supported_cpuid,
            xstate,
            xsave2_size,
        })
    }
}
