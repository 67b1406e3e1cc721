//! The special and general registers, as `KVM_SET_SREGS`, `KVM_SET_REGS`
//! and the next VM entry judge them: CR0, CR4 and EFER (reserved bits,
//! features the vCPU's CPUID must offer, the paging-mode combinations),
//! CR3 and the APIC base within the physical-address width, CR8, the
//! segment registers' fields and the canonical bases of 64-bit mode, the
//! pending-interrupt bitmap, RFLAGS and RIP.

use kvm_bindings::{kvm_dtable, kvm_segment};

use super::cpu::{self, Cpuid, Feature};
use super::fault::{invalid, Fault};
use super::host::HostFacts;
use crate::snapshot::state::VcpuState;

const CR0_PE: u64 = 1;
const CR0_WP: u64 = 1 << 16;
const CR0_NW: u64 = 1 << 29;
const CR0_CD: u64 = 1 << 30;
const CR0_PG: u64 = 1 << 31;
/// PE MP EM TS ET NE, WP, AM, NW CD PG: every other bit is reserved.
const CR0_DEFINED: u64 = 0x3f | CR0_WP | (1 << 18) | CR0_NW | CR0_CD | CR0_PG;

const CR4_PAE: u64 = 1 << 5;
const CR4_LA57: u64 = 1 << 12;
const CR4_PCIDE: u64 = 1 << 17;
const CR4_CET: u64 = 1 << 23;

const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;

