//! The host's KVM: opening `/dev/kvm`, checking the capabilities the VMM
//! relies on, and what KVM can give a guest. Every capability is read here,
//! once, with one meaning.

use kvm_bindings::{CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Cap, Kvm};
use xstate::kvm::KVM_XSAVE_REGION_SIZE;
use xstate::{XfeatureMask, XsaveInfo};

use crate::error::{Error, Result, VcpuError};

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
        let kvm = open_checked()?;
        let supported_cpuid = supported_cpuid(&kvm)?;
        Self::finish(kvm, supported_cpuid)
    }

    /// [`HostKvm::open`], with `work` (building a VM, say) done on this
    /// thread while another reads `KVM_GET_SUPPORTED_CPUID` and then does
    /// `side` (loading the kernel into RAM allocated beforehand, say).
    ///
    /// Why: that ioctl executes CPUID for every leaf it reports, and under
    /// a nested hypervisor each CPUID traps (about 0.4 ms for the whole
    /// table on the development host, as long as creating the VM and its
    /// vCPU). Neither `work` nor `side` gets the table, so neither can
    /// depend on it; the caller validates against it afterwards (a VM built
    /// for a request then refused is dropped unused). Errors come in the
    /// caller's order: `work`'s, then the table's, then `side`'s.
    pub fn open_overlapping<T, S: Send>(
        work: impl FnOnce(&Kvm) -> Result<T>,
        side: impl FnOnce() -> Result<S> + Send,
    ) -> Result<(Self, T, S)> {
        let kvm = open_checked()?;
        let (supported, done, side_done) = std::thread::scope(|s| -> Result<_> {
            let kvm = &kvm;
            let handle = std::thread::Builder::new()
                .name("kvm-cpuid".into())
                .spawn_scoped(s, move || (supported_cpuid(kvm), side()))
                .map_err(|e| Error::Vcpu(VcpuError::SpawnHelper("kvm-cpuid", e)))?;
            let done = work(kvm);
            let (supported, side_done) = handle.join().unwrap_or_else(|_| {
                let lost = || Error::KvmCapability("a KVM_GET_SUPPORTED_CPUID that returns");
                (Err(lost()), Err(lost()))
            });
            Ok((supported, done, side_done))
        })?;
        let done = done?;
        let host = Self::finish(kvm, supported?)?;
        Ok((host, done, side_done?))
    }

    fn finish(kvm: Kvm, supported_cpuid: CpuId) -> Result<Self> {
        let xstate = KvmXstate::from_supported(&supported_cpuid)?;
        // Read after any dynamic-xfeature permission (crate::arch::amx): KVM
        // sizes it by what this process may give its guests.
        let xsave2_size = xsave_image_size(kvm.check_extension_int(Cap::Xsave2), &xstate.info)?;
        Ok(Self {
            kvm,
            supported_cpuid,
            xstate,
            xsave2_size,
        })
    }
}

/// `/dev/kvm`, with every capability the VMM relies on checked.
fn open_checked() -> Result<Kvm> {
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
    Ok(kvm)
}

/// `KVM_GET_SUPPORTED_CPUID`.
fn supported_cpuid(kvm: &Kvm) -> Result<CpuId> {
    kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(Error::kvm("KVM_GET_SUPPORTED_CPUID"))
}

/// The xsave image size KVM exchanges, from `KVM_CAP_XSAVE2` (`cap`, 0 when
/// absent): 0 and anything below the legacy region mean KVM_GET_XSAVE's
/// 4 KiB. Refused when smaller than the standard-format size of the user
/// state KVM's own table offers (`info`): every image would be truncated,
/// which is how AMX tile data (8 KiB at offset 0xb00) gets lost.
pub fn xsave_image_size(cap: i32, info: &XsaveInfo) -> Result<usize> {
    let size = usize::try_from(cap).unwrap_or(0).max(KVM_XSAVE_REGION_SIZE);
    let needed = info
        .standard_size(info.supported_xcr0())
        .map_err(|_| Error::KvmCapability("a consistent leaf 0xD layout"))?;
    if (needed as usize) > size {
        return Err(Error::KvmCapability(
            "KVM_CAP_XSAVE2 as large as the state its CPUID table offers \
             (KVM_GET_XSAVE's 4 KiB cannot hold it)",
        ));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xstate::CpuidRegs;

    fn leaf_d(xcr0: u32, max: u32) -> XsaveInfo {
        XsaveInfo::from_leaf_0xd(|i| match i {
            0 => CpuidRegs::new(xcr0, max, max, 0),
            1 => CpuidRegs::new(0x1f, 0, 0, 0),
            2 => CpuidRegs::new(0x100, 0x240, 0, 0),
            5 => CpuidRegs::new(0x40, 0x440, 0, 0),
            6 => CpuidRegs::new(0x200, 0x480, 0, 0),
            7 => CpuidRegs::new(0x400, 0x680, 0, 0),
            9 => CpuidRegs::new(0x8, 0xa80, 0, 0),
            17 => CpuidRegs::new(0x40, 0xac0, 2, 0),
            18 => CpuidRegs::new(0x2000, 0xb00, 6, 0),
            _ => CpuidRegs::default(),
        })
        .unwrap()
    }

    #[test]
    fn xsave_image_is_sized_by_xsave2() {
        // Sapphire Rapids with the AMX permission: 0x2b00 bytes, XSAVE2 needed.
        let amx = leaf_d(0x602e7, 0x2b00);
        assert_eq!(xsave_image_size(0x2b00, &amx).unwrap(), 0x2b00);
        let e = xsave_image_size(0, &amx).unwrap_err().to_string();
        assert!(e.contains("KVM_CAP_XSAVE2"), "{e}");
        assert!(xsave_image_size(4096, &amx).is_err());
        // Without it KVM's table has no AMX and 4 KiB holds everything.
        let no_amx = leaf_d(0x2e7, 0xa88);
        assert_eq!(xsave_image_size(0, &no_amx).unwrap(), 4096);
        assert_eq!(xsave_image_size(-1, &no_amx).unwrap(), 4096);
        assert_eq!(xsave_image_size(0xa88, &no_amx).unwrap(), 4096);
    }
}
