//! A stock Linux guest as an oracle for the xstate `vmm` gives it: Linux
//! reads CPUID leaf 0xD and XCR0 itself and prints what it made of them on
//! its console (`arch/x86/kernel/fpu/xstate.c`, KERN_INFO, so it needs
//! `loglevel=7` or higher: `loglevel=N` shows the levels below N):
//!
//! ```text
//! x86/fpu: Supporting XSAVE feature 0x001: 'x87 floating point registers'
//! x86/fpu: xstate_offset[2]:  576, xstate_sizes[2]:  256
//! x86/fpu: Enabled xstate features 0x7, context size is 832 bytes, using 'standard' format.
//! ```
//!
//! [`LinuxXstate::parse`] reads those lines from the captured console and
//! [`LinuxXstate::compare`] checks every value against the xstate crate's
//! layout for the policy in force: the features (the policy's XCR0), each
//! component's offset and size in the format Linux chose (standard, or
//! compacted where the guest has XSAVES), the context size and the format
//! itself. Each difference is one sentence naming the field; a run with
//! any ends as a failure (`RunEnd::XstateMismatch`).

use serde::Serialize;
use xstate::{Format, XfeatureMask, XsaveInfo};

/// Most `x86/fpu:` lines kept: Linux prints one per component (at most 64)
/// and a few more; a guest printing more is not believed further.
const MAX_LINES: usize = 160;

/// One `xstate_offset[i]: O, xstate_sizes[i]: S` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct LinuxComponent {
    /// The component's index (2 and up: Linux prints no line for x87/SSE).
    pub index: u32,
    /// Its offset in Linux's buffer, in the format Linux uses.
    pub offset: u32,
    /// Its size.
    pub size: u32,
}

/// What Linux said about its xstate, and how it compares with `vmm`'s.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct LinuxXstate {
    /// Every `x86/fpu:` line, without the timestamp.
    pub lines: Vec<String>,
    /// The features of the `Supporting XSAVE feature 0x...` lines, or'ed.
    #[schemars(with = "crate::schema::Hex")]
    #[serde(serialize_with = "hex")]
    pub supporting: u64,
    /// The `xstate_offset[i]`/`xstate_sizes[i]` lines.
    pub components: Vec<LinuxComponent>,
    /// `Enabled xstate features 0x...` (null without that line).
    #[schemars(with = "Option<crate::schema::Hex>")]
    #[serde(serialize_with = "opt_hex")]
    pub enabled: Option<u64>,
    /// `context size is N bytes`.
    pub context_size: Option<u32>,
    /// `standard` or `compacted`.
    pub format: Option<String>,
    /// Each value that differs from vmm's layout, naming the field; empty
    /// when Linux agrees with vmm everywhere.
    pub mismatches: Vec<String>,
}

fn hex<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#x}"))
}

fn opt_hex<S: serde::Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => hex(v, s),
        None => s.serialize_none(),
    }
}

/// A number as Linux prints it: `0x`-prefixed hex, or decimal.
fn number(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// What starts each line Linux's FPU code prints.
const PREFIX: &str = "x86/fpu: ";

/// `text` between `before` and `after` (after `before`'s first occurrence).
fn between<'a>(text: &'a str, before: &str, after: &str) -> Option<&'a str> {
    let rest = &text[text.find(before)? + before.len()..];
    Some(&rest[..rest.find(after)?])
}

impl LinuxXstate {
    /// The `x86/fpu:` lines of a console capture; `None` when there is none
    /// (not Linux, or a console level that hides KERN_INFO). Lines that do
    /// not parse are kept in [`LinuxXstate::lines`] and named as
    /// mismatches, never a panic.
    pub fn parse(console: &str) -> Option<LinuxXstate> {
        let mut found = LinuxXstate::default();
        for line in console.lines() {
            let Some(at) = line.find(PREFIX) else {
                continue;
            };
            if found.lines.len() == MAX_LINES {
                found.mismatches.push(format!(
                    "more than {MAX_LINES} x86/fpu lines; the rest ignored"
                ));
                break;
            }
            // The values are what follows the prefix, trimmed on their
            // own: a line that ends with the prefix's space has none.
            let text = line[at..].trim_end();
            found.lines.push(text.to_string());
            if !found.take(line[at + PREFIX.len()..].trim_end()) {
                found.mismatches.push(format!("unreadable line {text:?}"));
            }
        }
        (!found.lines.is_empty()).then_some(found)
    }

    /// Take one line's values; false when a line of a known kind does not
    /// parse. Lines of other kinds (`x87 FPU will use FXSAVE`, ...) are kept
    /// as they are.
    fn take(&mut self, text: &str) -> bool {
        if let Some(rest) = text.strip_prefix("Supporting XSAVE feature ") {
            let Some(mask) = rest.split(':').next().and_then(number) else {
                return false;
            };
            self.supporting |= mask;
        } else if text.starts_with("xstate_offset[") {
            let parsed = (|| {
                let index = number(between(text, "xstate_offset[", "]")?)?;
                let offset = number(between(text, "]:", ",")?)?;
                let size_index = number(between(text, "xstate_sizes[", "]")?)?;
                let size = number(text.rsplit(':').next()?)?;
                (index == size_index).then_some(LinuxComponent {
                    index: u32::try_from(index).ok()?,
                    offset: u32::try_from(offset).ok()?,
                    size: u32::try_from(size).ok()?,
                })
            })();
            let Some(c) = parsed else { return false };
            self.components.push(c);
        } else if text.starts_with("Enabled xstate features ") {
            let enabled = between(text, "features ", ",").and_then(number);
            let size = between(text, "context size is ", " bytes").and_then(number);
            let format = between(text, "using '", "'");
            let (Some(enabled), Some(size), Some(format)) = (enabled, size, format) else {
                return false;
            };
            self.enabled = Some(enabled);
            self.context_size = u32::try_from(size).ok();
            self.format = Some(format.to_string());
        }
        true
    }

