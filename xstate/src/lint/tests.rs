//! Each rule on a consistent table (no violation) and on crafted tables
//! that break it (exactly the expected rules fire, at the expected bit).

use std::collections::BTreeMap;
use std::vec::Vec;

use super::avx::avx512_flags;
use super::*;
use crate::info::{CpuidRegs, XsaveInfo};
use crate::mask::XfeatureMask;

/// A complete CPUID table: absent (sub)leaves read as zero.
#[derive(Clone, Debug, Default)]
struct Cpu(BTreeMap<(u32, u32), CpuidRegs>);

impl Cpu {
    fn get(&self, leaf: u32, subleaf: u32) -> CpuidRegs {
        self.0.get(&(leaf, subleaf)).copied().unwrap_or_default()
    }
    fn set(&mut self, leaf: u32, subleaf: u32, r: CpuidRegs) {
        self.0.insert((leaf, subleaf), r);
    }
    fn edit(&mut self, leaf: u32, subleaf: u32, reg: Reg, f: impl FnOnce(u32) -> u32) {
        let mut r = self.get(leaf, subleaf);
        let v = reg.of_mut(&mut r);
        *v = f(*v);
        self.set(leaf, subleaf, r);
    }
    fn flag(&mut self, f: Flag, on: bool) {
        self.edit(f.leaf, f.subleaf, f.reg, |v| {
            if on {
                v | (1 << f.bit)
            } else {
                v & !(1 << f.bit)
            }
        });
    }
    fn run(&self, ctx: Context) -> LintReport {
        let view = |leaf: u32, subleaf: u32| Some(self.get(leaf, subleaf));
        lint_all(&view, ctx)
    }
}

const fn r(eax: u32, ebx: u32, ecx: u32, edx: u32) -> CpuidRegs {
    CpuidRegs::new(eax, ebx, ecx, edx)
}

/// Leaf 0xD of the recorded Sapphire Rapids (`tests/data`), with 0.EBX and
/// 1.EBX set for its whole supported XCR0 and IA32_XSS in force.
fn spr_leaf_d(cpu: &mut Cpu) {
    for (i, e) in [
        (0, r(0x602e7, 0x2b00, 0x2b00, 0)),
        (1, r(0x1f, 0, 0xdd00, 0)),
        (2, r(0x100, 0x240, 0, 0)),
        (5, r(0x40, 0x440, 0, 0)),
        (6, r(0x200, 0x480, 0, 0)),
        (7, r(0x400, 0x680, 0, 0)),
        (8, r(0x80, 0, 1, 0)),
        (9, r(0x8, 0xa80, 0, 0)),
        (10, r(0x8, 0, 1, 0)),
        (11, r(0x10, 0, 1, 0)),
        (12, r(0x18, 0, 1, 0)),
        (14, r(0x30, 0, 1, 0)),
        (15, r(0x328, 0, 1, 0)),
        (17, r(0x40, 0xac0, 2, 0)),
        (18, r(0x2000, 0xb00, 6, 0)),
    ] {
        cpu.set(0xd, i, e);
    }
    let info = XsaveInfo::from_leaf_0xd(|i| cpu.get(0xd, i)).unwrap();
    let all = info.supported_all();
    cpu.edit(0xd, 1, Reg::Ebx, |_| info.compacted_size(all).unwrap());
}

/// A Sapphire Rapids-like CPU, every rule's leaves filled in consistently.
fn spr() -> Cpu {
    let mut c = Cpu::default();
    c.set(0, 0, r(0x20, 0, 0, 0));
    for f in [
        flags::XSAVE,
        flags::OSXSAVE,
        flags::AVX,
        flags::FMA,
        flags::F16C,
    ] {
        c.flag(f, true);
    }
    for f in flags::AVX512_OTHERS
        .iter()
        // Xeon Phi only.
        .filter(|f| {
            !matches!(
                f.name,
                "AVX512PF" | "AVX512ER" | "AVX512_4VNNIW" | "AVX512_4FMAPS"
            )
        })
        .copied()
        .chain([
            flags::AVX2,
            flags::AVX512F,
            flags::PT,
            flags::PKU,
            flags::OSPKE,
            flags::CET_SS,
            flags::VAES,
            flags::VPCLMULQDQ,
            flags::CET_IBT,
            flags::AMX_BF16,
            flags::AMX_TILE,
            flags::AMX_INT8,
        ])
    {
        c.flag(f, true);
    }
    c.edit(7, 0, Reg::Eax, |_| 1);
    c.set(0x14, 0, r(1, 0xf, 7, 0));
    c.set(0x1d, 0, r(1, 0, 0, 0));
    c.set(0x1d, 1, r(0x400_2000, 0x80_0040, 0x10, 0));
    c.set(0x1e, 0, r(0, 0x4010, 0, 0));
    spr_leaf_d(&mut c);
    c
}

