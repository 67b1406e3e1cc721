//! What a snapshot is checked against: this host's KVM and CPU, gathered
//! once ([`HostFacts::of`]), or the host a file says it was written on
//! ([`HostFacts::as_written`], for checks without KVM).

use std::sync::OnceLock;

use kvm_bindings::kvm_cpuid_entry2;
use kvm_ioctls::Cap;
use xstate::{XfeatureMask, XsaveBuf, XsaveInfo};

use crate::error::Error;
use crate::kvm::HostKvm;
use crate::snapshot::state::Snapshot;

/// MXCSR_MASK FXSAVE defines for a CPU that reports 0 there.
const MXCSR_MASK_DEFAULT: u32 = 0xffbf;

/// What a snapshot's state is checked against: this host's KVM (its
/// supported CPUID and leaf 0xD, its MSR list, its limits) and this CPU's
/// MXCSR_MASK (what the kernel checks MXCSR against in `KVM_SET_XSAVE`;
/// the file's own MXCSR_MASK field describes the source CPU and is not
/// trusted). Plain data, so [`super::check`] is a pure function.
#[derive(Clone, Debug)]
pub struct HostFacts {
    /// This KVM's leaf 0xD (KVM_GET_SUPPORTED_CPUID).
    pub info: XsaveInfo,
    /// The MXCSR bits this CPU allows.
    pub mxcsr_mask: u32,
    /// `KVM_GET_SUPPORTED_CPUID`: what KVM can offer a guest.
    pub cpuid: Vec<kvm_cpuid_entry2>,
    /// `KVM_GET_MSR_INDEX_LIST`: the MSRs KVM saves and restores.
    pub msrs: Vec<u32>,
    /// `KVM_CAP_MAX_VCPUS`.
    pub max_vcpus: u32,
    /// `KVM_CAP_SPLIT_IRQCHIP`.
    pub split_irqchip: bool,
}

impl HostFacts {
    /// The facts of the KVM `host` and this CPU.
    ///
    /// # Errors
    ///
    /// [`Error::Kvm`] when `KVM_GET_MSR_INDEX_LIST` fails.
    pub fn of(host: &HostKvm) -> Result<Self, Error> {
        let msrs = host
            .kvm
            .get_msr_index_list()
            .map_err(Error::kvm("KVM_GET_MSR_INDEX_LIST"))?;
        Ok(Self {
            info: host.xstate.info,
            mxcsr_mask: host_mxcsr_mask(),
            cpuid: host.supported_cpuid.as_slice().to_vec(),
            msrs: msrs.as_slice().to_vec(),
            max_vcpus: crate::vstate::smp::kvm_max_vcpus(&host.kvm),
            split_irqchip: host.kvm.check_extension(Cap::SplitIrqchip),
        })
    }
}

impl HostFacts {
    /// The host a snapshot says it was written on, as far as the file
    /// tells, for checking a file without KVM (tests, fuzzing): the source
    /// KVM's leaf 0xD, vCPU 0's CPUID table as KVM's supported one, every
    /// MSR this vmm saves listed, a KVM of as many vCPUs as the guest
    /// kernel runs with a split irqchip, the default MXCSR_MASK. `None`
    /// when the file's leaf 0xD is inconsistent.
    pub fn as_written(snap: &Snapshot) -> Option<Self> {
        let mut msrs: Vec<u32> = crate::vstate::vcpu::SAVED_MSRS
            .iter()
            .map(|&(i, _)| i)
            .collect();
        msrs.extend([
            crate::vstate::xfd::MSR_IA32_XFD,
            crate::vstate::xfd::MSR_IA32_XFD_ERR,
        ]);
        Some(Self {
            info: snap.meta.source_info().ok()?,
            mxcsr_mask: MXCSR_MASK_DEFAULT,
            cpuid: snap
                .vcpus
                .first()
                .map(|v| v.cpuid.clone())
                .unwrap_or_default(),
            msrs,
            max_vcpus: crate::vstate::smp::GUEST_MAX_CPUS,
            split_irqchip: true,
        })
    }
}

/// This CPU's MXCSR_MASK, read once with XSAVE of the legacy region (the
/// default 0xFFBF where the CPU reports 0 or cannot XSAVE: then neither can
/// KVM, and the default is what the kernel assumes too).
fn host_mxcsr_mask() -> u32 {
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
