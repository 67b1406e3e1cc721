//! The `vmm features` view: one row per known state component, one column
//! each for the host CPU, KVM, the policy and the guest, and the
//! disagreements between them ([`super::diff`]), as one serialisable value.
//! Masks stay typed; they become hex strings only in the JSON and the table.

use serde::Serialize;
use xstate::{Format, Xfeature, XfeatureMask, XsaveInfo};

use super::diff;
use super::inputs::{GuestState, Inputs};
use crate::report::hex;
use crate::report::{GuestSupported, GuestXsaveSizes};

/// Masks and sizes of one column.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct MaskColumn {
    /// The column's XCR0 (user state).
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xcr0: XfeatureMask,
    /// The same as component names.
    pub xcr0_names: String,
    /// The supervisor state (IA32_XSS) offered with it.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xss: XfeatureMask,
    /// Standard size of `xcr0`.
    pub standard_size: u32,
    /// Compacted size of `xcr0` (XSAVEC).
    pub compacted_size: u32,
    /// Compacted size of `xcr0 | xss` (XSAVES).
    pub compacted_size_xss: u32,
}

impl MaskColumn {
    fn new(layout: &XsaveInfo, xcr0: XfeatureMask, xss: XfeatureMask) -> Self {
        Self {
            xcr0,
            xcr0_names: xcr0.to_string(),
            xss,
            standard_size: layout.standard_size(xcr0).unwrap_or(0),
            compacted_size: layout.compacted_size(xcr0).unwrap_or(0),
            compacted_size_xss: layout.compacted_size(xcr0 | xss).unwrap_or(0),
        }
    }
}

/// The host CPU column.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct CpuColumn {
    /// Its whole supported mask and sizes.
    #[serde(flatten)]
    pub masks: MaskColumn,
    /// CPUID 0xD.0 ECX.
    pub max_standard_size: u32,
    /// XGETBV(0), null where unknown (profiles from other tools).
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub os_xcr0: Option<XfeatureMask>,
}

/// The KVM column (`KVM_GET_SUPPORTED_CPUID` leaf 0xD).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct KvmColumn {
    /// Its whole supported mask and sizes.
    #[serde(flatten)]
    pub masks: MaskColumn,
    /// CPUID 0xD.0 ECX as KVM reports it.
    pub max_standard_size: u32,
}

/// The policy column.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct PolicyColumn {
    /// The policy's XCR0, the supervisor state offered with it, and sizes.
    #[serde(flatten)]
    pub masks: MaskColumn,
    /// CPUID flags the policy hides (host only).
    pub hidden_cpuid_flags: Vec<String>,
}

/// The guest column: what the booted guest reported.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct GuestColumn {
    /// Its CPUID 0xD.0 EDX:EAX and 0xD.1 EDX:ECX.
    #[serde(flatten)]
    pub supported: GuestSupported,
    /// The XCR0 it set.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xcr0: XfeatureMask,
    /// XGETBV(1) at the end (null without XGETBV1).
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub xinuse: Option<XfeatureMask>,
    /// Its CPUID 0xD.0 ECX, 0xD.0 EBX, 0xD.1 EBX, the sizes its xstate
    /// crate computed, and the XSAVE instructions its 0xD.1 EAX advertises.
    #[serde(flatten)]
    pub sizes: GuestXsaveSizes,
    /// Whether KVM kept the policy's CPUID table (null when unknown).
    pub kvm_cpuid_honored: Option<bool>,
}

/// The columns of the view (`columns` in the JSON).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Columns {
    /// The host CPU (or the profile's CPU).
    pub cpu: CpuColumn,
    /// KVM; null without KVM.
    pub kvm: Option<KvmColumn>,
    /// The policy.
    pub policy: PolicyColumn,
    /// The guest; null unless booted.
    pub guest: Option<GuestColumn>,
}

