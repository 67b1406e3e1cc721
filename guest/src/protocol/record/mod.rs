//! The [`Report`] record: what the guest hands the VMM at the end of a run,
//! its layout, and its validating decoder.
//!
//! The record is `repr(C)`, little-endian and free of padding (checked at
//! compile time by the zerocopy derives and the size assertions below), so
//! encoding is a byte view and decoding a checked copy: no `unsafe` on
//! either side, and a malformed record is an error, never a panic.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// "VMMGUEST", little-endian.
pub const REPORT_MAGIC: u64 = u64::from_le_bytes(*b"VMMGUEST");
/// Bumped on every incompatible change of [`Report`].
pub const REPORT_VERSION: u32 = 4;

/// Set in an `exit-*` row's [`Report::result_aux`] when the rest is the
/// XINUSE the guest read (XGETBV with ECX = 1) right before the row's
/// first exit; the figure is 0 where the CPU cannot say.
pub const AUX_XINUSE: u64 = 1 << 63;

/// Number of XSAVE state components described in a report (0..=19).
pub const REPORT_COMPONENTS: usize = 20;
/// The most CPUs the guest kernel brings up: its per-CPU stacks, TSSes and
/// report slots are static, and the VMM refuses `--vcpus` above this.
pub const MAX_CPUS: u32 = 8;
/// Most workload results one report carries.
pub const MAX_RESULTS: usize = 64;
/// Most "skipped, and why" entries one report carries.
pub const MAX_SKIPPED: usize = 32;
/// Length of the fixed, NUL-padded ASCII name fields (32 since version 3:
/// `xsavec-xinuse-avx-initall` is 25 characters).
pub const NAME_LEN: usize = 32;
/// Length of the fixed, NUL-padded ASCII reason field.
pub const REASON_LEN: usize = 64;
/// Copy methods in [`CopyReport`] (`guest::bench::copy::Method::ALL` order).
pub const COPY_METHODS: usize = 8;
/// Copy sizes in [`CopyReport`]: 16 B, 64 B, ... 64 MiB (powers of 4).
pub const COPY_SIZES: usize = 12;
/// Live-state cases of [`CopyReport::borrow_cycles`]: xmm, ymm, zmm.
pub const COPY_LIVE_STATES: usize = 3;
/// Save instructions of [`CopyReport::borrow_cycles`]: XSAVE, XSAVEC.
pub const COPY_SAVE_INSNS: usize = 2;

/// What CPUID leaf 0xD says about one state component, as the guest saw it.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
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
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
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
    /// Explicit padding to 8 bytes (the record has none implicit); 0.
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
#[derive(Clone, Copy, Debug, PartialEq, FromBytes, IntoBytes, Immutable, KnownLayout)]
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

/// A workload variant the guest did not run, and why.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SkipRecord {
    /// Workload name, NUL-padded ASCII, as in [`ResultRecord::name`].
    pub name: [u8; NAME_LEN],
    /// ISA variant, NUL-padded ASCII, as in [`ResultRecord::variant`].
    pub variant: [u8; NAME_LEN],
    /// NUL-padded ASCII, e.g. `CPUID lacks AVX (XCR0 0x3)`.
    pub reason: [u8; REASON_LEN],
}

/// Everything the guest reports, written once at the end of the run.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Report {
    /// [`REPORT_MAGIC`].
    pub magic: u64,
    /// [`REPORT_VERSION`].
    pub version: u32,
    /// `size_of::<Report>()` as the guest was built.
    pub size: u32,

    /// CPUID.1 ECX/EDX, CPUID.7.0 EBX/ECX/EDX, CPUID.7.1 EAX as seen by the guest.
    pub cpuid1_ecx: u32,
    /// CPUID.1 EDX.
    pub cpuid1_edx: u32,
    /// CPUID.7.0 EBX.
    pub cpuid7_ebx: u32,
    /// CPUID.7.0 ECX.
    pub cpuid7_ecx: u32,
    /// CPUID.7.0 EDX.
    pub cpuid7_edx: u32,
    /// CPUID.7.1 EAX.
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

    /// Valid entries in [`Report::results`] (at most [`MAX_RESULTS`]).
    pub result_count: u32,
    /// Valid entries in [`Report::skipped`] (at most [`MAX_SKIPPED`]).
    pub skipped_count: u32,
    /// Measured workloads and benchmarks; see [`Report::results()`].
    pub results: [ResultRecord; MAX_RESULTS],
    /// Variants not run, and why; see [`Report::skipped()`].
    pub skipped: [SkipRecord; MAX_SKIPPED],

    /// A second figure per result, same index as [`Report::results`]; 0
    /// when the row has none. `ctxsw` rows: bytes written per save (see
    /// `guest::bench::ctxsw::bytes_per_save`); `exit-*` rows: XINUSE right
    /// before the first exit, or'ed with [`AUX_XINUSE`].
    pub result_aux: [u64; MAX_RESULTS],
    /// The user-level context-switch strategy the guest chose at boot by
    /// measurement (one of [`SWITCH_STRATEGIES`](crate::protocol::SWITCH_STRATEGIES)), NUL-padded; empty when
    /// the CPU has no XSAVE.
    pub switch_strategy: [u8; NAME_LEN],
    /// TSC cycles per context switch (save + XRSTOR + stack switch) the boot
    /// calibration measured for each of [`SWITCH_STRATEGIES`](crate::protocol::SWITCH_STRATEGIES) (the minimum
    /// of its trials); 0 when the CPU (as the guest's CPUID says) lacks it.
    pub switch_cycles: [u64; 4],
    /// TSC cycles the whole boot calibration took.
    pub switch_calibration_cycles: u64,
    /// How many CPUs the guest meant to run (BSP included).
    pub cpus_wanted: u32,
    /// Where that count came from: an index into
    /// [`CPU_COUNT_SOURCES`](crate::firmware::CPU_COUNT_SOURCES) (`cmdline`,
    /// `madt`, `mptable`, `default`); 0 when not recorded.
    pub cpus_source: u32,

    /// `bench=copy`: the copy sweep and the price of borrowing the vector
    /// registers (all zero when the benchmark did not run). Since version 4.
    pub copy: CopyReport,
}

