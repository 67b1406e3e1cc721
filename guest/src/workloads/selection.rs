//! Which workloads a run executes: the `workload=LIST` kernel command-line
//! word and the VMM's `--workload` option.

/// What [`super::run`] executes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selection {
    /// AES-128 CBC and CTR, every variant the CPU allows.
    pub aes: bool,
    /// XTS-AES-256 per variant, plain and with an XSAVE + XRSTOR borrow per
    /// message (opt-in: not part of `all` or the default, which would
    /// overflow the report's result rows).
    pub xts: bool,
    /// AES-128-GCM per variant, plain and with an XSAVE + XRSTOR borrow per
    /// message (opt-in like `xts`).
    pub gcm: bool,
    /// Blocked DGEMM per ISA variant.
    pub gemm: bool,
    /// Linpack (LU with partial pivoting + solve) per ISA variant.
    pub linpack: bool,
    /// The AMX tile product (TDPBSSD), only when named (`amx`): on a CPU or
    /// XCR0 without AMX its row says why it is not available.
    pub amx: bool,
    /// Small sizes and short measurements: the whole set takes a few seconds.
    pub quick: bool,
    /// Fault injection: corrupt one AES round key after key expansion, so
    /// every AES variant must fail its known-answer test (and the run must
    /// end in check failure) instead of being timed.
    pub corrupt_aes_key: bool,
}

impl Selection {
    /// The words users may give, as help texts and errors list them (the
    /// test hook `corrupt-aes-key` is accepted by [`Selection::parse`] but
    /// deliberately not listed).
    pub const WORDS: [&'static str; 9] = [
        "none", "quick", "aes", "xts", "gcm", "gemm", "linpack", "amx", "all",
    ];

    /// Nothing at all (`none`).
    pub const NONE: Selection = Selection {
        aes: false,
        xts: false,
        gcm: false,
        gemm: false,
        linpack: false,
        amx: false,
        quick: false,
        corrupt_aes_key: false,
    };

    /// The default: every workload at quick sizes (`quick`).
    pub const QUICK: Selection = Selection {
        aes: true,
        xts: false,
        gcm: false,
        gemm: true,
        linpack: true,
        amx: false,
        quick: true,
        corrupt_aes_key: false,
    };

    /// Every workload at full sizes (`all`): the default's set, not quick.
    pub const ALL: Selection = Selection {
        quick: false,
        ..Self::QUICK
    };

    /// Parse a comma-separated list.
    ///
    /// - `` (empty) or `quick`: every workload, quick sizes (the default);
    /// - `none`: nothing (cannot be combined with other words);
    /// - `aes`, `gemm`, `linpack`: those workloads at full sizes, or at quick
    ///   sizes when `quick` is in the list too (`aes,quick`);
    /// - `xts`, `gcm`: XTS-AES-256 and AES-128-GCM with the per-message
    ///   register-borrow rows; like `aes`, full or quick sizes; never implied
    ///   by `all` or the default (the report holds 64 result rows);
    /// - `amx`: the AMX tile product (not part of `quick` or `all`: it is
    ///   one fixed-size product, and most CPUs have no AMX);
    /// - `all`: aes, gemm and linpack at full sizes;
    /// - `corrupt-aes-key`: a test hook, not for users, so it appears in no
    ///   help text or error list ([`Selection::WORDS`]): fault injection (see
    ///   [`Selection::corrupt_aes_key`]); alone it applies to the default
    ///   quick set.
    ///
    /// Words are case-sensitive; surrounding blanks are ignored; empty items
    /// (`aes,,gemm`) are an error.
    pub fn parse(list: &str) -> Result<Self, &'static str> {
        let list = list.trim();
        if list.is_empty() {
            return Ok(Self::QUICK);
        }
        let mut sel = Self::NONE;
        let mut none = false;
        let mut named = false;
        let mut words = 0;
        for word in list.split(',') {
            words += 1;
            match word.trim() {
                "none" => none = true,
                "quick" => sel.quick = true,
                "aes" => (sel.aes, named) = (true, true),
                "xts" => (sel.xts, named) = (true, true),
                "gcm" => (sel.gcm, named) = (true, true),
                "gemm" => (sel.gemm, named) = (true, true),
                "linpack" => (sel.linpack, named) = (true, true),
                "amx" => (sel.amx, named) = (true, true),
                "all" => {
                    (sel.aes, sel.gemm, sel.linpack) = (true, true, true);
                    named = true;
                }
                "corrupt-aes-key" => sel.corrupt_aes_key = true,
                "" => return Err("empty item in workload list"),
                _ => {
                    return Err(
                        "unknown workload (valid, comma-separated: none, quick, aes, xts, gcm, gemm, linpack, amx, all)",
                    )
                }
            }
        }
        if none {
            return if words == 1 {
                Ok(Self::NONE)
            } else {
                Err("workload `none` cannot be combined with other words")
            };
        }
        if !named {
            // Only modifiers (`quick`, `corrupt-aes-key`): the default set.
            (sel.aes, sel.gemm, sel.linpack, sel.quick) = (true, true, true, true);
        }
        Ok(sel)
    }

    /// Whether anything at all runs.
    pub fn is_empty(&self) -> bool {
        !(self.aes || self.xts || self.gcm || self.gemm || self.linpack || self.amx)
    }
}