    /// Compare every value with the layout `info` (the guest's leaf 0xD)
    /// gives the policy's XCR0 `policy`, where the guest has XSAVES
    /// (`xsaves`: Linux then uses the compacted format) or not; the
    /// differences go to [`LinuxXstate::mismatches`].
    pub fn compare(&mut self, info: &XsaveInfo, policy: XfeatureMask, xsaves: bool) {
        let mut out = Vec::new();
        let Some(enabled) = self.enabled else {
            out.push(
                "no \"Enabled xstate features\" line: Linux did not use XSAVE for the policy"
                    .to_string(),
            );
            self.mismatches.append(&mut out);
            return;
        };
        let user = enabled & info.supported_xcr0().bits();
        if user != policy.bits() {
            out.push(format!(
                "enabled xstate features: Linux enabled {user:#x} of user state, \
                 the policy's XCR0 is {:#x}",
                policy.bits()
            ));
        }
        if self.supporting != user {
            out.push(format!(
                "supported XSAVE features: Linux lists {:#x}, it enabled {user:#x}",
                self.supporting
            ));
        }
        let want_format = if xsaves { "compacted" } else { "standard" };
        let format = match self.format.as_deref() {
            Some("compacted") => Format::Compacted,
            _ => Format::Standard,
        };
        if self.format.as_deref() != Some(want_format) {
            out.push(format!(
                "format: Linux uses {:?}, vmm expects {want_format:?} (XSAVES {})",
                self.format.as_deref().unwrap_or("none"),
                if xsaves { "offered" } else { "not offered" }
            ));
        }
        self.compare_layout(info, XfeatureMask::from_bits(enabled), format, &mut out);
        self.mismatches.append(&mut out);
    }

    /// The per-component offsets and sizes and the context size against
    /// the xstate crate's layout of `enabled` in `format`.
    fn compare_layout(
        &self,
        info: &XsaveInfo,
        enabled: XfeatureMask,
        format: Format,
        out: &mut Vec<String>,
    ) {
        let layout = match info.layout(enabled, format) {
            Ok(l) => l,
            Err(e) => {
                out.push(format!(
                    "enabled xstate features {enabled:#x}: no vmm layout: {e}"
                ));
                return;
            }
        };
        for c in &self.components {
            let (offset, size) = (
                layout.offset_by_index(c.index),
                layout.size_by_index(c.index),
            );
            if offset != Some(c.offset) {
                out.push(format!(
                    "xstate_offset[{}]: Linux says {}, vmm's {format:?} layout {}",
                    c.index,
                    c.offset,
                    offset.map_or("has no such component".into(), |o| o.to_string())
                ));
            }
            if size != Some(c.size) {
                out.push(format!(
                    "xstate_sizes[{}]: Linux says {}, vmm's layout {}",
                    c.index,
                    c.size,
                    size.map_or("has no such component".into(), |s| s.to_string())
                ));
            }
        }
        for (index, _, _) in layout.iter_indices().filter(|&(i, _, _)| i >= 2) {
            if !self.components.iter().any(|c| c.index == index) {
                out.push(format!(
                    "xstate_offset[{index}]: no line from Linux for an enabled component"
                ));
            }
        }
        if self.context_size != Some(layout.total_size()) {
            out.push(format!(
                "context size: Linux says {} bytes, vmm's {format:?} layout {} bytes",
                self.context_size
                    .map_or("nothing".into(), |s| s.to_string()),
                layout.total_size()
            ));
        }
    }
}

/// Whether the guest's CPUID offers XSAVES (leaf 0xD.1 EAX bit 3): Linux
/// then keeps its xstate in the compacted format.
pub(crate) fn guest_has_xsaves(guest_cpuid: &[kvm_bindings::kvm_cpuid_entry2]) -> bool {
    guest_cpuid
        .iter()
        .any(|e| e.function == 0xd && e.index == 1 && e.eax & (1 << 3) != 0)
}

/// A Linux guest's `x86/fpu:` lines, compared with vmm's layout for the
/// policy: kept in the outcome, and any difference ends the run as a
/// failure naming the fields (unless it failed already).
pub(crate) fn linux_oracle(
    outcome: &mut super::outcome::RunOutcome,
    info: &xstate::XsaveInfo,
    xsaves: bool,
) {
    let console = String::from_utf8_lossy(&outcome.serial);
    let Some(mut oracle) = LinuxXstate::parse(&console) else {
        return;
    };
    oracle.compare(info, outcome.policy.xcr0, xsaves);
    if !oracle.mismatches.is_empty()
        && matches!(
            outcome.end,
            super::outcome::RunEnd::Reset
                | super::outcome::RunEnd::Exited(_)
                | super::outcome::RunEnd::TimedOut(_)
        )
    {
        outcome.end = super::outcome::RunEnd::XstateMismatch(oracle.mismatches.join("; "));
    }
    outcome.linux_xstate = Some(oracle);
}

#[cfg(test)]
mod tests;
