//! Dynamic xfeatures (AMX tile data) on the host: the permission Linux
//! wants before a guest may use them.
//!
//! Linux hands out XTILEDATA (8 KiB per thread) only on request. For its
//! guests a VMM asks with `arch_prctl(ARCH_REQ_XCOMP_GUEST_PERM, 18)`, and
//! must do so **before** it reads KVM's supported CPUID or
//! `KVM_CAP_XSAVE2` and before it creates any vCPU: until then KVM leaves
//! XTILECFG and XTILEDATA out of its table, sizes the xsave image without
//! them, and a vCPU created earlier keeps the old permission for good.
//! The grant is per process and cannot be taken back, so asking twice is
//! harmless.
//!
//! [`permit_for_request`] decides from the `--xfeatures` request (and the
//! host CPU's leaf 0xD, see [`xstate::dynamic`]) whether to ask, asks, and
//! reads the grant back with `ARCH_GET_XCOMP_GUEST_PERM`. A request that
//! names a dynamic component (by name or number) and is refused is a
//! [`PermissionError`] naming the feature, the call and the errno; a
//! request that only reaches it through "all KVM offers" (the default,
//! `host`, `all`, `-avx`) asks when the CPU has such a component and
//! carries on without it when refused, as KVM then does. The system call sits behind
//! [`XcompPerm`] so the decision and the error paths are tested on any
//! host.

use xstate::dynamic::{needs_permission, permission_request};
use xstate::{Xfeature, XfeatureMask, XsaveInfo};

/// `arch_prctl` code: the components a thread of this process may use
/// (Linux `arch/x86/include/uapi/asm/prctl.h`).
pub const ARCH_GET_XCOMP_PERM: libc::c_int = 0x1022;
/// `arch_prctl` code: every xfeature the kernel supports (a u64 mask).
pub const ARCH_GET_XCOMP_SUPP: libc::c_int = 0x1021;
/// `arch_prctl` code: ask for a component for this process's threads.
pub const ARCH_REQ_XCOMP_PERM: libc::c_int = 0x1023;
/// `arch_prctl` code: the components this process's guests (KVM vCPUs) may use.
pub const ARCH_GET_XCOMP_GUEST_PERM: libc::c_int = 0x1024;
/// `arch_prctl` code: ask for a component for this process's guests.
pub const ARCH_REQ_XCOMP_GUEST_PERM: libc::c_int = 0x1025;

/// Whose permission: the process's own threads or its KVM guests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `ARCH_*_XCOMP_GUEST_PERM`: vCPUs created after the grant.
    Guest,
    /// `ARCH_*_XCOMP_PERM`: the process's own threads (the native run).
    Process,
}

impl Scope {
    /// The request call's name, for messages.
    pub fn request_name(self) -> &'static str {
        match self {
            Self::Guest => "ARCH_REQ_XCOMP_GUEST_PERM",
            Self::Process => "ARCH_REQ_XCOMP_PERM",
        }
    }

    /// The read-back call's name, for messages.
    pub fn get_name(self) -> &'static str {
        match self {
            Self::Guest => "ARCH_GET_XCOMP_GUEST_PERM",
            Self::Process => "ARCH_GET_XCOMP_PERM",
        }
    }
}

/// The two `arch_prctl` calls, as a trait so tests can answer for the
/// kernel. Errors are the raw errno.
pub trait XcompPerm {
    /// `ARCH_REQ_XCOMP_[GUEST_]PERM` with component number `feature`.
    fn request(&mut self, scope: Scope, feature: u32) -> Result<(), i32>;
    /// `ARCH_GET_XCOMP_[GUEST_]PERM`: the permitted components.
    fn permitted(&mut self, scope: Scope) -> Result<u64, i32>;
    /// `ARCH_GET_XCOMP_SUPP`: every component the kernel supports, dynamic
    /// ones included (Linux 5.16 and later).
    fn supported(&mut self) -> Result<u64, i32> {
        Err(libc::ENOSYS)
    }
}

/// The real system call.
#[derive(Clone, Copy, Debug, Default)]
pub struct ArchPrctl;

impl XcompPerm for ArchPrctl {
    fn request(&mut self, scope: Scope, feature: u32) -> Result<(), i32> {
        let code = match scope {
            Scope::Guest => ARCH_REQ_XCOMP_GUEST_PERM,
            Scope::Process => ARCH_REQ_XCOMP_PERM,
        };
        // SAFETY: arch_prctl with a REQ code takes a plain integer argument
        // and touches no memory of ours.
        let r = unsafe { libc::syscall(libc::SYS_arch_prctl, code, libc::c_ulong::from(feature)) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO))
        }
    }

    fn permitted(&mut self, scope: Scope) -> Result<u64, i32> {
        let code = match scope {
            Scope::Guest => ARCH_GET_XCOMP_GUEST_PERM,
            Scope::Process => ARCH_GET_XCOMP_PERM,
        };
        get_mask(code)
    }

    fn supported(&mut self) -> Result<u64, i32> {
        get_mask(ARCH_GET_XCOMP_SUPP)
    }
}