/// The context of [`spr`]: everything known, all state in force.
fn spr_ctx() -> Context {
    Context {
        osxsave: Osxsave::Cr4(true),
        xcr0: Some(XfeatureMask::from_bits(0x602e7)),
        xss: Some(XfeatureMask::from_bits(0xdd00)),
        supported_table: false,
    }
}

/// A CPU with x87, SSE and AVX only (a guest offered 0x7).
fn avx_only() -> Cpu {
    let mut c = Cpu::default();
    c.set(0, 0, r(0xd, 0, 0, 0));
    for f in [flags::XSAVE, flags::OSXSAVE, flags::AVX] {
        c.flag(f, true);
    }
    c.set(0xd, 0, r(0x7, 832, 832, 0));
    c.set(0xd, 1, r(0x1, 0, 0, 0));
    c.set(0xd, 2, r(256, 576, 0, 0));
    c
}

/// No XSAVE at all.
fn legacy() -> Cpu {
    let mut c = Cpu::default();
    c.set(0, 0, r(0xd, 0, 0, 0));
    c
}

fn ids(rep: &LintReport) -> Vec<RuleId> {
    let mut v: Vec<RuleId> = rep.violations.iter().map(|v| v.rule).collect();
    v.dedup();
    v
}

fn clear_subleaf(c: &mut Cpu, xcr0_bits: u64, xss_bits: u64) {
    c.edit(0xd, 0, Reg::Eax, |v| v & !(xcr0_bits as u32));
    c.edit(0xd, 1, Reg::Ecx, |v| v & !(xss_bits as u32));
    for i in XfeatureMask::from_bits(xcr0_bits | xss_bits).iter_indices() {
        c.set(0xd, i, CpuidRegs::default());
    }
}

/// One crafted violation: the table, its context, the rules that must fire
/// (the first is the rule under test) and the place of the first violation.
struct Case {
    name: &'static str,
    make: fn() -> (Cpu, Context),
    expect: &'static [RuleId],
    at: (u32, u32, Reg, Option<u32>),
}

/// The masks are unknown: rules about in-force sizes stay out of the way.
const MASKS_UNKNOWN: Context = Context {
    osxsave: Osxsave::Cr4(true),
    xcr0: None,
    xss: None,
    supported_table: false,
};

use RuleId as R;

