//! What a snapshot holds, section by section, and how each is encoded.
//!
//! | section | contents |
//! |---------|----------|
//! | `meta` | JSON ([`Meta`]): how the VM was built (RAM, command line with `xfeatures=`, xstate policy, init mode), the source KVM's leaf 0xD and XCR0/IA32_XSS, TSC rate, device state (the 8250 UART), what interrupt hardware exists (`none`, or `kvm` with several vCPUs), how many vCPUs, why and when the snapshot was taken |
//! | `memory` | guest RAM's page index: which pages are stored, all-zero pages left out ([`super::sparse::SparseMemory`]) |
//! | `memory.pages` | the stored pages, page-aligned in the file (restore maps them) |
//! | `memory.regions` | where guest RAM lies: (guest address, length) per region, the page index's RAM offsets running through them in order ([`super::sparse::regions_from`]); format 3, absent from format 2 files (one region from address 0) |
//! | `serial` | what the guest printed before the snapshot |
//! | `vcpuN.cpuid` | the CPUID table the vCPU was given: `kvm_cpuid_entry2` (40 bytes each) |
//! | `vcpuN.regs` | `struct kvm_regs` (144 bytes) |
//! | `vcpuN.sregs` | `struct kvm_sregs` (312 bytes) |
//! | `vcpuN.xcrs` | (xcr u32, 0 u32, value u64) per XCR, as `KVM_GET_XCRS` gave them |
//! | `vcpuN.msrs` | (index u32, 0 u32, value u64) per MSR |
//! | `vcpuN.events` | `struct kvm_vcpu_events` (64 bytes), when KVM has it |
//! | `vcpuN.mp_state` | `struct kvm_mp_state` (4 bytes), when KVM has it |
//! | `vcpuN.debugregs` | `struct kvm_debugregs` (128 bytes), when KVM has it |
//! | `vcpuN.xfd` | `IA32_XFD` and `IA32_XFD_ERR` as (index u32, 0 u32, value u64), exactly those two, when KVM lists them (hosts with XFD, see `crate::vstate::xfd`); optional: a snapshot without it restores as before |
//! | `vcpuN.xstate` | the extended state **compacted with only the components in use**: an XSAVEC-format image whose XCOMP_BV (bit 63 set) equals its XSTATE_BV, laid out by the source KVM's leaf 0xD in `meta` |
//! | `vcpuN.lapic` | `struct kvm_lapic_state` (1024 bytes), when the VM has an in-kernel irqchip, split or full (`--vcpus` above 1) |
//! | `irqchip.pic_master`, `irqchip.pic_slave`, `irqchip.ioapic` | `struct kvm_irqchip` (520 bytes each, `KVM_GET_IRQCHIP` chips 0, 1, 2), when the VM has a full in-kernel irqchip (`meta.irqchip` `kvm`) |
//! | `pit` | `struct kvm_pit_state2` (112 bytes), when the VM has an in-kernel PIT |
//! | `clock` | `struct kvm_clock_data` (48 bytes, `KVM_GET_CLOCK`), with the full irqchip: the KVM clock a guest's kvmclock reads (Linux's clocksource), which a new VM would start from zero |
//!
//! `meta.platform` says which platform the VM was: `minimal` (our guest:
//! COM1 polled, absent in older files) or `pc` (a stock Linux: the full
//! irqchip with the PIT and the KVM clock, COM1 on IRQ 4, the i8042 reset,
//! for any vCPU count); a restore rebuilds the same devices.
//!
//! `meta.vcpus` says how many vCPUs the file holds (1 when absent: files
//! written before SMP); `super::compat` refuses a file whose sections
//! hold another number.
//!
//! KVM structures are stored as their Linux UAPI layout (little-endian x86-64),
//! which the kernel never changes incompatibly.

use kvm_bindings::{
    kvm_clock_data, kvm_cpuid_entry2, kvm_debugregs, kvm_irqchip, kvm_lapic_state, kvm_pit_state2,
    kvm_regs, kvm_sregs, kvm_vcpu_events,
};
use serde::{Deserialize, Serialize};
use xstate::{CpuidEntry, CpuidProfile, XfeatureMask, XsaveBuf, XsaveInfo};

