//! The Intel MultiProcessor Specification (version 1.4) tables that tell a
//! guest how many CPUs it has, written by the VMM where the specification
//! says firmware leaves them: the 16-byte floating pointer structure and,
//! right after it, the configuration table, in the first KiB of the EBDA
//! ([`MPTABLE_ADDR`], inside the reserved 0x9fc00..0x100000 range of the
//! memory map).
//!
//! The configuration table holds one processor entry per vCPU (local APIC
//! ID = vCPU index, as KVM numbers them; vCPU 0 is the bootstrap
//! processor), one ISA bus, the usual local interrupts (ExtINT on LINT0,
//! NMI on LINT1) and, when the VM has one (a full in-kernel irqchip,
//! `KVM_CREATE_IRQCHIP`), the IOAPIC with the sixteen ISA interrupts
//! routed one to one to its inputs. A split irqchip has no IOAPIC to
//! describe (see `vstate::smp`). Both structures carry the checksums the
//! specification asks for (every byte of the structure sums to 0 modulo
//! 256).
//!
//! Every machine gets a table, one vCPU too. A guest that finds none in
//! the EBDA searches the BIOS area, 0xf0000..0x100000, for it: sixteen
//! pages that are all zero here, and on a KVM that builds its shadow page
//! tables on demand (kvm_pvm) the first touch of each is an exit. With
//! the table the search ends in the EBDA's first 16 bytes.

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::layout::EBDA_START;
use crate::arch::error::MemoryError;
pub use crate::arch::error::MpTableError;

/// Where the floating pointer structure goes: the first KiB of the EBDA,
/// the first place a guest searches.
pub const MPTABLE_ADDR: u64 = EBDA_START;
/// The room the tables have there (the EBDA's first KiB).
pub const MPTABLE_MAX: usize = 1024;
/// The local APIC's MMIO base (the architectural default).
pub const LAPIC_ADDR: u32 = 0xfee0_0000;
/// The IOAPIC's MMIO base (the PC default, where KVM's in-kernel IOAPIC
/// answers).
pub const IOAPIC_ADDR: u32 = 0xfec0_0000;
/// MP specification revision 1.4.
const SPEC_REV: u8 = 4;
/// Local APIC version of an integrated xAPIC.
const LAPIC_VERSION: u8 = 0x14;
/// IOAPIC version KVM's IOAPIC reports (82093AA-style, 24 inputs).
const IOAPIC_VERSION: u8 = 0x11;
/// The ISA bus's ID in the table.
const ISA_BUS: u8 = 0;
/// Legacy ISA interrupts routed to the IOAPIC.
const ISA_IRQS: u8 = 16;
/// The OEM ID field (8 bytes, space padded).
const OEM_ID: &[u8; 8] = b"VMM     ";
/// The product ID field (12 bytes, space padded).
const PRODUCT_ID: &[u8; 12] = b"XSTATE VMM  ";

/// Entry types of the base configuration table.
const ENTRY_PROCESSOR: u8 = 0;
const ENTRY_BUS: u8 = 1;
const ENTRY_IOAPIC: u8 = 2;
const ENTRY_IO_INTERRUPT: u8 = 3;
const ENTRY_LOCAL_INTERRUPT: u8 = 4;
/// Interrupt types of interrupt assignment entries.
const INT_VECTORED: u8 = 0;
const INT_NMI: u8 = 1;
const INT_EXTINT: u8 = 3;
/// Processor entry flags: enabled, bootstrap processor.
const CPU_ENABLED: u8 = 1;
const CPU_BSP: u8 = 2;

/// What the processor entries say about every CPU: CPUID leaf 1 EAX
/// (family, model, stepping) and EDX (feature flags) of the guest's table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSignature {
    /// CPUID.1 EAX.
    pub eax: u32,
    /// CPUID.1 EDX.
    pub edx: u32,
}

