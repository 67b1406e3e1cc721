//! The AES yardsticks of `vmm run`: the host's `openssl speed -evp` for the
//! mode and message size of every AES row the guest produced, run in the
//! same process right after the guest and its native rows, and the seed
//! thread's Ice Lake XTS figures as a labelled static reference.
//!
//! Each figure is the median of [`RUNS`] runs of `openssl speed -elapsed
//! -evp CIPHER -bytes N -seconds 1` (a second each), taken round the
//! figures as the guest's XTS and GCM rows take their samples round the
//! rows: one run's figure moved by 10% here between runs. Quick runs keep
//! one size per cipher. Ratios
//! are reported, never asserted: the goal (every AES-NI variant >= 1.0x
//! openssl for the same mode and size, VAES ahead of it) is read off the
//! table.

use std::process::Command;

use super::stats::Spread;
#[cfg(test)]
use crate::report::yardstick::render;
pub use crate::report::yardstick::{VariantRatio, Yardstick, RUNS, SEED_ICE_LAKE_XTS_4K};

/// The modes the guest reports that openssl can time, by row name (the
/// row names are openssl's cipher names).
pub const CIPHERS: [&str; 4] = ["aes-128-cbc", "aes-128-ctr", "aes-128-gcm", "aes-256-xts"];

/// Smallest message size timed against openssl: below it `openssl speed`
/// measures its own call overhead more than the cipher.
pub const MIN_SIZE: u64 = 512;

/// Why a yardstick has no figure.
#[derive(Debug, thiserror::Error)]
pub enum OpensslError {
    /// The `openssl` program could not be started.
    #[error("openssl not available: {0}")]
    NotInstalled(#[source] std::io::Error),
    /// It ran and failed (e.g. a cipher this build lacks).
    #[error("openssl speed failed ({status}): {stderr}")]
    Failed {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The first line of its standard error.
        stderr: String,
    },
    /// Its output had no figure for the cipher.
    #[error("openssl speed printed no {cipher} row")]
    Unparsable {
        /// The cipher asked for.
        cipher: String,
    },
}

/// A guest row as the yardsticks need it.
#[derive(Clone, Debug)]
pub struct GuestFigure<'a> {
    /// Row name (the mode).
    pub name: &'a str,
    /// Variant.
    pub variant: &'a str,
    /// Message bytes.
    pub size: u64,
    /// Guest MB/s, when timed.
    pub mb_per_s: Option<f64>,
}

/// Every yardstick for `rows`: one per cipher and size the guest timed
/// (sizes >= [`MIN_SIZE`]; with `quick`, only each cipher's largest size up
/// to 8 KiB), each the median of `runs` figures from `speed` (normally
/// [`RUNS`] and [`openssl_speed`]). The runs go round the figures (every
/// figure once, then every figure again ...), so that a slow spell of the
/// host, which lasts seconds here, cannot take all of one figure's runs. A
/// figure whose run fails is not run again: its yardstick carries the
/// error.
pub fn yardsticks(
    rows: &[GuestFigure<'_>],
    quick: bool,
    runs: usize,
    speed: &mut dyn FnMut(&str, u64) -> Result<f64, OpensslError>,
) -> Vec<Yardstick> {
    let mut figures: Vec<(&str, u64)> = Vec::new();
    for cipher in CIPHERS {
        let mut sizes: Vec<u64> = rows
            .iter()
            .filter(|r| r.name == cipher && r.size >= MIN_SIZE && timed_variant(r.variant))
            .map(|r| r.size)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        if quick {
            sizes = sizes
                .iter()
                .rev()
                .find(|&&s| s <= 8192)
                .copied()
                .into_iter()
                .collect();
        }
        figures.extend(sizes.into_iter().map(|size| (cipher, size)));
    }
    let mut got: Vec<Result<Vec<f64>, OpensslError>> =
        figures.iter().map(|_| Ok(Vec::new())).collect();
    for _ in 0..runs.max(1) {
        for (&(cipher, size), got) in figures.iter().zip(got.iter_mut()) {
            if let Ok(v) = got {
                match speed(cipher, size) {
                    Ok(x) => v.push(x),
                    Err(e) => *got = Err(e),
                }
            }
        }
    }
    figures
        .iter()
        .zip(got)
        .map(|(&(cipher, size), got)| {
            let (openssl_mb_per_s, error) = match got {
                Ok(v) => (Spread::of(&v).map(|s| s.median), None),
                Err(e) => (None, Some(e.to_string())),
            };
            let guest = rows
                .iter()
                .filter(|r| r.name == cipher && r.size == size && timed_variant(r.variant))
                .filter_map(|r| {
                    let g = r.mb_per_s?;
                    Some(VariantRatio {
                        variant: r.variant.to_string(),
                        mb_per_s: g,
                        vs_openssl: openssl_mb_per_s.filter(|&o| o > 0.0).map(|o| g / o),
                    })
                })
                .collect();
            Yardstick {
                cipher: cipher.to_string(),
                size,
                openssl_mb_per_s,
                error,
                guest,
            }
        })
        .collect()
}

/// Whether a variant is a plain implementation (not a register-borrow row,
/// not the portable reference).
fn timed_variant(v: &str) -> bool {
    !v.contains("+xsave") && v != "soft"
}

/// `openssl speed -elapsed -evp CIPHER -bytes SIZE -seconds 1` on the host,
/// in MB/s.
pub fn openssl_speed(cipher: &str, size: u64) -> Result<f64, OpensslError> {
    let out = Command::new("openssl")
        .args(["speed", "-elapsed", "-evp", cipher, "-bytes"])
        .arg(size.to_string())
        .args(["-seconds", "1"])
        .output()
        .map_err(OpensslError::NotInstalled)?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(OpensslError::Failed {
            status: out.status,
            stderr: err.lines().next().unwrap_or_default().to_string(),
        });
    }
    parse_speed(&String::from_utf8_lossy(&out.stdout), cipher).ok_or(OpensslError::Unparsable {
        cipher: cipher.to_string(),
    })
}