impl Default for Selection {
    fn default() -> Self {
        Self::QUICK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_cases() {
        assert_eq!(Selection::parse(""), Ok(Selection::QUICK));
        assert_eq!(Selection::parse("quick"), Ok(Selection::QUICK));
        assert_eq!(Selection::parse("none"), Ok(Selection::NONE));
        assert!(Selection::parse("none").unwrap().is_empty());
        assert_eq!(Selection::parse("all"), Ok(Selection::ALL));
        assert_eq!(
            Selection::parse("aes"),
            Ok(Selection {
                aes: true,
                ..Selection::NONE
            })
        );
        assert_eq!(
            Selection::parse(" gemm , linpack "),
            Ok(Selection {
                gemm: true,
                linpack: true,
                ..Selection::NONE
            })
        );
        assert_eq!(
            Selection::parse("aes,quick"),
            Ok(Selection {
                aes: true,
                quick: true,
                ..Selection::NONE
            })
        );
        assert_eq!(
            Selection::parse("corrupt-aes-key"),
            Ok(Selection {
                corrupt_aes_key: true,
                ..Selection::QUICK
            })
        );
        assert_eq!(
            Selection::parse("aes,corrupt-aes-key"),
            Ok(Selection {
                aes: true,
                corrupt_aes_key: true,
                ..Selection::NONE
            })
        );
        assert_eq!(Selection::parse("all,quick"), Ok(Selection::QUICK));
        assert_eq!(
            Selection::parse("amx"),
            Ok(Selection {
                amx: true,
                ..Selection::NONE
            })
        );
        assert!(!Selection::parse("amx").unwrap().is_empty());
        assert_eq!(
            (
                Selection::parse("all").unwrap().amx,
                Selection::parse("").unwrap().amx
            ),
            (false, false)
        );
        assert_eq!(
            Selection::parse("xts,gcm,quick"),
            Ok(Selection {
                xts: true,
                gcm: true,
                quick: true,
                ..Selection::NONE
            })
        );
        assert!(!Selection::parse("xts").unwrap().is_empty());
        assert_eq!((Selection::ALL.xts, Selection::ALL.gcm), (false, false));
        assert!(Selection::parse("none,aes").is_err());
        assert!(Selection::parse("aes,,gemm").is_err());
        assert!(Selection::parse("AES").is_err());
        let e = Selection::parse("linpak").unwrap_err();
        assert!(e.contains("unknown workload"), "{e}");
        // Every public word is listed; the test hook is not.
        for w in Selection::WORDS {
            assert!(e.contains(w), "{w}: {e}");
            assert!(Selection::parse(w).is_ok(), "{w}");
        }
        assert!(!e.contains("corrupt"), "{e}");
        assert_eq!(Selection::default(), Selection::QUICK);
    }
}
