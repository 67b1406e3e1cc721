//! The serialisable model of a `vmm run`: [`RunSummary`] and its rows, built
//! from a [`RunOutcome`](crate::run::RunOutcome). Its JSON is documented in [`super`]; masks stay
//! typed here and become hex strings only when serialised.

use serde::Serialize;
use xstate::XfeatureMask;

use super::hex;
use super::parallel::Measured;
use super::row_id::RowId;
use super::views::{ResolutionView, SnapshotView};
use crate::vstate::RegisterDump;
use crate::xstate_manager::{SyncPolicy, SyncStats};

mod build;

pub use build::result_rows;

/// One workload result as printed.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ResultRow {
    /// Workload name (`aes-128-cbc`, `linpack`, `ctxsw`, `exit-pio`, ...).
    pub name: String,
    /// Implementation variant (`aesni`, `avx2`, `cpl3-zmm`, ...).
    pub variant: String,
    /// Problem size the guest chose, in [`ResultRow::size_unit`]s.
    pub size: u64,
    /// What `size` counts: `bytes` (AES message), `matrix order` (n of the
    /// n x n DGEMM/Linpack matrices) or `events` (exits, switches).
    pub size_unit: &'static str,
    /// Throughput of byte workloads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mb_per_s: Option<f64>,
    /// Throughput of floating-point workloads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gflops: Option<f64>,
    /// Rate of event workloads (exits, switches).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_per_s: Option<f64>,
    /// `pass` or `fail`: whether the guest's self-check of the result held.
    pub check: &'static str,
    /// TSC cycles of the timed region.
    pub cycles: u64,
    /// Units of work in the timed region (bytes, flops, events).
    pub work: u64,
    /// The timed region in seconds (null when the TSC rate is unknown).
    pub seconds: Option<f64>,
    /// Residual of the linear-algebra check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub residual: Option<f64>,
    /// Bytes written per save (`ctxsw` rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_save: Option<u64>,
    /// Guest throughput / native throughput of the same code, when measured:
    /// the median of the interleaved part pairs (or repetition pairs, from
    /// a guest that signals no parts) when there are any.
    pub native_ratio: Option<f64>,
    /// The spread of the interleaved pairs (null when the native side ran
    /// once, after the guest).
    pub native_spread: Option<super::native_view::RatioSpread>,
    /// TSC cycles per unit of work (per byte, flop or event).
    pub cycles_per_unit: f64,
    /// Nanoseconds per 16-byte AES block (byte workloads; null otherwise or
    /// when the TSC rate is unknown).
    pub ns_per_block: Option<f64>,
    /// Why the row's timing is not a measurement (null when it is): e.g.
    /// it was timed across a snapshot, so its cycles include the time the
    /// VM was stopped. Such a row has no throughput and no native ratio.
    pub invalid: Option<String>,
}

impl ResultRow {
    /// The row's identity across sides, rounds and vCPUs.
    pub fn id(&self) -> RowId<'_> {
        RowId {
            name: &self.name,
            variant: &self.variant,
            size: self.size,
        }
    }

    /// Whether the row is one of the guest's timed workloads (AES, DGEMM,
    /// Linpack: `guest::protocol::RowKind`), which the host also times,
    /// rather than a benchmark row (exits, switches, copies).
    pub fn is_workload(&self) -> bool {
        guest::protocol::RowKind::ALL
            .iter()
            .any(|k| k.name() == self.name)
    }

    /// TSC cycles per unit of work (per exit, per switch, per byte...).
    pub fn cycles_per_op(&self) -> f64 {
        self.cycles as f64 / self.work.max(1) as f64
    }

    /// The throughput figure, whatever its unit.
    pub fn throughput(&self) -> Option<f64> {
        self.mb_per_s.or(self.gflops).or(self.events_per_s)
    }

    /// The unit of [`ResultRow::throughput`].
    pub fn unit(&self) -> &'static str {
        if self.mb_per_s.is_some() {
            "MB/s"
        } else if self.gflops.is_some() {
            "GFLOPS"
        } else {
            "1/s"
        }
    }
}

impl From<&ResultRow> for Measured {
    fn from(r: &ResultRow) -> Self {
        Measured {
            name: r.name.clone(),
            variant: r.variant.clone(),
            size: r.size,
            throughput: r.throughput(),
            unit: r.unit(),
            pass: r.check == "pass",
        }
    }
}