/// One component's row.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ComponentRow {
    /// Xfeature number.
    pub id: u32,
    /// Short name, as `--xfeatures` takes it.
    pub name: &'static str,
    /// What the component holds ([`Xfeature::long_name`], after the Intel SDM).
    pub description: &'static str,
    /// IA32_XSS state rather than XCR0 state.
    pub supervisor: bool,
    /// CPUID 0xD.i EAX; null when unsupported.
    pub size: Option<u32>,
    /// CPUID 0xD.i EBX; null when unsupported and for supervisor state.
    pub standard_offset: Option<u32>,
    /// Offset in the compacted layout of the policy's XCR0.
    pub compacted_offset: Option<u32>,
    /// Offset in the compacted layout of XCR0 | XSS.
    pub compacted_offset_xss: Option<u32>,
    /// CPUID 0xD.i ECX bit 1.
    pub align64: Option<bool>,
    /// CPUID 0xD.i ECX bit 2.
    pub xfd: Option<bool>,
    /// Enumerated by the host CPU.
    pub cpu: bool,
    /// Enabled by the host OS (null when unknown and for supervisor state).
    pub os: Option<bool>,
    /// Offered by KVM (null without KVM).
    pub kvm: Option<bool>,
    /// Offered by the policy.
    pub policy: bool,
    /// Advertised to the guest.
    pub guest_cpuid: Option<bool>,
    /// Enabled by the guest.
    pub guest_xcr0: Option<bool>,
    /// In use by the guest at the end.
    pub guest_xinuse: Option<bool>,
}

/// The whole view; its JSON is documented in [`super`].
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct FeaturesView {
    /// `this host` or the profile file.
    pub source: String,
    /// The CPU's brand string.
    pub cpu_name: String,
    /// `kvm` or `cpu`: whose leaf 0xD the sizes and offsets come from.
    pub layout_from: &'static str,
    /// The policy's XCR0, the supervisor state offered with it and their
    /// sizes, at the top level of the JSON (`xcr0`, `xcr0_names`, `xss`,
    /// `standard_size`, `compacted_size`, `compacted_size_xss`).
    #[serde(flatten)]
    pub policy: MaskColumn,
    /// One row per known component (0..=19).
    pub components: Vec<ComponentRow>,
    /// Per-column masks and sizes.
    pub columns: Columns,
    /// Why a column is missing or the guest run was not clean.
    pub notes: Vec<String>,
    /// Every disagreement, one sentence each.
    pub disagreements: Vec<String>,
    /// True when the guest column was wanted but could not be filled.
    #[serde(skip)]
    pub failed: bool,
}

