//! `vmm snapshot info`: what a snapshot file holds (sections, memory, each
//! vCPU's registers and extended state) and whether this host can restore
//! it, as one serialisable value and its table. Masks stay typed; they are
//! hex only in the JSON and the table.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;
use xstate::{Format, XfeatureMask};

use crate::kvm::HostKvm;
use crate::report::hex;
use crate::report::table::Columns;
use crate::snapshot::error::SnapshotError;
use crate::snapshot::format::SectionInfo;
use crate::snapshot::load as restore;
use crate::snapshot::state::{Snapshot, VcpuState};
use crate::vstate::vcpu::MSR_IA32_XSS;

/// `vmm snapshot info` as printed.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SnapshotInfo {
    /// The snapshot file.
    pub file: String,
    /// Its size.
    pub file_bytes: u64,
    /// The file's container format version.
    pub format_version: u32,
    /// The section table.
    pub sections: Vec<SectionInfo>,
    /// What triggered the snapshot: `time`, `guest`, or the guest at its
    /// point (`point-start`, `point-mid`, `point-end`).
    pub trigger: String,
    /// When it was taken (seconds since the Unix epoch).
    pub created_unix_s: u64,
    /// The `vmm` that wrote it.
    pub vmm_version: String,
    /// Guest RAM in MiB.
    pub mem_mib: u64,
    /// Guest RAM in pages.
    pub memory_pages: u64,
    /// Where guest RAM lies (the file's `memory.regions`; one region from
    /// address 0 for a format 2 file).
    pub memory_regions: Vec<MemoryRegionInfo>,
    /// Non-zero pages stored; the rest were all-zero and left out.
    pub memory_pages_stored: u64,
    /// How the stored pages were written (empty for a file from before
    /// this was recorded).
    pub memory_write: String,
    /// The guest's command line.
    pub cmdline: String,
    /// Interrupt controllers and timers of the VM.
    pub irqchip: String,
    /// The platform the VM was: `minimal` (our guest) or `pc` (a stock
    /// Linux: the irqchip, PIT and KVM clock, COM1 on IRQ 4, the i8042).
    pub platform: String,
    /// Exits to user space before the snapshot.
    pub exits_before: u64,
    /// Wall time the guest had run.
    pub guest_ran_ms: f64,
    /// One entry per vCPU.
    pub vcpus: Vec<VcpuInfo>,
    /// The guest's CPUID xfeature policy.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub policy_xcr0: XfeatureMask,
    /// The same as component names.
    pub policy_xcr0_names: String,
    /// What the source KVM could give a guest (XCR0).
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub source_kvm_xcr0: XfeatureMask,
    /// What the source KVM could give a guest (IA32_XSS).
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub source_kvm_xss: XfeatureMask,
    /// The guest's TSC rate (0: unknown).
    pub tsc_khz: u32,
    /// What a restore on this host would do: `yes`, `no`, `must-try`
    /// (no rule this vmm checks fails, but only KVM can tell whether it
    /// takes some fields), `unknown` (KVM cannot be opened).
    pub restore_verdict: Verdict,
    /// Whether this host can restore it: true for `yes`, false for `no`,
    /// null for `must-try` and `unknown`.
    pub restorable_here: Option<bool>,
    /// Why not, when not: `vmm restore`'s own message.
    pub restore_refusal: Option<String>,
    /// With `must-try`: what only KVM can tell, as `field: why`.
    pub restore_must_try: Vec<String>,
}

/// One region of guest RAM in `vmm snapshot info`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct MemoryRegionInfo {
    /// Its guest physical address.
    pub addr: u64,
    /// Its length in bytes.
    pub bytes: u64,
}

/// The answer of `vmm snapshot info` to "can this host restore it?".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every rule holds and this host has everything the state needs.
    Yes,
    /// A rule fails; `vmm restore` refuses it with the same message.
    No,
    /// No rule this vmm checks fails; whether KVM takes some fields only
    /// KVM can tell, so `vmm restore` tries.
    MustTry,
    /// KVM cannot be opened here.
    Unknown,
}

