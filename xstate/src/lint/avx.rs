//! AVX and AVX-512 rules: feature flags against the state XCR0 can enable.

use crate::feature::Xfeature;
use crate::mask::XfeatureMask;

use super::facts::{at, needs_state, state_hidden, Facts};
use super::flags;
use super::view::Flag;
use super::violation::{Detail, RuleId, Sink, Skip};

pub(super) fn avx_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    needs_state(
        x,
        out,
        RuleId::AvxState,
        &[flags::AVX],
        XfeatureMask::AVX,
        "is set but XCR0 cannot enable the state it needs (0xD.0 EAX lacks)",
    )
}

pub(super) fn avx_state_hidden(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    state_hidden(
        x,
        out,
        RuleId::AvxStateHidden,
        flags::AVX,
        XfeatureMask::from_bits(Xfeature::Avx.bit()),
        "is clear but leaf 0xD enumerates AVX state",
    )
}

pub(super) fn vex_needs_avx(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn avx512_flags() -> impl Iterator<Item = Flag> {
    core::iter::once(flags::AVX512F).chain(flags::AVX512_OTHERS)
}

pub(super) fn avx512_state(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn avx512_needs_f(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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

pub(super) fn avx512_state_hidden(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
    state_hidden(
        x,
        out,
        RuleId::Avx512StateHidden,
        flags::AVX512F,
        XfeatureMask::AVX512,
        "is clear but leaf 0xD enumerates AVX-512 state",
    )
}

pub(super) fn avx512_without_avx2(x: &Facts<'_>, out: &mut Sink<'_>) -> Result<(), Skip> {
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
