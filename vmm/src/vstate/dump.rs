//! A vCPU register dump for crash reports: what the guest was doing when
//! it crashed, read after the fact and printed with the reason.

use std::fmt;

use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs};
use kvm_ioctls::VcpuFd;
use serde::Serialize;

use super::vcpu::get_xcr0;

/// General-purpose, control and segment registers at the moment of a crash.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RegisterDump {
    /// `KVM_GET_REGS`, when it worked.
    pub regs: Option<Gprs>,
    /// `KVM_GET_SREGS`, when it worked.
    pub sregs: Option<Sregs>,
    /// XCR0 from `KVM_GET_XCRS`, when it worked.
    pub xcr0: Option<u64>,
    /// Why a part could not be read, or why the registers do not show where
    /// the guest was (KVM reset the vCPU).
    pub errors: Vec<String>,
}

/// The general-purpose registers, RIP and RFLAGS.
#[allow(missing_docs)] // register names
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Gprs {
    pub rax: u64,
    pub rbx: u64,
    pub rcx: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub rsp: u64,
    pub rbp: u64,
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub rip: u64,
    pub rflags: u64,
}

/// The segment, control and descriptor-table registers that say what mode
/// the vCPU was in.
#[allow(missing_docs)] // register names
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Sregs {
    pub cs: Segment,
    pub ss: Segment,
    pub ds: Segment,
    pub tr: Segment,
    pub cr0: u64,
    pub cr2: u64,
    pub cr3: u64,
    pub cr4: u64,
    pub efer: u64,
    pub gdt_base: u64,
    pub gdt_limit: u16,
    pub idt_base: u64,
    pub idt_limit: u16,
}

/// One segment register, as the hidden descriptor cache holds it.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Segment {
    /// The selector.
    pub selector: u16,
    /// Base address.
    pub base: u64,
    /// Limit, in bytes.
    pub limit: u32,
    /// Descriptor type field.
    pub type_: u8,
    /// Descriptor privilege level.
    pub dpl: u8,
    /// The L bit: a 64-bit code segment.
    pub long: bool,
}

impl From<&kvm_segment> for Segment {
    fn from(s: &kvm_segment) -> Self {
        Segment {
            selector: s.selector,
            base: s.base,
            limit: s.limit,
            type_: s.type_,
            dpl: s.dpl,
            long: s.l != 0,
        }
    }
}

impl From<&kvm_regs> for Gprs {
    fn from(r: &kvm_regs) -> Self {
        Gprs {
            rax: r.rax,
            rbx: r.rbx,
            rcx: r.rcx,
            rdx: r.rdx,
            rsi: r.rsi,
            rdi: r.rdi,
            rsp: r.rsp,
            rbp: r.rbp,
            r8: r.r8,
            r9: r.r9,
            r10: r.r10,
            r11: r.r11,
            r12: r.r12,
            r13: r.r13,
            r14: r.r14,
            r15: r.r15,
            rip: r.rip,
            rflags: r.rflags,
        }
    }
}

impl From<&kvm_sregs> for Sregs {
    fn from(s: &kvm_sregs) -> Self {
        Sregs {
            cs: (&s.cs).into(),
            ss: (&s.ss).into(),
            ds: (&s.ds).into(),
            tr: (&s.tr).into(),
            cr0: s.cr0,
            cr2: s.cr2,
            cr3: s.cr3,
            cr4: s.cr4,
            efer: s.efer,
            gdt_base: s.gdt.base,
            gdt_limit: s.gdt.limit,
            idt_base: s.idt.base,
            idt_limit: s.idt.limit,
        }
    }
}

impl RegisterDump {
    /// Whether the registers are an x86 CPU's reset values (RIP 0xfff0,
    /// CS base 0xffff_0000). kvm_amd leaves them after a triple fault: it
    /// reinitialises the VMCB at the shutdown intercept, so they say
    /// nothing of where the guest was.
    pub fn is_reset_state(&self) -> bool {
        matches!((&self.regs, &self.sregs),
            (Some(r), Some(s)) if r.rip == 0xfff0 && s.cs.base == 0xffff_0000)
    }

