//! The input of the lint: a [`CpuidView`] answering CPUID leaves, the
//! [`Context`] it cannot say itself, and the register bits ([`Flag`]) the
//! rules read.

pub use crate::flags::Flag;
use crate::info::CpuidRegs;
pub use crate::info::Reg;
use crate::mask::XfeatureMask;

/// A source of CPUID leaves.
///
/// `regs(leaf, subleaf)` is `None` when the source does not record that
/// (sub)leaf, and `Some` of all zeros when it records that the CPU has none
/// (a complete table answers every leaf: an absent entry, or a leaf above
/// the maximum basic leaf, is all zeros). Registers a source does not record
/// within a recorded leaf read as zero; no rule reads EAX/EBX of leaf 1 or
/// EAX of leaf 7.
pub trait CpuidView {
    /// The registers of `leaf`/`subleaf`, or `None` if not recorded.
    fn regs(&self, leaf: u32, subleaf: u32) -> Option<CpuidRegs>;
}

impl<F: Fn(u32, u32) -> Option<CpuidRegs>> CpuidView for F {
    fn regs(&self, leaf: u32, subleaf: u32) -> Option<CpuidRegs> {
        self(leaf, subleaf)
    }
}

/// CR4.OSXSAVE as far as the source's leaf 1 is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Osxsave {
    /// A hypervisor's supported table: OSXSAVE mirrors the guest OS's CR4
    /// at run time and says nothing in the table.
    NotApplicable,
    /// CR4 is not known (e.g. a recorded dump of unknown provenance).
    Unknown,
    /// CR4.OSXSAVE had this value when the leaves were read.
    Cr4(bool),
}

/// What the CPUID table alone cannot say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context {
    /// CR4.OSXSAVE.
    pub osxsave: Osxsave,
    /// XCR0 in force when 0xD.0 EBX was read, where known.
    pub xcr0: Option<XfeatureMask>,
    /// IA32_XSS in force when 0xD.1 EBX was read, where known.
    pub xss: Option<XfeatureMask>,
    /// The table is a hypervisor's supported set, not one CPU's view: the
    /// in-force sizes (0xD.0 EBX, 0xD.1 EBX) mean nothing there.
    pub supported_table: bool,
}

impl Context {
    /// A hypervisor's supported-CPUID table (KVM_GET_SUPPORTED_CPUID).
    pub const SUPPORTED_TABLE: Self = Self {
        osxsave: Osxsave::NotApplicable,
        xcr0: None,
        xss: None,
        supported_table: true,
    };
    /// A CPU's view with nothing known beyond the leaves.
    pub const UNKNOWN: Self = Self {
        osxsave: Osxsave::Unknown,
        xcr0: None,
        xss: None,
        supported_table: false,
    };
}
