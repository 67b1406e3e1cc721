//! Consistency lint of a CPUID table's extended-state enumeration: every
//! rule that links leaves 1, 7, 0xD (subleaves 0 and 1 and the component
//! subleaves), 0x14, 0x19, 0x1D/0x1E and the XCR0/IA32_XSS in force.
//!
//! A CPU's own CPUID is consistent by construction; a table assembled by a
//! hypervisor (KVM's `KVM_GET_SUPPORTED_CPUID`, the table a VMM hands its
//! guest, what a guest sees) need not be. Software reads these leaves
//! together: an OS enables XCR0 bits from leaf 0xD but gates instructions on
//! leaves 1 and 7, so a table that enumerates AVX-512 state while hiding
//! AVX-512F, or XCR0 bits while hiding XSAVE, makes guests (and test suites
//! such as Linux's KVM selftests) skip or fail.
//!
//! The input is any [`CpuidView`]: a function answering `(leaf, subleaf)`
//! with the registers, or `None` when the source does not record that leaf
//! (a profile that holds only leaf 0xD). Rules whose leaves are not recorded
//! are reported as [`Skip::Missing`], never as violations. The [`Context`]
//! adds what the source cannot say itself: CR4.OSXSAVE and the XCR0 and
//! IA32_XSS in force, when known (a guest's view), or that they do not
//! apply (a hypervisor's supported table).
//!
//! Every rule is one function in [`RULES`], with its [`Severity`]:
//! [`Severity::Error`] where the Intel SDM (or AMD APM) makes the
//! combination impossible on a real processor, [`Severity::Warning`] where
//! the combination is architecturally possible but no processor ships it
//! and software treats it as missing state (Linux disables an XSAVE
//! component whose feature flag is clear). The core is `no_std` and does not
//! allocate: violations go to a callback ([`lint`]); [`lint_all`] (feature
//! `std`) collects them.

use core::fmt;

use crate::feature::Xfeature;
use crate::info::{leaf_1_ecx, leaf_d1_eax, leaf_d_ecx, CpuidRegs, InfoError, XsaveInfo};
use crate::mask::XfeatureMask;
use crate::rules::Xcr0Error;

/// A CPUID output register.
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
    /// The register's value in `r`.
    pub const fn of(self, r: &CpuidRegs) -> u32 {
        match self {
            Reg::Eax => r.eax,
            Reg::Ebx => r.ebx,
            Reg::Ecx => r.ecx,
            Reg::Edx => r.edx,
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

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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

/// How bad a violation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    /// Possible architecturally, but no processor does it and software
    /// treats the state or feature as absent.
    Warning,
    /// The architecture rules it out: no processor can report this.
    Error,
}

impl Severity {
    /// `error` or `warning`.
    pub const fn name(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// Extra facts of a violation, printed after its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Nothing more.
    None,
    /// The mask of components concerned.
    Mask(XfeatureMask),
    /// A size the table reports and the size the enumeration implies.
    Size {
        /// As reported.
        found: u32,
        /// As computed from the component subleaves.
        expected: u32,
        /// The mask the size is of.
        mask: XfeatureMask,
    },
    /// Leaf 0xD itself does not parse.
    Info(InfoError),
    /// The enumerated or in-force XCR0 breaks an XCR0 rule.
    Xcr0(XfeatureMask, Xcr0Error),
}

/// One broken rule, located at the register bit (or register) that shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: RuleId,
    /// CPUID leaf.
    pub leaf: u32,
    /// Subleaf.
    pub subleaf: u32,
    /// Register.
    pub reg: Reg,
    /// Bit in `reg`; `None` when the whole register (a size) is at fault.
    pub bit: Option<u32>,
    /// The feature or field at that place (`AVX-512F`, `XSAVE`, `size`).
    pub subject: &'static str,
    /// What is wrong, as a sentence fragment after `subject`.
    pub message: &'static str,
    /// Numbers and masks.
    pub detail: Detail,
}

impl Violation {
    /// The rule's severity.
    pub fn severity(&self) -> Severity {
        self.rule.rule().severity
    }

    /// `CPUID.(7,0).EBX[16]` or `CPUID.(0xD,1).EBX`.
    pub fn location(&self) -> Location {
        Location {
            leaf: self.leaf,
            subleaf: self.subleaf,
            reg: self.reg,
            bit: self.bit,
        }
    }
}

/// A CPUID register or bit, printed as `CPUID.(0x7,0).EBX[16]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// Leaf.
    pub leaf: u32,
    /// Subleaf.
    pub subleaf: u32,
    /// Register.
    pub reg: Reg,
    /// Bit, if one.
    pub bit: Option<u32>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CPUID.({:#x},{}).{}", self.leaf, self.subleaf, self.reg)?;
        if let Some(b) = self.bit {
            write!(f, "[{b}]")?;
        }
        Ok(())
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.subject, self.message)?;
        match self.detail {
            Detail::None => Ok(()),
            Detail::Mask(m) => write!(f, " ({m} = {m:#x})"),
            Detail::Size {
                found,
                expected,
                mask,
            } => write!(
                f,
                " (reported {found}, the component subleaves give {expected} for {mask:#x})"
            ),
            Detail::Info(e) => write!(f, " ({e})"),
            Detail::Xcr0(m, e) => write!(f, " ({m:#x}: {e})"),
        }
    }
}

/// Why a rule was not checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The source does not record this leaf/subleaf.
    Missing {
        /// Leaf.
        leaf: u32,
        /// Subleaf.
        subleaf: u32,
    },
    /// The rule does not apply to this source (why).
    NotApplicable(&'static str),
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::Missing { leaf, subleaf } => {
                write!(f, "CPUID.({leaf:#x},{subleaf}) is not recorded")
            }
            Skip::NotApplicable(why) => f.write_str(why),
        }
    }
}

/// A feature flag: where it is and its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flag {
    /// Leaf.
    pub leaf: u32,
    /// Subleaf.
    pub subleaf: u32,
    /// Register.
    pub reg: Reg,
    /// Bit.
    pub bit: u32,
    /// Name as the SDM writes it.
    pub name: &'static str,
}

const fn flag(leaf: u32, subleaf: u32, reg: Reg, bit: u32, name: &'static str) -> Flag {
    Flag {
        leaf,
        subleaf,
        reg,
        bit,
        name,
    }
}

/// The flags the rules read, named once.
pub mod flags {
    use super::{flag, Flag, Reg};

