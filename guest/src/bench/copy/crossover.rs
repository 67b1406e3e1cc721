//! What the `bench=copy` table implies: the sizes where one method starts
//! to beat another, and the `memcpy` policy the guest's libc takes from it.
//! Pure functions of a [`CopyReport`], so the VMM (its table and `--json`)
//! and the guest (its `memcpy`) read the same answer.
//!
//! A crossover is "from size S on": the smallest measured size from which
//! the candidate is faster at every larger measured size, so one noisy
//! cell below the real crossover does not move it. The grid is powers of
//! 4: the true crossover lies between S / 4 and S.

use super::Method;
use crate::protocol::{CopyReport, COPY_LIVE_STATES, COPY_METHODS, COPY_SIZES};
use crate::workloads::live::Live;

/// The crossovers of one table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Crossovers {
    /// Per method ([`Method::ALL`]), cache-hot data: the smallest and the
    /// largest size at which it beats `rep movsb` (`None`: at none, or not
    /// measured).
    pub beats_movsb_hot: [Option<(u64, u64)>; COPY_METHODS],
    /// Per method, cold data: as [`Crossovers::beats_movsb_hot`].
    pub beats_movsb_cold: [Option<(u64, u64)>; COPY_METHODS],
    /// Per method, cold data: from which size on it beats every cached
    /// (temporal) method measured; meaningful for the non-temporal ones.
    pub beats_cached_cold: [Option<u64>; COPY_METHODS],
    /// Per live state ([`Live::ALL`]), hot data: from which size on the best
    /// vector method plus one XSAVE+XRSTOR pair beats the best string
    /// instruction (`rep movsb`/`rep movsq`).
    pub borrow_pays_hot: [Option<u64>; COPY_LIVE_STATES],
    /// Per live state, cold data: as [`Crossovers::borrow_pays_hot`].
    pub borrow_pays_cold: [Option<u64>; COPY_LIVE_STATES],
}

/// A measured cell (0.0 = not measured).
fn cell(v: f64) -> Option<f64> {
    (v > 0.0).then_some(v)
}

/// The smallest size index from which `wins(i)` holds at every larger
/// measured index (`None` for unmeasured cells, which neither break nor
/// make the run); `None` when it does not hold at the largest measured one.
fn from_on(wins: impl Fn(usize) -> Option<bool>) -> Option<u64> {
    let mut start = None;
    for i in (0..COPY_SIZES).rev() {
        match wins(i) {
            Some(true) => start = Some(i),
            Some(false) => break,
            None => {
                if start.is_none() {
                    continue;
                }
            }
        }
    }
    start.map(CopyReport::size)
}

/// The first and last size index where `wins(i)` holds.
fn range(wins: impl Fn(usize) -> Option<bool>) -> Option<(u64, u64)> {
    let hits = (0..COPY_SIZES).filter(|&i| wins(i) == Some(true));
    let mut lo = None;
    let mut hi = None;
    for i in hits {
        lo.get_or_insert(i);
        hi = Some(i);
    }
    Some((CopyReport::size(lo?), CopyReport::size(hi?)))
}

/// The cheapest measured method in `of` at size index `i` of `cells`.
fn best(
    cells: &[[f64; COPY_SIZES]; COPY_METHODS],
    i: usize,
    of: impl Fn(Method) -> bool,
) -> Option<f64> {
    Method::ALL
        .iter()
        .filter(|&&m| of(m))
        .filter_map(|&m| cell(cells[m as usize][i]))
        .min_by(f64::total_cmp)
}

/// The cheapest measured XSAVE+XRSTOR pair with `live` state live.
pub fn borrow_price(r: &CopyReport, live: Live) -> Option<f64> {
    r.borrow_cycles
        .iter()
        .filter_map(|row| cell(row[live as usize]))
        .min_by(f64::total_cmp)
}