/// A workload variant the guest did not run.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SkipRow {
    /// Workload name.
    pub name: String,
    /// Variant name.
    pub variant: String,
    /// Why (a missing CPU feature, a masked xfeature, ...).
    pub reason: String,
}

/// One candidate of the guest's boot-time switch-strategy calibration.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SwitchFigure {
    /// Strategy name (`SWITCH_STRATEGIES`).
    pub strategy: &'static str,
    /// TSC cycles per switch the guest measured.
    pub cycles: u64,
}

/// One component of the guest's CPUID leaf 0xD.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ComponentRow {
    /// Xfeature number.
    pub id: u32,
    /// Short xfeature name.
    pub name: &'static str,
    /// CPUID 0xD.i EAX.
    pub size: u32,
    /// CPUID 0xD.i EBX.
    pub standard_offset: u32,
    /// Offset the guest computed in the compacted layout of its XCR0 (null
    /// when not in XCR0).
    pub compacted_offset: Option<u32>,
}

/// The guest's view of leaf 0xD, as it reported it.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct GuestCpuidView {
    /// The masks leaf 0xD offered.
    #[serde(flatten)]
    pub supported: GuestSupported,
    /// The sizes and XSAVE instructions leaf 0xD enumerated.
    #[serde(flatten)]
    pub sizes: GuestXsaveSizes,
    /// x87, SSE and every advertised component.
    pub components: Vec<ComponentRow>,
}

/// The state components leaf 0xD offered the guest, as it reported them:
/// one definition for the run summary ([`GuestCpuidView`]) and the guest
/// column of `vmm features`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct GuestSupported {
    /// CPUID 0xD.0 EDX:EAX.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xcr0_supported: XfeatureMask,
    /// CPUID 0xD.1 EDX:ECX.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xss_supported: XfeatureMask,
}

/// The XSAVE area sizes leaf 0xD gave the guest and the ones its xstate
/// crate computed, and the XSAVE instructions it advertised, as the guest
/// reported them: one definition for the run summary ([`GuestCpuidView`])
/// and the guest column of `vmm features`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct GuestXsaveSizes {
    /// CPUID 0xD.0 ECX.
    pub standard_size_max: u32,
    /// CPUID 0xD.0 EBX.
    pub standard_size_enabled: u32,
    /// CPUID 0xD.1 EBX.
    pub compacted_size: u32,
    /// Standard size of its XCR0 by the guest's xstate crate.
    pub computed_standard_size: u32,
    /// Compacted size of its XCR0 by the guest's xstate crate.
    pub computed_compacted_size: u32,
    /// XSAVE instructions CPUID 0xD.1 EAX advertises.
    pub xsave_variants: Vec<&'static str>,
}

/// The CPU exception that ended the guest's run.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct FaultView {
    /// Exception vector.
    pub vector: u32,
    /// `#GP`, `#UD`, ...
    pub mnemonic: &'static str,
    /// Error code pushed by the CPU (0 when none).
    pub error_code: u64,
    /// Faulting instruction address (hex).
    pub rip: String,
    /// CR2 at the fault (hex).
    pub cr2: String,
    /// Privilege level of the faulting code.
    pub cpl: u32,
}

/// Why and in what state the guest crashed.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct CrashView {
    /// KVM's exit reason or the VMM's diagnosis.
    pub reason: String,
    /// The vCPU's registers at the crash.
    pub registers: RegisterDump,
}

/// Wall time of the run's phases, in milliseconds.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Timing {
    /// Building the VM.
    pub setup: f64,
    /// The guest's run.
    pub run: f64,
    /// From the start of the run (as `setup`) to the guest's first
    /// instruction, from the TSC the guest read there: null unless it was
    /// started at vmm's direct 64-bit entry.
    pub first_instruction: Option<f64>,
    /// The entry the guest was started at: `direct64`, `pvh`; null after a
    /// restore.
    pub boot_entry: Option<String>,
    /// The start of the run as a `CLOCK_MONOTONIC` reading in nanoseconds:
    /// subtract the moment you spawned `vmm` to get process start to run
    /// start (`vmm bench startup` does).
    pub start_clock_monotonic_ns: u64,
}

/// A published figure quoted for comparison (not measured by this run).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SeedFigure {
    /// Implementation name as the source gives it.
    pub variant: &'static str,
    /// Throughput, MB/s.
    pub mb_per_s: f64,
}

