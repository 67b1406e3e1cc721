//! Names both sides print: exception mnemonics, the XSAVE extensions of
//! CPUID 0xD.1 EAX and the context-switch strategies. One table each, so
//! the guest's console and the VMM's report never disagree.

/// Names of the XSAVE extensions CPUID 0xD.1 EAX enumerates, bit 0 first
/// (what [`Report::cpuid_xsave_features`](crate::protocol::Report::cpuid_xsave_features) holds).
pub const XSAVE_FEATURE_NAMES: [&str; 5] = ["xsaveopt", "xsavec", "xgetbv1", "xsaves", "xfd"];

/// The XSAVE instructions and extensions CPUID 0xD.1 EAX `eax` reports,
/// plain XSAVE first.
pub fn xsave_variants(eax: u32) -> impl Iterator<Item = &'static str> {
    core::iter::once("xsave").chain(
        XSAVE_FEATURE_NAMES
            .iter()
            .enumerate()
            .filter(move |(bit, _)| eax & (1 << bit) != 0)
            .map(|(_, name)| *name),
    )
}

/// The SDM mnemonic of an exception vector (`#GP`, `#PF`, `NMI`, ...), for
/// the guest's console and the VMM's report alike; `#reserved` for vectors
/// the architecture does not define, `#??` past 31.
pub const fn exception_mnemonic(vector: u32) -> &'static str {
    match vector {
        0 => "#DE",
        1 => "#DB",
        2 => "NMI",
        3 => "#BP",
        4 => "#OF",
        5 => "#BR",
        6 => "#UD",
        7 => "#NM",
        8 => "#DF",
        9 => "#CSO",
        10 => "#TS",
        11 => "#NP",
        12 => "#SS",
        13 => "#GP",
        14 => "#PF",
        16 => "#MF",
        17 => "#AC",
        18 => "#MC",
        19 => "#XM",
        20 => "#VE",
        21 => "#CP",
        28 => "#HV",
        29 => "#VC",
        30 => "#SX",
        15 | 22..=27 | 31 => "#reserved",
        _ => "#??",
    }
}

/// User-level context-switch strategies the guest calibrates at boot, in
/// the order of [`Report::switch_cycles`](crate::protocol::Report::switch_cycles): each saves with the named
/// instruction and restores with XRSTOR. `xsavec-xinuse` masks the XSAVEC
/// request with XGETBV(1) (XINUSE), as Linux does. XSAVES/XRSTORS are not
/// candidates: they need CPL0, and the guest's contexts are CPL3 tasks.
pub const SWITCH_STRATEGIES: [&str; 4] = xstate::SaveStrategy::NAMES;
