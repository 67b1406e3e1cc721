//! The safe common baseline of `vmm features compare`, written as other
//! VMMs take it: a fleet rarely runs one VMM, and each wants the same fact
//! (which extended state and which instruction sets a guest may see) in
//! its own words.
//!
//! - [`firecracker_template`]: a Firecracker custom CPU template
//!   (`cpuid_modifiers`): CPUID 0xD.0 EAX/EDX masked to the baseline XCR0,
//!   0xD.1 ECX/EDX to the baseline IA32_XSS, and every flag of leaves 1, 7.0
//!   and 7.1 whose state the baseline leaves out cleared (`0`), everything
//!   else kept (`x`).
//! - [`qemu_cpu`]: a QEMU `-cpu host,-avx512f,...` string naming, in QEMU's
//!   words, every such flag. It hides the instructions, not the state:
//!   QEMU 7.2, measured, still lists opmask/ZMM in its CPUID 0xD with
//!   `-avx512f` (see the README).
//! - [`Comparison::baseline_xfeatures`]: our own `--xfeatures`.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;
use xstate::XfeatureMask;

use super::compare::Comparison;
use super::error::FeaturesError;
use crate::cpuid::{GatedFlag, Reg, GATED_FLAGS};

/// Which format `compare --export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// A Firecracker custom CPU template (JSON).
    Firecracker,
    /// A QEMU `-cpu` option value.
    Qemu,
    /// Our `--xfeatures` value.
    Xfeatures,
}

/// QEMU's name of a gated flag (`-cpu help`), `None` for the one QEMU
/// does not let a user set (OSPKE mirrors the guest's CR4.PKE).
pub fn qemu_name(linux_name: &str) -> Option<&'static str> {
    Some(match linux_name {
        "fma" => "fma",
        "avx" => "avx",
        "f16c" => "f16c",
        "avx2" => "avx2",
        "mpx" => "mpx",
        "avx512f" => "avx512f",
        "avx512dq" => "avx512dq",
        "avx512ifma" => "avx512ifma",
        "avx512pf" => "avx512pf",
        "avx512er" => "avx512er",
        "avx512cd" => "avx512cd",
        "avx512bw" => "avx512bw",
        "avx512vl" => "avx512vl",
        "avx512vbmi" => "avx512vbmi",
        "pku" => "pku",
        "avx512_vbmi2" => "avx512vbmi2",
        "vaes" => "vaes",
        "vpclmulqdq" => "vpclmulqdq",
        "avx512_vnni" => "avx512vnni",
        "avx512_bitalg" => "avx512bitalg",
        "avx512_vpopcntdq" => "avx512-vpopcntdq",
        "avx512_4vnniw" => "avx512-4vnniw",
        "avx512_4fmaps" => "avx512-4fmaps",
        "avx512_vp2intersect" => "avx512-vp2intersect",
        "amx_bf16" => "amx-bf16",
        "avx512_fp16" => "avx512-fp16",
        "amx_tile" => "amx-tile",
        "amx_int8" => "amx-int8",
        "sha512" => "sha512",
        "sm3" => "sm3",
        "sm4" => "sm4",
        "avx_vnni" => "avx-vnni",
        "avx512_bf16" => "avx512-bf16",
        "amx_fp16" => "amx-fp16",
        "avx_ifma" => "avx-ifma",
        "avx_vnni_int8" => "avx-vnni-int8",
        "avx_ne_convert" => "avx-ne-convert",
        "amx_complex" => "amx-complex",
        "avx_vnni_int16" => "avx-vnni-int16",
        "apx_f" => "apxf",
        _ => return None,
    })
}

/// The gated flags the baseline must hide: those needing a component the
/// baseline XCR0 leaves out.
pub fn removed_flags(baseline: XfeatureMask) -> impl Iterator<Item = &'static GatedFlag> {
    GATED_FLAGS
        .iter()
        .filter(move |f| f.needs & !baseline.bits() != 0)
}

/// Whether any source offers `flag`; true also when no source recorded
/// its leaf (then nothing says it is absent).
fn offered_anywhere(c: &Comparison, flag: &str) -> bool {
    match c.flags.iter().find(|f| f.flag == flag) {
        Some(f) => f.present.contains(&Some(true)) || f.present.iter().all(Option::is_none),
        None => c.flags.is_empty(),
    }
}

