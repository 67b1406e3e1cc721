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
/// file. A missing file whose name looks like a profile name (no `/`, no
/// `.json`) is reported with the bundled names.
pub fn load(arg: &Path) -> Result<HostProfile, FeaturesError> {
    if let Some(b) = arg.to_str().and_then(find) {
        return b.load();
    }
    if !arg.exists() {
        let s = arg.to_string_lossy();
        if !s.contains('/') && !s.ends_with(".json") {
            return Err(FeaturesError::UnknownProfile(s.into_owned()));
        }
    }
    HostProfile::load(arg)
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
