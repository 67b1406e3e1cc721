//! Mask parsing, printing, XCR0 rules and dependency closure.

use xstate::{MaskError, Xcr0Error, Xfeature, XfeatureMask};

fn m(bits: u64) -> XfeatureMask {
    XfeatureMask::from_bits(bits)
}

const SPR: XfeatureMask = XfeatureMask::from_bits(0x602e7);

#[test]
fn names_and_indices() {
    for (i, f) in Xfeature::ALL.iter().enumerate() {
        assert_eq!(f.index(), i as u32);
        assert_eq!(Xfeature::from_index(i as u32), Some(*f));
        assert_eq!(Xfeature::from_short_name(f.short_name()), Some(*f));
        assert_eq!(f.bit(), 1 << i);
    }
    assert_eq!(Xfeature::from_index(20), None);
    assert_eq!(
        Xfeature::from_short_name("ZMM_HI256"),
        Some(Xfeature::ZmmHi256)
    );
    let sup: Vec<_> = Xfeature::ALL
        .iter()
        .filter(|f| f.is_supervisor())
        .map(|f| f.short_name())
        .collect();
    assert_eq!(
        sup,
        ["pt", "pasid", "cet_u", "cet_s", "hdc", "uintr", "lbr", "hwp"]
    );
    assert_eq!(Xfeature::Hi16Zmm.long_name(), "AVX-512 ZMM_Hi256");
    assert_eq!(Xfeature::XtileData.long_name(), "AMX Tile data");
    assert_eq!(XfeatureMask::SUPERVISOR.bits(), 0x1fd00);
}

#[test]
fn parse_forms() {
    assert_eq!(XfeatureMask::parse("0x2e7", SPR), Ok(m(0x2e7)));
    assert_eq!(XfeatureMask::parse("0X2E7", SPR), Ok(m(0x2e7)));
    assert_eq!(XfeatureMask::parse("743", SPR), Ok(m(0x2e7)));
    assert_eq!(XfeatureMask::parse("x87,sse,avx", SPR), Ok(m(0x7)));
    assert_eq!(XfeatureMask::parse(" X87 , SSE ", SPR), Ok(m(0x3)));
    assert_eq!(XfeatureMask::parse("all", SPR), Ok(SPR));
    assert_eq!(XfeatureMask::parse("host", SPR), Ok(SPR));
    assert_eq!(XfeatureMask::parse("host,-avx512", SPR), Ok(m(0x60207)));
    assert_eq!(XfeatureMask::parse("-avx512", SPR), Ok(m(0x60207)));
    assert_eq!(XfeatureMask::parse("-amx,-pkru", SPR), Ok(m(0xe7)));
    assert_eq!(XfeatureMask::parse("x87,sse,+avx", SPR), Ok(m(0x7)));
    assert!(XfeatureMask::parse("legacy_free,", SPR).is_err());
    assert_eq!(XfeatureMask::parse("avx512", SPR), Ok(m(0xe0)));
    assert_eq!(XfeatureMask::parse("mpx,cet", SPR), Ok(m(0x1818)));
    assert_eq!(XfeatureMask::parse("amx", SPR), Ok(m(0x60000)));
    assert_eq!(XfeatureMask::parse("none", SPR), Ok(m(0)));
    assert_eq!(XfeatureMask::parse("x87,bit25", SPR), Ok(m(1 | 1 << 25)));
    assert_eq!(XfeatureMask::parse("0x2_e7", SPR), Ok(m(0x2e7)));
}

#[test]
fn parse_errors() {
    assert_eq!(XfeatureMask::parse("", SPR), Err(MaskError::Empty));
    assert_eq!(
        XfeatureMask::parse("x87,,sse", SPR),
        Err(MaskError::EmptyToken)
    );
    assert_eq!(XfeatureMask::parse("-", SPR), Err(MaskError::EmptyToken));
    match XfeatureMask::parse("x87,avx3", SPR) {
        Err(MaskError::UnknownName(t)) => assert_eq!(t.as_str(), "avx3"),
        other => panic!("{other:?}"),
    }
    match XfeatureMask::parse("0xzz", SPR) {
        Err(e @ MaskError::BadNumber(_)) => assert!(e.to_string().contains("0xzz")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        XfeatureMask::parse("0x1ffffffffffffffff", SPR),
        Err(MaskError::BadNumber(_))
    ));
    assert!(matches!(
        XfeatureMask::parse("bit99", SPR),
        Err(MaskError::UnknownName(_))
    ));
    // A very long token is truncated in the error, not a panic.
    let long = "é".repeat(40);
    assert!(matches!(
        XfeatureMask::parse(&long, SPR),
        Err(MaskError::UnknownName(_))
    ));
}

