//! The run's [`Report`]: filled at CPL3 from CPUID, XGETBV and the xstate
//! crate's layout model, handed to the VMM through [`REPORT_PORT`] (with
//! the exit status through [`REPORT_EXIT_PORT`] at the run's end), and
//! printed for humans on COM1.

use super::cpu::{self, cpuid, XSAVE_FEATURE_XGETBV1};
use super::serial::Console;
use super::syscall::outl;
use super::xcr0;
use core::cell::UnsafeCell;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, Ordering};
use guest::protocol::{
    field_str, report_exit_value, write_record, xsave_variants, ComponentReport, ExitStatus,
    Report, WorkUnit, REPORT_EXIT_ALIGN, REPORT_EXIT_PORT, REPORT_PORT,
};
use xstate::{CpuidRegs, Format, InfoError, LayoutError, Xfeature, XfeatureMask, XsaveInfo};

/// x87 and SSE in the legacy region of the XSAVE area (both formats);
/// components 0 and 1 have no CPUID 0xD subleaf of their own.
const LEGACY: [ComponentReport; 2] = [
    ComponentReport {
        size: 160,
        offset: 0,
        flags: 0,
        compacted_offset: 0,
    },
    ComponentReport {
        size: 256,
        offset: 160,
        flags: 0,
        compacted_offset: 160,
    },
];

/// Aligned for [`REPORT_EXIT_PORT`]: the address's low bits carry the
/// exit status (the report's own layout is unchanged).
#[repr(C, align(64))]
struct ReportCell(UnsafeCell<Report>);

const _: () = assert!(core::mem::align_of::<ReportCell>() as u64 == REPORT_EXIT_ALIGN);

// SAFETY: one vCPU, no interrupts; see `report_ptr` for who may use it.
unsafe impl Sync for ReportCell {}

/// The one report of the run, in `.data` (magic, version and size are set
/// at link time) below 4 GiB, so its address fits the 32-bit report port.
static REPORT: ReportCell = ReportCell(UnsafeCell::new(Report::new()));

/// The run's report. `user_main` holds the only `&mut` while the run goes
/// on; the fault and panic paths take it over after abandoning that flow.
pub fn report_ptr() -> *mut Report {
    REPORT.0.get()
}

/// Hand the report's guest-physical address to the VMM (one 32-bit write).
pub fn send(report: &Report) {
    outl(REPORT_PORT, report as *const Report as u64 as u32);
}

/// Whether [`send`] also prints the record line on COM1: set when the
/// command line lacks `quiet` (a VMM that passes `quiet` reads the report
/// port). A static because the fault and panic paths, which also send,
/// never see the command line.
static RECORD_ON_SERIAL: AtomicBool = AtomicBool::new(false);

/// Ask [`send`] to print the record line too (see [`RECORD_ON_SERIAL`]).
pub fn print_record_too(on: bool) {
    RECORD_ON_SERIAL.store(on, Ordering::Relaxed);
}

/// Hand the report over both ways a VMM may read it: its address to the
/// report port (`vmm`), and, unless `quiet`, its record line on COM1 (any
/// VMM's serial log; see [`guest::protocol::serial_record`]).
pub fn send_everywhere(report: &Report, out: &mut Console) {
    send(report);
    if RECORD_ON_SERIAL.load(Ordering::Relaxed) {
        let _ = write_record(report, out);
        out.flush();
    }
}

/// The run's end: the record line on COM1 (unless `quiet`, as
/// [`send_everywhere`]), then the report and `status` in one write to
/// [`REPORT_EXIT_PORT`] (`vmm` ends the run there), then the ordinary
/// exit for VMMs that ignore that port (which never saw the report port
/// either). A report that cannot travel with the status (not aligned)
/// goes to [`REPORT_PORT`] first, as before.
pub fn send_everywhere_and_exit(report: &Report, status: ExitStatus, out: &mut Console) -> ! {
    if RECORD_ON_SERIAL.load(Ordering::Relaxed) {
        let _ = write_record(report, out);
        out.flush();
    }
    match report_exit_value(report as *const Report as u64, status as u32) {
        Some(value) => outl(REPORT_EXIT_PORT, value),
        None => send(report),
    }
    super::syscall::exit(status)
}

/// Name of state component `i` (the xstate crate's short names).
pub fn component_name(i: u32) -> Option<&'static str> {
    Xfeature::from_index(i).map(Xfeature::short_name)
}

