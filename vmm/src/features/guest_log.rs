//! Guest records read back from a serial log: what our guest saw and
//! measured under any VMM (`vmm`, QEMU, Cloud Hypervisor, Firecracker).
//!
//! Without `quiet` the guest prints its whole [`Report`] as one `VMMREC1`
//! line on COM1 ([`guest::protocol::serial_record`]). This module finds
//! that line in a log file, checks it (format version, length, CRC-32, the
//! record's own magic/version/size/counts), and turns it into the inputs
//! `vmm features` already has: the guest column ([`GuestSeen`]) and a
//! [`HostProfile`] of the CPUID the VMM exposed, so `vmm features compare`
//! puts VMMs beside hosts without a second comparison engine.

use std::path::Path;

use guest::protocol::{records_in, RecordError, Report, REPORT_COMPONENTS};
use xstate::profile::{CpuidEntry, CpuidProfile};
use xstate::{CpuidRegs, XfeatureMask, XsaveInfo};

use super::error::FeaturesError;
use super::inputs::{GuestSeen, GuestState, Inputs, Request};
use super::profile::{HostProfile, ProfileExtras};

/// The largest serial log read: a guest's own console output is a few
/// KiB; a VMM's log around it may be more, but not this much.
pub const MAX_GUEST_LOG_BYTES: u64 = 16 << 20;

/// One guest record, as read from a serial log.
#[derive(Clone, Debug)]
pub struct GuestRecord {
    /// The log file.
    pub file: String,
    /// The record (the last valid one in the log).
    pub report: Box<Report>,
    /// Valid records in the log (more than one: the log holds several runs).
    pub records_found: usize,
}

/// Whether `bytes` look like a serial log holding a guest record.
pub fn holds_record(bytes: &[u8]) -> bool {
    records_in(bytes).next().is_some()
}

impl GuestRecord {
    /// Read a serial log (a regular file or a pipe, of at most
    /// [`MAX_GUEST_LOG_BYTES`]) and take its last valid record. Errors name
    /// the file.
    pub fn load(path: &Path) -> Result<Self, FeaturesError> {
        let bytes = crate::input::read_whole(path, "guest log", MAX_GUEST_LOG_BYTES)?;
        Self::parse(path, &bytes)
    }

    /// Find and check the record in log bytes (`path` only names it).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self, FeaturesError> {
        let fail = |e: RecordError| FeaturesError::GuestLog {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        let mut last = None;
        let mut found = 0;
        let mut last_error = RecordError::NotFound;
        for r in records_in(bytes) {
            match r {
                Ok(report) => {
                    found += 1;
                    last = Some(Box::new(report));
                }
                Err(e) => last_error = e,
            }
        }
        let report = last.ok_or_else(|| fail(last_error))?;
        Ok(Self {
            file: path.display().to_string(),
            report,
            records_found: found,
        })
    }

    /// The guest column of `vmm features`.
    pub fn seen(&self) -> GuestSeen {
        GuestSeen::from_report(&self.report)
    }

    /// Leaf 0xD as the guest saw it, subleaf by subleaf (EDX of subleaves
    /// 2 and up is not recorded: zero, as on every CPU so far).
    pub fn leaf_0xd(&self) -> [CpuidRegs; 64] {
        let r = &self.report;
        let mut raw = [CpuidRegs::default(); 64];
        raw[0] = CpuidRegs::new(
            r.cpuid_xcr0_supported as u32,
            r.cpuid_size_enabled,
            r.cpuid_size_max,
            (r.cpuid_xcr0_supported >> 32) as u32,
        );
        raw[1] = CpuidRegs::new(
            r.cpuid_xsave_features,
            r.cpuid_size_compacted,
            r.cpuid_xss_supported as u32,
            (r.cpuid_xss_supported >> 32) as u32,
        );
        for (i, c) in r
            .components
            .iter()
            .enumerate()
            .take(REPORT_COMPONENTS)
            .skip(2)
        {
            raw[i] = CpuidRegs::new(c.size, c.offset, c.flags, 0);
        }
        raw
    }

    /// The CPUID the VMM exposed to the guest, as a profile: leaf 0xD,
    /// leaves 1 (ECX/EDX), 7.0 (EBX/ECX/EDX) and 7.1 (EAX), the registers
    /// the record holds; what the guest enabled is its XCR0 (as
    /// `xcr0_enabled`, the OS's choice on a host). No KVM column: the VMM's
    /// leaf 0xD is what the guest got.
    pub fn to_profile(&self) -> Result<HostProfile, FeaturesError> {
        let r = &self.report;
        let fail = |reason: String| FeaturesError::GuestLog {
            path: self.file.clone().into(),
            reason,
        };
        if r.cpuid1_ecx & xstate::info::leaf_1_ecx::XSAVE == 0 {
            return Err(fail(
                "the guest saw no XSAVE (CPUID.1:ECX.XSAVE clear): no leaf 0xD to compare".into(),
            ));
        }
        let cpu = XsaveInfo::from_raw(self.leaf_0xd())
            .map_err(|e| fail(format!("the guest's CPUID leaf 0xD: {e}")))?;
        let xcr0 = XfeatureMask::from_bits(r.xcr0);
        let profile = CpuidProfile {
            name: format!("guest record: XCR0 set {:#x}", r.xcr0),
            microarchitecture: String::new(),
            vendor: String::new(),
            signature: xstate::profile::Hex32(0),
            bare_metal: false,
            source: format!("VMMREC1 line of {}", self.file),
            leaf_0xd: CpuidProfile::entries_of(&cpu),
            leaf_1: Some(CpuidEntry::new(
                0,
                CpuidRegs::new(0, 0, r.cpuid1_ecx, r.cpuid1_edx),
            )),
            leaf_7: Some(CpuidEntry::new(
                0,
                CpuidRegs::new(0, r.cpuid7_ebx, r.cpuid7_ecx, r.cpuid7_edx),
            )),
            kvm_leaf_0xd: None,
        };
        Ok(HostProfile {
            file: self.file.clone(),
            name: profile.name.clone(),
            cpu,
            kvm: None,
            os_xcr0: Some(xcr0),
            profile,
            extras: ProfileExtras {
                xcr0_enabled: Some(super::profile::HexMask(r.xcr0)),
                leaf_7_1: Some(CpuidEntry::new(1, CpuidRegs::new(r.cpuid7_1_eax, 0, 0, 0))),
                ..ProfileExtras::default()
            },
        })
    }
}