    /// CPUID.1:ECX.FMA.
    pub const FMA: Flag = flag(1, 0, Reg::Ecx, 12, "FMA");
    /// CPUID.1:ECX.XSAVE.
    pub const XSAVE: Flag = flag(1, 0, Reg::Ecx, 26, "XSAVE");
    /// CPUID.1:ECX.OSXSAVE.
    pub const OSXSAVE: Flag = flag(1, 0, Reg::Ecx, 27, "OSXSAVE");
    /// CPUID.1:ECX.AVX.
    pub const AVX: Flag = flag(1, 0, Reg::Ecx, 28, "AVX");
    /// CPUID.1:ECX.F16C.
    pub const F16C: Flag = flag(1, 0, Reg::Ecx, 29, "F16C");
    /// CPUID.(7,0):EBX.AVX2.
    pub const AVX2: Flag = flag(7, 0, Reg::Ebx, 5, "AVX2");
    /// CPUID.(7,0):EBX.MPX.
    pub const MPX: Flag = flag(7, 0, Reg::Ebx, 14, "MPX");
    /// CPUID.(7,0):EBX.AVX512F.
    pub const AVX512F: Flag = flag(7, 0, Reg::Ebx, 16, "AVX512F");
    /// CPUID.(7,0):EBX.Intel PT.
    pub const PT: Flag = flag(7, 0, Reg::Ebx, 25, "INTEL_PT");
    /// CPUID.(7,0):ECX.PKU.
    pub const PKU: Flag = flag(7, 0, Reg::Ecx, 3, "PKU");
    /// CPUID.(7,0):ECX.OSPKE.
    pub const OSPKE: Flag = flag(7, 0, Reg::Ecx, 4, "OSPKE");
    /// CPUID.(7,0):ECX.CET_SS.
    pub const CET_SS: Flag = flag(7, 0, Reg::Ecx, 7, "CET_SS");
    /// CPUID.(7,0):ECX.VAES.
    pub const VAES: Flag = flag(7, 0, Reg::Ecx, 9, "VAES");
    /// CPUID.(7,0):ECX.VPCLMULQDQ.
    pub const VPCLMULQDQ: Flag = flag(7, 0, Reg::Ecx, 10, "VPCLMULQDQ");
    /// CPUID.(7,0):ECX.KL (Key Locker).
    pub const KEY_LOCKER: Flag = flag(7, 0, Reg::Ecx, 23, "KL");
    /// CPUID.(7,0):EDX.CET_IBT.
    pub const CET_IBT: Flag = flag(7, 0, Reg::Edx, 20, "CET_IBT");
    /// CPUID.(7,0):EDX.AMX-BF16.
    pub const AMX_BF16: Flag = flag(7, 0, Reg::Edx, 22, "AMX-BF16");
    /// CPUID.(7,0):EDX.AMX-TILE.
    pub const AMX_TILE: Flag = flag(7, 0, Reg::Edx, 24, "AMX-TILE");
    /// CPUID.(7,0):EDX.AMX-INT8.
    pub const AMX_INT8: Flag = flag(7, 0, Reg::Edx, 25, "AMX-INT8");

    /// The AVX-512 flags other than AVX512F.
    pub const AVX512_OTHERS: [Flag; 17] = [
        flag(7, 0, Reg::Ebx, 17, "AVX512DQ"),
        flag(7, 0, Reg::Ebx, 21, "AVX512_IFMA"),
        flag(7, 0, Reg::Ebx, 26, "AVX512PF"),
        flag(7, 0, Reg::Ebx, 27, "AVX512ER"),
        flag(7, 0, Reg::Ebx, 28, "AVX512CD"),
        flag(7, 0, Reg::Ebx, 30, "AVX512BW"),
        flag(7, 0, Reg::Ebx, 31, "AVX512VL"),
        flag(7, 0, Reg::Ecx, 1, "AVX512_VBMI"),
        flag(7, 0, Reg::Ecx, 6, "AVX512_VBMI2"),
        flag(7, 0, Reg::Ecx, 11, "AVX512_VNNI"),
        flag(7, 0, Reg::Ecx, 12, "AVX512_BITALG"),
        flag(7, 0, Reg::Ecx, 14, "AVX512_VPOPCNTDQ"),
        flag(7, 0, Reg::Edx, 2, "AVX512_4VNNIW"),
        flag(7, 0, Reg::Edx, 3, "AVX512_4FMAPS"),
        flag(7, 0, Reg::Edx, 8, "AVX512_VP2INTERSECT"),
        flag(7, 0, Reg::Edx, 23, "AVX512_FP16"),
        flag(7, 1, Reg::Eax, 5, "AVX512_BF16"),
    ];
    /// VEX-encoded extensions that need AVX (and its state) to exist.
    pub const VEX: [Flag; 5] = [FMA, F16C, AVX2, VAES, VPCLMULQDQ];
    /// The AMX flags.
    pub const AMX: [Flag; 3] = [AMX_TILE, AMX_BF16, AMX_INT8];
}

/// Named rules, one per function in [`RULES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleId {
    /// XSAVE (1.ECX.26) ⇔ leaf 0xD enumerates XCR0 bits.
    XsaveLeaf,
    /// OSXSAVE (1.ECX.27) ⇒ XSAVE.
    OsxsaveNeedsXsave,
    /// OSXSAVE (1.ECX.27) = CR4.OSXSAVE, when CR4 is known.
    OsxsaveCr4,
    /// The supported XCR0 is itself a valid XCR0.
    SupportedXcr0,
    /// Leaf 0xD's component subleaves are present and sane.
    ComponentSubleaves,
    /// AVX (1.ECX.28) ⇒ XCR0 bits 1 and 2 supported.
    AvxState,
    /// XCR0 bit 2 supported ⇒ AVX.
    AvxStateHidden,
    /// FMA, F16C, AVX2, VAES, VPCLMULQDQ ⇒ AVX.
    VexNeedsAvx,
    /// AVX-512 flags ⇒ XCR0 bits 5-7 supported.
    Avx512State,
    /// AVX-512 flags other than F ⇒ AVX512F.
    Avx512NeedsF,
    /// XCR0 bits 5-7 supported ⇒ AVX512F.
    Avx512StateHidden,
    /// AVX-512 state or AVX512F ⇒ AVX2.
    Avx512WithoutAvx2,
    /// PKU ⇒ XCR0 bit 9; OSPKE ⇒ PKU.
    PkuState,
    /// XCR0 bit 9 ⇒ PKU.
    PkuStateHidden,
    /// AMX-TILE/BF16/INT8 ⇒ XCR0 bits 17-18; BF16/INT8 ⇒ TILE.
    AmxState,
    /// XCR0 bits 17-18 ⇒ AMX-TILE.
    AmxStateHidden,
    /// AMX-TILE ⇔ leaf 0x1D (palette ≥ 1) and leaf 0x1E.
    AmxLeaves,
    /// MPX ⇒ XCR0 bits 3-4.
    MpxState,
    /// XCR0 bits 3-4 ⇒ MPX.
    MpxStateHidden,
    /// Intel PT ⇔ leaf 0x14; IA32_XSS bit 8 ⇒ PT.
    PtState,
    /// CET_SS/IBT ⇔ IA32_XSS bits 11-12.
    CetState,
    /// Key Locker ⇔ leaf 0x19.
    KeyLockerLeaf,
    /// IA32_XSS bits enumerated ⇒ XSAVES.
    XsavesXss,
    /// A component aligned in the compacted format ⇒ XSAVEC.
    XsavecAlign,
    /// A component with the XFD flag ⇒ 0xD.1 EAX.XFD.
    XfdFlag,
    /// Components beyond AVX enumerated ⇒ XSAVEOPT.
    XsaveoptPresent,
    /// 0xD.0 ECX = standard size of the supported XCR0.
    MaxStandardSize,
    /// 0xD.0 EBX = standard size of the XCR0 in force.
    EnabledStandardSize,
    /// 0xD.1 EBX = compacted size of XCR0 | IA32_XSS in force.
    CompactedSize,
}