/// One vCPU of `vmm snapshot info`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct VcpuInfo {
    /// vCPU number.
    pub id: u32,
    /// Where it stopped (hex).
    pub rip: String,
    /// CR0 (hex).
    pub cr0: String,
    /// CR4 (hex).
    pub cr4: String,
    /// EFER (hex).
    pub efer: String,
    /// Its privilege level (CS.DPL).
    pub cpl: u8,
    /// XCR0 as saved.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xcr0: XfeatureMask,
    /// The same as component names.
    pub xcr0_names: String,
    /// IA32_XSS as saved (null when not saved).
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub ia32_xss: Option<XfeatureMask>,
    /// MSRs saved.
    pub msrs: usize,
    /// CPUID entries saved.
    pub cpuid_entries: usize,
    /// XSTATE_BV of the stored image: the components in use.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xstate_bv: XfeatureMask,
    /// The same described by name.
    pub components_in_use: String,
    /// Bytes stored (compacted, in-use only).
    pub xstate_compacted_bytes: usize,
    /// A standard image for the guest's XCR0, as KVM_GET_XSAVE transfers it.
    pub xstate_standard_bytes: u32,
    /// The legacy `struct kvm_xsave` a VMM without XSAVE2 stores.
    pub kvm_xsave_bytes: usize,
    /// Whether `kvm_vcpu_events` were saved.
    pub events: bool,
    /// The saved multiprocessing state, when KVM had it.
    pub mp_state: Option<u32>,
    /// Whether debug registers were saved.
    pub debugregs: bool,
    /// `IA32_XFD` as saved (`vcpuN.xfd`); absent where the source KVM had
    /// no XFD MSRs.
    pub ia32_xfd: Option<String>,
    /// `IA32_XFD_ERR` as saved, likewise.
    pub ia32_xfd_err: Option<String>,
    /// The local APIC's registers are stored (VMs with an irqchip).
    pub lapic: bool,
}

fn reg(v: u64) -> String {
    format!("{v:#x}")
}

/// Builds the `info` view of a file: opened as `vmm restore` opens it
/// (nothing read in bulk, the stored pages left in the file), their CRC32
/// checked in bounded pieces, then THE validation `vmm restore` runs.
///
/// # Errors
///
/// What [`restore::open`] refuses, and a stored page's checksum mismatch.
pub fn info(path: &Path) -> Result<SnapshotInfo, SnapshotError> {
    let restore::Opened {
        sections,
        file_bytes,
        version,
        snapshot: snap,
        file,
    } = restore::open(path)?;
    restore::verify_pages(path, &snap, &file)?;
    drop(file);
    let vcpus = snap.vcpus.iter().map(|v| vcpu_info(&snap, v)).collect();
    let (restore_verdict, restore_refusal, restore_must_try) = verdict(path, &snap);
    let m = &snap.meta;
    Ok(SnapshotInfo {
        file: path.display().to_string(),
        file_bytes,
        format_version: version,
        sections,
        trigger: m.trigger.clone(),
        created_unix_s: m.created_unix_s,
        vmm_version: m.vmm_version.clone(),
        mem_mib: m.mem_mib,
        memory_pages: snap.memory.size / crate::arch::layout::PAGE_SIZE as u64,
        memory_regions: snap
            .memory
            .ram_regions()
            .iter()
            .map(|r| MemoryRegionInfo {
                addr: r.addr,
                bytes: r.len,
            })
            .collect(),
        memory_pages_stored: snap.memory.stored_pages(),
        memory_write: m.memory_write.clone(),
        cmdline: m.cmdline.clone(),
        irqchip: m.irqchip.clone(),
        platform: m.platform.clone(),
        exits_before: m.exits,
        guest_ran_ms: m.guest_ran_ms,
        vcpus,
        policy_xcr0: m.policy(),
        policy_xcr0_names: m.policy().to_string(),
        source_kvm_xcr0: XfeatureMask::from_bits(m.kvm_xcr0),
        source_kvm_xss: XfeatureMask::from_bits(m.kvm_xss),
        tsc_khz: m.tsc_khz,
        restorable_here: match restore_verdict {
            Verdict::Yes => Some(true),
            Verdict::No => Some(false),
            Verdict::MustTry | Verdict::Unknown => None,
        },
        restore_verdict,
        restore_refusal,
        restore_must_try,
    })
}

