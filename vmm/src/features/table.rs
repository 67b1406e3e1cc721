//! The `vmm features` view: one row per known state component, one column
//! each for the host CPU, KVM, the policy and the guest, and every
//! disagreement between them spelled out.

use std::fmt::Write as _;

use guest::protocol::Report;
use serde::Serialize;
use xstate::info::leaf_d1_eax;
use xstate::{Format, Xfeature, XfeatureMask, XsaveInfo};

use super::profile::check_consistent;

/// What the guest saw and did, copied out of its report.
#[derive(Clone, Debug)]
pub struct GuestSeen {
    /// CPUID 0xD.0 EDX:EAX and 0xD.1 EDX:ECX.
    pub xcr0_supported: XfeatureMask,
    pub xss_supported: XfeatureMask,
    /// XCR0 the guest set, XGETBV(1) at the end (when XGETBV1 exists).
    pub xcr0: XfeatureMask,
    pub xinuse: Option<XfeatureMask>,
    /// CPUID 0xD.0 ECX, 0xD.0 EBX, 0xD.1 EBX, 0xD.1 EAX.
    pub size_max: u32,
    pub size_enabled: u32,
    pub size_compacted: u32,
    pub xsave_features: u32,
    /// Per component 0..=19: CPUID 0xD.i EAX, EBX, ECX and the compacted
    /// offset the guest computed for its XCR0.
    pub components: Vec<(u32, u32, u32, u32)>,
    pub computed_standard_size: u32,
    pub computed_compacted_size: u32,
    /// Whether KVM kept the policy's CPUID table (read back with
    /// KVM_GET_CPUID2 at boot); `None` when unknown. kvm_pvm does not.
    pub kvm_cpuid_honored: Option<bool>,
}

impl GuestSeen {
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
        seen: GuestSeen,
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
    pub cpu: XsaveInfo,
    /// XGETBV(0) where known.
    pub os_xcr0: Option<XfeatureMask>,
    pub kvm: Option<XsaveInfo>,
    /// Why there is no KVM column.
    pub kvm_missing: Option<String>,
    /// The validated policy.
    pub policy_xcr0: XfeatureMask,
    /// CPUID flags the policy hides.
    pub hidden_flags: Vec<String>,
    pub guest: GuestState,
}

/// Masks and sizes of one column.
#[derive(Clone, Debug, Serialize)]
pub struct MaskColumn {
    pub xcr0: String,
    pub xcr0_names: String,
    pub xss: String,
    /// Standard size of `xcr0`, compacted size of `xcr0` (XSAVEC) and of
    /// `xcr0 | xss` (XSAVES).
    pub standard_size: u32,
    pub compacted_size: u32,
    pub compacted_size_xss: u32,
}

