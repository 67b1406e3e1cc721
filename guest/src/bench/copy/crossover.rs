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

/// Sizes of the grid as a set: bit `i` is [`CopyReport::size`]`(i)`.
///
/// Where one method beats another need not be one stretch of sizes (on
/// Zen 3 `rep movsq` beats `rep movsb` hot at 16 B and again from 16 MiB,
/// not between), so a set, read as its runs, says it without implying
/// the sizes in between.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SizeSet(pub u32);

const _: () = assert!(COPY_SIZES <= 32, "a SizeSet holds 32 sizes");

impl SizeSet {
    /// No size.
    pub const EMPTY: SizeSet = SizeSet(0);

    /// The set of the size indices where `wins(i)` holds.
    fn of(wins: impl Fn(usize) -> Option<bool>) -> SizeSet {
        SizeSet(
            (0..COPY_SIZES)
                .filter(|&i| wins(i) == Some(true))
                .fold(0, |m, i| m | 1 << i),
        )
    }

    /// Whether size index `i` is in the set.
    pub fn contains(self, i: usize) -> bool {
        i < COPY_SIZES && self.0 & (1 << i) != 0
    }

    /// The smallest and the largest size in the set (bytes), `None` when
    /// it is empty. Sizes between them need not be in it: see
    /// [`SizeSet::runs`].
    pub fn bounds(self) -> Option<(u64, u64)> {
        let lo = (0..COPY_SIZES).find(|&i| self.contains(i))?;
        let hi = (0..COPY_SIZES).rev().find(|&i| self.contains(i))?;
        Some((CopyReport::size(lo), CopyReport::size(hi)))
    }

    /// The runs of consecutive grid sizes in the set, smallest first, each
    /// as its smallest and largest size in bytes.
    pub fn runs(self) -> impl Iterator<Item = (u64, u64)> {
        (0..COPY_SIZES)
            .filter(move |&i| self.contains(i) && (i == 0 || !self.contains(i - 1)))
            .map(move |start| {
                let end = (start..COPY_SIZES)
                    .take_while(|&i| self.contains(i))
                    .last()
                    .unwrap_or(start);
                (CopyReport::size(start), CopyReport::size(end))
            })
    }
}