use super::format::{
    Container, External, FormatError, SectionInfo, PAGES_SECTION, PAGE_CRCS_SECTION,
};
use super::sparse::{regions_bytes, regions_from, SparseMemory, REGIONS_SECTION};
use crate::vstate::xfd::XfdMsrs;

pub(crate) mod bounds;
mod codec;
mod serial;

pub use serial::SerialRegs;

use codec::{
    cpuid_from, cpuid_to_bytes, pairs_from, pairs_to_bytes, pod_bytes, pod_from, xfd_from,
};

/// Everything in a snapshot, decoded.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// How the VM was built and why the snapshot was taken.
    pub meta: Meta,
    /// Guest RAM.
    pub memory: SparseMemory,
    /// Serial output of the guest before the snapshot.
    pub serial_output: Vec<u8>,
    /// Every vCPU, in id order.
    pub vcpus: Vec<VcpuState>,
    /// The VM's in-kernel interrupt controllers and timer (`None`: the VM
    /// had none, as with one vCPU).
    pub irqchip: Option<IrqchipState>,
}

/// The VM-wide in-kernel interrupt hardware (`KVM_CREATE_IRQCHIP`): the two
/// 8259 PICs, the IOAPIC and, when the VM has one, the 8254 PIT; with them
/// the VM's KVM clock.
#[derive(Clone, Debug)]
pub struct IrqchipState {
    /// `KVM_GET_IRQCHIP` chip 0 (`KVM_IRQCHIP_PIC_MASTER`).
    pub pic_master: kvm_irqchip,
    /// `KVM_GET_IRQCHIP` chip 1 (`KVM_IRQCHIP_PIC_SLAVE`).
    pub pic_slave: kvm_irqchip,
    /// `KVM_GET_IRQCHIP` chip 2 (`KVM_IRQCHIP_IOAPIC`).
    pub ioapic: kvm_irqchip,
    /// `KVM_GET_PIT2`, when the VM has a PIT (`KVM_CREATE_PIT2`).
    pub pit: Option<kvm_pit_state2>,
    /// `KVM_GET_CLOCK` (absent in older files, and where KVM has none): a
    /// Linux guest's kvmclock counts from it, so a restore that left the
    /// new VM's at zero would move the guest's time back by its uptime.
    pub clock: Option<kvm_clock_data>,
}

/// The `KVM_GET_IRQCHIP` chip numbers with their section names.
pub const IRQCHIP_SECTIONS: [(u32, &str); 3] = [
    (0, "irqchip.pic_master"),
    (1, "irqchip.pic_slave"),
    (2, "irqchip.ioapic"),
];

/// The `meta` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// The `vmm` that wrote the snapshot.
    pub vmm_version: String,
    /// Seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// `time` (`--snapshot-after`) or `guest` (the guest wrote SNAPSHOT_PORT).
    pub trigger: String,
    /// Guest RAM in MiB.
    pub mem_mib: u64,
    /// The guest's command line (it already read it; kept for the record and
    /// for re-running its workloads natively).
    pub cmdline: String,
    /// The user xfeatures the guest's CPUID offered (its XCR0 policy).
    pub policy_xcr0: u64,
    /// `minimal` or `all`.
    pub init_xstate: String,
    /// The xstate sync policy of the run.
    pub xstate_sync: String,
    /// What the source KVM could give a guest.
    pub kvm_xcr0: u64,
    /// The supervisor state (IA32_XSS) the source KVM could give a guest.
    pub kvm_xss: u64,
    /// The source KVM's CPUID leaf 0xD (KVM_GET_SUPPORTED_CPUID): lays out
    /// the compacted image, and lets a target with other standard offsets
    /// re-lay it out.
    pub kvm_leaf_0xd: Vec<CpuidEntry>,
    /// The source's KVM_CAP_XSAVE2 size (0: absent).
    pub xsave2_size: u64,
    /// The guest's TSC rate in kHz (0: unknown).
    pub tsc_khz: u32,
    /// Interrupt controllers and timers (`vstate::smp::Irqchip`): `none`
    /// for one vCPU without a LAPIC (a kernel without vmm's ELF note, and
    /// every one-vCPU file written before the embedded guest got one);
    /// `split` for one vCPU of the embedded guest, and for several, `split`
    /// (`KVM_CAP_SPLIT_IRQCHIP`: in-kernel LAPICs only, their state in the
    /// `vcpuN.lapic` sections) or `kvm` (`KVM_CREATE_IRQCHIP`, what a KVM
    /// without the split irqchip gives and what earlier versions always
    /// made: the `irqchip.*` sections add both PICs and the IOAPIC, `pit`
    /// the PIT's when the VM has one).
    pub irqchip: String,
    /// COM1's registers.
    pub serial: SerialRegs,
    /// Exits to user space before the snapshot.
    pub exits: u64,
    /// Wall time the guest had run, in ms.
    pub guest_ran_ms: f64,
    /// MSRs KVM listed (KVM_GET_MSR_INDEX_LIST) that this VMM saves but could
    /// not read on the source.
    #[serde(default)]
    pub msrs_unreadable: Vec<u32>,
    /// How many vCPUs the snapshot holds (absent: 1, a file from before
    /// SMP).
    #[serde(default = "one_vcpu")]
    pub vcpus: u32,
    /// How the stored pages were written to the file (absent: a file from
    /// before this was recorded).
    #[serde(default)]
    pub memory_write: String,
    /// The platform the VM was (`crate::arch::boot::Platform`): `minimal`
    /// (absent: every file from before the PC platform) or `pc`.
    #[serde(default = "minimal_platform")]
    pub platform: String,
}

