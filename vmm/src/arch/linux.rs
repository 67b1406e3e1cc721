//! The Linux boot protocol (`Documentation/arch/x86/boot.rst`) for a
//! bzImage: its header checked before any VM exists ([`check_bzimage`]),
//! its protected-mode part loaded by linux-loader's `BzImage` loader at
//! 1 MiB, and the zero page (`boot_params`: the loader's setup header, the
//! command line, the initrd, the e820 map) written by linux-loader's
//! `LinuxBootConfigurator`. The vCPU starts at the 64-bit entry
//! (`startup_64`, 0x200 past the load address) in long mode on the VMM's
//! identity map with `%rsi` at the zero page, as the protocol's 64-bit
//! boot asks (see `super::regs`).
//!
//! The initrd, for this protocol and for PVH (`hvm_start_info`'s module
//! list), goes at the top of the low RAM the kernel may address, page
//! aligned, above the kernel ([`initrd_address`]).

use std::io::Cursor;

use linux_loader::configurator::linux::LinuxBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::bootparam::{boot_e820_entry, boot_params, setup_header};
use linux_loader::loader::bzimage::BzImage;
use linux_loader::loader::KernelLoader;
use vm_memory::{GuestAddress, GuestMemoryMmap};

use super::layout::{CMDLINE_ADDR, HIGHMEM_START, LOW_RAM_END};
pub use crate::arch::error::BzImageError;
use crate::arch::error::{BootError, MemoryError};

/// Where the zero page goes: below the PVH start info, in the boot data
/// `vmm run` faults in ([`super::layout::BOOT_DATA`]).
pub const ZERO_PAGE_ADDR: u64 = 0x7000;
const _: () = assert!(ZERO_PAGE_ADDR + 4096 <= super::layout::START_INFO_ADDR);
/// `setup_header.type_of_loader`: "undefined" boot loader.
const LOADER_UNDEFINED: u8 = 0xff;
/// `xloadflags`: the kernel has the 64-bit entry at load address + 0x200.
const XLF_KERNEL_64: u16 = 1;
/// The 64-bit entry's offset from the load address.
const STARTUP_64_OFFSET: u64 = 0x200;
/// Smallest protocol with `xloadflags` (2.12).
const MIN_VERSION: u16 = 0x020c;
/// The header's end we read (`init_size` ends at 0x264).
const HEADER_END: usize = 0x264;

/// What a bzImage's header says, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BzImagePlan {
    /// Boot protocol version (0x20f is 2.15).
    pub version: u16,
    /// Bytes of real-mode setup code before the protected-mode part.
    pub setup_bytes: u64,
    /// Bytes of the protected-mode part (what is loaded at 1 MiB).
    pub kernel_bytes: u64,
    /// Memory the kernel needs from its load address while it
    /// decompresses itself (`init_size`).
    pub init_size: u64,
    /// The highest address an initrd may end at (`initrd_addr_max` + 1).
    pub initrd_limit: u64,
    /// The end of the room the kernel decompresses into (its preferred
    /// address + `init_size`): an initrd goes above it.
    pub end: u64,
}

/// Whether `bytes` carry the boot protocol's `HdrS` magic at 0x202.
pub fn is_bzimage(bytes: &[u8]) -> bool {
    bytes.get(0x202..0x206) == Some(b"HdrS")
}

fn le(bytes: &[u8], at: usize, n: usize) -> u64 {
    bytes[at..at + n]
        .iter()
        .rev()
        .fold(0, |v, &b| (v << 8) | u64::from(b))
}

/// Check a bzImage for a guest with `ram_bytes` of RAM: the header, the
/// file's length against it, the memory the kernel needs. Pure; never
/// panics on any input.
///
/// # Errors
///
/// The `BzImageError` naming the broken rule.
pub fn check_bzimage(bytes: &[u8], ram_bytes: u64) -> Result<BzImagePlan, BzImageError> {
    let len = bytes.len() as u64;
    if bytes.len() < HEADER_END {
        return Err(BzImageError::ShortHeader { len });
    }
    if !is_bzimage(bytes) {
        return Err(BzImageError::NoHeader);
    }
    let version = le(bytes, 0x206, 2) as u16;
    if version < MIN_VERSION {
        return Err(BzImageError::OldProtocol {
            major: (version >> 8) as u8,
            minor: version as u8,
        });
    }
    let loadflags = bytes[0x211];
    let xloadflags = le(bytes, 0x236, 2) as u16;
    if loadflags & 1 == 0 || xloadflags & XLF_KERNEL_64 == 0 {
        return Err(BzImageError::Not64 {
            loadflags,
            xloadflags,
        });
    }
    let code32_start = le(bytes, 0x214, 4);
    if code32_start < HIGHMEM_START {
        return Err(BzImageError::LowLoad(code32_start));
    }
    let setup_sects = match bytes[0x1f1] {
        0 => 4,
        n => u64::from(n),
    };
    let setup = (setup_sects + 1) * 512;
    // `syssize`: the protected-mode part in 16-byte paragraphs.
    let kernel = le(bytes, 0x1f4, 4) * 16;
    if setup + kernel > len || setup >= len {
        return Err(BzImageError::Truncated {
            len,
            need: setup + kernel,
            setup,
            kernel,
        });
    }
    let init_size = le(bytes, 0x260, 4);
    // The decompressor runs from where it was loaded up to its preferred
    // address (16 MiB for Debian's kernels) plus init_size.
    let pref = le(bytes, 0x258, 8).max(HIGHMEM_START);
    let need = pref.saturating_add(init_size);
    let ram = ram_bytes.min(LOW_RAM_END);
    if need > ram {
        return Err(BzImageError::TooBigForRam {
            need,
            pref,
            init_size,
            ram,
        });
    }
    Ok(BzImagePlan {
        version,
        setup_bytes: setup,
        kernel_bytes: len - setup,
        init_size,
        initrd_limit: le(bytes, 0x22c, 4) + 1,
        end: need,
    })
}