impl RuleId {
    /// The rule's entry in [`RULES`].
    pub fn rule(self) -> &'static Rule {
        // RULES lists every id once, in declaration order (tested).
        &RULES[self as usize]
    }

    /// The rule's kebab-case name.
    pub fn name(self) -> &'static str {
        self.rule().name
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where violations go.
pub type Sink<'s> = dyn FnMut(Violation) + 's;

/// One rule of the lint.
pub struct Rule {
    /// Its id.
    pub id: RuleId,
    /// Kebab-case name (`avx512-state-hidden`), stable for scripts.
    pub name: &'static str,
    /// How bad breaking it is.
    pub severity: Severity,
    /// What it checks, in one line.
    pub summary: &'static str,
    /// Why the architecture links these bits (after the SDM/APM).
    pub why: &'static str,
    /// The check.
    pub check: fn(&Facts<'_>, &mut Sink<'_>) -> Result<(), Skip>,
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule").field("name", &self.name).finish()
    }
}

/// What the rules read: the view, the context and leaf 0xD parsed once.
pub struct Facts<'a> {
    view: &'a dyn CpuidView,
    ctx: Context,
    /// Leaf 0xD parsed by [`XsaveInfo`]: `Err(Skip)` when not recorded.
    info: Result<Result<XsaveInfo, InfoError>, Skip>,
}

impl<'a> Facts<'a> {
    /// Reads the view's leaf 0xD once.
    pub fn new(view: &'a dyn CpuidView, ctx: Context) -> Self {
        let info = read_info(view);
        Self { view, ctx, info }
    }

    fn regs(&self, leaf: u32, subleaf: u32) -> Result<CpuidRegs, Skip> {
        self.view
            .regs(leaf, subleaf)
            .ok_or(Skip::Missing { leaf, subleaf })
    }

    fn has(&self, f: Flag) -> Result<bool, Skip> {
        Ok(f.reg.of(&self.regs(f.leaf, f.subleaf)?) & (1 << f.bit) != 0)
    }

    /// Supported XCR0 from 0xD.0 EDX:EAX (zero when the leaf is absent).
    fn xcr0(&self) -> Result<XfeatureMask, Skip> {
        let r = self.regs(0xd, 0)?;
        Ok(XfeatureMask::from_bits(
            u64::from(r.eax) | (u64::from(r.edx) << 32),
        ))
    }

    /// Supported IA32_XSS from 0xD.1 EDX:ECX.
    fn xss(&self) -> Result<XfeatureMask, Skip> {
        let r = self.regs(0xd, 1)?;
        Ok(XfeatureMask::from_bits(
            u64::from(r.ecx) | (u64::from(r.edx) << 32),
        ))
    }

    /// The parsed leaf 0xD; not applicable when it is absent or broken
    /// (the rules that say so are `xsave-leaf` and `component-subleaves`).
    fn info(&self) -> Result<&XsaveInfo, Skip> {
        match &self.info {
            Ok(Ok(i)) => Ok(i),
            Ok(Err(InfoError::NoXsave)) => Err(Skip::NotApplicable("no leaf 0xD")),
            Ok(Err(_)) => Err(Skip::NotApplicable(
                "leaf 0xD does not parse (see component-subleaves)",
            )),
            Err(s) => Err(*s),
        }
    }
}

fn read_info(view: &dyn CpuidView) -> Result<Result<XsaveInfo, InfoError>, Skip> {
    let missing = |subleaf| Skip::Missing { leaf: 0xd, subleaf };
    let d0 = view.regs(0xd, 0).ok_or(missing(0))?;
    let d1 = view.regs(0xd, 1).ok_or(missing(1))?;
    let xcr0 = u64::from(d0.eax) | (u64::from(d0.edx) << 32);
    if xcr0 == 0 {
        return Ok(Err(InfoError::NoXsave));
    }
    let all = XfeatureMask::from_bits(xcr0 | u64::from(d1.ecx) | (u64::from(d1.edx) << 32));
    for i in all.iter_indices().filter(|&i| i >= 2) {
        view.regs(0xd, i).ok_or(missing(i))?;
    }
    Ok(XsaveInfo::from_leaf_0xd(|i| {
        view.regs(0xd, i).unwrap_or_default()
    }))
}

fn at(f: Flag, rule: RuleId, message: &'static str, detail: Detail) -> Violation {
    Violation {
        rule,
        leaf: f.leaf,
        subleaf: f.subleaf,
        reg: f.reg,
        bit: Some(f.bit),
        subject: f.name,
        message,
        detail,
    }
}

/// The place of IA32_XSS bit `i` in 0xD.1 (ECX for 0-31, EDX for 32-63).
fn xss_bit(i: u32, rule: RuleId, message: &'static str, detail: Detail) -> Violation {
    let (reg, bit) = if i < 32 {
        (Reg::Ecx, i)
    } else {
        (Reg::Edx, i - 32)
    };
    let subject = Xfeature::from_index(i).map_or("state component", |f| f.short_name());
    at(flag(0xd, 1, reg, bit, subject), rule, message, detail)
}

/// 0xD.1 EAX feature bit `bit` named `name`.
const fn d1_flag(bit: u32, name: &'static str) -> Flag {
    flag(0xd, 1, Reg::Eax, bit, name)
}

const XSAVEOPT: Flag = d1_flag(0, "XSAVEOPT");
const XSAVEC: Flag = d1_flag(1, "XSAVEC");
const XSAVES: Flag = d1_flag(3, "XSAVES");
const XFD: Flag = d1_flag(4, "XFD");

