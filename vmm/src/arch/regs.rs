//! The boot vCPU's entry state, two ways:
//!
//! - PVH ([`setup_vcpu_regs`]), as the PVH spec prescribes it: 32-bit
//!   protected mode, paging off, flat 4 GiB code and data segments, a busy
//!   TSS, EBX = the `hvm_start_info` address, and a boot GDT in guest
//!   memory that matches the segment registers. Every VMM can start a PVH
//!   kernel this way.
//! - vmm's direct 64-bit entry ([`setup_vcpu_regs_direct`]), for an image
//!   with a `"vmm"` entry note: the state a PVH kernel would reach itself
//!   with a dozen 32-bit instructions, set by `KVM_SET_SREGS` instead (as
//!   Firecracker starts a Linux kernel): long mode with paging on the
//!   VMM's identity map of the first GiB ([`super::paging`]), CR0 = PE MP
//!   ET NE WP PG, CR4 = PAE OSFXSR OSXMMEXCPT, EFER = LME LMA, a flat
//!   64-bit code segment (selector 0x08) and data segments (0x10), a busy
//!   64-bit TSS (0x18), a boot GDT in guest memory to match, interrupts
//!   off, EBX = the `hvm_start_info` address as for PVH, and RSI = the
//!   address where the guest writes the TSC of its first instruction
//!   ([`BOOT_TSC_ADDR`]). The guest's CPL0 instructions are emulated under
//!   kvm_pvm (~0.7 µs each): every one the VMM does instead is saved.

use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::boot::BootEntry;
use super::layout::{BOOT_GDT_ADDR, BOOT_TSC_ADDR, START_INFO_ADDR};
use super::paging::write_identity_map;
use crate::arch::error::MemoryError;

/// GDT selector of the flat code segment.
const CODE_SELECTOR: u16 = 0x10;
/// GDT selector of the flat data segment.
const DATA_SELECTOR: u16 = 0x18;
/// GDT selector of the boot TSS.
const TSS_SELECTOR: u16 = 0x20;

/// CR0.PE | CR0.ET.
const CR0_PE_ET: u64 = 0x11;
/// CR0 of the direct entry: PE, MP, ET, NE, WP, PG (the value our guest's
/// PVH path loads before its far jump into long mode).
const CR0_LONG: u64 = 0x8001_0033;
/// CR4 of the direct entry: PAE, OSFXSR, OSXMMEXCPT (likewise; the guest
/// sets OSXSAVE itself when CPUID says the CPU has XSAVE).
const CR4_LONG: u64 = 0x620;
/// EFER of the direct entry: LME and LMA (long mode, active).
const EFER_LONG: u64 = 0x500;

/// Direct entry: GDT selector of the 64-bit code segment.
const CODE64_SELECTOR: u16 = 0x08;
/// Direct entry: GDT selector of the data segment.
const DATA64_SELECTOR: u16 = 0x10;
/// Direct entry: GDT selector of the 64-bit TSS (two slots).
const TSS64_SELECTOR: u16 = 0x18;

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

/// Put the vCPU in the state `entry` prescribes, writing the boot GDT
/// (and for the direct entry its page tables) into guest memory.
pub fn setup_entry(
    mem: &GuestMemoryMmap,
    sregs: &mut kvm_sregs,
    entry: BootEntry,
) -> Result<kvm_regs, MemoryError> {
    match entry {
        BootEntry::Pvh(at) => setup_vcpu_regs(mem, sregs, at),
        BootEntry::Direct64(at) => setup_vcpu_regs_direct(mem, sregs, at),
        // The same long-mode state; the boot protocol wants the zero page
        // in %rsi and nothing else.
        BootEntry::Linux64(at) => Ok(kvm_regs {
            rbx: 0,
            rsi: crate::arch::linux::ZERO_PAGE_ADDR,
            ..setup_vcpu_regs_direct(mem, sregs, at)?
        }),
    }
}

/// Write `gdt` at [`BOOT_GDT_ADDR`] and point `sregs` at it.
fn write_gdt(mem: &GuestMemoryMmap, sregs: &mut kvm_sregs, gdt: &[u64]) -> Result<(), MemoryError> {
    for (i, d) in gdt.iter().enumerate() {
        mem.write_obj(*d, GuestAddress(BOOT_GDT_ADDR + 8 * i as u64))
            .map_err(|source| MemoryError::Write {
                what: "the boot GDT",
                source,
            })?;
    }
    sregs.gdt.base = BOOT_GDT_ADDR;
    sregs.gdt.limit = (gdt.len() * 8 - 1) as u16;
    Ok(())
}

