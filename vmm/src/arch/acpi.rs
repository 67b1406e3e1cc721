//! The ACPI tables a PC guest (a stock Linux) finds its interrupt
//! controllers, its CPUs and its serial port in: the RSDP, the XSDT, a
//! hardware-reduced FADT, a DSDT describing COM1, and the MADT, built by
//! rust-vmm's `acpi_tables` crate and laid out one after the other from
//! [`ACPI_START`].
//!
//! Why ACPI, beside the MP table: Debian's kernel is built without
//! `CONFIG_X86_MPPARSE`, so without ACPI it finds no IOAPIC and runs its
//! local APIC in virtual-wire mode, where the 8259s' interrupts stop
//! arriving early in its boot on kvm_amd, and it never sees a second CPU.
//!
//! What the tables say, and why:
//! - The RSDP sits at [`RSDP_ADDR`], 0xe0000: inside the BIOS area Linux
//!   scans (0xe0000-0xfffff) when no boot protocol names it, and named
//!   by the zero page's `acpi_rsdp_addr` and PVH's `rsdp_paddr` too. The
//!   whole range lies in the 0x9fc00-0x100000 hole the memory map marks
//!   reserved (`super::boot`), so Linux never takes it for RAM.
//! - The FADT says `HW_REDUCED_ACPI`, as Firecracker's, Cloud
//!   Hypervisor's and QEMU microvm's do: no PM timer, SCI, GPE or sleep
//!   registers to emulate. Linux then leaves the 8259s alone and takes
//!   its tick from the local APIC timer; its ISA devices get interrupts
//!   only from ACPI, hence the DSDT's COM1 (`PNP0501`, ports 0x3f8-0x3ff,
//!   GSI 4 edge, active high).
//! - The MADT lists one enabled local APIC per vCPU (APIC ID = processor
//!   UID = vCPU index, as KVM numbers them) and KVM's in-kernel IOAPIC at
//!   0xfec00000 with GSI base 0 and the first APIC ID after the CPUs' (as
//!   the MP table gives it). No interrupt source override: KVM's default
//!   GSI routing (`kvm_setup_default_irq_routing`) sends GSI n, n < 16,
//!   to PIC pin n % 8 and IOAPIC pin n, and its PIT raises GSI 0; ISA IRQ
//!   n is GSI n, the identity Linux assumes without an override. QEMU's
//!   override of IRQ 0 to GSI 2 matches QEMU's own routing (GSI 0 to
//!   IOAPIC pin 2), not KVM's, and would point Linux at a pin nothing
//!   drives.

use acpi_tables::fadt::{FADTBuilder, Flags};
use acpi_tables::madt::{
    EnabledStatus, IoApic, LocalInterruptController, ProcessorLocalApic, MADT,
};
use acpi_tables::rsdp::Rsdp;
use acpi_tables::sdt::Sdt;
use acpi_tables::xsdt::XSDT;
use acpi_tables::{aml, Aml};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::layout::{EBDA_START, HIGHMEM_START};
use super::mptable::{IOAPIC_ADDR, LAPIC_ADDR};
pub use crate::arch::error::AcpiError;
use crate::arch::error::MemoryError;

/// Where the tables start: the RSDP, 16-byte aligned in the range Linux
/// scans for it.
pub const ACPI_START: u64 = 0xe_0000;
/// Where the RSDP is (the first table).
pub const RSDP_ADDR: u64 = ACPI_START;
/// The room the tables have: up to the reset vector's page.
pub const ACPI_MAX: usize = (0xf_f000 - ACPI_START) as usize;
// The tables lie in the memory map's reserved hole below 1 MiB.
const _: () = assert!(ACPI_START >= EBDA_START && ACPI_START.is_multiple_of(16));

/// The OEM ID every table carries (6 bytes, space padded).
const OEM_ID: [u8; 6] = *b"VMM   ";
/// The OEM table ID every table carries (8 bytes).
const OEM_TABLE_ID: [u8; 8] = *b"XSTATEVM";
/// The OEM revision of every table.
const OEM_REVISION: u32 = 1;
/// Each table after the RSDP starts on this boundary.
const ALIGN: usize = 16;
/// COM1: its ports and its ISA IRQ, which is its GSI (see the module doc).
const COM1_PORT: u16 = 0x3f8;
const COM1_GSI: u32 = 4;

/// The tables built: their bytes, to be placed at [`ACPI_START`], and
/// where each table lies (guest physical addresses), in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcpiTables {
    /// Every table, the RSDP first, each 16-byte aligned.
    pub bytes: Vec<u8>,
    /// Each table's signature and guest physical address.
    pub tables: Vec<([u8; 4], u64)>,
}

