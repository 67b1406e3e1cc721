//! After a restore, read every state back from KVM and compare it bit for
//! bit with what the snapshot held: the debug/verification path that
//! proves a restore loads what the file says (tests use it; it is cheap
//! enough to run on every restore but is not needed for correctness).
//!
//! Compared: all 16 general registers, RIP and RFLAGS; every segment
//! register (selector, base, limit, type and attribute bits), GDT/IDT,
//! CR0/CR2/CR3/CR4/CR8, EFER and APIC base; every XCR; every saved MSR;
//! and the xsave image KVM holds against the standard image the restore
//! handed it, over the legacy region, the header and every component.
//!
//! Known differences that are KVM's behaviour, not a lost bit, and are
//! reported apart ([`Verification::host_owned`]) rather than hidden:
//! - `IA32_TSC` follows the host: KVM keeps the guest's TSC running from
//!   the value written, so reading it back gives a later value.
//! - MXCSR_MASK (xsave bytes 28..32) is a read-only capability of the CPU
//!   KVM runs on; KVM reports this CPU's value, not the file's.

use kvm_bindings::{kvm_dtable, kvm_regs, kvm_segment, kvm_sregs};
use kvm_ioctls::VcpuFd;
use xstate::XsaveBuf;

use super::state::VcpuState;
use crate::error::{Error, Result};
use crate::vstate::vcpu;

/// MSRs whose value after a restore is the host's to decide (see the module
/// documentation).
pub const HOST_OWNED_MSRS: &[u32] = &[0x0000_0010];

/// One field whose value KVM holds differs from the file's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The field (`vcpu0.regs.r13`, `vcpu0.sregs.cs.base`, `vcpu0.msrs.0xc0000081`, ...).
    pub field: String,
    /// Its value in the snapshot.
    pub saved: u64,
    /// Its value KVM reports after the restore.
    pub loaded: u64,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: saved {:#x}, loaded {:#x}",
            self.field, self.saved, self.loaded
        )
    }
}

/// The result of a read-back.
#[derive(Clone, Debug, Default)]
pub struct Verification {
    /// Fields that differ: each one a state the restore did not carry over.
    pub mismatches: Vec<Mismatch>,
    /// Differences in state the host owns (documented above), for the record.
    pub host_owned: Vec<Mismatch>,
    /// Fields compared.
    pub compared: usize,
}

struct Cmp<'a> {
    out: &'a mut Verification,
    prefix: String,
}

impl Cmp<'_> {
    fn eq(&mut self, field: &str, saved: u64, loaded: u64) {
        self.out.compared += 1;
        if saved != loaded {
            self.out.mismatches.push(Mismatch {
                field: format!("{}{field}", self.prefix),
                saved,
                loaded,
            });
        }
    }

    fn segment(&mut self, name: &str, a: &kvm_segment, b: &kvm_segment) {
        self.eq(
            &format!("sregs.{name}.selector"),
            a.selector.into(),
            b.selector.into(),
        );
        self.eq(&format!("sregs.{name}.base"), a.base, b.base);
        self.eq(
            &format!("sregs.{name}.limit"),
            a.limit.into(),
            b.limit.into(),
        );
        let attrs = |s: &kvm_segment| {
            u64::from_le_bytes([s.type_, s.present, s.dpl, s.db, s.s, s.l, s.g, s.avl])
        };
        // `unusable` is KVM's own bookkeeping of a null segment, not state.
        self.eq(&format!("sregs.{name}.attributes"), attrs(a), attrs(b));
    }

    fn dtable(&mut self, name: &str, a: &kvm_dtable, b: &kvm_dtable) {
        self.eq(&format!("sregs.{name}.base"), a.base, b.base);
        self.eq(
            &format!("sregs.{name}.limit"),
            a.limit.into(),
            b.limit.into(),
        );
    }
}

