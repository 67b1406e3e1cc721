//! The bzImage header rules, on synthetic headers and Debian's kernel.

use super::*;

const MIB: u64 = 1 << 20;

/// A minimal valid header: protocol 2.15, 64-bit, loaded high, 4 setup
/// sectors, a 64 KiB kernel, init_size 32 MiB from 16 MiB.
fn header() -> Vec<u8> {
    let mut b = vec![0u8; 5 * 512 + 0x1_0000];
    b[0x1f1] = 4;
    b[0x1f4..0x1f8].copy_from_slice(&(0x1_0000u32 / 16).to_le_bytes());
    b[0x1fe..0x200].copy_from_slice(&0xaa55u16.to_le_bytes());
    b[0x202..0x206].copy_from_slice(b"HdrS");
    b[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
    b[0x211] = 1;
    b[0x214..0x218].copy_from_slice(&(MIB as u32).to_le_bytes());
    b[0x22c..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    b[0x236..0x238].copy_from_slice(&1u16.to_le_bytes());
    b[0x258..0x260].copy_from_slice(&(16 * MIB).to_le_bytes());
    b[0x260..0x264].copy_from_slice(&(32 * MIB as u32).to_le_bytes());
    b
}

#[test]
fn a_valid_header_gives_its_plan() {
    let plan = check_bzimage(&header(), 256 * MIB).unwrap();
    assert_eq!(
        plan,
        BzImagePlan {
            version: 0x020f,
            setup_bytes: 5 * 512,
            kernel_bytes: 0x1_0000,
            init_size: 32 * MIB,
            initrd_limit: 0x8000_0000,
            end: 48 * MIB,
        }
    );
}

/// Each broken rule is named, never a panic: short, no magic, an old
/// protocol, 32-bit only, truncated, too big for RAM.
#[test]
fn each_broken_rule_is_named() {
    let ram = 256 * MIB;
    let e = |b: &[u8]| check_bzimage(b, ram).unwrap_err().to_string();
    assert!(e(&header()[..0x200]).starts_with("truncated: 512 bytes, shorter than"));
    let mut b = header();
    b[0x202] = b'X';
    assert_eq!(e(&b), "no \"HdrS\" boot protocol header at 0x202");
    let mut b = header();
    b[0x206..0x208].copy_from_slice(&0x020au16.to_le_bytes());
    assert!(
        e(&b).contains("boot protocol 2.10 has no 64-bit entry"),
        "{}",
        e(&b)
    );
    let mut b = header();
    b[0x236] = 0;
    assert!(e(&b).starts_with("not a 64-bit kernel"), "{}", e(&b));
    let mut b = header();
    b[0x216] = 0;
    assert_eq!(
        e(&b),
        "code32_start 0x0 is below 1 MiB: the kernel must load at 1 MiB"
    );
    let b = header();
    let cut = &b[..b.len() - 1];
    assert!(e(cut).contains("the header describes 68096"), "{}", e(cut));
    let small = check_bzimage(&header(), 40 * MIB).unwrap_err().to_string();
    assert!(small.contains("needs RAM up to 0x3000000"), "{small}");
    // Every length of a valid header: an error or a plan, no panic.
    let b = header();
    for n in 0..0x300 {
        let _ = check_bzimage(&b[..n], ram);
    }
}

/// The initrd goes at the top of what the kernel may address, page
/// aligned, above the kernel; it does not fit, None.
#[test]
fn initrd_goes_at_the_top_of_addressable_ram() {
    assert_eq!(
        initrd_address(256 * MIB, 1 << 31, 48 * MIB, 0x1800),
        Some(256 * MIB - 0x2000)
    );
    assert_eq!(
        initrd_address(4096 * MIB, 1 << 31, 48 * MIB, MIB),
        Some((1 << 31) - MIB)
    );
    assert_eq!(initrd_address(64 * MIB, 1 << 31, 48 * MIB, 20 * MIB), None);
    assert_eq!(initrd_address(64 * MIB, 1 << 31, 48 * MIB, u64::MAX), None);
}

/// The zero page written for a loaded bzImage: the header's magic, the
/// loader type, the command line, the initrd, the RSDP and the e820 map.
#[test]
fn the_zero_page_carries_cmdline_initrd_and_e820() {
    use vm_memory::Bytes;
    let mem = crate::vstate::machine::allocate_ram(64).unwrap();
    let loaded = load_bzimage(&mem, &header(), "test").unwrap();
    assert_eq!(loaded.entry64, HIGHMEM_START + 0x200);
    let map = [(0, 0x9fc00, 1), (0x9fc00, 0x60400, 2), (MIB, 63 * MIB, 1)];
    let rsdp = Some(crate::arch::acpi::RSDP_ADDR);
    write_zero_page(&mem, &loaded, 12, Some((60 * MIB, 4096)), rsdp, &map).unwrap();
    let at = |off: u64| GuestAddress(ZERO_PAGE_ADDR + off);
    let read32 = |off| mem.read_obj::<u32>(at(off)).unwrap();
    assert_eq!(read32(0x202), u32::from_le_bytes(*b"HdrS"));
    assert_eq!(mem.read_obj::<u8>(at(0x210)).unwrap(), 0xff);
    assert_eq!(read32(0x228), CMDLINE_ADDR as u32);
    assert_eq!(read32(0x238), 12);
    assert_eq!((read32(0x218), read32(0x21c)), (60 << 20, 4096));
    assert_eq!(mem.read_obj::<u8>(at(0x1e8)).unwrap(), 3);
    // `acpi_rsdp_addr` (protocol 2.14).
    assert_eq!(mem.read_obj::<u64>(at(0x70)).unwrap(), 0xe_0000);
    let last = 0x2d0 + 2 * 20;
    assert_eq!(mem.read_obj::<u64>(at(last)).unwrap(), MIB);
    assert_eq!(mem.read_obj::<u64>(at(last + 8)).unwrap(), 63 * MIB);
    assert_eq!(read32(last + 16), 1);
}
