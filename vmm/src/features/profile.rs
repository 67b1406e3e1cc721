//! Host profiles: the xstate crate's [`CpuidProfile`] JSON format (see
//! `xstate/tests/data/README.md`), loaded with errors that name the file,
//! checked beyond what [`CpuidProfile::from_json`] checks, and recorded from
//! the running host by `vmm features save`.
//!
//! A saved profile is a `CpuidProfile` (identification, `leaf_0xd`, `leaf_1`,
//! `leaf_7`, `kvm_leaf_0xd`) plus these optional fields, which readers of the
//! plain format ignore:
//!
//! | field | meaning |
//! |-------|---------|
//! | `xcr0_enabled` | XGETBV(0) on the recording host: what its OS enabled (hex string) |
//! | `leaf_7_1` | CPUID leaf 7 subleaf 1 (AVX-VNNI, AMX-FP16, ... flags) |
//! | `kvm_leaf_1`, `kvm_leaf_7`, `kvm_leaf_7_1` | the same leaves in `KVM_GET_SUPPORTED_CPUID` |
//! | `recorded_by` | the `vmm` version, host name and kernel release that recorded it |

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use xstate::profile::{CpuidEntry, CpuidProfile};
use xstate::{CpuidRegs, Xfeature, XfeatureMask, XsaveInfo};

use super::error::FeaturesError;
use crate::cpuid::GatedFlag;

/// The largest profile file read: recorded profiles are a few KiB; a
/// bound keeps `/dev/zero`-like or huge files from being read at all.
pub const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// A 64-bit mask written as a `0x`-prefixed hex string (the grammar of
/// [`xstate::profile::parse_hex`]: `0x` and 1 to 16 hex digits, no sign).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HexMask(pub u64);

impl Serialize for HexMask {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:#x}", self.0))
    }
}

impl<'de> Deserialize<'de> for HexMask {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        xstate::profile::parse_hex(&s, 16)
            .map(HexMask)
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "{s:?} is not a 0x-prefixed 64-bit hex number (0x and 1 to 16 hex digits)"
                ))
            })
    }
}

/// The fields `vmm features save` adds to a [`CpuidProfile`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileExtras {
    /// XGETBV(0) on the recording host: what its OS enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xcr0_enabled: Option<HexMask>,
    /// CPUID leaf 7 subleaf 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_7_1: Option<CpuidEntry>,
    /// Leaf 1 in `KVM_GET_SUPPORTED_CPUID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_leaf_1: Option<CpuidEntry>,
    /// Leaf 7 subleaf 0 in `KVM_GET_SUPPORTED_CPUID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_leaf_7: Option<CpuidEntry>,
    /// Leaf 7 subleaf 1 in `KVM_GET_SUPPORTED_CPUID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_leaf_7_1: Option<CpuidEntry>,
    /// The `vmm` version, host name and kernel release that recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_by: Option<String>,
}

/// A profile as written: the xstate format plus [`ProfileExtras`].
#[derive(Serialize)]
struct SavedProfile<'a> {
    #[serde(flatten)]
    profile: &'a CpuidProfile,
    #[serde(flatten)]
    extras: &'a ProfileExtras,
}

/// One host's extended-state facts, from a profile file or the running host.
#[derive(Clone, Debug)]
pub struct HostProfile {
    /// The file it came from (or `this host`).
    pub file: String,
    /// CPU name, with the microarchitecture when recorded.
    pub name: String,
    /// The CPU's leaf 0xD.
    pub cpu: XsaveInfo,
    /// KVM's supported leaf 0xD, where recorded.
    pub kvm: Option<XsaveInfo>,
    /// XGETBV(0): what the host OS enabled, where known.
    pub os_xcr0: Option<XfeatureMask>,
    /// The profile as read, in the xstate crate's format.
    pub profile: CpuidProfile,
    /// The fields `vmm features save` adds.
    pub extras: ProfileExtras,
}

impl HostProfile {
    /// Read and check a profile file: a regular file of at most
    /// [`MAX_PROFILE_BYTES`] (refused from its type and size before a byte
    /// is read), UTF-8 JSON. Every error names the file. (Dumps in other
    /// formats: `features::import::load`.)
    pub fn load(path: &Path) -> Result<Self, FeaturesError> {
        Self::load_with(path, MAX_PROFILE_BYTES, Self::parse)
    }

