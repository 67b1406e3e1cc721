//! [`CpuidProfile`]: a recorded CPUID leaf 0xD (and optionally leaves 1 and 7,
//! and what KVM offers) in the JSON format of `xstate/tests/data/*.json`,
//! read and written with serde. Register values are hex strings (`"0x000602e7"`).

use std::fmt;
use std::string::String;
use std::vec::Vec;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::info::{CpuidRegs, InfoError, XsaveInfo};

/// A 32-bit register value written as a `0x`-prefixed, 8-digit hex string.
///
/// Read with [`parse_hex`]: `0x` (or `0X`) followed by 1 to 8 hex digits,
/// nothing else (no sign, no spaces, no `_`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Hex32(pub u32);

impl Serialize for Hex32 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:#010x}", self.0))
    }
}

impl<'de> Deserialize<'de> for Hex32 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_hex(&s, 8).map(|v| Hex32(v as u32)).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "register value {s:?} is not a 32-bit hex number: 0x-prefixed, 1 to 8 hex digits"
            ))
        })
    }
}

/// A hex number in the profile format's one grammar: `0x` or `0X`, then 1
/// to `max_digits` (at most 16) ASCII hex digits, and nothing else: no
/// sign (Rust's `from_str_radix` alone would take `0x+100`), no spaces, no
/// `_`. `None` for anything else.
///
/// # Examples
/// ```
/// use xstate::profile::parse_hex;
/// assert_eq!(parse_hex("0x000602e7", 8), Some(0x602e7));
/// assert_eq!(parse_hex("0x+100", 8), None);
/// assert_eq!(parse_hex("0x123456789", 8), None); // 9 digits for a 32-bit register
/// ```
pub fn parse_hex(s: &str, max_digits: usize) -> Option<u64> {
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    if digits.is_empty()
        || digits.len() > max_digits.min(16)
        || !digits.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// Whether `c` must not reach a terminal from a profile: a control
/// character (Unicode `Cc`: C0, DEL, C1 — escape sequences start with ESC
/// or CSI) or a bidirectional override or isolate, which reorders what is
/// shown around it.
pub fn is_unsafe_text_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Refuse a free-text field holding a character [`is_unsafe_text_char`]
/// names, saying which field, which character and where.
///
/// # Errors
/// [`ProfileError::Text`] with the byte offset and code point of the first
/// such character.
///
/// # Examples
/// ```
/// use xstate::profile::{check_text, ProfileError};
/// assert_eq!(check_text("name", "AMD EPYC 7763 64-Core Processor"), Ok(()));
/// // An ANSI escape in a brand string a hypervisor chose.
/// assert_eq!(
///     check_text("name", "EPYC\u{1b}[2J"),
///     Err(ProfileError::Text { field: "name", offset: 4, code: 0x1b })
/// );
/// ```
pub fn check_text(field: &'static str, text: &str) -> Result<(), ProfileError> {
    match text.char_indices().find(|&(_, c)| is_unsafe_text_char(c)) {
        Some((offset, c)) => Err(ProfileError::Text {
            field,
            offset,
            code: c as u32,
        }),
        None => Ok(()),
    }
}

/// One CPUID subleaf as recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuidEntry {
    /// Subleaf (ECX input).
    pub subleaf: u32,
    /// EAX.
    pub eax: Hex32,
    /// EBX.
    pub ebx: Hex32,
    /// ECX.
    pub ecx: Hex32,
    /// EDX.
    pub edx: Hex32,
}

impl CpuidEntry {
    /// Builds an entry from raw registers.
    pub fn new(subleaf: u32, r: CpuidRegs) -> Self {
        Self {
            subleaf,
            eax: Hex32(r.eax),
            ebx: Hex32(r.ebx),
            ecx: Hex32(r.ecx),
            edx: Hex32(r.edx),
        }
    }