/// A leaf is present when its subleaf 0 is not all zero.
fn leaf_present(facts: &Facts<'_>, leaf: u32) -> Result<bool, Skip> {
    Ok(!facts.regs(leaf, 0)?.is_zero())
}

// ---------------------------------------------------------------- rules

fn xsave_leaf(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let xsave = x.has(flags::XSAVE)?;
    let xcr0 = x.xcr0()?;
    if xsave && xcr0.is_empty() {
        out(at(
            flags::XSAVE,
            RuleId::XsaveLeaf,
            "is set but leaf 0xD enumerates no XCR0 bits (0xD.0 EDX:EAX = 0)",
            Detail::None,
        ));
    }
    if !xsave && !xcr0.is_empty() {
        out(at(
            flags::XSAVE,
            RuleId::XsaveLeaf,
            "is clear but leaf 0xD enumerates XCR0 bits",
            Detail::Mask(xcr0),
        ));
    }
    Ok(())
}

fn osxsave_needs_xsave(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    if x.has(flags::OSXSAVE)? && !x.has(flags::XSAVE)? {
        out(at(
            flags::OSXSAVE,
            RuleId::OsxsaveNeedsXsave,
            "is set but XSAVE (CPUID.(0x1,0).ECX[26]) is clear",
            Detail::None,
        ));
    }
    Ok(())
}

fn osxsave_cr4(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let cr4 = match x.ctx.osxsave {
        Osxsave::NotApplicable => {
            return Err(Skip::NotApplicable(
                "a supported-CPUID table: OSXSAVE reflects the guest OS's CR4 at run time",
            ))
        }
        Osxsave::Unknown => return Err(Skip::NotApplicable("CR4 is not known")),
        Osxsave::Cr4(v) => v,
    };
    let flag = x.has(flags::OSXSAVE)?;
    if flag != cr4 {
        out(at(
            flags::OSXSAVE,
            RuleId::OsxsaveCr4,
            if cr4 {
                "is clear although CR4.OSXSAVE is set"
            } else {
                "is set although CR4.OSXSAVE is clear"
            },
            Detail::None,
        ));
    }
    Ok(())
}

fn supported_xcr0(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let xcr0 = x.xcr0()?;
    if xcr0.is_empty() {
        return Ok(());
    }
    if let Err(e) = xcr0.validate_xcr0(xcr0) {
        out(Violation {
            rule: RuleId::SupportedXcr0,
            leaf: 0xd,
            subleaf: 0,
            reg: Reg::Eax,
            bit: None,
            subject: "supported XCR0",
            message: "is not itself a valid XCR0: XSETBV could not enable everything enumerated",
            detail: Detail::Xcr0(xcr0, e),
        });
    }
    Ok(())
}

fn component_subleaves(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let e = match &x.info {
        Err(s) => return Err(*s),
        Ok(Ok(_)) | Ok(Err(InfoError::NoXsave)) => return Ok(()),
        Ok(Err(e)) => *e,
    };
    let subleaf = match e {
        InfoError::MissingSubleaf(i)
        | InfoError::SupervisorFlagMismatch(i)
        | InfoError::UnsupportedSubleafData(i)
        | InfoError::PastAddressSpace { index: i, .. }
        | InfoError::InsideLegacyRegion { index: i, .. }
        | InfoError::PastMaxSize { index: i, .. }
        | InfoError::Overlap { b: i, .. } => i,
        _ => 0,
    };
    out(Violation {
        rule: RuleId::ComponentSubleaves,
        leaf: 0xd,
        subleaf,
        reg: if subleaf == 0 { Reg::Ecx } else { Reg::Eax },
        bit: None,
        subject: "leaf 0xD",
        message: "is not a consistent enumeration",
        detail: Detail::Info(e),
    });
    Ok(())
}

/// `feature` set ⇒ every component of `needs` supported.
fn needs_state(
    x: &Facts<'_>,
    out: &mut Sink<'_>,
    rule: RuleId,
    features: &[Flag],
    needs: XfeatureMask,
    message: &'static str,
) -> Result<(), Skip> {
    let xcr0 = x.xcr0()?;
    let lacking = needs - xcr0;
    for &f in features {
        if x.has(f)? && !lacking.is_empty() {
            out(at(f, rule, message, Detail::Mask(lacking)));
        }
    }
    Ok(())
}

/// Any component of `state` supported ⇒ `feature` set.
fn state_hidden(
    x: &Facts<'_>,
    out: &mut Sink<'_>,
    rule: RuleId,
    feature: Flag,
    state: XfeatureMask,
    message: &'static str,
) -> Result<(), Skip> {
    let present = state & x.xcr0()?;
    if !present.is_empty() && !x.has(feature)? {
        out(at(feature, rule, message, Detail::Mask(present)));
    }
    Ok(())
}

fn avx_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    needs_state(
        x,
        out,
        RuleId::AvxState,
        &[flags::AVX],
        XfeatureMask::AVX,
        "is set but XCR0 cannot enable the state it needs (0xD.0 EAX lacks)",
    )
}

fn avx_state_hidden(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    state_hidden(
        x,
        out,
        RuleId::AvxStateHidden,
        flags::AVX,
        XfeatureMask::from_bits(Xfeature::Avx.bit()),
        "is clear but leaf 0xD enumerates AVX state",
    )
}

fn vex_needs_avx(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    if x.has(flags::AVX)? {
        return Ok(());
    }
    for f in flags::VEX {
        if x.has(f)? {
            out(at(
                f,
                RuleId::VexNeedsAvx,
                "is set but AVX (CPUID.(0x1,0).ECX[28]) is clear",
                Detail::None,
            ));
        }
    }
    Ok(())
}

fn avx512_flags() -> impl Iterator<Item = Flag> {
    core::iter::once(flags::AVX512F).chain(flags::AVX512_OTHERS)
}

fn avx512_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let needs = XfeatureMask::AVX512 | XfeatureMask::AVX;
    let lacking = needs - x.xcr0()?;
    for f in avx512_flags() {
        // Leaf 7.1 is optional in sources: an unrecorded 7.1 skips only its flag.
        let set = match x.has(f) {
            Ok(v) => v,
            Err(_) if f.subleaf == 1 => continue,
            Err(e) => return Err(e),
        };
        if set && !lacking.is_empty() {
            out(at(
                f,
                RuleId::Avx512State,
                "is set but XCR0 cannot enable AVX-512 state (0xD.0 EAX lacks)",
                Detail::Mask(lacking),
            ));
        }
    }
    Ok(())
}