/// The crossovers of one table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Crossovers {
    /// Per method ([`Method::ALL`]), cache-hot data: the sizes at which it
    /// beats `rep movsb` (empty: at none, or not measured).
    pub beats_movsb_hot: [SizeSet; COPY_METHODS],
    /// Per method, cold data: as [`Crossovers::beats_movsb_hot`].
    pub beats_movsb_cold: [SizeSet; COPY_METHODS],
    /// Per method, cold data: from which size on it beats every cached
    /// (temporal) method measured; meaningful for the non-temporal ones.
    pub beats_cached_cold: [Option<u64>; COPY_METHODS],
    /// Per method, cold data: every size at which it beats every cached
    /// method measured (it may win in the middle and lose at the end, where
    /// [`Crossovers::beats_cached_cold`] says `None`).
    pub beats_cached_cold_sizes: [SizeSet; COPY_METHODS],
    /// Per live state ([`Live::ALL`]), hot data: from which size on the best
    /// vector method plus one XSAVE+XRSTOR pair beats the best string
    /// instruction (`rep movsb`/`rep movsq`).
    pub borrow_pays_hot: [Option<u64>; COPY_LIVE_STATES],
    /// Per live state, cold data: as [`Crossovers::borrow_pays_hot`].
    pub borrow_pays_cold: [Option<u64>; COPY_LIVE_STATES],
    /// Per live state, hot data: every size at which borrowing pays.
    pub borrow_pays_hot_sizes: [SizeSet; COPY_LIVE_STATES],
    /// Per live state, cold data: every size at which borrowing pays.
    pub borrow_pays_cold_sizes: [SizeSet; COPY_LIVE_STATES],
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
        SizeSet::of(|i| Some(cell(cells[m][i])? < cell(cells[movsb][i])?))
    };
    let mut out = Crossovers {
        beats_movsb_hot: [SizeSet::EMPTY; COPY_METHODS],
        beats_movsb_cold: [SizeSet::EMPTY; COPY_METHODS],
        beats_cached_cold: [None; COPY_METHODS],
        beats_cached_cold_sizes: [SizeSet::EMPTY; COPY_METHODS],
        borrow_pays_hot: [None; COPY_LIVE_STATES],
        borrow_pays_cold: [None; COPY_LIVE_STATES],
        borrow_pays_hot_sizes: [SizeSet::EMPTY; COPY_LIVE_STATES],
        borrow_pays_cold_sizes: [SizeSet::EMPTY; COPY_LIVE_STATES],
    };
    for m in Method::ALL {
        let k = m as usize;
        if m != Method::RepMovsb {
            out.beats_movsb_hot[k] = beats(&r.hot, k);
            out.beats_movsb_cold[k] = beats(&r.cold, k);
        }
        let beats_cached = |i: usize| {
            let c = cell(r.cold[k][i])?;
            let other = best(&r.cold, i, |o| !o.is_nt() && o != m)?;
            Some(c < other)
        };
        out.beats_cached_cold[k] = from_on(beats_cached);
        out.beats_cached_cold_sizes[k] = SizeSet::of(beats_cached);
    }
    for live in Live::ALL {
        let Some(price) = borrow_price(r, live) else {
            continue;
        };
        let pays_at = |cells: &[[f64; COPY_SIZES]; COPY_METHODS], i: usize| {
            let vector = best(cells, i, Method::is_vector)?;
            let string = best(cells, i, |m| !m.is_vector())?;
            Some(vector + price < string)
        };
        let l = live as usize;
        out.borrow_pays_hot[l] = from_on(|i| pays_at(&r.hot, i));
        out.borrow_pays_cold[l] = from_on(|i| pays_at(&r.cold, i));
        out.borrow_pays_hot_sizes[l] = SizeSet::of(|i| pays_at(&r.hot, i));
        out.borrow_pays_cold_sizes[l] = SizeSet::of(|i| pays_at(&r.cold, i));
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

    /// The policy a report carries (the one the guest's libc followed when
    /// the report was written; the VMM reads it from there).
    pub fn of_report(r: &CopyReport) -> Policy {
        Policy {
            memcpy_rep_min: r.memcpy_rep_min,
            memcpy_nt_min: r.memcpy_nt_min,
            memset_rep_min: r.memset_rep_min,
        }
    }

    /// The method `memcpy` runs for `n` bytes above
    /// [`MEMCPY_OVERLAP_MAX`], decided as `guest/src/kernel/libc.rs`'s
    /// assembly decides it: non-temporal stores from `memcpy_nt_min` on
    /// (tested first), else `rep movsb` from `memcpy_rep_min` on, else the
    /// SSE2 loop.
    pub fn memcpy_method(&self, n: u64) -> Method {
        if n >= self.memcpy_nt_min {
            Method::NtSse2
        } else if n >= self.memcpy_rep_min {
            Method::RepMovsb
        } else {
            Method::Sse2
        }
    }

    /// Where `memcpy` changes method, smallest size first: each step is
    /// the size from which on it runs that method, the first one from
    /// just above [`MEMCPY_OVERLAP_MAX`]. Only thresholds `memcpy` reaches
    /// are steps: under non-temporal stores from 32 MiB, `rep movsb` from
    /// 64 MiB never runs, and the two thresholds alone would suggest it
    /// does.
    pub fn memcpy_steps(&self) -> [Option<(u64, Method)>; 3] {
        let first = MEMCPY_OVERLAP_MAX + 1;
        let mut edges = [
            first,
            self.memcpy_rep_min.max(first),
            self.memcpy_nt_min.max(first),
        ];
        edges.sort_unstable();
        let mut steps = [None; 3];
        let mut k = 0;
        for e in edges.into_iter().filter(|&e| e != u64::MAX) {
            let m = self.memcpy_method(e);
            if k == 0 || steps[k - 1].map(|(_, prev)| prev) != Some(m) {
                steps[k] = Some((e, m));
                k += 1;
            }
        }
        steps
    }
}

/// `memcpy` copies up to this many bytes with overlapping loads and stores
/// (no loop, no `rep` start-up); the [`Policy`] chooses above it.
pub const MEMCPY_OVERLAP_MAX: u64 = 32;