    /// Read a regular file or a pipe of at most `max` bytes as UTF-8 text and hand it
    /// to `parse`: the one way profile-like files are opened.
    pub fn load_with(
        path: &Path,
        max: u64,
        parse: impl FnOnce(&Path, &str) -> Result<Self, FeaturesError>,
    ) -> Result<Self, FeaturesError> {
        let bytes = crate::input::read_whole(path, "profile", max)?;
        let text = String::from_utf8(bytes).map_err(|e| FeaturesError::Profile {
            path: path.to_path_buf(),
            reason: format!("not UTF-8 text: {}", e.utf8_error()),
        })?;
        parse(path, &text)
    }

    /// Parse and check profile text (`path` only names it in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Self, FeaturesError> {
        let fail = |reason: String| FeaturesError::Profile {
            path: path.to_path_buf(),
            reason,
        };
        let profile = CpuidProfile::from_json(text).map_err(|e| fail(e.to_string()))?;
        let extras: ProfileExtras =
            serde_json::from_str(text).map_err(|e| fail(format!("CPUID profile: {e}")))?;
        // The xstate crate checked its own text fields; this one is ours.
        if let Some(r) = &extras.recorded_by {
            xstate::profile::check_text("recorded_by", r).map_err(|e| fail(e.to_string()))?;
        }
        let cpu = profile
            .xsave_info()
            .map_err(|e| fail(format!("leaf_0xd: {e}")))?;
        check_consistent(&cpu).map_err(|e| fail(format!("leaf_0xd: {e}")))?;
        let kvm = match profile.kvm_xsave_info() {
            None => None,
            Some(r) => {
                let kvm = r.map_err(|e| fail(format!("kvm_leaf_0xd: {e}")))?;
                check_consistent(&kvm).map_err(|e| fail(format!("kvm_leaf_0xd: {e}")))?;
                Some(kvm)
            }
        };
        let os_xcr0 = extras.xcr0_enabled.map(|m| XfeatureMask::from_bits(m.0));
        if let Some(os) = os_xcr0 {
            os.validate_xcr0(cpu.supported_xcr0())
                .map_err(|e| fail(format!("xcr0_enabled {os:#x}: {e}")))?;
        }
        let name = if profile.microarchitecture.is_empty() {
            profile.name.clone()
        } else {
            format!("{} ({})", profile.name, profile.microarchitecture)
        };
        Ok(Self {
            file: path.display().to_string(),
            name,
            cpu,
            kvm,
            os_xcr0,
            profile,
            extras,
        })
    }

    /// The profile JSON as `vmm features save` writes it.
    pub fn to_json(&self) -> String {
        let saved = SavedProfile {
            profile: &self.profile,
            extras: &self.extras,
        };
        let mut s = serde_json::to_string_pretty(&saved)
            .unwrap_or_else(|e| unreachable!("profile serialisation cannot fail: {e}"));
        s.push('\n');
        s
    }

    /// Whether a guest on this host could be offered CPUID flag `f`: KVM's
    /// leaves where recorded, else the CPU's. `None` where not recorded.
    pub fn flag(&self, f: &GatedFlag) -> Option<bool> {
        let e = &self.extras;
        let kvm = self.kvm.is_some() && e.kvm_leaf_1.is_some();
        let entry = match (f.leaf, f.subleaf, kvm) {
            (1, 0, true) => e.kvm_leaf_1,
            (7, 0, true) => e.kvm_leaf_7,
            (7, 1, true) => e.kvm_leaf_7_1,
            (1, 0, false) => self.profile.leaf_1,
            (7, 0, false) => self.profile.leaf_7,
            (7, 1, false) => e.leaf_7_1,
            _ => None,
        }?;
        Some(f.reg.of(&entry.regs()) & (1 << f.bit) != 0)
    }
}

