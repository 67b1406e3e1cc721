//! The guest/VMM protocol: every port, exit status and record layout the
//! guest kernel and a VMM exchange, in one place.
//!
//! The guest talks to its VMM only through x86 port I/O, so the same image
//! runs under `vmm run` and under QEMU (`-M microvm` with `isa-debug-exit`):
//!
//! | port  | width | direction | meaning |
//! |-------|-------|-----------|---------|
//! | 0x3f8 | 8     | out       | COM1 8250 UART: the human-readable report (QEMU and `vmm` alike) |
//! | 0xf4  | 32    | out       | debug exit: the guest is done, the value is its [`ExitStatus`] (0..=[`GUEST_STATUS_MAX`]; above is a protocol violation) |
//! | 0x600 | 8     | out       | after the debug exit, for VMMs that ignore it: ACPI S5 shutdown (Cloud Hypervisor) |
//! | 0x64  | 8     | out       | after that: i8042 CPU reset (Firecracker); then the guest halts |
//! | 0xf8  | 32    | out       | report: guest-physical address (< 4 GiB) of a [`Report`] |
//! | 0xfc  | 32    | out       | report and exit in one write: a [`REPORT_EXIT_ALIGN`]-aligned report address ORed with the exit status ([`report_exit_value`]); ignored by other VMMs, after which the guest uses 0xf4 |
//! | 0xf0  | 32    | out       | exit benchmark target: the VMM decodes the exit and does nothing else |
//! | 0xec  | 32    | out       | benchmark marker: [`MARK_END`] \| result index; the VMM timestamps rows |
//! | 0xe8  | 32    | out       | xstate edit request: the VMM sets XMM(value & 15) to [`xmm_edit_pattern`] through its xstate manager |
//! | 0xe8  | 32    | in        | answer to the last edit request: [`EDIT_STATUS_DONE`], [`EDIT_STATUS_REFUSED`] (e.g. XCR0 without SSE; the run goes on) or [`EDIT_STATUS_NONE`] |
//! | 0xe0  | 32    | in/out    | interleaved guest/native repetitions: see [`rep`] |
//! | 0xdc  | 32    | in/out    | the timed parts of those repetitions: see [`rep`] |
//! | 0xe4  | 32    | out       | snapshot request: a VMM with a snapshot file saves the VM at this exit and stops; after a restore the guest continues after its `out`. Ignored without a snapshot file |
//! | 0xe4  | 32    | in        | [`SNAPSHOT_SYNC`] from a VMM that acts on snapshot requests itself; anything else: the guest waits at a snapshot point to be released (see [`snapshot`]) |
//!
//! and one guest-physical address: [`BENCH_MMIO_ADDR`], unbacked, where a
//! 32-bit store is an MMIO exit the VMM ignores.
//!
//! Every 32-bit port is 4-aligned and clear of 0xf4..=0xf7, so no write
//! spills into QEMU's `isa-debug-exit` (`iosize=4`).
//!
//! QEMU's `isa-debug-exit` turns a write of `v` into the process exit code
//! `(v << 1) | 1`; `vmm` uses `v` itself as the run's exit status.
//!
//! The kernel command line (PVH `hvm_start_info.cmdline_paddr`, QEMU
//! `-append`) is a space-separated list of words:
//!
//! | word | meaning |
//! |------|---------|
//! | `quiet` | do not print the report on the serial console (the VMM prints it from the record) |
//! | `workload=LIST` | comma-separated workloads to run (`none`, `quick`, `aes`, `gemm`, `linpack`, `all`) |
//! | `bench=LIST` | benchmarks and checks to run: `exits` (exit cost per kind and guest mode), `xstate-check` (registers survive exits bit for bit; a VMM-side XMM edit is seen), `ctxsw` (user-level context switch per XSAVE strategy), `copy` (memory copy methods per size, hot and cold, and the XSAVE+XRSTOR price of borrowing the vector registers; give the guest `--mem 512` for the 64 MiB sizes), `parallel` (AES-CTR and DGEMM on CPU 0 alone, then on every CPU at once; [`crate::bench::parallel`]), `all`, `none`. With more than one CPU, `xstate-check` and `parallel` run on every CPU at once. Absent: none |
//! | `exits=N` | exits per benchmark row (default 10000) |
//! | `xfeatures=MASK` | hex XCR0 policy: the guest sets XCR0 = CPUID 0xD.0 mask & MASK. The VMM always passes it, because some KVMs (kvm_pvm) answer CPUID from the host whatever table the VMM set |
//! | `fault=KIND` | testing: end the run with a deliberate CPU exception in the CPL3 task after the CPUID part of the report is filled (`ud`, `de`, `pf`, `gp`) |
//! | `cpus=N`, `xfeatures.cpuN=MASK`, `fault.cpuN=KIND` | SMP: how many CPUs to bring up (the VMM passes its `--vcpus`), CPU N's own XCR0 (hex: the policy & MASK, so it only narrows), a deliberate exception on AP N once it is up |
//! | `snapshot=PHASE` | stop at a fixed point of the workloads for a snapshot ([`SNAPSHOT_PHASES`]: `start`, `mid`, `end`; see [`snapshot`]) |
//! | `selftest` | testing: exercise the kernel's system calls and print what they returned |
//! | `hostile=MODE` | testing: misbehave on purpose after setup, to show the VMM survives it ([`HOSTILE_MODES`]): `idle` (spin, no exits), `report-flood` (valid reports in a loop), `bad-report-flood` (report addresses outside RAM), `mark-flood` (benchmark markers), `serial-flood` (`rep outsb` to COM1), `halt` (HLT with interrupts off, for good), `idle-halt` (HLT with interrupts on and nothing armed, for good), `edit-xmm` (an xstate edit request, checking the answer the VMM gives), `xsetbv-all` (XCR0 = everything CPUID 0xD.0 offers, ignoring `xfeatures=`), `status-N` (debug exit with `N`). The floods never end: run them with `--timeout` |
//!
//! Words the VMM owns ([`VMM_OWNED_WORDS`]: `xfeatures=`) are always
//! passed by the VMM and refused when a user supplies them.
//!
//! The [`Report`] is a `repr(C)` little-endian record in guest memory. The
//! guest writes it completely and then writes its address to
//! [`REPORT_PORT`] (or, at the run's end, to [`REPORT_EXIT_PORT`]); the VMM copies it out through bounds-checked guest-memory
//! accessors and validates magic, version, size and counts with
//! [`Report::from_bytes`] before trusting a single field.
//!
//! | module | what |
//! |--------|------|
//! | [`ports`] | the ports, the MMIO address and [`ExitStatus`] |
//! | [`record`] | the [`Report`] record and its decoder |
//! | [`cmdline`] | the command line: words and [`Cmdline`] |
//! | [`names`] | exception mnemonics, XSAVE extension and strategy names |
//! | [`snapshot`] | snapshot points: the phases of `snapshot=`, the answer of a VMM that snapshots itself, the lines a waiting guest prints |
//! | [`serial_record`] | the [`Report`] as one line of serial text (`VMMREC1 ...`), for VMMs without the report port |

