//! CPUID's output registers, by value ([`CpuidRegs`]) and by name
//! ([`Reg`]), and the one wrapper of the instruction ([`cpuid`]) every
//! crate of the workspace goes through.

/// Raw CPUID registers of one (sub)leaf.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuidRegs {
    /// EAX.
    pub eax: u32,
    /// EBX.
    pub ebx: u32,
    /// ECX.
    pub ecx: u32,
    /// EDX.
    pub edx: u32,
}

impl CpuidRegs {
    /// Builds from the four registers.
    pub const fn new(eax: u32, ebx: u32, ecx: u32, edx: u32) -> Self {
        Self { eax, ebx, ecx, edx }
    }

    /// Whether every register is zero (how CPUID answers an unknown subleaf).
    pub const fn is_zero(&self) -> bool {
        self.eax == 0 && self.ebx == 0 && self.ecx == 0 && self.edx == 0
    }
}

/// A CPUID output register: the one [`CpuidRegs`] field a flag or a
/// violation names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reg {
    /// EAX.
    Eax,
    /// EBX.
    Ebx,
    /// ECX.
    Ecx,
    /// EDX.
    Edx,
}

impl Reg {
    /// The four registers, in CPUID's output order.
    pub const ALL: [Reg; 4] = [Reg::Eax, Reg::Ebx, Reg::Ecx, Reg::Edx];

    /// The register's value in `r`.
    pub const fn of(self, r: &CpuidRegs) -> u32 {
        match self {
            Reg::Eax => r.eax,
            Reg::Ebx => r.ebx,
            Reg::Ecx => r.ecx,
            Reg::Edx => r.edx,
        }
    }

    /// The register in `r`, for editing.
    pub fn of_mut(self, r: &mut CpuidRegs) -> &mut u32 {
        match self {
            Reg::Eax => &mut r.eax,
            Reg::Ebx => &mut r.ebx,
            Reg::Ecx => &mut r.ecx,
            Reg::Edx => &mut r.edx,
        }
    }

    /// Upper-case name (`EAX`).
    pub const fn name(self) -> &'static str {
        match self {
            Reg::Eax => "EAX",
            Reg::Ebx => "EBX",
            Reg::Ecx => "ECX",
            Reg::Edx => "EDX",
        }
    }
}

impl core::fmt::Display for Reg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Executes CPUID on the running CPU: the crate's one CPUID instruction,
/// for every caller (`no_std` too: CPUID is allowed at any privilege level).
///
/// An unknown leaf returns zeros or the highest basic leaf's registers, as
/// the CPU answers it; callers check leaf 0 EAX first where that matters.
///
/// # Examples
/// ```
/// # #[cfg(target_arch = "x86_64")] {
/// use xstate::info::cpuid;
///
/// let max_leaf = cpuid(0, 0).eax;
/// assert!(max_leaf >= 1); // every x86-64 CPU has leaf 1
/// let sse2 = cpuid(1, 0).edx & (1 << 26) != 0;
/// assert!(sse2); // part of x86-64
/// # }
/// ```
#[cfg(target_arch = "x86_64")]
#[inline]
#[allow(unused_unsafe)] // `__cpuid_count` is `unsafe` on older toolchains only.
pub fn cpuid(leaf: u32, subleaf: u32) -> CpuidRegs {
    // SAFETY: CPUID exists on every x86_64 CPU and only reads identification
    // registers; unknown leaves return zeros or the highest basic leaf.
    let r = unsafe { core::arch::x86_64::__cpuid_count(leaf, subleaf) };
    CpuidRegs::new(r.eax, r.ebx, r.ecx, r.edx)
}
