//! The xfeature policy: THE parser of `--xfeatures` (for `vmm run`,
//! `vmm bench`, `vmm features` and restore alike) and its validation against
//! what the host supports, done once, before any VM exists; and the
//! [`Policy`] a run records once KVM's CPUID has been shaped by it.

use kvm_bindings::CpuId;
use xstate::{InitMode, Resolution, Xfeature, XfeatureMask};

use super::guest::{guest_cpuid, CpuidCheck, GuestCpuid};
use super::leaf::entry;
use crate::error::{PolicyError, Result};
use crate::kvm::{HostKvm, KvmXstate};
use xstate::info::leaf_1_ecx;

/// The xstate policy a run used.
#[derive(Clone, Debug)]
pub struct Policy {
    /// User state KVM can give a guest.
    pub kvm_xcr0: XfeatureMask,
    /// Supervisor state KVM reports in leaf 0xD.1.
    pub kvm_xss: XfeatureMask,
    /// What the guest's CPUID advertises.
    pub xcr0: XfeatureMask,
    /// Standard-format size for `xcr0` (leaf 0xD.0 ECX as the guest sees it).
    pub standard_size: u32,
    /// Compacted-format size for `xcr0` | supported XSS.
    pub compacted_size: u32,
    /// Instruction-set flags hidden because their state is masked out.
    pub hidden_flags: Vec<&'static str>,
    /// The vCPU's initial XSTATE_BV choice.
    pub init_xstate: InitMode,
    /// What KVM made of the policy's CPUID (set once the vCPU exists).
    pub cpuid_check: Option<CpuidCheck>,
}

impl Policy {
    /// The policy and guest CPUID for an already validated mask: `xcr0`
    /// comes from [`validate_policy`] (or [`parse_xfeatures`]).
    pub fn resolve(
        host: &HostKvm,
        xcr0: XfeatureMask,
        init: InitMode,
        tsc_khz: u32,
    ) -> std::result::Result<(Policy, GuestCpuid), PolicyError> {
        let guest = guest_cpuid(&host.supported_cpuid, &host.xstate, xcr0, tsc_khz)?;
        let policy = Policy {
            kvm_xcr0: host.xstate.supported_xcr0(),
            kvm_xss: host.xstate.info.supported_xss(),
            xcr0,
            standard_size: guest.standard_size,
            compacted_size: guest.compacted_size,
            hidden_flags: guest.hidden_flags.clone(),
            init_xstate: init,
            cpuid_check: None,
        };
        Ok((policy, guest))
    }
}

/// Parse an `--xfeatures` value and check it is a valid XCR0 within `host`
/// (the user state that `what` supports: "KVM", "the profile's CPU", ...).
/// `None` means all of `host`.
pub fn parse_xfeatures(
    spec: Option<&str>,
    host: XfeatureMask,
    what: &str,
) -> std::result::Result<XfeatureMask, PolicyError> {
    Ok(resolve_xfeatures(spec, host, what)?.result)
}

/// [`parse_xfeatures`] with how the value was understood: the
/// `--xfeatures` grammar ([`XfeatureMask::resolve`]) implies prerequisites
/// and drops dependents, and callers print that ([`describe_resolution`]).
/// `None` resolves to all of `host`, nothing implied or dropped.
pub fn resolve_xfeatures(
    spec: Option<&str>,
    host: XfeatureMask,
    what: &str,
) -> std::result::Result<Resolution, PolicyError> {
    let resolution = match spec {
        None => Resolution {
            requested: XfeatureMask::EMPTY,
            removed: XfeatureMask::EMPTY,
            implied: XfeatureMask::EMPTY,
            dropped: XfeatureMask::EMPTY,
            result: host,
        },
        Some(s) => XfeatureMask::resolve(s, host).map_err(|source| PolicyError::Parse {
            spec: s.to_string(),
            source,
        })?,
    };
    resolution
        .result
        .validate_xcr0(host)
        .map_err(|source| PolicyError::Unsupported {
            spec: spec.unwrap_or("host").to_string(),
            what: what.to_string(),
            host,
            source,
        })?;
    Ok(resolution)
}

/// The line `vmm run` prints on stderr for an `--xfeatures` value:
/// `vmm: --xfeatures avx512 = x87,sse,avx,opmask,zmm_hi256,hi16_zmm (0xe7);
/// implied x87,sse,avx`.
pub fn describe_resolution(spec: &str, r: &Resolution) -> String {
    format!("vmm: --xfeatures {spec} = {r}")
}