    /// The raw registers.
    pub fn regs(&self) -> CpuidRegs {
        CpuidRegs::new(self.eax.0, self.ebx.0, self.ecx.0, self.edx.0)
    }
}

/// A recorded CPU: identification plus its CPUID leaf 0xD.
///
/// # Examples
/// ```
/// use xstate::{CpuidProfile, Format, XfeatureMask};
/// // A Zen 3 KVM guest's leaf 0xD (tests/data/amd-zen3-kvm-guest.json, cut).
/// let json = r#"{
///   "name": "AMD EPYC vCPU", "microarchitecture": "Zen 3 (Milan), KVM guest",
///   "vendor": "AuthenticAMD", "signature": "0x00a00f11", "bare_metal": false,
///   "source": "cpuid -1 -r -l 0xd inside the guest",
///   "leaf_0xd": [
///     { "subleaf": 0, "eax": "0x7", "ebx": "0x340", "ecx": "0x340", "edx": "0x0" },
///     { "subleaf": 1, "eax": "0xf", "ebx": "0x340", "ecx": "0x0", "edx": "0x0" },
///     { "subleaf": 2, "eax": "0x100", "ebx": "0x240", "ecx": "0x0", "edx": "0x0" }
///   ]
/// }"#;
/// let profile = CpuidProfile::from_json(json)?;
/// let info = profile.xsave_info()?;
/// assert_eq!(info.supported_xcr0(), XfeatureMask::AVX);
/// assert_eq!(info.layout(XfeatureMask::AVX, Format::Standard)?.total_size(), 832);
/// // Written back in the format of tests/data, 8-digit registers.
/// assert!(profile.to_json().contains(r#""eax": "0x00000100""#));
/// assert_eq!(CpuidProfile::from_json(&profile.to_json())?, profile);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuidProfile {
    /// Brand string or other human name.
    pub name: String,
    /// Microarchitecture, e.g. "Zen 3 (Milan)".
    pub microarchitecture: String,
    /// CPUID.0 vendor string ("GenuineIntel", "AuthenticAMD").
    pub vendor: String,
    /// CPUID.1:EAX (family/model/stepping).
    pub signature: Hex32,
    /// False if recorded inside a virtual machine.
    pub bare_metal: bool,
    /// Where the numbers come from.
    pub source: String,
    /// Subleaves of leaf 0xD: 0, 1 and every supported component.
    pub leaf_0xd: Vec<CpuidEntry>,
    /// CPUID leaf 1 (subleaf 0), if recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_1: Option<CpuidEntry>,
    /// CPUID leaf 7 subleaf 0, if recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_7: Option<CpuidEntry>,
    /// Leaf 0xD as KVM_GET_SUPPORTED_CPUID reports it on this host, if recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_leaf_0xd: Option<Vec<CpuidEntry>>,
}

impl CpuidProfile {
    /// Parses a profile and checks that its leaf 0xD forms a valid
    /// [`XsaveInfo`] (as does `kvm_leaf_0xd`, when present).
    ///
    /// # Errors
    /// - [`ProfileError::Json`]: not JSON, a missing or unknown field, or a
    ///   register that is no `0x`-prefixed hex number of 1 to 8 digits;
    /// - [`ProfileError::Text`]: `name`, `microarchitecture`, `vendor` or
    ///   `source` holds a control or bidirectional-override character;
    /// - [`ProfileError::Info`] with `field` `"leaf_0xd"`, then
    ///   `"kvm_leaf_0xd"`: those entries fail [`CpuidProfile::xsave_info`].
    ///
    /// See [`CpuidProfile`] for an example.
    pub fn from_json(s: &str) -> Result<Self, ProfileError> {
        let p: Self = serde_json::from_str(s).map_err(|e| ProfileError::Json(e.to_string()))?;
        // Free text is printed: no control characters may reach a terminal.
        for (field, text) in [
            ("name", &p.name),
            ("microarchitecture", &p.microarchitecture),
            ("vendor", &p.vendor),
            ("source", &p.source),
        ] {
            check_text(field, text)?;
        }
        p.xsave_info().map_err(|error| ProfileError::Info {
            field: "leaf_0xd",
            error,
        })?;
        if let Some(Err(error)) = p.kvm_xsave_info() {
            return Err(ProfileError::Info {
                field: "kvm_leaf_0xd",
                error,
            });
        }
        Ok(p)
    }

