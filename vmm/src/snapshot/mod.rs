//! Snapshot and restore: `vmm run --snapshot-after S --snapshot-file F`
//! (or a guest write to `SNAPSHOT_PORT`) saves the VM and stops;
//! `vmm restore F` resumes it in a fresh VM; `vmm snapshot info F` shows
//! what is inside.
//!
//! The extended state is stored the way the xstate manager holds it:
//! **compacted, with only the components in use** (an AVX-512-capable guest
//! whose upper state is in its init state costs 576 bytes, not 2.4 KiB; an
//! AMX guest with idle tiles not 11 KiB), together with XCR0 and the source
//! KVM's leaf 0xD, so a target with other standard offsets can re-lay it
//! out and a target lacking a component in use refuses by name before any
//! VM exists.
//!
//! - [`format`]: the container (header, section table, CRC32 per section)
//!   and the sparse memory encoding.
//! - [`state`]: the sections and their encodings.
//! - [`save`]: capturing a running VM.
//! - [`restore`]: checking a snapshot against this host and resuming it.

pub mod compat;
pub mod error;
pub mod format;
pub mod restore;
pub mod save;
pub mod sparse;
pub mod state;

use std::path::{Path, PathBuf};

use serde::Serialize;
use xstate::{Format, XfeatureMask};

use crate::kvm::HostKvm;
use format::SectionInfo;
pub use restore::SnapshotError;
use state::Snapshot;

/// `vmm snapshot`.
#[derive(clap::Args)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    pub command: SnapshotCommand,
}

#[derive(clap::Subcommand)]
pub enum SnapshotCommand {
    /// Show what a snapshot holds: sections, memory, vCPU and xstate.
    Info(InfoArgs),
}

