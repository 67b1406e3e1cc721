//! `vmm features compare`: which hosts of a pool have which state
//! components, whether their XSAVE layouts agree, the largest XCR0 every host
//! can give a guest (the safe baseline for migration), and on which hosts a
//! given saved state can be restored.
//!
//! The rule itself, [`xstate::restorable_on`], lives in the XSAVE model:
//! snapshot restore asks the same question of one saved vCPU.

use serde::Serialize;
use xstate::{largest_valid_xcr0, restorable_on, Xfeature, XfeatureMask, XsaveInfo};

use super::guest_log::GuestRecord;
use super::profile::HostProfile;
use crate::cpuid::GATED_FLAGS;
use crate::report::hex;
use guest::protocol::{field_str, WorkUnit, SWITCH_STRATEGIES};

/// One host as compared.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct HostColumn {
    /// Short label used in the table (`A`, `B`, ...).
    pub label: String,
    /// The profile file.
    pub file: String,
    /// The CPU's name as recorded.
    pub name: String,
    /// `kvm` when the profile records KVM's supported leaf 0xD (used for the
    /// baseline and restore checks), `guest` for a guest record (the CPUID
    /// its VMM exposed), else `cpu`.
    pub xcr0_source: &'static str,
    /// The XCR0 a guest can get there.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xcr0: XfeatureMask,
    /// The supervisor state a guest can get there.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xss: XfeatureMask,
    /// Standard size of all of `xcr0` on this host.
    pub standard_size: u32,
    /// Standard and compacted (XSAVEC) size of the baseline on this host.
    pub baseline_standard_size: u32,
    /// Compacted (XSAVEC) size of the baseline on this host.
    pub baseline_compacted_size: u32,
}

/// One component across the hosts.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ComponentAcross {
    /// Xfeature number.
    pub id: u32,
    /// Short xfeature name.
    pub name: &'static str,
    /// IA32_XSS state rather than XCR0 state.
    pub supervisor: bool,
    /// Per host, in `hosts` order: whether it supports the component.
    pub present: Vec<bool>,
    /// Per host: size (null where absent).
    pub sizes: Vec<Option<u32>>,
    /// Per host: standard offset (null for supervisor state or where absent).
    pub standard_offsets: Vec<Option<u32>>,
    /// Per host: 64-byte alignment when compacted (null where absent).
    pub align64: Vec<Option<bool>>,
    /// Whether the hosts that have it agree on its size.
    pub sizes_agree: bool,
    /// ... on its standard offset.
    pub offsets_agree: bool,
    /// ... on its alignment when compacted.
    pub align_agree: bool,
    /// Part of the baseline XCR0.
    pub in_baseline: bool,
}

/// A CPUID feature flag (leaf 1/7) that gates extended state and differs
/// between hosts that recorded those leaves.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct FlagDifference {
    /// The flag's name.
    pub flag: &'static str,
    /// Labels of the hosts that have it.
    pub present_on: Vec<String>,
    /// Labels of the hosts that recorded the leaf but lack the flag.
    pub missing_on: Vec<String>,
}

/// The restore check of one host.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RestoreOn {
    /// The host's label.
    pub label: String,
    /// Its profile file.
    pub file: String,
    /// Whether the state can be restored there.
    pub restorable: bool,
    /// Why not (null when restorable).
    pub reason: Option<String>,
}

/// Where a given saved state can be restored.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RestoreCheck {
    /// The saved XSTATE_BV.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xstate_bv: XfeatureMask,
    /// The saved XCR0.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xcr0: XfeatureMask,
    /// Per host, in `hosts` order.
    pub hosts: Vec<RestoreOn>,
}