fn minimal_platform() -> String {
    "minimal".into()
}

fn one_vcpu() -> u32 {
    1
}

/// One vCPU.
#[derive(Clone, Debug)]
pub struct VcpuState {
    /// vCPU number.
    pub id: u32,
    /// The CPUID table it was given.
    pub cpuid: Vec<kvm_cpuid_entry2>,
    /// General-purpose registers.
    pub regs: kvm_regs,
    /// Segment and control registers.
    pub sregs: kvm_sregs,
    /// (XCR number, value).
    pub xcrs: Vec<(u32, u64)>,
    /// (MSR index, value).
    pub msrs: Vec<(u32, u64)>,
    /// Pending exceptions and interrupts, when KVM has them.
    pub events: Option<kvm_vcpu_events>,
    /// `kvm_mp_state`, when KVM has it.
    pub mp_state: Option<u32>,
    /// Debug registers, when KVM has them.
    pub debugregs: Option<kvm_debugregs>,
    /// `IA32_XFD` / `IA32_XFD_ERR`, where the source KVM has XFD.
    pub xfd: Option<XfdMsrs>,
    /// Compacted, in-use components only.
    pub xstate: XsaveBuf,
    /// The local APIC's registers, when the VM has an in-kernel irqchip.
    pub lapic: Option<kvm_lapic_state>,
}

impl VcpuState {
    /// XCR0 as saved (`None` when KVM_GET_XCRS had none).
    pub fn xcr0(&self) -> Option<u64> {
        self.xcrs.iter().find(|(n, _)| *n == 0).map(|(_, v)| *v)
    }

    /// An MSR as saved (`None` when not saved).
    pub fn msr(&self, index: u32) -> Option<u64> {
        self.msrs.iter().find(|(i, _)| *i == index).map(|(_, v)| *v)
    }
}

/// The per-vCPU sections a snapshot may hold.
pub const VCPU_SECTIONS: &[&str] = &[
    "cpuid",
    "regs",
    "sregs",
    "xcrs",
    "msrs",
    "events",
    "mp_state",
    "debugregs",
    "xfd",
    "xstate",
    "lapic",
];

/// The sections outside any vCPU.
pub const GLOBAL_SECTIONS: &[&str] = &[
    "meta",
    "memory",
    PAGES_SECTION,
    REGIONS_SECTION,
    PAGE_CRCS_SECTION,
    "serial",
    "irqchip.pic_master",
    "irqchip.pic_slave",
    "irqchip.ioapic",
    "pit",
    "clock",
];

