//! One vCPU PIO exit round trip from guest CPL3 (upper YMM clean), per
//! xstate sync policy and for the raw KVM_RUN loop, timed from the VMM
//! between the guest's benchmark markers (boot time excluded).
//!
//! `vmm bench exits` prints the full matrix; this is the criterion view of
//! its headline row.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use guest::protocol::MARK_END;
use vmm::run::SerialSink;
use vmm::run::{self, RunConfig, RunEnd};
use vmm::xstate_manager::SyncPolicy;

/// Wall time of `exits` PIO exits from CPL3 under `policy` (or raw).
fn pio_round_trips(exits: u64, policy: SyncPolicy, raw: bool) -> Duration {
    let outcome = run::run(RunConfig {
        cmdline: format!("quiet workload=none bench=exits exits={exits}"),
        serial: SerialSink::Null,
        xstate_sync: policy,
        raw_loop: raw,
        timeout: Some(Duration::from_secs(600)),
        ..RunConfig::default()
    })
    .expect("guest run");
    assert!(matches!(outcome.end, RunEnd::Exited(0)), "guest failed");
    // Row 0 is exit-pio/cpl3-clean.
    let at = |v: u32| outcome.marks.iter().find(|(m, _)| *m == v).map(|(_, t)| *t);
    match (at(0), at(MARK_END)) {
        (Some(b), Some(e)) => e - b,
        _ => panic!("the guest wrote no markers for row 0"),
    }
}

fn vcpu_exit(c: &mut Criterion) {
    if std::fs::File::open("/dev/kvm").is_err() {
        eprintln!("vcpu_exit: /dev/kvm cannot be opened; nothing to measure");
        return;
    }
    let mut g = c.benchmark_group("vcpu_exit_pio_cpl3");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("raw", |b| {
        b.iter_custom(|iters| pio_round_trips(iters.max(1), SyncPolicy::Lazy, true))
    });
    for policy in [
        SyncPolicy::Lazy,
        SyncPolicy::Eager,
        SyncPolicy::EagerCompact,
    ] {
        g.bench_function(policy.name(), |b| {
            b.iter_custom(|iters| pio_round_trips(iters.max(1), policy, false))
        });
    }
    g.finish();
}

criterion_group!(benches, vcpu_exit);
criterion_main!(benches);