/// The bytes of the floating pointer structure followed by the
/// configuration table for `cpus` CPUs, with the IOAPIC and its ISA
/// interrupts when `ioapic`, to be placed at `MPTABLE_ADDR`. A pure
/// function.
pub fn build(cpus: u32, sig: CpuSignature, ioapic: bool) -> Result<Vec<u8>, MpTableError> {
    if cpus == 0 {
        return Err(MpTableError::NoCpus);
    }
    // The IOAPIC takes the first APIC ID after the CPUs' (IDs are 8 bits).
    let ioapic_id = u8::try_from(cpus).map_err(|_| MpTableError::TooManyCpus(cpus))?;
    let table_addr = MPTABLE_ADDR as u32 + 16;

    let mut entries = Vec::new();
    let mut count: u16 = 0;
    for id in 0..cpus {
        let flags = CPU_ENABLED | if id == 0 { CPU_BSP } else { 0 };
        entries.extend_from_slice(&[ENTRY_PROCESSOR, id as u8, LAPIC_VERSION, flags]);
        entries.extend_from_slice(&sig.eax.to_le_bytes());
        entries.extend_from_slice(&sig.edx.to_le_bytes());
        entries.extend_from_slice(&[0; 8]);
        count += 1;
    }
    entries.extend_from_slice(&[ENTRY_BUS, ISA_BUS]);
    entries.extend_from_slice(b"ISA   ");
    count += 1;
    if ioapic {
        entries.extend_from_slice(&[ENTRY_IOAPIC, ioapic_id, IOAPIC_VERSION, 1]);
        entries.extend_from_slice(&IOAPIC_ADDR.to_le_bytes());
        count += 1;
        for irq in 0..ISA_IRQS {
            // Flags 0: polarity and trigger mode conform to the bus (ISA:
            // edge, active high).
            entries.extend_from_slice(&[ENTRY_IO_INTERRUPT, INT_VECTORED, 0, 0]);
            entries.extend_from_slice(&[ISA_BUS, irq, ioapic_id, irq]);
            count += 1;
        }
    }
    for (kind, lint) in [(INT_EXTINT, 0u8), (INT_NMI, 1u8)] {
        // Destination 0xff: every local APIC.
        entries.extend_from_slice(&[ENTRY_LOCAL_INTERRUPT, kind, 0, 0]);
        entries.extend_from_slice(&[ISA_BUS, 0, 0xff, lint]);
        count += 1;
    }

    let table_len = 44 + entries.len();
    if 16 + table_len > MPTABLE_MAX {
        return Err(MpTableError::TooManyCpus(cpus));
    }
    let mut table = Vec::with_capacity(table_len);
    table.extend_from_slice(b"PCMP");
    table.extend_from_slice(&(table_len as u16).to_le_bytes());
    table.push(SPEC_REV);
    table.push(0); // checksum, below
    table.extend_from_slice(OEM_ID);
    table.extend_from_slice(PRODUCT_ID);
    table.extend_from_slice(&0u32.to_le_bytes()); // OEM table pointer
    table.extend_from_slice(&0u16.to_le_bytes()); // OEM table size
    table.extend_from_slice(&count.to_le_bytes());
    table.extend_from_slice(&LAPIC_ADDR.to_le_bytes());
    table.extend_from_slice(&0u16.to_le_bytes()); // extended table length
    table.push(0); // extended table checksum (no extended entries)
    table.push(0); // reserved
    table.extend_from_slice(&entries);
    table[7] = checksum(&table);

    let mut out = Vec::with_capacity(16 + table_len);
    out.extend_from_slice(b"_MP_");
    out.extend_from_slice(&table_addr.to_le_bytes());
    out.push(1); // length in 16-byte paragraphs
    out.push(SPEC_REV);
    out.push(0); // checksum, below
    out.extend_from_slice(&[0; 5]); // feature bytes: a configuration table is present
    out[10] = checksum(&out);
    out.extend_from_slice(&table);
    Ok(out)
}

/// The byte that makes `bytes` (with a 0 in its place) sum to 0 mod 256.
fn checksum(bytes: &[u8]) -> u8 {
    0u8.wrapping_sub(bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b)))
}

