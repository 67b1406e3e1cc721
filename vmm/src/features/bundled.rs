//! CPU profiles shipped inside the `vmm` binary (`profiles/*.json` at the
//! workspace root), so a recorded CPU can be named rather than located:
//! `vmm features --profile sapphire-rapids`, like QEMU's `-cpu help` models.
//!
//! Resolution of a `--profile` / `compare` argument: a bundled profile's
//! name wins; anything else is a file path (write `./NAME` for a file that
//! has a bundled profile's name).

use std::path::Path;

use super::error::FeaturesError;
use super::profile::HostProfile;
use crate::report::table::Columns;

/// One profile compiled into the binary.
#[derive(Clone, Copy, Debug)]
pub struct Bundled {
    /// The name users give (lower-case, no `.json`).
    pub name: &'static str,
    /// The profile JSON, as in `profiles/NAME.json`.
    pub json: &'static str,
}

/// Every bundled profile, in the order `--list-profiles` shows them.
pub const BUNDLED: &[Bundled] = &[
    Bundled {
        name: "sapphire-rapids",
        json: include_str!("../../../profiles/sapphire-rapids.json"),
    },
    Bundled {
        name: "ice-lake-client",
        json: include_str!("../../../profiles/ice-lake-client.json"),
    },
    Bundled {
        name: "zen3-milan",
        json: include_str!("../../../profiles/zen3-milan.json"),
    },
    Bundled {
        name: "zen3-kvm-guest",
        json: include_str!("../../../profiles/zen3-kvm-guest.json"),
    },
    Bundled {
        name: "haswell-ep",
        json: include_str!("../../../profiles/haswell-ep.json"),
    },
    Bundled {
        name: "skylake-sp",
        json: include_str!("../../../profiles/skylake-sp.json"),
    },
    Bundled {
        name: "cascade-lake",
        json: include_str!("../../../profiles/cascade-lake.json"),
    },
    Bundled {
        name: "emerald-rapids",
        json: include_str!("../../../profiles/emerald-rapids.json"),
    },
    Bundled {
        name: "granite-rapids",
        json: include_str!("../../../profiles/granite-rapids.json"),
    },
    Bundled {
        name: "alder-lake",
        json: include_str!("../../../profiles/alder-lake.json"),
    },
    Bundled {
        name: "alder-lake-n",
        json: include_str!("../../../profiles/alder-lake-n.json"),
    },
    Bundled {
        name: "arrow-lake",
        json: include_str!("../../../profiles/arrow-lake.json"),
    },
    Bundled {
        name: "lunar-lake",
        json: include_str!("../../../profiles/lunar-lake.json"),
    },
    Bundled {
        name: "zen1-naples",
        json: include_str!("../../../profiles/zen1-naples.json"),
    },
    Bundled {
        name: "zen4-genoa",
        json: include_str!("../../../profiles/zen4-genoa.json"),
    },
    Bundled {
        name: "zen5-turin",
        json: include_str!("../../../profiles/zen5-turin.json"),
    },
    Bundled {
        name: "ice-lake-sp",
        json: include_str!("../../../profiles/ice-lake-sp.json"),
    },
    Bundled {
        name: "zen2-rome",
        json: include_str!("../../../profiles/zen2-rome.json"),
    },
    Bundled {
        name: "zen2-matisse",
        json: include_str!("../../../profiles/zen2-matisse.json"),
    },
];

/// The bundled profile called `name`, if any.
pub fn find(name: &str) -> Option<&'static Bundled> {
    BUNDLED.iter().find(|b| b.name == name)
}

/// The bundled names, comma-separated (for help and error hints).
pub fn names() -> String {
    BUNDLED
        .iter()
        .map(|b| b.name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Bundled {
    /// Parse it (a bundled profile that does not load is a build defect,
    /// caught by the tests; it is still reported as an error, not a panic).
    pub fn load(&self) -> Result<HostProfile, FeaturesError> {
        HostProfile::parse(Path::new(self.name), self.json)
    }
}

/// A `--profile` or `compare` argument: a bundled profile by name, else a
/// file (`-`: standard input). A missing file whose name looks like a
/// profile name (no `/`, no `.json`) is reported with the bundled names.
pub fn load(arg: &Path) -> Result<HostProfile, FeaturesError> {
    if let Some(b) = arg.to_str().and_then(find) {
        return b.load();
    }
    if !arg.exists() && !crate::input::is_stdin(arg) {
        let s = arg.to_string_lossy();
        if !s.contains('/') && !s.ends_with(".json") {
            return Err(FeaturesError::UnknownProfile(s.into_owned()));
        }
    }
    super::import::load(arg)
}

/// One row of `vmm features --list-profiles`.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ProfileEntry {
    /// The name `--profile` takes.
    pub name: String,
    /// The CPU's brand string.
    pub cpu: String,
    /// Its microarchitecture, as recorded.
    pub microarchitecture: String,
    /// The XCR0 state it supports (hex).
    #[serde(serialize_with = "crate::report::hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xcr0: xstate::XfeatureMask,
    /// The same as component names.
    pub xcr0_names: String,
    /// The IA32_XSS state it supports (hex).
    #[serde(serialize_with = "crate::report::hex::mask")]
    #[schemars(with = "crate::schema::Hex")]
    pub xss: xstate::XfeatureMask,
    /// Whether it was recorded on bare metal (false: inside a VM).
    pub bare_metal: bool,
    /// Where its numbers come from.
    pub source: String,
}

/// The list `vmm features --list-profiles` prints.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ProfileList {
    /// One entry per bundled profile.
    pub profiles: Vec<ProfileEntry>,
}

