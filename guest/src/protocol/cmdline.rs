//! The kernel command line (PVH `cmdline_paddr`, QEMU `-append`): its
//! vocabulary and its parser. The guest acts on it; a VMM checks it before
//! it boots a guest with it (see the word table in [`crate::protocol`]).

use super::snapshot::SnapshotPhase;

/// Workload names `workload=` accepts (see the module documentation).
pub const WORKLOAD_NAMES: &[&str] = &["none", "quick", "aes", "gemm", "linpack", "all"];

/// Benchmark names `bench=` accepts (see the module documentation); `all`
/// is every one of the others.
pub const BENCH_NAMES: &[&str] = &[
    "none",
    "exits",
    "xstate-check",
    "snapshot-check",
    "ctxsw",
    "parallel",
    "copy",
    "all",
];

/// Behaviours `hostile=` selects: a guest misbehaving on purpose, to test
/// that the VMM survives it (see `guest/src/kernel/hostile.rs`).
/// `status-N` writes `N` (decimal) to the debug-exit port.
pub const HOSTILE_MODES: &[&str] = &[
    "idle",
    "report-flood",
    "bad-report-flood",
    "mark-flood",
    "serial-flood",
    "halt",
    "idle-halt",
    "edit-xmm",
    "xsetbv-all",
    "status-N",
];

/// Command-line words the VMM owns: it always passes them itself, and a
/// user cannot supply them (`vmm run --cmdline` refuses them before any VM
/// exists). `xfeatures=` carries the XCR0 policy: a user's word would
/// replace it and let the guest enable state the policy excludes.
pub const VMM_OWNED_WORDS: &[&str] = &["xfeatures="];

/// The longest command line a guest reads, NUL excluded: ours, and x86
/// Linux's `COMMAND_LINE_SIZE` alike. A longer one is cut by the guest,
/// which could cut the VMM's own words, so the VMM refuses it.
pub const CMDLINE_MAX: usize = 2048;

/// The most bytes the VMM's own words take on the command line, with the
/// space after them: `xfeatures=0x` and up to 16 hex digits.
pub const VMM_WORDS_MAX: usize = "xfeatures=0x".len() + 16 + 1;

/// The first word of `raw` the VMM owns ([`VMM_OWNED_WORDS`]), if any.
pub fn vmm_owned_word(raw: &str) -> Option<&str> {
    raw.split_ascii_whitespace().find(|w| {
        VMM_OWNED_WORDS.iter().any(|o| match o.strip_suffix('=') {
            Some(name) => w.starts_with(o) || *w == name,
            None => w == o,
        })
    })
}

/// Exits per benchmark row when `exits=` is absent.
pub const DEFAULT_EXIT_COUNT: u64 = 10_000;