/// Parse `--xfeatures` and check it against what KVM supports, before any VM
/// exists. `None` means everything KVM supports.
pub fn validate_policy(
    spec: Option<&str>,
    kvm: &KvmXstate,
    supported: &CpuId,
) -> Result<XfeatureMask> {
    let host = kvm.supported_xcr0();
    // Leaf 0xD is the authority on XSAVE support: some KVMs (kvm_pvm) clear
    // CPUID.1:ECX.XSAVE in the supported table yet enumerate leaf 0xD and
    // give guests XSAVE all the same.
    let xsave = host.contains(Xfeature::X87)
        || entry(supported, 1, 0).is_some_and(|e| e.ecx & leaf_1_ecx::XSAVE != 0);
    if !xsave {
        return Err(PolicyError::NoXsave.into());
    }
    Ok(parse_xfeatures(spec, host, "KVM")?)
}

/// [`validate_policy`] with the [`Resolution`], for `vmm run` to print what
/// `--xfeatures` was understood as before any VM exists.
pub fn validate_policy_resolution(
    spec: Option<&str>,
    kvm: &KvmXstate,
    supported: &CpuId,
) -> Result<Resolution> {
    let xcr0 = validate_policy(spec, kvm, supported)?;
    let r = resolve_xfeatures(spec, kvm.supported_xcr0(), "KVM")?;
    debug_assert_eq!(r.result, xcr0);
    Ok(r)
}

/// Validate `--xfeatures` against KVM and resolve the policy in one step
/// (for callers that have not validated the mask already).
pub fn resolve_policy(
    host: &HostKvm,
    xfeatures: Option<&str>,
    init: InitMode,
    tsc_khz: u32,
) -> Result<(Policy, GuestCpuid)> {
    let xcr0 = validate_policy(xfeatures, &host.xstate, &host.supported_cpuid)?;
    Ok(Policy::resolve(host, xcr0, init, tsc_khz)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates_like_run() {
        let host = XfeatureMask::from_bits(0x7);
        assert_eq!(
            parse_xfeatures(Some("x87,sse"), host, "KVM")
                .unwrap()
                .bits(),
            0x3
        );
        assert_eq!(parse_xfeatures(None, host, "KVM").unwrap().bits(), 0x7);
        let e = crate::Error::from(
            parse_xfeatures(Some("x87,sse,avx,avx512"), host, "KVM").unwrap_err(),
        )
        .to_string();
        assert!(
            e.starts_with("invalid xstate policy: --xfeatures x87,sse,avx,avx512: ")
                && e.contains("not supported")
                && e.contains("KVM supports 0x7"),
            "{e}"
        );
        // Names imply their prerequisites; numbers are exact.
        assert_eq!(
            parse_xfeatures(Some("sse"), host, "KVM").unwrap().bits(),
            0x3
        );
        let e = parse_xfeatures(Some("0x2"), host, "KVM")
            .unwrap_err()
            .to_string();
        assert!(e.contains("x87"), "{e}");
        let e = parse_xfeatures(Some("bogus"), host, "KVM")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--xfeatures \"bogus\": ") && e.contains("unknown xfeature `bogus`"),
            "{e}"
        );
    }

    #[test]
    fn resolution_is_reported() {
        let spr = XfeatureMask::from_bits(0x602e7);
        let r = resolve_xfeatures(Some("avx512"), spr, "KVM").unwrap();
        assert_eq!(
            describe_resolution("avx512", &r),
            "vmm: --xfeatures avx512 = x87,sse,avx,opmask,zmm_hi256,hi16_zmm (0xe7); \
             implied x87,sse,avx"
        );
        let r = resolve_xfeatures(Some("-avx"), spr, "KVM").unwrap();
        assert_eq!(
            describe_resolution("-avx", &r),
            "vmm: --xfeatures -avx = x87,sse,pkru,xtilecfg,xtiledata (0x60203); dropped \
             opmask,zmm_hi256,hi16_zmm (they depend on what was removed)"
        );
        let r = resolve_xfeatures(None, spr, "KVM").unwrap();
        assert_eq!(
            (r.result, r.implied, r.dropped),
            (spr, XfeatureMask::EMPTY, XfeatureMask::EMPTY)
        );
        // The resolved value must still be supported.
        let e = resolve_xfeatures(Some("amx"), XfeatureMask::from_bits(0xe7), "KVM")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not supported"), "{e}");
    }
}