/// What a CR4 or EFER bit needs.
#[derive(Clone, Copy)]
enum Needs {
    /// Nothing: every x86-64 CPU has it.
    Nothing,
    /// The vCPU's CPUID must offer the feature; KVM does not look further.
    Guest(Feature),
    /// The vCPU's CPUID must offer the feature, and KVM checks the host
    /// CPU too: where this KVM's supported CPUID does not report it, only
    /// KVM can tell.
    Host(Feature),
    /// The vCPU's CPUID must offer one of these; whether this KVM
    /// virtualises the bit at all depends on its version: only KVM can
    /// tell.
    Version(&'static [Feature]),
    /// KVM never lets a guest have it.
    Never,
}

/// Every CR4 bit x86-64 defines, by bit number.
const CR4_BITS: &[(u32, &str, Needs)] = &[
    (0, "VME", Needs::Guest(cpu::VME)),
    (1, "PVI", Needs::Guest(cpu::VME)),
    (2, "TSD", Needs::Guest(cpu::TSC)),
    (3, "DE", Needs::Guest(cpu::DE)),
    (4, "PSE", Needs::Guest(cpu::PSE)),
    (5, "PAE", Needs::Guest(cpu::PAE)),
    (6, "MCE", Needs::Guest(cpu::MCE)),
    (7, "PGE", Needs::Guest(cpu::PGE)),
    (8, "PCE", Needs::Nothing),
    (9, "OSFXSR", Needs::Guest(cpu::FXSR)),
    (10, "OSXMMEXCPT", Needs::Guest(cpu::SSE)),
    (11, "UMIP", Needs::Host(cpu::UMIP)),
    (12, "LA57", Needs::Host(cpu::LA57)),
    (13, "VMXE", Needs::Host(cpu::VMX)),
    (14, "SMXE", Needs::Never),
    (16, "FSGSBASE", Needs::Host(cpu::FSGSBASE)),
    (17, "PCIDE", Needs::Host(cpu::PCID)),
    // KVM_CAP_XSAVE, which opening KVM requires, says the host has XSAVE.
    (18, "OSXSAVE", Needs::Guest(cpu::XSAVE)),
    (19, "KL", Needs::Never),
    (20, "SMEP", Needs::Host(cpu::SMEP)),
    (21, "SMAP", Needs::Host(cpu::SMAP)),
    (22, "PKE", Needs::Host(cpu::PKU)),
    (23, "CET", Needs::Version(&[cpu::CET_SS, cpu::IBT])),
    (24, "PKS", Needs::Version(&[cpu::PKS])),
    (25, "UINTR", Needs::Never),
    (28, "LAM_SUP", Needs::Host(cpu::LAM)),
    (32, "FRED", Needs::Version(&[cpu::FRED])),
];

/// Every EFER bit KVM lets a guest have; any other is refused.
const EFER_BITS: &[(u32, &str, Needs)] = &[
    (0, "SCE", Needs::Nothing),
    (8, "LME", Needs::Guest(cpu::LM)),
    (10, "LMA", Needs::Guest(cpu::LM)),
    (11, "NXE", Needs::Host(cpu::NX)),
    (12, "SVME", Needs::Host(cpu::SVM)),
    (14, "FFXSR", Needs::Host(cpu::FFXSR)),
    (21, "AUTOIBRS", Needs::Host(cpu::AUTOIBRS)),
];

/// The bits of `value` (register `reg` of `field`) against `table`.
fn check_bits(
    field: &str,
    reg: &str,
    value: u64,
    table: &[(u32, &str, Needs)],
    guest: &Cpuid<'_>,
    host: &HostFacts,
    must_try: &mut Vec<String>,
) -> Result<(), Fault> {
    let known: u64 = table.iter().map(|&(b, _, _)| 1u64 << b).sum();
    if value & !known != 0 {
        return Err(invalid(
            field,
            format!(
                "{reg} {value:#x} sets bits {:#x} that are reserved (or that KVM never lets a guest set)",
                value & !known
            ),
        ));
    }
    let host_cpuid = Cpuid(&host.cpuid);
    for &(bit, name, needs) in table.iter().filter(|&&(b, _, _)| value & (1 << b) != 0) {
        let lacks = |f: Feature| {
            invalid(
                field,
                format!("{reg} {value:#x} sets {name} (bit {bit}), which needs {}; the vCPU's CPUID does not offer it", f.4),
            )
        };
        match needs {
            Needs::Nothing => {}
            Needs::Guest(f) if !guest.has(f) => return Err(lacks(f)),
            Needs::Host(f) if !guest.has(f) => return Err(lacks(f)),
            Needs::Host(f) if !host_cpuid.has(f) => must_try.push(format!(
                "{field}: {name} is set and this KVM's supported CPUID does not report {}; \
                 KVM decides from the host CPU",
                f.4
            )),
            Needs::Version(fs) if !fs.iter().any(|&f| guest.has(f)) => return Err(lacks(fs[0])),
            Needs::Version(_) => must_try.push(format!(
                "{field}: {name} is set; whether this KVM virtualises it depends on its version"
            )),
            Needs::Never => {
                return Err(invalid(
                    field,
                    format!(
                    "{reg} {value:#x} sets {name} (bit {bit}), which KVM never lets a guest have"
                ),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The special registers of vCPU `v`, whose CPUID is `guest`.
pub(super) fn check_sregs(
    v: &VcpuState,
    guest: &Cpuid<'_>,
    host: &HostFacts,
    must_try: &mut Vec<String>,
) -> Result<(), Fault> {
    let s = &v.sregs;
    let f = |r: &str| format!("vcpu{}.sregs.{r}", v.id);
    if s.cr0 & !CR0_DEFINED != 0 {
        return Err(invalid(
            f("cr0"),
            format!(
                "CR0 {:#x} sets reserved bits {:#x}",
                s.cr0,
                s.cr0 & !CR0_DEFINED
            ),
        ));
    }
    if s.cr0 & CR0_NW != 0 && s.cr0 & CR0_CD == 0 {
        return Err(invalid(
            f("cr0"),
            format!("CR0 {:#x} sets NW without CD", s.cr0),
        ));
    }
    if s.cr0 & CR0_PG != 0 && s.cr0 & CR0_PE == 0 {
        return Err(invalid(
            f("cr0"),
            format!("CR0 {:#x} sets PG without PE", s.cr0),
        ));
    }
    check_bits(&f("cr4"), "CR4", s.cr4, CR4_BITS, guest, host, must_try)?;
    if s.cr4 & CR4_CET != 0 && s.cr0 & CR0_WP == 0 {
        return Err(invalid(
            f("cr4"),
            format!("CR4 {:#x} sets CET without CR0.WP", s.cr4),
        ));
    }
    check_bits(&f("efer"), "EFER", s.efer, EFER_BITS, guest, host, must_try)?;
    check_mode(v)?;
    let phys = guest.maxphyaddr();
    let above = |x: u64| x >> phys != 0;
    let lam_bits = if guest.has(cpu::LAM) { 3 << 61 } else { 0 };
    if above(s.cr3 & !lam_bits) {
        return Err(invalid(
            f("cr3"),
            format!(
                "CR3 {:#x} sets bits above the vCPU's {phys}-bit physical addresses",
                s.cr3
            ),
        ));
    }
    if s.cr8 > 0xf {
        return Err(invalid(
            f("cr8"),
            format!("CR8 {:#x}: the task priority is 4 bits", s.cr8),
        ));
    }
    check_apic_base(v, guest, phys)?;
    check_segments(v)
}

/// EFER.LME/LMA, CR0.PG, CR4.PAE and CS.L in one of the modes x86-64
/// has (KVM refuses the others).
fn check_mode(v: &VcpuState) -> Result<(), Fault> {
    let s = &v.sregs;
    let long = s.efer & EFER_LME != 0 && s.cr0 & CR0_PG != 0;
    let bad = if long && s.cr4 & CR4_PAE == 0 {
        Some("EFER.LME and CR0.PG are set (64-bit paging) without CR4.PAE")
    } else if long && s.efer & EFER_LMA == 0 {
        Some("EFER.LME and CR0.PG are set (64-bit paging) without EFER.LMA")
    } else if !long && s.efer & EFER_LMA != 0 {
        Some("EFER.LMA is set without EFER.LME and CR0.PG")
    } else if !long && s.cs.l != 0 {
        Some("CS.L (64-bit code) is set outside IA-32e mode")
    } else if !long && s.cr4 & CR4_PCIDE != 0 {
        Some("CR4.PCIDE is set outside IA-32e mode")
    } else {
        None
    };
    match bad {
        Some(why) => Err(invalid(
            format!("vcpu{}.sregs.efer", v.id),
            format!(
                "CR0 {:#x}, CR4 {:#x}, EFER {:#x}: {why}",
                s.cr0, s.cr4, s.efer
            ),
        )),
        None => Ok(()),
    }
}

/// IA32_APIC_BASE: no reserved bit (0-7, 9, above the physical-address
/// width), x2APIC mode only enabled and only where the CPUID offers it.
fn check_apic_base(v: &VcpuState, guest: &Cpuid<'_>, phys: u32) -> Result<(), Fault> {
    let base = v.sregs.apic_base;
    let field = format!("vcpu{}.sregs.apic_base", v.id);
    let (x2apic, enable) = (1u64 << 10, 1u64 << 11);
    let bad = if base & 0x2ff != 0 || base >> phys != 0 {
        Some(format!("sets reserved bits (0-7, 9, {phys}-63)"))
    } else if base & x2apic != 0 && base & enable == 0 {
        Some("enables x2APIC mode with the APIC disabled".into())
    } else if base & x2apic != 0 && !guest.has(cpu::X2APIC) {
        Some("enables x2APIC mode; the vCPU's CPUID does not offer X2APIC".into())
    } else {
        None
    };
    match bad {
        Some(why) => Err(invalid(field, format!("{base:#x} {why}"))),
        None => Ok(()),
    }
}

/// Whether `x` is canonical for `bits`-bit virtual addresses.
fn canonical(x: u64, bits: u32) -> bool {
    let shift = 64 - bits;
    ((x << shift) as i64 >> shift) as u64 == x
}

/// The virtual-address width of 64-bit mode: 57 with CR4.LA57.
fn vaddr_bits(v: &VcpuState) -> u32 {
    if v.sregs.cr4 & CR4_LA57 != 0 {
        57
    } else {
        48
    }
}

/// Every segment register's fields within their widths, and in IA-32e
/// mode the bases a VM entry checks canonical.
fn check_segments(v: &VcpuState) -> Result<(), Fault> {
    let s = &v.sregs;
    let long = s.efer & EFER_LMA != 0;
    let bits = vaddr_bits(v);
    let segs: [(&str, &kvm_segment); 8] = [
        ("cs", &s.cs),
        ("ds", &s.ds),
        ("es", &s.es),
        ("fs", &s.fs),
        ("gs", &s.gs),
        ("ss", &s.ss),
        ("tr", &s.tr),
        ("ldt", &s.ldt),
    ];
    for (name, g) in segs {
        let field = format!("vcpu{}.sregs.{name}", v.id);
        let flags = [g.present, g.db, g.s, g.l, g.g, g.avl, g.unusable];
        let bad = if g.type_ > 15 || g.dpl > 3 || flags.iter().any(|&b| b > 1) || g.padding != 0 {
            Some(format!(
                "type {} dpl {} present/db/s/l/g/avl/unusable {flags:?} padding {}: \
                 type is 4 bits, DPL 2, the flags 1",
                g.type_, g.dpl, g.padding
            ))
        } else if name == "cs" && g.l != 0 && g.db != 0 {
            Some("CS.L and CS.D are both set (reserved)".into())
        } else if long && matches!(name, "fs" | "gs" | "tr" | "ldt") && !canonical(g.base, bits) {
            Some(format!(
                "base {:#x} is not canonical in 64-bit mode",
                g.base
            ))
        } else {
            None
        };
        if let Some(why) = bad {
            return Err(invalid(field, why));
        }
    }
    let tables: [(&str, &kvm_dtable); 2] = [("gdt", &s.gdt), ("idt", &s.idt)];
    for (name, t) in tables {
        let field = format!("vcpu{}.sregs.{name}", v.id);
        if t.padding != [0; 3] {
            return Err(invalid(field, "reserved padding is not zero"));
        }
        if long && !canonical(t.base, bits) {
            return Err(invalid(
                field,
                format!("base {:#x} is not canonical in 64-bit mode", t.base),
            ));
        }
    }
    Ok(())
}

/// `interrupt_bitmap`: at most one external interrupt pending, and only
/// in a VM whose LAPICs can deliver one.
pub(super) fn check_interrupt_bitmap(v: &VcpuState, lapics: bool) -> Result<(), Fault> {
    let set: u32 = v
        .sregs
        .interrupt_bitmap
        .iter()
        .map(|w| w.count_ones())
        .sum();
    let field = format!("vcpu{}.sregs.interrupt_bitmap", v.id);
    if set > 1 {
        return Err(invalid(
            field,
            format!("{set} interrupts pending; a vCPU has at most one being injected"),
        ));
    }
    if set == 1 && !lapics {
        return Err(invalid(
            field,
            "an external interrupt is pending in a VM without an interrupt controller",
        ));
    }
    Ok(())
}

/// RFLAGS: bit 1 set, the reserved bits (3, 5, 15, 22-63) clear, no
/// virtual-8086 mode in IA-32e mode; RIP canonical in 64-bit code, within
/// 32 bits elsewhere (what a VM entry checks).
pub(super) fn check_regs(v: &VcpuState) -> Result<(), Fault> {
    let (r, s) = (&v.regs, &v.sregs);
    let reserved = (1u64 << 3) | (1 << 5) | (1 << 15) | !((1u64 << 22) - 1);
    let field = |n: &str| format!("vcpu{}.regs.{n}", v.id);
    if r.rflags & reserved != 0 || r.rflags & 2 == 0 {
        return Err(invalid(
            field("rflags"),
            format!(
                "{:#x}: bit 1 must be set, bits 3, 5, 15 and 22-63 clear",
                r.rflags
            ),
        ));
    }
    let long = s.efer & EFER_LMA != 0;
    if long && r.rflags & (1 << 17) != 0 {
        return Err(invalid(
            field("rflags"),
            format!("{:#x} sets VM (virtual-8086 mode) in IA-32e mode", r.rflags),
        ));
    }
    let ok = if long && s.cs.l != 0 {
        canonical(r.rip, vaddr_bits(v))
    } else {
        r.rip >> 32 == 0
    };
    if !ok {
        return Err(invalid(
            field("rip"),
            format!(
                "{:#x} is not an address of the vCPU's mode ({})",
                r.rip,
                if long && s.cs.l != 0 {
                    "64-bit code: canonical"
                } else {
                    "32 bits"
                }
            ),
        ));
    }
    Ok(())
}

/// A canonical address for vCPU `v` (an MSR holding a linear address).
pub(super) fn canonical_for(v: &VcpuState, x: u64) -> bool {
    canonical(x, vaddr_bits(v))
}