/// The `bench=copy` table: TSC cycles per copy of every method at every
/// size, on cache-hot and on cold data, and TSC cycles per XSAVE+XRSTOR
/// pair with each kind of vector state live. A cell is 0.0 when it was not
/// measured (the method is not usable under the guest's CPUID and XCR0, or
/// the buffers did not fit in guest memory); the VMM turns cycles into ns
/// and GB/s with [`Report::tsc_khz`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CopyReport {
    /// 1 when `bench=copy` ran.
    pub valid: u32,
    /// Bit i set: method i was measured (usable here).
    pub methods: u32,
    /// Bytes of the cold rotation region (each of source and destination).
    pub cold_region: u64,
    /// Largest cache the guest's CPUID describes (leaf 4 or 0x8000001D), in
    /// bytes; 0 when it describes none.
    pub llc_bytes: u64,
    /// Cycles per copy, same buffers every time: `[method][size]`.
    pub hot: [[f64; COPY_SIZES]; COPY_METHODS],
    /// Cycles per copy, source and destination rotating through
    /// [`CopyReport::cold_region`]: `[method][size]`.
    pub cold: [[f64; COPY_SIZES]; COPY_METHODS],
    /// Cycles per XSAVE+XRSTOR pair of the task's own state at CPL3:
    /// `[XSAVE, XSAVEC][xmm, ymm, zmm live]`.
    pub borrow_cycles: [[f64; COPY_LIVE_STATES]; COPY_SAVE_INSNS],
    /// The guest's `memcpy` policy after the run: sizes from this one up
    /// use `rep movsb` (below it, the SSE2 loop).
    pub memcpy_rep_min: u64,
    /// Sizes from this one up use non-temporal stores (`u64::MAX`: never).
    pub memcpy_nt_min: u64,
    /// The guest's `memset` policy: sizes from this one up use `rep stosb`.
    pub memset_rep_min: u64,
    /// 1 when the policy comes from this run's measurements, 0 default.
    pub policy_measured: u32,
    /// Explicit padding to 8 bytes; 0.
    pub _pad: u32,
}

impl CopyReport {
    /// The empty table (benchmark not run).
    pub const EMPTY: CopyReport = CopyReport {
        valid: 0,
        methods: 0,
        cold_region: 0,
        llc_bytes: 0,
        hot: [[0.0; COPY_SIZES]; COPY_METHODS],
        cold: [[0.0; COPY_SIZES]; COPY_METHODS],
        borrow_cycles: [[0.0; COPY_LIVE_STATES]; COPY_SAVE_INSNS],
        memcpy_rep_min: 0,
        memcpy_nt_min: 0,
        memset_rep_min: 0,
        policy_measured: 0,
        _pad: 0,
    };

    /// The size of column `i`: 16 << 2i bytes.
    pub const fn size(i: usize) -> u64 {
        16u64 << (2 * i)
    }
}

/// Why a report copied out of guest memory was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportError {
    /// Fewer bytes than `size_of::<Report>()`.
    Truncated {
        /// Bytes given.
        got: usize,
        /// `size_of::<Report>()`.
        need: usize,
    },
    /// The magic field is not [`REPORT_MAGIC`].
    BadMagic(u64),
    /// The version field is not [`REPORT_VERSION`].
    BadVersion(u32),
    /// The guest was built with a different record layout.
    BadSize {
        /// The record's size field.
        got: u32,
        /// `size_of::<Report>()` here.
        need: u32,
    },
    /// `result_count` above [`MAX_RESULTS`].
    TooManyResults(u32),
    /// `skipped_count` above [`MAX_SKIPPED`].
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
            cpus_wanted: 0,
            cpus_source: 0,
            copy: CopyReport::EMPTY,
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
        // Every bit pattern is a valid `Report` (integers, f64 and byte
        // arrays only: `FromBytes`), so the copy itself cannot fail once
        // the length is right.
        let Ok((report, _)) = Report::read_from_prefix(bytes) else {
            return Err(ReportError::Truncated {
                got: bytes.len(),
                need: Self::SIZE,
            });
        };
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
        // `IntoBytes` proves at compile time that the record has no padding.
        IntoBytes::as_bytes(self)
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
                + 2 * 4
                + core::mem::size_of::<CopyReport>()
    );
    assert!(
        core::mem::size_of::<CopyReport>()
            == 24
                + 2 * COPY_METHODS * COPY_SIZES * 8
                + COPY_SAVE_INSNS * COPY_LIVE_STATES * 8
                + 3 * 8
                + 8
    );
};

#[cfg(test)]
mod tests;
