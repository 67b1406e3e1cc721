//! The guest/VMM protocol: every port, exit status and record layout the
//! guest kernel and a VMM exchange, in one place.
//!
//! The guest talks to its VMM only through x86 port I/O, so the same image
//! runs under `vmm run` and under QEMU (`-M microvm` with `isa-debug-exit`):
//!
//! | port  | width | direction | meaning |
//! |-------|-------|-----------|---------|
//! | 0x3f8 | 8     | out       | COM1 8250 UART: the human-readable report (QEMU and `vmm` alike) |
//! | 0xf4  | 32    | out       | debug exit: the guest is done, the value is its [`ExitStatus`] |
//! | 0xf8  | 32    | out       | report: guest-physical address (< 4 GiB) of a [`Report`] |
//! | 0xf0  | 32    | out       | exit benchmark target: the VMM decodes the exit and does nothing else |
//! | 0xec  | 32    | out       | benchmark marker: [`MARK_END`] \| result index; the VMM timestamps rows |
//! | 0xe8  | 32    | out       | xstate edit request: the VMM sets XMM(value & 15) to [`xmm_edit_pattern`] through its xstate manager |
//! | 0xe4  | 32    | out       | snapshot request: a VMM with a snapshot file saves the VM at this exit and stops; after a restore the guest continues after its `out`. Ignored without a snapshot file |
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
//! | `bench=LIST` | benchmarks and checks to run: `exits` (exit cost per kind and guest mode), `xstate-check` (registers survive exits bit for bit; a VMM-side XMM edit is seen), `ctxsw` (user-level context switch per XSAVE strategy), `all`, `none`. Absent: none |
//! | `exits=N` | exits per benchmark row (default 10000) |
//! | `xfeatures=MASK` | hex XCR0 policy: the guest sets XCR0 = CPUID 0xD.0 mask & MASK. The VMM always passes it, because some KVMs (kvm_pvm) answer CPUID from the host whatever table the VMM set |
//! | `fault=KIND` | testing: end the run with a deliberate CPU exception in the CPL3 task after the CPUID part of the report is filled (`ud`, `de`, `pf`, `gp`) |
//! | `selftest` | testing: exercise the kernel's system calls and print what they returned |
//!
//! The [`Report`] is a `repr(C)` little-endian record in guest memory. The
//! guest writes it completely and then writes its address to
//! [`REPORT_PORT`]; the VMM copies it out through bounds-checked guest-memory
//! accessors and validates magic, version, size and counts with
//! [`Report::from_bytes`] before trusting a single field.

/// COM1: the 8250 UART the report is printed on.
pub const SERIAL_PORT: u16 = 0x3f8;
/// Debug exit (QEMU `isa-debug-exit` compatible): a 32-bit write ends the run.
pub const DEBUG_EXIT_PORT: u16 = 0xf4;
/// A 32-bit write hands the VMM the guest-physical address of a [`Report`].
pub const REPORT_PORT: u16 = 0xf8;

/// Names of the XSAVE extensions CPUID 0xD.1 EAX enumerates, bit 0 first
/// (what [`Report::cpuid_xsave_features`] holds).
pub const XSAVE_FEATURE_NAMES: [&str; 5] = ["xsaveopt", "xsavec", "xgetbv1", "xsaves", "xfd"];

/// The XSAVE instructions and extensions CPUID 0xD.1 EAX `eax` reports,
/// plain XSAVE first.
pub fn xsave_variants(eax: u32) -> impl Iterator<Item = &'static str> {
    core::iter::once("xsave").chain(
        XSAVE_FEATURE_NAMES
            .iter()
            .enumerate()
            .filter(move |(bit, _)| eax & (1 << bit) != 0)
            .map(|(_, name)| *name),
    )
}

/// Exit benchmark: the PIO target port.
pub const BENCH_PIO_PORT: u16 = 0xf0;
/// Benchmark markers: a write of `i` starts row `i` (its future index in
/// [`Report::results`]), a write of `MARK_END | i` ends it.
pub const MARK_PORT: u16 = 0xec;
/// Set in a [`MARK_PORT`] value that ends a row.
pub const MARK_END: u32 = 0x8000_0000;
/// A write of `r` asks the VMM to set XMM`r & 15` to [`xmm_edit_pattern`].
pub const XSTATE_EDIT_PORT: u16 = 0xe8;
/// A write asks the VMM to snapshot the VM here (see the module table).
pub const SNAPSHOT_PORT: u16 = 0xe4;
/// Exit benchmark: an unbacked guest-physical address (MMIO exit).
pub const BENCH_MMIO_ADDR: u64 = 0xd000_0000;