/// The result of comparing host profiles.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Comparison {
    /// The hosts, labelled A, B, ...
    pub hosts: Vec<HostColumn>,
    /// The intersection of every host's supported XCR0, before reduction.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub common_xcr0: XfeatureMask,
    /// The largest valid XCR0 every host supports.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub baseline_xcr0: XfeatureMask,
    /// The same, as a ready `--xfeatures` value (component names).
    pub baseline_xfeatures: String,
    /// Components every host has but that the baseline drops to keep XCR0
    /// valid.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub baseline_dropped: XfeatureMask,
    /// Supervisor state every host supports (IA32_XSS).
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub baseline_xss: XfeatureMask,
    /// One row per known component.
    pub components: Vec<ComponentAcross>,
    /// Every difference, spelled out.
    pub differences: Vec<String>,
    /// Gating CPUID flags that differ (only between hosts that recorded
    /// leaves 1 and 7).
    pub flag_differences: Vec<FlagDifference>,
    /// The restore check (null without `--xstate-bv`).
    pub restore: Option<RestoreCheck>,
    /// Every gating CPUID flag, per source (empty unless at least one
    /// source recorded leaves 1 and 7).
    pub flags: Vec<FlagAcross>,
    /// What each guest record says the guest did and paid, in source
    /// order; empty when only host profiles were compared.
    pub guests: Vec<GuestColumn>,
}

/// One gating CPUID flag across the sources.
#[derive(schemars::JsonSchema, Clone, Debug, Serialize)]
pub struct FlagAcross {
    /// The flag's name.
    pub flag: &'static str,
    /// Per source: offered (null where leaves 1/7 were not recorded).
    pub present: Vec<Option<bool>>,
}

/// A source of `compare`: a host profile or a guest record from a serial log.
#[derive(Clone, Debug)]
pub enum Source {
    /// A CPUID profile (`vmm features save`).
    Host(HostProfile),
    /// A guest record: the CPUID a VMM exposed, as the guest saw it (its
    /// profile, made once), and what the guest measured.
    Guest(HostProfile, GuestRecord),
}

impl Source {
    /// The CPUID facts compared.
    pub fn profile(&self) -> &HostProfile {
        match self {
            Self::Host(p) | Self::Guest(p, _) => p,
        }
    }
}

/// One guest-timed figure: cycles per event of a benchmark row.
#[derive(schemars::JsonSchema, Clone, Debug, Serialize)]
pub struct GuestTiming {
    /// Row name (`exit`, `ctxsw`, ...).
    pub name: String,
    /// Row variant (`pio-cpl3`, `xsavec`, ...).
    pub variant: String,
    /// TSC cycles per event.
    pub cycles_per_event: f64,
    /// Nanoseconds per event, when the guest knew its TSC frequency.
    pub ns_per_event: Option<f64>,
}