    /// Read what can be read; a failing ioctl is noted, not fatal.
    pub fn capture(vcpu: &VcpuFd) -> Self {
        let mut errors = Vec::new();
        let mut note = |e: String| errors.push(e);
        let regs = vcpu
            .get_regs()
            .map_err(|e| note(format!("KVM_GET_REGS: {e}")))
            .ok();
        let sregs = vcpu
            .get_sregs()
            .map_err(|e| note(format!("KVM_GET_SREGS: {e}")))
            .ok();
        let xcr0 = get_xcr0(vcpu).map_err(|e| note(e.to_string())).ok();
        RegisterDump {
            regs: regs.as_ref().map(Gprs::from),
            sregs: sregs.as_ref().map(Sregs::from),
            xcr0,
            errors,
        }
    }
}

impl fmt::Display for RegisterDump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(r) = &self.regs {
            writeln!(
                f,
                "  rip {:#018x}  rflags {:#010x}  rsp {:#018x}  rbp {:#018x}",
                r.rip, r.rflags, r.rsp, r.rbp
            )?;
            writeln!(
                f,
                "  rax {:#018x}  rbx {:#018x}  rcx {:#018x}  rdx {:#018x}",
                r.rax, r.rbx, r.rcx, r.rdx
            )?;
            writeln!(
                f,
                "  rsi {:#018x}  rdi {:#018x}  r8  {:#018x}  r9  {:#018x}",
                r.rsi, r.rdi, r.r8, r.r9
            )?;
            writeln!(
                f,
                "  r10 {:#018x}  r11 {:#018x}  r12 {:#018x}  r13 {:#018x}",
                r.r10, r.r11, r.r12, r.r13
            )?;
            writeln!(f, "  r14 {:#018x}  r15 {:#018x}", r.r14, r.r15)?;
        }
        if let Some(s) = &self.sregs {
            writeln!(
                f,
                "  cr0 {:#010x}  cr2 {:#018x}  cr3 {:#018x}  cr4 {:#010x}  efer {:#x}",
                s.cr0, s.cr2, s.cr3, s.cr4, s.efer
            )?;
            for (name, seg) in [("cs", &s.cs), ("ss", &s.ss), ("ds", &s.ds), ("tr", &s.tr)] {
                writeln!(
                    f,
                    "  {name}  sel {:#06x} base {:#x} limit {:#x} type {:#x} dpl {}{}",
                    seg.selector,
                    seg.base,
                    seg.limit,
                    seg.type_,
                    seg.dpl,
                    if seg.long { " (64-bit)" } else { "" }
                )?;
            }
            writeln!(
                f,
                "  gdt {:#x}/{:#x}  idt {:#x}/{:#x}",
                s.gdt_base, s.gdt_limit, s.idt_base, s.idt_limit
            )?;
        }
        if let Some(x) = self.xcr0 {
            writeln!(f, "  xcr0 {x:#x}")?;
        }
        for e in &self.errors {
            writeln!(f, "  ({e})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use kvm_bindings::{kvm_regs, kvm_sregs};

    use super::*;

    fn dump(rip: u64, cs_base: u64) -> RegisterDump {
        let mut sregs = kvm_sregs::default();
        sregs.cs.base = cs_base;
        RegisterDump {
            regs: Some(Gprs::from(&kvm_regs {
                rip,
                ..Default::default()
            })),
            sregs: Some(Sregs::from(&sregs)),
            xcr0: None,
            errors: Vec::new(),
        }
    }

    /// Only RIP 0xfff0 with CS at 0xffff_0000 is the reset state.
    #[test]
    fn the_reset_state_is_recognised() {
        assert!(dump(0xfff0, 0xffff_0000).is_reset_state());
        assert!(!dump(0xfff0, 0).is_reset_state());
        assert!(!dump(0x10_0000, 0xffff_0000).is_reset_state());
        let mut no_sregs = dump(0xfff0, 0xffff_0000);
        no_sregs.sregs = None;
        assert!(!no_sregs.is_reset_state());
    }
}