    /// Pretty-printed JSON in the format of `tests/data` (newline-terminated).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self)
            .unwrap_or_else(|e| unreachable!("profile serialisation cannot fail: {e}"));
        s.push('\n');
        s
    }

    /// The enumeration in `leaf_0xd`.
    ///
    /// # Errors
    /// - [`InfoError::SubleafOutOfRange`]: an entry's subleaf is 64 or more;
    /// - [`InfoError::DuplicateSubleaf`]: a subleaf is listed twice;
    /// - [`InfoError::MissingSubleaf`]: subleaf 0 or 1 is not listed;
    /// - any error of [`XsaveInfo::from_raw`] on the listed registers;
    /// - [`InfoError::UnsupportedSubleafData`]: a subleaf above 1 has data
    ///   but its component is not in the supported XCR0 or IA32_XSS.
    ///
    /// See [`CpuidProfile`] for an example.
    pub fn xsave_info(&self) -> Result<XsaveInfo, InfoError> {
        info_from_entries(&self.leaf_0xd)
    }

    /// The enumeration in `kvm_leaf_0xd`, if recorded.
    ///
    /// # Errors
    /// `Some(Err(_))` with the errors of [`CpuidProfile::xsave_info`] on the
    /// `kvm_leaf_0xd` entries; `None` when they are not recorded.
    pub fn kvm_xsave_info(&self) -> Option<Result<XsaveInfo, InfoError>> {
        self.kvm_leaf_0xd.as_deref().map(info_from_entries)
    }

    /// Entries for every informative subleaf of `info` (0, 1 and each
    /// supported component), as stored in `leaf_0xd`.
    pub fn entries_of(info: &XsaveInfo) -> Vec<CpuidEntry> {
        info.subleaves()
            .map(|(i, r)| CpuidEntry::new(i, r))
            .collect()
    }

    /// A profile of the running CPU: brand string, vendor, signature,
    /// hypervisor bit, leaves 1, 7 and 0xD. `microarchitecture` is left for
    /// the caller (CPUID does not name it).
    ///
    /// # Errors
    /// [`ProfileError::Host`] with the error of `XsaveInfo::host`:
    /// [`InfoError::NoXsave`] without XSAVE, or an inconsistent leaf 0xD.
    ///
    /// # Examples
    /// ```
    /// use xstate::CpuidProfile;
    /// let me = CpuidProfile::host()?;
    /// assert!(me.leaf_1.is_some());
    /// // Recorded: subleaves 0, 1 and one per supported component.
    /// let info = me.xsave_info()?;
    /// let components = info.supported_all().iter_indices().filter(|&i| i >= 2).count();
    /// assert_eq!(me.leaf_0xd.len(), 2 + components);
    /// // The record reads back as it was written.
    /// assert_eq!(CpuidProfile::from_json(&me.to_json())?, me);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(all(feature = "native", target_arch = "x86_64"))]
    pub fn host() -> Result<Self, ProfileError> {
        use crate::info::{cpuid, leaf_1_ecx};
        let info = XsaveInfo::host()?;
        let l0 = cpuid(0, 0);
        let l1 = cpuid(1, 0);
        let l7 = (l0.eax >= 7).then(|| cpuid(7, 0));
        let mut vendor = Vec::with_capacity(12);
        for r in [l0.ebx, l0.edx, l0.ecx] {
            vendor.extend_from_slice(&r.to_le_bytes());
        }
        let max_ext = cpuid(0x8000_0000, 0).eax;
        let mut brand = Vec::with_capacity(48);
        if max_ext >= 0x8000_0004 {
            for leaf in 0x8000_0002u32..=0x8000_0004 {
                let r = cpuid(leaf, 0);
                for v in [r.eax, r.ebx, r.ecx, r.edx] {
                    brand.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        // A hypervisor chooses these bytes: characters a profile may not
        // hold become U+FFFD, so what is recorded can be read back.
        let printable = |s: &str| -> String {
            s.chars()
                .map(|c| {
                    if is_unsafe_text_char(c) {
                        '\u{fffd}'
                    } else {
                        c
                    }
                })
                .collect()
        };
        let brand = printable(
            String::from_utf8_lossy(&brand).trim_matches(|c: char| c == '\0' || c.is_whitespace()),
        );
        let e = |r: CpuidRegs| CpuidEntry::new(0, r);
        Ok(Self {
            name: brand,
            microarchitecture: String::new(),
            vendor: printable(&String::from_utf8_lossy(&vendor)),
            signature: Hex32(l1.eax),
            bare_metal: l1.ecx & leaf_1_ecx::HYPERVISOR == 0,
            source: "recorded on the running CPU by the xstate crate".into(),
            leaf_0xd: Self::entries_of(&info),
            leaf_1: Some(e(l1)),
            leaf_7: l7.map(e),
            kvm_leaf_0xd: None,
        })
    }
}

fn info_from_entries(entries: &[CpuidEntry]) -> Result<XsaveInfo, InfoError> {
    let mut raw = [CpuidRegs::default(); 64];
    let mut seen = 0u64;
    for e in entries {
        if e.subleaf >= 64 {
            return Err(InfoError::SubleafOutOfRange(e.subleaf));
        }
        if seen & (1 << e.subleaf) != 0 {
            return Err(InfoError::DuplicateSubleaf(e.subleaf));
        }
        seen |= 1 << e.subleaf;
        raw[e.subleaf as usize] = e.regs();
    }
    for i in [0u32, 1] {
        if seen & (1 << i) == 0 {
            return Err(InfoError::MissingSubleaf(i));
        }
    }
    let info = XsaveInfo::from_raw(raw)?;
    // Data for a subleaf whose component is not enumerated is inconsistent.
    for i in 2..64u32 {
        if !info.supported_all().contains_index(i) && !raw[i as usize].is_zero() {
            return Err(InfoError::UnsupportedSubleafData(i));
        }
    }
    Ok(info)
}

/// Why a profile was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProfileError {
    /// Not valid JSON, a missing field, or a bad hex string (serde's message,
    /// with line and column).
    Json(String),
    /// The leaf 0xD data is inconsistent.
    Info {
        /// Field holding the entries.
        field: &'static str,
        /// What is wrong.
        error: InfoError,
    },
    /// Reading the host's CPUID failed.
    Host(InfoError),
    /// A free-text field holds a control or bidirectional-override
    /// character (see [`is_unsafe_text_char`]).
    Text {
        /// The field.
        field: &'static str,
        /// Byte offset of the character in the field.
        offset: usize,
        /// The character's code point.
        code: u32,
    },
}

impl From<InfoError> for ProfileError {
    fn from(e: InfoError) -> Self {
        ProfileError::Host(e)
    }
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::Json(e) => write!(f, "CPUID profile: {e}"),
            ProfileError::Info { field, error } => write!(f, "CPUID profile: {field}: {error}"),
            ProfileError::Host(e) => write!(f, "CPUID profile of the host: {e}"),
            ProfileError::Text {
                field,
                offset,
                code,
            } => write!(
                f,
                "CPUID profile: field `{field}` contains control character U+{code:04X} at \
                 byte {offset}; profile text may not hold control characters"
            ),
        }
    }
}

impl std::error::Error for ProfileError {}