/// Every bundled profile, loaded.
pub fn list() -> Result<ProfileList, FeaturesError> {
    let profiles = BUNDLED
        .iter()
        .map(|b| {
            let p = b.load()?;
            Ok(ProfileEntry {
                name: b.name.to_string(),
                cpu: p.profile.name.clone(),
                microarchitecture: p.profile.microarchitecture.clone(),
                xcr0: p.cpu.supported_xcr0(),
                xcr0_names: p.cpu.supported_xcr0().to_string(),
                xss: p.cpu.supported_xss(),
                bare_metal: p.profile.bare_metal,
                source: p.profile.source.clone(),
            })
        })
        .collect::<Result<Vec<_>, FeaturesError>>()?;
    Ok(ProfileList { profiles })
}

impl ProfileList {
    /// The human table: name, CPU, XCR0 (hex and names), source.
    pub fn to_table(&self) -> String {
        let rows: Vec<[String; 4]> = self
            .profiles
            .iter()
            .map(|p| {
                [
                    p.name.clone(),
                    p.cpu.clone(),
                    format!("{:#x} {}", p.xcr0, p.xcr0_names),
                    p.source.clone(),
                ]
            })
            .collect();
        let header = ["name", "CPU", "XCR0", "source"].map(String::from);
        let width = |i: usize| {
            rows.iter()
                .chain(std::iter::once(&header))
                .map(|r| r[i].len())
                .max()
                .unwrap_or(0)
        };
        let t = Columns::new()
            .left("", width(0))
            .left("  ", width(1))
            .left("  ", width(2))
            .left("  ", 0);
        let mut out = String::new();
        t.push(&mut out, &header);
        for r in &rows {
            t.push(&mut out, r);
        }
        out.push_str(
            "Use one with `vmm features --profile NAME` or `vmm features compare NAME...`.\n",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// name, vendor, XCR0, IA32_XSS, AVX-512F (leaf 7.0 EBX bit 16).
    const FACTS: &[(&str, &str, u64, u64, bool)] = &[
        ("sapphire-rapids", "GenuineIntel", 0x602e7, 0xdd00, true),
        ("ice-lake-client", "GenuineIntel", 0x2e7, 0x2100, true),
        ("zen3-milan", "AuthenticAMD", 0x207, 0x1800, false),
        ("zen3-kvm-guest", "AuthenticAMD", 0x7, 0x1800, false),
        ("haswell-ep", "GenuineIntel", 0x7, 0x0, false),
        ("skylake-sp", "GenuineIntel", 0x2ff, 0x100, true),
        ("cascade-lake", "GenuineIntel", 0x2ff, 0x100, true),
        ("emerald-rapids", "GenuineIntel", 0x602e7, 0xdd00, true),
        ("granite-rapids", "GenuineIntel", 0x602e7, 0x1dd00, true),
        ("alder-lake", "GenuineIntel", 0x207, 0x19900, false),
        ("alder-lake-n", "GenuineIntel", 0x207, 0x19900, false),
        ("arrow-lake", "GenuineIntel", 0x207, 0xd900, false),
        ("lunar-lake", "GenuineIntel", 0x207, 0x1d900, false),
        ("zen1-naples", "AuthenticAMD", 0x7, 0x0, false),
        ("zen4-genoa", "AuthenticAMD", 0x2e7, 0x1800, true),
        ("zen5-turin", "AuthenticAMD", 0x2e7, 0x1800, true),
        ("ice-lake-sp", "GenuineIntel", 0x2e7, 0x100, true),
        ("zen2-rome", "AuthenticAMD", 0x207, 0x0, false),
        ("zen2-matisse", "AuthenticAMD", 0x207, 0x0, false),
    ];

    #[test]
    fn every_bundled_profile_loads_with_its_known_facts() {
        assert_eq!(FACTS.len(), BUNDLED.len());
        for (b, &(name, vendor, xcr0, xss, avx512f)) in BUNDLED.iter().zip(FACTS) {
            assert_eq!(b.name, name);
            let p = b.load().unwrap();
            assert_eq!(p.profile.vendor, vendor, "{name}");
            assert_eq!(p.cpu.supported_xcr0().bits(), xcr0, "{name} XCR0");
            assert_eq!(p.cpu.supported_xss().bits(), xss, "{name} XSS");
            // The layout obeys the xstate rules: a valid XCR0 and sizes at
            // least the architectural ones (checked on load), and CPUID's AVX-512F
            // agrees with the AVX-512 state components.
            p.cpu
                .supported_xcr0()
                .validate_xcr0(p.cpu.supported_xcr0())
                .unwrap();
            assert_eq!(xcr0 & 0xe0 == 0xe0, avx512f, "{name} AVX-512 state");
            if let Some(l7) = p.profile.leaf_7 {
                assert_eq!(l7.ebx.0 & (1 << 16) != 0, avx512f, "{name} AVX-512F");
            }
            // Every imported profile keeps where it comes from.
            let s = &p.profile.source;
            assert!(
                name == "zen3-kvm-guest"
                    || (s.starts_with("InstLatx64/InstLatx64 ")
                        && s.contains("_CPUID")
                        && s.contains(".txt @ ")),
                "{name}: {s}"
            );
        }
    }

    #[test]
    fn skylake_sp_has_avx512_and_pkru_with_mpx() {
        let p = find("skylake-sp").unwrap().load().unwrap();
        let x = p.cpu.supported_xcr0().bits();
        assert_eq!(x & 0xe7, 0xe7);
        assert_eq!(x & 0x200, 0x200);
        assert_eq!(x, 0x2ff);
        // The hybrid client parts ship with AVX-512 off; AMX only on the
        // Xeons from Sapphire Rapids on.
        for name in ["alder-lake", "alder-lake-n", "arrow-lake", "lunar-lake"] {
            let p = find(name).unwrap().load().unwrap();
            assert_eq!(p.cpu.supported_xcr0().bits() & 0xe0, 0, "{name}");
        }
        for name in ["sapphire-rapids", "emerald-rapids", "granite-rapids"] {
            let p = find(name).unwrap().load().unwrap();
            assert_eq!(p.cpu.supported_xcr0().bits() & 0x60000, 0x60000, "{name}");
        }
    }

    /// Zen 2 enumerates PKRU (0xD.9) with 64 bytes where the register
    /// needs 8, and PKU clear in leaf 7: the profile loads, its layout is
    /// exactly what CPUID says, and the lint notes the oddity without
    /// counting it.
    #[test]
    fn zen2_keeps_its_64_byte_pkru_as_enumerated() {
        use xstate::{Format, Xfeature, XfeatureMask};
        for name in ["zen2-rome", "zen2-matisse"] {
            let p = find(name).unwrap().load().unwrap();
            let pkru = p.cpu.component(Xfeature::Pkru).unwrap();
            assert_eq!((pkru.size, pkru.standard_offset), (64, 832), "{name}");
            let avx = p.cpu.component(Xfeature::Avx).unwrap();
            assert_eq!((avx.size, avx.standard_offset), (256, 576), "{name}");
            assert_eq!(p.cpu.max_standard_size(), 896, "{name}");
            let all = XfeatureMask::from_bits(0x207);
            assert_eq!(p.cpu.standard_size(all).unwrap(), 896, "{name}");
            // Compacted (XSAVEC): AVX right after the header, PKRU after it.
            let c = p.cpu.layout(all, Format::Compacted).unwrap();
            assert_eq!(c.offset(Xfeature::Avx), Some(576), "{name}");
            assert_eq!(c.offset(Xfeature::Pkru), Some(832), "{name}");
            assert_eq!(c.total_size(), 896, "{name}");
            // PKU (7.0 ECX bit 3) is clear: no OS enables the state.
            assert_eq!(p.profile.leaf_7.unwrap().ecx.0 & (1 << 3), 0, "{name}");
            let lint = super::super::lint::lint_profile(&p);
            assert_eq!(lint.violations, 0, "{name}: {}", lint.to_table());
            assert_eq!(lint.exit_code(), 0, "{name}");
            let notes: Vec<_> = lint.sources[0]
                .notes
                .iter()
                .map(|n| (n.rule, n.severity, n.location.as_str()))
                .collect();
            assert_eq!(
                notes,
                [("pku-state-hidden", "info", "CPUID.(0x7,0).ECX[3]")],
                "{name}"
            );
        }
    }

    /// Ice Lake-SP: AVX-512 and PKRU at the Intel standard offsets.
    #[test]
    fn ice_lake_sp_layout_is_exact() {
        use xstate::Xfeature;
        let p = find("ice-lake-sp").unwrap().load().unwrap();
        let at = |f| {
            let c = p.cpu.component(f).unwrap();
            (c.standard_offset, c.size)
        };
        assert_eq!(at(Xfeature::Avx), (576, 256));
        assert_eq!(at(Xfeature::Opmask), (1088, 64));
        assert_eq!(at(Xfeature::ZmmHi256), (1152, 512));
        assert_eq!(at(Xfeature::Hi16Zmm), (1664, 1024));
        assert_eq!(at(Xfeature::Pkru), (2688, 8));
        assert_eq!(p.cpu.max_standard_size(), 2696);
        let lint = super::super::lint::lint_profile(&p);
        assert_eq!(lint.violations, 0, "{}", lint.to_table());
        assert!(lint.sources[0].notes.is_empty());
    }
}