/// The guest command line, parsed: what the guest acts on, and what a VMM
/// can check before it boots a guest with it.
///
/// Words are separated by ASCII whitespace. Words the guest does not know
/// are kept (see [`Cmdline::unknown_words`]) but otherwise ignored, like a
/// Linux kernel ignores unknown parameters: QEMU, for one, appends words of
/// its own. When `workload=` is given more than once the last one wins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cmdline<'a> {
    /// The whole command line as given.
    pub raw: &'a str,
    /// `quiet`: do not print the report on the serial console.
    pub quiet: bool,
    /// The `workload=` value as given; `None` when the word is absent.
    pub workload: Option<&'a str>,
    /// `fault=KIND`: the deliberate exception to raise (see [`FAULT_KINDS`]).
    pub fault: Option<&'a str>,
    /// `selftest`: exercise the kernel's system calls.
    pub selftest: bool,
    /// `xfeatures=MASK` (hex): the XCR0 policy to narrow to.
    pub xfeatures: Option<u64>,
    /// `xfeatures=` was present but not a hex number.
    pub bad_xfeatures: Option<&'a str>,
    /// The `bench=` value as given; `None` when the word is absent (no
    /// benchmarks run). The last one wins.
    pub bench: Option<&'a str>,
    /// `exits=N` (decimal, or hex with `0x`): exits per benchmark row.
    pub exits: Option<u64>,
    /// `exits=` was present but not a number, or 0.
    pub bad_exits: Option<&'a str>,
    /// `hostile=MODE`: misbehave on purpose (see [`HOSTILE_MODES`]); the
    /// last one wins.
    pub hostile: Option<&'a str>,
    /// `cpus=N`: how many CPUs to bring up, overriding what the firmware
    /// tables (MADT, MP table) say; `Some(0)` when the value is no number.
    pub cpus: Option<u32>,
    /// `xfeatures.cpuN=MASK` (hex): CPU N (an AP) narrows the policy to
    /// `policy & MASK` (tests of per-CPU state); index = CPU, at most
    /// [`MAX_CPUS`](crate::protocol::record::MAX_CPUS). It can only narrow:
    /// the policy is the VMM's, and a word from the user must not widen it.
    pub cpu_xfeatures: [Option<u64>; crate::protocol::record::MAX_CPUS as usize],
    /// The last `xfeatures.cpuN=` word whose N is no CPU the kernel has or
    /// whose mask is no hex number.
    pub bad_cpu_xfeatures: Option<&'a str>,
    /// `fault.cpuN=KIND`: CPU N (an AP) provokes a [`FAULT_KINDS`] fault
    /// once it is up (tests of how an AP's exception ends the run); index =
    /// CPU, and a CPU past [`MAX_CPUS`](crate::protocol::record::MAX_CPUS)
    /// as `bad_cpu_fault`.
    pub cpu_faults: [Option<&'a str>; crate::protocol::record::MAX_CPUS as usize],
    /// The last `fault.cpuN=` word whose N is no CPU the kernel has.
    pub bad_cpu_fault: Option<&'a str>,
    /// `snapshot=PHASE`: where the workloads stop for a snapshot
    /// ([`crate::protocol::snapshot`]); the last one wins.
    pub snapshot: Option<SnapshotPhase>,
    /// The last `snapshot=` word's value when it names no phase (it then
    /// clears [`Cmdline::snapshot`]).
    pub bad_snapshot: Option<&'a str>,
}

