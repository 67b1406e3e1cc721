//! The permission requests against a scripted kernel, and the real call
//! against what the CPU says.

use super::*;
use xstate::CpuidRegs;

/// The kernel's answers, scripted; records the calls.
struct Fake {
    request: Result<(), i32>,
    permitted: Result<u64, i32>,
    calls: Vec<(Scope, Option<u32>)>,
}

impl XcompPerm for Fake {
    fn request(&mut self, scope: Scope, feature: u32) -> Result<(), i32> {
        self.calls.push((scope, Some(feature)));
        self.request
    }
    fn permitted(&mut self, scope: Scope) -> Result<u64, i32> {
        self.calls.push((scope, None));
        self.permitted
    }
}

/// A kernel that also answers `ARCH_GET_XCOMP_SUPP`.
struct Supp {
    supported: Result<u64, i32>,
    guest: Result<u64, i32>,
}

impl XcompPerm for Supp {
    fn request(&mut self, _: Scope, _: u32) -> Result<(), i32> {
        Err(libc::EPERM)
    }
    fn permitted(&mut self, scope: Scope) -> Result<u64, i32> {
        assert_eq!(scope, Scope::Guest);
        self.guest
    }
    fn supported(&mut self) -> Result<u64, i32> {
        self.supported
    }
}

#[test]
fn the_kernel_says_when_nothing_is_left_to_grant() {
    let check = |supported, guest| nothing_left_to_grant(&mut Supp { supported, guest });
    // Zen 4: everything supported is static and permitted.
    assert!(check(Ok(0xe7), Ok(0xe7)));
    // Sapphire Rapids before the request: XTILEDATA (18) is pending.
    assert!(!check(Ok(0x602e7), Ok(0x202e7)));
    // After it.
    assert!(check(Ok(0x602e7), Ok(0x602e7)));
    // A kernel without ARCH_GET_XCOMP_SUPP (before 5.16), or a failing
    // read-back: ask the CPU.
    assert!(!check(Err(libc::EINVAL), Ok(0xe7)));
    assert!(!check(Ok(0xe7), Err(libc::EINVAL)));
    // The trait's default (a fake kernel without the call) asks the CPU too.
    assert!(!nothing_left_to_grant(&mut fake(Ok(()), Ok(0xe7))));
}

#[test]
fn this_kernel_answers_like_the_cpu() {
    // Where the kernel answers, its "nothing left" must agree with the
    // exact path: no dynamic component the guest may still be granted.
    if !nothing_left_to_grant(&mut ArchPrctl) {
        return;
    }
    let host = XsaveInfo::host().ok();
    let wanted = wanted_by_request(None, host.as_ref());
    let permitted = ArchPrctl.permitted(Scope::Guest).unwrap();
    assert_eq!(
        wanted.bits() & !permitted,
        0,
        "wanted {wanted} permitted {permitted:#x}"
    );
}

fn fake(request: Result<(), i32>, permitted: Result<u64, i32>) -> Fake {
    Fake {
        request,
        permitted,
        calls: Vec::new(),
    }
}

/// Leaf 0xD of a Sapphire Rapids (AMX, XFD) and of a CPU with AVX-512
/// and no AMX.
fn spr() -> XsaveInfo {
    XsaveInfo::from_leaf_0xd(|i| match i {
        0 => CpuidRegs::new(0x602e7, 0x2b00, 0x2b00, 0),
        1 => CpuidRegs::new(0x1f, 0x2a80, 0, 0),
        2 => CpuidRegs::new(0x100, 0x240, 0, 0),
        5 => CpuidRegs::new(0x40, 0x440, 0, 0),
        6 => CpuidRegs::new(0x200, 0x480, 0, 0),
        7 => CpuidRegs::new(0x400, 0x680, 0, 0),
        9 => CpuidRegs::new(0x8, 0xa80, 0, 0),
        17 => CpuidRegs::new(0x40, 0xac0, 2, 0),
        18 => CpuidRegs::new(0x2000, 0xb00, 6, 0),
        _ => CpuidRegs::default(),
    })
    .unwrap()
}

fn no_amx() -> XsaveInfo {
    XsaveInfo::from_leaf_0xd(|i| match i {
        0 => CpuidRegs::new(0xe7, 0x980, 0x980, 0),
        1 => CpuidRegs::new(0xf, 0x980, 0, 0),
        2 => CpuidRegs::new(0x100, 0x240, 0, 0),
        5 => CpuidRegs::new(0x40, 0x340, 0, 0),
        6 => CpuidRegs::new(0x200, 0x380, 0, 0),
        7 => CpuidRegs::new(0x400, 0x580, 0, 0),
        _ => CpuidRegs::default(),
    })
    .unwrap()
}