/// What the VMM writes into XMM`reg` for an [`XSTATE_EDIT_PORT`] request.
pub const fn xmm_edit_pattern(reg: u32) -> [u8; 16] {
    let mut p = [0u8; 16];
    let mut k = 0;
    while k < 16 {
        p[k] = 0xe0 ^ ((reg as u8 & 15) << 4) ^ k as u8;
        k += 1;
    }
    p
}

/// "VMMGUEST", little-endian.
pub const REPORT_MAGIC: u64 = u64::from_le_bytes(*b"VMMGUEST");
/// Bumped on every incompatible change of [`Report`].
pub const REPORT_VERSION: u32 = 3;

/// Number of XSAVE state components described in a report (0..=19).
pub const REPORT_COMPONENTS: usize = 20;
/// Most workload results one report carries.
pub const MAX_RESULTS: usize = 64;
/// Most "skipped, and why" entries one report carries.
pub const MAX_SKIPPED: usize = 32;
/// Length of the fixed, NUL-padded ASCII name fields (32 since version 3:
/// `xsavec-xinuse-avx-initall` is 25 characters).
pub const NAME_LEN: usize = 32;
/// Length of the fixed, NUL-padded ASCII reason field.
pub const REASON_LEN: usize = 64;

/// The value the guest writes to [`DEBUG_EXIT_PORT`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// Everything ran and every check passed.
    Success = 0,
    /// A workload's known-answer or residual check failed.
    CheckFailed = 1,
    /// A CPU exception in a guest task or in the kernel; see [`FaultRecord`].
    Exception = 2,
    /// The guest could not set itself up (bad boot info, CPUID it cannot use, ...).
    SetupFailed = 3,
}

impl ExitStatus {
    /// Decode a value written to [`DEBUG_EXIT_PORT`].
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Success),
            1 => Some(Self::CheckFailed),
            2 => Some(Self::Exception),
            3 => Some(Self::SetupFailed),
            _ => None,
        }
    }

    /// Short description for tables and error messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::CheckFailed => "check failed",
            Self::Exception => "guest exception",
            Self::SetupFailed => "guest setup failed",
        }
    }
}

/// What CPUID leaf 0xD says about one state component, as the guest saw it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ComponentReport {
    /// CPUID 0xD.i EAX: size in bytes.
    pub size: u32,
    /// CPUID 0xD.i EBX: offset in the standard format (0 for supervisor state).
    pub offset: u32,
    /// CPUID 0xD.i ECX: bit 0 supervisor, bit 1 64-byte aligned when compacted, bit 2 XFD.
    pub flags: u32,
    /// Offset in the compacted format for the XCR0 the guest set, as the
    /// guest computed it with the xstate crate (0 when not in XCR0).
    pub compacted_offset: u32,
}

/// A CPU exception the guest kernel caught.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultRecord {
    /// 1 when a fault happened, 0 otherwise.
    pub valid: u32,
    /// Exception vector (0 #DE, 6 #UD, 13 #GP, 14 #PF, ...).
    pub vector: u32,
    /// Error code pushed by the CPU, 0 for vectors without one.
    pub error_code: u64,
    /// RIP of the faulting instruction.
    pub rip: u64,
    /// CR2 (the faulting address for #PF).
    pub cr2: u64,
    /// Privilege level the fault happened at (0 kernel, 3 task).
    pub cpl: u32,
    pub _pad: u32,
}

/// How [`ResultRecord::work`] is to be read.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkUnit {
    /// Bytes processed: throughput is MB/s (10^6 bytes per second).
    Bytes = 0,
    /// Floating-point operations: throughput is GFLOPS.
    Flops = 1,
    /// Events (exits, switches): throughput is events per second.
    Events = 2,
}

/// One measured workload or benchmark.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ResultRecord {
    /// Workload name, NUL-padded ASCII (`aes-128-cbc`, `dgemm`, `linpack`, ...).
    pub name: [u8; NAME_LEN],
    /// ISA variant, NUL-padded ASCII (`aesni-sse`, `avx2-fma`, ...).
    pub variant: [u8; NAME_LEN],
    /// Problem size: message bytes or matrix order n.
    pub size: u64,
    /// Work done in the timed region, in [`WorkUnit`]s.
    pub work: u64,
    /// TSC cycles of the timed region.
    pub cycles: u64,
    /// [`WorkUnit`] as u32.
    pub unit: u32,
    /// 1 pass, 0 fail.
    pub check: u32,
    /// Workload-specific figure: scaled residual for linear algebra, 0 otherwise.
    pub residual: f64,
}

