//! Tests of the context-switch benchmark: the bytes-per-save rules, the
//! chooser, the CPUID gating, and real switches on the host.

extern crate std;
use super::*;
use crate::bench::test_scratch;
use xstate::CpuidRegs;

/// CPUID 0xD of an AVX-512 CPU (Skylake-X values).
fn skx_info() -> XsaveInfo {
    XsaveInfo::from_leaf_0xd(|sub| match sub {
        0 => CpuidRegs::new(0xe7, 2688, 2688, 0),
        1 => CpuidRegs::new(0xf, 2432, 0x100, 0),
        2 => CpuidRegs::new(256, 576, 0, 0),
        5 => CpuidRegs::new(64, 1088, 0, 0),
        6 => CpuidRegs::new(512, 1152, 0, 0),
        7 => CpuidRegs::new(1024, 1664, 0, 0),
        8 => CpuidRegs::new(128, 0, 1, 0),
        _ => CpuidRegs::default(),
    })
    .unwrap()
}

fn area_with(xstate_bv: u64, xcomp_bv: u64) -> std::vec::Vec<u8> {
    let mut a = std::vec![0u8; 4096];
    a[512..520].copy_from_slice(&xstate_bv.to_le_bytes());
    a[520..528].copy_from_slice(&xcomp_bv.to_le_bytes());
    a
}

#[test]
fn bytes_per_save_rules() {
    let info = skx_info();
    let xcr0 = XfeatureMask::from_bits(0xe7);
    // XSAVE writes every requested component: the standard size.
    let a = area_with(0x3, 0);
    assert_eq!(bytes_per_save(&info, Strategy::Xsave, xcr0, &a), 2688);
    // XSAVEOPT: the end of the highest component in XSTATE_BV.
    assert_eq!(bytes_per_save(&info, Strategy::Xsaveopt, xcr0, &a), 576);
    let a = area_with(0x7, 0);
    assert_eq!(bytes_per_save(&info, Strategy::Xsaveopt, xcr0, &a), 832);
    let a = area_with(0x27, 0);
    assert_eq!(bytes_per_save(&info, Strategy::Xsaveopt, xcr0, &a), 1152);
    // XSAVEC with XCOMP_BV = XCR0: AVX at 576, opmask at 832.
    let c = 0x8000_0000_0000_00e7;
    assert_eq!(
        bytes_per_save(&info, Strategy::Xsavec, xcr0, &area_with(0x3, c)),
        576
    );
    assert_eq!(
        bytes_per_save(&info, Strategy::Xsavec, xcr0, &area_with(0x7, c)),
        832
    );
    assert_eq!(
        bytes_per_save(&info, Strategy::Xsavec, xcr0, &area_with(0xe7, c)),
        2432
    );
    // Masked by XINUSE: a sparse set is dense (opmask right after legacy).
    let c = 0x8000_0000_0000_0023;
    assert_eq!(
        bytes_per_save(&info, Strategy::XsavecXinuse, xcr0, &area_with(0x23, c)),
        576 + 64
    );
    // Too short an area says nothing.
    assert_eq!(bytes_per_save(&info, Strategy::Xsave, xcr0, &[0u8; 100]), 0);
}

#[test]
fn chooser_picks_fastest_supported() {
    assert_eq!(choose(&[None; 4]), None);
    assert_eq!(
        choose(&[Some(400), Some(380), Some(420), Some(455)]),
        Some(Strategy::Xsaveopt)
    );
    assert_eq!(
        choose(&[Some(400), None, None, Some(300)]),
        Some(Strategy::XsavecXinuse)
    );
    // Ties go to the earlier (simpler) strategy.
    assert_eq!(
        choose(&[Some(300), Some(300), None, None]),
        Some(Strategy::Xsave)
    );
    let names: std::vec::Vec<_> = Strategy::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(names, crate::protocol::SWITCH_STRATEGIES);
}

