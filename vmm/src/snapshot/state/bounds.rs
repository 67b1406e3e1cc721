//! How long each section may be, decided on the section table alone,
//! before any section body is read: a file cannot make `info` or
//! `restore` allocate more than its kind of section can need, whatever
//! length its table claims (a sparse file can claim gigabytes in a few
//! kilobytes of disk).
//!
//! | kind | bound |
//! |------|-------|
//! | `regs`, `sregs`, `events`, `mp_state`, `debugregs`, `lapic`, `irqchip.*`, `pit`, `clock`, `xfd` | exactly their structure's size |
//! | `cpuid`, `xcrs`, `msrs` | whole entries, at most as many as KVM (or this vmm) can load |
//! | `xstate` | an xsave header to [`XSTATE_MAX`] |
//! | `meta` | [`META_MAX`] |
//! | `serial` | what the VMM keeps of the guest's output ([`SERIAL_CAPTURE_MAX`]) |
//! | `memory`, `memory.pages` | the largest guest RAM first, then `meta.mem_mib` ([`check_memory`]) |
//! | `memory.crc32` | 4 bytes per page of the largest guest RAM first, then of `meta.mem_mib` ([`check_memory`]); exactly 4 per stored page when decoded |
//!
//! A region list (RAM above 4 GiB) checks each region with
//! [`check_region`].

use kvm_bindings::{
    kvm_clock_data, kvm_cpuid_entry2, kvm_debugregs, kvm_irqchip, kvm_lapic_state, kvm_pit_state2,
    kvm_regs, kvm_sregs, kvm_vcpu_events, KVM_MAX_CPUID_ENTRIES, KVM_MAX_XCRS,
};
use xstate::buffer::XSAVE_MIN_SIZE;

use super::check_section_names;
use crate::arch::layout::{MAX_MEM_MIB, PAGE_SIZE};
use crate::devices::SERIAL_CAPTURE_MAX;
use crate::snapshot::format::{FormatError, SectionInfo, PAGES_SECTION, PAGE_CRCS_SECTION};
use crate::snapshot::sparse::MAX_REGIONS;
use crate::vstate::smp::GUEST_MAX_CPUS;
use crate::vstate::vcpu::SAVED_MSRS;

/// The longest `meta` section: its JSON holds a command line (under
/// 4 KiB), the source's leaf 0xD (at most 64 subleaves), the UART's
/// registers and 64-byte FIFO and a few numbers; a snapshot's is under
/// 2 KiB.
pub const META_MAX: u64 = 64 << 10;

/// The longest `vcpuN.xstate` section: an xsave image compacted with
/// every component this vmm knows in use is about 11 KiB (AMX tile data
/// alone is 8 KiB); its exact length is checked against the source's
/// layout once `meta` is read.
pub const XSTATE_MAX: u64 = 16 << 10;

/// One entry of `vcpuN.xcrs`, `vcpuN.msrs` and `vcpuN.xfd`: (index u32,
/// 0 u32, value u64).
const PAIR: u64 = 16;

/// What a section's length may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bound {
    /// Exactly this many bytes.
    Exact(u64),
    /// Whole entries of `size` bytes, at most `max` of them.
    Entries { size: u64, max: u64 },
    /// From `min` to `max` bytes.
    Between { min: u64, max: u64 },
}

fn size<T>() -> u64 {
    std::mem::size_of::<T>() as u64
}

/// The largest guest RAM this vmm builds, in bytes.
fn max_ram_bytes() -> u64 {
    MAX_MEM_MIB << 20
}

/// The longest page index of `ram_bytes` of RAM: its 16-byte header and
/// one run per two pages (every other page stored).
fn index_max(ram_bytes: u64) -> u64 {
    16 + 16 * (ram_bytes / PAGE_SIZE as u64).div_ceil(2)
}

