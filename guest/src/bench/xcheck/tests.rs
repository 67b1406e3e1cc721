//! Tests of the xstate check: distinct patterns, the comparison, and a
//! real round trip through the CPU on the host.

extern crate std;
use super::*;
use crate::bench::test_scratch;
use crate::protocol::xmm_edit_pattern;
use xstate::{Format, Xfeature};

#[test]
fn patterns_are_distinct_and_not_the_edit() {
    let mut seen = std::collections::BTreeSet::new();
    for c in [1u32, 2, 5, 6, 7] {
        for r in 0..16 {
            let v: std::vec::Vec<u8> = (0..16).map(|k| pattern_byte(c, r, k)).collect();
            assert!(seen.insert(v), "component {c} register {r}");
        }
    }
    for r in 0..16 {
        let v: std::vec::Vec<u8> = (0..16).map(|k| pattern_byte(1, r, k)).collect();
        assert_ne!(v[..], xmm_edit_pattern(r)[..]);
    }
}

#[test]
fn every_cpu_has_its_own_pattern() {
    use crate::protocol::record::MAX_CPUS;
    for r in 0..16 {
        let mut seen = std::collections::BTreeSet::new();
        for cpu in 0..MAX_CPUS {
            let v: std::vec::Vec<u8> = (0..16)
                .map(|k| pattern_byte(1, r, k) ^ cpu_salt(cpu))
                .collect();
            assert_ne!(v[..], xmm_edit_pattern(r)[..], "cpu {cpu} xmm{r}");
            assert!(seen.insert(v), "cpu {cpu} xmm{r}");
        }
    }
    // A CPU that saw another CPU's registers fails the comparison, and
    // CPU 0's image is the single-CPU one.
    let env = Env::host();
    let mask = fill_mask(env.xcr0);
    let piece = (env.info.standard_size(mask).unwrap() as usize).next_multiple_of(64);
    let mut s = test_scratch(3 * piece);
    let (all, _) = carve(&mut s, 3 * piece).unwrap();
    let (a, rest) = all.split_at_mut(piece);
    let (b, c) = rest.split_at_mut(piece);
    build_image_for(&env.info, mask, a, 1).unwrap();
    build_image_for(&env.info, mask, b, 2).unwrap();
    build_image(&env.info, mask, &mut c[..piece]).unwrap();
    let m = compare(&env.info, mask, a, b).unwrap();
    assert_eq!(m.expected ^ m.got, cpu_salt(1) ^ cpu_salt(2));
    build_image_for(&env.info, mask, b, 0).unwrap();
    assert_eq!(b[..], c[..piece]);
}

#[test]
fn compare_names_the_first_changed_register() {
    let env = Env::host();
    let mask = fill_mask(env.xcr0);
    let len = env.info.standard_size(mask).unwrap() as usize;
    let mut s = test_scratch(2 * len.next_multiple_of(64));
    let (a, rest) = carve(&mut s, len.next_multiple_of(64)).unwrap();
    let b = &mut rest[..len.next_multiple_of(64)];
    build_image(&env.info, mask, a).unwrap();
    b.copy_from_slice(a);
    assert_eq!(compare(&env.info, mask, a, b), None);
    b[offsets::XMM0 + 16 * 3 + 2] ^= 0x40;
    let m = compare(&env.info, mask, a, b).unwrap();
    assert_eq!((m.reg, m.byte), (Reg::Xmm(3), 2));
    assert_eq!(std::format!("{m}").split(' ').next(), Some("xmm3"));
    b.copy_from_slice(a);
    b[offsets::MXCSR] = 0x80;
    assert_eq!(compare(&env.info, mask, a, b).unwrap().reg, Reg::Mxcsr);
    if env.has_avx() {
        // AVX marked init in "after": YMM0's upper half reads as zero.
        b.copy_from_slice(a);
        b[offsets::XSTATE_BV] &= !0x4;
        assert_eq!(compare(&env.info, mask, a, b).unwrap().reg, Reg::YmmHi(0));
    }
    if env.has_avx512() {
        b.copy_from_slice(a);
        let at = env
            .info
            .layout(mask, Format::Standard)
            .unwrap()
            .offset(Xfeature::Hi16Zmm)
            .unwrap() as usize;
        b[at + 64 * 15 + 63] ^= 1;
        let m = compare(&env.info, mask, a, b).unwrap();
        assert_eq!((m.reg, m.byte), (Reg::Zmm(31), 63));
    }
    // x87 marked init: FCW reads as 0x037f, which differs from 0x027f
    // in its high byte.
    b.copy_from_slice(a);
    b[offsets::XSTATE_BV] &= !0x1;
    let m = compare(&env.info, mask, a, b).unwrap();
    assert_eq!((m.reg, m.byte, m.got), (Reg::Fcw, 1, 0x03));
    // The edit changes exactly XMM5.
    b.copy_from_slice(a);
    apply_edit(b, 5);
    let m = compare(&env.info, mask, a, b).unwrap();
    assert_eq!(m.reg, Reg::Xmm(5));
    apply_edit(a, 5);
    assert_eq!(compare(&env.info, mask, a, b), None);
}

/// On the host: the patterns load (every register takes its value) and
/// survive CPUIDs, and the check sees that nobody applied an edit.
#[test]
fn round_trip_on_host() {
    let env = Env::host();
    let mut s = test_scratch(scratch_bytes(&env));
    for exit in [CheckExit::Nothing, CheckExit::Cpuid] {
        // SAFETY: no ports or MMIO; the host's XCR0 is env.xcr0.
        let o = unsafe { run(&env, exit, 100, &mut s) }.unwrap();
        assert_eq!(o.load, None, "{exit:?}");
        assert_eq!(o.after, None, "{exit:?}");
        assert!(o.passed());
        assert_eq!(o.mask, fill_mask(env.xcr0));
    }
    // Rust floating point still works after the block restored the
    // initial MXCSR (round to nearest, no FZ).
    let x = core::hint::black_box(1.0f64) / core::hint::black_box(3.0f64);
    assert_eq!(x, 1.0 / 3.0);
}
