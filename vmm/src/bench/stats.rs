//! What a row of repeated measurements says: its median and spread, whether
//! two rows differ by more than their noise, and the words for it.
//!
//! A row measured over several rounds is summarised as min / median / p90
//! (the median is the headline, as in hyperfine and criterion; p90 rather
//! than the maximum so that one preempted round does not make every row
//! look noisy). Two rows differ *significantly* only when their min..p90
//! ranges do not overlap: a deliberately simple, visible rule that users
//! can check against the numbers printed next to it.

use serde::{Deserialize, Serialize};

/// Min / median / p90 of a row's rounds.
#[derive(schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// The fastest round.
    pub min: f64,
    /// The median round: the row's figure.
    pub median: f64,
    /// The 90th percentile (linear interpolation between rounds).
    pub p90: f64,
}

impl Spread {
    /// The spread of `samples`; `None` when there are none (or one is not
    /// a number).
    pub fn of(samples: &[f64]) -> Option<Spread> {
        if samples.is_empty() || samples.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        Some(Spread {
            min: s[0],
            median: quantile(&s, 0.5),
            p90: quantile(&s, 0.9),
        })
    }

    /// `(p90 - min) / median`: how far apart the rounds were, relative to
    /// the figure (0 for a single round).
    pub fn relative(&self) -> f64 {
        if self.median > 0.0 {
            (self.p90 - self.min) / self.median
        } else {
            0.0
        }
    }

    /// Whether the two min..p90 ranges overlap: the difference between the
    /// medians is then within the noise.
    pub fn overlaps(&self, other: &Spread) -> bool {
        self.min <= other.p90 && other.min <= self.p90
    }

    /// The spread of the negated samples: a figure where more is better
    /// (throughput) turned into a cost, for `Change::of`.
    pub fn negated(&self) -> Spread {
        Spread {
            min: -self.p90,
            median: -self.median,
            p90: -self.min,
        }
    }

    /// Each value divided by `by`.
    pub fn scaled(&self, by: f64) -> Spread {
        Spread {
            min: self.min / by,
            median: self.median / by,
            p90: self.p90 / by,
        }
    }
}

/// The `q` quantile of sorted, non-empty `s` (linear interpolation, as
/// numpy's default).
fn quantile(s: &[f64], q: f64) -> f64 {
    let pos = q * (s.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

/// A cost (lower is better) against a reference cost: what the table says.
#[derive(schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Costlier than the reference, outside both spreads.
    Slower,
    /// Cheaper than the reference, outside both spreads.
    Faster,
    /// The ranges overlap: the difference is noise.
    WithinNoise,
    /// A single round: there is no spread to judge the difference by.
    NoSpread,
}

impl Verdict {
    /// `cost` against `reference`, both measured over `rounds` rounds.
    pub fn of(cost: &Spread, reference: &Spread, rounds: u32) -> Verdict {
        if rounds < 2 {
            Verdict::NoSpread
        } else if cost.overlaps(reference) {
            Verdict::WithinNoise
        } else if cost.median > reference.median {
            Verdict::Slower
        } else {
            Verdict::Faster
        }
    }

    /// Whether the difference is inside the noise (or cannot be judged).
    pub fn is_noise(self) -> bool {
        matches!(self, Verdict::WithinNoise | Verdict::NoSpread)
    }
}

/// A row of this run against the same row of a baseline, criterion-style.
// `NoChange` reads as the report prints it ("no change").
#[allow(clippy::enum_variant_names)]
#[derive(schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Change {
    /// Cheaper than the baseline, outside both runs' spreads.
    #[serde(rename = "improved")]
    Improved,
    /// Costlier than the baseline, outside both runs' spreads.
    #[serde(rename = "regressed")]
    Regressed,
    /// The spreads overlap (or a run had a single round).
    #[serde(rename = "no change")]
    NoChange,
}

impl Change {
    /// This run's `now` cost against the baseline's `then` (lower is
    /// better); significant only outside both spreads and with at least two
    /// rounds on each side.
    pub fn of(now: &Spread, then: &Spread, rounds_now: u32, rounds_then: u32) -> Change {
        if rounds_now < 2 || rounds_then < 2 || now.overlaps(then) {
            Change::NoChange
        } else if now.median < then.median {
            Change::Improved
        } else {
            Change::Regressed
        }
    }

    /// The words printed for it.
    pub fn words(self) -> &'static str {
        match self {
            Change::Improved => "improved",
            Change::Regressed => "regressed",
            Change::NoChange => "no change (within noise)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_rounds() {
        let s = Spread::of(&[30.0, 10.0, 20.0]).unwrap();
        assert_eq!(s.min, 10.0);
        assert_eq!(s.median, 20.0);
        // Position 0.9 * 2 = 1.8: 20 + 0.8 * (30 - 20).
        assert!((s.p90 - 28.0).abs() < 1e-12);
        assert!((s.relative() - 0.9).abs() < 1e-12);
        let one = Spread::of(&[5.0]).unwrap();
        assert_eq!((one.min, one.median, one.p90), (5.0, 5.0, 5.0));
        assert_eq!(one.relative(), 0.0);
        let even = Spread::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(even.median, 2.5);
        assert!(Spread::of(&[]).is_none());
        assert!(Spread::of(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn verdicts_need_disjoint_ranges() {
        let raw = Spread {
            min: 100.0,
            median: 110.0,
            p90: 120.0,
        };
        let near = Spread {
            min: 115.0,
            median: 130.0,
            p90: 140.0,
        };
        let far = Spread {
            min: 150.0,
            median: 160.0,
            p90: 170.0,
        };
        let below = Spread {
            min: 50.0,
            median: 60.0,
            p90: 70.0,
        };
        assert_eq!(Verdict::of(&near, &raw, 3), Verdict::WithinNoise);
        assert_eq!(Verdict::of(&far, &raw, 3), Verdict::Slower);
        assert_eq!(Verdict::of(&below, &raw, 3), Verdict::Faster);
        assert_eq!(Verdict::of(&far, &raw, 1), Verdict::NoSpread);
        assert!(Verdict::NoSpread.is_noise() && !Verdict::Slower.is_noise());
        assert_eq!(Change::of(&far, &raw, 3, 3), Change::Regressed);
        assert_eq!(Change::of(&raw, &far, 3, 3), Change::Improved);
        assert_eq!(Change::of(&near, &raw, 3, 3), Change::NoChange);
        assert_eq!(Change::of(&far, &raw, 3, 1), Change::NoChange);
        assert_eq!(Change::NoChange.words(), "no change (within noise)");
        assert_eq!(
            serde_json::to_string(&Verdict::WithinNoise).unwrap(),
            "\"within-noise\""
        );
    }
}
