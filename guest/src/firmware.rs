//! How many CPUs the platform has, read from the firmware tables PC
//! hypervisors provide: the ACPI MADT (QEMU microvm, Cloud Hypervisor;
//! reached through the RSDP address PVH's `hvm_start_info.rsdp_paddr`
//! gives) or the MultiProcessor Specification 1.4 table (this VMM,
//! Firecracker; found by scanning the places the specification lists).
//!
//! Pure parsers over a physical-memory reader ([`PhysRead`]), so the host
//! tests them on byte arrays and the kernel on identity-mapped RAM. Every
//! structure's signature and checksum are checked, every length bounded: a
//! table that fails a check counts as absent, never as a CPU count.

/// Reads guest-physical memory: `false` when `addr..addr + buf.len()` is
/// not readable (the reader decides; nothing is read then).
pub trait PhysRead {
    /// Fill `buf` from `addr`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;
}

impl<F: Fn(u64, &mut [u8]) -> bool> PhysRead for F {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self(addr, buf)
    }
}

/// Where the CPU count came from, as the report records it (index into
/// [`CPU_COUNT_SOURCES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum CpuCountSource {
    /// The `cpus=N` command-line word.
    Cmdline = 1,
    /// The ACPI MADT's enabled local APIC / x2APIC entries.
    Madt = 2,
    /// The MP table's enabled processor entries.
    MpTable = 3,
    /// No table: one CPU.
    Default = 4,
}

/// The names of [`CpuCountSource`] by value (0: not recorded).
pub const CPU_COUNT_SOURCES: [&str; 5] = ["", "cmdline", "madt", "mptable", "default"];

/// Longest ACPI table read (a MADT for hundreds of CPUs is a few KiB).
const MAX_TABLE: u32 = 64 * 1024;
/// Longest MP configuration table read (its length field is 16 bits).
const MAX_MP_TABLE: u32 = 0xffff;
/// The ACPI system description table header's size.
const SDT_HEADER: u32 = 36;

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from(u32_at(b, i)) | (u64::from(u32_at(b, i + 4)) << 32)
}

/// The 8-bit sum of `len` bytes at `addr` (`None`: unreadable).
fn sum(mem: &impl PhysRead, addr: u64, len: u32) -> Option<u8> {
    let mut chunk = [0u8; 256];
    let mut total = 0u8;
    let mut done = 0u32;
    while done < len {
        let n = (len - done).min(chunk.len() as u32) as usize;
        if !mem.read(addr + u64::from(done), &mut chunk[..n]) {
            return None;
        }
        total = chunk[..n].iter().fold(total, |a, b| a.wrapping_add(*b));
        done += n as u32;
    }
    Some(total)
}

/// The count of enabled processors the MADT reached through the RSDP at
/// `rsdp` lists (`None`: no valid RSDP, root table or MADT, or no enabled
/// processor in it).
pub fn madt_cpus(mem: &impl PhysRead, rsdp: u64) -> Option<u32> {
    if rsdp == 0 {
        return None;
    }
    let mut r = [0u8; 36];
    if !mem.read(rsdp, &mut r[..20]) || &r[..8] != b"RSD PTR " || sum(mem, rsdp, 20)? != 0 {
        return None;
    }
    // ACPI 2.0+: the XSDT's 64-bit entries when its extended checksum holds.
    let mut root = (u64::from(u32_at(&r, 16)), 4u32);
    if r[15] >= 2 && mem.read(rsdp, &mut r) && u32_at(&r, 20) >= 36 {
        let xsdt = u64_at(&r, 24);
        if xsdt != 0 && sum(mem, rsdp, u32_at(&r, 20).min(MAX_TABLE))? == 0 {
            root = (xsdt, 8);
        }
    }
    let (root, width) = root;
    let root_len = table(mem, root, if width == 8 { b"XSDT" } else { b"RSDT" })?;
    let entries = (root_len - SDT_HEADER) / width;
    for i in 0..entries {
        let mut e = [0u8; 8];
        let at = root + u64::from(SDT_HEADER + i * width);
        if !mem.read(at, &mut e[..width as usize]) {
            return None;
        }
        let addr = if width == 8 {
            u64_at(&e, 0)
        } else {
            u64::from(u32_at(&e, 0))
        };
        if let Some(len) = table(mem, addr, b"APIC") {
            return madt_entries(mem, addr, len);
        }
    }
    None
}