/// What one guest did and what it cost, from its record.
#[derive(schemars::JsonSchema, Clone, Debug, Serialize)]
pub struct GuestColumn {
    /// The source's label.
    pub label: String,
    /// The log file.
    pub file: String,
    /// XCR0 the guest set.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xcr0: XfeatureMask,
    /// XINUSE at the end (null without XGETBV(1)).
    pub xinuse: Option<String>,
    /// The guest's TSC frequency (0: unknown to it).
    pub tsc_khz: u64,
    /// The context-switch strategy it chose at boot.
    pub switch_strategy: String,
    /// Cycles per switch by strategy, as calibrated at boot (null: the
    /// guest's CPUID lacks it).
    pub switch_cycles: Vec<(&'static str, Option<u64>)>,
    /// Per-event costs of its `Events` rows (exits, context switches).
    pub timings: Vec<GuestTiming>,
    /// Valid records in the log (more than 1: the last was used).
    pub records_found: usize,
}

impl GuestColumn {
    fn new(label: &str, g: &GuestRecord) -> Self {
        let r = &g.report;
        let xgetbv1 = r.cpuid_xsave_features & xstate::info::leaf_d1_eax::XGETBV1 != 0;
        let timings = r
            .results()
            .iter()
            .filter(|x| x.unit == WorkUnit::Events as u32 && x.work != 0)
            .map(|x| {
                let cpe = x.cycles as f64 / x.work as f64;
                GuestTiming {
                    name: field_str(&x.name).to_string(),
                    variant: field_str(&x.variant).to_string(),
                    cycles_per_event: cpe,
                    ns_per_event: (r.tsc_khz != 0).then(|| cpe * 1e6 / r.tsc_khz as f64),
                }
            })
            .collect();
        GuestColumn {
            label: label.to_string(),
            file: g.file.clone(),
            xcr0: XfeatureMask::from_bits(r.xcr0),
            xinuse: xgetbv1.then(|| format!("{:#x}", r.xinuse)),
            tsc_khz: r.tsc_khz,
            switch_strategy: field_str(&r.switch_strategy).to_string(),
            switch_cycles: SWITCH_STRATEGIES
                .iter()
                .zip(r.switch_cycles)
                .map(|(n, c)| (*n, (c != 0).then_some(c)))
                .collect(),
            timings,
            records_found: g.records_found,
        }
    }
}

/// Compare host profiles and guest records side by side: [`compare`] on
/// every source's CPUID, plus the per-flag table and each guest's own
/// figures.
pub fn compare_sources(
    sources: &[Source],
    restore: Option<(XfeatureMask, XfeatureMask)>,
) -> Comparison {
    let hosts: Vec<HostProfile> = sources.iter().map(|s| s.profile().clone()).collect();
    let mut c = compare(&hosts, restore);
    for (col, s) in c.hosts.iter_mut().zip(sources) {
        if let Source::Guest(..) = s {
            col.xcr0_source = "guest";
        }
    }
    c.guests = sources
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            Source::Guest(_, g) => Some(GuestColumn::new(&label(i), g)),
            Source::Host(_) => None,
        })
        .collect();
    c
}

/// The leaf 0xD that decides what a guest can get on a host.
fn effective(h: &HostProfile) -> &XsaveInfo {
    h.kvm.as_ref().unwrap_or(&h.cpu)
}

/// Table labels: A, B, ..., Z, AA, AB, ...
fn label(i: usize) -> String {
    let letter = |n: usize| char::from(b'A' + (n % 26) as u8);
    if i < 26 {
        letter(i).to_string()
    } else {
        format!("{}{}", letter(i / 26 - 1), letter(i))
    }
}

/// Whether all present values are equal.
fn agree<T: PartialEq + Copy>(v: &[Option<T>]) -> bool {
    let mut it = v.iter().flatten();
    match it.next() {
        Some(first) => it.all(|x| x == first),
        None => true,
    }
}

/// Compare host profiles. `restore` is an optional `(xcr0, xstate_bv)` to
/// check against every host with [`restorable_on`].
pub fn compare(hosts: &[HostProfile], restore: Option<(XfeatureMask, XfeatureMask)>) -> Comparison {
    let labels: Vec<String> = (0..hosts.len()).map(label).collect();
    let common_xcr0 = hosts.iter().fold(XfeatureMask::ALL_KNOWN.user(), |m, h| {
        m & effective(h).supported_xcr0()
    });
    let baseline = largest_valid_xcr0(common_xcr0);
    let baseline_xss = hosts.iter().fold(XfeatureMask::SUPERVISOR, |m, h| {
        m & effective(h).supported_xss()
    });

    let columns = host_columns(hosts, &labels, baseline);

    let mut differences = Vec::new();
    let mut components = Vec::new();
    let mut partial: Vec<(Vec<bool>, XfeatureMask)> = Vec::new();
    for f in Xfeature::ALL {
        let row = component_row(f, hosts, baseline);
        let on = |v: &[bool], want: bool| -> Vec<String> {
            v.iter()
                .zip(&labels)
                .filter(|(p, _)| **p == want)
                .map(|(_, l)| l.clone())
                .collect()
        };
        let have = on(&row.present, true);
        if !have.is_empty() && have.len() < hosts.len() {
            // Grouped by the set of hosts that have them, reported below.
            match partial.iter_mut().find(|(p, _)| *p == row.present) {
                Some((_, m)) => *m |= f.mask(),
                None => partial.push((row.present.clone(), f.mask())),
            }
        }
        differences.extend(component_differences(
            f,
            &row,
            &labels,
            common_xcr0,
            baseline,
        ));
        components.push(row);
    }
    // Unknown components (bits 20..63) are rejected when profiles load, so
    // the known ones are everything.
    // Components only some hosts have, grouped by those hosts, first.
    let mut grouped = partial_groups(&partial, &labels);
    grouped.append(&mut differences);
    let mut differences = grouped;

    let (flag_differences, flags) = gated_flags(hosts, &labels, &mut differences);

    let restore = restore.map(|(xcr0, xstate_bv)| restore_check(hosts, &labels, xcr0, xstate_bv));

    Comparison {
        hosts: columns,
        common_xcr0,
        baseline_xcr0: baseline,
        baseline_xfeatures: baseline.to_string(),
        baseline_dropped: common_xcr0 - baseline,
        baseline_xss,
        components,
        differences,
        flag_differences,
        restore,
        flags,
        guests: Vec::new(),
    }
}

