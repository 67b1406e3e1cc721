//! What `vmm run` prints (a short human table, or one JSON object), the
//! exit statuses, and the table and hex helpers every view of the VMM shares.
//!
//! The JSON object (`--json`) is stable; fields are only ever added:
//!
//! | field | meaning |
//! |-------|---------|
//! | `exit_status` | the guest's debug-exit value, or null when it crashed or timed out |
//! | `exit_reason` | `exited`, `crashed`, `timed_out`, `snapshotted` (`vmm run --snapshot-after`/`--snapshot-file`; the guest stopped after its state was saved) or `protocol_violation` (a debug-exit status above 63, an XCR0 outside the policy; `exit_description` names it; status 67) |
//! | `guest_xcr0` | XCR0 the guest reported it set (hex string) |
//! | `guest_xcr0_hardware` | XGETBV(0) executed at CPL3 in the guest (hex string); differs from `guest_xcr0` where the hypervisor runs guest user code on the host's XCR0 |
//! | `guest_xinuse` | XGETBV(1) at the end of the guest's run (hex string, null without XGETBV1) |
//! | `policy_xfeatures` | the mask the guest's CPUID offered (hex string) |
//! | `policy_xfeatures_names` | the same as component names |
//! | `kvm_xfeatures` | what KVM supports (hex string) |
//! | `kvm_cpuid_honored`, `kvm_cpuid_xfeatures`, `kvm_cpuid_standard_size`, `exposed_despite_policy` | the CPUID table KVM holds after `KVM_SET_CPUID2`, read back: whether it kept the policy (kvm_pvm does not), its leaf 0xD.0 mask and ECX, and the flags the guest sees although the policy masks their state |
//! | `final_xcr0` | XCR0 as KVM holds it at the end of the run (`KVM_GET_XCRS`) |
//! | `init_xstate` | `minimal` or `all` |
//! | `standard_size`, `compacted_size` | xsave sizes for the policy |
//! | `guest_cpuid` | the guest's view of leaf 0xD: supported mask, sizes, per-component size/offset |
//! | `results` | workload results: `name`, `variant`, `size` and `size_unit` (`bytes`, `matrix order`, `events`), `mb_per_s` or `gflops`, `check`, `cycles`, `seconds`, `native_ratio` (the median of the guest/native part pairs, interleaved part by part), `native_spread` (`reps`, `parts`, `min`, `max`, `noisy`, `same_result`), `cycles_per_unit`, `ns_per_block` (AES); `residual` (linear algebra), `bytes_per_save` (`ctxsw`); `invalid`: why the row is not a measurement (after `vmm restore`: `spans a snapshot ...`, then it has no throughput), null otherwise |
//! | `native` | how the native side ran: `code` (`guest-image`: the guest kernel's own bytes; `vmm-build`: the VMM's build, with `fallback_reason`), `entry`, `reps_per_row`, `pairs`, `noisy_rows` |
//! | `hugepages` | with `--hugepages`: `advised`, `error`, `ram_kib`, `anon_huge_kib` (AnonHugePages of the RAM mapping at the end) |
//! | `openssl_aes_128_cbc_mb_per_s` | the host's `openssl speed -evp aes-128-cbc` at 8192 B, when openssl is installed: the CBC 8192 B figure of `openssl_yardsticks` (kept as its own field for readers of older reports; the text report prints it only in the yardstick table) |
//! | `copy` | `bench=copy`: cycles, ns and GB/s per copy method, size and hot/cold data, the XSAVE+XRSTOR borrowing price, the crossovers and the guest's `memcpy` policy (absent when it did not run) |
//! | `switch_strategy`, `switch_cycles` | the context-switch strategy the guest chose at boot, and the cycles per switch it measured for each candidate (null and empty when the run had no workloads and no `bench=`: nothing to switch) |
//! | `skipped` | workload variants not run: `name`, `variant`, `reason` |
//! | `fault` | the CPU exception that ended the run, if any |
//! | `crash` | reason and register dump when the guest crashed |
//! | `snapshot_errors` | snapshots that could not be written (`--snapshot-file` refused, directory missing or read-only, disk full), each naming the file and the cause; the guest was resumed after each, so the run goes on |
//! | `exits` | exits to user space |
//! | `report_errors`, `report_errors_dropped` | why reports were refused (the first 16), and how many more were |
//! | `reports_dropped` | valid reports a later one replaced (only the last is kept) |
//! | `refused_requests`, `requests_refused` | guest requests the VMM refused and answered (an xstate edit the guest's XCR0 cannot hold): the first 16 reasons, and the count |
//! | `marks_dropped` | benchmark markers beyond the first 4096 |
//! | `serial_bytes_dropped` | COM1 output older than the 1 MiB tail the VMM keeps (the pass-through to stdout/stderr is complete) |
//! | `xstate_sync`, `xstate_stats` | the xstate sync policy and its `fetches`, `writebacks`, `standard_bytes`, `compacted_bytes` |
//! | `timing_ms` | `setup`, `run`: wall time of VM setup and of the guest's run; `first_instruction`: from the start of the run to the guest's first instruction (direct 64-bit entry only); `boot_entry` (`direct64`, `pvh`); `start_clock_monotonic_ns` |
//! | `xfeatures_resolution` | how `--xfeatures` was understood: `spec`, `requested`, `removed`, `implied` (prerequisites added), `dropped` (dependents removed), `result` (hex strings), `result_names`; null without `--xfeatures` |
//! | `snapshot` | with `--snapshot-file`: `requested_after_s`, `written`, `path`, `save_ms` (stopped vCPU to file written), and `reason` when nothing was written (e.g. the guest exited before `--snapshot-after`); null otherwise |

//! - `summary`: the serialisable model ([`RunSummary`]) built from a run.
//! - `views`: the `--xfeatures` resolution and the requested snapshot, as
//!   the JSON shows them.
//! - `spanning`: the row a restored run cannot time (it spans the snapshot).
//! - `row_id`: what makes two result rows the same measurement.
//! - `render`: its human table.
//! - `snapshot_info`: `vmm snapshot info`: what a snapshot file holds.
//! - `table`: column alignment for every text table.
//! - `hex`: masks serialised as hex strings.
//! - `exit`: process exit statuses.
//! - `plot`: SVG bar charts for `--plot`.
//! - `yardstick`: the host's `openssl speed` beside the guest's AES rows.

pub(crate) mod copy;
pub(crate) mod exit;
pub(crate) mod hex;
pub(crate) mod native_view;
pub(crate) mod parallel;
pub(crate) mod plot;
pub(crate) mod render;
pub(crate) mod row_id;
pub(crate) mod snapshot_info;
pub(crate) mod spanning;
pub(crate) mod summary;
pub(crate) mod table;
pub(crate) mod views;
pub(crate) mod yardstick;

pub use exit::{
    EXIT_GUEST_CRASH, EXIT_PROTOCOL_VIOLATION, EXIT_SNAPSHOT_MEMORY, EXIT_TIMEOUT, EXIT_USAGE,
    EXIT_VMM_ERROR,
};
pub use native_view::{HugePagesView, NativeScratchView, NativeView, RatioSpread};
pub use parallel::ParallelRow;
pub use row_id::RowId;
pub use summary::{
    result_rows, ComponentRow, CrashView, FaultView, GuestCpuidView, GuestSupported,
    GuestXsaveSizes, ResultRow, RunSummary, SkipRow, SmpView, SwitchFigure, Timing, VcpuRow,
};
pub use views::{ResolutionView, RestoredMemoryView, SnapshotView};