pub mod cmdline;
pub mod names;
pub mod ports;
pub mod record;
pub mod rep;
pub mod serial_record;
pub mod snapshot;

pub use cmdline::{
    vmm_owned_word, Cmdline, BENCH_NAMES, CMDLINE_MAX, DEFAULT_EXIT_COUNT, FAULT_KINDS,
    HOSTILE_MODES, VMM_OWNED_WORDS, VMM_WORDS_MAX, WORKLOAD_NAMES,
};
pub use names::{exception_mnemonic, xsave_variants, SWITCH_STRATEGIES, XSAVE_FEATURE_NAMES};
pub use ports::{report_exit_value, split_report_exit, REPORT_EXIT_ALIGN, REPORT_EXIT_PORT};
pub use ports::{
    xmm_edit_pattern, ExitStatus, ACPI_S5_SHUTDOWN, ACPI_SHUTDOWN_PORT, BENCH_MMIO_ADDR,
    BENCH_PIO_PORT, DEBUG_EXIT_PORT, EDIT_STATUS_DONE, EDIT_STATUS_NONE, EDIT_STATUS_REFUSED,
    GUEST_STATUS_MAX, I8042_COMMAND_PORT, I8042_RESET, MARK_END, MARK_PORT, REPORT_PORT,
    SERIAL_PORT, SNAPSHOT_PORT, XSTATE_EDIT_PORT,
};
pub use record::{
    field_str, fixed_str, ComponentReport, CopyReport, FaultRecord, Report, ReportError,
    ResultRecord, SkipRecord, WorkUnit, AUX_XINUSE, COPY_LIVE_STATES, COPY_METHODS,
    COPY_SAVE_INSNS, COPY_SIZES, MAX_RESULTS, MAX_SKIPPED, NAME_LEN, REASON_LEN, REPORT_COMPONENTS,
    REPORT_MAGIC, REPORT_VERSION,
};
pub use rep::{
    digest_f64, NativeRowArgs, NativeRowOut, OnPart, PartRecord, RepRecord, RowKey, RowKind,
    MAX_ROW_REPS, NATIVE_ROW_SYMBOL, PARTS_WANTED, PART_PORT, REP_PORT,
};
pub use serial_record::{parse_record, records_in, write_record, RecordError, RECORD_PREFIX};
pub use snapshot::{SnapshotPhase, SNAPSHOT_PHASES, SNAPSHOT_SYNC};