/// Write the tables for `cpus` CPUs ([`build`]) at [`MPTABLE_ADDR`].
pub fn write(
    mem: &GuestMemoryMmap,
    cpus: u32,
    sig: CpuSignature,
    ioapic: bool,
) -> Result<(), MemoryError> {
    let bytes = build(cpus, sig, ioapic).map_err(MemoryError::MpTable)?;
    mem.write_slice(&bytes, GuestAddress(MPTABLE_ADDR))
        .map_err(|source| MemoryError::Write {
            what: "the MP table",
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPUID.1 EAX/EDX of a Zen 3 EPYC (family 0x19, model 1).
    const ZEN3: CpuSignature = CpuSignature {
        eax: 0x00a1_0f11,
        edx: 0x178b_fbff,
    };

    fn sum(b: &[u8]) -> u8 {
        b.iter().fold(0u8, |a, x| a.wrapping_add(*x))
    }

    #[test]
    fn two_cpus_exact_bytes() {
        let sig = ZEN3;
        let b = build(2, sig, true).unwrap();
        // 16 (pointer) + 44 (header) + 2*20 + 8 (bus) + 8 (IOAPIC) + 16*8 + 2*8.
        assert_eq!(b.len(), 16 + 44 + 40 + 8 + 8 + 128 + 16);
        // Floating pointer: signature, table right after it at 0x9fc10.
        assert_eq!(
            &b[..16],
            &[b'_', b'M', b'P', b'_', 0x10, 0xfc, 0x09, 0x00, 1, 4, b[10], 0, 0, 0, 0, 0]
        );
        assert_eq!(b[10], 0x8b, "pointer checksum");
        assert_eq!(sum(&b[..16]), 0);
        let t = &b[16..];
        assert_eq!(&t[..4], b"PCMP");
        assert_eq!(u16::from_le_bytes([t[4], t[5]]) as usize, t.len());
        assert_eq!(t[6], 4);
        assert_eq!(sum(t), 0, "table checksum");
        assert_eq!(&t[8..16], b"VMM     ");
        assert_eq!(&t[16..28], b"XSTATE VMM  ");
        assert_eq!(u16::from_le_bytes([t[34], t[35]]), 2 + 1 + 1 + 16 + 2);
        assert_eq!(&t[36..40], &[0x00, 0x00, 0xe0, 0xfe]);
        // Processor 0: the BSP; processor 1 enabled only.
        assert_eq!(
            &t[44..64],
            &[
                0, 0, 0x14, 3, 0x11, 0x0f, 0xa1, 0x00, 0xff, 0xfb, 0x8b, 0x17, 0, 0, 0, 0, 0, 0, 0,
                0
            ]
        );
        assert_eq!(&t[64..68], &[0, 1, 0x14, 1]);
        assert_eq!(&t[84..92], &[1, 0, b'I', b'S', b'A', b' ', b' ', b' ']);
        assert_eq!(&t[92..100], &[2, 2, 0x11, 1, 0x00, 0x00, 0xc0, 0xfe]);
        // ISA IRQ 4 to IOAPIC 2 input 4.
        assert_eq!(&t[100 + 4 * 8..100 + 5 * 8], &[3, 0, 0, 0, 0, 4, 2, 4]);
        // ExtINT on LINT0, NMI on LINT1, every local APIC.
        assert_eq!(&t[228..236], &[4, 3, 0, 0, 0, 0, 0xff, 0]);
        assert_eq!(&t[236..244], &[4, 1, 0, 0, 0, 0, 0xff, 1]);
        assert_eq!(t[7], 0xe7, "table checksum byte");
    }

    /// A split irqchip's table: the same processors, bus and local
    /// interrupts, no IOAPIC and no ISA interrupt entries.
    #[test]
    fn without_an_ioapic_two_cpus_exact_bytes() {
        let sig = ZEN3;
        let with = build(2, sig, true).unwrap();
        let b = build(2, sig, false).unwrap();
        // 16 (pointer) + 44 (header) + 2*20 + 8 (bus) + 2*8.
        assert_eq!(b.len(), 16 + 44 + 40 + 8 + 16);
        assert_eq!(&b[..10], &with[..10], "pointer to the same place");
        assert_eq!(sum(&b[..16]), 0);
        let t = &b[16..];
        assert_eq!(u16::from_le_bytes([t[4], t[5]]) as usize, t.len());
        assert_eq!(sum(t), 0, "table checksum");
        assert_eq!(u16::from_le_bytes([t[34], t[35]]), 2 + 1 + 2);
        // The header but for the entry count, and the processor and bus
        // entries, as with an IOAPIC; then the local interrupts right after
        // the bus.
        assert_eq!(&t[8..34], &with[16 + 8..16 + 34]);
        assert_eq!(&t[36..92], &with[16 + 36..16 + 92]);
        assert_eq!(&t[92..100], &[4, 3, 0, 0, 0, 0, 0xff, 0]);
        assert_eq!(&t[100..108], &[4, 1, 0, 0, 0, 0, 0xff, 1]);
    }

    #[test]
    fn every_count_sums_to_zero_and_fits() {
        for n in 1..=guest::protocol::record::MAX_CPUS {
            let b = build(n, CpuSignature::default(), true).unwrap();
            assert_eq!(sum(&b[..16]), 0, "{n}");
            assert_eq!(sum(&b[16..]), 0, "{n}");
            assert!(b.len() <= MPTABLE_MAX);
            assert_eq!(u16::from_le_bytes([b[16 + 34], b[16 + 35]]) as u32, n + 20);
        }
    }

    /// The guest's own parser finds every CPU in what the VMM writes.
    #[test]
    fn the_guest_parser_reads_the_table() {
        for (n, ioapic) in
            (1..=guest::protocol::record::MAX_CPUS).flat_map(|n| [(n, true), (n, false)])
        {
            let mut ram = vec![0u8; 0x10_0000];
            let b = build(n, CpuSignature::default(), ioapic).unwrap();
            let at = MPTABLE_ADDR as usize;
            ram[at..at + b.len()].copy_from_slice(&b);
            let read = |addr: u64, buf: &mut [u8]| {
                let a = addr as usize;
                match ram.get(a..a + buf.len()) {
                    Some(s) => {
                        buf.copy_from_slice(s);
                        true
                    }
                    None => false,
                }
            };
            assert_eq!(guest::firmware::mptable_cpus(&read), Some(n));
        }
    }

    #[test]
    fn bad_counts_are_refused() {
        assert_eq!(
            build(0, CpuSignature::default(), true),
            Err(MpTableError::NoCpus)
        );
        // 16 + 44 + 40 * 20 + 8 + 8 + 128 + 16 = 1020 bytes fit, 41 CPUs do not.
        assert_eq!(
            build(40, CpuSignature::default(), true).unwrap().len(),
            1020
        );
        assert_eq!(
            build(41, CpuSignature::default(), true),
            Err(MpTableError::TooManyCpus(41))
        );
        assert_eq!(
            build(300, CpuSignature::default(), true),
            Err(MpTableError::TooManyCpus(300))
        );
    }
}