/// A bzImage loaded: its 64-bit entry and the setup header the zero page
/// carries.
#[derive(Clone, Copy, Debug)]
pub struct LoadedBzImage {
    /// `startup_64`: the load address + 0x200.
    pub entry64: u64,
    /// First byte past the loaded protected-mode part.
    pub end: u64,
    /// The header as the loader read it (with `code32_start` set).
    pub header: setup_header,
}

/// Load a bzImage [`check_bzimage`] accepted into guest memory at 1 MiB.
///
/// # Errors
///
/// linux-loader refusing the image or the memory, naming the image.
pub fn load_bzimage(
    mem: &GuestMemoryMmap,
    image: &[u8],
    name: &str,
) -> Result<LoadedBzImage, BootError> {
    let mut cursor = Cursor::new(image);
    let loaded = BzImage::load(mem, None, &mut cursor, Some(GuestAddress(HIGHMEM_START))).map_err(
        |source| BootError::BzImageLoad {
            image: name.to_string(),
            source,
        },
    )?;
    let header = loaded.setup_header.unwrap_or_default();
    Ok(LoadedBzImage {
        entry64: loaded.kernel_load.0 + STARTUP_64_OFFSET,
        end: loaded.kernel_end,
        header,
    })
}

/// Where an initrd of `size` bytes goes: the top of the low RAM the kernel
/// may address (`limit`), page aligned, above `kernel_end`; `None` when it
/// does not fit.
pub fn initrd_address(ram_bytes: u64, limit: u64, kernel_end: u64, size: u64) -> Option<u64> {
    let top = ram_bytes.min(LOW_RAM_END).min(limit);
    let at = top.checked_sub(size)? & !0xfff;
    (at >= kernel_end.max(HIGHMEM_START)).then_some(at)
}

/// Write the zero page for `loaded`: its setup header with the command
/// line (already at `CMDLINE_ADDR`, `cmdline_len` bytes), the initrd
/// (`(address, size)`), the ACPI RSDP's address (`acpi_rsdp_addr`,
/// protocol 2.14; an older kernel scans for it) and the e820 map of
/// `memmap`.
///
/// # Errors
///
/// The write failing.
pub fn write_zero_page(
    mem: &GuestMemoryMmap,
    loaded: &LoadedBzImage,
    cmdline_len: usize,
    initrd: Option<(u64, u64)>,
    rsdp: Option<u64>,
    memmap: &[(u64, u64, u32)],
) -> Result<(), MemoryError> {
    let mut params = boot_params {
        hdr: loaded.header,
        acpi_rsdp_addr: rsdp.unwrap_or(0),
        ..Default::default()
    };
    params.hdr.type_of_loader = LOADER_UNDEFINED;
    params.hdr.cmd_line_ptr = CMDLINE_ADDR as u32;
    params.hdr.cmdline_size = cmdline_len as u32;
    if let Some((at, size)) = initrd {
        params.hdr.ramdisk_image = at as u32;
        params.hdr.ramdisk_size = size as u32;
    }
    // The map has at most 4 entries (`super::boot`); the table holds 128.
    let mut n = 0u8;
    for (slot, &(addr, size, kind)) in params.e820_table.iter_mut().zip(memmap) {
        *slot = boot_e820_entry {
            addr,
            size,
            r#type: kind,
        };
        n += 1;
    }
    params.e820_entries = n;
    let bp = BootParams::new(&params, GuestAddress(ZERO_PAGE_ADDR));
    LinuxBootConfigurator::write_bootparams::<GuestMemoryMmap>(&bp, mem)
        .map_err(MemoryError::BootParams)
}

#[cfg(test)]
mod tests;
