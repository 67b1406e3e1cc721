//! The fuzz target bodies: one function per parser that takes outside bytes.
//!
//! This one file is compiled twice: by the cargo-fuzz crate (`fuzz/`, nightly,
//! libFuzzer), each of whose targets `#[path]`-includes it and calls one body,
//! and by `tests/fuzz_replay.rs` (stable `cargo test`), which replays every
//! seed in `fuzz/corpus/<target>/` and every crash in
//! `fuzz/regressions/<target>/` through the same function. A body returns
//! normally on any input: refusing bad bytes is fine, panicking is the bug.
//! Where the parser has an encoder, the body also checks the round trip.
#![allow(dead_code)]

use std::path::Path;

use guest::protocol::{field_str, Cmdline, Report, MAX_RESULTS, MAX_SKIPPED};
use vm_memory::{GuestAddress, GuestMemoryMmap};
use vmm::features::profile::HostProfile;
use vmm::snapshot::format::{read_table, Container, Section};
use vmm::snapshot::sparse::{SparseMemory, PAGE_SIZE};
use vmm::snapshot::state::{Meta, Snapshot};
use xstate::{
    compact, expand, init_image, minimal_xstate_bv, validate, CpuidProfile, Format, InitMode,
    XfeatureMask, XsaveInfo,
};

/// A fuzz target: its name (the directory under `fuzz/corpus/` and
/// `fuzz/regressions/`, and the cargo-fuzz binary) and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    ("snapshot_container", snapshot_container),
    ("snapshot_sections", snapshot_sections),
    ("snapshot_meta", snapshot_meta),
    ("sparse_memory", sparse_memory),
    ("report_record", report_record),
    ("xfeature_mask", xfeature_mask),
    ("cpuid_profile", cpuid_profile),
    ("elf_loader", elf_loader),
    ("guest_cmdline", guest_cmdline),
    ("xsave_buffer", xsave_buffer),
    ("firmware_tables", firmware_tables),
    ("http_response", http_response),
    ("import_formats", import_formats),
    ("bzimage_header", bzimage_header),
    ("linux_console", linux_console),
];

/// A whole snapshot file: header, section table, checksums
/// (`snapshot::format`), then every section decoder (`Snapshot::from_bytes`),
/// then the validation `vmm snapshot info` and `vmm restore` share, against
/// the host the file says it was written on.
pub fn snapshot_container(data: &[u8]) {
    let table = read_table(data);
    let parsed = Container::parse(data);
    if let Ok(c) = &parsed {
        let t = table.as_ref().expect("a parsed container has a table");
        assert_eq!(t.len(), c.sections.len());
        // decode(encode(c)) == c.
        assert_eq!(Container::parse(&c.to_bytes()).as_ref(), Ok(c));
    } else if let Err(e) = &parsed {
        let _ = e.to_string();
    }
    check_snapshot(Snapshot::from_bytes(data));
    check_validation(data);
}

/// The section decoders past the checksums: the input is a list of
/// sections, each `[name length u8][name][data length u32 LE][data]`
/// (cut short at the end of the input), put into a container as the writer
/// would, then decoded with `Snapshot::from_container` and validated.
pub fn snapshot_sections(data: &[u8]) {
    let c = sections_from_frames(data);
    check_snapshot(Snapshot::from_container(&c));
    check_validation(&c.to_bytes());
}

/// THE validation on a file's bytes (`vmm::fuzzing::snapshot_check`):
/// refused with a message naming a field or section, or accepted with
/// what only KVM can tell, each named.
fn check_validation(bytes: &[u8]) {
    match vmm::fuzzing::snapshot_check(bytes) {
        Ok(must_try) => assert!(must_try.iter().all(|w| w.contains(": "))),
        Err(e) => assert!(!e.is_empty()),
    }
}

/// The `meta` section alone: JSON to [`Meta`], the source KVM's leaf 0xD
/// validated through it, and the JSON round trip.
pub fn snapshot_meta(data: &[u8]) {
    let Ok(meta) = serde_json::from_slice::<Meta>(data) else {
        return;
    };
    let _ = meta.source_info();
    let _ = meta.policy();
    let again: Meta = serde_json::from_slice(&serde_json::to_vec(&meta).expect("serialise"))
        .expect("a serialised Meta parses back");
    assert_eq!(again, meta);
}