fn avx512_needs_f(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    if x.has(flags::AVX512F)? {
        return Ok(());
    }
    for f in flags::AVX512_OTHERS {
        let set = match x.has(f) {
            Ok(v) => v,
            Err(_) if f.subleaf == 1 => continue,
            Err(e) => return Err(e),
        };
        if set {
            out(at(
                f,
                RuleId::Avx512NeedsF,
                "is set but AVX512F (CPUID.(0x7,0).EBX[16]) is clear",
                Detail::None,
            ));
        }
    }
    Ok(())
}

fn avx512_state_hidden(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    state_hidden(
        x,
        out,
        RuleId::Avx512StateHidden,
        flags::AVX512F,
        XfeatureMask::AVX512,
        "is clear but leaf 0xD enumerates AVX-512 state",
    )
}

fn avx512_without_avx2(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let state = XfeatureMask::AVX512 & x.xcr0()?;
    if (!state.is_empty() || x.has(flags::AVX512F)?) && !x.has(flags::AVX2)? {
        out(at(
            flags::AVX2,
            RuleId::Avx512WithoutAvx2,
            "is clear although AVX-512 state or AVX512F is enumerated",
            Detail::Mask(state),
        ));
    }
    Ok(())
}

fn pku_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    needs_state(
        x,
        out,
        RuleId::PkuState,
        &[flags::PKU],
        XfeatureMask::from_bits(Xfeature::Pkru.bit()),
        "is set but leaf 0xD does not enumerate PKRU state",
    )?;
    if x.has(flags::OSPKE)? && !x.has(flags::PKU)? {
        out(at(
            flags::OSPKE,
            RuleId::PkuState,
            "is set but PKU (CPUID.(0x7,0).ECX[3]) is clear",
            Detail::None,
        ));
    }
    Ok(())
}

fn pku_state_hidden(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    state_hidden(
        x,
        out,
        RuleId::PkuStateHidden,
        flags::PKU,
        XfeatureMask::from_bits(Xfeature::Pkru.bit()),
        "is clear but leaf 0xD enumerates PKRU state",
    )
}

fn amx_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    needs_state(
        x,
        out,
        RuleId::AmxState,
        &flags::AMX,
        XfeatureMask::AMX,
        "is set but XCR0 cannot enable AMX tile state (0xD.0 EAX lacks)",
    )?;
    if !x.has(flags::AMX_TILE)? {
        for f in [flags::AMX_BF16, flags::AMX_INT8] {
            if x.has(f)? {
                out(at(
                    f,
                    RuleId::AmxState,
                    "is set but AMX-TILE (CPUID.(0x7,0).EDX[24]) is clear",
                    Detail::None,
                ));
            }
        }
    }
    Ok(())
}

fn amx_state_hidden(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    state_hidden(
        x,
        out,
        RuleId::AmxStateHidden,
        flags::AMX_TILE,
        XfeatureMask::AMX,
        "is clear but leaf 0xD enumerates AMX tile state",
    )
}

fn amx_leaves(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let tile = x.has(flags::AMX_TILE)?;
    let palettes = x.regs(0x1d, 0)?.eax;
    let tmul = leaf_present(x, 0x1e)?;
    if tile && palettes == 0 {
        out(at(
            flags::AMX_TILE,
            RuleId::AmxLeaves,
            "is set but leaf 0x1D enumerates no tile palette (0x1D.0 EAX = 0)",
            Detail::None,
        ));
    }
    if tile && !tmul {
        out(at(
            flags::AMX_TILE,
            RuleId::AmxLeaves,
            "is set but leaf 0x1E (TMUL information) is absent",
            Detail::None,
        ));
    }
    if !tile && palettes != 0 {
        out(Violation {
            rule: RuleId::AmxLeaves,
            leaf: 0x1d,
            subleaf: 0,
            reg: Reg::Eax,
            bit: None,
            subject: "max palette",
            message: "is non-zero but AMX-TILE (CPUID.(0x7,0).EDX[24]) is clear",
            detail: Detail::None,
        });
    }
    Ok(())
}

fn mpx_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    needs_state(
        x,
        out,
        RuleId::MpxState,
        &[flags::MPX],
        XfeatureMask::MPX,
        "is set but XCR0 cannot enable MPX state (0xD.0 EAX lacks)",
    )
}

fn mpx_state_hidden(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    state_hidden(
        x,
        out,
        RuleId::MpxStateHidden,
        flags::MPX,
        XfeatureMask::MPX,
        "is clear but leaf 0xD enumerates MPX state",
    )
}

fn pt_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let pt = x.has(flags::PT)?;
    let leaf = leaf_present(x, 0x14)?;
    if pt && !leaf {
        out(at(
            flags::PT,
            RuleId::PtState,
            "is set but leaf 0x14 (trace capabilities) is absent",
            Detail::None,
        ));
    }
    if !pt && leaf {
        out(at(
            flags::PT,
            RuleId::PtState,
            "is clear but leaf 0x14 enumerates trace capabilities",
            Detail::None,
        ));
    }
    let pt_bit = Xfeature::Pt.index();
    if !pt && x.xss()?.contains_index(pt_bit) {
        out(xss_bit(
            pt_bit,
            RuleId::PtState,
            "state is enumerated in IA32_XSS but INTEL_PT (CPUID.(0x7,0).EBX[25]) is clear",
            Detail::None,
        ));
    }
    Ok(())
}

fn cet_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let xss = x.xss()?;
    let lacking = XfeatureMask::CET - xss;
    let ss = x.has(flags::CET_SS)?;
    let ibt = x.has(flags::CET_IBT)?;
    for (f, set) in [(flags::CET_SS, ss), (flags::CET_IBT, ibt)] {
        if set && !lacking.is_empty() {
            out(at(
                f,
                RuleId::CetState,
                "is set but IA32_XSS cannot enable CET state (0xD.1 ECX lacks)",
                Detail::Mask(lacking),
            ));
        }
    }
    let present = XfeatureMask::CET & xss;
    if !ss && !ibt && !present.is_empty() {
        for i in present.iter_indices() {
            out(xss_bit(
                i,
                RuleId::CetState,
                "state is enumerated in IA32_XSS but neither CET_SS nor CET_IBT is set",
                Detail::None,
            ));
        }
    }
    Ok(())
}

fn key_locker_leaf(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let kl = x.has(flags::KEY_LOCKER)?;
    let leaf = leaf_present(x, 0x19)?;
    if kl && !leaf {
        out(at(
            flags::KEY_LOCKER,
            RuleId::KeyLockerLeaf,
            "is set but leaf 0x19 (Key Locker) is absent",
            Detail::None,
        ));
    }
    if !kl && leaf {
        out(at(
            flags::KEY_LOCKER,
            RuleId::KeyLockerLeaf,
            "is clear but leaf 0x19 enumerates Key Locker",
            Detail::None,
        ));
    }
    Ok(())
}

