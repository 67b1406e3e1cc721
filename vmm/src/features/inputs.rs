//! The inputs of the `vmm features` view: the host CPU's and KVM's leaf
//! 0xD, what the host OS enabled, the validated policy and what a booted
//! guest saw, gathered from this host or from a recorded profile. Gathering
//! is kept apart from the comparison so the comparison can be tested on
//! recorded inputs.

use std::time::Duration;

use guest::protocol::Report;
use xstate::info::leaf_d1_eax;
use xstate::{XfeatureMask, XsaveInfo};

use super::error::FeaturesError;
use super::profile;
use crate::cpuid::resolve_policy;
use crate::devices::SerialSink;
use crate::run::{self, KernelImage, RunConfig, Xfeatures};

/// What the guest saw and did, copied out of its report.
#[derive(Clone, Debug)]
pub struct GuestSeen {
    /// CPUID 0xD.0 EDX:EAX.
    pub xcr0_supported: XfeatureMask,
    /// CPUID 0xD.1 EDX:ECX.
    pub xss_supported: XfeatureMask,
    /// XCR0 the guest set.
    pub xcr0: XfeatureMask,
    /// XGETBV(1) at the end (when XGETBV1 exists).
    pub xinuse: Option<XfeatureMask>,
    /// CPUID 0xD.0 ECX.
    pub size_max: u32,
    /// CPUID 0xD.0 EBX.
    pub size_enabled: u32,
    /// CPUID 0xD.1 EBX.
    pub size_compacted: u32,
    /// CPUID 0xD.1 EAX.
    pub xsave_features: u32,
    /// Per component 0..=19: CPUID 0xD.i EAX, EBX, ECX and the compacted
    /// offset the guest computed for its XCR0.
    pub components: Vec<(u32, u32, u32, u32)>,
    /// Standard size of its XCR0 by the guest's xstate crate.
    pub computed_standard_size: u32,
    /// Compacted size of its XCR0 by the guest's xstate crate.
    pub computed_compacted_size: u32,
    /// Whether KVM kept the policy's CPUID table (read back with
    /// KVM_GET_CPUID2 at boot); `None` when unknown. kvm_pvm does not.
    pub kvm_cpuid_honored: Option<bool>,
    /// The feature flags of leaves 1 and 7 the guest saw (for the
    /// consistency lint, which links them with leaf 0xD).
    pub flags: GuestFlags,
}

/// CPUID feature registers of leaves 1, 7.0 and 7.1 as the guest saw them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GuestFlags {
    /// CPUID.1 ECX.
    pub leaf1_ecx: u32,
    /// CPUID.1 EDX.
    pub leaf1_edx: u32,
    /// CPUID.(7,0) EBX.
    pub leaf7_ebx: u32,
    /// CPUID.(7,0) ECX.
    pub leaf7_ecx: u32,
    /// CPUID.(7,0) EDX.
    pub leaf7_edx: u32,
    /// CPUID.(7,1) EAX.
    pub leaf7_1_eax: u32,
}

impl GuestSeen {
    /// What a guest report says; `kvm_cpuid_honored` is left unknown.
    pub fn from_report(r: &Report) -> Self {
        let xgetbv1 = r.cpuid_xsave_features & leaf_d1_eax::XGETBV1 != 0;
        Self {
            xcr0_supported: XfeatureMask::from_bits(r.cpuid_xcr0_supported),
            xss_supported: XfeatureMask::from_bits(r.cpuid_xss_supported),
            xcr0: XfeatureMask::from_bits(r.xcr0),
            xinuse: xgetbv1.then(|| XfeatureMask::from_bits(r.xinuse)),
            size_max: r.cpuid_size_max,
            size_enabled: r.cpuid_size_enabled,
            size_compacted: r.cpuid_size_compacted,
            xsave_features: r.cpuid_xsave_features,
            components: r
                .components
                .iter()
                .map(|c| (c.size, c.offset, c.flags, c.compacted_offset))
                .collect(),
            computed_standard_size: r.computed_standard_size,
            computed_compacted_size: r.computed_compacted_size,
            kvm_cpuid_honored: None,
            flags: GuestFlags {
                leaf1_ecx: r.cpuid1_ecx,
                leaf1_edx: r.cpuid1_edx,
                leaf7_ebx: r.cpuid7_ebx,
                leaf7_ecx: r.cpuid7_ecx,
                leaf7_edx: r.cpuid7_edx,
                leaf7_1_eax: r.cpuid7_1_eax,
            },
        }
    }
}