/// The SDM mnemonic of an exception vector (`#GP`, `#PF`, `NMI`, ...), for
/// the guest's console and the VMM's report alike; `#reserved` for vectors
/// the architecture does not define, `#??` past 31.
pub const fn exception_mnemonic(vector: u32) -> &'static str {
    match vector {
        0 => "#DE",
        1 => "#DB",
        2 => "NMI",
        3 => "#BP",
        4 => "#OF",
        5 => "#BR",
        6 => "#UD",
        7 => "#NM",
        8 => "#DF",
        9 => "#CSO",
        10 => "#TS",
        11 => "#NP",
        12 => "#SS",
        13 => "#GP",
        14 => "#PF",
        16 => "#MF",
        17 => "#AC",
        18 => "#MC",
        19 => "#XM",
        20 => "#VE",
        21 => "#CP",
        28 => "#HV",
        29 => "#VC",
        30 => "#SX",
        15 | 22..=27 | 31 => "#reserved",
        _ => "#??",
    }
}

/// User-level context-switch strategies the guest calibrates at boot, in
/// the order of [`Report::switch_cycles`]: each saves with the named
/// instruction and restores with XRSTOR. `xsavec-xinuse` masks the XSAVEC
/// request with XGETBV(1) (XINUSE), as Linux does. XSAVES/XRSTORS are not
/// candidates: they need CPL0, and the guest's contexts are CPL3 tasks.
pub const SWITCH_STRATEGIES: [&str; 4] = xstate::SaveStrategy::NAMES;

/// A workload variant the guest did not run, and why.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkipRecord {
    pub name: [u8; NAME_LEN],
    pub variant: [u8; NAME_LEN],
    /// NUL-padded ASCII, e.g. `CPUID lacks AVX (XCR0 0x3)`.
    pub reason: [u8; REASON_LEN],
}

/// Everything the guest reports, written once at the end of the run.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Report {
    /// [`REPORT_MAGIC`].
    pub magic: u64,
    /// [`REPORT_VERSION`].
    pub version: u32,
    /// `size_of::<Report>()` as the guest was built.
    pub size: u32,

    /// CPUID.1 ECX/EDX, CPUID.7.0 EBX/ECX/EDX, CPUID.7.1 EAX as seen by the guest.
    pub cpuid1_ecx: u32,
    pub cpuid1_edx: u32,
    pub cpuid7_ebx: u32,
    pub cpuid7_ecx: u32,
    pub cpuid7_edx: u32,
    pub cpuid7_1_eax: u32,

    /// CPUID 0xD.0 EDX:EAX: user state the CPU (as exposed) supports.
    pub cpuid_xcr0_supported: u64,
    /// CPUID 0xD.1 EDX:ECX: supervisor state supported in IA32_XSS.
    pub cpuid_xss_supported: u64,
    /// CPUID 0xD.0 EBX after the guest set XCR0: standard size for that XCR0.
    pub cpuid_size_enabled: u32,
    /// CPUID 0xD.0 ECX: standard size for every supported user component.
    pub cpuid_size_max: u32,
    /// CPUID 0xD.1 EAX: bit 0 XSAVEOPT, 1 XSAVEC, 2 XGETBV(1), 3 XSAVES, 4 XFD.
    pub cpuid_xsave_features: u32,
    /// CPUID 0xD.1 EBX: compacted size for XCR0 | IA32_XSS as enabled.
    pub cpuid_size_compacted: u32,
    /// Per component 0..=19.
    pub components: [ComponentReport; REPORT_COMPONENTS],

    /// XCR0 the guest set with XSETBV (0 when the CPU has no XSAVE).
    pub xcr0: u64,
    /// XGETBV(1) at the end of the run (0 when XGETBV(1) is unsupported).
    pub xinuse: u64,
    /// XGETBV(0) executed at CPL3: the XCR0 the hardware applies to the
    /// guest's tasks. Equal to `xcr0` under hardware KVM; kvm_pvm runs CPL3
    /// code on the host's XCR0.
    pub xcr0_hardware: u64,
    /// Standard-format size the guest computed with the xstate crate for `xcr0`.
    pub computed_standard_size: u32,
    /// Compacted-format size the guest computed with the xstate crate for `xcr0`.
    pub computed_compacted_size: u32,
    /// TSC frequency in kHz if the guest knows it (CPUID 0x15/0x16/0x40000010), else 0.
    pub tsc_khz: u64,

    /// Set when the run ended in a CPU exception.
    pub fault: FaultRecord,

    pub result_count: u32,
    pub skipped_count: u32,
    pub results: [ResultRecord; MAX_RESULTS],
    pub skipped: [SkipRecord; MAX_SKIPPED],

    /// A second figure per result, same index as [`Report::results`]; 0
    /// when the row has none. `ctxsw` rows: bytes written per save (see
    /// `guest::bench::ctxsw::bytes_per_save`).
    pub result_aux: [u64; MAX_RESULTS],
    /// The user-level context-switch strategy the guest chose at boot by
    /// measurement (one of [`SWITCH_STRATEGIES`]), NUL-padded; empty when
    /// the CPU has no XSAVE.
    pub switch_strategy: [u8; NAME_LEN],
    /// TSC cycles per context switch (save + XRSTOR + stack switch) the boot
    /// calibration measured for each of [`SWITCH_STRATEGIES`] (the minimum
    /// of its trials); 0 when the CPU (as the guest's CPUID says) lacks it.
    pub switch_cycles: [u64; 4],
    /// TSC cycles the whole boot calibration took.
    pub switch_calibration_cycles: u64,
}