/// The sparse memory encoding (section `memory`).
pub fn sparse_memory(data: &[u8]) {
    let Ok(m) = SparseMemory::from_bytes(data) else {
        return;
    };
    // The encoding is canonical: encode(decode(x)) == x, byte for byte.
    assert_eq!(m.to_bytes(), data);
    // Applying it writes only inside the memory size, every stored page once.
    let mut pages = 0u64;
    m.apply(|addr, bytes| {
        assert!(addr + bytes.len() as u64 <= m.size, "write past the RAM");
        pages += bytes.len() as u64 / PAGE_SIZE as u64;
        Ok::<(), ()>(())
    })
    .expect("the writer never fails");
    assert_eq!(pages, m.stored_pages());
}

/// The guest's report record, and what the VMM derives from it.
pub fn report_record(data: &[u8]) {
    let r = match Report::from_bytes(data) {
        Ok(r) => r,
        Err(e) => {
            let _ = format!("{e}");
            return;
        }
    };
    // encode(decode(x)) == x for the record's bytes.
    assert_eq!(r.as_bytes(), &data[..Report::SIZE]);
    assert_eq!(r.results().len(), r.result_count as usize);
    assert!(r.results().len() <= MAX_RESULTS && r.skipped().len() <= MAX_SKIPPED);
    for s in r.skipped() {
        let _ = (
            field_str(&s.name),
            field_str(&s.variant),
            field_str(&s.reason),
        );
    }
    let _ = field_str(&r.switch_strategy);
    for row in vmm::report::result_rows(&r, r.tsc_khz) {
        let _ = (row.cycles_per_op(), row.throughput(), row.unit());
    }
    let _ = vmm::features::GuestSeen::from_report(&r);
}

/// The xfeature mask grammar (`XfeatureMask::parse`), the XCR0 rules on the
/// result, and print-then-parse.
pub fn xfeature_mask(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    for host in [
        XfeatureMask::from_bits(0x602e7),
        XfeatureMask::from_bits(!0),
    ] {
        let m = match XfeatureMask::parse(s, host) {
            Ok(m) => m,
            Err(e) => {
                let _ = e.to_string();
                continue;
            }
        };
        for supported in [host, XfeatureMask::from_bits(0x2e7)] {
            if let Err(e) = m.validate_xcr0(supported) {
                let _ = e.to_string();
            }
            let closed = m.with_dependencies();
            let _ = closed.validate_xcr0(supported);
        }
        // parse(print(m)) == m.
        let printed = m.to_string();
        assert_eq!(
            XfeatureMask::parse(&printed, host),
            Ok(m),
            "{s:?} printed as {printed:?}"
        );
    }
}

/// CPUID profiles: JSON to [`CpuidProfile`] to [`XsaveInfo`] and layouts,
/// the JSON round trip, and the VMM's own profile loader.
pub fn cpuid_profile(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = CpuidProfile::from_json(text) {
        let info = p.xsave_info().expect("from_json validated leaf_0xd");
        exercise_info(&info);
        if let Some(kvm) = p.kvm_xsave_info() {
            exercise_info(&kvm.expect("from_json validated kvm_leaf_0xd"));
        }
        // parse(print(p)) == p.
        assert_eq!(CpuidProfile::from_json(&p.to_json()).as_ref(), Ok(&p));
    }
    if let Err(e) = HostProfile::parse(Path::new("fuzz.json"), text) {
        let _ = e.to_string();
    }
}

/// RAM the ELF loader writes into: 4 MiB, the smallest guest `vmm` builds.
const ELF_RAM: usize = 4 << 20;