/// One column per host: its identity, where its XCR0 comes from (KVM's
/// table or the CPU), its masks and sizes, and its sizes at the `baseline`.
fn host_columns(
    hosts: &[HostProfile],
    labels: &[String],
    baseline: XfeatureMask,
) -> Vec<HostColumn> {
    hosts
        .iter()
        .zip(labels)
        .map(|(h, l)| {
            let info = effective(h);
            HostColumn {
                label: l.clone(),
                file: h.file.clone(),
                name: h.name.clone(),
                xcr0_source: if h.kvm.is_some() { "kvm" } else { "cpu" },
                xcr0: info.supported_xcr0(),
                xss: info.supported_xss(),
                standard_size: info.standard_size(info.supported_xcr0()).unwrap_or(0),
                baseline_standard_size: info.standard_size(baseline).unwrap_or(0),
                baseline_compacted_size: info.compacted_size(baseline).unwrap_or(0),
            }
        })
        .collect()
}

/// Component `f` across the hosts: where each has it, its size, standard
/// offset and alignment, and whether they agree.
fn component_row(f: Xfeature, hosts: &[HostProfile], baseline: XfeatureMask) -> ComponentAcross {
    let infos: Vec<_> = hosts.iter().map(|h| effective(h).component(f)).collect();
    let present: Vec<bool> = infos.iter().map(Option::is_some).collect();
    let sizes: Vec<Option<u32>> = infos.iter().map(|c| c.map(|c| c.size)).collect();
    let standard_offsets: Vec<Option<u32>> = infos
        .iter()
        .map(|c| c.filter(|c| !c.supervisor).map(|c| c.standard_offset))
        .collect();
    let align64: Vec<Option<bool>> = infos.iter().map(|c| c.map(|c| c.align64)).collect();
    ComponentAcross {
        id: f.index(),
        name: f.short_name(),
        supervisor: f.is_supervisor(),
        sizes_agree: agree(&sizes),
        offsets_agree: agree(&standard_offsets),
        align_agree: agree(&align64),
        in_baseline: baseline.contains(f),
        present,
        sizes,
        standard_offsets,
        align64,
    }
}

