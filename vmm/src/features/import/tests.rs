//! Each dump format is detected by content and gives the recorded leaf 0xD;
//! what is not a dump, or is a broken one, is refused naming the file.

use super::*;

const SPR_INSTLATX64: &str =
    include_str!("../../../tests/data/import/sapphire-rapids.instlatx64.txt");
const SPR_PROFILE: &str = include_str!("../../../../profiles/sapphire-rapids.json");

fn spr() -> RawCpuid {
    parse_instlatx64(SPR_INSTLATX64).unwrap()
}

/// The same leaves as `cpuid -r` prints them, for two CPUs (the second
/// differing in its APIC id, as real output does).
fn as_cpuid_raw(raw: &RawCpuid) -> String {
    let mut s = String::new();
    for cpu in 0..2u32 {
        s.push_str(&format!("CPU {cpu}:\n"));
        for (&(leaf, sub), r) in &raw.leaves {
            let ebx = if leaf == 1 { r.ebx | cpu << 24 } else { r.ebx };
            s.push_str(&format!(
                "   {leaf:#010x} {sub:#04x}: eax={:#010x} ebx={ebx:#010x} ecx={:#010x} edx={:#010x}\n",
                r.eax, r.ecx, r.edx
            ));
        }
    }
    s
}

/// The same leaves in the shape of `cpu-template-helper template dump`.
fn as_firecracker(raw: &RawCpuid) -> String {
    let leaves: Vec<serde_json::Value> = raw
        .leaves
        .iter()
        .map(|(&(leaf, sub), r)| {
            let m = |reg: &str, v: u32| serde_json::json!({"register": reg, "bitmap": format!("0b{v:032b}")});
            serde_json::json!({
                "leaf": format!("{leaf:#x}"),
                "subleaf": format!("{sub:#x}"),
                "flags": 1,
                "modifiers": [m("eax", r.eax), m("ebx", r.ebx), m("ecx", r.ecx), m("edx", r.edx)],
            })
        })
        .collect();
    serde_json::json!({"cpuid_modifiers": leaves, "msr_modifiers": []}).to_string()
}

#[test]
fn detects_each_format_by_content() {
    let raw = spr();
    assert_eq!(detect(SPR_INSTLATX64), Some(Format::InstLatx64));
    assert_eq!(detect(SPR_PROFILE), Some(Format::Profile));
    assert_eq!(detect(&as_cpuid_raw(&raw)), Some(Format::CpuidRaw));
    assert_eq!(detect(&as_firecracker(&raw)), Some(Format::Firecracker));
    // Empty and broken JSON go to the profile parser for its message.
    assert_eq!(detect(" \n"), Some(Format::Profile));
    assert_eq!(detect("{ \"name\": "), Some(Format::Profile));
    for junk in [
        "hello\n",
        "{}",
        "{\"a\": 1}",
        "[1]",
        "CPUID Manufacturer: x\n",
    ] {
        assert_eq!(detect(junk), None, "{junk:?}");
    }
}

#[test]
fn instlatx64_reads_cpu_0_only() {
    let raw = spr();
    // CPU 0's APIC id (leaf 1 EBX[31:24]) is 0; CPU 1's block follows.
    assert_eq!(raw.get(1, 0).unwrap().ebx, 0x0080_0800);
    assert_eq!(
        raw.get(0xd, 0x12).unwrap(),
        CpuidRegs::new(0x2000, 0xb00, 6, 0)
    );
    assert_eq!(raw.get(7, 1).unwrap().eax, 0x1c30);
}

#[test]
fn every_format_gives_the_recorded_leaf_0xd() {
    let raw = spr();
    let want = HostProfile::parse(Path::new("spr"), SPR_PROFILE).unwrap();
    for (format, text) in [
        (Format::InstLatx64, SPR_INSTLATX64.to_string()),
        (Format::CpuidRaw, as_cpuid_raw(&raw)),
        (Format::Firecracker, as_firecracker(&raw)),
    ] {
        let p = parse_any(Path::new("dump.txt"), &text).unwrap();
        assert_eq!(p.profile.leaf_0xd, want.profile.leaf_0xd, "{format}");
        assert_eq!(p.cpu, want.cpu, "{format}");
        assert_eq!(p.profile.name, "Intel(R) Xeon(R) w9-3475X", "{format}");
        assert_eq!(p.profile.vendor, "GenuineIntel");
        assert_eq!(p.profile.signature, Hex32(0x806f8));
        assert!(p.profile.bare_metal);
        assert_eq!(p.profile.leaf_7.unwrap().ebx, Hex32(0xf3bf_bffb));
        assert_eq!(p.extras.leaf_7_1.unwrap().eax, Hex32(0x1c30));
        assert_eq!(p.profile.source, format!("{} dump dump.txt", format.name()));
    }
}

fn err(text: &str) -> String {
    parse_any(Path::new("x.dump"), text)
        .unwrap_err()
        .to_string()
}

#[test]
fn refuses_what_it_does_not_recognise_naming_the_file() {
    let e = err("hello, world\n");
    assert_eq!(e, format!("profile x.dump: {KNOWN_FORMATS}"));
    let e = err("{\"foo\": 1}");
    assert!(
        e.starts_with("profile x.dump: not a recognised CPUID format"),
        "{e}"
    );
}

#[test]
fn refuses_malformed_or_incomplete_dumps() {
    // A malformed leaf line.
    let e = err("CPUID 00000000: 00000020-756E6547-6C65746E\n");
    assert!(e.contains("instlatx64 line 1:"), "{e}");
    let e = err("   0x00000000 0x00: eax=0x00000016 ebx=0x756e6547 ecx=0x6c65746e edx=zz\n");
    assert!(e.contains("cpuid-raw line 1:"), "{e}");
    // Leaf 0xD subleaf 9 (PKRU, enumerated in subleaf 0) removed.
    let cut: String = SPR_INSTLATX64
        .lines()
        .filter(|l| !l.contains("[SL 09]"))
        .map(|l| format!("{l}\n"))
        .collect();
    let e = err(&cut);
    assert!(
        e.ends_with(
            "instlatx64: CPUID leaf 0xD subleaf 0x9 is not in the dump; a profile needs it"
        ),
        "{e}"
    );
    // Two different values for one leaf of one CPU.
    let e = err("   0x00000000 0x00: eax=0x1 ebx=0x0 ecx=0x0 edx=0x0\n   0x00000000 0x00: eax=0x2 ebx=0x0 ecx=0x0 edx=0x0\n");
    assert!(e.contains("CPUID 0x0.0x0 recorded twice"), "{e}");
    // Unmarked repeated leaf 0xD lines (old dumps).
    let e = err("CPUID 0000000D: 00000007-00000340-00000340-00000000\nCPUID 0000000D: 00000001-00000000-00000000-00000000\n");
    assert!(e.contains("without a `[SL nn]` subleaf marker"), "{e}");
    // A Firecracker template with `x` bits is not a dump.
    let fc = as_firecracker(&spr()).replacen("0b0", "0bx", 1);
    let e = err(&fc);
    assert!(e.contains("a template with `x` bits is not a dump"), "{e}");
    let e =
        err("{\"cpuid_modifiers\": [{\"leaf\": \"13\", \"subleaf\": \"0x0\", \"modifiers\": []}]}");
    assert!(e.contains("leaf \"13\" is not a 0x or 0b number"), "{e}");
}
