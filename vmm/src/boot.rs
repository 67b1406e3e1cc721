//! PVH direct boot: load an ELF kernel with a `XEN_ELFNOTE_PHYS32_ENTRY`
//! note, write `hvm_start_info`, memory map and command line, and put the
//! boot vCPU in the state the PVH spec prescribes (32-bit protected mode,
//! paging off, flat segments, EBX = start-info address).

use std::io::Cursor;

use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs};
use linux_loader::configurator::pvh::PvhBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::elf::start_info::{hvm_memmap_table_entry, hvm_start_info};
use linux_loader::loader::elf::{Elf, PvhBootCapability};
use linux_loader::loader::KernelLoader;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use crate::error::{Error, Result};
use crate::memory::{
    BOOT_GDT_ADDR, CMDLINE_ADDR, CMDLINE_MAX, EBDA_START, HIGHMEM_START, MEMMAP_ADDR,
    START_INFO_ADDR,
};

const XEN_HVM_START_MAGIC: u32 = 0x336e_c578;
const E820_RAM: u32 = 1;
const E820_RESERVED: u32 = 2;

/// GDT selectors of the flat boot segments.
const CODE_SELECTOR: u16 = 0x10;
const DATA_SELECTOR: u16 = 0x18;
const TSS_SELECTOR: u16 = 0x20;

/// CR0.PE | CR0.ET.
const CR0_PE_ET: u64 = 0x11;

/// A loaded kernel: where it lives and where to start it.
#[derive(Clone, Copy, Debug)]
pub struct LoadedKernel {
    pub entry: u64,
    pub end: u64,
}

/// Load a PVH ELF kernel into guest memory. `name` names the image in errors.
pub fn load_kernel(mem: &GuestMemoryMmap, image: &[u8], name: &str) -> Result<LoadedKernel> {
    let bad = |reason: String| Error::KernelImage {
        image: name.to_string(),
        reason,
    };
    if image.len() < 4 || &image[..4] != b"\x7fELF" {
        return Err(bad(format!(
            "not an ELF file ({} bytes, no \\x7fELF magic)",
            image.len()
        )));
    }
    let mut cursor = Cursor::new(image);
    let result = Elf::load(mem, None, &mut cursor, Some(GuestAddress(HIGHMEM_START)))
        .map_err(|e| bad(format!("ELF load failed: {e}")))?;
    match result.pvh_boot_cap {
        PvhBootCapability::PvhEntryPresent(entry) => Ok(LoadedKernel {
            entry: entry.0,
            end: result.kernel_end,
        }),
        other => Err(bad(format!(
            "no usable PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY): {other}"
        ))),
    }
}

/// Write the command line, memory map and `hvm_start_info`.
pub fn write_boot_info(mem: &GuestMemoryMmap, cmdline: &str) -> Result<()> {
    if cmdline.len() >= CMDLINE_MAX || cmdline.as_bytes().contains(&0) {
        return Err(Error::Memory(format!(
            "kernel command line must be under {CMDLINE_MAX} bytes with no NUL ({} bytes given)",
            cmdline.len()
        )));
    }
    let mut bytes = cmdline.as_bytes().to_vec();
    bytes.push(0);
    mem.write_slice(&bytes, GuestAddress(CMDLINE_ADDR))
        .map_err(|e| Error::Memory(format!("writing the command line: {e}")))?;

    let ram_end = mem.last_addr().0 + 1;
    let memmap = [
        hvm_memmap_table_entry {
            addr: 0,
            size: EBDA_START,
            type_: E820_RAM,
            reserved: 0,
        },
        hvm_memmap_table_entry {
            addr: EBDA_START,
            size: HIGHMEM_START - EBDA_START,
            type_: E820_RESERVED,
            reserved: 0,
        },
        hvm_memmap_table_entry {
            addr: HIGHMEM_START,
            size: ram_end - HIGHMEM_START,
            type_: E820_RAM,
            reserved: 0,
        },
    ];
    let start_info = hvm_start_info {
        magic: XEN_HVM_START_MAGIC,
        version: 1,
        cmdline_paddr: CMDLINE_ADDR,
        memmap_paddr: MEMMAP_ADDR,
        memmap_entries: memmap.len() as u32,
        ..Default::default()
    };
    let mut params = BootParams::new(&start_info, GuestAddress(START_INFO_ADDR));
    params.set_sections(&memmap, GuestAddress(MEMMAP_ADDR));
    PvhBootConfigurator::write_bootparams::<GuestMemoryMmap>(&params, mem)
        .map_err(|e| Error::Memory(format!("writing PVH boot parameters: {e}")))?;
    Ok(())
}

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
) -> Result<kvm_regs> {
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
            .map_err(|e| Error::Memory(format!("writing the boot GDT: {e}")))?;
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
        rflags: 0x2,
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
