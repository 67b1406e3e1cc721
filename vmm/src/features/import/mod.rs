//! CPUID dumps in the formats people already have, read into our profile
//! format: a fleet's CPUs are described by whatever tool was at hand, so
//! `vmm features --profile FILE` and `vmm features compare` take them all,
//! told apart by content ([`detect`]), and refuse anything else by name.
//!
//! | [`Format`] | what it looks like | where it comes from |
//! |------------|--------------------|---------------------|
//! | `profile` | JSON with `leaf_0xd` | `vmm features save`, `profiles/*.json` |
//! | `cpuid-raw` | `   0x0000000d 0x01: eax=0x0000000f ebx=...` | Debian's `cpuid -r` (or `cpuid -1 -r`) |
//! | `instlatx64` | `CPUID 0000000D: 000602E7-00002B00-00002B00-00000000 [SL 00]` | the InstLatx64 `*_CPUID.txt` dumps (AIDA64 format) |
//! | `firecracker` | JSON with `cpuid_modifiers` whose bitmaps are all `0`/`1` | Firecracker's `cpu-template-helper template dump` |
//!
//! The dumps hold every logical CPU; the first one (CPU 0) is read. Each
//! importer yields the raw leaves ([`RawCpuid`]); [`RawCpuid::to_profile`]
//! turns them into a profile (identification from leaves 0, 1 and
//! 0x80000002-4; leaf 0xD subleaves 0, 1 and every enumerated component;
//! leaves 1, 7.0 and 7.1 where present), which is then checked exactly as a
//! profile file is ([`HostProfile::parse`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use xstate::profile::{CpuidEntry, CpuidProfile, Hex32};
use xstate::CpuidRegs;

use super::error::FeaturesError;
use super::profile::{HostProfile, ProfileExtras};

/// The largest file read as a CPUID dump: InstLatx64 dumps of many-core
/// servers repeat every leaf per logical CPU and reach several MiB.
pub const MAX_IMPORT_BYTES: u64 = 16 << 20;

/// A recognised input format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Our own profile JSON (`leaf_0xd`).
    Profile,
    /// Debian's `cpuid -r` raw output.
    CpuidRaw,
    /// An InstLatx64 / AIDA64 CPUID dump.
    InstLatx64,
    /// Firecracker `cpu-template-helper template dump` JSON.
    Firecracker,
}