#[test]
fn strategies_need_their_cpuid_bits() {
    let info = skx_info();
    assert!(Strategy::ALL.iter().all(|s| s.supported(&info)));
    let plain = XsaveInfo::from_leaf_0xd(|sub| match sub {
        0 => CpuidRegs::new(0x7, 832, 832, 0),
        2 => CpuidRegs::new(256, 576, 0, 0),
        _ => CpuidRegs::default(),
    })
    .unwrap();
    assert!(Strategy::Xsave.supported(&plain));
    assert!(!Strategy::Xsaveopt.supported(&plain));
    assert!(!Strategy::XsavecXinuse.supported(&plain));
    let env = Env {
        info: plain,
        xcr0: XfeatureMask::from_bits(0x7),
    };
    let mut s = test_scratch(scratch_bytes(&env));
    assert_eq!(
        run(
            &env,
            Strategy::Xsavec,
            Profile::Sse,
            InitMode::Minimal,
            8,
            &mut s
        ),
        Err(RunError::Unsupported(Strategy::Xsavec))
    );
    assert_eq!(
        run(
            &env,
            Strategy::Xsave,
            Profile::Sse,
            InitMode::Minimal,
            8,
            &mut s[..100]
        ),
        Err(RunError::Scratch {
            need: scratch_bytes(&env),
            have: 100
        })
    );
}

/// The real thing on the host CPU: every strategy, both profiles, both
/// initial states; each context must get exactly its own state back.
#[test]
fn switches_preserve_each_contexts_state_on_host() {
    let env = Env::host();
    let mut scratch = test_scratch(scratch_bytes(&env));
    for s in Strategy::ALL {
        if !s.supported(&env.info) {
            continue;
        }
        for p in [Profile::Sse, Profile::Avx] {
            if p == Profile::Avx && !env.has_avx() {
                continue;
            }
            for start in [InitMode::Minimal, InitMode::AllOfXcr0] {
                for n in [4u64, 7, 101] {
                    let m = run(&env, s, p, start, n, &mut scratch).unwrap();
                    assert!(m.state_ok, "{s:?} {p:?} {start:?} {n}");
                    assert_eq!(m.switches, n + 1);
                    assert!(m.cycles > 0);
                    assert!(m.bytes_per_save >= 576, "{m:?}");
                }
            }
        }
    }
    // SSE contexts from the minimal state: XSAVEC writes the legacy
    // region and header only. (From all of XCR0 it writes at least as
    // much; how much more depends on whether the CPU tracks the zeroed
    // upper state as in use, which differs between CPUs.)
    if Strategy::Xsavec.supported(&env.info) && env.has_avx() {
        let lean = run(
            &env,
            Strategy::Xsavec,
            Profile::Sse,
            InitMode::Minimal,
            40,
            &mut scratch,
        )
        .unwrap();
        let fat = run(
            &env,
            Strategy::Xsavec,
            Profile::Sse,
            InitMode::AllOfXcr0,
            40,
            &mut scratch,
        )
        .unwrap();
        assert_eq!(lean.bytes_per_save, 576);
        assert!(
            fat.bytes_per_save >= lean.bytes_per_save,
            "{fat:?} {lean:?}"
        );
        let avx = run(
            &env,
            Strategy::Xsavec,
            Profile::Avx,
            InitMode::Minimal,
            40,
            &mut scratch,
        )
        .unwrap();
        assert_eq!(avx.bytes_per_save, 576 + 256, "{avx:?}");
    }
}

#[test]
fn calibration_chooses_a_measured_minimum() {
    let env = Env::host();
    let mut scratch = test_scratch(scratch_bytes(&env));
    let c = calibrate(&env, &mut scratch);
    let choice = c.choice.expect("XSAVE is always a candidate");
    let best = c.cycles.iter().flatten().min().copied().unwrap();
    assert_eq!(c.cycles[choice as usize], Some(best));
    assert!(c.cycles[0].is_some());
    for s in Strategy::ALL {
        assert_eq!(
            c.cycles[s as usize].is_some(),
            s.supported(&env.info),
            "{s:?}"
        );
    }
    assert!(c.total_cycles > 0);
}