/// Builds the view and every disagreement.
pub fn build(inp: &Inputs) -> FeaturesView {
    let cpu = &inp.cpu;
    let layout = inp.kvm.as_ref().unwrap_or(cpu);
    let policy = inp.policy_xcr0;
    let policy_xss = layout.supported_xss();
    let guest = match &inp.guest {
        GuestState::Booted { seen, .. } => Some(seen),
        _ => None,
    };
    let mut notes = Vec::new();
    let policy_layout = layout.layout(policy, Format::Compacted).ok();
    let policy_layout_xss = layout.layout(policy | policy_xss, Format::Compacted).ok();
    let components = Xfeature::ALL
        .iter()
        .map(|&f| {
            let info = layout.component(f).or_else(|| cpu.component(f));
            let i = f.index();
            ComponentRow {
                id: i,
                name: f.short_name(),
                description: f.long_name(),
                supervisor: f.is_supervisor(),
                size: info.map(|c| c.size),
                standard_offset: info.filter(|c| !c.supervisor).map(|c| c.standard_offset),
                compacted_offset: policy_layout.as_ref().and_then(|l| l.offset_by_index(i)),
                compacted_offset_xss: policy_layout_xss
                    .as_ref()
                    .and_then(|l| l.offset_by_index(i)),
                align64: info.map(|c| c.align64),
                xfd: info.map(|c| c.xfd),
                cpu: cpu.supported_all().contains(f),
                // IA32_XSS is not readable from user space: unknown for
                // supervisor state.
                os: inp
                    .os_xcr0
                    .filter(|_| !f.is_supervisor())
                    .map(|os| os.contains(f)),
                kvm: inp.kvm.as_ref().map(|k| k.supported_all().contains(f)),
                policy: policy.contains(f) || (f.is_supervisor() && policy_xss.contains(f)),
                guest_cpuid: guest.map(|g| (g.xcr0_supported | g.xss_supported).contains(f)),
                guest_xcr0: guest.map(|g| g.xcr0.contains(f)),
                guest_xinuse: guest.and_then(|g| g.xinuse).map(|m| m.contains(f)),
            }
        })
        .collect();

    if let Some(why) = &inp.kvm_missing {
        notes.push(format!("no KVM column: {why}"));
    }
    let (guest_col, failed) = guest_column(&inp.guest, &mut notes);

    let policy_col = MaskColumn::new(layout, policy, policy_xss);
    FeaturesView {
        source: inp.source.clone(),
        cpu_name: inp.cpu_name.clone(),
        layout_from: if inp.kvm.is_some() { "kvm" } else { "cpu" },
        policy: policy_col.clone(),
        components,
        columns: Columns {
            cpu: CpuColumn {
                masks: MaskColumn::new(cpu, cpu.supported_xcr0(), cpu.supported_xss()),
                max_standard_size: cpu.max_standard_size(),
                os_xcr0: inp.os_xcr0,
            },
            kvm: inp.kvm.as_ref().map(|k| KvmColumn {
                masks: MaskColumn::new(k, k.supported_xcr0(), k.supported_xss()),
                max_standard_size: k.max_standard_size(),
            }),
            policy: PolicyColumn {
                masks: policy_col,
                hidden_cpuid_flags: inp.hidden_flags.clone(),
            },
            guest: guest_col,
        },
        notes,
        disagreements: diff::disagreements(inp),
        failed,
    }
}