/// One vCPU as `info` shows it. Sizes come from the source's leaf 0xD
/// when it is consistent; when it is not, the validation says so.
fn vcpu_info(snap: &Snapshot, v: &VcpuState) -> VcpuInfo {
    let source = snap.meta.source_info().ok();
    let xcr0 = XfeatureMask::from_bits(v.xcr0().unwrap_or(0));
    let bv = v.xstate.xstate_bv_mask();
    VcpuInfo {
        id: v.id,
        rip: reg(v.regs.rip),
        cr0: reg(v.sregs.cr0),
        cr4: reg(v.sregs.cr4),
        efer: reg(v.sregs.efer),
        cpl: v.sregs.cs.dpl,
        xcr0,
        xcr0_names: xcr0.to_string(),
        ia32_xss: v.msr(MSR_IA32_XSS).map(XfeatureMask::from_bits),
        msrs: v.msrs.len(),
        cpuid_entries: v.cpuid.len(),
        xstate_bv: bv,
        components_in_use: bv.describe().to_string(),
        xstate_compacted_bytes: v.xstate.len(),
        xstate_standard_bytes: source
            .and_then(|s| s.layout(xcr0, Format::Standard).ok())
            .map(|l| l.total_size())
            .unwrap_or(0),
        kvm_xsave_bytes: xstate::kvm::KVM_XSAVE_REGION_SIZE,
        events: v.events.is_some(),
        mp_state: v.mp_state,
        debugregs: v.debugregs.is_some(),
        ia32_xfd: v.xfd.map(|x| reg(x.xfd)),
        ia32_xfd_err: v.xfd.map(|x| reg(x.xfd_err)),
        lapic: v.lapic.is_some(),
    }
}

/// Exactly what `vmm restore` runs before it creates a VM: the dynamic
/// xfeatures asked for first (KVM's table lacks AMX until this process
/// may give it to guests; a refusal shows as the validation's own
/// reason), then THE validation. Returns the verdict, the refusal and
/// what only KVM can tell.
fn verdict(path: &Path, snap: &Snapshot) -> (Verdict, Option<String>, Vec<String>) {
    let _ = crate::arch::amx::permit_policy(snap.meta.policy());
    let Ok(host) = HostKvm::open() else {
        return (Verdict::Unknown, None, Vec::new());
    };
    match crate::snapshot::compat::validate(path, snap, &host) {
        Ok(v) if v.checked.must_try.is_empty() => (Verdict::Yes, None, Vec::new()),
        Ok(v) => (Verdict::MustTry, None, v.checked.must_try),
        Err(e) => (Verdict::No, Some(e.to_string()), Vec::new()),
    }
}