/// One vCPU of an SMP run (`--vcpus` above 1), as reported.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct VcpuRow {
    /// The vCPU's index (0 is the boot processor).
    pub index: u32,
    /// How its loop ended, in words: `stopped` when another vCPU ended
    /// the run.
    pub end: String,
    /// XCR0 the guest on this CPU reported it set (null without its report).
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub guest_xcr0: Option<XfeatureMask>,
    /// XGETBV(1) on this CPU when it reported.
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub guest_xinuse: Option<XfeatureMask>,
    /// XCR0 as KVM holds it for this vCPU at the end.
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub final_xcr0: Option<XfeatureMask>,
    /// The context-switch strategy this CPU chose (null when it did not
    /// calibrate).
    pub switch_strategy: Option<String>,
    /// Its workload results.
    pub results: Vec<ResultRow>,
    /// The exception this CPU's own report records (each CPU has its own
    /// fault record; null when it handed over none).
    pub fault: Option<FaultView>,
    /// Its exits to user space.
    pub exits: u64,
    /// What its own xstate manager did.
    pub xstate_stats: SyncStats,
    /// When its thread started, first exited and left its loop, in ms
    /// since the run began: the SMP path's breakdown.
    pub phases: crate::vstate::VcpuPhases,
    /// Its registers when `--timeout` stopped the guest (null for any
    /// other end): where this CPU was spinning or stuck.
    pub stopped_at: Option<RegisterDump>,
}

/// The SMP part of a run: how the APs started and each vCPU.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SmpView {
    /// How the application processors were started (`init-sipi`).
    pub ap_start: Option<crate::vstate::ApStart>,
    /// The VM's in-kernel interrupt hardware, as its snapshots name it:
    /// `split` (LAPICs only) or `kvm` (`KVM_CREATE_IRQCHIP`: LAPICs, PICs
    /// and IOAPIC).
    pub irqchip: crate::vstate::smp::Irqchip,
    /// The vCPU whose end is the run's end.
    pub ended_by: u32,
    /// Every vCPU, in index order.
    pub vcpus: Vec<VcpuRow>,
    /// `bench=parallel`: each variant on vCPU 0 alone and on every vCPU at
    /// once, with the native comparison (absent without that benchmark).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parallel: Vec<super::parallel::ParallelRow>,
    /// How many CPUs the guest meant to run (its report; null without one).
    pub cpus_wanted: Option<u32>,
    /// Where the guest took that count from: `cmdline` (a `cpus=` word),
    /// `madt` (ACPI), `mptable` (the MP table this VMM writes) or
    /// `default` (no table: one CPU); null without a report.
    pub cpus_source: Option<String>,
}

