//! The embedded guest's layout keeps the pages a boot touches few. Under
//! kvm_pvm each page a boot touches first is a shadow-paging fault (about
//! 15 µs on a Zen 3 host), and KVM maps no neighbour with it for the
//! kernel's file-backed pages (docs/design.md, "Start-up"). These checks
//! read the symbol table of `vmm::GUEST_KERNEL`; no time is measured.

/// One ELF64 section: name, address, size.
struct Section {
    name: String,
    addr: u64,
    size: u64,
}

/// One ELF64 symbol: name, value, size.
struct Symbol {
    name: String,
    value: u64,
    size: u64,
}

fn u16_at(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_le_bytes(b[at..at + 2].try_into().unwrap()))
}

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn c_str(b: &[u8], at: usize) -> String {
    let end = b[at..].iter().position(|&c| c == 0).unwrap();
    String::from_utf8_lossy(&b[at..at + end]).into_owned()
}

/// The sections and the symbol table of the ELF64 image `b`.
fn read(b: &[u8]) -> (Vec<Section>, Vec<Symbol>) {
    assert_eq!(&b[..4], b"\x7fELF");
    let (shoff, shnum, shstrndx) = (u64_at(b, 0x28) as usize, u16_at(b, 0x3c), u16_at(b, 0x3e));
    let header = |i: usize| shoff + i * 64;
    let names = u64_at(b, header(shstrndx) + 0x18) as usize;
    let mut sections = Vec::new();
    let mut symbols = Vec::new();
    for i in 0..shnum {
        let h = header(i);
        sections.push(Section {
            name: c_str(b, names + u32_at(b, h)),
            addr: u64_at(b, h + 0x10),
            size: u64_at(b, h + 0x20),
        });
        if u32_at(b, h + 4) == 2 {
            // SHT_SYMTAB: entries of 24 bytes, names in the linked table.
            let (off, size) = (u64_at(b, h + 0x18) as usize, u64_at(b, h + 0x20) as usize);
            let strtab = u64_at(b, header(u32_at(b, h + 0x28)) + 0x18) as usize;
            for s in (off..off + size).step_by(24) {
                symbols.push(Symbol {
                    name: c_str(b, strtab + u32_at(b, s)),
                    value: u64_at(b, s + 8),
                    size: u64_at(b, s + 16),
                });
            }
        }
    }
    (sections, symbols)
}

fn section<'a>(sections: &'a [Section], name: &str) -> &'a Section {
    sections
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name} section"))
}

fn symbol<'a>(symbols: &'a [Symbol], name: &str) -> &'a Symbol {
    symbols
        .iter()
        .find(|s| s.name == name || s.name.contains(&format!("{}{name}", name.len())))
        .unwrap_or_else(|| panic!("no symbol {name}"))
}

/// The CPL3 trampolines lead `.text` and the flags the boot shares with
/// Rust lead `.data`: on the first page of each, which every boot touches
/// anyway, not on a page of `.boot` of their own.
#[test]
fn boot_trampolines_and_flags_share_pages_every_boot_touches() {
    let (sections, symbols) = read(vmm::GUEST_KERNEL);
    let boot = section(&sections, ".boot");
    for (sect, names) in [
        (
            ".text",
            &["user_entry", "fault_entry", "kernel_syscall_gate"][..],
        ),
        (
            ".data",
            &[
                "kernel_fault",
                "boot_xsetbv_failed",
                "user_ready",
                "bss_zeroed",
            ][..],
        ),
    ] {
        let s = section(&sections, sect);
        for name in names {
            let sym = symbol(&symbols, name);
            assert!(
                (s.addr..s.addr + 4096).contains(&sym.value),
                "{name} at {:#x} is not on the first page of {sect} ({:#x})",
                sym.value,
                s.addr
            );
            assert!(
                !(boot.addr..boot.addr + boot.size).contains(&sym.value),
                "{name} is in .boot"
            );
        }
    }
}