/// Load flat segments and an empty IDT: CS `code`; DS, ES, FS, GS and SS
/// `data`; TR `tss`. Both entry states use it.
fn load_segments(sregs: &mut kvm_sregs, code: kvm_segment, data: kvm_segment, tss: kvm_segment) {
    sregs.idt.base = 0;
    sregs.idt.limit = 0;
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = tss;
}

/// Put the vCPU in the direct 64-bit entry state (see the module docs) at
/// `entry64`, and write the matching boot GDT and identity page tables.
/// The TSC slot at [`BOOT_TSC_ADDR`] is zeroed, so a non-zero value after
/// the run is the guest's.
pub fn setup_vcpu_regs_direct(
    mem: &GuestMemoryMmap,
    sregs: &mut kvm_sregs,
    entry64: u64,
) -> Result<kvm_regs, MemoryError> {
    let code = kvm_segment {
        db: 0,
        l: 1,
        ..segment(CODE64_SELECTOR, 0xb)
    };
    let data = segment(DATA64_SELECTOR, 0x3);
    let tss = kvm_segment {
        base: 0,
        limit: 0x67,
        selector: TSS64_SELECTOR,
        type_: 0xb,
        present: 1,
        s: 0,
        g: 0,
        db: 0,
        l: 0,
        ..code
    };
    // A 64-bit TSS descriptor takes two slots; base 0 leaves the upper
    // one zero.
    let gdt: [u64; 5] = [0, descriptor(&code), descriptor(&data), descriptor(&tss), 0];
    write_gdt(mem, sregs, &gdt)?;
    sregs.cr3 = write_identity_map(mem)?;
    mem.write_obj(0u64, GuestAddress(BOOT_TSC_ADDR))
        .map_err(|source| MemoryError::Write {
            what: "the boot TSC slot",
            source,
        })?;
    load_segments(sregs, code, data, tss);
    sregs.cr0 = CR0_LONG;
    sregs.cr4 = CR4_LONG;
    sregs.efer = EFER_LONG;

    Ok(kvm_regs {
        rip: entry64,
        rbx: START_INFO_ADDR,
        rsi: BOOT_TSC_ADDR,
        rflags: RFLAGS_RESERVED,
        ..Default::default()
    })
}

/// Put the vCPU in the PVH entry state and write the matching boot GDT.
pub fn setup_vcpu_regs(
    mem: &GuestMemoryMmap,
    sregs: &mut kvm_sregs,
    entry: u64,
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
    write_gdt(mem, sregs, &gdt)?;
    load_segments(sregs, code, data, tss);
    sregs.cr0 = CR0_PE_ET;
    sregs.cr3 = 0;
    sregs.cr4 = 0;
    sregs.efer = 0;

    Ok(kvm_regs {
        rip: entry,
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

    #[test]
    fn direct_entry_state() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 4 << 20)]).unwrap();
        mem.write_obj(0xdead_beefu64, GuestAddress(BOOT_TSC_ADDR))
            .unwrap();
        let mut sregs = kvm_sregs::default();
        let regs = setup_vcpu_regs_direct(&mem, &mut sregs, 0x10_0040).unwrap();
        assert_eq!(
            (regs.rip, regs.rbx, regs.rsi),
            (0x10_0040, START_INFO_ADDR, BOOT_TSC_ADDR)
        );
        assert_eq!(regs.rflags, 0x2);
        assert_eq!(mem.read_obj::<u64>(GuestAddress(BOOT_TSC_ADDR)).unwrap(), 0);
        // The 64-bit code descriptor a long-mode GDT carries (L=1, D=0),
        // and the same flat data descriptor as PVH.
        let gdt = |i: u64| {
            mem.read_obj::<u64>(GuestAddress(BOOT_GDT_ADDR + 8 * i))
                .unwrap()
        };
        assert_eq!(gdt(1), 0x00af_9b00_0000_ffff);
        assert_eq!(gdt(2), 0x00cf_9300_0000_ffff);
        assert_eq!(gdt(3), 0x0000_8b00_0000_0067);
        assert_eq!((sregs.gdt.base, sregs.gdt.limit), (BOOT_GDT_ADDR, 39));
        assert_eq!((sregs.cs.selector, sregs.cs.l, sregs.cs.db), (0x08, 1, 0));
        assert_eq!((sregs.ss.selector, sregs.tr.selector), (0x10, 0x18));
        assert_eq!(
            (sregs.cr0, sregs.cr3, sregs.cr4, sregs.efer),
            (0x8001_0033, 0x9000, 0x620, 0x500)
        );
    }
}
