//! The rows and the document of `vmm bench peers`.

use std::path::PathBuf;
use std::time::Duration;

use guest::protocol::Report;
use schemars::JsonSchema;
use serde::Serialize;
use xstate::XfeatureMask;

use crate::bench::stats::Spread;
use crate::features::profile::HexMask;
/// Runs per VMM when `--runs` is absent.
pub const DEFAULT_RUNS: u32 = 3;
/// The most `--runs` accepts.
pub const MAX_RUNS: u32 = 100;
/// Exits per benchmark row the guest runs when `--exits` is absent: enough
/// for a stable per-exit figure, few enough that the slowest peer ends in
/// seconds.
pub const DEFAULT_EXITS: u64 = 2000;
/// The most `--exits` accepts.
pub const MAX_EXITS: u64 = 1_000_000;
/// Seconds one run of one VMM may take when `--timeout` is absent.
pub const DEFAULT_TIMEOUT_S: u64 = 120;
/// How often a running child is polled for its exit: the resolution of
/// the start-to-exit time.
pub const POLL: Duration = Duration::from_micros(500);
/// Guest RAM of every VMM, in MiB.
pub const MEM_MIB: u32 = 64;

/// The VMMs `vmm bench peers` knows.
// `Vmm::Vmm` is this VMM among its peers, by the name the table prints.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Vmm {
    /// This VMM (`vmm run`).
    Vmm,
    /// QEMU, `-M microvm`.
    Qemu,
    /// Cloud Hypervisor (`--serial tty --console off`).
    CloudHypervisor,
    /// Firecracker (`--no-api --config-file`).
    Firecracker,
}

impl Vmm {
    /// Its name in the table and the JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Vmm::Vmm => "vmm",
            Vmm::Qemu => "qemu",
            Vmm::CloudHypervisor => "cloud-hypervisor",
            Vmm::Firecracker => "firecracker",
        }
    }

    /// The environment variable naming its executable.
    pub const fn env_var(self) -> Option<&'static str> {
        match self {
            Vmm::Vmm => None,
            Vmm::Qemu => Some("VMM_PEER_QEMU"),
            Vmm::CloudHypervisor => Some("VMM_PEER_CLOUD_HYPERVISOR"),
            Vmm::Firecracker => Some("VMM_PEER_FIRECRACKER"),
        }
    }
}

/// What can stop `vmm bench peers` before it measures, or one run of one
/// VMM.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// An environment variable names something that is not an executable
    /// regular file.
    #[error("{var}={}: not an executable regular file", path.display())]
    NotExecutable {
        /// The variable.
        var: &'static str,
        /// Its value.
        path: PathBuf,
    },
    /// The scratch directory or a file in it could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Scratch {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The VMM's process could not be started.
    #[error("cannot start {}: {source}", binary.display())]
    Spawn {
        /// The executable.
        binary: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for the child failed.
    #[error("waiting for {}: {source}", binary.display())]
    Wait {
        /// The executable.
        binary: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The run did not end within `--timeout`; the child was killed.
    #[error("still running after {secs} s: killed")]
    Timeout {
        /// The limit, in seconds.
        secs: u64,
    },
    /// The serial log held no valid guest record.
    #[error("{reason} ({status}; serial log tail: {tail:?}; stderr tail: {stderr:?})")]
    NoRecord {
        /// What the log parser said.
        reason: String,
        /// The child's exit status.
        status: String,
        /// The last bytes of the serial log, for diagnosis.
        tail: String,
        /// The last bytes of the child's stderr.
        stderr: String,
    },
}

/// One guest exit-cost row, the median over the runs.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ExitRow {
    /// The guest's row name (`exit-pio`, `exit-mmio`, `exit-cpuid`).
    pub name: String,
    /// Its variant (`cpl3-clean`, `cpl3-ymm`, `cpl3-zmm`, `cpl3-tiles`, `cpl0`).
    pub variant: String,
    /// Exits the guest timed per run.
    pub exits: u64,
    /// TSC cycles per exit, as the guest timed them: median and spread
    /// over the runs.
    pub cycles_per_exit: Spread,
    /// Nanoseconds per exit (median), from [`PeerRow::tsc_khz`]; `None`
    /// when no TSC frequency is known.
    pub ns_per_exit: Option<f64>,
}