impl Format {
    /// The name used in messages and `source` fields.
    pub fn name(self) -> &'static str {
        match self {
            Format::Profile => "profile",
            Format::CpuidRaw => "cpuid-raw",
            Format::InstLatx64 => "instlatx64",
            Format::Firecracker => "firecracker",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What [`detect`] says when nothing matches (also the hint of the error).
pub const KNOWN_FORMATS: &str = "not a recognised CPUID format: expected a vmm profile (JSON \
with leaf_0xd), `cpuid -r` output, an InstLatx64 CPUID dump (`CPUID 0000000D: ...` lines) or \
a Firecracker `cpu-template-helper template dump` (JSON with cpuid_modifiers)";

/// Which format `text` is in, from its content alone; `None` when it is
/// none of them.
pub fn detect(text: &str) -> Option<Format> {
    let start = text.trim_start();
    // Empty or broken JSON: the profile parser says where it ends or breaks.
    if start.is_empty() {
        return Some(Format::Profile);
    }
    if start.starts_with('{') {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(start) else {
            // JSON that does not parse (broken, a number out of range,
            // nested past the parser's limit): named by the key only one
            // format has, so its own parser says what is wrong with it.
            if start.contains("\"cpuid_modifiers\"") && !start.contains("\"leaf_0xd\"") {
                return Some(Format::Firecracker);
            }
            return Some(Format::Profile);
        };
        let o = v.as_object()?;
        if o.contains_key("leaf_0xd") {
            return Some(Format::Profile);
        }
        if o.contains_key("cpuid_modifiers") {
            return Some(Format::Firecracker);
        }
        return None;
    }
    // By each format's line head, so that a malformed line is then
    // reported by the format's parser rather than as an unknown file.
    for line in text.lines() {
        if is_cpuid_raw_head(line) {
            return Some(Format::CpuidRaw);
        }
        if is_instlatx64_head(line) {
            return Some(Format::InstLatx64);
        }
    }
    None
}

/// `0xLLLLLLLL 0xSS:` at the start of a `cpuid -r` line.
fn is_cpuid_raw_head(line: &str) -> bool {
    let Some((head, _)) = line.trim().split_once(':') else {
        return false;
    };
    let mut h = head.split_whitespace();
    let hex = |s: Option<&str>, n: usize| {
        s.and_then(|s| s.strip_prefix("0x"))
            .is_some_and(|d| d.len() == n && hex32(d).is_some())
    };
    hex(h.next(), 8) && hex(h.next(), 2) && h.next().is_none()
}

/// `CPUID LLLLLLLL:` at the start of an InstLatx64 leaf line.
fn is_instlatx64_head(line: &str) -> bool {
    line.trim()
        .strip_prefix("CPUID ")
        .and_then(|r| r.split_once(':'))
        .is_some_and(|(l, _)| l.len() == 8 && hex32(l).is_some())
}

/// Raw CPUID leaves of one logical CPU, by (leaf, subleaf).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawCpuid {
    /// The registers of each recorded (leaf, subleaf).
    pub leaves: BTreeMap<(u32, u32), CpuidRegs>,
}

/// Why a dump cannot be read (the caller adds the file name).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// Nothing in the input looks like any known format.
    #[error("{KNOWN_FORMATS}")]
    Unrecognised,
    /// A line of the detected format is malformed.
    #[error("{format} line {line}: {reason}")]
    Line {
        /// The format.
        format: Format,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The same (leaf, subleaf) twice with different values for one CPU.
    #[error("{format}: CPUID {leaf:#x}.{subleaf:#x} recorded twice with different values")]
    Conflict {
        /// The format.
        format: Format,
        /// Leaf.
        leaf: u32,
        /// Subleaf.
        subleaf: u32,
    },
    /// The Firecracker JSON does not have the template shape.
    #[error("firecracker: {0}")]
    Firecracker(String),
    /// A leaf the profile needs is missing.
    #[error("{format}: CPUID {what} is not in the dump; a profile needs it")]
    Missing {
        /// The format.
        format: Format,
        /// Which leaf.
        what: String,
    },
}

impl RawCpuid {
    fn insert(
        &mut self,
        format: Format,
        leaf: u32,
        subleaf: u32,
        r: CpuidRegs,
    ) -> Result<(), ImportError> {
        match self.leaves.insert((leaf, subleaf), r) {
            Some(old) if old != r => Err(ImportError::Conflict {
                format,
                leaf,
                subleaf,
            }),
            _ => Ok(()),
        }
    }

    /// One leaf, if recorded.
    pub fn get(&self, leaf: u32, subleaf: u32) -> Option<CpuidRegs> {
        self.leaves.get(&(leaf, subleaf)).copied()
    }