/// Whether and how the guest column was filled.
#[derive(Clone, Debug)]
pub enum GuestState {
    /// Not booted: `--no-boot`, a profile, or KVM unavailable (why).
    NotBooted(String),
    /// The guest ran and reported; `note` says if its run was not clean.
    Booted {
        /// What it saw.
        seen: GuestSeen,
        /// Why its run was not clean, if it was not.
        note: Option<String>,
    },
    /// The boot failed or the guest sent no report (why).
    Failed(String),
}

/// Everything the view is built from.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// `this host` or the profile file.
    pub source: String,
    /// CPU name.
    pub cpu_name: String,
    /// The CPU's leaf 0xD.
    pub cpu: XsaveInfo,
    /// XGETBV(0) where known.
    pub os_xcr0: Option<XfeatureMask>,
    /// KVM's supported leaf 0xD, where known.
    pub kvm: Option<XsaveInfo>,
    /// Why there is no KVM column.
    pub kvm_missing: Option<String>,
    /// The validated policy.
    pub policy_xcr0: XfeatureMask,
    /// CPUID flags the policy hides.
    pub hidden_flags: Vec<String>,
    /// The guest column's source.
    pub guest: GuestState,
}

/// Validates a policy against `host`'s leaf 0xD with the one `--xfeatures`
/// parser of `vmm run` ([`crate::cpuid::parse_xfeatures`]); `what` names the
/// source standing in for KVM (a profile's CPU, or the host OS without KVM).
fn policy_for(
    spec: Option<&str>,
    host: XsaveInfo,
    what: &str,
) -> Result<XfeatureMask, FeaturesError> {
    let r = crate::cpuid::resolve_xfeatures(spec, host.supported_xcr0(), what)
        .map_err(|e| FeaturesError::Vmm(crate::Error::Policy(e)))?;
    // Say how the value was understood, as `vmm run` does.
    if let Some(spec) = spec {
        crate::output::terminal::line(crate::cpuid::describe_resolution(spec, &r));
    }
    Ok(r.result)
}

/// What to gather: the options of `vmm features` that pick the inputs.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// A recorded profile to show instead of this host, loaded once by
    /// the caller (its file may be a pipe, readable once).
    pub profile: Option<&'a profile::HostProfile>,
    /// The policy, as for `vmm run` (`None`: everything the source offers).
    pub xfeatures: Option<&'a str>,
    /// Boot the guest for its column.
    pub boot: bool,
    /// Stop the guest after this long (`None`: never).
    pub timeout: Option<Duration>,
}

