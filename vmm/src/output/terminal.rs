//! Text that reaches a terminal: whatever a file, a snapshot, a guest or
//! the command line put in it, it moves the cursor, sets a window title or
//! reorders a line only where `vmm` writes the control itself.
//!
//! Paths, profile names, a snapshot's command line and parts of files are
//! quoted in `vmm`'s tables and messages. A file named `$'\e]0;x\a'` in a
//! directory `vmm features compare *` reads, or a snapshot whose recorded
//! command line holds `ESC [ 2 J`, would otherwise drive the user's
//! terminal. So every human-readable line `vmm` writes goes through
//! [`escape_controls`] at its sink ([`crate::output::stdout::print`] and
//! [`line`]), as GNU tools quote such names: the fault is shown, not
//! obeyed. Only the guest's own serial output (`--serial`) is passed
//! through as it is: it is a console, as under QEMU or Firecracker.

use std::borrow::Cow;
use std::fmt;
use std::io::Write;

/// Whether `c` changes a terminal's state or the order text is shown in,
/// rather than showing a character: what a profile's free text may not
/// hold ([`xstate::profile::is_unsafe_text_char`]: C0, DEL and C1 controls
/// — `U+009B` is a CSI on terminals that read C1 in UTF-8 — and the bidi
/// overrides and isolates) but `\t` and `\n`, which tables and messages
/// are made of, and also the bidirectional marks (`U+061C`, `U+200E`,
/// `U+200F`), which reorder the text around them in a line.
pub fn is_unsafe(c: char) -> bool {
    (xstate::profile::is_unsafe_text_char(c) && !matches!(c, '\t' | '\n'))
        || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}')
}

/// `text` with each [`is_unsafe`] character written as `\uXXXX` (four hex
/// digits): readable, and in JSON output the same character, as a JSON
/// escape (such characters occur there only inside strings), so one rule
/// serves tables and JSON alike. Borrowed when nothing needs escaping.
///
/// # Examples
/// ```
/// use vmm::internal::cli::terminal::escape_controls;
/// assert_eq!(escape_controls("kernel /tmp/\u{1b}[2Jx"), "kernel /tmp/\\u001b[2Jx");
/// assert_eq!(escape_controls("two\nlines\tok"), "two\nlines\tok");
/// ```
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Write one line to standard error, escaped by [`escape_controls`]: what
/// `vmm`'s messages and warnings go through instead of `eprintln!`. A
/// write that fails (a closed pipe, a full device) is dropped: a message
/// about a failure must not become a second one, and `eprintln!` would
/// panic, which aborts `vmm` in its C entry point.
pub fn line(text: impl fmt::Display) {
    let text = text.to_string();
    let mut text = escape_controls(&text).into_owned();
    text.push('\n');
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_controls_and_direction_marks_as_escapes() {
        for (raw, shown) in [
            ("\u{1b}]0;owned\u{7}", "\\u001b]0;owned\\u0007"),
            ("over\rwrite", "over\\u000dwrite"),
            ("csi \u{9b}2J", "csi \\u009b2J"),
            ("del \u{7f}", "del \\u007f"),
            ("evil\u{202e}txt.exe", "evil\\u202etxt.exe"),
            ("isolate \u{2066}x\u{2069}", "isolate \\u2066x\\u2069"),
            ("nul \u{0}", "nul \\u0000"),
        ] {
            assert_eq!(escape_controls(raw), shown, "{raw:?}");
        }
        // Tabs, line breaks and printable text of any script are kept.
        let kept = "a\tb\nc é 漢字 — x";
        assert!(matches!(escape_controls(kept), Cow::Borrowed(_)));
    }

    /// Exactly these code points, over all of Unicode.
    #[test]
    fn the_set_is_c0_but_tab_and_newline_del_c1_and_bidi_controls() {
        let expected = |c: char| {
            matches!(c,
                '\u{0}'..='\u{8}'
                | '\u{b}'..='\u{1f}'
                | '\u{7f}'..='\u{9f}'
                | '\u{61c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}')
        };
        for c in (0..=0x10_ffff).filter_map(char::from_u32) {
            assert_eq!(is_unsafe(c), expected(c), "U+{:04X}", u32::from(c));
        }
    }

    #[test]
    fn json_stays_json_and_means_the_same() {
        // serde_json escapes C0 itself; DEL, C1 and bidi marks it leaves raw.
        let v = serde_json::json!({"name": "a\u{9b}b\u{202e}c\u{1b}d\u{7f}"});
        let text = serde_json::to_string_pretty(&v).unwrap();
        let shown = escape_controls(&text);
        assert!(!shown.chars().any(is_unsafe), "{shown}");
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, v);
    }
}
