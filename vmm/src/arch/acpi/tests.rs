use super::*;

fn sum(b: &[u8]) -> u8 {
    b.iter().fold(0u8, |a, x| a.wrapping_add(*x))
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The table at guest address `addr` in `t`, as long as its header says.
fn table(t: &AcpiTables, addr: u64) -> &[u8] {
    let at = (addr - ACPI_START) as usize;
    &t.bytes[at..at + u32_at(&t.bytes, at + 4) as usize]
}

/// The common header of every table after the RSDP: signature, length,
/// revision, checksum (`..`), OEM ID "VMM   ", table ID "XSTATEVM",
/// revision 1, creator "RVAT" 0x01000000.
fn header(sig: &str, len: u32, rev: u8, checksum: u8) -> String {
    let sig: String = sig.bytes().map(|b| format!("{b:02x}")).collect();
    format!(
        "{sig} {:08x} {rev:02x}{checksum:02x} 564d4d202020 585354415445564d 01000000 52564154 00000001",
        len.swap_bytes()
    )
}

/// The tables for one and two vCPUs, byte for byte (disassembled with
/// ACPICA's `iasl -d` when written: no warning, every field as the
/// comments say). Only the MADT differs between the two.
#[test]
fn one_and_two_cpus_exact_bytes() {
    // RSDP: revision 2, length 36, the XSDT at 0xe0030, both checksums.
    let rsdp = "5253442050545220 8f 564d4d202020 02 00000000 24000000 30000e0000000000 9e 000000";
    // XSDT: the FADT at 0xe0070, the MADT at 0xe01f0.
    let xsdt = format!(
        "{} 70000e0000000000 f0010e0000000000",
        header("XSDT", 52, 1, 0)
    );
    // FADT 6.5, 276 bytes: all zero but the flags (HW_REDUCED_ACPI, bit
    // 20, at 0x70), the minor version 5 (0x83) and X_DSDT 0xe0190 (0x8c).
    let mut fadt = hex(&header("FACP", 276, 6, 0x0c));
    fadt.resize(276, 0);
    fadt[0x72] = 0x10;
    fadt[0x83] = 5;
    fadt[0x8c..0x94].copy_from_slice(&0xe_0190u64.to_le_bytes());
    // DSDT: Device (\_SB.COM1) { _HID EisaId ("PNP0501"), _UID 0,
    // _CRS { IO (Decode16, 0x3f8, 0x3f8, 1, 8), Interrupt (consumer,
    // edge, active high, exclusive) { 4 } } }.
    let dsdt = format!(
        "{} 5b8236 2e5f53425f434f4d31 085f484944 0c41d00501 085f554944 00 \
         085f435253 1116 0a13 4701f803f8030108 8906000301 04000000 7900",
        header("DSDT", 92, 2, 0x32)
    );
    // MADT: the local APIC at 0xfee00000, flags 0; processor UID n, APIC
    // ID n, enabled; the IOAPIC, ID = the vCPU count, at 0xfec00000, GSI
    // base 0. No interrupt source override (see the module doc).
    let madt1 = format!(
        "{} 0000e0fe 00000000 0008000001000000 010c0100 0000c0fe 00000000",
        header("APIC", 64, 1, 0xe4)
    );
    let madt2 = format!(
        "{} 0000e0fe 00000000 0008000001000000 0008010101000000 010c0200 0000c0fe 00000000",
        header("APIC", 72, 1, 0xd0)
    );
    for (n, madt) in [(1, madt1), (2, madt2)] {
        let mut want = vec![0u8; 0x1f0];
        for (at, bytes) in [
            (0x00, hex(rsdp)),
            (0x30, hex(&xsdt)),
            (0x70, fadt.clone()),
            (0x190, hex(&dsdt)),
        ] {
            want[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        want.extend(hex(&madt));
        let t = build(n).unwrap();
        assert_eq!(t.bytes, want, "{n} vCPUs");
        assert_eq!(
            t.tables,
            [
                (*b"XSDT", 0xe_0030),
                (*b"FACP", 0xe_0070),
                (*b"DSDT", 0xe_0190),
                (*b"APIC", 0xe_01f0)
            ]
        );
    }
}

/// Every count: the RSDP's two checksums, every table summing to 0 over
/// the length its header gives, the XSDT naming the FADT and the MADT,
/// the FADT the DSDT, each table 16-byte aligned and all of them inside
/// the reserved hole below 1 MiB.
#[test]
fn every_table_sums_to_zero_and_points_at_the_next() {
    for n in (1..=guest::protocol::record::MAX_CPUS).chain([64, 254]) {
        let t = build(n).unwrap();
        let b = &t.bytes;
        assert_eq!(&b[..8], b"RSD PTR ");
        assert_eq!(sum(&b[..20]), 0, "{n}: RSDP 1.0 checksum");
        assert_eq!(u32_at(b, 20), 36);
        assert_eq!(sum(&b[..36]), 0, "{n}: RSDP extended checksum");
        for &(sig, addr) in &t.tables {
            let tb = table(&t, addr);
            assert_eq!(&tb[..4], &sig);
            assert_eq!(sum(tb), 0, "{n}: {}", String::from_utf8_lossy(&sig));
            assert!(addr.is_multiple_of(16));
        }
        let xsdt = table(&t, u64_at(b, 24));
        assert_eq!(&xsdt[..4], b"XSDT");
        assert_eq!(xsdt.len(), 36 + 16);
        let fadt = table(&t, u64_at(xsdt, 36));
        assert_eq!(&fadt[..4], b"FACP");
        assert_eq!(u32_at(fadt, 0x70), 1 << 20, "HW_REDUCED_ACPI only");
        assert_eq!(&table(&t, u64_at(fadt, 0x8c))[..4], b"DSDT");
        let madt = table(&t, u64_at(xsdt, 44));
        assert_eq!(&madt[..4], b"APIC");
        assert_eq!(madt.len(), 44 + 8 * n as usize + 12);
        assert!(ACPI_START + b.len() as u64 <= RESET_VECTOR, "{n}");
    }
}

/// The MADT's entries for each count: one enabled local APIC per vCPU,
/// UID and APIC ID its index, then the IOAPIC with the next ID, at its
/// address, from GSI 0; nothing else.
#[test]
fn the_madt_lists_every_vcpu_and_the_ioapic() {
    for n in [1u32, 2, 3, 8, 254] {
        let t = build(n).unwrap();
        let madt = table(&t, t.tables[3].1);
        assert_eq!(u32_at(madt, 36), LAPIC_ADDR);
        let mut entries = &madt[44..];
        for id in 0..n as u8 {
            assert_eq!(&entries[..8], &[0, 8, id, id, 1, 0, 0, 0], "{n}: CPU {id}");
            entries = &entries[8..];
        }
        let mut ioapic = vec![1, 12, n as u8, 0];
        ioapic.extend(IOAPIC_ADDR.to_le_bytes());
        ioapic.extend(0u32.to_le_bytes());
        assert_eq!(entries, &ioapic[..], "{n}");
    }
}

/// The guest crate's own MADT parser (what the embedded guest reads)
/// counts every vCPU in the tables, from the RSDP.
#[test]
fn the_guest_parser_counts_every_cpu() {
    for n in 1..=guest::protocol::record::MAX_CPUS {
        let t = build(n).unwrap();
        let read = |addr: u64, buf: &mut [u8]| {
            let at = addr.wrapping_sub(ACPI_START) as usize;
            match t.bytes.get(at..at.saturating_add(buf.len())) {
                Some(s) if addr >= ACPI_START => {
                    buf.copy_from_slice(s);
                    true
                }
                _ => false,
            }
        };
        assert_eq!(guest::firmware::madt_cpus(&read, RSDP_ADDR), Some(n));
    }
}

#[test]
fn bad_counts_are_refused_naming_them() {
    assert_eq!(build(0), Err(AcpiError::NoCpus));
    assert!(build(254).is_ok());
    for n in [255, 256, 300, u32::MAX] {
        assert_eq!(build(n), Err(AcpiError::TooManyCpus(n)));
    }
    assert_eq!(
        AcpiError::TooManyCpus(255).to_string(),
        "255 CPUs do not fit the MADT's 8-bit APIC IDs beside the IOAPIC's"
    );
}

/// What lands in guest RAM is what [`build`] made, at 0xe0000.
#[test]
fn write_puts_the_tables_at_the_rsdp_address() {
    let mem = crate::vstate::machine::allocate_ram(4).unwrap();
    write(&mem, 2).unwrap();
    let want = build(2).unwrap().bytes;
    let mut got = vec![0u8; want.len()];
    mem.read_slice(&mut got, GuestAddress(RSDP_ADDR)).unwrap();
    assert_eq!(got, want);
    let mut stub = [0u8; 7];
    mem.read_slice(&mut stub, GuestAddress(0xf_fff0)).unwrap();
    assert_eq!(stub, [0xb0, 0xfe, 0xe6, 0x64, 0xf4, 0xeb, 0xfd]);
    assert!(matches!(
        write(&mem, 0),
        Err(MemoryError::Acpi(AcpiError::NoCpus))
    ));
}
