//! The boot vCPU's entry state as the PVH spec prescribes it: 32-bit
//! protected mode, paging off, flat 4 GiB code and data segments, a busy
//! TSS, EBX = the `hvm_start_info` address, and a boot GDT in guest memory
//! that matches the segment registers.

use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::boot::LoadedKernel;
use super::layout::{BOOT_GDT_ADDR, START_INFO_ADDR};
use crate::error::MemoryError;

/// GDT selector of the flat code segment.
const CODE_SELECTOR: u16 = 0x10;
/// GDT selector of the flat data segment.
const DATA_SELECTOR: u16 = 0x18;
/// GDT selector of the boot TSS.
const TSS_SELECTOR: u16 = 0x20;

/// CR0.PE | CR0.ET.
const CR0_PE_ET: u64 = 0x11;

/// RFLAGS with only the always-one bit 1 set.
const RFLAGS_RESERVED: u64 = 0x2;

/// A flat ring-0 segment: base 0, limit 4 GiB, 32-bit, present.
fn segment(selector: u16, type_: u8) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_,
        present: 1,
        dpl: 0,
        db: 1,
        s: 1,
        l: 0,
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// Pack a segment into an 8-byte GDT descriptor.
fn descriptor(seg: &kvm_segment) -> u64 {
    let limit = if seg.g == 1 {
        seg.limit >> 12
    } else {
        seg.limit
    } as u64;
    let base = seg.base;
    let access = (seg.type_ as u64)
        | ((seg.s as u64) << 4)
        | ((seg.dpl as u64) << 5)
        | ((seg.present as u64) << 7);
    let flags =
        (seg.avl as u64) | ((seg.l as u64) << 1) | ((seg.db as u64) << 2) | ((seg.g as u64) << 3);
    (limit & 0xffff)
        | ((base & 0xff_ffff) << 16)
        | (access << 40)
        | (((limit >> 16) & 0xf) << 48)
        | (flags << 52)
        | (((base >> 24) & 0xff) << 56)
}

/// Put the vCPU in the PVH entry state and write the matching boot GDT.
pub fn setup_vcpu_regs(
    mem: &GuestMemoryMmap,
    sregs: &mut kvm_sregs,
    kernel: &LoadedKernel,
) -> Result<kvm_regs, MemoryError> {
    let code = segment(CODE_SELECTOR, 0xb);
    let data = segment(DATA_SELECTOR, 0x3);
    let tss = kvm_segment {
        base: 0,
        limit: 0x67,
        selector: TSS_SELECTOR,
        type_: 0xb,
        present: 1,
        s: 0,
        g: 0,
        db: 0,
        ..code
    };
    // The guest loads its own GDT at once, but the PVH state must be
    // self-consistent in case it reloads a selector first.
    let gdt: [u64; 5] = [0, 0, descriptor(&code), descriptor(&data), descriptor(&tss)];
    for (i, d) in gdt.iter().enumerate() {
        mem.write_obj(*d, GuestAddress(BOOT_GDT_ADDR + 8 * i as u64))
            .map_err(|source| MemoryError::Write {
                what: "the boot GDT",
                source,
            })?;
    }
    sregs.gdt.base = BOOT_GDT_ADDR;
    sregs.gdt.limit = (gdt.len() * 8 - 1) as u16;
    sregs.idt.base = 0;
    sregs.idt.limit = 0;
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = tss;
    sregs.cr0 = CR0_PE_ET;
    sregs.cr3 = 0;
    sregs.cr4 = 0;
    sregs.efer = 0;

    Ok(kvm_regs {
        rip: kernel.entry,
        rbx: START_INFO_ADDR,
        rflags: RFLAGS_RESERVED,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_code_descriptor() {
        // The classic flat 32-bit code descriptor.
        assert_eq!(
            descriptor(&segment(CODE_SELECTOR, 0xb)),
            0x00cf_9b00_0000_ffff
        );
        assert_eq!(
            descriptor(&segment(DATA_SELECTOR, 0x3)),
            0x00cf_9300_0000_ffff
        );
    }
}
