//! Formats out: the safe baseline of `vmm features compare --export` as
//! Firecracker and QEMU take it. The Firecracker template is read back
//! through a mirror of Firecracker's documented `CustomCpuTemplate` shape;
//! the QEMU string boots our guest under `qemu-system-x86_64 -cpu ...`.

mod common;

use common::{guest_kernel_file, kvm_or_skip, qemu_or_skip, vmm};

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Firecracker's custom CPU template, as its documentation describes it
/// (`cpuid_modifiers`: leaf, subleaf, flags, modifiers of register and a
/// 32-character bitmap of `0`, `1`, `x`; `msr_modifiers`; unknown fields
/// refused).
#[derive(serde::Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Template {
    #[serde(default)]
    #[allow(dead_code)]
    kvm_capabilities: Vec<String>,
    #[serde(default)]
    cpuid_modifiers: Vec<LeafModifier>,
    #[serde(default)]
    msr_modifiers: Vec<serde_json::Value>,
}

#[derive(serde::Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct LeafModifier {
    leaf: String,
    subleaf: String,
    flags: u32,
    modifiers: Vec<RegisterModifier>,
}

#[derive(serde::Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RegisterModifier {
    register: String,
    bitmap: String,
}

/// (filter, value) of a bitmap, as Firecracker reads it: `0b` prefix,
/// `_` ignored, `x` keeps, `0`/`1` set the bit; at most 32 bits.
fn bitmap(s: &str) -> (u32, u32) {
    let digits: Vec<u8> = s
        .strip_prefix("0b")
        .unwrap_or(s)
        .bytes()
        .filter(|&b| b != b'_')
        .collect();
    assert!(digits.len() <= 32, "{s}");
    let (mut filter, mut value) = (0u32, 0u32);
    for (i, b) in digits.iter().rev().enumerate() {
        match b {
            b'x' => {}
            b'0' => filter |= 1 << i,
            b'1' => {
                filter |= 1 << i;
                value |= 1 << i
            }
            _ => panic!("bad bitmap character in {s}"),
        }
    }
    (filter, value)
}

fn number(s: &str) -> u32 {
    u32::from_str_radix(s.strip_prefix("0x").expect("0x number"), 16).unwrap()
}

/// The cleared bits of each (leaf, subleaf, register).
fn cleared(t: &Template) -> std::collections::BTreeMap<(u32, u32, String), u32> {
    let mut m = std::collections::BTreeMap::new();
    for l in &t.cpuid_modifiers {
        let (leaf, sub) = (number(&l.leaf), number(&l.subleaf));
        assert_eq!(l.flags, u32::from(leaf != 1), "{l:?}");
        for r in &l.modifiers {
            assert!(["eax", "ebx", "ecx", "edx"].contains(&r.register.as_str()));
            let (filter, value) = bitmap(&r.bitmap);
            assert_eq!(value, 0, "the baseline only clears bits: {r:?}");
            m.insert((leaf, sub, r.register.clone()), filter);
        }
    }
    m
}

/// `vmm features compare skylake-sp alder-lake --export FORMAT`, then
/// `extra`.
fn skylake_sp_vs_alder_lake<'a>(format: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "features",
        "compare",
        "skylake-sp",
        "alder-lake",
        "--export",
        format,
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn firecracker_template_clears_exactly_the_removed_state_and_its_flags() {
    // Skylake-SP (AVX-512, MPX, PKRU) with Alder Lake (no AVX-512, no MPX):
    // the baseline is x87, SSE, AVX, PKRU.
    let out = vmm(&skylake_sp_vs_alder_lake("firecracker", &[]));
    assert!(out.status.success(), "{}", common::stderr(&out));
    let t: Template = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(t.msr_modifiers.is_empty());
    let c = cleared(&t);
    let get = |leaf, sub, r: &str| c.get(&(leaf, sub, r.to_string())).copied();
    // 0xD.0: only x87, SSE, AVX, PKRU (0x207) may stay.
    assert_eq!(get(0xd, 0, "eax"), Some(!0x207));
    assert_eq!(get(0xd, 0, "edx"), Some(!0));
    // 0xD.1: supervisor state both hosts have (PT, bit 8).
    assert_eq!(get(0xd, 1, "ecx"), Some(!0x100));
    // Leaf 7.0 EBX: MPX (14), AVX512F (16), DQ (17), IFMA (21), PF (26),
    // ER (27), CD (28), BW (30), VL (31).
    let ebx = [14, 16, 17, 21, 26, 27, 28, 30, 31]
        .iter()
        .fold(0u32, |m, b| m | 1 << b);
    assert_eq!(get(7, 0, "ebx"), Some(ebx));
    // ECX: VBMI (1), VBMI2 (6), VNNI (11), BITALG (12), VPOPCNTDQ (14);
    // PKU and OSPKE stay (PKRU is in the baseline), so do VAES/VPCLMULQDQ.
    let ecx = [1, 6, 11, 12, 14].iter().fold(0u32, |m, b| m | 1 << b);
    assert_eq!(get(7, 0, "ecx"), Some(ecx));
    // EDX: 4VNNIW (2), 4FMAPS (3), VP2INTERSECT (8), AVX512_FP16 (23),
    // and AMX-BF16/TILE/INT8 (22, 24, 25): AMX state is in no baseline here.
    let edx = [2, 3, 8, 22, 23, 24, 25]
        .iter()
        .fold(0u32, |m, b| m | 1 << b);
    assert_eq!(get(7, 0, "edx"), Some(edx));
    // AVX stays: leaf 1 untouched.
    assert!(get(1, 0, "ecx").is_none());
    // Neither host has leaf 7.1 flags of the removed state: untouched
    // (Firecracker refuses modifiers of leaves the guest lacks).
    assert!(get(7, 1, "eax").is_none());
}