/// The last figure of `cipher`'s row: openssl prints thousands of bytes
/// per second with a `k` suffix, one column per `-bytes` size.
pub fn parse_speed(text: &str, cipher: &str) -> Option<f64> {
    let line = text.lines().rev().find(|l| {
        l.trim_start()
            .to_ascii_lowercase()
            .starts_with(&cipher.to_ascii_lowercase())
    })?;
    let last = line.split_whitespace().last()?;
    let kbs: f64 = last.strip_suffix('k')?.parse().ok()?;
    Some(kbs * 1000.0 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_is_the_median_of_its_runs_taken_round_the_figures() {
        let rows = [
            row("aes-256-xts", "aesni", 512, 1000.0),
            row("aes-256-xts", "aesni", 4096, 2000.0),
            row("aes-128-cbc", "aesni-sse", 8192, 1500.0),
        ];
        let mut asked = Vec::new();
        let mut xts = [5000.0, 4000.0, 6000.0, 5400.0, 3000.0, 4500.0].into_iter();
        let mut speed = |c: &str, n: u64| {
            asked.push(n);
            if c == "aes-128-cbc" {
                Err(OpensslError::Unparsable { cipher: c.into() })
            } else {
                Ok(xts.next().unwrap())
            }
        };
        let ys = yardsticks(&rows, false, 3, &mut speed);
        // Round the figures, three times; the failed one is not rerun.
        assert_eq!(asked, [8192, 512, 4096, 512, 4096, 512, 4096]);
        assert_eq!(ys[1].openssl_mb_per_s, Some(5000.0)); // of 5000, 6000, 3000
        assert_eq!(ys[2].openssl_mb_per_s, Some(4500.0)); // of 4000, 5400, 4500
        assert_eq!(ys[0].openssl_mb_per_s, None);
        assert!(ys[0].error.as_deref().unwrap().contains("aes-128-cbc"));
    }

    #[test]
    fn parses_openssl_speed_rows() {
        let text = "version: 3.0.17\nThe 'numbers' are in 1000s of bytes per second processed.\n\
                    type             4096 bytes\n\
                    AES-256-XTS    5136000.50k\n";
        let v = parse_speed(text, "aes-256-xts").unwrap();
        assert!((v - 5136.0005).abs() < 1e-6, "{v}");
        assert_eq!(parse_speed(text, "aes-128-gcm"), None);
        assert_eq!(parse_speed("aes-256-xts 12.5", "aes-256-xts"), None);
        assert_eq!(parse_speed("garbage", "aes-256-xts"), None);
    }

    fn row<'a>(name: &'a str, variant: &'a str, size: u64, mb: f64) -> GuestFigure<'a> {
        GuestFigure {
            name,
            variant,
            size,
            mb_per_s: Some(mb),
        }
    }

    #[test]
    fn one_yardstick_per_cipher_and_size_with_ratios() {
        let rows = [
            row("aes-256-xts", "aesni", 512, 1000.0),
            row("aes-256-xts", "aesni", 4096, 2000.0),
            row("aes-256-xts", "aesni +xsave/zmm", 512, 500.0),
            row("aes-256-xts", "soft", 512, 20.0),
            row("aes-128-cbc", "aesni-sse", 16, 300.0),
            row("aes-128-cbc", "aesni-sse", 8192, 1500.0),
            row("dgemm", "avx2", 512, 1.0),
        ];
        let mut asked = Vec::new();
        let mut speed = |c: &str, n: u64| {
            asked.push((c.to_string(), n));
            if c == "aes-128-cbc" {
                Err(OpensslError::Unparsable { cipher: c.into() })
            } else {
                Ok(4000.0)
            }
        };
        let ys = yardsticks(&rows, false, 1, &mut speed);
        assert_eq!(
            asked,
            [
                ("aes-128-cbc".to_string(), 8192),
                ("aes-256-xts".to_string(), 512),
                ("aes-256-xts".to_string(), 4096)
            ]
        );
        assert_eq!(ys.len(), 3);
        assert_eq!(
            ys[0].error.as_deref(),
            Some("openssl speed printed no aes-128-cbc row")
        );
        assert_eq!(ys[0].guest[0].vs_openssl, None);
        assert_eq!(ys[1].guest.len(), 1);
        assert_eq!(ys[1].guest[0].vs_openssl, Some(0.25));
        assert_eq!(ys[2].guest[0].vs_openssl, Some(0.5));
        let quick = yardsticks(&rows, true, 1, &mut |_, _| Ok(1.0));
        assert_eq!(
            quick.iter().map(|y| y.size).collect::<Vec<_>>(),
            [8192, 4096]
        );
        let text = render(&ys, true);
        assert!(
            text.contains("  aes-256-xts    4096 B  openssl     4000 MB/s  aesni 2000 (0.50x)\n"),
            "{text}"
        );
        assert!(text.contains("vaes-avx10_512 10215"), "{text}");
    }
}
