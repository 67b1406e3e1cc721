//! The interrupt hardware: each vCPU's LAPIC (its APIC ID, which this vmm
//! gives vCPU N as N) and the full irqchip's PICs, IOAPIC and PIT, each
//! field within what the chip can hold (what the guest can program, what
//! KVM fixes), so that `KVM_SET_LAPIC`, `KVM_SET_IRQCHIP` and
//! `KVM_SET_PIT2` load exactly a state the chips could have been in.

use kvm_bindings::{
    kvm_ioapic_state, kvm_irqchip, kvm_lapic_state, kvm_pic_state, kvm_pit_state2,
    KVM_PIT_FLAGS_HPET_LEGACY, KVM_PIT_FLAGS_SPEAKER_DATA_ON,
};
use zerocopy::{FromBytes, IntoBytes};

use super::fault::{invalid, Fault};
use crate::snapshot::state::{IrqchipState, IRQCHIP_SECTIONS};

/// Where KVM's IOAPIC sits (the guest cannot move it).
const IOAPIC_BASE: u64 = 0xfec0_0000;
/// The ELCR bits each PIC has (KVM's fixed masks: IRQs 0-2 and 8, 13 are
/// edge-only).
const ELCR_MASKS: [u8; 2] = [0xf8, 0xde];

/// vCPU `id`'s LAPIC: the ID register (offset 0x20, ID in bits 31:24)
/// says APIC ID `id`.
pub(super) fn check_lapic(id: u32, l: &kvm_lapic_state) -> Result<(), Fault> {
    let b = l.regs.as_bytes();
    let reg = u32::from_le_bytes([b[0x20], b[0x21], b[0x22], b[0x23]]);
    if reg >> 24 != id || reg & 0x00ff_ffff != 0 {
        return Err(invalid(
            format!("vcpu{id}.lapic ID"),
            format!(
                "the ID register {reg:#010x} says APIC ID {}; vcpu{id} is APIC ID {id}",
                reg >> 24
            ),
        ));
    }
    Ok(())
}

/// The full irqchip's three chips and the PIT.
pub(super) fn check_irqchip(irq: &IrqchipState) -> Result<(), Fault> {
    for ((chip, section), state) in
        IRQCHIP_SECTIONS
            .iter()
            .zip([&irq.pic_master, &irq.pic_slave, &irq.ioapic])
    {
        check_chip(*chip, section, state)?;
    }
    if let Some(p) = &irq.pit {
        check_pit(p)?;
    }
    Ok(())
}

/// One `kvm_irqchip`: its chip number the section's, the state of that
/// chip in the union, the rest of the union zero.
fn check_chip(chip: u32, section: &str, s: &kvm_irqchip) -> Result<(), Fault> {
    if s.chip_id != chip || s.pad != 0 {
        return Err(invalid(
            format!("{section}.chip_id"),
            format!(
                "chip {} (pad {:#x}); this section holds chip {chip}",
                s.chip_id, s.pad
            ),
        ));
    }
    let union = &s.as_bytes()[8..];
    let used = if chip < 2 {
        std::mem::size_of::<kvm_pic_state>()
    } else {
        std::mem::size_of::<kvm_ioapic_state>()
    };
    if union[used..].iter().any(|&b| b != 0) {
        return Err(invalid(section, "bytes past the chip's state are not zero"));
    }
    let fault = if chip < 2 {
        let pic = kvm_pic_state::read_from_bytes(&union[..used]).expect("16 bytes");
        pic_fault(&pic, ELCR_MASKS[chip as usize])
    } else {
        let io = kvm_ioapic_state::read_from_bytes(&union[..used]).expect("216 bytes");
        ioapic_fault(&io)
    };
    match fault {
        Some((field, why)) => Err(invalid(format!("{section}.{field}"), why)),
        None => Ok(()),
    }
}

/// What an 8259 cannot hold: flags beyond one bit, a priority beyond 7,
/// a vector base that is not a multiple of 8, an ELCR beyond KVM's mask.
fn pic_fault(p: &kvm_pic_state, elcr_mask: u8) -> Option<(&'static str, String)> {
    let flags = [
        p.read_reg_select,
        p.poll,
        p.special_mask,
        p.auto_eoi,
        p.rotate_on_auto_eoi,
        p.special_fully_nested_mode,
        p.init4,
    ];
    if flags.iter().any(|&b| b > 1) {
        return Some(("flags", format!("{flags:?}: each is 0 or 1")));
    }
    if p.priority_add > 7 || p.init_state > 3 {
        return Some((
            "priority_add",
            format!(
                "priority {} / init state {}: at most 7 / 3",
                p.priority_add, p.init_state
            ),
        ));
    }
    if p.irq_base & 7 != 0 {
        return Some((
            "irq_base",
            format!("{:#x} is not a multiple of 8 (ICW2)", p.irq_base),
        ));
    }
    if p.elcr_mask != elcr_mask || p.elcr & !elcr_mask != 0 {
        return Some((
            "elcr",
            format!(
                "ELCR {:#x} mask {:#x}; this PIC's mask is {elcr_mask:#x}",
                p.elcr, p.elcr_mask
            ),
        ));
    }
    None
}

/// What KVM's IOAPIC cannot hold: another base, a register select
/// beyond 8 bits, an ID beyond 4, an IRR beyond its 24 pins.
fn ioapic_fault(s: &kvm_ioapic_state) -> Option<(&'static str, String)> {
    if s.base_address != IOAPIC_BASE {
        return Some((
            "base_address",
            format!("{:#x}; KVM's IOAPIC is at {IOAPIC_BASE:#x}", s.base_address),
        ));
    }
    if s.ioregsel > 0xff || s.id > 0xf || s.irr >> 24 != 0 || s.pad != 0 {
        return Some((
            "ioregsel",
            format!(
                "ioregsel {:#x} id {:#x} irr {:#x} pad {:#x}: 8, 4 and 24 bits, pad 0",
                s.ioregsel, s.id, s.irr, s.pad
            ),
        ));
    }
    None
}

/// The PIT's three channels and flags, each field what an 8254 (and
/// KVM's model of it) can hold.
fn check_pit(p: &kvm_pit_state2) -> Result<(), Fault> {
    let known = KVM_PIT_FLAGS_HPET_LEGACY | KVM_PIT_FLAGS_SPEAKER_DATA_ON;
    if p.flags & !known != 0 || p.reserved != [0; 9] {
        return Err(invalid(
            "pit.flags",
            format!(
                "{:#x} (or the reserved words) has bits KVM does not define",
                p.flags
            ),
        ));
    }
    for (i, c) in p.channels.iter().enumerate() {
        let bad = c.count > 0x1_0000
            || !(c.mode <= 7 || c.mode == 0xff)
            || c.rw_mode > 3
            || c.read_state > 4
            || c.write_state > 4
            || c.count_latched > 3
            || c.status_latched > 1
            || c.bcd > 1
            || c.gate > 1;
        if bad {
            return Err(invalid(
                format!("pit.channels[{i}]"),
                format!(
                    "count {:#x} mode {} rw_mode {} read/write state {}/{} latched {}/{} bcd {} gate {}: \
                     outside what an 8254 channel holds",
                    c.count,
                    c.mode,
                    c.rw_mode,
                    c.read_state,
                    c.write_state,
                    c.count_latched,
                    c.status_latched,
                    c.bcd,
                    c.gate
                ),
            ));
        }
    }
    Ok(())
}