/// The length of the valid ACPI table with signature `sig` at `addr`
/// (header readable, length within bounds, checksum 0).
fn table(mem: &impl PhysRead, addr: u64, sig: &[u8; 4]) -> Option<u32> {
    let mut h = [0u8; SDT_HEADER as usize];
    if addr == 0 || !mem.read(addr, &mut h) || &h[..4] != sig {
        return None;
    }
    let len = u32_at(&h, 4);
    if !(SDT_HEADER..=MAX_TABLE).contains(&len) || sum(mem, addr, len)? != 0 {
        return None;
    }
    Some(len)
}

/// Enabled processor-local APIC (type 0) and x2APIC (type 9) entries of
/// the MADT of `len` bytes at `addr`.
fn madt_entries(mem: &impl PhysRead, addr: u64, len: u32) -> Option<u32> {
    // Header, then the local APIC address and flags (8 bytes).
    let mut at = SDT_HEADER + 8;
    let mut cpus = 0;
    while at + 2 <= len {
        let mut e = [0u8; 16];
        if !mem.read(addr + u64::from(at), &mut e[..2]) {
            return None;
        }
        let (kind, elen) = (e[0], u32::from(e[1]));
        if elen < 2 || at + elen > len {
            return None;
        }
        let flags_at = match (kind, elen) {
            (0, 8..) => Some(4),
            (9, 16..) => Some(8),
            _ => None,
        };
        if let Some(f) = flags_at {
            if !mem.read(addr + u64::from(at), &mut e[..elen.min(16) as usize]) {
                return None;
            }
            if u32_at(&e, f) & 1 != 0 {
                cpus += 1;
            }
        }
        at += elen;
    }
    (cpus > 0).then_some(cpus)
}

/// The places the MP specification says its floating pointer may be that
/// a guest without a BIOS data area can search: the last KiB of base
/// memory (where the EBDA starts on a 639 KiB PC) and the BIOS ROM.
const MP_SEARCH: [(u64, u64); 2] = [(0x9_fc00, 0xa_0000), (0xf_0000, 0x10_0000)];

/// The count of enabled processors the MP table lists (`None`: no valid
/// floating pointer or configuration table).
pub fn mptable_cpus(mem: &impl PhysRead) -> Option<u32> {
    for (from, to) in MP_SEARCH {
        let mut at = from;
        while at + 16 <= to {
            // The signature alone first: most of the 65 KiB searched holds
            // none, and reading guest memory a byte at a time is what the
            // search costs (when a VMM writes no table at all).
            let mut sig = [0u8; 4];
            if !mem.read(at, &mut sig) || &sig != b"_MP_" {
                at += 16;
                continue;
            }
            let mut p = [0u8; 16];
            if mem.read(at, &mut p)
                && &p[..4] == b"_MP_"
                && p[8] == 1
                && sum(mem, at, 16) == Some(0)
            {
                return mp_config(mem, &p);
            }
            at += 16;
        }
    }
    None
}

/// The configuration table a floating pointer `p` points to.
fn mp_config(mem: &impl PhysRead, p: &[u8; 16]) -> Option<u32> {
    if p[11] != 0 {
        // One of the specification's default configurations: two CPUs.
        return Some(2);
    }
    let addr = u64::from(u32_at(p, 4));
    let mut h = [0u8; 44];
    if addr == 0 || !mem.read(addr, &mut h) || &h[..4] != b"PCMP" {
        return None;
    }
    let len = u32::from(u16_at(&h, 4));
    if !(44..=MAX_MP_TABLE).contains(&len) || sum(mem, addr, len)? != 0 {
        return None;
    }
    let count = u16_at(&h, 34);
    let mut at = 44u32;
    let mut cpus = 0;
    for _ in 0..count {
        let mut e = [0u8; 20];
        if at + 8 > len || !mem.read(addr + u64::from(at), &mut e[..8]) {
            return None;
        }
        at += match e[0] {
            0 => {
                if at + 20 > len {
                    return None;
                }
                if e[3] & 1 != 0 {
                    cpus += 1;
                }
                20
            }
            1..=4 => 8,
            _ => return None,
        };
    }
    (cpus > 0).then_some(cpus)
}