/// Every section name is one this format defines, and every `vcpuN.*`
/// section belongs to a vCPU that exists (`vcpu0.regs` .. `vcpuM.regs`,
/// contiguous). Checked on the section table alone, before any section's
/// bytes are read: an unknown section would otherwise be silently ignored.
/// A pure function over names.
pub fn check_section_names<'a>(
    names: impl IntoIterator<Item = &'a str> + Clone,
) -> Result<(), FormatError> {
    let bad = |m: String| Err(FormatError::Malformed(m));
    let vcpu_of = |n: &str| -> Option<(u32, String)> {
        let rest = n.strip_prefix("vcpu")?;
        let (id, kind) = rest.split_once('.')?;
        let parsed: u32 = id.parse().ok()?;
        (parsed.to_string() == id && VCPU_SECTIONS.contains(&kind))
            .then(|| (parsed, kind.to_string()))
    };
    let mut with_regs = Vec::new();
    for n in names.clone() {
        if GLOBAL_SECTIONS.contains(&n) {
            continue;
        }
        match vcpu_of(n) {
            Some((id, kind)) if kind == "regs" => with_regs.push(id),
            Some(_) => {}
            None => return bad(format!("unknown section \"{n}\"")),
        }
    }
    with_regs.sort_unstable();
    for n in names {
        if let Some((id, _)) = vcpu_of(n) {
            if with_regs.binary_search(&id).is_err() || id as usize >= with_regs.len() {
                return bad(format!(
                    "section \"{n}\" belongs to no vCPU (vcpu{id}.regs is missing or the vCPU numbers are not 0..{})",
                    with_regs.len()
                ));
            }
        }
    }
    Ok(())
}

/// The `memory` index, its pages (read, or left in the file at
/// `pages_in_file`) and, from format 3, `memory.regions`.
fn decode_memory(
    c: &Container,
    pages_in_file: Option<&SectionInfo>,
) -> Result<SparseMemory, FormatError> {
    let index = required(c, "memory")?;
    let mut memory = match pages_in_file {
        Some(p) => SparseMemory::from_index_in_file(index, p)?,
        None => SparseMemory::from_sections(index, required(c, PAGES_SECTION)?)?,
    };
    // Format 2 files have none: one region from address 0.
    match (c.get(REGIONS_SECTION), c.version >= 3) {
        (Some(b), true) => memory.regions = regions_from(b, memory.size)?,
        (None, false) => {}
        (None, true) => required(c, REGIONS_SECTION).map(drop)?,
        (Some(_), false) => {
            return Err(FormatError::Malformed(format!(
                "section \"{REGIONS_SECTION}\" in a format {} file (it came with format 3)",
                c.version
            )))
        }
    }
    // Files written before per-page checksums have none: their pages are
    // checked as one section (see `snapshot::pager`).
    if let Some(crcs) = c.get(PAGE_CRCS_SECTION) {
        memory.set_page_crcs(crcs)?;
    }
    Ok(memory)
}

fn required<'a>(c: &'a Container, name: &str) -> Result<&'a [u8], FormatError> {
    c.get(name)
        .ok_or_else(|| FormatError::Malformed(format!("section \"{name}\" is missing")))
}

impl Meta {
    /// The `meta` section's JSON, decoded.
    ///
    /// # Errors
    ///
    /// [`FormatError::Malformed`] naming the section and serde's reason.
    pub fn from_section(bytes: &[u8]) -> Result<Self, FormatError> {
        serde_json::from_slice(bytes)
            .map_err(|e| FormatError::Malformed(format!("section \"meta\": {e}")))
    }

    /// The source KVM's leaf 0xD, validated as profiles are (subleaves in
    /// range, none twice, 0 and 1 present, consistent): the entries are the
    /// `kvm_leaf_0xd` of a [`CpuidProfile`], read through it.
    pub fn source_info(&self) -> Result<XsaveInfo, FormatError> {
        let as_profile = CpuidProfile {
            name: String::new(),
            microarchitecture: String::new(),
            vendor: String::new(),
            signature: xstate::Hex32(0),
            bare_metal: false,
            source: String::new(),
            leaf_0xd: self.kvm_leaf_0xd.clone(),
            leaf_1: None,
            leaf_7: None,
            kvm_leaf_0xd: None,
        };
        as_profile.xsave_info().map_err(|e| {
            FormatError::Malformed(format!(
                "meta: the source KVM's leaf 0xD is inconsistent: {e}"
            ))
        })
    }

