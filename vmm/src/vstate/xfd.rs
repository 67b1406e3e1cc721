//! Extended feature disable (XFD) with the vCPU: `IA32_XFD` (which
//! XFD-capable components, AMX tile data, are armed to trap) and
//! `IA32_XFD_ERR` (which one trapped last, read by the guest's #NM
//! handler). A guest kernel that hands out AMX lazily, as Linux does, keeps
//! its bookkeeping in these two MSRs; a snapshot that dropped them would
//! restore a guest whose next tile instruction traps (or does not) against
//! its own records.
//!
//! They are saved only where this KVM lists them in
//! `KVM_GET_MSR_INDEX_LIST` (hosts with XFD), in their own snapshot section
//! (`vcpuN.xfd`, see [`crate::snapshot::state`]); a snapshot without the
//! section restores as before, and a section of zeros (the reset values)
//! restores on a host without XFD as well.

use kvm_ioctls::VcpuFd;

use super::vcpu;
use crate::error::{Result, VcpuError};

/// `IA32_XFD`: components whose use raises #NM.
pub const MSR_IA32_XFD: u32 = 0x0000_01c4;
/// `IA32_XFD_ERR`: the components whose use last raised #NM.
pub const MSR_IA32_XFD_ERR: u32 = 0x0000_01c5;

/// The two XFD MSRs of one vCPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XfdMsrs {
    /// `IA32_XFD`.
    pub xfd: u64,
    /// `IA32_XFD_ERR`.
    pub xfd_err: u64,
}

impl XfdMsrs {
    /// (index, value) pairs, `IA32_XFD` first.
    pub fn pairs(&self) -> [(u32, u64); 2] {
        [(MSR_IA32_XFD, self.xfd), (MSR_IA32_XFD_ERR, self.xfd_err)]
    }

    /// From (index, value) pairs holding exactly the two MSRs, in any
    /// order; `None` otherwise.
    pub fn from_pairs(pairs: &[(u32, u64)]) -> Option<Self> {
        let find = |i| pairs.iter().find(|&&(k, _)| k == i).map(|&(_, v)| v);
        if pairs.len() != 2 {
            return None;
        }
        Some(Self {
            xfd: find(MSR_IA32_XFD)?,
            xfd_err: find(MSR_IA32_XFD_ERR)?,
        })
    }

    /// Both at their reset value (nothing armed, nothing trapped).
    pub fn is_reset(&self) -> bool {
        self.xfd == 0 && self.xfd_err == 0
    }
}

/// Whether a KVM with this MSR index list saves and restores XFD.
pub fn supported(listed: &[u32]) -> bool {
    listed.contains(&MSR_IA32_XFD) && listed.contains(&MSR_IA32_XFD_ERR)
}

/// Read the vCPU's XFD MSRs, where `supported` (see [`supported`]).
pub fn save(vcpu: &VcpuFd, supported: bool) -> Result<Option<XfdMsrs>> {
    if !supported {
        return Ok(None);
    }
    let (got, unreadable) = vcpu::get_msrs(vcpu, &[MSR_IA32_XFD, MSR_IA32_XFD_ERR])?;
    if !unreadable.is_empty() {
        // Listed yet unreadable: treat as absent, as for the other MSRs.
        return Ok(None);
    }
    Ok(XfdMsrs::from_pairs(&got))
}

/// What restoring `saved` on a KVM that `supported` XFD (or not) means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestorePlan {
    /// No section, or reset values on a host without XFD: nothing to do.
    Nothing,
    /// `KVM_SET_MSRS` with both.
    Set(XfdMsrs),
    /// Armed state this host cannot hold.
    Unsupported(XfdMsrs),
}

/// The restore decision, a pure function.
pub fn plan(saved: Option<XfdMsrs>, supported: bool) -> RestorePlan {
    match saved {
        None => RestorePlan::Nothing,
        Some(m) if supported => RestorePlan::Set(m),
        Some(m) if m.is_reset() => RestorePlan::Nothing,
        Some(m) => RestorePlan::Unsupported(m),
    }
}

/// Restore the XFD MSRs of a snapshot's vCPU (after its CPUID, which
/// decides whether the guest has XFD, and before the xsave image).
pub fn restore(vcpu: &VcpuFd, saved: Option<XfdMsrs>, supported: bool) -> Result<()> {
    match plan(saved, supported) {
        RestorePlan::Nothing => Ok(()),
        RestorePlan::Set(m) => vcpu::set_msrs(vcpu, &m.pairs()),
        RestorePlan::Unsupported(m) => Err(VcpuError::MsrRefused {
            name: "IA32_XFD (this KVM lists no XFD MSRs)".into(),
            index: MSR_IA32_XFD,
            value: m.xfd,
        }
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_round_trip_and_refuse_strangers() {
        let m = XfdMsrs {
            xfd: 1 << 18,
            xfd_err: 1 << 18,
        };
        assert_eq!(XfdMsrs::from_pairs(&m.pairs()), Some(m));
        let swapped = [m.pairs()[1], m.pairs()[0]];
        assert_eq!(XfdMsrs::from_pairs(&swapped), Some(m));
        assert_eq!(XfdMsrs::from_pairs(&m.pairs()[..1]), None);
        assert_eq!(XfdMsrs::from_pairs(&[(MSR_IA32_XFD, 0), (0x10, 0)]), None);
        assert_eq!(
            XfdMsrs::from_pairs(&[(MSR_IA32_XFD, 0), (MSR_IA32_XFD_ERR, 0), (0x10, 0)]),
            None
        );
    }

    #[test]
    fn restore_plan() {
        let armed = XfdMsrs {
            xfd: 1 << 18,
            xfd_err: 0,
        };
        assert!(supported(&[0x10, MSR_IA32_XFD, MSR_IA32_XFD_ERR]));
        assert!(!supported(&[MSR_IA32_XFD]));
        assert_eq!(plan(None, true), RestorePlan::Nothing);
        assert_eq!(plan(Some(armed), true), RestorePlan::Set(armed));
        assert_eq!(plan(Some(XfdMsrs::default()), false), RestorePlan::Nothing);
        assert_eq!(plan(Some(armed), false), RestorePlan::Unsupported(armed));
    }
}