const CASES: &[Case] = &[
    Case {
        name: "XSAVE clear with XCR0 bits enumerated",
        make: || {
            let mut c = spr();
            c.flag(flags::XSAVE, false);
            c.flag(flags::OSXSAVE, false);
            (
                c,
                Context {
                    osxsave: Osxsave::Cr4(false),
                    ..spr_ctx()
                },
            )
        },
        expect: &[R::XsaveLeaf],
        at: (1, 0, Reg::Ecx, Some(26)),
    },
    Case {
        name: "XSAVE set without leaf 0xD",
        make: || {
            let mut c = legacy();
            c.flag(flags::XSAVE, true);
            (c, Context::UNKNOWN)
        },
        expect: &[R::XsaveLeaf],
        at: (1, 0, Reg::Ecx, Some(26)),
    },
    Case {
        name: "OSXSAVE without XSAVE",
        make: || {
            let mut c = legacy();
            c.flag(flags::OSXSAVE, true);
            (c, Context::UNKNOWN)
        },
        expect: &[R::OsxsaveNeedsXsave],
        at: (1, 0, Reg::Ecx, Some(27)),
    },
    Case {
        name: "OSXSAVE set while CR4.OSXSAVE is clear",
        make: || {
            (
                spr(),
                Context {
                    osxsave: Osxsave::Cr4(false),
                    ..spr_ctx()
                },
            )
        },
        expect: &[R::OsxsaveCr4],
        at: (1, 0, Reg::Ecx, Some(27)),
    },
    Case {
        name: "OSXSAVE clear while CR4.OSXSAVE is set",
        make: || {
            let mut c = spr();
            c.flag(flags::OSXSAVE, false);
            (c, spr_ctx())
        },
        expect: &[R::OsxsaveCr4],
        at: (1, 0, Reg::Ecx, Some(27)),
    },
    Case {
        name: "supported XCR0 with part of AVX-512",
        make: || {
            let mut c = avx_only();
            c.set(0xd, 0, r(0x27, 896, 896, 0));
            c.set(0xd, 5, r(64, 832, 0, 0));
            (c, MASKS_UNKNOWN)
        },
        expect: &[R::SupportedXcr0, R::Avx512StateHidden, R::Avx512WithoutAvx2],
        at: (0xd, 0, Reg::Eax, None),
    },
    Case {
        name: "component subleaf with size 0",
        make: || {
            let mut c = spr();
            c.edit(0xd, 2, Reg::Eax, |_| 0);
            (c, spr_ctx())
        },
        expect: &[R::ComponentSubleaves],
        at: (0xd, 2, Reg::Eax, None),
    },
    Case {
        name: "user component inside the legacy region",
        make: || {
            let mut c = avx_only();
            c.edit(0xd, 2, Reg::Ebx, |_| 512);
            (c, MASKS_UNKNOWN)
        },
        expect: &[R::ComponentSubleaves],
        at: (0xd, 2, Reg::Eax, None),
    },
    Case {
        name: "AVX without AVX state",
        make: || {
            let mut c = avx_only();
            c.set(0xd, 0, r(0x3, 576, 576, 0));
            c.set(0xd, 2, CpuidRegs::default());
            (c, MASKS_UNKNOWN)
        },
        expect: &[R::AvxState],
        at: (1, 0, Reg::Ecx, Some(28)),
    },
    Case {
        name: "AVX state with AVX hidden",
        make: || {
            let mut c = avx_only();
            c.flag(flags::AVX, false);
            (c, MASKS_UNKNOWN)
        },
        expect: &[R::AvxStateHidden],
        at: (1, 0, Reg::Ecx, Some(28)),
    },
    Case {
        name: "FMA without AVX",
        make: || {
            let mut c = avx_only();
            c.flag(flags::AVX, false);
            c.flag(flags::FMA, true);
            c.set(0xd, 0, r(0x3, 576, 576, 0));
            c.set(0xd, 2, CpuidRegs::default());
            (c, MASKS_UNKNOWN)
        },
        expect: &[R::VexNeedsAvx],
        at: (1, 0, Reg::Ecx, Some(12)),
    },
    Case {
        name: "AVX512F without AVX-512 state",
        make: || {
            let mut c = avx_only();
            c.flag(flags::AVX2, true);
            c.flag(flags::AVX512F, true);
            (c, MASKS_UNKNOWN)
        },
        expect: &[R::Avx512State],
        at: (7, 0, Reg::Ebx, Some(16)),
    },
    Case {
        name: "AVX512BW without AVX512F",
        make: || {
            let mut c = spr();
            c.flag(flags::AVX512F, false);
            (c, spr_ctx())
        },
        expect: &[R::Avx512NeedsF, R::Avx512StateHidden],
        at: (7, 0, Reg::Ebx, Some(17)),
    },
    Case {
        name: "AVX-512 state with every AVX-512 flag hidden",
        make: || {
            let mut c = spr();
            for f in avx512_flags() {
                c.flag(f, false);
            }
            (c, spr_ctx())
        },
        expect: &[R::Avx512StateHidden],
        at: (7, 0, Reg::Ebx, Some(16)),
    },
    Case {
        name: "AVX-512 without AVX2",
        make: || {
            let mut c = spr();
            c.flag(flags::AVX2, false);
            (c, spr_ctx())
        },
        expect: &[R::Avx512WithoutAvx2],
        at: (7, 0, Reg::Ebx, Some(5)),
    },
    Case {
        name: "PKU without PKRU state",
        make: || {
            let mut c = spr();
            clear_subleaf(&mut c, 1 << 9, 0);
            (c, MASKS_UNKNOWN)
        },
        expect: &[R::PkuState],
        at: (7, 0, Reg::Ecx, Some(3)),
    },
    Case {
        name: "OSPKE without PKU",
        make: || {
            let mut c = spr();
            c.flag(flags::PKU, false);
            (c, spr_ctx())
        },
        expect: &[R::PkuState, R::PkuStateHidden],
        at: (7, 0, Reg::Ecx, Some(4)),
    },
    Case {
        name: "PKRU state with PKU hidden",
        make: || {
            let mut c = spr();
            c.flag(flags::PKU, false);
            c.flag(flags::OSPKE, false);
            (c, spr_ctx())
        },
        expect: &[R::PkuStateHidden],
        at: (7, 0, Reg::Ecx, Some(3)),
    },
    Case {
        name: "AMX flags without tile state",
        make: || {
            let mut c = spr();
            clear_subleaf(&mut c, 3 << 17, 0);
            c.edit(0xd, 0, Reg::Ecx, |_| 2696);
            (c, MASKS_UNKNOWN)
        },
        expect: &[R::AmxState],
        at: (7, 0, Reg::Edx, Some(24)),
    },
    Case {
        name: "AMX-BF16 without AMX-TILE",
        make: || {
            let mut c = spr();
            c.flag(flags::AMX_TILE, false);
            (c, spr_ctx())
        },
        expect: &[R::AmxState, R::AmxStateHidden, R::AmxLeaves],
        at: (7, 0, Reg::Edx, Some(22)),
    },
    Case {
        name: "tile state with AMX hidden",
        make: || {
            let mut c = spr();
            for f in flags::AMX {
                c.flag(f, false);
            }
            c.set(0x1d, 0, CpuidRegs::default());
            c.set(0x1d, 1, CpuidRegs::default());
            c.set(0x1e, 0, CpuidRegs::default());
            (c, spr_ctx())
        },
        expect: &[R::AmxStateHidden],
        at: (7, 0, Reg::Edx, Some(24)),
    },
    Case {
        name: "AMX-TILE without palettes in leaf 0x1D",
        make: || {
            let mut c = spr();
            c.set(0x1d, 0, CpuidRegs::default());
            (c, spr_ctx())
        },
        expect: &[R::AmxLeaves],
        at: (7, 0, Reg::Edx, Some(24)),
    },
    Case {
        name: "AMX-TILE without leaf 0x1E",
        make: || {
            let mut c = spr();
            c.set(0x1e, 0, CpuidRegs::default());
            (c, spr_ctx())
        },
        expect: &[R::AmxLeaves],
        at: (7, 0, Reg::Edx, Some(24)),
    },
    Case {
        name: "MPX without MPX state",
        make: || {
            let mut c = spr();
            c.flag(flags::MPX, true);
            (c, spr_ctx())
        },
        expect: &[R::MpxState],
        at: (7, 0, Reg::Ebx, Some(14)),
    },
    Case {
        name: "MPX state with MPX hidden",
        make: || {
            let mut c = spr();
            c.edit(0xd, 0, Reg::Eax, |v| v | 0x18);
            c.set(0xd, 3, r(64, 960, 0, 0));
            c.set(0xd, 4, r(64, 1024, 0, 0));
            (c, MASKS_UNKNOWN)
        },
        expect: &[R::MpxStateHidden],
        at: (7, 0, Reg::Ebx, Some(14)),
    },
    Case {
        name: "Intel PT without leaf 0x14",
        make: || {
            let mut c = spr();
            c.set(0x14, 0, CpuidRegs::default());
            (c, spr_ctx())
        },
        expect: &[R::PtState],
        at: (7, 0, Reg::Ebx, Some(25)),
    },
    Case {
        name: "PT state and leaf 0x14 with PT hidden",
        make: || {
            let mut c = spr();
            c.flag(flags::PT, false);
            (c, spr_ctx())
        },
        expect: &[R::PtState],
        at: (7, 0, Reg::Ebx, Some(25)),
    },
    Case {
        name: "CET without CET state",
        make: || {
            let mut c = spr();
            clear_subleaf(&mut c, 0, 3 << 11);
            (c, MASKS_UNKNOWN)
        },
        expect: &[R::CetState],
        at: (7, 0, Reg::Ecx, Some(7)),
    },
    Case {
        name: "CET state without CET",
        make: || {
            let mut c = spr();
            c.flag(flags::CET_SS, false);
            c.flag(flags::CET_IBT, false);
            (c, spr_ctx())
        },
        expect: &[R::CetState],
        at: (0xd, 1, Reg::Ecx, Some(11)),
    },
    Case {
        name: "Key Locker without leaf 0x19",
        make: || {
            let mut c = spr();
            c.flag(flags::KEY_LOCKER, true);
            (c, spr_ctx())
        },
        expect: &[R::KeyLockerLeaf],
        at: (7, 0, Reg::Ecx, Some(23)),
    },
    Case {
        name: "leaf 0x19 without Key Locker",
        make: || {
            let mut c = spr();
            c.set(0x19, 0, r(1, 0x15, 1, 0));
            (c, spr_ctx())
        },
        expect: &[R::KeyLockerLeaf],
        at: (7, 0, Reg::Ecx, Some(23)),
    },
    Case {
        name: "IA32_XSS bits without XSAVES",
        make: || {
            let mut c = spr();
            c.edit(0xd, 1, Reg::Eax, |v| v & !leaf_d1_eax::XSAVES);
            (c, spr_ctx())
        },
        expect: &[R::XsavesXss],
        at: (0xd, 1, Reg::Eax, Some(3)),
    },
    Case {
        name: "aligned components without XSAVEC",
        make: || {
            let mut c = spr();
            c.edit(0xd, 1, Reg::Eax, |v| v & !leaf_d1_eax::XSAVEC);
            (c, spr_ctx())
        },
        expect: &[R::XsavecAlign],
        at: (0xd, 1, Reg::Eax, Some(1)),
    },
    Case {
        name: "XFD-capable component without XFD",
        make: || {
            let mut c = spr();
            c.edit(0xd, 1, Reg::Eax, |v| v & !leaf_d1_eax::XFD);
            (c, spr_ctx())
        },
        expect: &[R::XfdFlag],
        at: (0xd, 1, Reg::Eax, Some(4)),
    },
    Case {
        name: "AVX-512 state without XSAVEOPT",
        make: || {
            let mut c = spr();
            c.edit(0xd, 1, Reg::Eax, |v| v & !leaf_d1_eax::XSAVEOPT);
            (c, spr_ctx())
        },
        expect: &[R::XsaveoptPresent],
        at: (0xd, 1, Reg::Eax, Some(0)),
    },
    Case {
        name: "maximum standard size past the last component",
        make: || {
            let mut c = spr();
            c.edit(0xd, 0, Reg::Ecx, |v| v + 64);
            (c, MASKS_UNKNOWN)
        },
        expect: &[R::MaxStandardSize],
        at: (0xd, 0, Reg::Ecx, None),
    },
    Case {
        name: "0xD.0 EBX not the size of the XCR0 in force",
        make: || {
            let mut c = spr();
            c.edit(0xd, 0, Reg::Ebx, |_| 576);
            (c, spr_ctx())
        },
        expect: &[R::EnabledStandardSize],
        at: (0xd, 0, Reg::Ebx, None),
    },
    Case {
        name: "XCR0 in force beyond the supported mask",
        make: || {
            let ctx = Context {
                xcr0: Some(XfeatureMask::from_bits(0x602e7 | 0x18)),
                ..spr_ctx()
            };
            (spr(), ctx)
        },
        expect: &[R::EnabledStandardSize],
        at: (0xd, 0, Reg::Eax, None),
    },
    Case {
        name: "0xD.1 EBX not the compacted size in force",
        make: || {
            let mut c = spr();
            c.edit(0xd, 1, Reg::Ebx, |v| v + 8);
            (c, spr_ctx())
        },
        expect: &[R::CompactedSize],
        at: (0xd, 1, Reg::Ebx, None),
    },
    Case {
        name: "0xD.1 EBX fits no IA32_XSS (XSS unknown)",
        make: || {
            let mut c = spr();
            c.edit(0xd, 1, Reg::Ebx, |_| 1000);
            (
                c,
                Context {
                    xss: None,
                    ..spr_ctx()
                },
            )
        },
        expect: &[R::CompactedSize],
        at: (0xd, 1, Reg::Ebx, None),
    },
];

