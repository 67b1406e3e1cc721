//! Rules of the XSAVE feature set itself: leaf 1 XSAVE/OSXSAVE, leaf 0xD
//! subleaves 0 and 1 (XCR0/IA32_XSS, XSAVEOPT/XSAVEC/XSAVES/XFD) and the
//! save-area sizes.

use crate::info::{leaf_d_ecx, InfoError};
use crate::mask::XfeatureMask;

use super::facts::{at, Facts, XFD, XSAVEC, XSAVEOPT, XSAVES};
use super::flags;
use super::view::{Osxsave, Reg};
use super::violation::{Detail, RuleId, Sink, Skip, Violation};

pub(super) fn xsave_leaf(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn osxsave_needs_xsave(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn osxsave_cr4(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn supported_xcr0(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn component_subleaves(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn xsaves_xss(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn xsavec_align(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn xfd_flag(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn xsaveopt_present(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn max_standard_size(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn in_force_not_applicable(x: &Facts<'_>) -> Result<(), Skip> {
    if x.ctx.supported_table {
        return Err(Skip::NotApplicable(
            "a supported-CPUID table: the sizes in force depend on the guest's XCR0/IA32_XSS",
        ));
    }
    Ok(())
}

pub(super) fn enabled_standard_size(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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
pub(super) const MAX_UNKNOWN_XSS_BITS: u32 = 12;

pub(super) fn compacted_size(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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