/// The PVH ELF kernel loader (`arch::boot::load_kernel`, linux-loader's ELF
/// parser underneath) on a small guest memory.
pub fn elf_loader(data: &[u8]) {
    // The validator runs first, before any VM exists, exactly as `vmm run`
    // does; only an image it accepts reaches linux-loader.
    let plan = match vmm::internal::arch::elf::check_image(data, ELF_RAM as u64) {
        Ok(plan) => plan,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert!(
        plan.end <= ELF_RAM as u64,
        "check_image accepted an image ending at {:#x}, past the RAM",
        plan.end
    );
    assert!(
        plan.entry < plan.end,
        "entry {:#x} outside the image",
        plan.entry
    );
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), ELF_RAM)])
        .expect("4 MiB of anonymous memory");
    let plan = vmm::internal::arch::boot::KernelPlan::Elf(plan);
    match vmm::internal::arch::boot::load_kernel(&mem, data, "fuzz", &plan) {
        Ok(k) => assert!(
            k.end <= ELF_RAM as u64,
            "kernel end {:#x} past the RAM",
            k.end
        ),
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// CPU counts from the MADT and from the MP table (`None`: no valid table).
pub type CpuCounts = (Option<u32>, Option<u32>);

/// A firmware-table seed: its file name, its bytes, the counts it holds.
pub type FirmwareSeed = (&'static str, Vec<u8>, CpuCounts);

/// The guest's CPU counts from the firmware tables of `data`
/// (`[rsdp u32 LE][memory...]`): the ACPI MADT reached through the RSDP
/// (`guest::firmware::madt_cpus`) and the MP table found by its floating
/// pointer (`mptable_cpus`). Guest memory is the input's memory repeated:
/// every address below 4 GiB reads `memory[addr % len]`, so any pointer a
/// table holds lands in the input's own bytes, and the MP search (at
/// 0x9fc00 and 0xf0000) finds what sits at those offsets. `None` for
/// input too short to hold one byte of memory.
pub fn firmware_counts(data: &[u8]) -> Option<CpuCounts> {
    let (rsdp, mem) = data.split_first_chunk::<4>()?;
    if mem.is_empty() {
        return None;
    }
    let len = mem.len() as u64;
    let read = |addr: u64, buf: &mut [u8]| {
        // Like the guest kernel's reader: nothing at or above 4 GiB.
        if addr
            .checked_add(buf.len() as u64)
            .is_none_or(|end| end > 1 << 32)
        {
            return false;
        }
        for (i, b) in buf.iter_mut().enumerate() {
            *b = mem[((addr + i as u64) % len) as usize];
        }
        true
    };
    let rsdp = u64::from(u32::from_le_bytes(*rsdp));
    Some((
        guest::firmware::madt_cpus(&read, rsdp),
        guest::firmware::mptable_cpus(&read),
    ))
}

/// The guest's firmware-table parsers on arbitrary tables
/// ([`firmware_counts`]): a count, when there is one, is at least one CPU
/// and no more than the table could list (a 64 KiB MADT of 8-byte
/// entries; the MP table's 16-bit entry count).
pub fn firmware_tables(data: &[u8]) {
    let Some((madt, mp)) = firmware_counts(data) else {
        return;
    };
    if let Some(n) = madt {
        assert!((1..=8192).contains(&n), "MADT count {n}");
    }
    if let Some(n) = mp {
        assert!((1..=u32::from(u16::MAX)).contains(&n), "MP table count {n}");
    }
}

/// Firmware-table seeds (`[rsdp u32 LE][memory]`, see [`firmware_counts`])
/// with the CPU counts they hold: MP tables as `vmm` writes them, and an
/// ACPI 2.0 RSDP -> XSDT -> MADT and an ACPI 1.0 RSDP -> RSDT -> MADT as
/// QEMU microvm and Cloud Hypervisor give them.
pub fn firmware_seeds() -> Vec<FirmwareSeed> {
    use vmm::internal::arch::mptable::{build, CpuSignature};
    let checksum = |b: &mut [u8], at: usize| {
        b[at] = 0;
        b[at] = 0u8.wrapping_sub(b.iter().fold(0u8, |a, x| a.wrapping_add(*x)));
    };
    // 1 KiB of memory: physical 0x9fc00 (the MP table's place) is offset 0.
    let mp = |cpus: u32, ioapic: bool| {
        let mut m = vec![0u8; 4 + 1024];
        let t = build(cpus, CpuSignature::default(), ioapic).expect("an MP table");
        m[4..4 + t.len()].copy_from_slice(&t);
        m
    };
    let sdt = |sig: &[u8; 4], body: &[u8]| {
        let mut t = sig.to_vec();
        t.extend_from_slice(&((36 + body.len()) as u32).to_le_bytes());
        t.extend_from_slice(&[2, 0]);
        t.extend_from_slice(b"VMMFUZTABLE0");
        t.resize(36, 0);
        t.extend_from_slice(body);
        checksum(&mut t, 9);
        t
    };
    // 4 KiB of memory: the RSDP at physical 0xe0000 (offset 0), the root
    // table at 0x100, the MADT at 0x200: two enabled local APICs, one
    // disabled, one enabled x2APIC.
    let acpi = |v2: bool| {
        let mut m = vec![0u8; 4 + 4096];
        m[..4].copy_from_slice(&0xe_0000u32.to_le_bytes());
        let mut madt = 0xfee0_0000u32.to_le_bytes().to_vec();
        madt.extend_from_slice(&[0; 4]);
        for (id, flags) in [(0u8, 1u8), (1, 1), (2, 0)] {
            madt.extend_from_slice(&[0, 8, id, id, flags, 0, 0, 0]);
        }
        madt.extend_from_slice(&[9, 16, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0]);
        let madt = sdt(b"APIC", &madt);
        let root = if v2 {
            sdt(b"XSDT", &0x200u64.to_le_bytes())
        } else {
            sdt(b"RSDT", &0x200u32.to_le_bytes())
        };
        let mut r = [0u8; 36];
        r[..8].copy_from_slice(b"RSD PTR ");
        r[15] = if v2 { 2 } else { 0 };
        if v2 {
            r[20..24].copy_from_slice(&36u32.to_le_bytes());
            r[24..32].copy_from_slice(&0x100u64.to_le_bytes());
        } else {
            r[16..20].copy_from_slice(&0x100u32.to_le_bytes());
        }
        checksum(&mut r[..20], 8);
        checksum(&mut r, 32);
        let at = |m: &mut Vec<u8>, off: usize, b: &[u8]| {
            m[4 + off..4 + off + b.len()].copy_from_slice(b)
        };
        at(&mut m, 0, &r);
        at(&mut m, 0x100, &root);
        at(&mut m, 0x200, &madt);
        m
    };
    let mut bad_madt = acpi(true);
    bad_madt[4 + 0x200 + 40] ^= 1;
    vec![
        ("mptable-2-cpus", mp(2, true), (None, Some(2))),
        ("mptable-8-cpus-no-ioapic", mp(8, false), (None, Some(8))),
        ("acpi2-xsdt-madt", acpi(true), (Some(3), None)),
        ("acpi1-rsdt-madt", acpi(false), (Some(3), None)),
        ("acpi2-madt-checksum", bad_madt, (None, None)),
    ]
}

/// The guest command line parser, and every view of it.
pub fn guest_cmdline(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let c = Cmdline::parse(s);
    assert_eq!(c.raw, s);
    // Each word is reported unknown exactly when the guest ignores it:
    // parsed alone, it changes nothing (a known word changes the result,
    // if only by being recorded as bad).
    let nothing = Cmdline::default();
    let mut unknown = 0;
    for w in s.split_ascii_whitespace() {
        let alone = Cmdline::parse(w);
        let acted = Cmdline { raw: "", ..alone } != nothing;
        let ignored = alone.unknown_words().count();
        assert_eq!(ignored, usize::from(!acted), "{w:?}: acted on {acted}");
        unknown += ignored;
    }
    assert_eq!(c.unknown_words().count(), unknown);
    assert!(c.workloads().all(|w| !w.is_empty()));
    assert!(c.benches().all(|w| !w.is_empty()));
    let _ = (c.runs_nothing(), c.unknown_workload(), c.unknown_bench());
    assert!(c.exits.is_none() || c.bad_exits.is_none());
    assert_ne!(c.exit_count(), 0);
    let _ = c.wants_bench("exits");
}

/// XSAVE image checks and conversions on arbitrary images against fixed
/// CPUs. Input: `[cpu u8][xcr0 u64 LE][xss u64 LE][image...]`. The image
/// is validated, compacted and expanded; nothing may panic, and whatever
/// `compact` produces expands and compacts back to itself.
pub fn xsave_buffer(data: &[u8]) {
    let Some((&cpu, rest)) = data.split_first() else {
        return;
    };
    if rest.len() < 16 {
        return;
    }
    let info = &fixed_infos()[cpu as usize % 2];
    let xcr0 = XfeatureMask::from_bits(u64::from_le_bytes(rest[..8].try_into().expect("8")));
    let xss = XfeatureMask::from_bits(u64::from_le_bytes(rest[8..16].try_into().expect("8")));
    let image = &rest[16..];
    let _ = validate(image, info, xcr0, xss);
    let _ = minimal_xstate_bv(info, image);
    let mut init = vec![0u8; 16 << 10];
    let _ = init_image(info, xcr0, InitMode::Minimal, &mut init);
    let _ = init_image(info, xcr0, InitMode::AllOfXcr0, &mut init);

    // Large enough for every layout of the fixed CPUs (AMX tiles: 8 KiB).
    let mut compacted = vec![0u8; 16 << 10];
    let mut standard = vec![0u8; 16 << 10];
    if let Ok(n) = compact(info, image, xcr0, &mut compacted) {
        let y = &compacted[..n];
        let _ = validate(y, info, xcr0, xss);
        if expand(info, y, &mut standard, xcr0).is_ok() {
            let mut again = vec![0u8; n];
            let m = compact(info, &standard, xcr0, &mut again)
                .expect("an expanded compact image compacts again");
            assert_eq!(m, n);
            assert_eq!(again, y, "compact(expand(y)) != y");
        }
    }
    let _ = expand(info, image, &mut standard, xcr0);
}

/// The CPUs `xsave_buffer` checks images against: Sapphire Rapids (AVX-512,
/// AMX, XSAVEC) and Zen 3 (no AVX-512), from `xstate/tests/data`.
fn fixed_infos() -> [XsaveInfo; 2] {
    let load = |json: &str| {
        CpuidProfile::from_json(json)
            .expect("test profile")
            .xsave_info()
            .expect("test profile info")
    };
    [
        load(include_str!(
            "../../../xstate/tests/data/intel-sapphire-rapids.json"
        )),
        load(include_str!(
            "../../../xstate/tests/data/amd-zen3-milan.json"
        )),
    ]
}

/// Layout queries a loaded profile answers; none may panic.
fn exercise_info(info: &XsaveInfo) {
    let all = info.supported_all();
    for mask in [info.supported_xcr0(), all, XfeatureMask::from_bits(3)] {
        for format in [Format::Standard, Format::Compacted] {
            if let Ok(l) = info.layout(mask, format) {
                let _ = l.total_size();
            }
        }
        let _ = info.standard_size(mask);
        let _ = info.compacted_size(mask);
    }
    let _ = info.restricted(info.supported_xcr0(), XfeatureMask::EMPTY);
}

/// The sections framed in `data`; names that are not 1..=40 ASCII bytes
/// or repeat an earlier one are skipped (the writer never makes them).
pub fn sections_from_frames(mut data: &[u8]) -> Container {
    let mut c = Container::new();
    while let Some((&name_len, rest)) = data.split_first() {
        let name_len = (name_len as usize).min(rest.len());
        let (name, rest) = rest.split_at(name_len);
        let (len, rest) = if rest.len() >= 4 {
            let (l, r) = rest.split_at(4);
            (u32::from_le_bytes(l.try_into().expect("4")) as usize, r)
        } else {
            (0, &rest[rest.len()..])
        };
        let len = len.min(rest.len());
        let (section, rest) = rest.split_at(len);
        data = rest;
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        if name.is_empty() || name.len() > 40 || !name.is_ascii() || c.get(name).is_some() {
            continue;
        }
        c.sections.push(Section {
            name: name.to_string(),
            data: section.to_vec(),
        });
    }
    c
}

/// The framing [`sections_from_frames`] reads, for seeds and tests.
pub fn frames_of(c: &Container) -> Vec<u8> {
    let mut out = Vec::new();
    for s in &c.sections {
        out.push(s.name.len() as u8);
        out.extend_from_slice(s.name.as_bytes());
        out.extend_from_slice(&(s.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&s.data);
    }
    out
}

/// A decoded snapshot re-encodes to sections that decode to the same
/// sections again (encode(decode(x)) is a fixed point), and its file bytes
/// parse back to the same container.
fn check_snapshot(decoded: Result<Snapshot, vmm::snapshot::format::FormatError>) {
    let s = match decoded {
        Ok(s) => s,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = s.meta.source_info();
    for v in &s.vcpus {
        let _ = (v.xcr0(), v.msr(0x10));
    }
    let c = s.to_container();
    let again = Snapshot::from_container(&c).expect("an encoded snapshot decodes");
    assert_eq!(again.to_container(), c);
    assert_eq!(Container::parse(&c.to_bytes()), Ok(c));
}

/// A peer's API server's answer (`vmm bench peers`' HTTP/1.1 response
/// reader): refused or read, never a panic, and a body never longer than
/// the response.
pub fn http_response(data: &[u8]) {
    if let Ok((_, body)) = vmm::fuzzing::http_response(data) {
        assert!(body.len() <= data.len().max(1) * 3, "a body from nowhere");
    }
}

/// `vmm features import`: format detection, then the `cpuid -r`,
/// InstLatx64, Firecracker or profile parser, then the profile checks.
pub fn import_formats(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = vmm::fuzzing::import(text) {
        assert!(!e.is_empty());
    }
}

/// Guest RAM the bzImage target's images must fit.
const BZ_RAM: u64 = 64 << 20;

/// A bzImage's header (`arch::linux::check_bzimage`, before any VM
/// exists, as `vmm run` does), then, for an image it accepts, where an
/// initrd goes (`initrd_address`, of a size taken from the image's last 8
/// bytes: from none to twice the RAM) and linux-loader's bzImage loader.
pub fn bzimage_header(data: &[u8]) {
    let plan = match vmm::internal::arch::linux::check_bzimage(data, BZ_RAM) {
        Ok(plan) => plan,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert!(
        plan.end <= BZ_RAM,
        "accepted an image needing {:#x}",
        plan.end
    );
    let tail: [u8; 8] = data[data.len() - 8..].try_into().expect("8 bytes");
    let initrd = u64::from_le_bytes(tail) % (2 * BZ_RAM + 1);
    if let Some(at) =
        vmm::internal::arch::linux::initrd_address(BZ_RAM, plan.initrd_limit, plan.end, initrd)
    {
        assert_eq!(at % 4096, 0, "initrd at {at:#x}");
        assert!(
            at >= plan.end,
            "initrd at {at:#x} under the kernel's {:#x}",
            plan.end
        );
        let top = at.checked_add(initrd).expect("no overflow");
        assert!(
            top <= BZ_RAM && top <= plan.initrd_limit,
            "initrd of {initrd:#x} at {at:#x} past RAM or the limit {:#x}",
            plan.initrd_limit
        );
    }
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), BZ_RAM as usize)])
        .expect("64 MiB of anonymous memory");
    if let Err(e) = vmm::internal::arch::linux::load_bzimage(&mem, data, "fuzz") {
        let _ = e.to_string();
    }
}

/// A guest console read for Linux's `x86/fpu:` lines
/// (`run::linux_xstate`), compared with a layout (QEMU TCG's leaf 0xD)
/// in both formats: differences are named, never a panic.
pub fn linux_console(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Some(mut found) = vmm::internal::run::linux_xstate::LinuxXstate::parse(&text) else {
        return;
    };
    let info = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
        0 => xstate::CpuidRegs::new(0x207, 2696, 2696, 0),
        1 => xstate::CpuidRegs::new(0x5, 0, 0, 0),
        2 => xstate::CpuidRegs::new(256, 576, 0, 0),
        9 => xstate::CpuidRegs::new(8, 2688, 0, 0),
        _ => xstate::CpuidRegs::default(),
    })
    .expect("a valid leaf 0xD");
    let mut compacted = found.clone();
    found.compare(&info, XfeatureMask::from_bits(0x207), false);
    compacted.compare(&info, XfeatureMask::from_bits(0x7), true);
}