/// The xstate a VMM showed the guest, from its record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct GuestMasks {
    /// XCR0 the guest ran with (it enables everything CPUID offers).
    #[schemars(with = "crate::schema::Hex")]
    pub xcr0: HexMask,
    /// CPUID.(EAX=0xD,ECX=0):EDX:EAX, the XCR0 bits offered.
    #[schemars(with = "crate::schema::Hex")]
    pub xcr0_supported: HexMask,
    /// CPUID.(EAX=0xD,ECX=1):EDX:ECX, the IA32_XSS bits offered.
    #[schemars(with = "crate::schema::Hex")]
    pub xss_supported: HexMask,
    /// CPUID.(EAX=0xD,ECX=1):EAX (XSAVEOPT, XSAVEC, XGETBV1, XSAVES, XFD).
    #[schemars(with = "crate::schema::Hex")]
    pub xsave_features: HexMask,
    /// CPUID.1:ECX.
    #[schemars(with = "crate::schema::Hex")]
    pub cpuid1_ecx: HexMask,
    /// CPUID.7.0:EBX.
    #[schemars(with = "crate::schema::Hex")]
    pub cpuid7_ebx: HexMask,
    /// CPUID.7.0:ECX.
    #[schemars(with = "crate::schema::Hex")]
    pub cpuid7_ecx: HexMask,
    /// CPUID.7.0:EDX.
    #[schemars(with = "crate::schema::Hex")]
    pub cpuid7_edx: HexMask,
    /// CPUID.7.1:EAX.
    #[schemars(with = "crate::schema::Hex")]
    pub cpuid7_1_eax: HexMask,
    /// CPUID.(EAX=0xD,ECX=0):EBX, the standard XSAVE size for XCR0.
    pub size_enabled: u32,
}

impl GuestMasks {
    /// What the guest's report says the VMM showed it.
    pub(super) fn of(r: &Report) -> Self {
        GuestMasks {
            xcr0: HexMask(r.xcr0),
            xcr0_supported: HexMask(r.cpuid_xcr0_supported),
            xss_supported: HexMask(r.cpuid_xss_supported),
            xsave_features: HexMask(r.cpuid_xsave_features.into()),
            cpuid1_ecx: HexMask(r.cpuid1_ecx.into()),
            cpuid7_ebx: HexMask(r.cpuid7_ebx.into()),
            cpuid7_ecx: HexMask(r.cpuid7_ecx.into()),
            cpuid7_edx: HexMask(r.cpuid7_edx.into()),
            cpuid7_1_eax: HexMask(r.cpuid7_1_eax.into()),
            size_enabled: r.cpuid_size_enabled,
        }
    }