/// E820 type of usable RAM in a memory map.
pub const E820_RAM: u32 = 1;

/// The first address past 32-bit physical memory.
const FOUR_GIB: u64 = 1 << 32;

/// Usable RAM in a memory map of (address, size, E820 type) entries, in
/// all and the part of it above 4 GiB (which a kernel that maps only the
/// first 4 GiB, as ours, sees but does not use). Overflowing entries are
/// cut at the top of the address space.
pub fn ram_bytes(map: impl IntoIterator<Item = (u64, u64, u32)>) -> (u64, u64) {
    map.into_iter()
        .filter(|&(_, _, kind)| kind == E820_RAM)
        .fold((0u64, 0u64), |(all, high), (addr, size, _)| {
            let end = addr.saturating_add(size);
            let above = end.saturating_sub(addr.max(FOUR_GIB));
            (all.saturating_add(end - addr), high.saturating_add(above))
        })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// A flat physical memory from 0.
    struct Ram(Vec<u8>);

    impl PhysRead for Ram {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            let a = addr as usize;
            match self.0.get(a..a + buf.len()) {
                Some(s) => {
                    buf.copy_from_slice(s);
                    true
                }
                None => false,
            }
        }
    }

    fn fix(b: &mut [u8], at: usize) {
        b[at] = 0;
        b[at] = 0u8.wrapping_sub(b.iter().fold(0u8, |a, x| a.wrapping_add(*x)));
    }

    fn sdt(sig: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut t = Vec::new();
        t.extend_from_slice(sig);
        t.extend_from_slice(&((36 + body.len()) as u32).to_le_bytes());
        t.extend_from_slice(&[1, 0]);
        t.extend_from_slice(b"OEMID OEMTABLE");
        t.resize(36, 0);
        t.extend_from_slice(body);
        fix(&mut t, 9);
        t
    }

    /// RSDP (ACPI 2.0) at 0xe0000, XSDT at 0x1000, MADT at 0x2000 with
    /// `entries`.
    fn acpi(entries: &[u8]) -> Ram {
        let mut ram = Ram(std::vec![0u8; 0x10_0000]);
        let mut madt_body = std::vec![0u8; 8];
        madt_body[..4].copy_from_slice(&0xfee0_0000u32.to_le_bytes());
        madt_body.extend_from_slice(entries);
        let madt = sdt(b"APIC", &madt_body);
        let facp = sdt(b"FACP", &[0; 8]);
        let xsdt = sdt(
            b"XSDT",
            &[0x3000u64.to_le_bytes(), 0x2000u64.to_le_bytes()].concat(),
        );
        ram.0[0x1000..0x1000 + xsdt.len()].copy_from_slice(&xsdt);
        ram.0[0x2000..0x2000 + madt.len()].copy_from_slice(&madt);
        ram.0[0x3000..0x3000 + facp.len()].copy_from_slice(&facp);
        let mut r = [0u8; 36];
        r[..8].copy_from_slice(b"RSD PTR ");
        r[15] = 2;
        r[16..20].copy_from_slice(&0xdead_0000u32.to_le_bytes()); // RSDT unused
        r[20..24].copy_from_slice(&36u32.to_le_bytes());
        r[24..32].copy_from_slice(&0x1000u64.to_le_bytes());
        fix(&mut r[..20], 8);
        fix(&mut r, 32);
        ram.0[0xe_0000..0xe_0024].copy_from_slice(&r);
        ram
    }

    fn lapic(id: u8, flags: u32) -> [u8; 8] {
        let f = flags.to_le_bytes();
        [0, 8, id, id, f[0], f[1], f[2], f[3]]
    }

    #[test]
    fn madt_counts_enabled_local_apics() {
        let mut e = Vec::new();
        e.extend_from_slice(&lapic(0, 1));
        e.extend_from_slice(&lapic(1, 1));
        e.extend_from_slice(&lapic(2, 2)); // online-capable, not enabled
        e.extend_from_slice(&[1, 12, 0, 0, 0, 0, 0xc0, 0xfe, 0, 0, 0, 0]); // IOAPIC
        let mut x2 = [0u8; 16];
        x2[0] = 9;
        x2[1] = 16;
        x2[4..8].copy_from_slice(&300u32.to_le_bytes());
        x2[8] = 1;
        e.extend_from_slice(&x2);
        let ram = acpi(&e);
        assert_eq!(madt_cpus(&ram, 0xe_0000), Some(3));
        assert_eq!(madt_cpus(&ram, 0), None);
        assert_eq!(madt_cpus(&ram, 0xe_0010), None, "no RSDP there");
    }

    #[test]
    fn a_bad_checksum_hides_the_madt() {
        let mut ram = acpi(&lapic(0, 1));
        ram.0[0x2000 + 40] ^= 1;
        assert_eq!(madt_cpus(&ram, 0xe_0000), None);
        let mut ram = acpi(&lapic(0, 1));
        ram.0[0xe_0000 + 9] ^= 1; // RSDP checksum
        assert_eq!(madt_cpus(&ram, 0xe_0000), None);
        // An entry running past the table's end.
        let ram = acpi(&[0, 40, 0, 0]);
        assert_eq!(madt_cpus(&ram, 0xe_0000), None);
    }

    #[test]
    fn mptable_counts_enabled_processors() {
        let mut ram = Ram(std::vec![0u8; 0x10_0000]);
        let mut t = Vec::new();
        t.extend_from_slice(b"PCMP");
        t.extend_from_slice(&[0; 40]);
        let mut n = 0u16;
        for (id, flags) in [(0u8, 3u8), (1, 1), (2, 0)] {
            t.extend_from_slice(&[0, id, 0x14, flags]);
            t.extend_from_slice(&[0; 16]);
            n += 1;
        }
        t.extend_from_slice(&[1, 0, b'I', b'S', b'A', b' ', b' ', b' ']);
        t.extend_from_slice(&[2, 3, 0x11, 1, 0, 0, 0xc0, 0xfe]);
        n += 2;
        let len = t.len() as u16;
        t[4..6].copy_from_slice(&len.to_le_bytes());
        t[6] = 4;
        t[34..36].copy_from_slice(&n.to_le_bytes());
        fix(&mut t, 7);
        let mut p = [0u8; 16];
        p[..4].copy_from_slice(b"_MP_");
        p[4..8].copy_from_slice(&0x9_fc10u32.to_le_bytes());
        p[8] = 1;
        p[9] = 4;
        fix(&mut p, 10);
        ram.0[0x9_fc00..0x9_fc10].copy_from_slice(&p);
        ram.0[0x9_fc10..0x9_fc10 + t.len()].copy_from_slice(&t);
        assert_eq!(mptable_cpus(&ram), Some(2));
        ram.0[0x9_fc10 + 50] ^= 0x80;
        assert_eq!(mptable_cpus(&ram), None, "table checksum");
        assert_eq!(mptable_cpus(&Ram(std::vec![0u8; 0x10_0000])), None);
    }

    /// A 16 GiB guest's map as vmm writes it: the low RAM around the
    /// legacy hole, 13 GiB from 4 GiB; reserved entries do not count, an
    /// entry across 4 GiB counts its upper part as high.
    #[test]
    fn ram_in_the_memory_map() {
        const G: u64 = 1 << 30;
        let map = [
            (0, 0x9_fc00, E820_RAM),
            (0x9_fc00, 0x6_0400, 2),
            (0x10_0000, 3 * G - 0x10_0000, E820_RAM),
            (4 * G, 13 * G, E820_RAM),
        ];
        assert_eq!(ram_bytes(map), (16 * G - 0x6_0400, 13 * G));
        assert_eq!(ram_bytes([(3 * G, 2 * G, E820_RAM)]), (2 * G, G));
        assert_eq!(ram_bytes([(u64::MAX - 5, 10, E820_RAM)]), (5, 5));
        assert_eq!(ram_bytes([]), (0, 0));
    }
}
