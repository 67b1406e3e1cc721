//! Rules of the other state components: PKU, AMX, MPX, Intel PT, CET and
//! Key Locker (feature flags, their XCR0/IA32_XSS bits and their leaves).

use crate::feature::Xfeature;
use crate::mask::XfeatureMask;

use super::facts::{at, leaf_present, needs_state, state_hidden, xss_bit, Facts};
use super::flags;
use super::view::Reg;
use super::violation::{Detail, RuleId, Sink, Skip, Violation};

pub(super) fn pku_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn pku_state_hidden(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    state_hidden(
        x,
        out,
        RuleId::PkuStateHidden,
        flags::PKU,
        XfeatureMask::from_bits(Xfeature::Pkru.bit()),
        "is clear but leaf 0xD enumerates PKRU state",
    )
}

pub(super) fn amx_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn amx_state_hidden(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    state_hidden(
        x,
        out,
        RuleId::AmxStateHidden,
        flags::AMX_TILE,
        XfeatureMask::AMX,
        "is clear but leaf 0xD enumerates AMX tile state",
    )
}

pub(super) fn amx_leaves(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn mpx_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    needs_state(
        x,
        out,
        RuleId::MpxState,
        &[flags::MPX],
        XfeatureMask::MPX,
        "is set but XCR0 cannot enable MPX state (0xD.0 EAX lacks)",
    )
}

pub(super) fn mpx_state_hidden(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    state_hidden(
        x,
        out,
        RuleId::MpxStateHidden,
        flags::MPX,
        XfeatureMask::MPX,
        "is clear but leaf 0xD enumerates MPX state",
    )
}

pub(super) fn pt_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn cet_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn key_locker_leaf(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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