#[test]
fn rules_table_is_in_id_order_with_unique_names() {
    for (i, r) in RULES.iter().enumerate() {
        assert_eq!(r.id as usize, i, "{}", r.name);
        assert_eq!(r.id.rule().name, r.name);
        assert!(!r.why.is_empty() && !r.summary.is_empty());
    }
    let mut names: Vec<&str> = RULES.iter().map(|r| r.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), RULES.len());
}

#[test]
fn consistent_tables_pass_every_rule() {
    let rep = spr().run(spr_ctx());
    assert_eq!(rep.violations, Vec::new());
    // Everything is known: every rule was checked.
    assert_eq!(rep.skipped, Vec::new());

    let rep = avx_only().run(Context {
        xcr0: Some(XfeatureMask::AVX),
        xss: Some(XfeatureMask::EMPTY),
        ..spr_ctx()
    });
    assert_eq!(rep.violations, Vec::new());
    let rep = legacy().run(Context {
        osxsave: Osxsave::Cr4(false),
        ..Context::UNKNOWN
    });
    assert_eq!(rep.violations, Vec::new());
}

#[test]
fn every_crafted_violation_fires_exactly_its_rules() {
    for case in CASES {
        let (cpu, ctx) = (case.make)();
        let rep = cpu.run(ctx);
        let mut got = ids(&rep);
        got.sort_by_key(|&r| r as usize);
        got.dedup();
        let mut want = case.expect.to_vec();
        want.sort_by_key(|&r| r as usize);
        assert_eq!(got, want, "{}: {:#?}", case.name, rep.violations);
        let first = rep
            .violations
            .iter()
            .find(|v| v.rule == case.expect[0])
            .unwrap();
        assert_eq!(
            (first.leaf, first.subleaf, first.reg, first.bit),
            case.at,
            "{}: {first}",
            case.name
        );
    }
}