/// The bound of a section, by name (`None`: a name
/// [`check_section_names`] refuses).
fn bound(name: &str) -> Option<Bound> {
    let kind = match name.split_once('.') {
        Some((vcpu, kind)) if vcpu.starts_with("vcpu") => kind,
        _ => name,
    };
    Some(match kind {
        "meta" => Bound::Between {
            min: 2,
            max: META_MAX,
        },
        "serial" => Bound::Between {
            min: 0,
            max: SERIAL_CAPTURE_MAX as u64,
        },
        "memory" => Bound::Between {
            min: 16,
            max: index_max(max_ram_bytes()),
        },
        "memory.pages" => Bound::Entries {
            size: PAGE_SIZE as u64,
            max: max_ram_bytes() / PAGE_SIZE as u64,
        },
        "memory.crc32" => Bound::Entries {
            size: 4,
            max: max_ram_bytes() / PAGE_SIZE as u64,
        },
        "memory.regions" => Bound::Between {
            min: 8,
            max: 8 + 16 * MAX_REGIONS as u64,
        },
        "irqchip.pic_master" | "irqchip.pic_slave" | "irqchip.ioapic" => {
            Bound::Exact(size::<kvm_irqchip>())
        }
        "pit" => Bound::Exact(size::<kvm_pit_state2>()),
        "clock" => Bound::Exact(size::<kvm_clock_data>()),
        "cpuid" => Bound::Entries {
            size: size::<kvm_cpuid_entry2>(),
            max: KVM_MAX_CPUID_ENTRIES as u64,
        },
        "regs" => Bound::Exact(size::<kvm_regs>()),
        "sregs" => Bound::Exact(size::<kvm_sregs>()),
        "xcrs" => Bound::Entries {
            size: PAIR,
            max: u64::from(KVM_MAX_XCRS),
        },
        "msrs" => Bound::Entries {
            size: PAIR,
            max: SAVED_MSRS.len() as u64,
        },
        "events" => Bound::Exact(size::<kvm_vcpu_events>()),
        "mp_state" => Bound::Exact(4),
        "debugregs" => Bound::Exact(size::<kvm_debugregs>()),
        "xfd" => Bound::Exact(2 * PAIR),
        "xstate" => Bound::Between {
            min: XSAVE_MIN_SIZE as u64,
            max: XSTATE_MAX,
        },
        "lapic" => Bound::Exact(size::<kvm_lapic_state>()),
        _ => return None,
    })
}

/// `e`'s length against `bound`.
fn check_len(e: &SectionInfo, bound: Bound) -> Result<(), FormatError> {
    let len = e.length;
    let fault = match bound {
        Bound::Exact(n) if len != n => format!("{len} bytes; its kind is exactly {n}"),
        Bound::Entries { size, .. } if !len.is_multiple_of(size) => {
            format!("{len} bytes, not a whole number of {size}-byte entries")
        }
        Bound::Entries { size, max } if len / size > max => format!(
            "{len} bytes: {} entries of {size} bytes, at most {max} can be loaded",
            len / size
        ),
        Bound::Between { min, max } if !(min..=max).contains(&len) => {
            format!("{len} bytes; its kind is {min} to {max} bytes")
        }
        _ => return Ok(()),
    };
    Err(FormatError::Malformed(format!(
        "section \"{}\" is {fault}",
        e.name
    )))
}

/// The table's own rules, before any section body is read: every name
/// known and every vCPU's sections complete ([`check_section_names`]),
/// at most as many vCPUs as the guest kernel runs (8), every length within its kind's
/// bound, the stored pages page-aligned in the file. A pure function.
///
/// # Errors
///
/// [`FormatError::Malformed`] naming the section and its bound.
pub fn check_table(entries: &[SectionInfo]) -> Result<(), FormatError> {
    check_section_names(entries.iter().map(|e| e.name.as_str()))?;
    let vcpus = entries
        .iter()
        .filter(|e| e.name.starts_with("vcpu") && e.name.ends_with(".regs"))
        .count();
    if vcpus > GUEST_MAX_CPUS as usize {
        return Err(FormatError::Malformed(format!(
            "the sections of {vcpus} vCPUs; this vmm's guest kernel runs at most {GUEST_MAX_CPUS}"
        )));
    }
    for e in entries {
        let b = bound(&e.name)
            .ok_or_else(|| FormatError::Malformed(format!("unknown section \"{}\"", e.name)))?;
        check_len(e, b)?;
    }
    if let Some(p) = entries.iter().find(|e| e.name == PAGES_SECTION) {
        if !p.offset.is_multiple_of(PAGE_SIZE as u64) {
            return Err(FormatError::Malformed(format!(
                "section \"{PAGES_SECTION}\" at offset {} is not page-aligned",
                p.offset
            )));
        }
    }
    Ok(())
}

/// The memory sections against the RAM `meta` says the guest has
/// (`ram_bytes`), before they are read: [`check_region`] for the one
/// region of RAM from address 0.
///
/// # Errors
///
/// [`FormatError::Malformed`] naming the section.
pub fn check_memory(entries: &[SectionInfo], ram_bytes: u64) -> Result<(), FormatError> {
    let find = |n: &str| entries.iter().find(|e| e.name == n);
    let index = find("memory")
        .ok_or_else(|| FormatError::Malformed("section \"memory\" is missing".into()))?;
    let most = 4 * (ram_bytes / PAGE_SIZE as u64);
    if let Some(c) = find(PAGE_CRCS_SECTION).filter(|c| c.length > most) {
        return Err(FormatError::Malformed(format!(
            "section \"{}\" is {} bytes, more than the {most} of {ram_bytes} bytes of RAM's pages",
            c.name, c.length
        )));
    }
    check_region(index, find(PAGES_SECTION), ram_bytes)
}

