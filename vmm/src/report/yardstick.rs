//! The AES yardsticks as a run's summary holds and prints them: the host's
//! `openssl speed -evp` per mode and size beside the guest's variants
//! (measured by [`crate::bench::openssl`]), and the seed thread's static
//! Ice Lake reference.

use std::fmt::Write as _;

use serde::Serialize;

/// The seed thread's AES-256-XTS figures at 4 KiB messages on Ice Lake,
/// MB/s: a static reference, not measured here.
pub const SEED_ICE_LAKE_XTS_4K: [(&str, f64); 5] = [
    ("aesni", 5136.0),
    ("aesni-avx", 5366.0),
    ("vaes-avx2", 9337.0),
    ("vaes-avx10_256", 9876.0),
    ("vaes-avx10_512", 10215.0),
];

/// Runs of `openssl speed` per figure.
pub const RUNS: usize = 3;

/// One guest variant against the yardstick.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct VariantRatio {
    /// Guest variant (`aesni`, `vaes-512`, ...).
    pub variant: String,
    /// Guest MB/s.
    pub mb_per_s: f64,
    /// Guest MB/s / openssl MB/s (null when openssl gave no figure).
    pub vs_openssl: Option<f64>,
}

/// `openssl speed` for one cipher and message size, beside the guest's
/// variants of that mode and size.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Yardstick {
    /// openssl's cipher name, also the guest's row name.
    pub cipher: String,
    /// Message bytes (`-bytes`).
    pub size: u64,
    /// openssl's throughput in MB/s (10^6 bytes per second).
    pub openssl_mb_per_s: Option<f64>,
    /// Why there is no figure (openssl missing, failed, unreadable).
    pub error: Option<String>,
    /// The guest's variants of this mode and size (register-borrow rows
    /// and the portable row excluded).
    pub guest: Vec<VariantRatio>,
}

/// The yardsticks as table lines (after the results table).
pub fn render(ys: &[Yardstick], with_seed: bool) -> String {
    let mut s = String::new();
    if ys.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "yardsticks (host `openssl speed -evp`, median of {RUNS} runs of 1 s; guest MB/s and guest/openssl)"
    );
    for y in ys {
        let o = match (y.openssl_mb_per_s, &y.error) {
            (Some(v), _) => format!("openssl {v:>8.0} MB/s"),
            (None, Some(e)) => format!("openssl: {e}"),
            (None, None) => "openssl: no figure".to_string(),
        };
        let _ = write!(s, "  {:<12} {:>6} B  {o}", y.cipher, y.size);
        for g in &y.guest {
            match g.vs_openssl {
                Some(r) => {
                    let _ = write!(s, "  {} {:.0} ({r:.2}x)", g.variant, g.mb_per_s);
                }
                None => {
                    let _ = write!(s, "  {} {:.0}", g.variant, g.mb_per_s);
                }
            }
        }
        s.push('\n');
    }
    if with_seed {
        let _ = write!(
            s,
            "  seed reference (Ice Lake, aes-256-xts 4096 B, not measured here):"
        );
        for (v, mb) in SEED_ICE_LAKE_XTS_4K {
            let _ = write!(s, " {v} {mb:.0}");
        }
        s.push_str(" MB/s\n");
    }
    s
}