/// Workload names `workload=` accepts (see the module documentation).
pub const WORKLOAD_NAMES: &[&str] = &["none", "quick", "aes", "gemm", "linpack", "all"];

/// Benchmark names `bench=` accepts (see the module documentation); `all`
/// is every one of the others.
pub const BENCH_NAMES: &[&str] = &[
    "none",
    "exits",
    "xstate-check",
    "snapshot-check",
    "ctxsw",
    "all",
];

/// Exits per benchmark row when `exits=` is absent.
pub const DEFAULT_EXIT_COUNT: u64 = 10_000;

/// The guest command line, parsed: what the guest acts on, and what a VMM
/// can check before it boots a guest with it.
///
/// Words are separated by ASCII whitespace. Words the guest does not know
/// are kept (see [`Cmdline::unknown_words`]) but otherwise ignored, like a
/// Linux kernel ignores unknown parameters: QEMU, for one, appends words of
/// its own. When `workload=` is given more than once the last one wins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cmdline<'a> {
    /// The whole command line as given.
    pub raw: &'a str,
    /// `quiet`: do not print the report on the serial console.
    pub quiet: bool,
    /// The `workload=` value as given; `None` when the word is absent.
    pub workload: Option<&'a str>,
    /// `fault=KIND`: the deliberate exception to raise (see [`FAULT_KINDS`]).
    pub fault: Option<&'a str>,
    /// `selftest`: exercise the kernel's system calls.
    pub selftest: bool,
    /// `xfeatures=MASK` (hex): the XCR0 policy to narrow to.
    pub xfeatures: Option<u64>,
    /// `xfeatures=` was present but not a hex number.
    pub bad_xfeatures: Option<&'a str>,
    /// The `bench=` value as given; `None` when the word is absent (no
    /// benchmarks run). The last one wins.
    pub bench: Option<&'a str>,
    /// `exits=N` (decimal, or hex with `0x`): exits per benchmark row.
    pub exits: Option<u64>,
    /// `exits=` was present but not a number, or 0.
    pub bad_exits: Option<&'a str>,
}

/// Exceptions `fault=` can provoke: invalid opcode, divide error, page
/// fault (a read of the unmapped page 0), general protection (a
/// non-canonical address).
pub const FAULT_KINDS: &[&str] = &["ud", "de", "pf", "gp"];