#[test]
fn which_requests_ask() {
    let (spr, zen) = (spr(), no_amx());
    let tiles = XfeatureMask::from_bits(1 << 18);
    assert_eq!(wanted_by_request(Some("amx"), Some(&zen)), tiles);
    assert_eq!(wanted_by_request(Some("xtiledata"), Some(&spr)), tiles);
    assert_eq!(wanted_by_request(Some("0x602e7"), Some(&spr)), tiles);
    assert_eq!(wanted_by_request(None, Some(&spr)), tiles);
    assert_eq!(wanted_by_request(Some("host"), Some(&spr)), tiles);
    assert_eq!(
        wanted_by_request(Some("-amx"), Some(&spr)),
        XfeatureMask::EMPTY
    );
    assert_eq!(
        wanted_by_request(Some("avx512"), Some(&spr)),
        XfeatureMask::EMPTY
    );
    assert_eq!(wanted_by_request(None, Some(&zen)), XfeatureMask::EMPTY);
    assert_eq!(
        wanted_by_request(Some("host"), Some(&zen)),
        XfeatureMask::EMPTY
    );
    // The grammar's refusal is the policy check's to report.
    assert_eq!(
        wanted_by_request(Some("bogus"), Some(&spr)),
        XfeatureMask::EMPTY
    );
}

#[test]
fn granted_is_read_back() {
    let mut sys = fake(Ok(()), Ok(0x602e7));
    let p = permit_for_request(&mut sys, Some("amx"), Some(&spr())).unwrap();
    assert_eq!(p, Permit::Granted(XfeatureMask::from_bits(0x602e7)));
    assert_eq!(
        sys.calls,
        vec![(Scope::Guest, Some(18)), (Scope::Guest, None)]
    );
    // Nothing dynamic wanted: no call at all.
    let mut sys = fake(Err(libc::EINVAL), Err(libc::EINVAL));
    let p = permit_for_request(&mut sys, Some("avx512"), Some(&spr())).unwrap();
    assert_eq!(p, Permit::NotNeeded);
    assert!(sys.calls.is_empty());
}

#[test]
fn explicit_refusal_names_feature_call_and_errno() {
    let mut sys = fake(Err(libc::EINVAL), Ok(0));
    let e = permit_for_request(&mut sys, Some("amx"), Some(&no_amx())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "AMX tile data TMM0-7 (xfeature 18) for the guest: \
             arch_prctl(ARCH_REQ_XCOMP_GUEST_PERM, 18) failed: EINVAL (Invalid argument (os error 22)); \
             this host's CPU lacks it (CPUID leaf 0xD offers XCR0 0xe7, without xtiledata)"
    );
    assert!(std::error::Error::source(&e).is_some());
    // On an AMX CPU the same refusal blames the kernel.
    let mut sys = fake(Err(libc::EINVAL), Ok(0));
    let e = permit_for_request(&mut sys, Some("amx"), Some(&spr())).unwrap_err();
    assert!(
        e.to_string().contains("the CPU has it, so this kernel"),
        "{e}"
    );
}

#[test]
fn default_policy_goes_without() {
    for spec in [None, Some("host"), Some("-avx"), Some("all")] {
        let mut sys = fake(Err(libc::EPERM), Ok(0));
        let p = permit_for_request(&mut sys, spec, Some(&spr())).unwrap();
        let Permit::Unavailable(why) = p else {
            panic!("{spec:?}: {p:?}")
        };
        assert!(why.contains("EPERM"), "{why}");
        assert_eq!(sys.calls[0], (Scope::Guest, Some(18)), "{spec:?} asked");
    }
    // Named by name or number: the refusal is an error.
    let spr = spr();
    for spec in ["amx", "xtiledata", "host,+xtiledata", "0x602e7"] {
        assert_eq!(
            named_by_request(Some(spec), Some(&spr)),
            XfeatureMask::from_bits(1 << 18),
            "{spec}"
        );
        let mut sys = fake(Err(libc::EPERM), Ok(0));
        assert!(
            permit_for_request(&mut sys, Some(spec), Some(&spr)).is_err(),
            "{spec}"
        );
    }
}

#[test]
fn grant_must_hold_what_was_asked() {
    let mut sys = fake(Ok(()), Ok(0x2e7));
    let e = permit_for_request(&mut sys, Some("amx"), Some(&spr())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "AMX tile data TMM0-7: arch_prctl(ARCH_GET_XCOMP_GUEST_PERM) reads 0x2e7 after the \
             request, without xtiledata"
    );
    let mut sys = fake(Ok(()), Err(libc::EFAULT));
    let e = permit_for_request(&mut sys, Some("amx"), Some(&spr())).unwrap_err();
    assert!(e.to_string().contains("EFAULT"), "{e}");
}

#[test]
fn real_call_matches_the_cpu() {
    // The permission request itself on this host: granted where the
    // CPU has XTILEDATA and the kernel offers it, refused (never a
    // panic) where it does not.
    let host = XsaveInfo::host().ok();
    let cpu_has = host
        .as_ref()
        .is_some_and(|i| i.supported_xcr0().contains(Xfeature::XtileData));
    let r = permit_for_request(&mut ArchPrctl, Some("amx"), host.as_ref());
    if !cpu_has {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("ARCH_REQ_XCOMP_GUEST_PERM, 18"), "{e}");
    }
}
