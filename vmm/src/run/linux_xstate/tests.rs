//! The oracle's parsing and comparison on recorded console text.

use super::*;
use xstate::CpuidRegs;

/// Leaf 0xD as QEMU's TCG `-cpu max` offers it to kvm_amd's guests: x87,
/// SSE, AVX and PKRU, PKRU at QEMU's fixed offset 2688, no XSAVEC/XSAVES.
fn tcg_info() -> XsaveInfo {
    XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
        0 => CpuidRegs::new(0x207, 2696, 2696, 0),
        1 => CpuidRegs::new(0x5, 0, 0, 0),
        2 => CpuidRegs::new(256, 576, 0, 0),
        9 => CpuidRegs::new(8, 2688, 0, 0),
        _ => CpuidRegs::default(),
    })
    .unwrap()
}

/// The console of a Linux 6.1 guest booted with `--xfeatures` `policy`.
fn console(policy: &str) -> String {
    let path = format!(
        "{}/tests/data/linux/fpu-{policy}.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Each recorded boot parses into its values and agrees with vmm's layout
/// for its policy (under TCG the full XCR0 is 0x207, and that less PKRU
/// is 0x7).
#[test]
fn recorded_boots_agree_with_the_layout() {
    for (policy, enabled, size, comps) in [
        ("0x3", 0x3, 576, vec![]),
        ("0x7", 0x7, 832, vec![(2, 576, 256)]),
        ("0x207", 0x207, 2696, vec![(2, 576, 256), (9, 2688, 8)]),
    ] {
        let mut got = LinuxXstate::parse(&console(policy)).expect(policy);
        assert_eq!(got.enabled, Some(enabled), "{policy}");
        assert_eq!(got.supporting, enabled, "{policy}");
        assert_eq!(got.context_size, Some(size), "{policy}");
        assert_eq!(got.format.as_deref(), Some("standard"), "{policy}");
        let want: Vec<LinuxComponent> = comps
            .into_iter()
            .map(|(index, offset, size)| LinuxComponent {
                index,
                offset,
                size,
            })
            .collect();
        assert_eq!(got.components, want, "{policy}");
        got.compare(&tcg_info(), XfeatureMask::from_bits(enabled), false);
        assert_eq!(got.mismatches, Vec::<String>::new(), "{policy}");
    }
}

/// Every field that differs is named: the policy, an offset, a size, the
/// context size, the format, a missing component.
#[test]
fn each_difference_is_named() {
    let text = console("0x207");
    let mut got = LinuxXstate::parse(&text).unwrap();
    got.compare(&tcg_info(), XfeatureMask::from_bits(0x7), true);
    let all = got.mismatches.join("\n");
    assert!(
        all.contains("enabled xstate features: Linux enabled 0x207"),
        "{all}"
    );
    assert!(
        all.contains("format: Linux uses \"standard\", vmm expects \"compacted\""),
        "{all}"
    );

    let edited = text
        .replace("xstate_offset[9]: 2688", "xstate_offset[9]: 2432")
        .replace("xstate_sizes[2]:  256", "xstate_sizes[2]:  128")
        .replace("context size is 2696", "context size is 2440");
    let mut got = LinuxXstate::parse(&edited).unwrap();
    got.compare(&tcg_info(), XfeatureMask::from_bits(0x207), false);
    let all = got.mismatches.join("\n");
    for field in [
        "xstate_offset[9]: Linux says 2432, vmm's Standard layout 2688",
        "xstate_sizes[2]: Linux says 128, vmm's layout 256",
        "context size: Linux says 2440 bytes, vmm's Standard layout 2696 bytes",
    ] {
        assert!(all.contains(field), "{field} in {all}");
    }

    let dropped: String = text
        .lines()
        .filter(|l| !l.contains("xstate_offset[9]"))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut got = LinuxXstate::parse(&dropped).unwrap();
    got.compare(&tcg_info(), XfeatureMask::from_bits(0x207), false);
    assert_eq!(
        got.mismatches,
        ["xstate_offset[9]: no line from Linux for an enabled component"]
    );
}

/// No x86/fpu line: no oracle. Garbled lines are named, never a panic;
/// a flood is cut.
#[test]
fn bad_console_text_never_panics() {
    assert_eq!(LinuxXstate::parse("Linux version 6.1\nhello\n"), None);
    for garbled in [
        "x86/fpu: Supporting XSAVE feature 0xzz: 'x'",
        "x86/fpu: xstate_offset[2]:  576, xstate_sizes[3]:  256",
        "x86/fpu: xstate_offset[99999999999]: 1, xstate_sizes[99999999999]: 1",
        "x86/fpu: xstate_offset[",
        "x86/fpu: Enabled xstate features 0x7, context size is",
        "x86/fpu: Enabled xstate features , using '",
    ] {
        let mut got = LinuxXstate::parse(garbled).expect(garbled);
        assert!(
            got.mismatches[0].starts_with("unreadable line"),
            "{garbled}"
        );
        got.compare(&tcg_info(), XfeatureMask::from_bits(0x7), false);
    }
    // A line that ends with the prefix (and its space, or more): trimmed
    // whole, it is shorter than the prefix (a fuzzer found the panic).
    for bare in ["[  ] x86/fpu: ", "x86/fpu:   \n", "x86/fpu: \r\n256"] {
        let got = LinuxXstate::parse(bare).expect(bare);
        assert_eq!(got.lines.len(), 1, "{bare:?}");
        assert!(got.mismatches.is_empty(), "{bare:?}: {:?}", got.mismatches);
    }
    let flood = "x86/fpu: x87 FPU will use FXSAVE\n".repeat(1000);
    let got = LinuxXstate::parse(&flood).unwrap();
    assert_eq!(got.lines.len(), MAX_LINES);
    assert!(got.mismatches[0].contains("more than"));
}