/// Collects the inputs of the view for a profile or this host.
pub fn gather(args: &Request) -> Result<Inputs, FeaturesError> {
    if let Some(p) = args.profile {
        let (host, what) = match &p.kvm {
            Some(k) => (*k, "the profile's KVM"),
            None => (p.cpu, "the profile's CPU"),
        };
        let policy = policy_for(args.xfeatures, host, what)?;
        return Ok(Inputs {
            source: p.file.clone(),
            cpu_name: p.name.clone(),
            cpu: p.cpu,
            os_xcr0: p.os_xcr0,
            kvm: p.kvm,
            kvm_missing: p
                .kvm
                .is_none()
                .then(|| "the profile does not record KVM's supported CPUID".to_string()),
            policy_xcr0: policy,
            hidden_flags: Vec::new(),
            guest: GuestState::NotBooted("showing a profile".into()),
        });
    }

    let cpu = xstate::XsaveInfo::host().map_err(|e| FeaturesError::Host(e.to_string()))?;
    let cpu_name = xstate::profile::CpuidProfile::host()
        .map(|p| p.name)
        .unwrap_or_else(|_| "unknown CPU".into());
    let os_xcr0 = profile::host_xcr0();
    let mut inputs = Inputs {
        source: "this host".into(),
        cpu_name,
        cpu,
        os_xcr0,
        kvm: None,
        kvm_missing: None,
        policy_xcr0: XfeatureMask::LEGACY,
        hidden_flags: Vec::new(),
        guest: GuestState::NotBooted("--no-boot".into()),
    };
    let kvm = match crate::kvm::HostKvm::open() {
        Ok(k) => k,
        Err(e) => {
            // Without KVM the layouts of the CPU are still worth showing;
            // the policy is checked against what the host OS enabled.
            let enabled = os_xcr0.unwrap_or(XfeatureMask::LEGACY) & cpu.supported_xcr0();
            let host = cpu
                .restricted(enabled, XfeatureMask::EMPTY)
                .map_err(|e| FeaturesError::Host(e.to_string()))?;
            inputs.policy_xcr0 = policy_for(args.xfeatures, host, "the host OS (no KVM)")?;
            inputs.kvm_missing = Some(e.to_string());
            inputs.guest = GuestState::NotBooted("KVM is unavailable".into());
            return Ok(inputs);
        }
    };
    let (policy, _) = resolve_policy(&kvm, args.xfeatures, xstate::InitMode::Minimal, 0)?;
    if let Some(spec) = args.xfeatures {
        // Say how the value was understood, as `vmm run` does (it was
        // validated just above, so this resolves).
        if let Ok(r) =
            crate::cpuid::resolve_xfeatures(Some(spec), kvm.xstate.supported_xcr0(), "KVM")
        {
            crate::output::terminal::line(crate::cpuid::describe_resolution(spec, &r));
        }
    }
    inputs.kvm = Some(kvm.xstate.info);
    inputs.policy_xcr0 = policy.xcr0;
    inputs.hidden_flags = policy.hidden_flags.iter().map(|s| s.to_string()).collect();
    drop(kvm);
    if args.boot {
        // The guest's run asks for the dynamic xfeatures the value names
        // before it reads KVM's table, which this view's table did not.
        inputs.guest = boot_guest(args, Xfeatures::request(args.xfeatures)?)?;
    }
    Ok(inputs)
}

/// Boots the embedded guest with no workload and reads what it saw.
fn boot_guest(args: &Request, xfeatures: Xfeatures) -> Result<GuestState, FeaturesError> {
    let outcome = run::run(RunConfig {
        kernel: KernelImage::embedded(),
        mem_mib: 64,
        xfeatures,
        init_xstate: xstate::InitMode::Minimal,
        cmdline: "quiet workload=none".into(),
        serial: SerialSink::Null,
        timeout: args.timeout,
        ..RunConfig::default()
    })?;
    let end = outcome.end.failure();
    Ok(match outcome.report.as_deref() {
        Some(r) => GuestState::Booted {
            seen: GuestSeen {
                kvm_cpuid_honored: outcome.policy.cpuid_check.as_ref().map(|c| c.honored),
                ..GuestSeen::from_report(r)
            },
            note: end.map(|e| format!("guest run: {e}")),
        },
        None => {
            let mut why = end.unwrap_or_else(|| "the guest exited with status 0".into());
            why.push_str(" without a report");
            if !outcome.report_errors.is_empty() {
                why.push_str(&format!(" (refused: {})", outcome.report_errors.join("; ")));
            }
            GuestState::Failed(why)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::profile::HostProfile;

    /// The profile path validates as `vmm run` does, through its parser.
    #[test]
    fn policy_validation_is_run_s() {
        let p = crate::features::profile::recorded_dump("amd-zen3-milan.json");
        let host = HostProfile::load(&p)
            .unwrap()
            .cpu
            .restricted(XfeatureMask::from_bits(0x7), XfeatureMask::EMPTY)
            .unwrap();
        let what = "the profile's CPU";
        assert_eq!(policy_for(Some("x87,sse"), host, what).unwrap().bits(), 0x3);
        assert_eq!(policy_for(None, host, what).unwrap().bits(), 0x7);
        let e = policy_for(Some("x87,sse,avx,avx512"), host, what)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("invalid xstate policy")
                && e.contains("not supported")
                && e.contains("supports 0x7")
                && e.contains(what),
            "{e}"
        );
        let e = policy_for(Some("0x2"), host, what).unwrap_err().to_string();
        assert!(e.contains("x87"), "{e}");
        let e = policy_for(Some("bogus"), host, what)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown xfeature `bogus`"), "{e}");
    }
}