/// The inputs of `vmm features --guest-log LOG [--profile P]`: the guest
/// column from the log's record; the CPU column from the profile when one
/// is given, else the CPUID the guest saw (the VMM's, standing in for the
/// CPU). No KVM, no boot.
pub fn inputs(
    log: &Path,
    profile: Option<&HostProfile>,
    xfeatures: Option<&str>,
) -> Result<Inputs, FeaturesError> {
    let g = GuestRecord::load(log)?;
    let guest = GuestState::Booted {
        seen: g.seen(),
        note: Some(format!(
            "guest column from the VMMREC1 record in {}{}",
            g.file,
            if g.records_found > 1 {
                format!(" (the last of {} records)", g.records_found)
            } else {
                String::new()
            }
        )),
    };
    if let Some(p) = profile {
        let mut inputs = super::inputs::gather(&Request {
            profile: Some(p),
            xfeatures,
            boot: false,
            timeout: None,
        })?;
        inputs.guest = guest;
        return Ok(inputs);
    }
    let host = g.to_profile()?;
    let what = "the guest's CPUID";
    let r = crate::cpuid::resolve_xfeatures(xfeatures, host.cpu.supported_xcr0(), what)
        .map_err(|e| FeaturesError::Vmm(e.into()))?;
    if let Some(spec) = xfeatures {
        crate::output::terminal::line(crate::cpuid::describe_resolution(spec, &r));
    }
    Ok(Inputs {
        source: format!("guest log {}", g.file),
        cpu_name: "the CPU as the guest saw it (its VMM's CPUID)".into(),
        cpu: host.cpu,
        os_xcr0: None,
        kvm: None,
        kvm_missing: Some("a guest log records what the VMM exposed, not KVM's set".into()),
        policy_xcr0: r.result,
        hidden_flags: Vec::new(),
        guest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use guest::protocol::{write_record, ComponentReport};

    /// A report like the guest's under a VMM exposing x87, SSE and AVX.
    fn report() -> Report {
        let mut r = Report::new();
        r.cpuid1_ecx = (1 << 26) | (1 << 27) | (1 << 28); // XSAVE OSXSAVE AVX
        r.cpuid7_ebx = 1 << 5; // AVX2
        r.cpuid_xcr0_supported = 0x7;
        r.cpuid_size_enabled = 832;
        r.cpuid_size_max = 832;
        r.cpuid_xsave_features = 0xf;
        r.cpuid_size_compacted = 832;
        r.components[2] = ComponentReport {
            size: 256,
            offset: 576,
            flags: 0,
            compacted_offset: 576,
        };
        r.xcr0 = 0x7;
        r.xinuse = 0x3;
        r
    }

    fn log_of(r: &Report) -> Vec<u8> {
        let mut line = String::new();
        write_record(r, &mut line).unwrap();
        format!("guest: exit: success\n{line}").into_bytes()
    }

    #[test]
    fn profile_of_a_record() {
        let g = GuestRecord::parse(Path::new("ch.log"), &log_of(&report())).unwrap();
        assert_eq!(g.records_found, 1);
        let p = g.to_profile().unwrap();
        assert_eq!(p.cpu.supported_xcr0().bits(), 0x7);
        assert_eq!(p.cpu.standard_size(p.cpu.supported_xcr0()).unwrap(), 832);
        let avx2 = crate::cpuid::GATED_FLAGS
            .iter()
            .find(|f| f.cpuinfo == "avx2")
            .unwrap();
        assert_eq!(p.flag(avx2), Some(true));
        let avx512f = crate::cpuid::GATED_FLAGS
            .iter()
            .find(|f| f.cpuinfo == "avx512f")
            .unwrap();
        assert_eq!(p.flag(avx512f), Some(false));
        let seen = g.seen();
        assert_eq!(seen.xinuse.map(|m| m.bits()), Some(0x3));
    }

    #[test]
    fn errors_name_the_file() {
        let e = GuestRecord::parse(Path::new("empty.log"), b"booting\nhalted\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "guest log empty.log: no VMMREC1 line in the log"
        );
        let mut log = log_of(&report());
        let n = log.len();
        log.truncate(n - 8);
        let e = GuestRecord::parse(Path::new("cut.log"), &log).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("guest log cut.log: VMMREC1 line cut"),
            "{e}"
        );
        let mut r = report();
        r.cpuid1_ecx = 0;
        let g = GuestRecord::parse(Path::new("old.log"), &log_of(&r)).unwrap();
        let e = g.to_profile().unwrap_err().to_string();
        assert!(e.contains("no XSAVE"), "{e}");
    }
}