    /// The guest's CPUID xfeature policy.
    pub fn policy(&self) -> XfeatureMask {
        XfeatureMask::from_bits(self.policy_xcr0)
    }

    /// The platform `meta.platform` names (`None`: a name this vmm does
    /// not know, which validation refuses before a restore).
    pub fn platform(&self) -> Option<crate::arch::boot::Platform> {
        crate::arch::boot::Platform::from_name(&self.platform)
    }
}

impl Snapshot {
    /// The sections of this snapshot.
    pub fn to_container(&self) -> Container {
        let mut c = self.sections_but_pages();
        c.push(PAGES_SECTION, self.memory.data.clone());
        c
    }

    /// The file's bytes, the stored pages moved rather than copied into
    /// their section (a snapshot's largest part: one copy fewer on save).
    pub fn into_bytes(mut self) -> Vec<u8> {
        let mut c = self.sections_but_pages();
        c.push(PAGES_SECTION, std::mem::take(&mut self.memory.data));
        c.to_bytes()
    }

    /// The file's bytes up to its stored pages, which the caller writes
    /// after them (`pages_len` bytes whose CRC32 is `pages_crc`): how a
    /// snapshot is saved without copying guest memory (see
    /// `super::save`). `self.memory.data` is not read.
    pub fn head_bytes(&self, pages_len: u64, pages_crc: u32) -> Vec<u8> {
        self.sections_but_pages().head_bytes(External {
            name: PAGES_SECTION,
            len: pages_len,
            crc: pages_crc,
        })
    }

    fn sections_but_pages(&self) -> Container {
        let mut c = Container::new();
        let meta = serde_json::to_vec_pretty(&self.meta)
            .unwrap_or_else(|e| unreachable!("the snapshot metadata always serialises: {e}"));
        c.push("meta", meta);
        for v in &self.vcpus {
            let n = |s: &str| format!("vcpu{}.{s}", v.id);
            c.push(&n("cpuid"), cpuid_to_bytes(&v.cpuid));
            c.push(&n("regs"), pod_bytes(&v.regs));
            c.push(&n("sregs"), pod_bytes(&v.sregs));
            c.push(&n("xcrs"), pairs_to_bytes(&v.xcrs));
            c.push(&n("msrs"), pairs_to_bytes(&v.msrs));
            if let Some(e) = &v.events {
                c.push(&n("events"), pod_bytes(e));
            }
            if let Some(m) = v.mp_state {
                c.push(&n("mp_state"), m.to_le_bytes().to_vec());
            }
            if let Some(d) = &v.debugregs {
                c.push(&n("debugregs"), pod_bytes(d));
            }
            if let Some(x) = &v.xfd {
                c.push(&n("xfd"), pairs_to_bytes(&x.pairs()));
            }
            c.push(&n("xstate"), v.xstate.to_vec());
            if let Some(l) = &v.lapic {
                c.push(&n("lapic"), pod_bytes(l));
            }
        }
        if let Some(irq) = &self.irqchip {
            for (chip, name) in IRQCHIP_SECTIONS {
                let state = match chip {
                    0 => &irq.pic_master,
                    1 => &irq.pic_slave,
                    _ => &irq.ioapic,
                };
                c.push(name, pod_bytes(state));
            }
            if let Some(p) = &irq.pit {
                c.push("pit", pod_bytes(p));
            }
            if let Some(clock) = &irq.clock {
                c.push("clock", pod_bytes(clock));
            }
        }
        c.push("serial", self.serial_output.clone());
        c.push("memory", self.memory.index_bytes());
        c.push(REGIONS_SECTION, regions_bytes(&self.memory.ram_regions()));
        if !self.memory.page_crcs.is_empty() {
            c.push(PAGE_CRCS_SECTION, self.memory.crc_bytes());
        }
        c
    }

