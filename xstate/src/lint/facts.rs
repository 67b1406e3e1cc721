//! What the rules read ([`Facts`]) and the helpers every rule group shares.

use crate::feature::Xfeature;
use crate::info::{CpuidRegs, InfoError, XsaveInfo};
use crate::mask::XfeatureMask;

use super::view::{Context, CpuidView, Flag, Reg};
use super::violation::{Detail, RuleId, Sink, Skip, Violation};

/// What the rules read: the view, the context and leaf 0xD parsed once.
pub struct Facts<'a> {
    pub(super) view: &'a dyn CpuidView,
    pub(super) ctx: Context,
    /// Leaf 0xD parsed by [`XsaveInfo`]: `Err(Skip)` when not recorded.
    pub(super) info: Result<Result<XsaveInfo, InfoError>, Skip>,
}

impl<'a> Facts<'a> {
    /// Reads the view's leaf 0xD once.
    pub fn new(view: &'a dyn CpuidView, ctx: Context) -> Self {
        let info = read_info(view);
        Self { view, ctx, info }
    }

    pub(super) fn regs(&self, leaf: u32, subleaf: u32) -> Result<CpuidRegs, Skip> {
        self.view
            .regs(leaf, subleaf)
            .ok_or(Skip::Missing { leaf, subleaf })
    }

    pub(super) fn has(&self, f: Flag) -> Result<bool, Skip> {
        Ok(f.reg.of(&self.regs(f.leaf, f.subleaf)?) & (1 << f.bit) != 0)
    }

    /// Supported XCR0 from 0xD.0 EDX:EAX (zero when the leaf is absent).
    pub(super) fn xcr0(&self) -> Result<XfeatureMask, Skip> {
        let r = self.regs(0xd, 0)?;
        Ok(XfeatureMask::from_bits(
            u64::from(r.eax) | (u64::from(r.edx) << 32),
        ))
    }

    /// Supported IA32_XSS from 0xD.1 EDX:ECX.
    pub(super) fn xss(&self) -> Result<XfeatureMask, Skip> {
        let r = self.regs(0xd, 1)?;
        Ok(XfeatureMask::from_bits(
            u64::from(r.ecx) | (u64::from(r.edx) << 32),
        ))
    }

    /// The parsed leaf 0xD; not applicable when it is absent or broken
    /// (the rules that say so are `xsave-leaf` and `component-subleaves`).
    pub(super) fn info(&self) -> Result<&XsaveInfo, Skip> {
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

pub(super) fn at(f: Flag, rule: RuleId, message: &'static str, detail: Detail) -> Violation {
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
pub(super) fn xss_bit(i: u32, rule: RuleId, message: &'static str, detail: Detail) -> Violation {
    let (reg, bit) = if i < 32 {
        (Reg::Ecx, i)
    } else {
        (Reg::Edx, i - 32)
    };
    let subject = Xfeature::from_index(i).map_or("state component", |f| f.short_name());
    at(Flag::at(0xd, 1, reg, bit, subject), rule, message, detail)
}

/// 0xD.1 EAX feature bit `bit` named `name`.
pub(super) const fn d1_flag(bit: u32, name: &'static str) -> Flag {
    Flag::at(0xd, 1, Reg::Eax, bit, name)
}

pub(super) const XSAVEOPT: Flag = d1_flag(0, "XSAVEOPT");
pub(super) const XSAVEC: Flag = d1_flag(1, "XSAVEC");
pub(super) const XSAVES: Flag = d1_flag(3, "XSAVES");
pub(super) const XFD: Flag = d1_flag(4, "XFD");

/// A leaf is present when its subleaf 0 is not all zero.
pub(super) fn leaf_present(facts: &Facts<'_>, leaf: u32) -> Result<bool, Skip> {
    Ok(!facts.regs(leaf, 0)?.is_zero())
}

/// `feature` set ⇒ every component of `needs` supported.
pub(super) fn needs_state(
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
pub(super) fn state_hidden(
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