/// Why the guest's own XSAVE layout model could not describe the CPU the
/// VMM presents: CPUID leaf 0xD breaks an architectural rule.
#[derive(Clone, Copy, Debug)]
pub enum ModelError {
    Info(InfoError),
    Layout(LayoutError),
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Info(e) => write!(f, "CPUID leaf 0xD rejected: {e}"),
            Self::Layout(e) => write!(f, "no layout for XCR0: {e}"),
        }
    }
}

/// Fill every CPUID- and XCR0-derived field, and the sizes and compacted
/// offsets the guest computes itself with the xstate crate for the XCR0 it
/// set (so the VMM can compare the CPU's word with the model's).
///
/// Each CPUID leaf is read once: the subleaves of 0xD that the xstate
/// model reads are also the ones recorded in the report.
pub fn fill_cpu(report: &mut Report) -> Result<(), ModelError> {
    // One system call for the leaves below (again only if an XSETBV since
    // boot made the kept ones stale).
    cpu::prefetch(&cpu::BOOT_LEAVES);
    let l1 = cpuid(1, 0);
    report.cpuid1_ecx = l1.ecx;
    report.cpuid1_edx = l1.edx;
    let max_basic = cpuid(0, 0).eax;
    if max_basic >= 7 {
        let l7 = cpuid(7, 0);
        report.cpuid7_ebx = l7.ebx;
        report.cpuid7_ecx = l7.ecx;
        report.cpuid7_edx = l7.edx;
        if l7.eax >= 1 {
            report.cpuid7_1_eax = cpuid(7, 1).eax;
        }
    }
    report.tsc_khz = cpu::tsc_khz(l1.ecx, max_basic);
    if max_basic < 0xd || l1.ecx & xstate::info::leaf_1_ecx::XSAVE == 0 {
        return Ok(());
    }

    // Subleaf 0 EBX is the standard size for the XCR0 set at boot, which
    // is why this runs after boot and not before. The component subleaves
    // the model reads are those of 0xD.0 and 0xD.1's masks: one call.
    let regs = |r: cpu::Regs| CpuidRegs::new(r.eax, r.ebx, r.ecx, r.edx);
    let mut subleaves = [(0xd, 0); 24];
    let mut n = 0;
    for i in XsaveInfo::component_subleaves(regs(cpuid(0xd, 0)), regs(cpuid(0xd, 1))) {
        if let Some(slot) = subleaves.get_mut(n) {
            *slot = (0xd, i);
            n += 1;
        }
    }
    cpu::prefetch(&subleaves[..n]);
    let mut raw = [cpu::Regs::default(); 64];
    let info = XsaveInfo::from_leaf_0xd(|sub| {
        let r = cpuid(0xd, sub);
        if let Some(slot) = raw.get_mut(sub as usize) {
            *slot = r;
        }
        regs(r)
    });
    let (d0, d1) = (raw[0], raw[1]);
    report.cpuid_xcr0_supported = (u64::from(d0.edx) << 32) | u64::from(d0.eax);
    report.cpuid_size_enabled = d0.ebx;
    report.cpuid_size_max = d0.ecx;
    report.cpuid_xsave_features = d1.eax;
    report.cpuid_size_compacted = d1.ebx;
    report.cpuid_xss_supported = (u64::from(d1.edx) << 32) | u64::from(d1.ecx);
    report.xcr0 = xcr0::xcr0_given(l1.ecx);
    report.xcr0_hardware = xcr0::xcr0_hardware(l1.ecx);

    let supported = report.cpuid_xcr0_supported | report.cpuid_xss_supported;
    for (i, c) in report.components.iter_mut().enumerate() {
        if supported & (1 << i) == 0 {
            continue;
        }
        *c = match i {
            // x87 and SSE live in the legacy region; subleaves 0 and 1 are
            // not theirs.
            0 | 1 => LEGACY[i],
            _ => ComponentReport {
                size: raw[i].eax,
                offset: raw[i].ebx,
                flags: raw[i].ecx,
                compacted_offset: 0,
            },
        };
    }

    let info = info.map_err(ModelError::Info)?;
    let xcr0 = XfeatureMask::from_bits(report.xcr0);
    report.computed_standard_size = info.standard_size(xcr0).map_err(ModelError::Layout)?;
    let compacted = info
        .layout(xcr0, Format::Compacted)
        .map_err(ModelError::Layout)?;
    report.computed_compacted_size = compacted.total_size();
    for (i, offset, _size) in compacted.iter_indices() {
        if let Some(c) = report.components.get_mut(i as usize) {
            c.compacted_offset = offset;
        }
    }
    Ok(())
}