/// The per-AP reports, the one large static a one-CPU boot never touches,
/// lie after every other `.bss` object, so those (the CPUID cache, the
/// boot information, the flags) share a few pages.
#[test]
fn the_per_ap_reports_end_bss() {
    let (sections, symbols) = read(vmm::GUEST_KERNEL);
    let bss = section(&sections, ".bss");
    let in_bss = |s: &&Symbol| s.size > 0 && (bss.addr..bss.addr + bss.size).contains(&s.value);
    let reports = symbol(&symbols, "AP_REPORTS");
    assert!(
        reports.size > 64 * 1024,
        "AP_REPORTS is {} bytes",
        reports.size
    );
    for s in symbols.iter().filter(in_bss) {
        if s.value != reports.value {
            assert!(
                s.value + s.size <= reports.value,
                "{} ({:#x}, {} bytes) lies after AP_REPORTS ({:#x})",
                s.name,
                s.value,
                s.size,
                reports.value
            );
        }
    }
    // The small statics a boot uses, and the boot information, lie within
    // three pages of the CPUID cache, which starts them.
    let kept = symbol(&symbols, "KEPT");
    let boot_info = symbol(&symbols, "BOOT_INFO");
    assert!(boot_info.value >= kept.value);
    assert!(
        boot_info.value + boot_info.size - (kept.value & !0xfff) <= 3 * 4096,
        "the CPUID cache at {:#x} and the boot information at {:#x} span more than 3 pages",
        kept.value,
        boot_info.value
    );
}

/// Whether `name` matches the linker-script glob `pattern` (`*` only).
fn glob_matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// The section patterns `guest/linker.ld` lists for the boot path: the
/// input sections between `.text.trampolines` and the catch-all
/// `*(.text .text.*)`, as symbol-name globs (the `.text.` prefix off).
fn boot_path_patterns() -> Vec<String> {
    let script = include_str!("../../guest/linker.ld");
    let start = script
        .find("*(.text.trampolines)")
        .expect("the trampolines line");
    let end = script.find("*(.text .text.*)").expect("the catch-all line");
    script[start..end]
        .lines()
        .skip(1)
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("*(")?.strip_suffix(')'))
        .flat_map(|l| l.split_whitespace())
        .map(|p| {
            p.strip_prefix(".text.")
                .expect("a .text. pattern")
                .to_string()
        })
        .collect()
}

/// The functions every boot runs from `user_main` to the exit (found by
/// tracing a boot's executed code), as `guest/linker.ld` lists them, lie
/// in one run of pages right after the trampolines: a boot touched 15
/// pages of `.text` with them scattered, each a shadow-paging fault under
/// kvm_pvm; together they take 9. Each pattern must still match (a rename
/// would silently scatter them again).
#[test]
fn the_boot_path_code_is_one_run_of_pages() {
    let (sections, symbols) = read(vmm::GUEST_KERNEL);
    let text = section(&sections, ".text");
    let boot_path = boot_path_patterns();
    assert!(boot_path.len() >= 15, "{boot_path:?}");
    assert!(glob_matches("a*c*e", "abcde") && !glob_matches("a*c", "acd"));
    let in_text = |s: &&Symbol| s.size > 0 && (text.addr..text.addr + text.size).contains(&s.value);
    let mut spans = Vec::new();
    for pattern in &boot_path {
        let found: Vec<&Symbol> = symbols
            .iter()
            .filter(in_text)
            .filter(|s| glob_matches(pattern, &s.name))
            .collect();
        assert!(
            !found.is_empty(),
            "no function in .text matches {pattern:?}"
        );
        spans.extend(found.iter().map(|s| (s.value, s.value + s.size)));
    }
    let start = spans.iter().map(|s| s.0).min().unwrap();
    let end = spans.iter().map(|s| s.1).max().unwrap();
    let bytes: u64 = spans.iter().map(|s| s.1 - s.0).sum();
    assert!(
        start - text.addr < 256,
        "the boot path starts at {start:#x}, not after the trampolines at {:#x}",
        text.addr
    );
    // Alignment padding between functions (16 bytes at most each) only.
    assert!(
        end - start <= bytes + 64 * spans.len() as u64,
        "the boot path's {bytes} bytes spread over {start:#x}..{end:#x}"
    );
    let pages = (end - 1) / 4096 - text.addr / 4096 + 1;
    assert!(pages <= 10, "the boot path takes {pages} pages");
}