/// One region of `ram_bytes` of guest RAM: its page index at most one run
/// per two pages, its stored pages at most the region's.
///
/// # Errors
///
/// [`FormatError::Malformed`] naming the section.
pub fn check_region(
    index: &SectionInfo,
    pages: Option<&SectionInfo>,
    ram_bytes: u64,
) -> Result<(), FormatError> {
    let max = index_max(ram_bytes);
    if index.length > max {
        return Err(FormatError::Malformed(format!(
            "section \"{}\" is {} bytes; the page index of {ram_bytes} bytes of RAM is at most {max}",
            index.name, index.length
        )));
    }
    if let Some(p) = pages.filter(|p| p.length > ram_bytes) {
        return Err(FormatError::Malformed(format!(
            "section \"{}\" is {} bytes, more than the {ram_bytes} bytes of RAM it stores pages of",
            p.name, p.length
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(name: &str, offset: u64, length: u64) -> SectionInfo {
        SectionInfo {
            name: name.into(),
            offset,
            length,
            crc32: 0,
        }
    }

    fn vcpu0() -> Vec<SectionInfo> {
        vec![
            e("meta", 64, 100),
            e("memory", 1024, 32),
            e(PAGES_SECTION, 4096, 4096),
            e("vcpu0.cpuid", 0, 40 * 3),
            e("vcpu0.regs", 0, 144),
            e("vcpu0.sregs", 0, 312),
            e("vcpu0.xcrs", 0, 16),
            e("vcpu0.msrs", 0, 16 * 12),
            e("vcpu0.events", 0, 64),
            e("vcpu0.mp_state", 0, 4),
            e("vcpu0.debugregs", 0, 128),
            e("vcpu0.xstate", 0, 2432),
        ]
    }

    #[test]
    fn a_real_table_passes() {
        check_table(&vcpu0()).unwrap();
        check_memory(&vcpu0(), 64 << 20).unwrap();
    }

    /// Every kind refuses a length its contents cannot have, naming the
    /// section: a claimed gigabyte never reaches an allocation.
    #[test]
    fn every_kind_is_bounded() {
        let big = 1u64 << 30;
        for (name, len, want) in [
            ("meta", big, "its kind is 2 to 65536 bytes"),
            ("serial", big, "its kind is 0 to 1048576 bytes"),
            ("memory", 4 << 30, "its kind is 16 to 2145386512 bytes"),
            ("memory.regions", 8 + 16 * 17, "its kind is 8 to 264 bytes"),
            (
                PAGES_SECTION,
                4095,
                "not a whole number of 4096-byte entries",
            ),
            (PAGES_SECTION, 2 << 40, "at most 268173312 can be loaded"),
            ("vcpu0.regs", 145, "its kind is exactly 144"),
            ("vcpu0.cpuid", 41, "not a whole number of 40-byte"),
            (
                "vcpu0.cpuid",
                40 * 257,
                "257 entries of 40 bytes, at most 256",
            ),
            ("vcpu0.xcrs", 16 * 17, "at most 16 can be loaded"),
            ("vcpu0.msrs", 16 * 26, "at most 25 can be loaded"),
            ("vcpu0.mp_state", 8, "exactly 4"),
            ("vcpu0.xstate", big, "its kind is 576 to 16384 bytes"),
            ("vcpu0.xstate", 575, "its kind is 576 to 16384 bytes"),
        ] {
            let mut t = vcpu0();
            match t.iter_mut().find(|x| x.name == name) {
                Some(x) => x.length = len,
                None => t.push(e(name, 0, len)),
            }
            let err = check_table(&t).unwrap_err().to_string();
            assert!(
                err.contains(&format!("section \"{name}\" is {len} bytes")) && err.contains(want),
                "{name} {len}: {err}"
            );
        }
    }

    #[test]
    fn memory_is_bounded_by_the_ram_meta_says() {
        let mut t = vcpu0();
        t[1].length = 16 + 16 * 8193;
        let err = check_memory(&t, 64 << 20).unwrap_err().to_string();
        assert!(err.contains("at most 131088"), "{err}");
        let mut t = vcpu0();
        t[2].length = (64 << 20) + 4096;
        let err = check_memory(&t, 64 << 20).unwrap_err().to_string();
        assert!(err.contains("more than the 67108864 bytes of RAM"), "{err}");
    }

    #[test]
    fn pages_are_page_aligned_and_vcpus_at_most_the_guests() {
        let mut t = vcpu0();
        t[2].offset = 4096 + 64;
        let err = check_table(&t).unwrap_err().to_string();
        assert!(err.contains("is not page-aligned"), "{err}");
        let mut t = vcpu0();
        for id in 1..=GUEST_MAX_CPUS {
            t.push(e(&format!("vcpu{id}.regs"), 0, 144));
        }
        let err = check_table(&t).unwrap_err().to_string();
        assert!(err.contains("the sections of 9 vCPUs"), "{err}");
    }
}