impl<'a> Cmdline<'a> {
    /// Parse a command line. Never fails: unknown words are only recorded.
    pub fn parse(raw: &'a str) -> Self {
        let mut c = Cmdline {
            raw,
            ..Cmdline::default()
        };
        for word in raw.split_ascii_whitespace() {
            if word == "quiet" {
                c.quiet = true;
            } else if word == "selftest" {
                c.selftest = true;
            } else if let Some(list) = word.strip_prefix("workload=") {
                c.workload = Some(list);
            } else if let Some(kind) = word.strip_prefix("fault=") {
                c.fault = Some(kind);
            } else if let Some(list) = word.strip_prefix("bench=") {
                c.bench = Some(list);
            } else if let Some(n) = word.strip_prefix("exits=") {
                let parsed = match n.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16),
                    None => n.parse::<u64>(),
                };
                match parsed {
                    Ok(v) if v > 0 => {
                        c.exits = Some(v);
                        c.bad_exits = None;
                    }
                    _ => {
                        c.exits = None;
                        c.bad_exits = Some(n);
                    }
                }
            } else if let Some(mask) = word.strip_prefix("xfeatures=") {
                let digits = mask.strip_prefix("0x").unwrap_or(mask);
                match u64::from_str_radix(digits, 16) {
                    Ok(v) => c.xfeatures = Some(v),
                    Err(_) => c.bad_xfeatures = Some(mask),
                }
            }
        }
        c
    }

    /// The requested workload names in order, without empty items
    /// (`workload=aes,,gemm` is `aes`, `gemm`). Empty when `workload=` is
    /// absent or empty.
    pub fn workloads(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.workload
            .unwrap_or("")
            .split(',')
            .filter(|w| !w.is_empty())
    }

    /// True when the list asks for nothing to run: `workload=`,
    /// `workload=none` (or only `none` items). False when `workload=` is
    /// absent: the guest then runs its default set.
    pub fn runs_nothing(&self) -> bool {
        self.workload.is_some() && self.workloads().all(|w| w == "none")
    }

    /// The first workload name not in [`WORKLOAD_NAMES`], if any.
    pub fn unknown_workload(&self) -> Option<&'a str> {
        self.workloads().find(|w| !WORKLOAD_NAMES.contains(w))
    }

    /// The requested benchmark names in order, without empty items. Empty
    /// when `bench=` is absent or empty.
    pub fn benches(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.bench
            .unwrap_or("")
            .split(',')
            .filter(|w| !w.is_empty())
    }

    /// True when `bench=` asks for `name` itself or for `all`.
    pub fn wants_bench(&self, name: &str) -> bool {
        self.benches().any(|b| b == name || b == "all")
    }

    /// The first benchmark name not in [`BENCH_NAMES`], if any.
    pub fn unknown_bench(&self) -> Option<&'a str> {
        self.benches().find(|w| !BENCH_NAMES.contains(w))
    }

    /// Exits per benchmark row: `exits=N`, else [`DEFAULT_EXIT_COUNT`].
    pub fn exit_count(&self) -> u64 {
        self.exits.unwrap_or(DEFAULT_EXIT_COUNT)
    }

    /// Words the guest does not act on.
    pub fn unknown_words(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.raw.split_ascii_whitespace().filter(|w| {
            !matches!(*w, "quiet" | "selftest")
                && !w.starts_with("workload=")
                && !w.starts_with("fault=")
                && !w.starts_with("xfeatures=")
                && !w.starts_with("bench=")
                && !w.starts_with("exits=")
        })
    }
}

/// Why a report copied out of guest memory was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportError {
    /// Fewer bytes than `size_of::<Report>()`.
    Truncated {
        got: usize,
        need: usize,
    },
    BadMagic(u64),
    BadVersion(u32),
    /// The guest was built with a different record layout.
    BadSize {
        got: u32,
        need: u32,
    },
    TooManyResults(u32),
    TooManySkipped(u32),
}

impl core::fmt::Display for ReportError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Truncated { got, need } => {
                write!(f, "report truncated: {got} bytes, need {need}")
            }
            Self::BadMagic(m) => write!(f, "report has bad magic {m:#018x}"),
            Self::BadVersion(v) => {
                write!(f, "report version {v}, this VMM speaks {REPORT_VERSION}")
            }
            Self::BadSize { got, need } => {
                write!(f, "report size field {got}, expected {need}")
            }
            Self::TooManyResults(n) => write!(f, "report claims {n} results (max {MAX_RESULTS})"),
            Self::TooManySkipped(n) => {
                write!(f, "report claims {n} skipped entries (max {MAX_SKIPPED})")
            }
        }
    }
}

