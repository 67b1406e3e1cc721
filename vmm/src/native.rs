//! The guest's workloads run natively on the host, in the same process and
//! the same run, so every guest figure comes with a guest/native ratio; and
//! the host's `openssl speed` as a reference users already trust.

use std::process::Command;

use guest::protocol::Report;
use guest::workloads::{self, CpuFeatures, Selection};

use crate::error::{Error, Result};
use crate::report::parallel::Measured;
use crate::report::{result_rows, ResultRow};

/// Run `list` (the `--workload` syntax) on the host with every variant the
/// host CPU and OS allow, and return the rows.
pub fn run_native(list: &str, tsc_khz: u64) -> Result<Vec<ResultRow>> {
    let sel =
        Selection::parse(list).map_err(|e| Error::Argument(format!("--workload {list:?}: {e}")))?;
    if sel.is_empty() {
        return Ok(Vec::new());
    }
    let mut scratch = vec![0u8; workloads::scratch_bytes(&sel)];
    let mut report = Box::new(Report::new());
    workloads::run(
        &sel,
        &CpuFeatures::detect(),
        tsc_khz,
        &mut scratch,
        &mut report,
    );
    Ok(result_rows(&report, tsc_khz))
}

/// Fill each guest row's `native_ratio` from the native row with the same
/// workload, variant and size.
pub fn attach_ratios(guest: &mut [ResultRow], native: &[ResultRow]) {
    for g in guest.iter_mut() {
        let n = native
            .iter()
            .find(|n| n.name == g.name && n.variant == g.variant && n.size == g.size);
        g.native_ratio = match (g.throughput(), n.and_then(ResultRow::throughput)) {
            (Some(gv), Some(nv)) if nv > 0.0 => Some(gv / nv),
            _ => None,
        };
    }
}

/// `bench=parallel` on the host: the guest's scaling set on one thread,
/// then on `threads` threads at once, holding a barrier before each part
/// as the guest's CPUs do. Returns (one thread's rows, each concurrent
/// thread's rows), variants unsuffixed.
pub fn run_parallel_native(threads: usize, tsc_khz: u64) -> (Vec<Measured>, Vec<Vec<Measured>>) {
    use guest::bench::parallel::{self, Part};
    let feat = CpuFeatures::detect();
    let run = |barrier: Option<&std::sync::Barrier>| {
        let mut scratch = vec![0u8; parallel::scratch_bytes()];
        let mut report = Box::new(Report::new());
        for part in Part::ALL {
            if let Some(b) = barrier {
                b.wait();
            }
            parallel::run_part(part, &feat, tsc_khz, &mut scratch, &mut report);
        }
        result_rows(&report, tsc_khz)
            .iter()
            .map(Measured::from)
            .collect::<Vec<_>>()
    };
    let solo = run(None);
    let barrier = std::sync::Barrier::new(threads.max(1));
    let together = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| s.spawn(|| run(Some(&barrier))))
            .collect();
        // A workload thread that panicked has no rows.
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    (solo, together)
}

/// `openssl speed -evp aes-128-cbc` at 8192-byte blocks on the host, in
/// MB/s (10^6 bytes per second), or `None` when openssl is not installed or
/// its output cannot be read.
pub fn openssl_aes_128_cbc_8192(seconds: u32) -> Option<f64> {
    let out = Command::new("openssl")
        .args([
            "speed",
            "-elapsed",
            "-evp",
            "aes-128-cbc",
            "-bytes",
            "8192",
            "-seconds",
        ])
        .arg(seconds.to_string())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    parse_openssl_speed(&String::from_utf8_lossy(&out.stdout))
}

/// Read the last figure of the `aes-128-cbc` row: openssl prints thousands
/// of bytes per second with a `k` suffix.
fn parse_openssl_speed(text: &str) -> Option<f64> {
    let line = text.lines().rev().find(|l| {
        l.trim_start()
            .to_ascii_lowercase()
            .starts_with("aes-128-cbc")
    })?;
    let last = line.split_whitespace().last()?;
    let kbs: f64 = last.trim_end_matches('k').parse().ok()?;
    Some(kbs * 1000.0 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_openssl_speed_table() {
        let text = "version: 3.0.17\nThe 'numbers' are in 1000s of bytes per second processed.\n\
                    type             8192 bytes\n\
                    AES-128-CBC    1428000.77k\n";
        let v = parse_openssl_speed(text).unwrap();
        assert!((v - 1428.00077).abs() < 1e-6, "{v}");
        assert_eq!(parse_openssl_speed("garbage"), None);
    }
}