#[test]
fn every_rule_has_a_crafted_violation() {
    for r in &RULES {
        assert!(
            CASES.iter().any(|c| c.expect[0] == r.id),
            "no case breaks {}",
            r.name
        );
    }
}

/// What KVM reported on the machine issue 14 was written on: leaf 0xD
/// enumerates XCR0 0xe7, leaf 1 lacks XSAVE and AVX, leaf 7 lacks AVX2 and
/// AVX-512, 0xD.1 EAX is 0.
#[test]
fn issue_14_kvm_table() {
    let mut c = Cpu::default();
    c.set(0, 0, r(0x1f, 0, 0, 0));
    c.set(1, 0, r(0x00b00f21, 0x01020800, 0x81202000, 0x078bfbff));
    c.set(7, 0, r(1, 0x01800002, 0x104, 0x20000000));
    for (i, e) in [
        (0, r(0xe7, 0x980, 0x980, 0)),
        (1, r(0, 0, 0, 0)),
        (2, r(0x100, 0x240, 0, 0)),
        (5, r(0x40, 0x340, 0, 0)),
        (6, r(0x200, 0x380, 0, 0)),
        (7, r(0x400, 0x580, 0, 0)),
    ] {
        c.set(0xd, i, e);
    }
    let rep = c.run(Context::SUPPORTED_TABLE);
    let got: Vec<(RuleId, u32, Reg, Option<u32>)> = rep
        .violations
        .iter()
        .map(|v| (v.rule, v.leaf, v.reg, v.bit))
        .collect();
    assert_eq!(
        got,
        [
            (R::XsaveLeaf, 1, Reg::Ecx, Some(26)),
            (R::AvxStateHidden, 1, Reg::Ecx, Some(28)),
            (R::Avx512StateHidden, 7, Reg::Ebx, Some(16)),
            (R::Avx512WithoutAvx2, 7, Reg::Ebx, Some(5)),
            (R::XsaveoptPresent, 0xd, Reg::Eax, Some(0)),
        ]
    );
    let msg = std::format!("{}", rep.violations[0]);
    assert_eq!(
        msg,
        "XSAVE is clear but leaf 0xD enumerates XCR0 bits (x87,sse,avx,opmask,zmm_hi256,hi16_zmm = 0xe7)"
    );
    assert_eq!(
        std::format!("{}", rep.violations[0].location()),
        "CPUID.(0x1,0).ECX[26]"
    );
    // The supported table has no CR4 and no sizes in force.
    for id in [R::OsxsaveCr4, R::EnabledStandardSize, R::CompactedSize] {
        assert!(
            matches!(
                rep.skipped.iter().find(|s| s.0 == id),
                Some((_, Skip::NotApplicable(_)))
            ),
            "{id}"
        );
    }
}

/// A source recording only leaf 0xD: leaf 1/7 rules are skipped as
/// missing, not reported.
#[test]
fn unrecorded_leaves_skip_their_rules() {
    let c = spr();
    let view = |leaf: u32, subleaf: u32| (leaf == 0xd).then(|| c.get(leaf, subleaf));
    let rep = lint_all(&view, Context::UNKNOWN);
    assert_eq!(rep.violations, Vec::new());
    let missing_leaf_1 = rep
        .skipped
        .iter()
        .find(|s| s.0 == R::XsaveLeaf)
        .map(|s| s.1);
    assert_eq!(
        missing_leaf_1,
        Some(Skip::Missing {
            leaf: 1,
            subleaf: 0
        })
    );
    // Leaf 0xD-only rules were checked.
    for id in [
        R::ComponentSubleaves,
        R::XsavesXss,
        R::MaxStandardSize,
        R::XfdFlag,
    ] {
        assert!(!rep.skipped.iter().any(|s| s.0 == id), "{id} skipped");
    }
}