    /// The profile these leaves describe: `source` says where they come
    /// from; the microarchitecture is left empty (CPUID does not name it).
    pub fn to_profile(
        &self,
        format: Format,
        source: String,
    ) -> Result<(CpuidProfile, ProfileExtras), ImportError> {
        let missing = |what: &str| ImportError::Missing {
            format,
            what: what.to_string(),
        };
        let l0 = self.get(0, 0).ok_or_else(|| missing("leaf 0 (vendor)"))?;
        let l1 = self.get(1, 0).ok_or_else(|| missing("leaf 1"))?;
        let d0 = self
            .get(0xd, 0)
            .ok_or_else(|| missing("leaf 0xD subleaf 0"))?;
        let d1 = self
            .get(0xd, 1)
            .ok_or_else(|| missing("leaf 0xD subleaf 1"))?;
        let mut vendor = Vec::with_capacity(12);
        for r in [l0.ebx, l0.edx, l0.ecx] {
            vendor.extend_from_slice(&r.to_le_bytes());
        }
        let mut brand = Vec::with_capacity(48);
        for leaf in 0x8000_0002u32..=0x8000_0004 {
            if let Some(r) = self.get(leaf, 0) {
                for v in [r.eax, r.ebx, r.ecx, r.edx] {
                    brand.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        let text = |b: &[u8]| -> String {
            String::from_utf8_lossy(b)
                .chars()
                .filter(|c| !xstate::profile::is_unsafe_text_char(*c))
                .collect::<String>()
                .trim()
                .to_string()
        };
        let supported = (u64::from(d0.edx) << 32 | u64::from(d0.eax))
            | (u64::from(d1.edx) << 32 | u64::from(d1.ecx));
        let mut leaf_0xd = vec![CpuidEntry::new(0, d0), CpuidEntry::new(1, d1)];
        for i in 2..64u32 {
            if supported & (1 << i) != 0 {
                let r = self
                    .get(0xd, i)
                    .ok_or_else(|| missing(&format!("leaf 0xD subleaf {i:#x}")))?;
                leaf_0xd.push(CpuidEntry::new(i, r));
            }
        }
        let max_basic = l0.eax;
        let entry = |leaf: u32, sub: u32| {
            (max_basic >= leaf)
                .then(|| self.get(leaf, sub))
                .flatten()
                .map(|r| CpuidEntry::new(sub, r))
        };
        let leaf_7 = entry(7, 0);
        let leaf_7_1 = leaf_7.filter(|l7| l7.eax.0 >= 1).and_then(|_| entry(7, 1));
        let profile = CpuidProfile {
            name: text(&brand),
            microarchitecture: String::new(),
            vendor: text(&vendor),
            signature: Hex32(l1.eax),
            bare_metal: l1.ecx & (1 << 31) == 0,
            source,
            leaf_0xd,
            leaf_1: Some(CpuidEntry::new(0, l1)),
            leaf_7,
            kvm_leaf_0xd: None,
        };
        let extras = ProfileExtras {
            leaf_7_1,
            ..Default::default()
        };
        Ok((profile, extras))
    }
}

fn hex32(s: &str) -> Option<u32> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if s.is_empty() || s.len() > 8 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

/// `   0x0000000d 0x01: eax=0x0000000f ebx=0x00000340 ecx=0x00001800 edx=0x00000000`
fn parse_cpuid_raw_line(line: &str) -> Option<(u32, u32, CpuidRegs)> {
    let (head, regs) = line.trim().split_once(':')?;
    let mut h = head.split_whitespace();
    let leaf = h.next().filter(|s| s.starts_with("0x")).and_then(hex32)?;
    let sub = h.next().filter(|s| s.starts_with("0x")).and_then(hex32)?;
    if h.next().is_some() {
        return None;
    }
    let mut v = [0u32; 4];
    let mut fields = regs.split_whitespace();
    for (i, name) in ["eax=", "ebx=", "ecx=", "edx="].iter().enumerate() {
        let f = fields.next()?.strip_prefix(name)?;
        if !f.starts_with("0x") {
            return None;
        }
        v[i] = hex32(f)?;
    }
    if fields.next().is_some() {
        return None;
    }
    Some((leaf, sub, CpuidRegs::new(v[0], v[1], v[2], v[3])))
}

/// `CPUID 0000000D: 000602E7-00002B00-00002B00-00000000 [SL 00] [x87]`
fn parse_instlatx64_line(line: &str) -> Option<(u32, u32, CpuidRegs)> {
    let rest = line.trim().strip_prefix("CPUID ")?;
    let (leaf, rest) = rest.split_once(':')?;
    if leaf.len() != 8 {
        return None;
    }
    let leaf = hex32(leaf)?;
    let rest = rest.trim_start();
    let regs = rest.get(..35)?;
    let mut v = [0u32; 4];
    let mut parts = regs.split('-');
    for slot in &mut v {
        let p = parts.next()?;
        if p.len() != 8 {
            return None;
        }
        *slot = hex32(p)?;
    }
    let tail = rest[35..].trim_start();
    let sub = match tail.strip_prefix("[SL ") {
        Some(t) => hex32(t.split_once(']')?.0.trim())?,
        None => 0,
    };
    Some((leaf, sub, CpuidRegs::new(v[0], v[1], v[2], v[3])))
}

/// CPU 0 of `cpuid -r` output: lines up to the second `CPU n:` header.
pub fn parse_cpuid_raw(text: &str) -> Result<RawCpuid, ImportError> {
    let f = Format::CpuidRaw;
    let mut raw = RawCpuid::default();
    let mut cpus = 0;
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with("CPU ") && t.ends_with(':') {
            cpus += 1;
            if cpus > 1 {
                break;
            }
            continue;
        }
        if t.is_empty() {
            continue;
        }
        match parse_cpuid_raw_line(t) {
            Some((leaf, sub, r)) => raw.insert(f, leaf, sub, r)?,
            None if is_cpuid_raw_head(t) => {
                return Err(ImportError::Line {
                    format: f,
                    line: n + 1,
                    reason: format!(
                        "{t:?} is not `0xLEAF 0xSUB: eax=0x... ebx=0x... ecx=0x... edx=0x...`"
                    ),
                })
            }
            // Other text (a header, a banner) is not CPUID data.
            None => {}
        }
    }
    Ok(raw)
}

/// CPU 0 of an InstLatx64 dump: lines up to the second leaf 0 line (each
/// logical CPU's block starts with leaf 0, whatever its header says).
pub fn parse_instlatx64(text: &str) -> Result<RawCpuid, ImportError> {
    let f = Format::InstLatx64;
    let mut raw = RawCpuid::default();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        // `CPUID Manufacturer: ...` and other summaries are not leaves.
        if !is_instlatx64_head(t) {
            continue;
        }
        let Some((leaf, sub, r)) = parse_instlatx64_line(t) else {
            return Err(ImportError::Line {
                format: f,
                line: n + 1,
                reason: format!("{t:?} is not `CPUID LLLLLLLL: EAX-EBX-ECX-EDX [SL nn]`"),
            });
        };
        if leaf == 0 && raw.get(0, 0).is_some() {
            break;
        }
        // Older dumps give no `[SL nn]`: a repeated leaf 7 or 0xD line
        // then has no known subleaf, and guessing one could mislabel state.
        if (leaf == 7 || leaf == 0xd) && !t.contains("[SL ") && raw.get(leaf, 0).is_some() {
            return Err(ImportError::Line {
                format: f,
                line: n + 1,
                reason: format!(
                    "leaf {leaf:#x} repeated without a `[SL nn]` subleaf marker; this dump's \
                     subleaves cannot be told apart"
                ),
            });
        }
        if !t.contains("[SL ") && raw.get(leaf, 0).is_some() {
            // Another leaf's unmarked subleaves: not read.
            continue;
        }
        raw.insert(f, leaf, sub, r)?;
    }
    Ok(raw)
}

/// The parts of a Firecracker custom CPU template an import reads.
#[derive(serde::Deserialize)]
struct FcTemplate {
    cpuid_modifiers: Vec<FcLeaf>,
}

#[derive(serde::Deserialize)]
struct FcLeaf {
    leaf: String,
    subleaf: String,
    modifiers: Vec<FcModifier>,
}

#[derive(serde::Deserialize)]
struct FcModifier {
    register: String,
    bitmap: String,
}

/// A Firecracker number: `0x` hex or `0b` binary.
fn fc_number(s: &str) -> Option<u32> {
    if let Some(h) = s.strip_prefix("0x") {
        return hex32(h);
    }
    let b = s.strip_prefix("0b")?;
    let b: String = b.chars().filter(|&c| c != '_').collect();
    if b.is_empty() || b.len() > 32 {
        return None;
    }
    u32::from_str_radix(&b, 2).ok()
}

/// A dump of the CPUID a Firecracker guest gets: every leaf's registers
/// with every bit given (`0`/`1`). A bitmap with `x` is a template, not a
/// dump, and is refused.
pub fn parse_firecracker(text: &str) -> Result<RawCpuid, ImportError> {
    let f = Format::Firecracker;
    let t: FcTemplate = serde_json::from_str(text)
        .map_err(|e| ImportError::Firecracker(format!("not a CPU template: {e}")))?;
    let mut raw = RawCpuid::default();
    for l in &t.cpuid_modifiers {
        let bad = |what: &str, v: &str| {
            ImportError::Firecracker(format!("{what} {v:?} is not a 0x or 0b number"))
        };
        let leaf = fc_number(&l.leaf).ok_or_else(|| bad("leaf", &l.leaf))?;
        let sub = fc_number(&l.subleaf).ok_or_else(|| bad("subleaf", &l.subleaf))?;
        let mut v = [0u32; 4];
        for m in &l.modifiers {
            let i = match m.register.as_str() {
                "eax" => 0,
                "ebx" => 1,
                "ecx" => 2,
                "edx" => 3,
                r => {
                    return Err(ImportError::Firecracker(format!(
                        "leaf {leaf:#x}.{sub:#x}: register {r:?} is not eax, ebx, ecx or edx"
                    )))
                }
            };
            let bits: String = m
                .bitmap
                .strip_prefix("0b")
                .unwrap_or(&m.bitmap)
                .chars()
                .filter(|&c| c != '_')
                .collect();
            if bits.len() != 32 || !bits.bytes().all(|b| b == b'0' || b == b'1') {
                return Err(ImportError::Firecracker(format!(
                    "leaf {leaf:#x}.{sub:#x} {}: bitmap {:?} does not give all 32 bits as 0 or 1 \
                     (a template with `x` bits is not a dump)",
                    m.register, m.bitmap
                )));
            }
            v[i] = u32::from_str_radix(&bits, 2).map_err(|e| {
                ImportError::Firecracker(format!("leaf {leaf:#x}.{sub:#x}: bitmap: {e}"))
            })?;
        }
        raw.insert(f, leaf, sub, CpuidRegs::new(v[0], v[1], v[2], v[3]))?;
    }
    Ok(raw)
}

/// Reads a file in whichever format it is in (a regular file of at most
/// [`MAX_IMPORT_BYTES`], UTF-8): what `--profile FILE` and `compare` use.
pub fn load(path: &Path) -> Result<HostProfile, FeaturesError> {
    HostProfile::load_with(path, MAX_IMPORT_BYTES, parse_any)
}

/// Reads `text` in whichever format it is in: a profile as a profile,
/// any dump converted and then checked as a profile. Every error names
/// `path`.
pub fn parse_any(path: &Path, text: &str) -> Result<HostProfile, FeaturesError> {
    let fail = |e: ImportError| FeaturesError::Profile {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let format = detect(text).ok_or_else(|| fail(ImportError::Unrecognised))?;
    let raw = match format {
        Format::Profile => return HostProfile::parse(path, text),
        Format::CpuidRaw => parse_cpuid_raw(text),
        Format::InstLatx64 => parse_instlatx64(text),
        Format::Firecracker => parse_firecracker(text),
    }
    .map_err(fail)?;
    let source = format!("{} dump {}", format.name(), path.display());
    let (profile, extras) = raw.to_profile(format, source).map_err(fail)?;
    from_parts(path, &profile, &extras)
}

/// A profile built from parts, checked exactly as a profile file.
pub fn from_parts(
    path: &Path,
    profile: &CpuidProfile,
    extras: &ProfileExtras,
) -> Result<HostProfile, FeaturesError> {
    let mut v = serde_json::to_value(profile).map_err(|e| FeaturesError::Profile {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let e = serde_json::to_value(extras).map_err(|e| FeaturesError::Profile {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if let (Some(o), Some(x)) = (v.as_object_mut(), e.as_object()) {
        o.extend(x.clone());
    }
    HostProfile::parse(path, &v.to_string())
}

#[cfg(test)]
mod tests;