    /// The snapshot file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_container().to_bytes()
    }

    /// Decode verified sections. Structural problems (an unknown or orphan
    /// section, a missing one, a wrong size, non-zero padding, a duplicate
    /// XCR, MSR or CPUID leaf) are errors; whether the state is consistent
    /// and fits a host is [`super::compat::validate`]'s business. A pure
    /// function over bytes.
    pub fn from_container(c: &Container) -> Result<Self, FormatError> {
        Self::decode(c, None)
    }

    /// Decode verified sections whose `memory.pages` was left in the file
    /// (see [`Container::read_sections`]) at `pages`: the memory's index is
    /// decoded and its runs checked against that entry's length, and the
    /// pages stay in the file for a restore to map
    /// ([`SparseMemory::in_file`]).
    pub fn from_container_mapped(c: &Container, pages: &SectionInfo) -> Result<Self, FormatError> {
        Self::decode(c, Some(pages))
    }

    fn decode(c: &Container, pages_in_file: Option<&SectionInfo>) -> Result<Self, FormatError> {
        check_section_names(c.sections.iter().map(|s| s.name.as_str()))?;
        let meta = Meta::from_section(required(c, "meta")?)?;
        let memory = decode_memory(c, pages_in_file)?;
        let mut vcpus = Vec::new();
        for id in 0u32.. {
            let n = |s: &str| format!("vcpu{id}.{s}");
            if c.get(&n("regs")).is_none() {
                break;
            }
            let xname = n("xstate");
            let xbytes = required(c, &xname)?;
            let xstate = XsaveBuf::from_bytes(xbytes)
                .map_err(|e| FormatError::Malformed(format!("section \"{xname}\": {e}")))?;
            vcpus.push(VcpuState {
                id,
                cpuid: cpuid_from(&n("cpuid"), required(c, &n("cpuid"))?)?,
                regs: pod_from(&n("regs"), required(c, &n("regs"))?)?,
                sregs: pod_from(&n("sregs"), required(c, &n("sregs"))?)?,
                xcrs: pairs_from(&n("xcrs"), required(c, &n("xcrs"))?)?,
                msrs: pairs_from(&n("msrs"), required(c, &n("msrs"))?)?,
                events: c
                    .get(&n("events"))
                    .map(|b| pod_from(&n("events"), b))
                    .transpose()?,
                mp_state: c
                    .get(&n("mp_state"))
                    .map(|b| {
                        b.try_into().map(u32::from_le_bytes).map_err(|_| {
                            FormatError::Malformed(format!(
                                "section \"{}\" is {} bytes, expected 4",
                                n("mp_state"),
                                b.len()
                            ))
                        })
                    })
                    .transpose()?,
                debugregs: c
                    .get(&n("debugregs"))
                    .map(|b| pod_from(&n("debugregs"), b))
                    .transpose()?,
                xfd: c
                    .get(&n("xfd"))
                    .map(|b| xfd_from(&n("xfd"), b))
                    .transpose()?,
                xstate,
                lapic: c
                    .get(&n("lapic"))
                    .map(|b| pod_from(&n("lapic"), b))
                    .transpose()?,
            });
        }
        if vcpus.is_empty() {
            return Err(FormatError::Malformed(
                "no vCPU sections (vcpu0.regs is missing)".into(),
            ));
        }
        let chip = |name: &str| -> Result<Option<kvm_irqchip>, FormatError> {
            c.get(name).map(|b| pod_from(name, b)).transpose()
        };
        let chips = IRQCHIP_SECTIONS.map(|(_, name)| chip(name));
        let [master, slave, ioapic] = chips;
        let irqchip = match (master?, slave?, ioapic?) {
            (Some(pic_master), Some(pic_slave), Some(ioapic)) => Some(IrqchipState {
                pic_master,
                pic_slave,
                ioapic,
                pit: c.get("pit").map(|b| pod_from("pit", b)).transpose()?,
                clock: c.get("clock").map(|b| pod_from("clock", b)).transpose()?,
            }),
            (None, None, None) if c.get("pit").is_none() && c.get("clock").is_none() => None,
            _ => {
                return Err(FormatError::Malformed(
                    "the irqchip sections (irqchip.pic_master, irqchip.pic_slave, \
                     irqchip.ioapic; pit and clock only with them) come all together or not at all"
                        .into(),
                ))
            }
        };
        Ok(Self {
            meta,
            memory,
            serial_output: c.get("serial").unwrap_or_default().to_vec(),
            vcpus,
            irqchip,
        })
    }

    /// Parse, verify and decode file bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, FormatError> {
        Self::from_container(&Container::parse(bytes)?)
    }
}

#[cfg(test)]
mod tests;