impl Report {
    /// An empty report with magic, version and size filled in.
    pub const fn new() -> Self {
        const EMPTY_RESULT: ResultRecord = ResultRecord {
            name: [0; NAME_LEN],
            variant: [0; NAME_LEN],
            size: 0,
            work: 0,
            cycles: 0,
            unit: 0,
            check: 0,
            residual: 0.0,
        };
        const EMPTY_SKIP: SkipRecord = SkipRecord {
            name: [0; NAME_LEN],
            variant: [0; NAME_LEN],
            reason: [0; REASON_LEN],
        };
        const EMPTY_COMPONENT: ComponentReport = ComponentReport {
            size: 0,
            offset: 0,
            flags: 0,
            compacted_offset: 0,
        };
        Report {
            magic: REPORT_MAGIC,
            version: REPORT_VERSION,
            size: core::mem::size_of::<Report>() as u32,
            cpuid1_ecx: 0,
            cpuid1_edx: 0,
            cpuid7_ebx: 0,
            cpuid7_ecx: 0,
            cpuid7_edx: 0,
            cpuid7_1_eax: 0,
            cpuid_xcr0_supported: 0,
            cpuid_xss_supported: 0,
            cpuid_size_enabled: 0,
            cpuid_size_max: 0,
            cpuid_xsave_features: 0,
            cpuid_size_compacted: 0,
            components: [EMPTY_COMPONENT; REPORT_COMPONENTS],
            xcr0: 0,
            xinuse: 0,
            xcr0_hardware: 0,
            computed_standard_size: 0,
            computed_compacted_size: 0,
            tsc_khz: 0,
            fault: FaultRecord {
                valid: 0,
                vector: 0,
                error_code: 0,
                rip: 0,
                cr2: 0,
                cpl: 0,
                _pad: 0,
            },
            result_count: 0,
            skipped_count: 0,
            results: [EMPTY_RESULT; MAX_RESULTS],
            skipped: [EMPTY_SKIP; MAX_SKIPPED],
            result_aux: [0; MAX_RESULTS],
            switch_strategy: [0; NAME_LEN],
            switch_cycles: [0; 4],
            switch_calibration_cycles: 0,
        }
    }

    /// Size of the record in bytes: what the VMM copies out of guest memory.
    pub const SIZE: usize = core::mem::size_of::<Report>();

    /// Decode and validate a record copied out of guest memory.
    ///
    /// Never trusts the guest: the length, magic, version, size field and
    /// both counts are checked before the record is returned.
    pub fn from_bytes(bytes: &[u8]) -> Result<Report, ReportError> {
        if bytes.len() < Self::SIZE {
            return Err(ReportError::Truncated {
                got: bytes.len(),
                need: Self::SIZE,
            });
        }
        // SAFETY: `bytes` holds at least `size_of::<Report>()` bytes (checked
        // above), `read_unaligned` has no alignment requirement, and `Report`
        // is `repr(C)` made only of integers, f64 and byte arrays, for which
        // every bit pattern is a valid value.
        let report: Report = unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast()) };
        if report.magic != REPORT_MAGIC {
            return Err(ReportError::BadMagic(report.magic));
        }
        if report.version != REPORT_VERSION {
            return Err(ReportError::BadVersion(report.version));
        }
        if report.size as usize != Self::SIZE {
            return Err(ReportError::BadSize {
                got: report.size,
                need: Self::SIZE as u32,
            });
        }
        if report.result_count as usize > MAX_RESULTS {
            return Err(ReportError::TooManyResults(report.result_count));
        }
        if report.skipped_count as usize > MAX_SKIPPED {
            return Err(ReportError::TooManySkipped(report.skipped_count));
        }
        Ok(report)
    }

    /// The record's bytes, for a guest or a test to hand over.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `Report` is `repr(C)` plain data; viewing it as bytes reads
        // padding only where the compiler inserted none (all fields are
        // naturally aligned and sized to multiples of 8 in this layout).
        unsafe { core::slice::from_raw_parts((self as *const Report).cast(), Self::SIZE) }
    }

    /// The valid results.
    pub fn results(&self) -> &[ResultRecord] {
        &self.results[..(self.result_count as usize).min(MAX_RESULTS)]
    }

    /// The valid skipped entries.
    pub fn skipped(&self) -> &[SkipRecord] {
        &self.skipped[..(self.skipped_count as usize).min(MAX_SKIPPED)]
    }

    /// Append a result; returns false when the report is full.
    pub fn push_result(&mut self, r: ResultRecord) -> bool {
        let i = self.result_count as usize;
        if i >= MAX_RESULTS {
            return false;
        }
        self.results[i] = r;
        self.result_count += 1;
        true
    }

    /// Append a result with its [`Report::result_aux`] figure; returns false
    /// when the report is full.
    pub fn push_result_aux(&mut self, r: ResultRecord, aux: u64) -> bool {
        let i = self.result_count as usize;
        if !self.push_result(r) {
            return false;
        }
        self.result_aux[i] = aux;
        true
    }

    /// The [`Report::result_aux`] figure of result `i` (0 past the end).
    pub fn aux(&self, i: usize) -> u64 {
        if i < self.results().len() {
            self.result_aux[i]
        } else {
            0
        }
    }

    /// Append a skipped entry; returns false when the report is full.
    pub fn push_skipped(&mut self, s: SkipRecord) -> bool {
        let i = self.skipped_count as usize;
        if i >= MAX_SKIPPED {
            return false;
        }
        self.skipped[i] = s;
        self.skipped_count += 1;
        true
    }
}

