//! The consistency lint on the recorded dumps of `tests/data`: real CPUs
//! (and one real KVM guest) raise no alarm for the leaves they record, and
//! the rules that need unrecorded leaves say so instead of guessing.

mod common;

use xstate::lint::{lint_all, Context, RuleId, Skip};

#[test]
fn recorded_dumps_raise_no_false_alarm() {
    for name in common::DUMPS {
        let raw = common::raw(name);
        let view = |leaf: u32, subleaf: u32| {
            (leaf == 0xd).then(|| raw.get(subleaf as usize).copied().unwrap_or_default())
        };
        let rep = lint_all(&view, Context::UNKNOWN);
        assert_eq!(rep.violations, Vec::new(), "{name}");
        // Rules on leaf 0xD alone were checked on every dump.
        for id in [
            RuleId::SupportedXcr0,
            RuleId::ComponentSubleaves,
            RuleId::XsavesXss,
            RuleId::XsavecAlign,
            RuleId::XfdFlag,
            RuleId::XsaveoptPresent,
            RuleId::MaxStandardSize,
        ] {
            assert!(
                !rep.skipped.iter().any(|s| s.0 == id),
                "{name}: {id} skipped"
            );
        }
        // Leaf 1 is not recorded: its rules are skipped as missing.
        assert!(
            rep.skipped.iter().any(|s| s.0 == RuleId::XsaveLeaf
                && s.1
                    == Skip::Missing {
                        leaf: 1,
                        subleaf: 0
                    }),
            "{name}"
        );
    }
}