    /// `(field, value)` pairs, in a fixed order.
    /// The masks by name, for the table and the differences column.
    pub(super) fn fields(&self) -> [(&'static str, u64); 10] {
        [
            ("xcr0", self.xcr0.0),
            ("xcr0_supported", self.xcr0_supported.0),
            ("xss_supported", self.xss_supported.0),
            ("xsave_features", self.xsave_features.0),
            ("cpuid1_ecx", self.cpuid1_ecx.0),
            ("cpuid7_ebx", self.cpuid7_ebx.0),
            ("cpuid7_ecx", self.cpuid7_ecx.0),
            ("cpuid7_edx", self.cpuid7_edx.0),
            ("cpuid7_1_eax", self.cpuid7_1_eax.0),
            ("size_enabled", self.size_enabled.into()),
        ]
    }

    /// How these masks differ from `ours`, one entry per differing field:
    /// `xcr0 -pkru` (XCR0 components named), `cpuid7_ebx 0x.. (vmm 0x..)`.
    pub fn differences(&self, ours: &GuestMasks) -> Vec<String> {
        let mut out = Vec::new();
        for ((name, v), (_, o)) in self.fields().into_iter().zip(ours.fields()) {
            if v == o {
                continue;
            }
            if name == "xcr0" || name == "xcr0_supported" {
                let missing = XfeatureMask::from_bits(o & !v);
                let extra = XfeatureMask::from_bits(v & !o);
                let mut s = format!("{name} {v:#x}:");
                if !missing.is_empty() {
                    s.push_str(&format!(" -{missing}"));
                }
                if !extra.is_empty() {
                    s.push_str(&format!(" +{extra}"));
                }
                out.push(s);
            } else {
                out.push(format!("{name} {v:#x} (vmm {o:#x})"));
            }
        }
        out
    }
}

/// One VMM's results.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct PeerRow {
    /// Which VMM.
    pub vmm: Vmm,
    /// The executable run.
    pub binary: String,
    /// The command line of the last run (scratch paths included).
    pub command: Vec<String>,
    /// Process start to exit of each successful run, in milliseconds.
    pub start_to_exit_ms: Vec<f64>,
    /// Their median and spread; `None` when no run succeeded.
    pub start_to_exit: Option<Spread>,
    /// The exit status of the last run, as text (`exit status: 0`).
    pub exit_status: Option<String>,
    /// The TSC frequency (kHz) the guest reported; 0 when the VMM gives it
    /// none (QEMU microvm and Firecracker give no leaf 0x40000010 here).
    pub guest_tsc_khz: u64,
    /// The TSC frequency used for [`ExitRow::ns_per_exit`]: the guest's,
    /// else the one the guest under `vmm` reported (the same host TSC).
    pub tsc_khz: Option<u64>,
    /// The guest's exit-cost rows.
    pub exit_rows: Vec<ExitRow>,
    /// The xstate the VMM showed the guest (the last run's record).
    pub masks: Option<GuestMasks>,
    /// How [`PeerRow::masks`] differ from `vmm`'s.
    pub differs_from_vmm: Vec<String>,
    /// How snapshot and restore were driven, or why they were not
    /// measured (`not measured ...`).
    pub snapshot: String,
    /// Pause request to snapshot complete, ms, per successful cycle (see
    /// [`super::snapshot`]).
    pub snapshot_ms: Vec<f64>,
    /// Restoring process spawned to guest resumed, ms, per successful cycle.
    pub restore_ms: Vec<f64>,
    /// Median and spread of [`PeerRow::snapshot_ms`]; `None` when no cycle
    /// succeeded or none was run.
    pub snapshot_time: Option<Spread>,
    /// Median and spread of [`PeerRow::restore_ms`].
    pub restore_time: Option<Spread>,
    /// Why a snapshot cycle failed (the first failure): the pause, the
    /// snapshot, the restore, or the restored guest not finishing with its
    /// normal exit. Not counted in the exit status.
    pub snapshot_error: Option<String>,
    /// Why a run failed (the first failure); the successful runs still count.
    pub error: Option<String>,
}

/// A VMM that was not run, and why.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Skipped {
    /// Which VMM.
    pub vmm: Vmm,
    /// Why it was not run.
    pub reason: String,
}

/// The `vmm bench peers --json` document.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct PeersBench {
    /// The guest's command line, the same under every VMM (Firecracker
    /// appends `pci=off`, QEMU nothing the guest acts on).
    pub guest_words: String,
    /// Runs per VMM.
    pub runs: u32,
    /// Guest RAM, MiB.
    pub mem_mib: u32,
    /// One row per VMM run, `vmm` first.
    pub vmms: Vec<PeerRow>,
    /// VMMs not run.
    pub skipped: Vec<Skipped>,
}

/// The last 400 bytes of `bytes`, as text: enough of a log to see why.
pub(crate) fn tail_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(400)..]).into_owned()
}