fn xsaves_xss(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let xss = x.xss()?;
    if !xss.is_empty() && !x.has(XSAVES)? {
        out(at(
            XSAVES,
            RuleId::XsavesXss,
            "is clear but 0xD.1 ECX enumerates IA32_XSS bits",
            Detail::Mask(xss),
        ));
    }
    Ok(())
}

fn xsavec_align(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let info = x.info()?;
    let aligned = info
        .supported_all()
        .iter_indices()
        .filter(|&i| i >= 2 && info.raw_subleaf(i).ecx & leaf_d_ecx::ALIGN64 != 0)
        .fold(XfeatureMask::EMPTY, |m, i| {
            m | XfeatureMask::from_bits(1 << i)
        });
    if !aligned.is_empty() && !x.has(XSAVEC)? {
        out(at(
            XSAVEC,
            RuleId::XsavecAlign,
            "is clear but components carry compacted-format alignment (0xD.i ECX[1])",
            Detail::Mask(aligned),
        ));
    }
    Ok(())
}

fn xfd_flag(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let info = x.info()?;
    let capable = info.xfd_capable();
    if !capable.is_empty() && !x.has(XFD)? {
        out(at(
            XFD,
            RuleId::XfdFlag,
            "is clear but components are marked XFD-capable (0xD.i ECX[2])",
            Detail::Mask(capable),
        ));
    }
    Ok(())
}

fn xsaveopt_present(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let beyond = x.xcr0()? - XfeatureMask::AVX;
    if !beyond.is_empty() && !x.has(XSAVEOPT)? {
        out(at(
            XSAVEOPT,
            RuleId::XsaveoptPresent,
            "is clear although leaf 0xD enumerates components newer than AVX",
            Detail::Mask(beyond),
        ));
    }
    Ok(())
}

fn max_standard_size(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    let info = x.info()?;
    let mask = info.supported_xcr0();
    // A parsed XsaveInfo lays out its own supported mask.
    let Ok(expected) = info.standard_size(mask) else {
        return Ok(());
    };
    let found = info.max_standard_size();
    if found != expected {
        out(Violation {
            rule: RuleId::MaxStandardSize,
            leaf: 0xd,
            subleaf: 0,
            reg: Reg::Ecx,
            bit: None,
            subject: "maximum standard size",
            message: "differs from the end of the highest supported user component",
            detail: Detail::Size {
                found,
                expected,
                mask,
            },
        });
    }
    Ok(())
}

fn in_force_not_applicable(x: &Facts<'_>) -> Result<(), Skip> {
    if x.ctx.supported_table {
        return Err(Skip::NotApplicable(
            "a supported-CPUID table: the sizes in force depend on the guest's XCR0/IA32_XSS",
        ));
    }
    Ok(())
}

fn enabled_standard_size(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    in_force_not_applicable(x)?;
    let Some(xcr0) = x.ctx.xcr0 else {
        return Err(Skip::NotApplicable("the XCR0 in force is not known"));
    };
    let info = x.info()?;
    if let Err(e) = xcr0.validate_xcr0(info.supported_xcr0()) {
        out(Violation {
            rule: RuleId::EnabledStandardSize,
            leaf: 0xd,
            subleaf: 0,
            reg: Reg::Eax,
            bit: None,
            subject: "XCR0 in force",
            message: "is not a valid XCR0 for the enumerated support",
            detail: Detail::Xcr0(xcr0, e),
        });
        return Ok(());
    }
    let Ok(expected) = info.standard_size(xcr0) else {
        return Ok(());
    };
    let found = x.regs(0xd, 0)?.ebx;
    if found != expected {
        out(Violation {
            rule: RuleId::EnabledStandardSize,
            leaf: 0xd,
            subleaf: 0,
            reg: Reg::Ebx,
            bit: None,
            subject: "standard size for XCR0",
            message: "differs from the layout of the XCR0 in force",
            detail: Detail::Size {
                found,
                expected,
                mask: xcr0,
            },
        });
    }
    Ok(())
}

/// Largest IA32_XSS whose subsets are tried when the XSS in force is
/// unknown (2^12 layouts at most).
const MAX_UNKNOWN_XSS_BITS: u32 = 12;

fn compacted_size(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    in_force_not_applicable(x)?;
    let Some(xcr0) = x.ctx.xcr0 else {
        return Err(Skip::NotApplicable("the XCR0 in force is not known"));
    };
    let info = x.info()?;
    if !info.has_xsaves() {
        return Err(Skip::NotApplicable(
            "0xD.1 EBX is defined with XSAVES, which is not enumerated",
        ));
    }
    if xcr0.validate_xcr0(info.supported_xcr0()).is_err() {
        // Reported by enabled-standard-size.
        return Ok(());
    }
    let found = x.regs(0xd, 1)?.ebx;
    let size = |xss: XfeatureMask| info.compacted_size(xcr0 | xss).ok();
    let (ok, expected, mask) = match x.ctx.xss {
        Some(xss) => {
            let e = size(xss);
            (e == Some(found), e, xcr0 | xss)
        }
        None => {
            let sup = info.supported_xss();
            if sup.count() > MAX_UNKNOWN_XSS_BITS {
                return Err(Skip::NotApplicable("the IA32_XSS in force is not known"));
            }
            // Any IA32_XSS the CPU supports could be in force: try each subset.
            let mut s = sup.bits();
            let mut ok = false;
            loop {
                ok |= size(XfeatureMask::from_bits(s)) == Some(found);
                if s == 0 || ok {
                    break;
                }
                s = (s - 1) & sup.bits();
            }
            (ok, size(XfeatureMask::EMPTY), xcr0)
        }
    };
    if !ok {
        out(Violation {
            rule: RuleId::CompactedSize,
            leaf: 0xd,
            subleaf: 1,
            reg: Reg::Ebx,
            bit: None,
            subject: "compacted size for XCR0 | IA32_XSS",
            message: if x.ctx.xss.is_some() {
                "differs from the compacted layout of the XCR0 and IA32_XSS in force"
            } else {
                "matches the compacted layout of the XCR0 in force with no supported IA32_XSS"
            },
            detail: Detail::Size {
                found,
                expected: expected.unwrap_or(0),
                mask,
            },
        });
    }
    Ok(())
}