/// Build the tables for `cpus` vCPUs. A pure function.
///
/// # Errors
///
/// [`AcpiError::NoCpus`] for 0; [`AcpiError::TooManyCpus`] when an APIC
/// ID would not fit 8 bits beside the IOAPIC's (255 or more).
///
/// # Examples
///
/// ```
/// use vmm::internal::arch::acpi::{build, RSDP_ADDR};
/// let t = build(2).unwrap();
/// assert_eq!(&t.bytes[..8], b"RSD PTR ");
/// assert_eq!(t.tables[0], (*b"XSDT", RSDP_ADDR + 48));
/// ```
pub fn build(cpus: u32) -> Result<AcpiTables, AcpiError> {
    if cpus == 0 {
        return Err(AcpiError::NoCpus);
    }
    // APIC IDs 0..cpus, then the IOAPIC's; 0xff is the broadcast ID.
    let ioapic_id = u8::try_from(cpus)
        .ok()
        .filter(|&id| id < 0xff)
        .ok_or(AcpiError::TooManyCpus(cpus))?;
    let dsdt = dsdt();
    let madt = madt(cpus, ioapic_id);
    // The XSDT's length is known before its entries' addresses are.
    let rsdp_len = Rsdp::len();
    let xsdt_at = align(rsdp_len);
    let fadt_at = align(xsdt_at + 36 + 8 * 2);
    let fadt_len = acpi_tables::fadt::FADT::len();
    let dsdt_at = align(fadt_at + fadt_len);
    let madt_at = align(dsdt_at + dsdt.len());
    let end = madt_at + madt.len();
    if end > ACPI_MAX {
        return Err(AcpiError::TooManyCpus(cpus));
    }
    let addr = |offset: usize| ACPI_START + offset as u64;
    let fadt = bytes_of(
        &FADTBuilder::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION)
            .flag(Flags::HwReducedAcpi)
            .dsdt_64(addr(dsdt_at))
            .finalize(),
    );
    let mut xsdt = XSDT::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    xsdt.add_entry(addr(fadt_at));
    xsdt.add_entry(addr(madt_at));
    let xsdt = bytes_of(&xsdt);
    let rsdp = bytes_of(&Rsdp::new(OEM_ID, addr(xsdt_at)));

    let mut bytes = vec![0u8; end];
    let mut tables = Vec::with_capacity(4);
    for (at, table) in [
        (0, &rsdp),
        (xsdt_at, &xsdt),
        (fadt_at, &fadt),
        (dsdt_at, &dsdt),
        (madt_at, &madt),
    ] {
        bytes[at..at + table.len()].copy_from_slice(table);
        if at > 0 {
            tables.push((table[..4].try_into().unwrap_or_default(), addr(at)));
        }
    }
    Ok(AcpiTables { bytes, tables })
}

/// The DSDT: COM1 under `\_SB`, its ports and its interrupt.
fn dsdt() -> Vec<u8> {
    let hid = aml::EISAName::new("PNP0501");
    let uid: u8 = 0;
    let irq = aml::Interrupt::new(true, true, false, false, COM1_GSI);
    let ports = aml::IO::new(COM1_PORT, COM1_PORT, 1, 8);
    let crs = aml::ResourceTemplate::new(vec![&ports, &irq]);
    let (hid, uid, crs) = (
        aml::Name::new("_HID".into(), &hid),
        aml::Name::new("_UID".into(), &uid),
        aml::Name::new("_CRS".into(), &crs),
    );
    let com1 = aml::Device::new("_SB_.COM1".into(), vec![&hid, &uid, &crs]);
    let mut sdt = Sdt::new(*b"DSDT", 36, 2, OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    sdt.append_slice(&bytes_of(&com1));
    sdt.as_slice().to_vec()
}

/// The MADT: the local APICs, then the IOAPIC.
fn madt(cpus: u32, ioapic_id: u8) -> Vec<u8> {
    let mut madt = MADT::new(
        OEM_ID,
        OEM_TABLE_ID,
        OEM_REVISION,
        LocalInterruptController::Address(LAPIC_ADDR),
    );
    for id in 0..ioapic_id {
        madt.add_structure(ProcessorLocalApic::new(id, id, EnabledStatus::Enabled));
    }
    debug_assert_eq!(u32::from(ioapic_id), cpus);
    madt.add_structure(IoApic::new(ioapic_id, IOAPIC_ADDR, 0));
    bytes_of(&madt)
}

fn bytes_of(table: &dyn Aml) -> Vec<u8> {
    let mut v = Vec::new();
    table.to_aml_bytes(&mut v);
    v
}

fn align(offset: usize) -> usize {
    offset.next_multiple_of(ALIGN)
}

/// The x86 reset vector (f000:fff0), where Linux's `machine_real_restart`
/// jumps in real mode.
pub const RESET_VECTOR: u64 = 0xf_fff0;
/// What sits there, in place of a BIOS: `mov al, 0xfe; out 0x64, al;
/// hlt; jmp $-1`, the i8042 reset the VMM ends the run on.
///
/// Why: on a hardware-reduced ACPI platform Linux reboots through EFI
/// (`reboot_init`: `efi_reboot_required()` is the HW_REDUCED_ACPI flag),
/// and without EFI falls to `BOOT_BIOS`, a jump to this vector, before it
/// would try the i8042; a `reboot` or a `panic=N` would otherwise run
/// zeros in real mode until `--timeout`.
pub const RESET_STUB: [u8; 7] = [0xb0, 0xfe, 0xe6, 0x64, 0xf4, 0xeb, 0xfd];
// The stub lies in the reserved hole, past the tables' room.
const _: () = assert!(RESET_VECTOR + RESET_STUB.len() as u64 <= HIGHMEM_START);

/// Write the tables for `cpus` vCPUs ([`build`]) at [`ACPI_START`], and
/// the [`RESET_STUB`] at the [`RESET_VECTOR`].
///
/// # Errors
///
/// A count [`build`] refuses, or the write failing.
pub fn write(mem: &GuestMemoryMmap, cpus: u32) -> Result<(), MemoryError> {
    let tables = build(cpus).map_err(MemoryError::Acpi)?;
    for (what, bytes, at) in [
        ("the ACPI tables", &tables.bytes[..], ACPI_START),
        ("the reset vector", &RESET_STUB[..], RESET_VECTOR),
    ] {
        mem.write_slice(bytes, GuestAddress(at))
            .map_err(|source| MemoryError::Write { what, source })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