/// An `ARCH_GET_XCOMP_*` call: the mask it writes, or the errno.
fn get_mask(code: libc::c_int) -> Result<u64, i32> {
    let mut mask: u64 = 0;
    // SAFETY: the GET codes write one u64 through the pointer, which
    // points at `mask`, alive and writable for the whole call.
    let r = unsafe { libc::syscall(libc::SYS_arch_prctl, code, &mut mask as *mut u64) };
    if r == 0 {
        Ok(mask)
    } else {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    }
}

/// The symbolic name of the errnos these calls return, for messages.
fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EINVAL => "EINVAL",
        libc::EPERM => "EPERM",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOMEM => "ENOMEM",
        libc::EBUSY => "EBUSY",
        libc::EFAULT => "EFAULT",
        _ => "errno",
    }
}

/// Why a dynamic component could not be had.
#[derive(Debug, thiserror::Error)]
pub enum PermissionError {
    /// The kernel refused the request.
    #[error(
        "{feature} (xfeature {index}) for the guest: arch_prctl({call}, {index}) failed: \
         {errno_name} ({source}); {why}"
    )]
    Refused {
        /// The component, by its long name.
        feature: &'static str,
        /// Its number.
        index: u32,
        /// The `arch_prctl` code's name.
        call: &'static str,
        /// The errno's symbolic name.
        errno_name: &'static str,
        /// What the host CPU offers, to tell "no AMX here" from "kernel said no".
        why: String,
        /// The errno.
        #[source]
        source: std::io::Error,
    },
    /// The request succeeded but reading the grant back failed.
    #[error("{feature}: arch_prctl({call}) failed after the request: {errno_name} ({source})")]
    ReadBack {
        /// The component, by its long name.
        feature: &'static str,
        /// The `arch_prctl` code's name.
        call: &'static str,
        /// The errno's symbolic name.
        errno_name: &'static str,
        /// The errno.
        #[source]
        source: std::io::Error,
    },
    /// The request succeeded but the grant lacks what was asked for.
    #[error(
        "{feature}: arch_prctl({call}) reads {permitted:#x} after the request, \
         without {missing}"
    )]
    NotGranted {
        /// The component, by its long name.
        feature: &'static str,
        /// The `arch_prctl` code's name.
        call: &'static str,
        /// The permitted components read back.
        permitted: u64,
        /// The components asked for and missing.
        missing: XfeatureMask,
    },
}

/// The long name of component `index` for messages.
fn feature_name(index: u32) -> &'static str {
    Xfeature::from_index(index).map_or("an unknown xfeature", |f| f.long_name())
}

/// What the host CPU offers of `wanted`, for a refusal's message.
fn host_offer(wanted: XfeatureMask, host: Option<&XsaveInfo>) -> String {
    match host {
        None => "this CPU enumerates no XSAVE state (CPUID leaf 0xD)".into(),
        Some(info) if !info.supported_xcr0().contains_all(wanted) => format!(
            "this host's CPU lacks it (CPUID leaf 0xD offers XCR0 {:#x}, without {})",
            info.supported_xcr0().bits(),
            wanted - info.supported_xcr0()
        ),
        Some(_) => "the CPU has it, so this kernel does not offer it to guests \
                    (Linux 5.17 or newer with AMX support is needed)"
            .into(),
    }
}

/// Ask for `wanted` (dynamic components) for `scope` and read the grant
/// back. Returns the permitted components.
pub fn request_permission(
    sys: &mut impl XcompPerm,
    scope: Scope,
    wanted: XfeatureMask,
    host: Option<&XsaveInfo>,
) -> Result<XfeatureMask, PermissionError> {
    let Some(index) = permission_request(wanted) else {
        return Ok(XfeatureMask::EMPTY);
    };
    let feature = feature_name(index);
    sys.request(scope, index)
        .map_err(|errno| PermissionError::Refused {
            feature,
            index,
            call: scope.request_name(),
            errno_name: errno_name(errno),
            why: host_offer(wanted, host),
            source: std::io::Error::from_raw_os_error(errno),
        })?;
    let permitted = sys
        .permitted(scope)
        .map_err(|errno| PermissionError::ReadBack {
            feature,
            call: scope.get_name(),
            errno_name: errno_name(errno),
            source: std::io::Error::from_raw_os_error(errno),
        })?;
    let permitted = XfeatureMask::from_bits(permitted);
    if !permitted.contains_all(wanted) {
        return Err(PermissionError::NotGranted {
            feature,
            call: scope.get_name(),
            permitted: permitted.bits(),
            missing: wanted - permitted,
        });
    }
    Ok(permitted)
}

/// What `permit_for_request` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Permit {
    /// No dynamic component is wanted: nothing was asked.
    NotNeeded,
    /// Granted: these components are permitted to guests.
    Granted(XfeatureMask),
    /// The default policy wanted them and the kernel refused: the guest
    /// goes without (KVM leaves them out of its table); the reason is kept
    /// for a warning.
    Unavailable(String),
}