/// Every crossover of `r`.
pub fn crossovers(r: &CopyReport) -> Crossovers {
    let movsb = Method::RepMovsb as usize;
    let beats = |cells: &[[f64; COPY_SIZES]; COPY_METHODS], m: usize| {
        range(|i| Some(cell(cells[m][i])? < cell(cells[movsb][i])?))
    };
    let mut out = Crossovers {
        beats_movsb_hot: [None; COPY_METHODS],
        beats_movsb_cold: [None; COPY_METHODS],
        beats_cached_cold: [None; COPY_METHODS],
        borrow_pays_hot: [None; COPY_LIVE_STATES],
        borrow_pays_cold: [None; COPY_LIVE_STATES],
    };
    for m in Method::ALL {
        let k = m as usize;
        if m != Method::RepMovsb {
            out.beats_movsb_hot[k] = beats(&r.hot, k);
            out.beats_movsb_cold[k] = beats(&r.cold, k);
        }
        out.beats_cached_cold[k] = from_on(|i| {
            let c = cell(r.cold[k][i])?;
            let other = best(&r.cold, i, |o| !o.is_nt() && o != m)?;
            Some(c < other)
        });
    }
    for live in Live::ALL {
        let Some(price) = borrow_price(r, live) else {
            continue;
        };
        let pays = |cells: &[[f64; COPY_SIZES]; COPY_METHODS]| {
            from_on(|i| {
                let vector = best(cells, i, Method::is_vector)?;
                let string = best(cells, i, |m| !m.is_vector())?;
                Some(vector + price < string)
            })
        };
        out.borrow_pays_hot[live as usize] = pays(&r.hot);
        out.borrow_pays_cold[live as usize] = pays(&r.cold);
    }
    out
}

/// The guest's `memcpy`/`memset` size thresholds (see
/// `guest/src/kernel/libc.rs`): below `rep_min` the SSE2 loop, from it on
/// `rep movsb`/`rep stosb`, from `nt_min` on non-temporal SSE2 stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// `memcpy` sizes from this one up use `rep movsb`.
    pub memcpy_rep_min: u64,
    /// `memcpy` sizes from this one up use non-temporal stores.
    pub memcpy_nt_min: u64,
    /// `memset` sizes from this one up use `rep stosb`.
    pub memset_rep_min: u64,
}

impl Policy {
    /// Before anything was measured: the SSE2 loop up to 256 bytes (where
    /// the fast-string start-up of ~25 cycles dominates on every CPU with
    /// ERMSB), `rep movsb` above, no non-temporal stores.
    pub const DEFAULT: Policy = Policy {
        memcpy_rep_min: 257,
        memcpy_nt_min: u64::MAX,
        memset_rep_min: 257,
    };

    /// The policy a table implies, `None` when it lacks the SSE2 or the
    /// `rep movsb` column.
    ///
    /// - `memcpy_rep_min`: from which hot size on `rep movsb` is at least as
    ///   fast as the SSE2 loop (never below 17 bytes: up to 32 bytes the
    ///   libc uses overlapping moves, no loop); the SSE2 loop everywhere if
    ///   it wins even at the largest size.
    /// - `memcpy_nt_min`: from which cold size on non-temporal SSE2 beats
    ///   every cached method, but never below the largest cache (`llc`): a
    ///   copy smaller than the cache is likely hot, where non-temporal
    ///   stores lose; never when unmeasured or the cache size is unknown.
    /// - `memset_rep_min`: the same as `memcpy_rep_min` (the sweep measures
    ///   copies; `rep stosb` has the same start-up as `rep movsb`).
    pub fn from_table(r: &CopyReport) -> Option<Policy> {
        let sse = Method::Sse2 as usize;
        let movsb = Method::RepMovsb as usize;
        if r.methods & (1 << sse) == 0 || r.methods & (1 << movsb) == 0 {
            return None;
        }
        let rep_min = from_on(|i| Some(cell(r.hot[movsb][i])? <= cell(r.hot[sse][i])?))
            .map_or(u64::MAX, |s| s.max(17));
        let nt = crossovers(r).beats_cached_cold[Method::NtSse2 as usize];
        let nt_min = match nt {
            Some(s) if r.llc_bytes > 0 => s.max(r.llc_bytes),
            _ => u64::MAX,
        };
        Some(Policy {
            memcpy_rep_min: rep_min,
            memcpy_nt_min: nt_min,
            memset_rep_min: rep_min,
        })
    }
}