/// What keeps component `f` (its `row`) from moving between the hosts: its size,
/// standard offset or alignment differing, or the baseline dropping it
/// although every host has it.
fn component_differences(
    f: Xfeature,
    row: &ComponentAcross,
    labels: &[String],
    common_xcr0: XfeatureMask,
    baseline: XfeatureMask,
) -> Vec<String> {
    let mut out = Vec::new();
    let per_host = |v: &[Option<u32>]| -> String {
        v.iter()
            .zip(labels)
            .filter_map(|(x, l)| x.map(|x| format!("{x} on {l}")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !row.sizes_agree {
        out.push(format!(
            "{}: size differs ({}): state of this component cannot move between these hosts",
            f.short_name(),
            per_host(&row.sizes)
        ));
    }
    if !row.offsets_agree {
        out.push(format!(
            "{}: standard offset differs ({}): standard-format images (KVM_GET_XSAVE) \
             must be re-laid out when moving between these hosts",
            f.short_name(),
            per_host(&row.standard_offsets)
        ));
    }
    if !row.align_agree {
        out.push(format!(
            "{}: 64-byte alignment in the compacted format differs: compacted offsets \
             of later components differ",
            f.short_name()
        ));
    }
    if common_xcr0.contains(f) && !baseline.contains(f) {
        out.push(format!(
            "{}: every host has it, but the baseline drops it (its XCR0 partners are not \
             on every host)",
            f.short_name()
        ));
    }
    out
}

/// The components only some hosts have, one line per set of hosts.
fn partial_groups(partial: &[(Vec<bool>, XfeatureMask)], labels: &[String]) -> Vec<String> {
    partial
        .iter()
        .map(|(present, mask)| {
            let pick = |want: bool| -> String {
                present
                    .iter()
                    .zip(labels)
                    .filter(|(p, _)| **p == want)
                    .map(|(_, l)| l.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            format!(
                "{} only on {} (missing on {})",
                mask.describe(),
                pick(true),
                pick(false)
            )
        })
        .collect()
}

/// The CPUID flags that gate xstate use, across the hosts that recorded
/// them: each flag some have and others lack (also added to
/// `differences`), and every flag per host.
fn gated_flags(
    hosts: &[HostProfile],
    labels: &[String],
    differences: &mut Vec<String>,
) -> (Vec<FlagDifference>, Vec<FlagAcross>) {
    let mut flag_differences = Vec::new();
    let recorded: Vec<bool> = hosts
        .iter()
        .map(|h| h.flag(&GATED_FLAGS[0]).is_some())
        .collect();
    if recorded.iter().filter(|r| **r).count() >= 2 {
        for f in GATED_FLAGS {
            let (mut yes, mut no) = (Vec::new(), Vec::new());
            for (h, l) in hosts.iter().zip(labels) {
                match h.flag(f) {
                    Some(true) => yes.push(l.clone()),
                    Some(false) => no.push(l.clone()),
                    None => {}
                }
            }
            if !yes.is_empty() && !no.is_empty() {
                differences.push(format!(
                    "CPUID flag {} only on {} (missing on {})",
                    f.cpuinfo,
                    yes.join(", "),
                    no.join(", ")
                ));
                flag_differences.push(FlagDifference {
                    flag: f.cpuinfo,
                    present_on: yes,
                    missing_on: no,
                });
            }
        }
    }

    let flags = if recorded.iter().any(|r| *r) {
        GATED_FLAGS
            .iter()
            .map(|f| FlagAcross {
                flag: f.cpuinfo,
                present: hosts.iter().map(|h| h.flag(f)).collect(),
            })
            .collect()
    } else {
        Vec::new()
    };
    (flag_differences, flags)
}

/// Whether state using `xstate_bv` under `xcr0` restores on each host.
fn restore_check(
    hosts: &[HostProfile],
    labels: &[String],
    xcr0: XfeatureMask,
    xstate_bv: XfeatureMask,
) -> RestoreCheck {
    RestoreCheck {
        xstate_bv,
        xcr0,
        hosts: hosts
            .iter()
            .zip(labels)
            .map(|(h, l)| {
                let r = restorable_on(xcr0, xstate_bv, effective(h));
                RestoreOn {
                    label: l.clone(),
                    file: h.file.clone(),
                    restorable: r.is_ok(),
                    reason: r.err().map(|e| e.to_string()),
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests;