/// The dynamic components an `--xfeatures` request asks for (`None`: the
/// default, everything the host offers), decided before KVM is asked
/// anything. Names and numbers count whatever the host CPU has (so
/// `--xfeatures amx` asks, and fails, on a CPU without AMX); `host`/`all`
/// count what the CPU enumerates. A request the grammar refuses asks for
/// nothing: the policy check reports it.
pub fn wanted_by_request(spec: Option<&str>, host: Option<&XsaveInfo>) -> XfeatureMask {
    let cpu = host.map_or(XfeatureMask::LEGACY, |i| i.supported_xcr0());
    let requested = match spec {
        None => cpu,
        Some(s) => match XfeatureMask::resolve(s, cpu) {
            Ok(r) => r.result,
            Err(_) => return XfeatureMask::EMPTY,
        },
    };
    needs_permission(requested, host)
}

/// The dynamic components an `--xfeatures` request names itself (by name
/// or number), as opposed to reaching them through `host`/`all` or a
/// leading `-`: those mean "whatever KVM can give", which is less when the
/// permission is refused.
pub fn named_by_request(spec: Option<&str>, host: Option<&XsaveInfo>) -> XfeatureMask {
    let Some(s) = spec else {
        return XfeatureMask::EMPTY;
    };
    let cpu = host.map_or(XfeatureMask::LEGACY, |i| i.supported_xcr0());
    let without = cpu - needs_permission(cpu, host);
    match XfeatureMask::resolve(s, without) {
        Ok(r) => needs_permission(r.result, host),
        Err(_) => XfeatureMask::EMPTY,
    }
}

/// Ask for the guest permission an `--xfeatures` request needs, before any
/// KVM table is read or vCPU created (see the module docs). A refusal is
/// an error when the request names a dynamic component
/// ([`named_by_request`]); otherwise (the default, `host`, `-avx`) it is a
/// [`Permit::Unavailable`] and the guest goes without, as KVM then offers.
pub fn permit_for_request(
    sys: &mut impl XcompPerm,
    spec: Option<&str>,
    host: Option<&XsaveInfo>,
) -> Result<Permit, PermissionError> {
    let wanted = wanted_by_request(spec, host);
    if wanted.is_empty() {
        return Ok(Permit::NotNeeded);
    }
    let named = !named_by_request(spec, host).is_empty();
    match request_permission(sys, Scope::Guest, wanted, host) {
        Ok(granted) => Ok(Permit::Granted(granted)),
        Err(e) if !named => Ok(Permit::Unavailable(e.to_string())),
        Err(e) => Err(e),
    }
}

/// `permit_for_request` with the real system call and this CPU's leaf
/// 0xD; a default policy's refusal is printed as a warning on stderr.
pub fn permit_guest(spec: Option<&str>) -> Result<Permit, PermissionError> {
    if spec.is_none() && nothing_left_to_grant(&mut ArchPrctl) {
        return Ok(Permit::NotNeeded);
    }
    let host = XsaveInfo::host().ok();
    let permit = permit_for_request(&mut ArchPrctl, spec, host.as_ref())?;
    if let Permit::Unavailable(why) = &permit {
        crate::output::terminal::line(format_args!(
            "vmm: warning: the guest goes without dynamic xfeatures: {why}"
        ));
    }
    Ok(permit)
}

/// Linux already permits guests every component it supports, so the
/// default request (everything the host offers) has nothing to ask for.
///
/// Why ask the kernel first: the exact answer reads the CPU's leaf 0xD,
/// about ten CPUIDs that each trap under a nested hypervisor (~70 µs of a
/// 4 ms `vmm run` on the development host), where these are two system
/// calls. Any error (a kernel older than 5.16) means "ask the CPU".
pub fn nothing_left_to_grant(sys: &mut impl XcompPerm) -> bool {
    matches!(
        (sys.supported(), sys.permitted(Scope::Guest)),
        (Ok(supported), Ok(permitted)) if supported & !permitted == 0
    )
}

/// A policy already decided (a snapshot's): ask for its dynamic components
/// explicitly, so a refusal is an error before any VM exists.
pub fn permit_policy(xcr0: XfeatureMask) -> Result<Permit, PermissionError> {
    let host = XsaveInfo::host().ok();
    let wanted = needs_permission(xcr0, host.as_ref());
    if wanted.is_empty() {
        return Ok(Permit::NotNeeded);
    }
    request_permission(&mut ArchPrctl, Scope::Guest, wanted, host.as_ref()).map(Permit::Granted)
}

/// Ask Linux to let this process's own threads use the CPU's dynamic
/// components (`ARCH_REQ_XCOMP_PERM`), for the native run of the AMX
/// workload. False when the CPU has none or the kernel refuses.
pub fn permit_native() -> bool {
    let Ok(host) = XsaveInfo::host() else {
        return false;
    };
    let wanted = xstate::dynamic::dynamic_components(&host);
    !wanted.is_empty()
        && request_permission(&mut ArchPrctl, Scope::Process, wanted, Some(&host)).is_ok()
}

#[cfg(test)]
mod tests;