/// One word of the command line, as the guest reads it: the one place
/// that says which words it knows, so [`Cmdline::parse`] and
/// [`Cmdline::unknown_words`] cannot disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Word<'a> {
    Quiet,
    Selftest,
    Workload(&'a str),
    Fault(&'a str),
    Bench(&'a str),
    Hostile(&'a str),
    Exits(&'a str),
    Cpus(&'a str),
    Xfeatures(&'a str),
    Snapshot(&'a str),
    /// `fault.cpuN=KIND`: `N` and `KIND` as written.
    CpuFault(&'a str, &'a str),
    /// `xfeatures.cpuN=MASK`: `N` and `MASK` as written.
    CpuXfeatures(&'a str, &'a str),
    Unknown,
}

impl<'a> Word<'a> {
    fn of(word: &'a str) -> Self {
        let per_cpu = |prefix: &str| {
            word.strip_prefix(prefix)
                .and_then(|rest| rest.split_once('='))
        };
        let value = |prefix: &str| word.strip_prefix(prefix);
        if word == "quiet" {
            Word::Quiet
        } else if word == "selftest" {
            Word::Selftest
        } else if let Some(v) = value("workload=") {
            Word::Workload(v)
        } else if let Some(v) = value("fault=") {
            Word::Fault(v)
        } else if let Some(v) = value("bench=") {
            Word::Bench(v)
        } else if let Some(v) = value("hostile=") {
            Word::Hostile(v)
        } else if let Some(v) = value("exits=") {
            Word::Exits(v)
        } else if let Some(v) = value("cpus=") {
            Word::Cpus(v)
        } else if let Some(v) = value("xfeatures=") {
            Word::Xfeatures(v)
        } else if let Some(v) = value("snapshot=") {
            Word::Snapshot(v)
        } else if let Some((cpu, kind)) = per_cpu("fault.cpu") {
            Word::CpuFault(cpu, kind)
        } else if let Some((cpu, mask)) = per_cpu("xfeatures.cpu") {
            Word::CpuXfeatures(cpu, mask)
        } else {
            Word::Unknown
        }
    }
}

/// A hex mask with or without `0x`.
fn hex_mask(digits: &str) -> Option<u64> {
    u64::from_str_radix(digits.strip_prefix("0x").unwrap_or(digits), 16).ok()
}

/// Exceptions `fault=` can provoke: invalid opcode, divide error, page
/// fault (a read of the unmapped page 0), general protection (a
/// non-canonical address).
pub const FAULT_KINDS: &[&str] = &["ud", "de", "pf", "gp"];

impl<'a> Cmdline<'a> {
    /// Parse a command line. Never fails: unknown words are only recorded.
    pub fn parse(raw: &'a str) -> Self {
        let mut c = Cmdline {
            raw,
            ..Cmdline::default()
        };
        for word in raw.split_ascii_whitespace() {
            match Word::of(word) {
                Word::Quiet => c.quiet = true,
                Word::Selftest => c.selftest = true,
                Word::Workload(list) => c.workload = Some(list),
                Word::Fault(kind) => c.fault = Some(kind),
                Word::Bench(list) => c.bench = Some(list),
                Word::Hostile(mode) => c.hostile = Some(mode),
                Word::Exits(n) => {
                    let parsed = match n.strip_prefix("0x") {
                        Some(hex) => u64::from_str_radix(hex, 16),
                        None => n.parse::<u64>(),
                    };
                    match parsed {
                        Ok(v) if v > 0 => {
                            c.exits = Some(v);
                            c.bad_exits = None;
                        }
                        _ => {
                            c.exits = None;
                            c.bad_exits = Some(n);
                        }
                    }
                }
                Word::Cpus(n) => c.cpus = Some(n.parse::<u32>().unwrap_or(0)),
                Word::Xfeatures(mask) => match hex_mask(mask) {
                    Some(v) => c.xfeatures = Some(v),
                    None => c.bad_xfeatures = Some(mask),
                },
                Word::CpuFault(cpu, kind) => match cpu
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| c.cpu_faults.get_mut(i))
                {
                    Some(slot) => *slot = Some(kind),
                    None => c.bad_cpu_fault = Some(word),
                },
                Word::CpuXfeatures(cpu, mask) => {
                    let slot = cpu
                        .parse::<usize>()
                        .ok()
                        .and_then(|i| c.cpu_xfeatures.get_mut(i));
                    match (slot, hex_mask(mask)) {
                        (Some(slot), Some(v)) => *slot = Some(v),
                        _ => c.bad_cpu_xfeatures = Some(word),
                    }
                }
                Word::Snapshot(phase) => {
                    c.snapshot = SnapshotPhase::parse(phase);
                    c.bad_snapshot = c.snapshot.is_none().then_some(phase);
                }
                Word::Unknown => {}
            }
        }
        c
    }

    /// The requested workload names in order, without empty items
    /// (`workload=aes,,gemm` is `aes`, `gemm`). Empty when `workload=` is
    /// absent or empty.
    pub fn workloads(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.workload
            .unwrap_or("")
            .split(',')
            .filter(|w| !w.is_empty())
    }

    /// True when the list asks for nothing to run: `workload=`,
    /// `workload=none` (or only `none` items). False when `workload=` is
    /// absent: the guest then runs its default set.
    pub fn runs_nothing(&self) -> bool {
        self.workload.is_some() && self.workloads().all(|w| w == "none")
    }

    /// The first workload name not in [`WORKLOAD_NAMES`], if any.
    pub fn unknown_workload(&self) -> Option<&'a str> {
        self.workloads().find(|w| !WORKLOAD_NAMES.contains(w))
    }

    /// The requested benchmark names in order, without empty items. Empty
    /// when `bench=` is absent or empty.
    pub fn benches(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.bench
            .unwrap_or("")
            .split(',')
            .filter(|w| !w.is_empty())
    }

    /// True when `bench=` asks for `name` itself or for `all`.
    pub fn wants_bench(&self, name: &str) -> bool {
        self.benches().any(|b| b == name || b == "all")
    }

    /// The first benchmark name not in [`BENCH_NAMES`], if any.
    pub fn unknown_bench(&self) -> Option<&'a str> {
        self.benches().find(|w| !BENCH_NAMES.contains(w))
    }

    /// Exits per benchmark row: `exits=N`, else [`DEFAULT_EXIT_COUNT`].
    pub fn exit_count(&self) -> u64 {
        self.exits.unwrap_or(DEFAULT_EXIT_COUNT)
    }

    /// Words the guest does not act on. Every other word changes what
    /// [`Cmdline::parse`] returns, if only to record it as bad.
    pub fn unknown_words(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.raw
            .split_ascii_whitespace()
            .filter(|w| Word::of(w) == Word::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_words() {
        let c = Cmdline::parse("  quiet   workload=aes,,gemm console=ttyS0 ");
        assert!(c.quiet);
        assert_eq!(c.workload, Some("aes,,gemm"));
        let w: [&str; 2] = {
            let mut it = c.workloads();
            [it.next().unwrap(), it.next().unwrap()]
        };
        assert_eq!(w, ["aes", "gemm"]);
        assert_eq!(c.workloads().count(), 2);
        assert!(!c.runs_nothing());
        assert_eq!(c.unknown_workload(), None);
        let mut unknown = c.unknown_words();
        assert_eq!(unknown.next(), Some("console=ttyS0"));
        assert_eq!(unknown.next(), None);
        assert_eq!(c.fault, None);
        assert!(!c.selftest);

        let t = Cmdline::parse("selftest fault=pf");
        assert!(t.selftest);
        assert_eq!(t.fault, Some("pf"));
        assert_eq!(t.unknown_words().count(), 0);
    }

    #[test]
    fn cmdline_cpu_words() {
        let c = Cmdline::parse("cpus=2 xfeatures.cpu1=0x3 xfeatures.cpu2=7 xfeatures.cpux=1");
        assert_eq!(c.cpus, Some(2));
        assert_eq!(c.cpu_xfeatures[1], Some(0x3));
        assert_eq!(c.cpu_xfeatures[2], Some(0x7));
        assert_eq!(c.cpu_xfeatures[0], None);
        assert_eq!(c.bad_cpu_xfeatures, Some("xfeatures.cpux=1"));
        assert_eq!(c.unknown_words().count(), 0);
        for bad in ["xfeatures.cpu8=0x3", "xfeatures.cpu1=zz", "xfeatures.cpu1="] {
            let c = Cmdline::parse(bad);
            assert_eq!(c.bad_cpu_xfeatures, Some(bad), "{bad}");
            assert!(c.cpu_xfeatures.iter().all(Option::is_none), "{bad}");
        }
        assert_eq!(Cmdline::parse("cpus=x").cpus, Some(0));
        let f = Cmdline::parse("fault.cpu1=ud fault.cpu2=pf fault.cpu99=gp");
        assert_eq!((f.cpu_faults[1], f.cpu_faults[2]), (Some("ud"), Some("pf")));
        assert_eq!(
            (f.cpu_faults[0], f.bad_cpu_fault),
            (None, Some("fault.cpu99=gp"))
        );
        assert_eq!(vmm_owned_word("xfeatures.cpu1=0x3"), None);
    }

    #[test]
    fn cmdline_defaults_and_none() {
        let empty = Cmdline::parse("");
        assert!(!empty.quiet);
        assert_eq!(empty.workload, None);
        assert!(
            !empty.runs_nothing(),
            "absent workload= means the default set"
        );
        assert_eq!(empty.workloads().count(), 0);

        assert!(Cmdline::parse("workload=").runs_nothing());
        assert!(Cmdline::parse("workload=none").runs_nothing());
        assert!(Cmdline::parse("workload=none,none").runs_nothing());
        assert!(!Cmdline::parse("workload=none,aes").runs_nothing());
        // The last workload= wins.
        assert_eq!(
            Cmdline::parse("workload=aes workload=none").workload,
            Some("none")
        );
        // Tabs and newlines separate words too; "quietly" is not "quiet".
        let c = Cmdline::parse("quietly\tworkload=linpack\n");
        assert!(!c.quiet);
        assert_eq!(c.workload, Some("linpack"));
    }

    #[test]
    fn cmdline_bench_words() {
        let c = Cmdline::parse("bench=exits,,ctxsw exits=500 console=ttyS0");
        assert_eq!(c.bench, Some("exits,,ctxsw"));
        assert_eq!(c.benches().count(), 2);
        assert!(c.wants_bench("exits"));
        assert!(c.wants_bench("ctxsw"));
        assert!(!c.wants_bench("xstate-check"));
        assert_eq!(c.unknown_bench(), None);
        assert_eq!(c.exit_count(), 500);
        assert_eq!(c.bad_exits, None);
        let unknown: [&str; 1] = [c.unknown_words().next().unwrap()];
        assert_eq!(unknown, ["console=ttyS0"]);
        assert_eq!(c.unknown_words().count(), 1);

        let all = Cmdline::parse("bench=all");
        for name in ["exits", "xstate-check", "ctxsw"] {
            assert!(all.wants_bench(name), "{name}");
        }
        assert_eq!(all.exit_count(), DEFAULT_EXIT_COUNT);

        let none = Cmdline::parse("workload=none");
        assert_eq!(none.bench, None);
        assert!(!none.wants_bench("exits"));

        assert_eq!(
            Cmdline::parse("bench=exits,bogus").unknown_bench(),
            Some("bogus")
        );
        assert_eq!(Cmdline::parse("exits=0x100").exits, Some(256));
        for bad in ["exits=", "exits=0", "exits=ten", "exits=-5"] {
            let c = Cmdline::parse(bad);
            assert_eq!(c.exits, None, "{bad}");
            assert!(c.bad_exits.is_some(), "{bad}");
            assert_eq!(c.exit_count(), DEFAULT_EXIT_COUNT);
        }
        // The last exits= wins, a good one clears an earlier bad one.
        let c = Cmdline::parse("exits=x exits=7");
        assert_eq!((c.exits, c.bad_exits), (Some(7), None));
    }

    #[test]
    fn cmdline_hostile_and_owned_words() {
        let c = Cmdline::parse("quiet hostile=report-flood");
        assert_eq!(c.hostile, Some("report-flood"));
        assert_eq!(c.unknown_words().count(), 0);
        assert_eq!(Cmdline::parse("quiet").hostile, None);

        assert_eq!(
            vmm_owned_word("quiet xfeatures=0xe7"),
            Some("xfeatures=0xe7")
        );
        assert_eq!(vmm_owned_word("xfeatures"), Some("xfeatures"));
        assert_eq!(vmm_owned_word("xfeatures= bench=exits"), Some("xfeatures="));
        assert_eq!(vmm_owned_word("quiet bench=exits myxfeatures=1"), None);
        assert_eq!(vmm_owned_word(""), None);
    }

    /// A word is reported unknown exactly when parsing it changes
    /// nothing: the two cannot drift apart (a fuzz target found
    /// `fault.cpu=stx`, acted on, missing from an older list).
    #[test]
    fn a_word_is_unknown_exactly_when_the_guest_ignores_it() {
        let words = [
            "quiet",
            "selftest",
            "workload=",
            "workload=aes",
            "fault=ud",
            "fault=",
            "bench=exits",
            "hostile=idle",
            "exits=0",
            "exits=5",
            "cpus=x",
            "cpus=2",
            "xfeatures=zz",
            "xfeatures=0x7",
            "fault.cpu=stx",
            "fault.cpu1=ud",
            "fault.cpu99=gp",
            "xfeatures.cpu1=0x3",
            "xfeatures.cpu=1",
            "snapshot=mid",
            "snapshot=bogus",
            "snapshot=",
            // Unknown: near misses of known words.
            "quietly",
            "fault.cpu1",
            "xfeatures.cpu1",
            "fault.cp1=ud",
            "cpus",
            "console=ttyS0",
            "Workload=aes",
            "xfeatures",
            "snapshot",
            "",
        ];
        let nothing = Cmdline::default();
        for w in words {
            let c = Cmdline::parse(w);
            let acted = Cmdline { raw: "", ..c } != nothing;
            let unknown = c.unknown_words().count();
            assert_eq!(
                unknown,
                usize::from(!acted && !w.is_empty()),
                "{w:?}: acted on {acted}, unknown {unknown}"
            );
        }
    }

    #[test]
    fn cmdline_snapshot_words() {
        let c = Cmdline::parse("workload=gemm snapshot=mid");
        assert_eq!(
            (c.snapshot, c.bad_snapshot),
            (Some(SnapshotPhase::Mid), None)
        );
        assert_eq!(Cmdline::parse("quiet").snapshot, None);
        // A phase that does not exist is kept to be named, and stops nothing.
        let c = Cmdline::parse("snapshot=start snapshot=middle");
        assert_eq!((c.snapshot, c.bad_snapshot), (None, Some("middle")));
        // The last one wins, a good one clears an earlier bad one.
        let c = Cmdline::parse("snapshot=x snapshot=end");
        assert_eq!(
            (c.snapshot, c.bad_snapshot),
            (Some(SnapshotPhase::End), None)
        );
        assert_eq!(Cmdline::parse("snapshot=").bad_snapshot, Some(""));
    }

    #[test]
    fn cmdline_unknown_workload() {
        assert_eq!(
            Cmdline::parse("workload=aes,bogus,gemm").unknown_workload(),
            Some("bogus")
        );
        for name in WORKLOAD_NAMES {
            let line = [b"workload=".as_slice(), name.as_bytes()].concat();
            let line = core::str::from_utf8(&line).unwrap();
            assert_eq!(Cmdline::parse(line).unknown_workload(), None, "{name}");
        }
    }
}