impl Default for Report {
    fn default() -> Self {
        Self::new()
    }
}

/// Copy `s` into a fixed NUL-padded field, truncating if needed.
pub const fn fixed_str<const N: usize>(s: &str) -> [u8; N] {
    let b = s.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < b.len() && i < N {
        out[i] = b[i];
        i += 1;
    }
    out
}

/// Read a NUL-padded field back as text; non-ASCII bytes end it.
pub fn field_str(f: &[u8]) -> &str {
    let end = f
        .iter()
        .position(|&c| c == 0 || !c.is_ascii())
        .unwrap_or(f.len());
    // ASCII prefix: always valid UTF-8.
    core::str::from_utf8(&f[..end]).unwrap_or("")
}

// The record must not contain implicit padding: `as_bytes` exposes all of it.
const _: () = {
    assert!(core::mem::size_of::<ComponentReport>() == 16);
    assert!(core::mem::size_of::<FaultRecord>() == 40);
    assert!(core::mem::size_of::<ResultRecord>() == 2 * NAME_LEN + 5 * 8);
    assert!(core::mem::size_of::<SkipRecord>() == 2 * NAME_LEN + REASON_LEN);
    assert!(
        core::mem::size_of::<Report>()
            == 16
                + 6 * 4
                + 2 * 8
                + 4 * 4
                + REPORT_COMPONENTS * 16
                + 3 * 8
                + 2 * 4
                + 8
                + 40
                + 2 * 4
                + MAX_RESULTS * (2 * NAME_LEN + 5 * 8)
                + MAX_SKIPPED * (2 * NAME_LEN + REASON_LEN)
                + MAX_RESULTS * 8
                + NAME_LEN
                + 4 * 8
                + 8
    );
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_words() {
        let c = Cmdline::parse("  quiet   workload=aes,,gemm console=ttyS0 ");
        assert!(c.quiet);
        assert_eq!(c.workload, Some("aes,,gemm"));
        let w: [&str; 2] = {
            let mut it = c.workloads();
            [it.next().unwrap(), it.next().unwrap()]
        };
        assert_eq!(w, ["aes", "gemm"]);
        assert_eq!(c.workloads().count(), 2);
        assert!(!c.runs_nothing());
        assert_eq!(c.unknown_workload(), None);
        let mut unknown = c.unknown_words();
        assert_eq!(unknown.next(), Some("console=ttyS0"));
        assert_eq!(unknown.next(), None);
        assert_eq!(c.fault, None);
        assert!(!c.selftest);

        let t = Cmdline::parse("selftest fault=pf");
        assert!(t.selftest);
        assert_eq!(t.fault, Some("pf"));
        assert_eq!(t.unknown_words().count(), 0);
    }

    #[test]
    fn cmdline_defaults_and_none() {
        let empty = Cmdline::parse("");
        assert!(!empty.quiet);
        assert_eq!(empty.workload, None);
        assert!(
            !empty.runs_nothing(),
            "absent workload= means the default set"
        );
        assert_eq!(empty.workloads().count(), 0);

        assert!(Cmdline::parse("workload=").runs_nothing());
        assert!(Cmdline::parse("workload=none").runs_nothing());
        assert!(Cmdline::parse("workload=none,none").runs_nothing());
        assert!(!Cmdline::parse("workload=none,aes").runs_nothing());
        // The last workload= wins.
        assert_eq!(
            Cmdline::parse("workload=aes workload=none").workload,
            Some("none")
        );
        // Tabs and newlines separate words too; "quietly" is not "quiet".
        let c = Cmdline::parse("quietly\tworkload=linpack\n");
        assert!(!c.quiet);
        assert_eq!(c.workload, Some("linpack"));
    }

    #[test]
    fn cmdline_bench_words() {
        let c = Cmdline::parse("bench=exits,,ctxsw exits=500 console=ttyS0");
        assert_eq!(c.bench, Some("exits,,ctxsw"));
        assert_eq!(c.benches().count(), 2);
        assert!(c.wants_bench("exits"));
        assert!(c.wants_bench("ctxsw"));
        assert!(!c.wants_bench("xstate-check"));
        assert_eq!(c.unknown_bench(), None);
        assert_eq!(c.exit_count(), 500);
        assert_eq!(c.bad_exits, None);
        let unknown: [&str; 1] = [c.unknown_words().next().unwrap()];
        assert_eq!(unknown, ["console=ttyS0"]);
        assert_eq!(c.unknown_words().count(), 1);

        let all = Cmdline::parse("bench=all");
        for name in ["exits", "xstate-check", "ctxsw"] {
            assert!(all.wants_bench(name), "{name}");
        }
        assert_eq!(all.exit_count(), DEFAULT_EXIT_COUNT);

        let none = Cmdline::parse("workload=none");
        assert_eq!(none.bench, None);
        assert!(!none.wants_bench("exits"));

        assert_eq!(
            Cmdline::parse("bench=exits,bogus").unknown_bench(),
            Some("bogus")
        );
        assert_eq!(Cmdline::parse("exits=0x100").exits, Some(256));
        for bad in ["exits=", "exits=0", "exits=ten", "exits=-5"] {
            let c = Cmdline::parse(bad);
            assert_eq!(c.exits, None, "{bad}");
            assert!(c.bad_exits.is_some(), "{bad}");
            assert_eq!(c.exit_count(), DEFAULT_EXIT_COUNT);
        }
        // The last exits= wins, a good one clears an earlier bad one.
        let c = Cmdline::parse("exits=x exits=7");
        assert_eq!((c.exits, c.bad_exits), (Some(7), None));
    }

    #[test]
    fn result_aux_follows_results() {
        let mut r = Report::new();
        let rec = Report::new().results[0];
        assert!(r.push_result(rec));
        assert!(r.push_result_aux(rec, 832));
        assert_eq!((r.aux(0), r.aux(1), r.aux(2)), (0, 832, 0));
        let back = Report::from_bytes(r.as_bytes()).unwrap();
        assert_eq!(back.aux(1), 832);
        r.switch_strategy = fixed_str("xsavec-xinuse");
        assert_eq!(field_str(&r.switch_strategy), "xsavec-xinuse");
        assert!(SWITCH_STRATEGIES
            .iter()
            .all(|s| s.len() + "-avx-initall".len() <= NAME_LEN));
    }

    #[test]
    fn cmdline_unknown_workload() {
        assert_eq!(
            Cmdline::parse("workload=aes,bogus,gemm").unknown_workload(),
            Some("bogus")
        );
        for name in WORKLOAD_NAMES {
            let line = [b"workload=".as_slice(), name.as_bytes()].concat();
            let line = core::str::from_utf8(&line).unwrap();
            assert_eq!(Cmdline::parse(line).unknown_workload(), None, "{name}");
        }
    }

    #[test]
    fn round_trip_and_validation() {
        let mut r = Report::new();
        r.xcr0 = 0x7;
        assert!(r.push_result(ResultRecord {
            name: fixed_str("aes-128-cbc"),
            variant: fixed_str("aesni-sse"),
            size: 8192,
            work: 8192 * 100,
            cycles: 12345,
            unit: WorkUnit::Bytes as u32,
            check: 1,
            residual: 0.0,
        }));
        let back = Report::from_bytes(r.as_bytes()).unwrap();
        assert_eq!(back.xcr0, 0x7);
        assert_eq!(field_str(&back.results()[0].name), "aes-128-cbc");

        let bytes = r.as_bytes();
        assert_eq!(
            Report::from_bytes(&bytes[..100]).err(),
            Some(ReportError::Truncated {
                got: 100,
                need: Report::SIZE
            })
        );
        let mut bad = bytes.to_vec();
        bad[0] ^= 1;
        assert!(matches!(
            Report::from_bytes(&bad),
            Err(ReportError::BadMagic(_))
        ));
        let mut r2 = r;
        r2.result_count = 1000;
        assert_eq!(
            Report::from_bytes(r2.as_bytes()).err(),
            Some(ReportError::TooManyResults(1000))
        );
    }
}