/// Everything `vmm run` prints, in one serialisable value.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RunSummary {
    /// The guest's debug-exit value (null when it crashed or timed out).
    pub exit_status: Option<u32>,
    /// A Linux guest's `x86/fpu:` lines and how they compare with vmm's
    /// layout (null for other guests, or a console without those lines).
    pub linux_xstate: Option<crate::run::linux_xstate::LinuxXstate>,
    /// `exited`, `crashed`, `timed_out`, `snapshotted`, `protocol_violation`,
    /// `reset` or `xstate_mismatch`.
    pub exit_reason: &'static str,
    /// The end of the run in words.
    pub exit_description: String,
    /// XCR0 the guest reported it set.
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub guest_xcr0: Option<XfeatureMask>,
    /// XGETBV(1) at the end (null without XGETBV1).
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub guest_xinuse: Option<XfeatureMask>,
    /// XGETBV(0) at CPL3 in the guest: differs from `guest_xcr0` where the
    /// hypervisor runs guest user code on the host's XCR0 (kvm_pvm).
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub guest_xcr0_hardware: Option<XfeatureMask>,
    /// The mask the guest's CPUID offered.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub policy_xfeatures: XfeatureMask,
    /// The same as component names.
    pub policy_xfeatures_names: String,
    /// What KVM supports.
    #[serde(serialize_with = "hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub kvm_xfeatures: XfeatureMask,
    /// `minimal` or `all`.
    pub init_xstate: &'static str,
    /// Standard-format size of the policy.
    pub standard_size: u32,
    /// Compacted-format size of the policy.
    pub compacted_size: u32,
    /// CPUID flags the policy hides.
    pub hidden_cpuid_flags: Vec<&'static str>,
    /// Whether KVM kept the policy's CPUID (read back with KVM_GET_CPUID2).
    pub kvm_cpuid_honored: Option<bool>,
    /// Leaf 0xD.0 EDX:EAX as KVM holds it after KVM_SET_CPUID2.
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub kvm_cpuid_xfeatures: Option<XfeatureMask>,
    /// Leaf 0xD.0 ECX as KVM holds it after KVM_SET_CPUID2.
    pub kvm_cpuid_standard_size: Option<u32>,
    /// Flags the guest sees although the policy masks their state.
    pub exposed_despite_policy: Vec<&'static str>,
    /// XCR0 as KVM holds it at the end of the run (`KVM_GET_XCRS`).
    #[serde(serialize_with = "hex::opt_mask")]
    #[schemars(with = "Option<crate::schema::Hex>")]
    pub final_xcr0: Option<XfeatureMask>,
    /// The guest's view of leaf 0xD (null without a report).
    pub guest_cpuid: Option<GuestCpuidView>,
    /// The TSC rate the cycle counts are converted with.
    pub tsc_khz: u64,
    /// Workload results.
    pub results: Vec<ResultRow>,
    /// The host's `openssl speed -evp aes-128-cbc` at 8192-byte blocks, MB/s.
    pub openssl_aes_128_cbc_mb_per_s: Option<f64>,
    /// The host's `openssl speed -evp` for each AES mode and size the guest
    /// timed, with every guest variant's ratio to it.
    pub openssl_yardsticks: Vec<crate::report::yardstick::Yardstick>,
    /// The seed thread's AES-256-XTS 4 KiB figures on Ice Lake (MB/s), a
    /// static reference shown when the run has XTS rows.
    pub seed_xts_4k_ice_lake: Vec<SeedFigure>,
    /// Workload variants not run.
    pub skipped: Vec<SkipRow>,
    /// The context-switch strategy the guest chose by measuring at boot.
    pub switch_strategy: Option<String>,
    /// TSC cycles per switch the guest measured for each candidate.
    pub switch_cycles: Vec<SwitchFigure>,
    /// `bench=copy`: the copy table, crossovers and memcpy policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy: Option<super::copy::CopyView>,
    /// The CPU exception that ended the run, if any.
    pub fault: Option<FaultView>,
    /// Reason and register dump when the guest crashed.
    pub crash: Option<CrashView>,
    /// The boot vCPU's registers when `--timeout` stopped the guest: where a
    /// guest that never exits was spinning or stuck (null for other ends).
    pub stopped_at: Option<RegisterDump>,
    /// Why reports from the guest were refused (the first ones).
    pub report_errors: Vec<String>,
    /// Snapshots that could not be written, each naming the file and the
    /// cause; the guest was resumed after each.
    pub snapshot_errors: Vec<String>,
    /// Refused reports beyond those in `report_errors`.
    pub report_errors_dropped: u64,
    /// Valid reports a later one replaced.
    pub reports_dropped: u64,
    /// Guest requests the VMM refused and answered (the first reasons).
    pub refused_requests: Vec<String>,
    /// How many guest requests were refused in all.
    pub requests_refused: u64,
    /// Benchmark markers beyond those kept.
    pub marks_dropped: u64,
    /// COM1 output older than the tail the VMM keeps.
    pub serial_bytes_dropped: u64,
    /// Exits to user space.
    pub exits: u64,
    /// The xstate sync policy and what it cost: KVM_GET/SET_XSAVE calls and bytes.
    pub xstate_sync: SyncPolicy,
    /// What the sync policy cost.
    pub xstate_stats: SyncStats,
    /// Wall time of setup and run.
    pub timing_ms: Timing,
    /// How `--xfeatures` was understood (null without `--xfeatures`, and
    /// after a restore).
    pub xfeatures_resolution: Option<ResolutionView>,
    /// What became of a requested snapshot (null when none was requested).
    pub snapshot: Option<SnapshotView>,
    /// How the guest/native ratios were measured (null when no repetition
    /// was interleaved).
    pub native: Option<super::native_view::NativeView>,
    /// What `--hugepages` did (null without it).
    pub hugepages: Option<super::native_view::HugePagesView>,
    /// After `vmm restore`: how the snapshot's stored pages reached guest
    /// RAM (absent after `vmm run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restored_memory: Option<super::views::RestoredMemoryView>,
    /// Per vCPU, with `--vcpus` above 1 (absent with one vCPU); the fields
    /// above are the totals and the boot processor's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smp: Option<SmpView>,
    /// The process exit status `vmm run` ends with.
    #[serde(skip)]
    pub process_exit: i32,
}
