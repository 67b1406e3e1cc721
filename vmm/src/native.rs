//! The guest's workloads run natively on the host, in the same process and
//! the same run, so every guest figure comes with a guest/native ratio; and
//! the host's `openssl speed` as a reference users already trust.

use guest::protocol::Report;
use guest::workloads::{self, CpuFeatures, Selection};

use crate::bench::openssl::{self, GuestFigure, Yardstick};
use crate::error::{Error, Result};
use crate::report::summary::SeedFigure;
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

/// The AES yardsticks for the guest's rows: the host's `openssl speed` per
/// mode and size (see [`openssl::yardsticks`]; `quick` keeps one size per
/// mode), rows whose timing is invalid left out.
pub fn aes_yardsticks(guest: &[ResultRow], quick: bool) -> Vec<Yardstick> {
    let figures: Vec<GuestFigure<'_>> = guest
        .iter()
        .filter(|r| r.invalid.is_none() && r.check == "pass")
        .map(|r| GuestFigure {
            name: &r.name,
            variant: &r.variant,
            size: r.size,
            mb_per_s: r.mb_per_s,
        })
        .collect();
    openssl::yardsticks(&figures, quick, &mut openssl::openssl_speed)
}

/// The seed's Ice Lake AES-256-XTS 4 KiB figures, when `guest` has XTS
/// rows to read them against.
pub fn seed_reference(guest: &[ResultRow]) -> Vec<SeedFigure> {
    if !guest.iter().any(|r| r.name == "aes-256-xts") {
        return Vec::new();
    }
    openssl::SEED_ICE_LAKE_XTS_4K
        .iter()
        .map(|&(variant, mb_per_s)| SeedFigure { variant, mb_per_s })
        .collect()
}

/// The `openssl speed -evp aes-128-cbc` 8192-byte figure among `ys`.
pub fn cbc_8192(ys: &[Yardstick]) -> Option<f64> {
    ys.iter()
        .find(|y| y.cipher == "aes-128-cbc" && y.size == 8192)
        .and_then(|y| y.openssl_mb_per_s)
}