macro_rules! rule {
    ($id:ident, $name:literal, $sev:ident, $check:ident, $summary:literal, $why:literal) => {
        Rule {
            id: RuleId::$id,
            name: $name,
            severity: Severity::$sev,
            summary: $summary,
            why: $why,
            check: $check,
        }
    };
}

/// Every rule, in [`RuleId`] order.
pub static RULES: [Rule; 29] =
    [
        rule!(
            XsaveLeaf,
            "xsave-leaf",
            Error,
            xsave_leaf,
            "XSAVE (1.ECX[26]) <=> leaf 0xD enumerates XCR0 bits",
            "SDM Vol. 1 13.2: CPUID.1:ECX.XSAVE enumerates the XSAVE feature set (XSAVE/XRSTOR, \
         XSETBV/XGETBV, XCR0) and leaf 0DH enumerates its state components; one is not \
         defined without the other."
        ),
        rule!(
            OsxsaveNeedsXsave,
            "osxsave-needs-xsave",
            Error,
            osxsave_needs_xsave,
            "OSXSAVE (1.ECX[27]) => XSAVE",
            "SDM Vol. 3A 2.5: CR4.OSXSAVE can only be set on a processor that supports XSAVE \
         (setting it otherwise faults), and CPUID.1:ECX.OSXSAVE reflects CR4.OSXSAVE."
        ),
        rule!(
            OsxsaveCr4,
            "osxsave-cr4",
            Error,
            osxsave_cr4,
            "OSXSAVE (1.ECX[27]) = CR4.OSXSAVE",
            "SDM Vol. 2A CPUID: bit 27 of ECX is a copy of CR4.OSXSAVE; software tests it before \
         XGETBV, which faults when CR4.OSXSAVE is clear."
        ),
        rule!(
            SupportedXcr0,
            "supported-xcr0",
            Error,
            supported_xcr0,
            "0xD.0 EDX:EAX is a valid XCR0",
            "SDM Vol. 1 13.3: XSETBV faults for an XCR0 without x87, with AVX but not SSE, with \
         part of AVX-512 (5-7), part of MPX (3-4) or part of AMX (17-18); a processor \
         supports whole groups, so its full supported mask is always settable."
        ),
        rule!(
            ComponentSubleaves,
            "component-subleaves",
            Error,
            component_subleaves,
            "each supported component's subleaf 0xD.i is present and sane",
            "SDM Vol. 1 13.2: for each supported component i >= 2, CPUID.(0DH,i) gives a non-zero \
         size, user components an offset past the 576-byte legacy region and header inside \
         the maximum size, and ECX[0] whether it is IA32_XSS state."
        ),
        rule!(
            AvxState,
            "avx-state",
            Error,
            avx_state,
            "AVX (1.ECX[28]) => XCR0 bits 1 and 2 supported",
            "SDM Vol. 1 14.3: AVX instructions need XCR0[2:1] = 11b; a processor with AVX \
         enumerates SSE and AVX state in leaf 0DH."
        ),
        rule!(
            AvxStateHidden,
            "avx-state-hidden",
            Warning,
            avx_state_hidden,
            "XCR0 bit 2 supported => AVX (1.ECX[28])",
            "AVX state exists for the AVX instructions; an OS (Linux) drops XSAVE components \
         whose feature flag is clear, so state enumerated with its feature hidden is unusable."
        ),
        rule!(
            VexNeedsAvx,
            "vex-needs-avx",
            Error,
            vex_needs_avx,
            "FMA, F16C, AVX2, VAES, VPCLMULQDQ => AVX",
            "SDM Vol. 1 14.5-14.7: the detection procedure of the VEX-encoded extensions checks \
         AVX (and XCR0 through OSXSAVE) first; they operate on the YMM state of AVX."
        ),
        rule!(
            Avx512State,
            "avx512-state",
            Error,
            avx512_state,
            "AVX-512 flags (7.0 EBX/ECX/EDX, 7.1 EAX[5]) => XCR0 bits 2 and 5-7 supported",
            "SDM Vol. 1 15.2: AVX-512 instructions need XCR0[7:5] = 111b and XCR0[2:1] = 11b \
         (opmask, ZMM_Hi256, Hi16_ZMM state)."
        ),
        rule!(
            Avx512NeedsF,
            "avx512-needs-f",
            Error,
            avx512_needs_f,
            "every AVX-512 flag => AVX512F (7.0.EBX[16])",
            "SDM Vol. 1 15.2: software checks AVX512F before any other AVX-512 subset; every \
         subset extends the foundation instructions."
        ),
        rule!(
            Avx512StateHidden,
            "avx512-state-hidden",
            Warning,
            avx512_state_hidden,
            "XCR0 bits 5-7 supported => AVX512F",
            "AVX-512 state exists for the AVX-512 instructions; Linux drops the opmask and ZMM \
         components when AVX512F is clear, so the enumerated state is unusable."
        ),
        rule!(
            Avx512WithoutAvx2,
            "avx512-without-avx2",
            Warning,
            avx512_without_avx2,
            "AVX-512 state or AVX512F => AVX2 (7.0.EBX[5])",
            "No processor implements AVX-512 without AVX2; software (compilers' x86-64-v4, \
         Linux's KVM selftests) assumes the AVX2 subset below it."
        ),
        rule!(
            PkuState,
            "pku-state",
            Error,
            pku_state,
            "PKU (7.0.ECX[3]) => XCR0 bit 9; OSPKE (7.0.ECX[4]) => PKU",
            "SDM Vol. 1 13.5.7: PKRU is XSAVE state component 9 on processors with PKU; OSPKE \
         copies CR4.PKE, which only exists with PKU."
        ),
        rule!(
            PkuStateHidden,
            "pku-state-hidden",
            Warning,
            pku_state_hidden,
            "XCR0 bit 9 supported => PKU",
            "PKRU state exists for protection keys; Linux drops component 9 when PKU is clear."
        ),
        rule!(
            AmxState,
            "amx-state",
            Error,
            amx_state,
            "AMX-TILE/BF16/INT8 (7.0.EDX[24,22,25]) => XCR0 bits 17-18; BF16/INT8 => TILE",
            "SDM Vol. 1 18.2: AMX instructions need XCR0[18:17] = 11b (XTILECFG, XTILEDATA); \
         AMX-BF16 and AMX-INT8 operate on the tiles of AMX-TILE."
        ),
        rule!(
            AmxStateHidden,
            "amx-state-hidden",
            Warning,
            amx_state_hidden,
            "XCR0 bits 17-18 supported => AMX-TILE",
            "Tile state exists for AMX; Linux drops components 17-18 when AMX-TILE is clear."
        ),
        rule!(
            AmxLeaves,
            "amx-leaves",
            Error,
            amx_leaves,
            "AMX-TILE <=> leaf 0x1D (max palette >= 1) and leaf 0x1E present",
            "SDM Vol. 2A CPUID: leaf 1DH enumerates the tile palettes and leaf 1EH the TMUL \
         limits of AMX; software sizes TILECFG from them."
        ),
        rule!(
            MpxState,
            "mpx-state",
            Error,
            mpx_state,
            "MPX (7.0.EBX[14]) => XCR0 bits 3-4",
            "SDM Vol. 1 17.3: MPX needs XCR0[4:3] = 11b (BNDREGS, BNDCSR)."
        ),
        rule!(
            MpxStateHidden,
            "mpx-state-hidden",
            Warning,
            mpx_state_hidden,
            "XCR0 bits 3-4 supported => MPX",
            "MPX state exists for MPX; Linux drops components 3-4 when MPX is clear."
        ),
        rule!(
            PtState,
            "pt-state",
            Error,
            pt_state,
            "Intel PT (7.0.EBX[25]) <=> leaf 0x14; IA32_XSS bit 8 => PT",
            "SDM Vol. 3C 33.3: leaf 14H enumerates Intel PT capabilities and is defined when \
         CPUID.(07H,0):EBX[25] is set; PT state (component 8) is the state of Intel PT."
        ),
        rule!(
            CetState,
            "cet-state",
            Error,
            cet_state,
            "CET_SS (7.0.ECX[7]) / CET_IBT (7.0.EDX[20]) <=> IA32_XSS bits 11-12",
            "SDM Vol. 1 17.2 and 13.5.9: CET user and supervisor state are XSAVES components 11 \
         and 12 on processors with CET; without CET they have nothing to hold."
        ),
        rule!(
            KeyLockerLeaf,
            "key-locker-leaf",
            Error,
            key_locker_leaf,
            "Key Locker (7.0.ECX[23]) <=> leaf 0x19 present",
            "Key Locker specification: CPUID.19H enumerates Key Locker features and exists when \
         CPUID.(07H,0):ECX[23] is set."
        ),
        rule!(
            XsavesXss,
            "xsaves-xss",
            Error,
            xsaves_xss,
            "IA32_XSS bits in 0xD.1 ECX/EDX => XSAVES (0xD.1 EAX[3])",
            "SDM Vol. 1 13.3: IA32_XSS exists and is used only with XSAVES/XRSTORS; supervisor \
         components cannot be saved without them."
        ),
        rule!(XsavecAlign, "xsavec-align", Warning, xsavec_align,
        "a component with 0xD.i ECX[1] (64-byte aligned when compacted) => XSAVEC (0xD.1 EAX[1])",
        "SDM Vol. 1 13.4.3: ECX[1] describes the compacted format of XSAVEC/XSAVES; \
         processors that report it have XSAVEC."),
        rule!(
            XfdFlag,
            "xfd-flag",
            Error,
            xfd_flag,
            "a component with 0xD.i ECX[2] (XFD) => XFD (0xD.1 EAX[4])",
            "SDM Vol. 1 13.14: ECX[2] says IA32_XFD can disable the component, which needs \
         extended feature disable itself."
        ),
        rule!(
            XsaveoptPresent,
            "xsaveopt-present",
            Warning,
            xsaveopt_present,
            "components newer than AVX (XCR0 bits >= 3) => XSAVEOPT (0xD.1 EAX[0])",
            "XSAVEOPT predates every component above AVX: no processor that enumerates MPX, \
         AVX-512, PKRU or AMX state lacks it, so 0xD.1 EAX = 0 with such state means the \
         subleaf was not filled in."
        ),
        rule!(
            MaxStandardSize,
            "max-standard-size",
            Error,
            max_standard_size,
            "0xD.0 ECX = standard size of all supported user components",
            "SDM Vol. 2A CPUID: 0DH.0 ECX is the size of the XSAVE area for every component \
         XCR0 supports, i.e. the end of the highest one."
        ),
        rule!(
            EnabledStandardSize,
            "enabled-standard-size",
            Error,
            enabled_standard_size,
            "0xD.0 EBX = standard size of the XCR0 in force",
            "SDM Vol. 2A CPUID: 0DH.0 EBX is the XSAVE area size for the features currently \
         enabled in XCR0 (and that XCR0 is within the supported mask)."
        ),
        rule!(
            CompactedSize,
            "compacted-size",
            Error,
            compacted_size,
            "0xD.1 EBX = compacted size of XCR0 | IA32_XSS in force",
            "SDM Vol. 2A CPUID: 0DH.1 EBX is the size of the XSAVE area containing all states \
         enabled by XCR0 | IA32_XSS, in the compacted format of XSAVES."
        ),
    ];