#[test]
fn qemu_and_xfeatures_exports_name_the_same_baseline() {
    let run = |f: &str| {
        let out = vmm(&skylake_sp_vs_alder_lake(f, &[]));
        assert!(out.status.success(), "{}", common::stderr(&out));
        stdout(&out)
    };
    assert_eq!(
        run("qemu"),
        "host,-mpx,-avx512f,-avx512dq,-avx512cd,-avx512bw,-avx512vl\n"
    );
    assert_eq!(run("xfeatures"), "x87,sse,avx,pkru\n");
    // --export and --json are one or the other.
    let out = vmm(&skylake_sp_vs_alder_lake("qemu", &["--json"]));
    // Usage errors exit 68 (clap's 2 is remapped by vmm).
    assert_eq!(out.status.code(), Some(68));
}

/// The exported `-cpu` value boots our guest under QEMU, which reports
/// success through isa-debug-exit, and the guest's CPUID has none of the
/// removed state.
#[cfg_attr(any(no_kvm, no_qemu), ignore = "needs /dev/kvm and qemu-system-x86_64")]
#[test]
fn qemu_cpu_export_boots_the_guest_under_qemu() {
    let name = "qemu_cpu_export_boots_the_guest_under_qemu";
    if !kvm_or_skip(name) || !qemu_or_skip(name) {
        return;
    }
    let out = vmm(&[
        "features",
        "compare",
        "zen4-genoa",
        "granite-rapids",
        "alder-lake",
        "--export",
        "qemu",
        "--qemu",
        "qemu-system-x86_64",
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let cpu = stdout(&out).trim().to_string();
    assert!(cpu.starts_with("host,-avx512f,"), "{cpu}");
    let kernel = guest_kernel_file();
    let log = std::env::temp_dir().join(format!("vmm-formats-qemu-{}.log", std::process::id()));
    let out = common::qemu_microvm_to_log(&cpu, "workload=none", &kernel, &log);
    let _ = std::fs::remove_file(&kernel);
    let serial = std::fs::read_to_string(&log).unwrap_or_default();
    // isa-debug-exit: (status << 1) | 1, so a guest success is 1.
    assert_eq!(
        out.status.code(),
        Some(1),
        "QEMU -cpu {cpu} failed:\n{serial}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (o, f) = common::vmm_json(&["features", "--guest-log", log.to_str().unwrap()]);
    let _ = std::fs::remove_file(&log);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let seen = common::hex(&f["columns"]["guest"]["xcr0_supported"]);
    // No AMX state offered; x87/SSE always. AVX-512 *state* is not
    // asserted: QEMU 7.2 (Debian 12) keeps opmask/ZMM in CPUID 0xD.0 even
    // with -avx512f (measured: the guest saw 0xe7); the flags hide the
    // instructions only, which is what a -cpu string can say.
    assert_eq!(seen & 0x60000, 0, "guest CPUID XCR0 {seen:#x}");
    assert_eq!(seen & 0x3, 0x3, "guest CPUID XCR0 {seen:#x}");
    eprintln!("guest CPUID XCR0 under QEMU -cpu {cpu}: {seen:#x}");
}

/// Formats in, through the command line: an InstLatx64 dump and the same
/// CPU as `cpuid -r` prints it are read by `--profile` and `compare`.
#[test]
fn dumps_are_read_by_profile_and_compare() {
    let dump = std::fs::read_to_string(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .join("vmm/tests/data/import/sapphire-rapids.instlatx64.txt"),
    )
    .unwrap();
    let inst = common::temp_file("spr-instlatx64.txt", dump.as_bytes());
    // The leaves of CPU 0 in `cpuid -r` lines.
    let mut raw = String::from("CPU 0:\n");
    for line in dump.lines().take_while(|l| !l.contains("Logical CPU #1")) {
        let Some(rest) = line.strip_prefix("CPUID ") else {
            continue;
        };
        let Some((leaf, regs)) = rest.split_once(": ") else {
            continue;
        };
        let Ok(leaf) = u32::from_str_radix(leaf, 16) else {
            continue;
        };
        let r: Vec<u32> = regs[..35]
            .split('-')
            .map(|h| u32::from_str_radix(h, 16).unwrap())
            .collect();
        let sub = regs
            .split_once("[SL ")
            .map_or(0, |(_, t)| u32::from_str_radix(&t[..2], 16).unwrap());
        raw.push_str(&format!(
            "   {leaf:#010x} {sub:#04x}: eax={:#010x} ebx={:#010x} ecx={:#010x} edx={:#010x}\n",
            r[0], r[1], r[2], r[3]
        ));
    }
    let cpuid = common::temp_file("spr-cpuid-r.txt", raw.as_bytes());
    for f in [&inst, &cpuid] {
        let (out, v) =
            common::vmm_json(&["features", "--profile", f.to_str().unwrap(), "--no-boot"]);
        assert!(out.status.success(), "{}", common::stderr(&out));
        assert_eq!(common::hex(&v["columns"]["cpu"]["xcr0"]), 0x602e7, "{f:?}");
    }
    let (out, v) = common::vmm_json(&[
        "features",
        "compare",
        inst.to_str().unwrap(),
        cpuid.to_str().unwrap(),
        "zen4-genoa",
    ]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(common::hex(&v["baseline_xcr0"]), 0x2e7);
    assert!(v["differences"].as_array().unwrap().iter().any(|d| d
        == "opmask: standard offset differs (1088 on A, 1088 on B, 832 on C): \
                      standard-format images (KVM_GET_XSAVE) must be re-laid out when moving \
                      between these hosts"));
    // Through a pipe (`cpuid -r | vmm features import /dev/stdin -`), the
    // same dump reads the same, for every reader of dumps.
    let stdin = common::stdin_path();
    let piped = common::vmm_piped(
        &["features", "--profile", stdin, "--no-boot", "--json"],
        raw.as_bytes(),
    );
    assert!(piped.status.success(), "{}", common::stderr(&piped));
    let v: serde_json::Value = serde_json::from_slice(&piped.stdout).unwrap();
    assert_eq!(common::hex(&v["columns"]["cpu"]["xcr0"]), 0x602e7);
    let out = vmm(&["features", "import", cpuid.to_str().unwrap(), "-"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let from_file: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let piped = common::vmm_piped(&["features", "import", stdin, "-"], raw.as_bytes());
    assert!(piped.status.success(), "{}", common::stderr(&piped));
    let mut from_pipe: serde_json::Value = serde_json::from_slice(&piped.stdout).unwrap();
    // Equal but for the source, which names the file.
    assert!(
        from_pipe["source"].as_str().unwrap().contains(stdin),
        "{from_pipe}"
    );
    from_pipe["source"] = from_file["source"].clone();
    assert_eq!(from_pipe, from_file);
    let piped = common::vmm_piped(
        &["features", "compare", stdin, "zen4-genoa", "--json"],
        raw.as_bytes(),
    );
    assert!(piped.status.success(), "{}", common::stderr(&piped));
    let v: serde_json::Value = serde_json::from_slice(&piped.stdout).unwrap();
    assert_eq!(common::hex(&v["baseline_xcr0"]), 0x2e7);
    // Text in no known format is refused by name.
    let junk = common::temp_file("junk.txt", b"CPU 0:\nnothing here\n");
    let out = vmm(&["features", "--profile", junk.to_str().unwrap(), "--no-boot"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        common::stderr(&out).contains(&format!(
            "profile {}: not a recognised CPUID format",
            junk.display()
        )),
        "{}",
        common::stderr(&out)
    );
    for f in [inst, cpuid, junk] {
        let _ = std::fs::remove_file(f);
    }
}