/// The guest column of a booted guest; otherwise none, with the reason in
/// `notes` (and `true` when the boot was wanted but failed).
fn guest_column(state: &GuestState, notes: &mut Vec<String>) -> (Option<GuestColumn>, bool) {
    let mut failed = false;
    let col = match state {
        GuestState::NotBooted(why) => {
            notes.push(format!("no guest column: {why}"));
            None
        }
        GuestState::Failed(why) => {
            failed = true;
            notes.push(format!("no guest column: {why}"));
            None
        }
        GuestState::Booted { seen: g, note } => {
            if let Some(n) = note {
                notes.push(n.clone());
            }
            Some(GuestColumn {
                supported: GuestSupported {
                    xcr0_supported: g.xcr0_supported,
                    xss_supported: g.xss_supported,
                },
                xcr0: g.xcr0,
                xinuse: g.xinuse,
                sizes: GuestXsaveSizes {
                    standard_size_max: g.size_max,
                    standard_size_enabled: g.size_enabled,
                    compacted_size: g.size_compacted,
                    computed_standard_size: g.computed_standard_size,
                    computed_compacted_size: g.computed_compacted_size,
                    xsave_variants: guest::protocol::xsave_variants(g.xsave_features).collect(),
                },
                kvm_cpuid_honored: g.kvm_cpuid_honored,
            })
        }
    };
    (col, failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::inputs::GuestSeen;
    use crate::features::profile::HostProfile;
    use guest::protocol::Report;

    use xstate::Format;

    fn milan() -> HostProfile {
        HostProfile::load(&crate::features::profile::recorded_dump(
            "amd-zen3-milan.json",
        ))
        .unwrap()
    }

    fn inputs(p: &HostProfile, policy: u64, guest: GuestState) -> Inputs {
        Inputs {
            source: p.file.clone(),
            cpu_name: p.name.clone(),
            cpu: p.cpu,
            os_xcr0: None,
            kvm: Some(p.cpu),
            kvm_missing: None,
            policy_xcr0: XfeatureMask::from_bits(policy),
            hidden_flags: vec![],
            guest,
        }
    }

    /// A report as a correct guest would send for `xcr0` on Milan.
    fn report(info: &XsaveInfo, xcr0: u64) -> Report {
        let mut r = Report::new();
        let m = XfeatureMask::from_bits(xcr0);
        r.cpuid_xcr0_supported = xcr0;
        r.cpuid_xss_supported = info.supported_xss().bits();
        r.xcr0 = xcr0;
        r.xinuse = 0x3;
        r.cpuid_xsave_features = 0xf;
        r.cpuid_size_max = info.standard_size(m).unwrap();
        r.cpuid_size_enabled = r.cpuid_size_max;
        r.cpuid_size_compacted = info.compacted_size(m).unwrap();
        r.computed_standard_size = r.cpuid_size_max;
        r.computed_compacted_size = r.cpuid_size_compacted;
        let l = info.layout(m, Format::Compacted).unwrap();
        for i in m.iter_indices().filter(|&i| i >= 2) {
            let c = info.component_by_index(i).unwrap();
            r.components[i as usize].size = c.size;
            r.components[i as usize].offset = c.standard_offset;
            r.components[i as usize].flags = u32::from(c.align64) << 1;
            r.components[i as usize].compacted_offset = l.offset_by_index(i).unwrap();
        }
        r
    }

    #[test]
    fn agreeing_guest_has_no_disagreements() {
        let p = milan();
        let seen = GuestSeen::from_report(&report(&p.cpu, 0x207));
        let v = build(&inputs(&p, 0x207, GuestState::Booted { seen, note: None }));
        assert!(v.disagreements.is_empty(), "{:#?}", v.disagreements);
        assert_eq!(v.policy.standard_size, 2440);
        assert_eq!(v.policy.compacted_size, 840);
        assert_eq!(v.policy.compacted_size_xss, 880);
        let pkru = &v.components[9];
        assert_eq!(
            (pkru.size, pkru.standard_offset, pkru.compacted_offset),
            (Some(8), Some(2432), Some(832))
        );
        assert_eq!(pkru.guest_xcr0, Some(true));
        let t = v.to_table();
        assert!(t.lines().skip(2).all(|l| l.len() <= 100), "{t}");
        assert!(t.contains("Disagreements: none"), "{t}");
    }

    #[test]
    fn spells_out_disagreements() {
        let p = milan();
        let mut r = report(&p.cpu, 0x207);
        r.xcr0 = 0x203; // did not enable AVX
        r.cpuid_size_max = 832;
        let seen = GuestSeen::from_report(&r);
        let v = build(&inputs(&p, 0x207, GuestState::Booted { seen, note: None }));
        let d = v.disagreements.join("\n");
        assert!(
            d.contains("policy exposes avx but the guest did not enable it"),
            "{d}"
        );
        assert!(
            d.contains("guest CPUID 0xD.0 ECX 832 differs from xstate layout 2440"),
            "{d}"
        );

        let mut inp = inputs(&p, 0x7, GuestState::NotBooted("--no-boot".into()));
        inp.os_xcr0 = Some(XfeatureMask::from_bits(0x7));
        inp.kvm = Some(
            p.cpu
                .restricted(XfeatureMask::from_bits(0x7), XfeatureMask::EMPTY)
                .unwrap(),
        );
        let v = build(&inp);
        let d = v.disagreements.join("\n");
        assert!(
            d.contains("host CPU supports pkru (component 9) but the host OS did not enable it"),
            "{d}"
        );
        assert!(
            d.contains("host CPU supports pkru (component 9) but KVM does not offer it"),
            "{d}"
        );
        assert!(
            d.contains("host CPU supports supervisor cet (components 11-12) but KVM"),
            "{d}"
        );
        let t = v.to_table();
        assert!(t.lines().skip(2).all(|l| l.len() <= 100), "{t}");
    }
}

/// `vmm features --json`: the view plus the `consistency` section.
#[derive(serde::Serialize, schemars::JsonSchema)]
pub struct FeaturesDocument<'a> {
    /// The per-component view.
    #[serde(flatten)]
    pub view: &'a FeaturesView,
    /// The consistency lint of the sources shown, summarised.
    pub consistency: super::lint::ConsistencySummary,
}