impl SnapshotInfo {
    /// The human table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "snapshot {} ({} bytes, format v{}, {}-triggered, vmm {})",
            self.file, self.file_bytes, self.format_version, self.trigger, self.vmm_version
        );
        let _ = writeln!(s, "sections");
        let t = Columns::new()
            .left("  ", 16)
            .right(" ", 10)
            .right(" ", 10)
            .left("  ", 0);
        t.push(&mut s, &["name", "offset B", "length B", "crc32"]);
        for e in &self.sections {
            t.push(
                &mut s,
                &[
                    e.name.clone(),
                    e.offset.to_string(),
                    e.length.to_string(),
                    format!("{:08x}", e.crc32),
                ],
            );
        }
        let _ = writeln!(
            s,
            "memory        {} MiB: {} of {} pages stored, {} all-zero pages left out",
            self.mem_mib,
            self.memory_pages_stored,
            self.memory_pages,
            self.memory_pages - self.memory_pages_stored
        );
        let regions: Vec<String> = self
            .memory_regions
            .iter()
            .map(|r| format!("{} MiB at {:#x}", r.bytes >> 20, r.addr))
            .collect();
        let _ = writeln!(s, "memory map    {}", regions.join(", "));
        if !self.memory_write.is_empty() {
            let _ = writeln!(s, "memory write  {}", self.memory_write);
        }
        let _ = writeln!(s, "command line  {}", self.cmdline);
        let _ = writeln!(
            s,
            "policy        {:#x} ({})",
            self.policy_xcr0, self.policy_xcr0_names
        );
        let _ = writeln!(
            s,
            "source KVM    XCR0 {:#x} IA32_XSS {:#x}, TSC {} kHz",
            self.source_kvm_xcr0, self.source_kvm_xss, self.tsc_khz
        );
        let _ = writeln!(s, "irqchip/PIT   {}", self.irqchip);
        let _ = writeln!(s, "platform      {}", self.platform);
        let _ = writeln!(
            s,
            "guest ran     {:.1} ms, {} exits before the snapshot",
            self.guest_ran_ms, self.exits_before
        );
        for v in &self.vcpus {
            let _ = writeln!(
                s,
                "vcpu{}         rip {} cpl {} cr0 {} cr4 {} efer {}; {} MSRs, {} CPUID entries",
                v.id, v.rip, v.cpl, v.cr0, v.cr4, v.efer, v.msrs, v.cpuid_entries
            );
            let _ = writeln!(
                s,
                "  XCR0        {:#x} ({}), IA32_XSS {}",
                v.xcr0,
                v.xcr0_names,
                hex::or_dash(v.ia32_xss)
            );
            let _ = writeln!(
                s,
                "  in use      XSTATE_BV {:#x}: {}",
                v.xstate_bv, v.components_in_use
            );
            let _ = writeln!(
                s,
                "  xstate      {} B stored compacted; standard image {} B; legacy kvm_xsave {} B",
                v.xstate_compacted_bytes, v.xstate_standard_bytes, v.kvm_xsave_bytes
            );
        }
        let _ = match (self.restore_verdict, &self.restore_refusal) {
            (Verdict::Yes, _) => writeln!(s, "restorable on this host: yes"),
            (Verdict::No, Some(r)) => writeln!(s, "restorable on this host: no: {r}"),
            (Verdict::MustTry, _) => writeln!(
                s,
                "restorable on this host: restore must try: {}",
                self.restore_must_try.join("; ")
            ),
            _ => writeln!(s, "restorable on this host: unknown (KVM unavailable)"),
        };
        s
    }
}
/// `vmm snapshot`.
#[derive(clap::Args)]
pub struct SnapshotArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SnapshotCommand,
}

/// The subcommands of `vmm snapshot`.
#[derive(clap::Subcommand)]
pub enum SnapshotCommand {
    /// Show what a snapshot holds: sections, memory, vCPU and xstate.
    Info(InfoArgs),
}

/// `vmm snapshot info`.
#[derive(clap::Args)]
pub struct InfoArgs {
    /// The snapshot file.
    #[arg(value_parser = crate::input::parse_in_place)]
    pub file: PathBuf,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `vmm snapshot ...`: returns the exit status; errors are printed as
/// `vmm: ...` with status 64, a closed standard output ends it quietly
/// ([`crate::output::stdout::EXIT_CLOSED_PIPE`]).
pub fn main(args: SnapshotArgs) -> i32 {
    use crate::output::stdout::{self, StdoutError, EXIT_CLOSED_PIPE};
    match args.command {
        SnapshotCommand::Info(a) => {
            let text = match info(&a.file) {
                Ok(i) if a.json => {
                    match crate::schema::to_json(crate::schema::Document::SnapshotInfo, &i) {
                        Ok(j) => j + "\n",
                        Err(e) => {
                            crate::output::terminal::line(format_args!("vmm: JSON: {e}"));
                            return super::EXIT_VMM_ERROR;
                        }
                    }
                }
                Ok(i) => i.to_table(),
                Err(e) => {
                    crate::error::eprint(&e, e.hint());
                    return super::EXIT_VMM_ERROR;
                }
            };
            match stdout::print(&text) {
                Ok(()) => 0,
                Err(StdoutError::Closed) => EXIT_CLOSED_PIPE,
                Err(e) => {
                    crate::output::terminal::line(format_args!("vmm: output: {e}"));
                    super::EXIT_VMM_ERROR
                }
            }
        }
    }
}