/// Read XINUSE (XGETBV(1)) into the report, if the CPU has it.
pub fn fill_xinuse(report: &mut Report) {
    if report.cpuid_xsave_features & XSAVE_FEATURE_XGETBV1 != 0 && report.xcr0 != 0 {
        // SAFETY: XCR0 is non-zero, so CR4.OSXSAVE is set, and CPUID 0xD.1
        // EAX bit 2 says XGETBV(1) exists.
        report.xinuse = unsafe { xcr0::xgetbv(1) };
    }
}

/// `0x7 (x87 sse avx)`.
pub struct MaskNames(pub u64);

impl fmt::Display for MaskNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x} (", self.0)?;
        let mut first = true;
        for bit in 0..64 {
            if self.0 & (1 << bit) == 0 {
                continue;
            }
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            match component_name(bit) {
                Some(name) => f.write_str(name)?,
                None => write!(f, "bit{bit}")?,
            }
        }
        f.write_str(")")
    }
}

/// Names of the XSAVE variants CPUID 0xD.1 EAX lists.
struct Variants(u32);

impl fmt::Display for Variants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in xsave_variants(self.0).enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

/// Print the human-readable report: one flush per block.
#[inline(never)]
pub fn print_human(report: &Report, status: ExitStatus, out: &mut Console) {
    let _ = write_human(report, status, out);
    out.flush();
}

fn write_human(r: &Report, status: ExitStatus, out: &mut Console) -> fmt::Result {
    if r.cpuid1_ecx & xstate::info::leaf_1_ecx::XSAVE == 0 {
        writeln!(
            out,
            "guest: CPUID.1:ECX.XSAVE is clear: no XSAVE, XCR0 not set"
        )?;
    } else {
        writeln!(
            out,
            "guest: XCR0 supported {}",
            MaskNames(r.cpuid_xcr0_supported)
        )?;
        writeln!(out, "guest: XCR0 set       {}", MaskNames(r.xcr0))?;
        writeln!(
            out,
            "guest: IA32_XSS supported {:#x}",
            r.cpuid_xss_supported
        )?;
        writeln!(out, "guest: variants: {}", Variants(r.cpuid_xsave_features))?;
        writeln!(
            out,
            "guest: standard size {} (CPUID) {} (computed), max {}; compacted {} (CPUID, XCR0|XSS) {} (computed, XCR0)",
            r.cpuid_size_enabled,
            r.computed_standard_size,
            r.cpuid_size_max,
            r.cpuid_size_compacted,
            r.computed_compacted_size
        )?;
        writeln!(
            out,
            "guest:   # name          size  offset  compacted  flags"
        )?;
        for (i, c) in r.components.iter().enumerate() {
            if r.xcr0 & (1 << i) == 0 {
                continue;
            }
            writeln!(
                out,
                "guest: {:>3} {:<12} {:>5} {:>7} {:>10}  {:#x}",
                i,
                component_name(i as u32).unwrap_or("?"),
                c.size,
                c.offset,
                c.compacted_offset,
                c.flags
            )?;
        }
        writeln!(out, "guest: XINUSE {}", MaskNames(r.xinuse))?;
    }
    if r.tsc_khz != 0 {
        writeln!(out, "guest: TSC {} kHz", r.tsc_khz)?;
    } else {
        writeln!(out, "guest: TSC frequency unknown")?;
    }
    if r.results().is_empty() {
        writeln!(out, "guest: results: none")?;
    }
    for res in r.results() {
        write!(
            out,
            "guest: result {} [{}] size {}: ",
            field_str(&res.name),
            field_str(&res.variant),
            res.size
        )?;
        if r.tsc_khz != 0 && res.cycles != 0 {
            // The timed region lasted cycles / (kHz * 1000) seconds.
            let per_sec = res.work as f64 * r.tsc_khz as f64 * 1000.0 / res.cycles as f64;
            match res.unit {
                u if u == WorkUnit::Bytes as u32 => write!(out, "{:.1} MB/s", per_sec / 1e6)?,
                u if u == WorkUnit::Flops as u32 => write!(out, "{:.2} GFLOPS", per_sec / 1e9)?,
                _ => write!(out, "{:.0} /s", per_sec)?,
            }
        } else {
            write!(out, "{} work in {} cycles", res.work, res.cycles)?;
        }
        writeln!(
            out,
            ", check {}",
            if res.check != 0 { "ok" } else { "FAILED" }
        )?;
    }
    for s in r.skipped() {
        writeln!(
            out,
            "guest: skipped {} [{}]: {}",
            field_str(&s.name),
            field_str(&s.variant),
            field_str(&s.reason)
        )?;
    }
    writeln!(out, "guest: exit: {}", status.describe())
}