impl MaskColumn {
    fn new(layout: &XsaveInfo, xcr0: XfeatureMask, xss: XfeatureMask) -> Self {
        Self {
            xcr0: format!("{xcr0:#x}"),
            xcr0_names: xcr0.to_string(),
            xss: format!("{xss:#x}"),
            standard_size: layout.standard_size(xcr0).unwrap_or(0),
            compacted_size: layout.compacted_size(xcr0).unwrap_or(0),
            compacted_size_xss: layout.compacted_size(xcr0 | xss).unwrap_or(0),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CpuColumn {
    #[serde(flatten)]
    pub masks: MaskColumn,
    /// CPUID 0xD.0 ECX.
    pub max_standard_size: u32,
    /// XGETBV(0), null where unknown (profiles from other tools).
    pub os_xcr0: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct KvmColumn {
    #[serde(flatten)]
    pub masks: MaskColumn,
    pub max_standard_size: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct PolicyColumn {
    #[serde(flatten)]
    pub masks: MaskColumn,
    pub hidden_cpuid_flags: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct GuestColumn {
    pub xcr0_supported: String,
    pub xss_supported: String,
    pub xcr0: String,
    pub xinuse: Option<String>,
    pub standard_size_max: u32,
    pub standard_size_enabled: u32,
    pub compacted_size: u32,
    pub computed_standard_size: u32,
    pub computed_compacted_size: u32,
    pub xsave_variants: Vec<&'static str>,
    /// Whether KVM kept the policy's CPUID table (null when unknown).
    pub kvm_cpuid_honored: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Columns {
    pub cpu: CpuColumn,
    pub kvm: Option<KvmColumn>,
    pub policy: PolicyColumn,
    pub guest: Option<GuestColumn>,
}

/// One component's row.
#[derive(Clone, Debug, Serialize)]
pub struct ComponentRow {
    pub id: u32,
    pub name: &'static str,
    pub description: &'static str,
    pub supervisor: bool,
    pub size: Option<u32>,
    pub standard_offset: Option<u32>,
    pub compacted_offset: Option<u32>,
    pub compacted_offset_xss: Option<u32>,
    pub align64: Option<bool>,
    pub xfd: Option<bool>,
    pub cpu: bool,
    pub os: Option<bool>,
    pub kvm: Option<bool>,
    pub policy: bool,
    pub guest_cpuid: Option<bool>,
    pub guest_xcr0: Option<bool>,
    pub guest_xinuse: Option<bool>,
}

/// The whole view; its JSON is documented in [`super`].
#[derive(Clone, Debug, Serialize)]
pub struct FeaturesView {
    pub source: String,
    pub cpu_name: String,
    /// `kvm` or `cpu`: whose leaf 0xD the sizes and offsets come from.
    pub layout_from: &'static str,
    pub xcr0: String,
    pub xcr0_names: String,
    pub xss: String,
    pub standard_size: u32,
    pub compacted_size: u32,
    pub compacted_size_xss: u32,
    pub components: Vec<ComponentRow>,
    pub columns: Columns,
    /// Why a column is missing or the guest run was not clean.
    pub notes: Vec<String>,
    pub disagreements: Vec<String>,
    /// True when the guest column was wanted but could not be filled.
    #[serde(skip)]
    pub failed: bool,
}

/// Compares the placement of the components two leaf 0xD enumerations share.
fn layout_disagreements(
    a_name: &str,
    a: &XsaveInfo,
    b_name: &str,
    b: &XsaveInfo,
    out: &mut Vec<String>,
) {
    for i in (a.supported_all() & b.supported_all())
        .iter_indices()
        .filter(|&i| i >= 2)
    {
        let (Some(x), Some(y)) = (a.component_by_index(i), b.component_by_index(i)) else {
            continue;
        };
        let name = Xfeature::from_index(i).map_or("?", Xfeature::short_name);
        if x.size != y.size || x.standard_offset != y.standard_offset {
            out.push(format!(
                "{name}: {a_name} CPUID 0xD.{i} has size {} at standard offset {}, {b_name} \
                 size {} at {}",
                x.size, x.standard_offset, y.size, y.standard_offset
            ));
        }
        if x.align64 != y.align64 {
            out.push(format!(
                "{name}: {a_name} and {b_name} disagree on its 64-byte alignment when compacted \
                 (CPUID 0xD.{i} ECX bit 1)"
            ));
        }
    }
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
    let mut dis = Vec::new();

    // Host CPU against what its OS enabled.
    if let Some(os) = inp.os_xcr0 {
        let off = cpu.supported_xcr0() - os;
        if !off.is_empty() {
            dis.push(format!(
                "host CPU supports {} but the host OS did not enable it (XGETBV(0) = {os:#x})",
                off.describe()
            ));
        }
        let extra = os - cpu.supported_xcr0();
        if !extra.is_empty() {
            dis.push(format!(
                "host XCR0 {os:#x} enables {} that the CPU's CPUID 0xD does not enumerate",
                extra.describe()
            ));
        }
        if let Ok(size) = cpu.standard_size(os & cpu.supported_xcr0()) {
            let ebx = cpu.raw_subleaf(0).ebx;
            if ebx != size {
                dis.push(format!(
                    "host CPU CPUID 0xD.0 EBX {ebx} differs from xstate layout {size} of the \
                     enabled XCR0 {os:#x}"
                ));
            }
        }
    }
    if let Err(e) = check_consistent(cpu) {
        dis.push(format!("host CPU: {e}"));
    }

    // Host CPU against KVM.
    if let Some(kvm) = &inp.kvm {
        for (what, c, k) in [
            ("", cpu.supported_xcr0(), kvm.supported_xcr0()),
            ("supervisor ", cpu.supported_xss(), kvm.supported_xss()),
        ] {
            if !(c - k).is_empty() {
                dis.push(format!(
                    "host CPU supports {what}{} but KVM does not offer it",
                    (c - k).describe()
                ));
            }
            if !(k - c).is_empty() {
                dis.push(format!(
                    "KVM offers {what}{} that the host CPU's CPUID 0xD does not enumerate",
                    (k - c).describe()
                ));
            }
        }
        if let Some(os) = inp.os_xcr0 {
            let extra = kvm.supported_xcr0() - os;
            if !extra.is_empty() {
                dis.push(format!(
                    "KVM offers {} that the host OS did not enable (XGETBV(0) = {os:#x})",
                    extra.describe()
                ));
            }
        }
        layout_disagreements("host CPU", cpu, "KVM", kvm, &mut dis);
        if let Err(e) = check_consistent(kvm) {
            dis.push(format!("KVM: {e}"));
        }
    }

    // Policy against the guest.
    let policy_std = layout.standard_size(policy).unwrap_or(0);
    if let Some(g) = guest {
        // Where KVM replaced the policy's CPUID table, say so once: every
        // CPUID disagreement below follows from it.
        if g.kvm_cpuid_honored == Some(false) {
            dis.push(
                "KVM ignored the policy's CPUID table (KVM_GET_CPUID2 differs from KVM_SET_CPUID2): \
                 the guest's CPUID shows KVM's own leaves; its XCR0 follows the policy through the \
                 xfeatures= boot hint"
                    .to_string(),
            );
        }
        for f in policy.iter() {
            if !g.xcr0_supported.contains(f) {
                dis.push(format!(
                    "policy exposes {} but the guest's CPUID 0xD.0 does not advertise it",
                    f.short_name()
                ));
            } else if !g.xcr0.contains(f) {
                dis.push(format!(
                    "policy exposes {} but the guest did not enable it (guest XCR0 {:#x})",
                    f.short_name(),
                    g.xcr0
                ));
            }
        }
        let beyond = g.xcr0_supported - policy;
        if !beyond.is_empty() {
            dis.push(format!(
                "the guest's CPUID 0xD.0 advertises {} beyond the policy {policy:#x}",
                beyond.describe()
            ));
        }
        let beyond = g.xcr0 - policy;
        if !beyond.is_empty() {
            dis.push(format!(
                "the guest enabled {} in XCR0 {:#x}, beyond the policy {policy:#x}",
                beyond.describe(),
                g.xcr0
            ));
        }
        if g.xss_supported != policy_xss {
            dis.push(format!(
                "guest CPUID 0xD.1 EDX:ECX (IA32_XSS) {:#x} differs from what KVM offers {policy_xss:#x}",
                g.xss_supported
            ));
        }
        if let Some(inuse) = g.xinuse {
            let outside = inuse - g.xcr0;
            if !outside.is_empty() {
                dis.push(format!(
                    "guest XINUSE {inuse:#x} has {} outside its XCR0 {:#x}",
                    outside.describe(),
                    g.xcr0
                ));
            }
        }
        if g.size_max != policy_std {
            dis.push(format!(
                "guest CPUID 0xD.0 ECX {} differs from xstate layout {policy_std}",
                g.size_max
            ));
        }
        let enabled = g.xcr0 & layout.supported_xcr0();
        if let Ok(size) = layout.standard_size(enabled) {
            if g.size_enabled != size {
                dis.push(format!(
                    "guest CPUID 0xD.0 EBX {} differs from xstate layout {size} for its XCR0 {:#x}",
                    g.size_enabled, g.xcr0
                ));
            }
            if g.computed_standard_size != size {
                dis.push(format!(
                    "the guest computed standard size {} for its XCR0, the VMM {size}",
                    g.computed_standard_size
                ));
            }
        }
        if let Ok(size) = layout.compacted_size(enabled) {
            // 0xD.1 EBX covers XCR0 | IA32_XSS as enabled; the guest's
            // IA32_XSS is not reported, so any supported XSS subset whose
            // size matches is accepted.
            let xss = g.xss_supported & cpu.supported_xss();
            let with_xss = layout
                .compacted_size(enabled | xss)
                .or_else(|_| cpu.compacted_size(enabled | xss))
                .ok();
            let xsavec_or_s = g.xsave_features & (leaf_d1_eax::XSAVEC | leaf_d1_eax::XSAVES) != 0;
            if xsavec_or_s && g.size_compacted != size && Some(g.size_compacted) != with_xss {
                dis.push(format!(
                    "guest CPUID 0xD.1 EBX {} differs from xstate layout {size} (compacted, XCR0 \
                     {:#x})",
                    g.size_compacted, g.xcr0
                ));
            }
            if g.computed_compacted_size != size {
                dis.push(format!(
                    "the guest computed compacted size {} for its XCR0, the VMM {size}",
                    g.computed_compacted_size
                ));
            }
        }
        let guest_compacted = layout.layout(enabled, Format::Compacted).ok();
        for i in g
            .xcr0_supported
            .iter_indices()
            .filter(|&i| (2..20).contains(&i))
        {
            let Some(c) = layout.component_by_index(i) else {
                continue;
            };
            let (size, offset, flags, compacted) = g.components[i as usize];
            let name = Xfeature::from_index(i).map_or("?", Xfeature::short_name);
            if size != c.size || offset != c.standard_offset {
                dis.push(format!(
                    "{name}: guest CPUID 0xD.{i} has size {size} at offset {offset}, xstate layout \
                     size {} at {}",
                    c.size, c.standard_offset
                ));
            }
            if (flags & 2 != 0) != c.align64 {
                dis.push(format!(
                    "{name}: guest CPUID 0xD.{i} ECX alignment bit differs from the host's"
                ));
            }
            if let Some(want) = guest_compacted.as_ref().and_then(|l| l.offset_by_index(i)) {
                if compacted != want {
                    dis.push(format!(
                        "{name}: the guest computed compacted offset {compacted}, the VMM {want}"
                    ));
                }
            }
        }
    }

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
    let mut failed = false;
    let guest_col = match &inp.guest {
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
                xcr0_supported: format!("{:#x}", g.xcr0_supported),
                xss_supported: format!("{:#x}", g.xss_supported),
                xcr0: format!("{:#x}", g.xcr0),
                xinuse: g.xinuse.map(|m| format!("{m:#x}")),
                standard_size_max: g.size_max,
                standard_size_enabled: g.size_enabled,
                compacted_size: g.size_compacted,
                computed_standard_size: g.computed_standard_size,
                computed_compacted_size: g.computed_compacted_size,
                xsave_variants: guest::protocol::xsave_variants(g.xsave_features).collect(),
                kvm_cpuid_honored: g.kvm_cpuid_honored,
            })
        }
    };

    let policy_col = MaskColumn::new(layout, policy, policy_xss);
    FeaturesView {
        source: inp.source.clone(),
        cpu_name: inp.cpu_name.clone(),
        layout_from: if inp.kvm.is_some() { "kvm" } else { "cpu" },
        xcr0: policy_col.xcr0.clone(),
        xcr0_names: policy_col.xcr0_names.clone(),
        xss: policy_col.xss.clone(),
        standard_size: policy_col.standard_size,
        compacted_size: policy_col.compacted_size,
        compacted_size_xss: policy_col.compacted_size_xss,
        components,
        columns: Columns {
            cpu: CpuColumn {
                masks: MaskColumn::new(cpu, cpu.supported_xcr0(), cpu.supported_xss()),
                max_standard_size: cpu.max_standard_size(),
                os_xcr0: inp.os_xcr0.map(|m| format!("{m:#x}")),
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
        disagreements: dis,
        failed,
    }
}

fn opt(v: Option<u32>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

impl FeaturesView {
    /// The human-readable table (at most 100 columns wide).
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "Extended state (XSAVE) of {}", self.source);
        let _ = writeln!(s, "CPU: {}", self.cpu_name);
        let _ = writeln!(
            s,
            "Sizes and offsets from {}'s CPUID 0xD; compacted offsets for the policy XCR0 {} \
             (cmpct)\nand for XCR0|XSS {} (+xss).",
            if self.layout_from == "kvm" {
                "KVM"
            } else {
                "the CPU"
            },
            self.xcr0,
            format_args!("{:#x}", parse_hex(&self.xcr0) | parse_hex(&self.xss))
        );
        let _ = writeln!(s);
        let guest = self.columns.guest.is_some();
        let kvm = self.columns.kvm.is_some();
        let _ = write!(
            s,
            "id {:<9} {:<40} u/s  size   std cmpct  +xss cpu",
            "name", "description"
        );
        if kvm {
            let _ = write!(s, " kvm");
        }
        let _ = write!(s, " pol");
        if guest {
            let _ = write!(s, " guest");
        }
        let _ = writeln!(s);
        for c in &self.components {
            let mark = |b: bool| if b { "yes" } else { "-" };
            let cpu = match (c.cpu, c.os) {
                (true, Some(false)) if !c.supervisor => "off",
                (b, _) => mark(b),
            };
            let _ = write!(
                s,
                "{:>2} {:<9} {:<40} {:<4}{:>5} {:>5} {:>5} {:>5} {:<3}",
                c.id,
                c.name,
                c.description,
                if c.supervisor { "sup" } else { "user" },
                opt(c.size),
                opt(c.standard_offset),
                opt(c.compacted_offset),
                opt(c.compacted_offset_xss),
                cpu
            );
            if kvm {
                let _ = write!(s, " {:<3}", mark(c.kvm.unwrap_or(false)));
            }
            let _ = write!(s, " {:<3}", mark(c.policy));
            if guest {
                let g = match (c.guest_cpuid, c.guest_xcr0, c.guest_xinuse) {
                    (_, _, Some(true)) => "used",
                    (_, Some(true), _) => "on",
                    (Some(true), _, _) => "cpuid",
                    _ => "-",
                };
                let _ = write!(s, " {g}");
            }
            // Trim the padding of the last column.
            while s.ends_with(' ') {
                s.pop();
            }
            let _ = writeln!(s);
        }
        let _ = writeln!(
            s,
            "cpu: in CPUID 0xD (off: not enabled by the host OS){}",
            if kvm {
                "; kvm: in KVM_GET_SUPPORTED_CPUID"
            } else {
                ""
            }
        );
        let _ = writeln!(
            s,
            "pol: offered by the policy (supervisor state: what KVM offers)"
        );
        if guest {
            let _ = writeln!(
                s,
                "guest: cpuid = advertised to it, on = enabled in its XCR0, used = also in XINUSE"
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<16} {:>9} {:>9} {:>9} {:>10} {:>10}",
            "", "XCR0", "XSS", "standard", "compacted", "+XSS"
        );
        let row = |s: &mut String, name: &str, m: &MaskColumn| {
            let _ = writeln!(
                s,
                "{:<16} {:>9} {:>9} {:>9} {:>10} {:>10}",
                name, m.xcr0, m.xss, m.standard_size, m.compacted_size, m.compacted_size_xss
            );
        };
        row(&mut s, "host CPU", &self.columns.cpu.masks);
        if let Some(os) = &self.columns.cpu.os_xcr0 {
            let _ = writeln!(s, "{:<16} {:>9}   (XGETBV(0))", "host OS", os);
        }
        if let Some(k) = &self.columns.kvm {
            row(&mut s, "KVM", &k.masks);
        }
        row(&mut s, "policy", &self.columns.policy.masks);
        if let Some(g) = &self.columns.guest {
            let _ = writeln!(
                s,
                "{:<16} {:>9} {:>9} {:>9} {:>10}   (its CPUID 0xD.0 ECX, 0xD.1 EBX)",
                "guest CPUID",
                g.xcr0_supported,
                g.xss_supported,
                g.standard_size_max,
                g.compacted_size
            );
            let _ = writeln!(
                s,
                "{:<16} {:>9} {:>9} {:>9}   (XCR0 set, XINUSE at the end, 0xD.0 EBX)",
                "guest enabled",
                g.xcr0,
                g.xinuse.as_deref().unwrap_or("n/a"),
                g.standard_size_enabled
            );
        }
        let hidden = &self.columns.policy.hidden_cpuid_flags;
        if !hidden.is_empty() {
            let _ = writeln!(s, "policy hides CPUID flags: {}", hidden.join(" "));
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        let _ = writeln!(s);
        if self.disagreements.is_empty() {
            let _ = writeln!(s, "Disagreements: none");
        } else {
            let _ = writeln!(s, "Disagreements:");
            for d in &self.disagreements {
                let _ = writeln!(s, "  - {d}");
            }
        }
        s
    }
}

fn parse_hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::profile::HostProfile;
    use guest::protocol::Report;
    use std::path::PathBuf;

    fn milan() -> HostProfile {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../xstate/tests/data/amd-zen3-milan.json");
        HostProfile::load(&p).unwrap()
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
        assert_eq!(v.standard_size, 2440);
        assert_eq!(v.compacted_size, 840);
        assert_eq!(v.compacted_size_xss, 880);
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