/// The sizes of the registers each user component holds: a leaf 0xD that
/// gives a component less room cannot hold its state.
///
/// More room is accepted: the layout follows CPUID, which is the ground
/// truth of a real CPU. Every public AMD Zen 2 dump (Rome, Matisse, Van
/// Gogh) enumerates PKRU (0xD.9) with 64 bytes where the 32-bit register
/// needs 8 (with PKU clear in leaf 7, so no OS enables it). Linux takes the
/// same view: its check of CPUID sizes against its own structures only
/// warns, and it places every component where CPUID says.
const ARCH_SIZES: [(Xfeature, u32); 8] = [
    (Xfeature::Avx, 256),
    (Xfeature::Opmask, 64),
    (Xfeature::ZmmHi256, 512),
    (Xfeature::Hi16Zmm, 1024),
    (Xfeature::Pkru, 8),
    (Xfeature::XtileCfg, 64),
    (Xfeature::XtileData, 8192),
    (Xfeature::Apx, 128),
];

/// Checks the xstate crate leaves to its users: only known components
/// (bits 0-19) enumerated, component sizes at least the architectural ones
/// (a component may be larger, never smaller: real Zen 2 CPUs enumerate a
/// 64-byte PKRU), and a maximum standard size (0.ECX) equal to the
/// end of the highest user component.
pub fn check_consistent(info: &XsaveInfo) -> Result<(), String> {
    let unknown = info.supported_all() - XfeatureMask::ALL_KNOWN;
    if !unknown.is_empty() {
        let bits: Vec<String> = unknown.iter_indices().map(|i| i.to_string()).collect();
        return Err(format!(
            "CPUID 0xD enumerates unknown state component bit(s) {} (mask {unknown:#x}); \
             this vmm knows components 0-19",
            bits.join(", ")
        ));
    }
    for (f, size) in ARCH_SIZES {
        if let Some(c) = info.component(f) {
            if c.size < size {
                return Err(format!(
                    "CPUID 0xD.{}: {} has size {}, smaller than the {size} bytes the \
                     architecture defines",
                    f.index(),
                    f.short_name(),
                    c.size
                ));
            }
        }
    }
    let end = info
        .standard_size(info.supported_xcr0())
        .map_err(|e| e.to_string())?;
    if end != info.max_standard_size() {
        return Err(format!(
            "CPUID 0xD.0 ECX (maximum standard size) is {}, but the supported components {} \
             end at {end}",
            info.max_standard_size(),
            info.supported_xcr0().describe()
        ));
    }
    Ok(())
}

/// XGETBV(0) of the running host (what its OS enabled), `None` when the OS
/// has not enabled XSAVE.
#[cfg(target_arch = "x86_64")]
pub fn host_xcr0() -> Option<XfeatureMask> {
    xstate::native::host_xcr0().ok()
}

#[cfg(not(target_arch = "x86_64"))]
pub fn host_xcr0() -> Option<XfeatureMask> {
    None
}

/// CPUID leaf 7 subleaf 1 of the running CPU, where leaf 7 reports it.
#[cfg(target_arch = "x86_64")]
fn host_leaf_7_1() -> Option<CpuidEntry> {
    use xstate::info::cpuid;
    if cpuid(0, 0).eax < 7 {
        return None;
    }
    // 7.0 EAX is the highest subleaf of leaf 7.
    if cpuid(7, 0).eax < 1 {
        return None;
    }
    Some(CpuidEntry::new(1, cpuid(7, 1)))
}

#[cfg(not(target_arch = "x86_64"))]
fn host_leaf_7_1() -> Option<CpuidEntry> {
    None
}

fn kvm_entry(cpuid: &kvm_bindings::CpuId, leaf: u32, subleaf: u32) -> Option<CpuidEntry> {
    crate::cpuid::entry(cpuid, leaf, subleaf)
        .map(|e| CpuidEntry::new(subleaf, CpuidRegs::new(e.eax, e.ebx, e.ecx, e.edx)))
}