/// Runs every rule on `view`: each violation goes to `violation`, each rule
/// that could not be checked to `skipped`.
pub fn lint(
    view: &dyn CpuidView,
    ctx: Context,
    violation: &mut Sink<'_>,
    skipped: &mut dyn FnMut(RuleId, Skip),
) {
    let facts = Facts::new(view, ctx);
    for r in &RULES {
        if let Err(s) = (r.check)(&facts, violation) {
            skipped(r.id, s);
        }
    }
}

/// Every violation and every unchecked rule (feature `std`).
#[cfg(feature = "std")]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LintReport {
    /// Violations, in rule order.
    pub violations: std::vec::Vec<Violation>,
    /// Rules not checked, and why.
    pub skipped: std::vec::Vec<(RuleId, Skip)>,
}

/// [`lint`], collected.
#[cfg(feature = "std")]
pub fn lint_all(view: &dyn CpuidView, ctx: Context) -> LintReport {
    let mut r = LintReport::default();
    let mut skipped = std::vec::Vec::new();
    lint(view, ctx, &mut |v| r.violations.push(v), &mut |id, s| {
        skipped.push((id, s))
    });
    r.skipped = skipped;
    r
}

// Keep the leaf 1 bit numbers in one place: the flags above must agree.
const _: () = assert!(flags::XSAVE.bit == leaf_1_ecx::XSAVE.trailing_zeros());
const _: () = assert!(flags::OSXSAVE.bit == leaf_1_ecx::OSXSAVE.trailing_zeros());
const _: () = assert!(XSAVEOPT.bit == leaf_d1_eax::XSAVEOPT.trailing_zeros());
const _: () = assert!(XSAVEC.bit == leaf_d1_eax::XSAVEC.trailing_zeros());
const _: () = assert!(XSAVES.bit == leaf_d1_eax::XSAVES.trailing_zeros());
const _: () = assert!(XFD.bit == leaf_d1_eax::XFD.trailing_zeros());

#[cfg(test)]
mod tests;