#[derive(clap::Args)]
pub struct InfoArgs {
    /// The snapshot file.
    pub file: PathBuf,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `vmm snapshot info` as printed.
#[derive(Clone, Debug, Serialize)]
pub struct SnapshotInfo {
    pub file: String,
    pub file_bytes: u64,
    pub format_version: u32,
    pub sections: Vec<SectionInfo>,
    pub trigger: String,
    pub created_unix_s: u64,
    pub vmm_version: String,
    pub mem_mib: u64,
    pub memory_pages: u64,
    /// Non-zero pages stored; the rest were all-zero and left out.
    pub memory_pages_stored: u64,
    pub cmdline: String,
    pub irqchip: String,
    pub exits_before: u64,
    pub guest_ran_ms: f64,
    pub vcpus: Vec<VcpuInfo>,
    /// The guest's CPUID xfeature policy.
    pub policy_xcr0: String,
    pub policy_xcr0_names: String,
    pub source_kvm_xcr0: String,
    pub source_kvm_xss: String,
    pub tsc_khz: u32,
    /// Whether this host can restore it (null when KVM cannot be opened).
    pub restorable_here: Option<bool>,
    pub restore_refusal: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VcpuInfo {
    pub id: u32,
    pub rip: String,
    pub cr0: String,
    pub cr4: String,
    pub efer: String,
    pub cpl: u8,
    pub xcr0: String,
    pub xcr0_names: String,
    pub ia32_xss: Option<String>,
    pub msrs: usize,
    pub cpuid_entries: usize,
    /// XSTATE_BV of the stored image: the components in use.
    pub xstate_bv: String,
    pub components_in_use: String,
    /// Bytes stored (compacted, in-use only).
    pub xstate_compacted_bytes: usize,
    /// A standard image for the guest's XCR0, as KVM_GET_XSAVE transfers it.
    pub xstate_standard_bytes: u32,
    /// The legacy `struct kvm_xsave` a VMM without XSAVE2 stores.
    pub kvm_xsave_bytes: usize,
    pub events: bool,
    pub mp_state: Option<u32>,
    pub debugregs: bool,
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

/// Build the `info` view of a file.
pub fn info(path: &Path) -> Result<SnapshotInfo, SnapshotError> {
    let bytes = std::fs::read(path).map_err(|source| SnapshotError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let fmt_err = |source| SnapshotError::Format {
        path: path.to_path_buf(),
        source,
    };
    let sections = format::read_table(&bytes).map_err(fmt_err)?;
    let snap = Snapshot::from_bytes(&bytes).map_err(fmt_err)?;
    let source = snap.meta.source_info().map_err(fmt_err)?;
    let vcpus = snap
        .vcpus
        .iter()
        .map(|v| {
            let xcr0 = v.xcr0().unwrap_or(0);
            let bv = v.xstate.xstate_bv_mask();
            VcpuInfo {
                id: v.id,
                rip: hex(v.regs.rip),
                cr0: hex(v.sregs.cr0),
                cr4: hex(v.sregs.cr4),
                efer: hex(v.sregs.efer),
                cpl: v.sregs.cs.dpl,
                xcr0: hex(xcr0),
                xcr0_names: XfeatureMask::from_bits(xcr0).to_string(),
                ia32_xss: v.msr(0xda0).map(hex),
                msrs: v.msrs.len(),
                cpuid_entries: v.cpuid.len(),
                xstate_bv: hex(bv.bits()),
                components_in_use: bv.describe().to_string(),
                xstate_compacted_bytes: v.xstate.len(),
                xstate_standard_bytes: source
                    .layout(XfeatureMask::from_bits(xcr0), Format::Standard)
                    .map(|l| l.total_size())
                    .unwrap_or(0),
                kvm_xsave_bytes: xstate::kvm::KVM_XSAVE_REGION_SIZE,
                events: v.events.is_some(),
                mp_state: v.mp_state,
                debugregs: v.debugregs.is_some(),
            }
        })
        .collect();
    let (restorable_here, restore_refusal) = match HostKvm::open() {
        Ok(host) => match restore::check(path, &snap, &host.xstate.info) {
            Ok(_) => (Some(true), None),
            Err(e) => (Some(false), Some(e.to_string())),
        },
        Err(_) => (None, None),
    };
    let m = &snap.meta;
    Ok(SnapshotInfo {
        file: path.display().to_string(),
        file_bytes: bytes.len() as u64,
        format_version: format::FORMAT_VERSION,
        sections,
        trigger: m.trigger.clone(),
        created_unix_s: m.created_unix_s,
        vmm_version: m.vmm_version.clone(),
        mem_mib: m.mem_mib,
        memory_pages: snap.memory.size / format::PAGE_SIZE as u64,
        memory_pages_stored: snap.memory.stored_pages(),
        cmdline: m.cmdline.clone(),
        irqchip: m.irqchip.clone(),
        exits_before: m.exits,
        guest_ran_ms: m.guest_ran_ms,
        vcpus,
        policy_xcr0: hex(m.policy_xcr0),
        policy_xcr0_names: m.policy().to_string(),
        source_kvm_xcr0: hex(m.kvm_xcr0),
        source_kvm_xss: hex(m.kvm_xss),
        tsc_khz: m.tsc_khz,
        restorable_here,
        restore_refusal,
    })
}

impl SnapshotInfo {
    pub fn to_table(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "snapshot {} ({} bytes, format v{}, {}-triggered, vmm {})",
            self.file, self.file_bytes, self.format_version, self.trigger, self.vmm_version
        );
        let _ = writeln!(s, "sections");
        let _ = writeln!(
            s,
            "  {:<16} {:>10} {:>10}  crc32",
            "name", "offset", "bytes"
        );
        for e in &self.sections {
            let _ = writeln!(
                s,
                "  {:<16} {:>10} {:>10}  {:08x}",
                e.name, e.offset, e.length, e.crc32
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
        let _ = writeln!(s, "command line  {}", self.cmdline);
        let _ = writeln!(
            s,
            "policy        {} ({})",
            self.policy_xcr0, self.policy_xcr0_names
        );
        let _ = writeln!(
            s,
            "source KVM    XCR0 {} IA32_XSS {}, TSC {} kHz",
            self.source_kvm_xcr0, self.source_kvm_xss, self.tsc_khz
        );
        let _ = writeln!(s, "irqchip/PIT   {}", self.irqchip);
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
                "  XCR0        {} ({}), IA32_XSS {}",
                v.xcr0,
                v.xcr0_names,
                v.ia32_xss.as_deref().unwrap_or("-")
            );
            let _ = writeln!(
                s,
                "  in use      XSTATE_BV {}: {}",
                v.xstate_bv, v.components_in_use
            );
            let _ = writeln!(
                s,
                "  xstate      {} B stored compacted; standard image {} B; legacy kvm_xsave {} B",
                v.xstate_compacted_bytes, v.xstate_standard_bytes, v.kvm_xsave_bytes
            );
        }
        match (self.restorable_here, &self.restore_refusal) {
            (Some(true), _) => {
                let _ = writeln!(s, "restorable on this host: yes");
            }
            (Some(false), Some(r)) => {
                let _ = writeln!(s, "restorable on this host: no: {r}");
            }
            _ => {
                let _ = writeln!(s, "restorable on this host: unknown (KVM unavailable)");
            }
        }
        s
    }
}

/// `vmm snapshot ...`: returns the exit status; errors are printed as
/// `vmm: ...` with status 64.
pub fn main(args: SnapshotArgs) -> i32 {
    match args.command {
        SnapshotCommand::Info(a) => match info(&a.file) {
            Ok(i) => {
                if a.json {
                    match serde_json::to_string_pretty(&i) {
                        Ok(j) => println!("{j}"),
                        Err(e) => {
                            eprintln!("vmm: JSON: {e}");
                            return crate::report::EXIT_VMM_ERROR;
                        }
                    }
                } else {
                    print!("{}", i.to_table());
                }
                0
            }
            Err(e) => {
                eprintln!("vmm: {e}");
                crate::report::EXIT_VMM_ERROR
            }
        },
    }
}