impl Cmp<'_> {
    /// The general-purpose registers, RIP and RFLAGS.
    fn regs(&mut self, a: &kvm_regs, b: &kvm_regs) {
        for (name, x, y) in [
            ("rax", a.rax, b.rax),
            ("rbx", a.rbx, b.rbx),
            ("rcx", a.rcx, b.rcx),
            ("rdx", a.rdx, b.rdx),
            ("rsi", a.rsi, b.rsi),
            ("rdi", a.rdi, b.rdi),
            ("rsp", a.rsp, b.rsp),
            ("rbp", a.rbp, b.rbp),
            ("r8", a.r8, b.r8),
            ("r9", a.r9, b.r9),
            ("r10", a.r10, b.r10),
            ("r11", a.r11, b.r11),
            ("r12", a.r12, b.r12),
            ("r13", a.r13, b.r13),
            ("r14", a.r14, b.r14),
            ("r15", a.r15, b.r15),
            ("rip", a.rip, b.rip),
            ("rflags", a.rflags, b.rflags),
        ] {
            self.eq(&format!("regs.{name}"), x, y);
        }
    }

    /// The segments, descriptor tables, control registers, EFER, APIC base
    /// and the pending-interrupt bitmap.
    fn sregs(&mut self, a: &kvm_sregs, b: &kvm_sregs) {
        for (name, x, y) in [
            ("cs", &a.cs, &b.cs),
            ("ds", &a.ds, &b.ds),
            ("es", &a.es, &b.es),
            ("fs", &a.fs, &b.fs),
            ("gs", &a.gs, &b.gs),
            ("ss", &a.ss, &b.ss),
            ("tr", &a.tr, &b.tr),
            ("ldt", &a.ldt, &b.ldt),
        ] {
            self.segment(name, x, y);
        }
        self.dtable("gdt", &a.gdt, &b.gdt);
        self.dtable("idt", &a.idt, &b.idt);
        for (name, x, y) in [
            ("cr0", a.cr0, b.cr0),
            ("cr2", a.cr2, b.cr2),
            ("cr3", a.cr3, b.cr3),
            ("cr4", a.cr4, b.cr4),
            ("cr8", a.cr8, b.cr8),
            ("efer", a.efer, b.efer),
            ("apic_base", a.apic_base, b.apic_base),
        ] {
            self.eq(&format!("sregs.{name}"), x, y);
        }
        for (i, (x, y)) in a
            .interrupt_bitmap
            .iter()
            .zip(&b.interrupt_bitmap)
            .enumerate()
        {
            self.eq(&format!("sregs.interrupt_bitmap[{i}]"), *x, *y);
        }
    }

    /// The xsave image, 8 bytes at a time, against the `standard` image
    /// the restore loaded; MXCSR_MASK is the CPU's, so it differs as a
    /// host-owned field.
    fn xsave(&mut self, standard: &XsaveBuf, image: &XsaveBuf) {
        // The xsave image, 8 bytes at a time; MXCSR_MASK is the CPU's.
        // KVM's image is at least the standard size (the legacy kvm_xsave is
        // 4 KiB); the bytes past the standard image are not state.
        let n = standard.len().min(image.len());
        if image.len() < standard.len() {
            self.eq("xstate.length", standard.len() as u64, image.len() as u64);
        }
        let (sa, sb) = (standard.as_bytes(), image.as_bytes());
        for off in (0..n).step_by(8) {
            let end = (off + 8).min(n);
            let word = |s: &[u8]| {
                let mut w = [0u8; 8];
                w[..end - off].copy_from_slice(&s[off..end]);
                u64::from_le_bytes(w)
            };
            let (x, y) = (word(sa), word(sb));
            if off == 24 {
                // Bytes 24..28 MXCSR (state), 28..32 MXCSR_MASK (the CPU's).
                self.eq("xstate.mxcsr", x & 0xffff_ffff, y & 0xffff_ffff);
                if x >> 32 != y >> 32 {
                    self.out.host_owned.push(Mismatch {
                        field: format!("{}xstate.mxcsr_mask", self.prefix),
                        saved: x >> 32,
                        loaded: y >> 32,
                    });
                }
                continue;
            }
            self.eq(&format!("xstate[{off}..{end}]"), x, y);
        }
    }
}

/// Read back vCPU `v.id`'s state from KVM and compare it with `v` and the
/// standard xsave image the restore loaded (`standard`, the validated
/// image in this host's layout).
pub fn verify_loaded(
    vcpu_fd: &VcpuFd,
    v: &VcpuState,
    standard: &XsaveBuf,
    xsave2_size: usize,
) -> Result<Verification> {
    let mut out = Verification::default();
    let regs = vcpu_fd.get_regs().map_err(Error::kvm("KVM_GET_REGS"))?;
    let sregs = vcpu_fd.get_sregs().map_err(Error::kvm("KVM_GET_SREGS"))?;
    let xcrs = vcpu::get_xcrs(vcpu_fd)?;
    let wanted: Vec<u32> = v.msrs.iter().map(|&(i, _)| i).collect();
    let (msrs, unreadable) = vcpu::get_msrs(vcpu_fd, &wanted)?;
    let image = vcpu::get_xsave(vcpu_fd, xsave2_size)?;
    let mut c = Cmp {
        out: &mut out,
        prefix: format!("vcpu{}.", v.id),
    };
    c.regs(&v.regs, &regs);
    c.sregs(&v.sregs, &sregs);
    for &(xcr, value) in &v.xcrs {
        let got = xcrs.iter().find(|(n, _)| *n == xcr).map(|(_, v)| *v);
        c.eq(&format!("xcrs.xcr{xcr}"), value, got.unwrap_or(!value));
    }
    for &(index, value) in &v.msrs {
        let got = msrs.iter().find(|(i, _)| *i == index).map(|(_, v)| *v);
        let got = match got {
            Some(g) => g,
            None if unreadable.contains(&index) => !value,
            None => !value,
        };
        if HOST_OWNED_MSRS.contains(&index) {
            c.out.compared += 1;
            if got != value {
                c.out.host_owned.push(Mismatch {
                    field: format!("{}msrs.{index:#x}", c.prefix),
                    saved: value,
                    loaded: got,
                });
            }
            continue;
        }
        c.eq(&format!("msrs.{index:#x}"), value, got);
    }
    c.xsave(standard, &image);
    Ok(out)
}
