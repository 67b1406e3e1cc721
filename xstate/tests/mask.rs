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
    assert_eq!(Xfeature::Hi16Zmm.long_name(), "AVX-512 registers ZMM16-31");
    assert_eq!(
        Xfeature::ZmmHi256.long_name(),
        "AVX-512: upper halves of ZMM0-15"
    );
    assert_eq!(Xfeature::XtileData.long_name(), "AMX tile data TMM0-7");
    assert_eq!(Xfeature::Hdc.long_name(), "HDC state (IA32_PM_CTL1)");
    assert_eq!(Xfeature::Hwp.long_name(), "HWP state (IA32_HWP_REQUEST)");
    // Every component has its own meaning: no placeholder, no duplicate, and
    // each fits a table cell.
    for (i, f) in Xfeature::ALL.iter().enumerate() {
        let d = f.long_name();
        assert!(!d.to_lowercase().contains("unknown"), "{f}: {d}");
        assert!(d.len() <= 34, "{f}: {d}");
        for g in &Xfeature::ALL[i + 1..] {
            assert_ne!(d, g.long_name(), "{f} and {g}");
        }
    }
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
    // A very long token is truncated in the error, not a panic, and the
    // message shows that it was (it read as the whole token before).
    let long = "é".repeat(40);
    match XfeatureMask::parse(&long, SPR) {
        Err(e @ MaskError::UnknownName(t)) => {
            assert!(t.is_cut() && t.as_str().len() <= 32);
            assert!(
                e.to_string().contains(&format!("`{}…`", "é".repeat(16))),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
    match XfeatureMask::parse("0x1ffffffffffffffffffffffffffffffffffff", SPR) {
        Err(e @ MaskError::BadNumber(t)) => {
            assert!(t.is_cut());
            assert!(e.to_string().contains("ffff…` in xfeature mask"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    match XfeatureMask::parse("0xzz", SPR) {
        Err(MaskError::BadNumber(t)) => assert!(!t.is_cut()),
        other => panic!("{other:?}"),
    }
}

/// Leading zeros never make a number too long: the decimal form took any
/// number of them (Rust's parser does), the hex form refused more than 32
/// digits in all ("invalid number" for `0x` + 40 zeros + `7`).
#[test]
fn leading_zeros_are_not_digits_that_count() {
    let zeros = "0".repeat(100);
    assert_eq!(XfeatureMask::parse(&format!("0x{zeros}7"), SPR), Ok(m(0x7)));
    assert_eq!(XfeatureMask::parse(&format!("{zeros}7"), SPR), Ok(m(0x7)));
    assert_eq!(
        XfeatureMask::parse(&format!("0x{zeros}_0000_0003"), SPR),
        Ok(m(0x3))
    );
    assert_eq!(XfeatureMask::parse("0x0000", SPR), Ok(m(0)));
    for bad in ["0x", "0x_", "0x__"] {
        assert!(
            matches!(XfeatureMask::parse(bad, SPR), Err(MaskError::BadNumber(_))),
            "{bad}"
        );
    }
    // Significant digits still count: 17 of them overflow 64 bits.
    assert!(matches!(
        XfeatureMask::parse(&format!("0x{zeros}1_0000_0000_0000_0000"), SPR),
        Err(MaskError::BadNumber(_))
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

/// Resolves with the `--xfeatures` grammar: (result bits, implied, dropped).
fn resolve(s: &str, host: XfeatureMask) -> (u64, String, String) {
    let r = XfeatureMask::resolve(s, host).unwrap_or_else(|e| panic!("{s}: {e}"));
    (
        r.result.bits(),
        r.implied.to_string(),
        r.dropped.to_string(),
    )
}

#[test]
fn readme_examples_resolve() {
    // `--xfeatures 0x7`, `x87,sse,avx`, `all`, `host,-avx`, `avx512`,
    // `-avx`, `host,-avx512`, `-amx` (README), on a Sapphire Rapids host.
    assert_eq!(resolve("0x7", SPR), (0x7, "none".into(), "none".into()));
    assert_eq!(
        resolve("x87,sse,avx", SPR),
        (0x7, "none".into(), "none".into())
    );
    assert_eq!(resolve("all", SPR), (0x602e7, "none".into(), "none".into()));
    assert_eq!(
        resolve("avx512", SPR),
        (0xe7, "x87,sse,avx".into(), "none".into())
    );
    let host_minus_avx = (0x60203, "none".into(), "opmask,zmm_hi256,hi16_zmm".into());
    assert_eq!(resolve("host,-avx", SPR), host_minus_avx);
    assert_eq!(resolve("-avx", SPR), host_minus_avx);
    assert_eq!(resolve(" host , -AVX ", SPR), host_minus_avx);
    assert_eq!(
        resolve("host,-avx512", SPR),
        (0x60207, "none".into(), "none".into())
    );
    assert_eq!(resolve("-amx", SPR), (0x2e7, "none".into(), "none".into()));
    // Each resolved README example is a valid XCR0 on that host.
    for s in [
        "0x7",
        "x87,sse,avx",
        "all",
        "avx512",
        "host,-avx",
        "-avx",
        "-amx",
    ] {
        let r = XfeatureMask::resolve(s, SPR).unwrap();
        assert_eq!(r.result.validate_xcr0(SPR), Ok(()), "{s}");
    }
}

#[test]
fn names_imply_their_prerequisites() {
    assert_eq!(resolve("avx", SPR), (0x7, "x87,sse".into(), "none".into()));
    assert_eq!(resolve("sse", SPR), (0x3, "x87".into(), "none".into()));
    assert_eq!(resolve("x87", SPR), (0x1, "none".into(), "none".into()));
    assert_eq!(
        resolve("amx", SPR),
        (0x60003, "x87,sse".into(), "none".into())
    );
    // One AMX component brings its partner.
    assert_eq!(
        resolve("xtilecfg", SPR),
        (0x60003, "x87,sse,xtiledata".into(), "none".into())
    );
    assert_eq!(
        resolve("zmm_hi256", SPR),
        (0xe7, "x87,sse,avx,opmask,hi16_zmm".into(), "none".into())
    );
    assert_eq!(resolve("mpx", SPR).0, 0x1b);
    assert_eq!(resolve("pkru", SPR).0, 0x203);
    // Already present: nothing reported as implied.
    assert_eq!(
        resolve("x87,sse,avx512", SPR),
        (0xe7, "avx".into(), "none".into())
    );
    assert_eq!(
        resolve("+avx512", SPR),
        (0x602e7, "none".into(), "none".into())
    );
    // Numbers are literal: exactly the bits, then the XCR0 rules judge.
    assert_eq!(resolve("0x5", SPR), (0x5, "none".into(), "none".into()));
    assert_eq!(
        XfeatureMask::from_bits(0x5).validate_xcr0(SPR),
        Err(Xcr0Error::AvxWithoutSse)
    );
    assert_eq!(resolve("none", SPR).0, 0);
    assert_eq!(resolve("none,avx", SPR).0, 0x7);
}

#[test]
fn removals_take_their_dependents() {
    assert_eq!(
        resolve("-sse", SPR),
        (
            0x1,
            "none".into(),
            "avx,opmask,zmm_hi256,hi16_zmm,pkru,xtilecfg,xtiledata".into()
        )
    );
    assert_eq!(
        resolve("-opmask", SPR),
        (0x60207, "none".into(), "zmm_hi256,hi16_zmm".into())
    );
    assert_eq!(
        resolve("-xtiledata", SPR),
        (0x2e7, "none".into(), "xtilecfg".into())
    );
    // Dropped components re-added literally are not reported as dropped.
    assert_eq!(
        resolve("-avx,host", SPR),
        (0x602e7, "none".into(), "none".into())
    );
    let r = XfeatureMask::resolve("host,-avx,-pkru", SPR).unwrap();
    assert_eq!(r.removed, m(0x204));
    assert_eq!(r.requested, m(0));
    assert_eq!(
        r.to_string(),
        "x87,sse,xtilecfg,xtiledata (0x60003); dropped opmask,zmm_hi256,hi16_zmm \
         (they depend on what was removed)"
    );
    assert_eq!(
        XfeatureMask::resolve("avx512", SPR).unwrap().to_string(),
        "x87,sse,avx,opmask,zmm_hi256,hi16_zmm (0xe7); implied x87,sse,avx"
    );
}

#[test]
fn contradictions_and_x87_are_refused_by_name() {
    for (s, wants, removes, comp) in [
        ("avx512,-avx", "avx512", "-avx", "avx"),
        ("-avx,avx512", "avx512", "-avx", "avx"),
        ("avx,-sse", "avx", "-sse", "sse"),
        ("amx,-xtilecfg", "amx", "-xtilecfg", "xtilecfg"),
        ("host,-avx,avx", "avx", "-avx", "avx"),
    ] {
        match XfeatureMask::resolve(s, SPR) {
            Err(
                e @ MaskError::Contradiction {
                    wants: w,
                    removes: r,
                    component,
                },
            ) => {
                assert_eq!((w.as_str(), r.as_str()), (wants, removes), "{s}");
                assert_eq!(Xfeature::from_index(component).unwrap().short_name(), comp);
                assert_eq!(
                    e.to_string(),
                    format!(
                        "contradictory xfeatures: `{wants}` needs {comp}, which `{removes}` removes"
                    )
                );
            }
            other => panic!("{s}: {other:?}"),
        }
    }
    for s in ["-x87", "host,-x87", "-all", "avx,-0x1"] {
        match XfeatureMask::resolve(s, SPR) {
            Err(e @ MaskError::X87Removed(_)) => {
                assert!(e.to_string().contains("x87"), "{e}")
            }
            other => panic!("{s}: {other:?}"),
        }
    }
    // Removing what nobody asked for is no contradiction.
    assert_eq!(resolve("avx,-avx512", SPR).0, 0x7);
    // Syntax errors are the literal parser's.
    assert_eq!(XfeatureMask::resolve(" ", SPR), Err(MaskError::Empty));
    assert_eq!(
        XfeatureMask::resolve("avx,", SPR),
        Err(MaskError::EmptyToken)
    );
    assert!(matches!(
        XfeatureMask::resolve("avx3", SPR),
        Err(MaskError::UnknownName(_))
    ));
}

#[test]
fn dependency_table_is_one_source() {
    use xstate::rules::{direct_prerequisites, DEPENDENCIES};
    // Every extended user component needs the legacy base; groups are
    // mutual; AVX-512 needs AVX; supervisor components need nothing.
    for f in Xfeature::ALL {
        let deps = direct_prerequisites(f.index());
        if f.is_supervisor() || f == Xfeature::X87 {
            assert!(deps.is_empty(), "{f}");
        } else {
            assert!(
                f.mask().prerequisites().contains_all(XfeatureMask::LEGACY),
                "{f}"
            );
        }
    }
    assert_eq!(direct_prerequisites(25), Xfeature::Sse.mask());
    // Implication and removal are inverse readings of the same table: b is
    // in a's prerequisites exactly when a is among b's dependents.
    let every = m(0x602ff | 1 << 19);
    for a in every.iter() {
        for b in every.iter() {
            assert_eq!(
                a.mask().prerequisites().contains(b),
                b.mask().dependents(every).contains(a),
                "{a} / {b}"
            );
        }
    }
    // The closure of every single user component is a valid XCR0.
    for (f, _) in DEPENDENCIES {
        let c = f.mask().prerequisites();
        assert_eq!(
            c.validate_xcr0(XfeatureMask::ALL_KNOWN.user()),
            Ok(()),
            "{f}"
        );
    }
}