#[test]
fn display_round_trips() {
    assert_eq!(m(0x7).to_string(), "x87,sse,avx");
    assert_eq!(m(0).to_string(), "none");
    assert_eq!(
        SPR.to_string(),
        "x87,sse,avx,opmask,zmm_hi256,hi16_zmm,pkru,xtilecfg,xtiledata"
    );
    assert_eq!(format!("{:#x}", SPR), "0x602e7");
    assert_eq!(format!("{:X}", SPR), "602E7");
    for bits in [0u64, 3, 7, 0x2e7, 0x602e7, 0xdd00, 1 << 40 | 1] {
        assert_eq!(XfeatureMask::parse(&m(bits).to_string(), SPR), Ok(m(bits)));
    }
}

#[test]
fn set_operations() {
    let a = m(0x7);
    assert!(a.contains(Xfeature::Avx));
    assert!(!a.contains(Xfeature::Pkru));
    assert_eq!(a | m(0x200), m(0x207));
    assert_eq!(a & m(0x5), m(0x5));
    assert_eq!(a - m(0x4), m(0x3));
    assert_eq!(!m(0) & m(0xff), m(0xff));
    assert_eq!(
        a.iter().collect::<Vec<_>>(),
        vec![Xfeature::X87, Xfeature::Sse, Xfeature::Avx]
    );
    assert_eq!(m(0x602e7 | 0xdd00).user(), m(0x602e7));
    assert_eq!(m(0x602e7 | 0xdd00).supervisor(), m(0xdd00));
    assert_eq!(Xfeature::X87 | Xfeature::Sse, XfeatureMask::LEGACY);
    assert_eq!(
        [Xfeature::Avx, Xfeature::Pkru]
            .into_iter()
            .collect::<XfeatureMask>(),
        m(0x204)
    );
}

#[test]
fn every_xcr0_rule_has_its_error() {
    let all = m(0x602ff); // SPR plus MPX, for the MPX rule
    assert_eq!(m(0x602e7).validate_xcr0(SPR), Ok(()));
    assert_eq!(m(0x3).validate_xcr0(SPR), Ok(()));
    assert_eq!(m(0x1).validate_xcr0(SPR), Ok(()));
    assert_eq!(m(0x6).validate_xcr0(SPR), Err(Xcr0Error::X87Missing));
    assert_eq!(m(0x5).validate_xcr0(SPR), Err(Xcr0Error::AvxWithoutSse));
    assert_eq!(
        m(0x27).validate_xcr0(SPR),
        Err(Xcr0Error::Avx512Partial(m(0x20)))
    );
    assert_eq!(
        m(0x67).validate_xcr0(SPR),
        Err(Xcr0Error::Avx512Partial(m(0x60)))
    );
    assert_eq!(m(0xe3).validate_xcr0(SPR), Err(Xcr0Error::Avx512WithoutAvx));
    assert_eq!(
        m(0xf).validate_xcr0(all),
        Err(Xcr0Error::MpxPartial(m(0x8)))
    );
    assert_eq!(m(0x1f).validate_xcr0(all), Ok(()));
    assert_eq!(
        m(0x20007).validate_xcr0(SPR),
        Err(Xcr0Error::AmxPartial(m(0x20000)))
    );
    assert_eq!(
        m(0x40007).validate_xcr0(SPR),
        Err(Xcr0Error::AmxPartial(m(0x40000)))
    );
    assert_eq!(
        m(0x807).validate_xcr0(SPR),
        Err(Xcr0Error::SupervisorBits(m(0x800)))
    );
    assert_eq!(
        m(0x1f).validate_xcr0(SPR),
        Err(Xcr0Error::Unsupported(m(0x18)))
    );
    assert_eq!(
        m(0x207).validate_xcr0(m(0x7)),
        Err(Xcr0Error::Unsupported(m(0x200)))
    );
    assert_eq!(
        m(1 << 63 | 3).validate_xcr0(SPR),
        Err(Xcr0Error::ReservedBit63)
    );
    // Messages name the rule.
    assert!(Xcr0Error::AvxWithoutSse
        .to_string()
        .contains("requires SSE"));
    assert!(Xcr0Error::AmxPartial(m(0x20000))
        .to_string()
        .contains("xtilecfg"));
}

#[test]
fn dependency_closure() {
    assert_eq!(XfeatureMask::AVX512.with_dependencies(), m(0xe7));
    assert_eq!(Xfeature::ZmmHi256.mask().with_dependencies(), m(0xe7));
    assert_eq!(Xfeature::Avx.mask().with_dependencies(), m(0x7));
    assert_eq!(Xfeature::XtileData.mask().with_dependencies(), m(0x60003));
    assert_eq!(Xfeature::BndCsr.mask().with_dependencies(), m(0x1b));
    assert_eq!(m(0).with_dependencies(), m(0x3));
    // The closure of any user mask satisfies every rule (given support).
    for bits in 0..(1u64 << 8) {
        let c = m(bits).with_dependencies();
        assert_eq!(c.validate_xcr0(m(0xff)), Ok(()), "{bits:#x}");
    }
}