/// The QEMU `-cpu` value: `host` minus every removed flag some host has,
/// in QEMU's names. With `known` (the flags a given QEMU recognises, see
/// [`qemu_known_flags`]), names that QEMU does not know are left out (an
/// older QEMU refuses the whole option for one unknown property) and
/// returned as the second value.
pub fn qemu_cpu(c: &Comparison, known: Option<&BTreeSet<String>>) -> (String, Vec<&'static str>) {
    let mut s = String::from("host");
    let mut unknown = Vec::new();
    for f in removed_flags(c.baseline_xcr0) {
        if let Some(q) = qemu_name(f.cpuinfo).filter(|_| offered_anywhere(c, f.cpuinfo)) {
            if known.is_some_and(|k| !k.contains(q)) {
                unknown.push(q);
                continue;
            }
            s.push_str(",-");
            s.push_str(q);
        }
    }
    (s, unknown)
}

/// The CPUID flag names `qemu -cpu help` lists after `Recognized CPUID
/// flags:`.
pub fn qemu_known_flags(cpu_help: &str) -> BTreeSet<String> {
    cpu_help
        .split_once("Recognized CPUID flags:")
        .map(|(_, flags)| flags.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Runs `qemu -cpu help` for [`qemu_known_flags`].
pub fn query_qemu(qemu: &Path) -> Result<BTreeSet<String>, FeaturesError> {
    let out = std::process::Command::new(qemu)
        .args(["-cpu", "help"])
        .output()
        .map_err(|e| {
            FeaturesError::Tool(format!("--qemu {}: cannot run it: {e}", qemu.display()))
        })?;
    let known = qemu_known_flags(&String::from_utf8_lossy(&out.stdout));
    if !out.status.success() || known.is_empty() {
        return Err(FeaturesError::Tool(format!(
            "--qemu {}: `-cpu help` listed no recognised CPUID flags ({})",
            qemu.display(),
            out.status
        )));
    }
    Ok(known)
}

/// A Firecracker CPU template (`CustomCpuTemplate`'s JSON shape).
#[derive(Clone, Debug, Serialize)]
pub struct FirecrackerTemplate {
    /// Leaf modifiers.
    pub cpuid_modifiers: Vec<FirecrackerLeaf>,
    /// None: the baseline is CPUID only.
    pub msr_modifiers: Vec<serde_json::Value>,
}

/// One `cpuid_modifiers` entry.
#[derive(Clone, Debug, Serialize)]
pub struct FirecrackerLeaf {
    /// `0x`-prefixed leaf.
    pub leaf: String,
    /// `0x`-prefixed subleaf.
    pub subleaf: String,
    /// KVM_CPUID_FLAG_SIGNIFCANT_INDEX (1) for indexed leaves, else 0.
    pub flags: u32,
    /// Register bitmaps.
    pub modifiers: Vec<FirecrackerRegister>,
}

/// One register's bitmap: `0b` and 32 of `0` (clear), `1` (set), `x`
/// (keep), most significant bit first.
#[derive(Clone, Debug, Serialize)]
pub struct FirecrackerRegister {
    /// `eax`, `ebx`, `ecx` or `edx`.
    pub register: &'static str,
    /// The bitmap.
    pub bitmap: String,
}

/// `0b` + 32 characters: `0` where `clear` has a bit, else `x`.
fn clear_bitmap(clear: u32) -> String {
    let mut s = String::from("0b");
    for bit in (0..32).rev() {
        s.push(if clear & (1 << bit) != 0 { '0' } else { 'x' });
    }
    s
}

fn reg_name(r: Reg) -> &'static str {
    match r {
        Reg::Eax => "eax",
        Reg::Ebx => "ebx",
        Reg::Ecx => "ecx",
        Reg::Edx => "edx",
    }
}

/// The Firecracker template of the baseline. Leaf 7.1 is only touched
/// when a host offers one of its removed flags (Firecracker refuses a
/// modifier of a leaf the guest's CPUID does not have).
pub fn firecracker_template(c: &Comparison) -> FirecrackerTemplate {
    let xcr0 = c.baseline_xcr0.bits();
    let xss = c.baseline_xss.bits();
    let entry = |leaf: u32, subleaf: u32, regs: Vec<(&'static str, u32)>| FirecrackerLeaf {
        leaf: format!("{leaf:#x}"),
        subleaf: format!("{subleaf:#x}"),
        flags: u32::from(leaf != 1),
        modifiers: regs
            .into_iter()
            .map(|(register, clear)| FirecrackerRegister {
                register,
                bitmap: clear_bitmap(clear),
            })
            .collect(),
    };
    let mut out = vec![
        entry(
            0xd,
            0,
            vec![("eax", !(xcr0 as u32)), ("edx", !((xcr0 >> 32) as u32))],
        ),
        entry(
            0xd,
            1,
            vec![("ecx", !(xss as u32)), ("edx", !((xss >> 32) as u32))],
        ),
    ];
    for (leaf, subleaf) in [(1u32, 0u32), (7, 0), (7, 1)] {
        let flags: Vec<&GatedFlag> = removed_flags(c.baseline_xcr0)
            .filter(|f| f.leaf == leaf && f.subleaf == subleaf)
            .collect();
        if flags.is_empty()
            || (subleaf == 1 && !flags.iter().any(|f| offered_anywhere(c, f.cpuinfo)))
        {
            continue;
        }
        let mut regs = Vec::new();
        for r in Reg::ALL {
            let clear = flags
                .iter()
                .filter(|f| f.reg == r)
                .fold(0u32, |m, f| m | 1 << f.bit);
            if clear != 0 {
                regs.push((reg_name(r), clear));
            }
        }
        out.push(entry(leaf, subleaf, regs));
    }
    out.sort_by_key(|l| {
        (
            u32::from_str_radix(&l.leaf[2..], 16).unwrap_or(0),
            l.subleaf.clone(),
        )
    });
    FirecrackerTemplate {
        cpuid_modifiers: out,
        msr_modifiers: Vec::new(),
    }
}

/// The export in `format`, newline-terminated; for QEMU, `known` as in
/// [`qemu_cpu`] (flags left out are reported on stderr).
pub fn render(c: &Comparison, format: ExportFormat, known: Option<&BTreeSet<String>>) -> String {
    match format {
        ExportFormat::Firecracker => {
            let mut s = serde_json::to_string_pretty(&firecracker_template(c))
                .unwrap_or_else(|e| unreachable!("template serialisation cannot fail: {e}"));
            s.push('\n');
            s
        }
        ExportFormat::Qemu => {
            let (s, unknown) = qemu_cpu(c, known);
            if !unknown.is_empty() {
                crate::output::terminal::line(format_args!(
                    "vmm: warning: this QEMU does not know {}: left out of -cpu; a newer QEMU \
                     can hide them",
                    unknown.join(", ")
                ));
            }
            format!("{s}\n")
        }
        ExportFormat::Xfeatures => format!("{}\n", c.baseline_xfeatures),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmaps_clear_the_given_bits_msb_first() {
        assert_eq!(clear_bitmap(0), format!("0b{}", "x".repeat(32)));
        assert_eq!(clear_bitmap(1 | 1 << 31), format!("0b0{}0", "x".repeat(30)));
    }

    #[test]
    fn every_gated_flag_has_a_qemu_name_but_ospke() {
        for f in GATED_FLAGS {
            assert_eq!(
                qemu_name(f.cpuinfo).is_none(),
                f.cpuinfo == "ospke",
                "{}",
                f.cpuinfo
            );
        }
    }

    #[test]
    fn reads_qemu_cpu_help() {
        let help = "x86 host  processor with all supported host features\n\n\
                    Recognized CPUID flags:\n  avx avx2 avx512f\n  pku xsave\n";
        let k = qemu_known_flags(help);
        assert_eq!(
            k.into_iter().collect::<Vec<_>>(),
            ["avx", "avx2", "avx512f", "pku", "xsave"]
        );
        assert!(qemu_known_flags("no list").is_empty());
    }
}