fn proc_text(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Records the running host: its CPU (leaves 0xD, 1, 7), XGETBV(0) and, when
/// `/dev/kvm` opens, KVM's supported leaves. `kvm_error` says why KVM is
/// missing from the profile.
pub fn record_host(
    microarchitecture: Option<&str>,
) -> Result<(HostProfile, Option<String>), FeaturesError> {
    let mut profile = CpuidProfile::host().map_err(|e| FeaturesError::Host(e.to_string()))?;
    if let Some(m) = microarchitecture {
        profile.microarchitecture = m.to_string();
    }
    let host = proc_text("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown host".into());
    let kernel = proc_text("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown kernel".into());
    profile.source = format!("recorded by `vmm features save` on {host} (Linux {kernel})");
    let mut extras = ProfileExtras {
        xcr0_enabled: host_xcr0().map(|m| HexMask(m.bits())),
        leaf_7_1: host_leaf_7_1(),
        recorded_by: Some(format!(
            "vmm {} on {host}, Linux {kernel}",
            env!("CARGO_PKG_VERSION")
        )),
        ..Default::default()
    };
    let mut kvm_error = None;
    match crate::kvm::HostKvm::open() {
        Ok(kvm) => {
            profile.kvm_leaf_0xd = Some(CpuidProfile::entries_of(&kvm.xstate.info));
            extras.kvm_leaf_1 = kvm_entry(&kvm.supported_cpuid, 1, 0);
            extras.kvm_leaf_7 = kvm_entry(&kvm.supported_cpuid, 7, 0);
            extras.kvm_leaf_7_1 = kvm_entry(&kvm.supported_cpuid, 7, 1);
        }
        Err(e) => kvm_error = Some(e.to_string()),
    }
    let text = SavedProfile {
        profile: &profile,
        extras: &extras,
    };
    let json = serde_json::to_string(&text).map_err(|e| FeaturesError::Host(e.to_string()))?;
    // Check what was recorded exactly as a reader will.
    let parsed = HostProfile::parse(&PathBuf::from("(this host)"), &json)?;
    Ok((
        HostProfile {
            file: "this host".into(),
            ..parsed
        },
        kvm_error,
    ))
}

/// Writes a recorded profile to `path` as every file `vmm` writes
/// (`crate::output::write_atomic`): an existing regular file only with
/// `force`, never through a symlink or into a device or FIFO, atomically.
pub fn write_new(path: &Path, json: &str, force: bool) -> Result<(), FeaturesError> {
    // write_atomic checks the destination itself (check_new is for callers
    // that refuse before their work).
    crate::output::write_atomic(path, force, json.as_bytes())
        .map(|_| ())
        .map_err(|e| refused(path, e))
}

/// Refuse a destination [`write_new`] would refuse, before any work.
pub fn check_new(path: &Path, force: bool) -> Result<(), FeaturesError> {
    crate::output::check(path, force)
        .map(|_| ())
        .map_err(|e| refused(path, e))
}

/// What the writer refused, said as it is: an existing file without
/// `--force` too, as every other writer of `vmm` says it (the command line
/// is fine; the file system holds something in the way).
fn refused(path: &Path, e: crate::output::WriteError) -> FeaturesError {
    FeaturesError::Output {
        path: path.to_path_buf(),
        source: e,
    }
}

/// A recorded CPUID dump of `xstate/tests/data`, for the crate's unit
/// tests.
#[cfg(test)]
pub(crate) fn recorded_dump(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../xstate/tests/data")
        .join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::recorded_dump as data;

    #[test]
    fn loads_every_recorded_cpu() {
        for (f, xcr0, xss) in [
            ("intel-sapphire-rapids.json", 0x602e7, 0xdd00),
            ("intel-ice-lake-client.json", 0x2e7, 0x2100),
            ("amd-zen3-milan.json", 0x207, 0x1800),
            ("amd-zen3-kvm-guest.json", 0x7, 0x1800),
        ] {
            let p = HostProfile::load(&data(f)).unwrap();
            assert_eq!(p.cpu.supported_xcr0().bits(), xcr0, "{f}");
            assert_eq!(p.cpu.supported_xss().bits(), xss, "{f}");
            assert!(p.kvm.is_none());
            assert!(p.os_xcr0.is_none());
        }
    }

    #[test]
    fn extras_round_trip() {
        let mut p = HostProfile::load(&data("amd-zen3-milan.json")).unwrap();
        p.extras.xcr0_enabled = Some(HexMask(0x207));
        p.extras.leaf_7_1 = Some(CpuidEntry::new(1, CpuidRegs::new(0x10, 0, 0, 0)));
        p.profile.kvm_leaf_0xd = Some(CpuidProfile::entries_of(&p.cpu));
        let q = HostProfile::parse(Path::new("x.json"), &p.to_json()).unwrap();
        assert_eq!(q.extras, p.extras);
        assert_eq!(q.profile, p.profile);
        assert_eq!(q.os_xcr0, Some(XfeatureMask::from_bits(0x207)));
        assert_eq!(q.kvm, Some(p.cpu));
        // The plain format still reads it.
        CpuidProfile::from_json(&p.to_json()).unwrap();
    }

    fn edit(f: impl FnOnce(&mut serde_json::Value)) -> String {
        let text = std::fs::read_to_string(data("amd-zen3-milan.json")).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        f(&mut v);
        v.to_string()
    }

    fn err(text: &str) -> String {
        HostProfile::parse(Path::new("bad.json"), text)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn rejects_bad_profiles_naming_the_file() {
        let e = err("{");
        assert!(e.starts_with("profile bad.json: "), "{e}");
        // Maximum size larger than the components need.
        let e = err(&edit(|v| v["leaf_0xd"][0]["ecx"] = "0x00000a00".into()));
        assert!(e.contains("bad.json") && e.contains("0xD.0 ECX"), "{e}");
        // A wrong architectural size.
        let e = err(&edit(|v| {
            let l = v["leaf_0xd"].as_array_mut().unwrap();
            let avx = l.iter_mut().find(|e| e["subleaf"] == 2).unwrap();
            avx["eax"] = "0x00000080".into();
        }));
        assert!(e.contains("avx has size 128"), "{e}");
        let e = err(&edit(|v| v["xcr0_enabled"] = "0x1f".into()));
        assert!(e.contains("xcr0_enabled 0x1f"), "{e}");
        let e = err(&edit(|v| v["xcr0_enabled"] = "7".into()));
        assert!(e.contains("0x-prefixed"), "{e}");
        for bad in ["0x+207", "0x", " 0x207", "0x1_0", "0x10000000000000000"] {
            let e = err(&edit(|v| v["xcr0_enabled"] = bad.into()));
            assert!(
                e.contains("is not a 0x-prefixed 64-bit hex number"),
                "{bad}: {e}"
            );
        }
        let e = err(&edit(|v| v["leaf_0xd"][0]["eax"] = "0x+207".into()));
        assert!(
            e.contains("register value \"0x+207\" is not a 32-bit hex number"),
            "{e}"
        );
    }

    #[test]
    fn rejects_control_characters_naming_the_field() {
        for field in [
            "name",
            "microarchitecture",
            "vendor",
            "source",
            "recorded_by",
        ] {
            let e = err(&edit(|v| v[field] = "x\u{1b}]0;pwned\u{7}".into()));
            assert!(
                e.starts_with("profile bad.json: CPUID profile: field `")
                    && e.contains(&format!(
                        "`{field}` contains control character U+001B at byte 1"
                    )),
                "{field}: {e}"
            );
        }
    }

    #[test]
    fn load_refuses_what_is_not_a_small_file_or_pipe() {
        let e = HostProfile::load(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "profile /dev/zero is a character device, not a regular file or a pipe"
        );
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.json");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_PROFILE_BYTES + 1)
            .unwrap();
        let e = HostProfile::load(&big).unwrap_err().to_string();
        assert!(
            e.ends_with("is 1048577 bytes; the limit is 1048576 bytes"),
            "{e}"
        );
        let bin = dir.path().join("bin.json");
        std::fs::write(&bin, b"{\"name\": \"\xff\"}").unwrap();
        let e = HostProfile::load(&bin).unwrap_err().to_string();
        assert!(e.contains("not UTF-8 text"), "{e}");
    }

    #[test]
    fn rejects_unknown_components() {
        let e = err(&edit(|v| {
            v["leaf_0xd"][0]["eax"] = "0x00100207".into();
            v["leaf_0xd"][0]["ecx"] = "0x00000a08".into();
            v["leaf_0xd"].as_array_mut().unwrap().push(
                serde_json::json!({"subleaf": 20, "eax": "0x00000080", "ebx": "0x00000988",
                    "ecx": "0x00000000", "edx": "0x00000000"}),
            );
        }));
        assert!(e.contains("unknown state component bit(s) 20"), "{e}");
    }
}
