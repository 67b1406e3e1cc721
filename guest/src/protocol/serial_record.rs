//! The [`Report`] as one line of serial-console text, for VMMs that do not
//! read the report port.
//!
//! Cloud Hypervisor and Firecracker ignore [`REPORT_PORT`](crate::protocol::REPORT_PORT);
//! every VMM has a serial console. So the guest also prints its record as
//! one line, and `vmm features --guest-log FILE` reads it back from any
//! VMM's serial log. The line carries the whole binary record, so what is
//! read back is byte for byte what `vmm` copies out of guest memory:
//!
//! ```text
//! VMMREC1 size=11816 crc32=89abcdef chars=1424 data=AAECAw...
//! ```
//!
//! - `VMMREC1`: the line format, version 1 (the record inside has its own
//!   [`REPORT_VERSION`](crate::protocol::REPORT_VERSION), checked by [`Report::from_bytes`]);
//! - `size`: bytes of the record ([`Report::SIZE`]);
//! - `crc32`: CRC-32 (IEEE) of the record's bytes, 8 lowercase hex digits;
//! - `chars`: length of `data`, so a cut line is told from a corrupt one;
//! - `data`: standard base64 (with padding) of the record's bytes with
//!   every run of zero bytes packed: a non-zero byte stands for itself, a
//!   zero byte is followed by the run's length (1..=255).
//!
//! Why packed: the record is 11816 bytes, mostly empty result slots and
//! NUL-padded names, so a line is 390 bytes for a `workload=none` run and
//! about 4 KB for `workload=all bench=all`, instead of 16 KB of base64.
//! Size matters: on the development host (kvm_pvm) every byte of the
//! guest's `rep outsb` is a VM exit of its own (a `workload=none` run
//! without `quiet` makes 1458 exits for 1450 serial bytes), so the line
//! costs one exit per byte, about 15 ms for the short one. The guest
//! prints it only without `quiet`, after all measurements, so no
//! benchmark row pays for it.
//!
//! Robust to a noisy log: the prefix may follow other text on the line
//! (a VMM's own log prefix), a trailing CR (terminals) is ignored, and
//! anything cut or changed fails the length or CRC check with an error
//! naming it. Both sides live here, so encoder and decoder cannot drift.

use core::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::record::{Report, ReportError};

/// What starts a record line: the format name and its version.
pub const RECORD_PREFIX: &str = "VMMREC1";

/// Record bytes packed per base64 chunk: a multiple of 3, so chunks encode
/// to padding-free base64 that concatenates to the whole's.
const CHUNK: usize = 48;

/// Why a record line was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// No line of the log holds [`RECORD_PREFIX`].
    NotFound,
    /// A `key=value` field is missing or malformed (names the key).
    BadField(&'static str),
    /// `size` is not this build's [`Report::SIZE`].
    WrongSize {
        /// The line's `size`.
        got: usize,
        /// [`Report::SIZE`].
        need: usize,
    },
    /// `data` is not as long as `chars` says: the line was cut or garbled.
    Truncated {
        /// Characters of `data`.
        got: usize,
        /// The line's `chars`.
        need: usize,
    },
    /// `data` holds a character that is not base64, or misplaced padding.
    BadBase64,
    /// The packed bytes do not unpack to exactly `size` bytes.
    BadPacking,
    /// The unpacked record does not have the line's CRC.
    CrcMismatch {
        /// CRC-32 of the unpacked bytes.
        got: u32,
        /// The line's `crc32`.
        want: u32,
    },
    /// The record itself failed [`Report::from_bytes`].
    Report(ReportError),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound => write!(f, "no {RECORD_PREFIX} line in the log"),
            Self::BadField(k) => write!(f, "{RECORD_PREFIX} line: field `{k}` missing or malformed"),
            Self::WrongSize { got, need } => write!(
                f,
                "{RECORD_PREFIX} line: record of {got} bytes, this vmm reads {need} (another guest build)"
            ),
            Self::Truncated { got, need } => write!(
                f,
                "{RECORD_PREFIX} line cut: {got} of {need} data characters"
            ),
            Self::BadBase64 => write!(f, "{RECORD_PREFIX} line: data is not base64"),
            Self::BadPacking => write!(
                f,
                "{RECORD_PREFIX} line: data does not unpack to the record's size"
            ),
            Self::CrcMismatch { got, want } => write!(
                f,
                "{RECORD_PREFIX} line: CRC-32 {got:08x}, the line says {want:08x} (corrupted)"
            ),
            Self::Report(e) => write!(f, "{RECORD_PREFIX} line: {e}"),
        }
    }
}

/// Feed the packed form of `bytes` to `sink`, one byte at a time.
fn pack(bytes: &[u8], mut sink: impl FnMut(u8)) {
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != 0 {
            sink(bytes[i]);
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take(255).take_while(|&&b| b == 0).count();
        sink(0);
        sink(run as u8);
        i += run;
    }
}

/// Length in bytes of the packed form of `bytes`.
fn packed_len(bytes: &[u8]) -> usize {
    let mut n = 0;
    pack(bytes, |_| n += 1);
    n
}

/// Write `report` as one record line, newline included.
///
/// Streams: no buffer beyond two small chunks, so it also runs on the
/// guest's fault stack.
pub fn write_record(report: &Report, out: &mut impl fmt::Write) -> fmt::Result {
    let bytes = report.as_bytes();
    let packed = packed_len(bytes);
    write!(
        out,
        "{RECORD_PREFIX} size={} crc32={:08x} chars={} data=",
        bytes.len(),
        crc32fast::hash(bytes),
        packed.div_ceil(3) * 4
    )?;
    let mut chunk = [0u8; CHUNK];
    let mut len = 0;
    let mut result = Ok(());
    let flush = |chunk: &[u8], out: &mut dyn fmt::Write| -> fmt::Result {
        let mut text = [0u8; CHUNK / 3 * 4];
        // The output buffer fits CHUNK input bytes, so this cannot fail.
        let n = STANDARD
            .encode_slice(chunk, &mut text)
            .map_err(|_| fmt::Error)?;
        // Base64 is ASCII.
        out.write_str(core::str::from_utf8(&text[..n]).map_err(|_| fmt::Error)?)
    };
    pack(bytes, |b| {
        chunk[len] = b;
        len += 1;
        if len == CHUNK {
            if result.is_ok() {
                result = flush(&chunk, out);
            }
            len = 0;
        }
    });
    result?;
    flush(&chunk[..len], out)?;
    out.write_str("\n")
}

/// The value of `key=` among the line's space-separated fields.
fn field<'a>(fields: &'a str, key: &'static str) -> Result<&'a str, RecordError> {
    fields
        .split(' ')
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .ok_or(RecordError::BadField(key))
}

fn number(fields: &str, key: &'static str) -> Result<usize, RecordError> {
    let v = field(fields, key)?;
    if v.is_empty() || v.len() > 9 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RecordError::BadField(key));
    }
    v.parse().map_err(|_| RecordError::BadField(key))
}

/// Decode one record line: the text from [`RECORD_PREFIX`] on (trailing
/// whitespace, such as a terminal's CR, is ignored).
pub fn parse_record(line: &str) -> Result<Report, RecordError> {
    let fields = line
        .trim_end()
        .strip_prefix(RECORD_PREFIX)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or(RecordError::NotFound)?;
    let size = number(fields, "size")?;
    if size != Report::SIZE {
        return Err(RecordError::WrongSize {
            got: size,
            need: Report::SIZE,
        });
    }
    let crc = field(fields, "crc32")?;
    if crc.len() != 8 {
        return Err(RecordError::BadField("crc32"));
    }
    let want = u32::from_str_radix(crc, 16).map_err(|_| RecordError::BadField("crc32"))?;
    let chars = number(fields, "chars")?;
    let data = field(fields, "data")?;
    if data.len() != chars {
        return Err(RecordError::Truncated {
            got: data.len(),
            need: chars,
        });
    }
    if chars % 4 != 0 {
        return Err(RecordError::BadBase64);
    }

    let mut out = [0u8; Report::SIZE];
    let mut at = 0;
    let mut zero_pending = false;
    let mut bad = false;
    let mut emit = |b: u8| {
        if zero_pending {
            zero_pending = false;
            let n = b as usize;
            if n == 0 || at + n > out.len() {
                bad = true;
            } else {
                at += n; // `out` is zeroed already
            }
        } else if b == 0 {
            zero_pending = true;
        } else if at < out.len() {
            out[at] = b;
            at += 1;
        } else {
            bad = true;
        }
    };
    for text in data.as_bytes().chunks(CHUNK / 3 * 4) {
        let mut bytes = [0u8; CHUNK];
        let n = STANDARD
            .decode_slice(text, &mut bytes)
            .map_err(|_| RecordError::BadBase64)?;
        bytes[..n].iter().for_each(|&b| emit(b));
    }
    if bad || zero_pending || at != out.len() {
        return Err(RecordError::BadPacking);
    }
    let got = crc32fast::hash(&out);
    if got != want {
        return Err(RecordError::CrcMismatch { got, want });
    }
    Report::from_bytes(&out).map_err(RecordError::Report)
}

/// Every record line in a serial log, decoded, in the order they appear.
///
/// A line counts when it holds [`RECORD_PREFIX`] followed by a space,
/// anywhere on it (a VMM may prefix console lines); bytes that are not
/// UTF-8 elsewhere in the log are no obstacle.
pub fn records_in(log: &[u8]) -> impl Iterator<Item = Result<Report, RecordError>> + '_ {
    log.split(|&b| b == b'\n').filter_map(|line| {
        let start = line
            .windows(RECORD_PREFIX.len() + 1)
            .position(|w| w.starts_with(RECORD_PREFIX.as_bytes()) && w.ends_with(b" "))?;
        let text = &line[start..];
        Some(match core::str::from_utf8(text) {
            Ok(s) => parse_record(s),
            Err(_) => Err(RecordError::BadBase64),
        })
    })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::String;

    use super::*;
    use crate::protocol::record::{fixed_str, ResultRecord, WorkUnit};

    fn sample() -> Report {
        let mut r = Report::new();
        r.cpuid1_ecx = 0x1fbae3ff;
        r.cpuid_xcr0_supported = 0x2e7;
        r.xcr0 = 0x2e7;
        r.xinuse = 0x3;
        r.components[2].size = 256;
        r.components[2].offset = 576;
        r.switch_strategy = fixed_str("xsavec-xinuse");
        r.switch_cycles = [900, 700, 650, 0];
        for i in 0..40 {
            assert!(r.push_result_aux(
                ResultRecord {
                    name: fixed_str("exit"),
                    variant: fixed_str("pio-cpl3"),
                    size: 1,
                    work: 10_000,
                    cycles: 300_000_000 + i,
                    unit: WorkUnit::Events as u32,
                    check: 1,
                    residual: 1.5e-13,
                },
                832 + i
            ));
        }
        r
    }

    fn line_of(r: &Report) -> String {
        let mut s = String::new();
        write_record(r, &mut s).unwrap();
        s
    }

    #[test]
    fn round_trip_is_byte_exact() {
        for r in [Report::new(), sample()] {
            let line = line_of(&r);
            assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
            let back = parse_record(&line).unwrap();
            assert_eq!(back.as_bytes(), r.as_bytes());
        }
        // An empty report packs to a few dozen bytes; a busy one stays small.
        // (Under 256 since version 4 added the `bench=copy` table.)
        assert!(
            line_of(&Report::new()).len() < 256,
            "{}",
            line_of(&Report::new())
        );
        assert!(line_of(&sample()).len() < 8 * 1024);
        // A report with no zero byte at all still round-trips (worst case).
        let mut full = Report::new();
        let b = zerocopy::IntoBytes::as_mut_bytes(&mut full);
        b.iter_mut().for_each(|x| *x = 0x5a);
        b[..16].copy_from_slice(Report::new().as_bytes().get(..16).unwrap());
        full.result_count = 3;
        full.skipped_count = 2;
        let line = line_of(&full);
        assert_eq!(parse_record(&line).unwrap().as_bytes(), full.as_bytes());
    }

    #[test]
    fn found_in_a_noisy_log() {
        let r = sample();
        let mut log = std::vec::Vec::new();
        log.extend_from_slice(b"guest: XCR0 set 0x2e7\r\n\xff\xfe binary noise\n");
        log.extend_from_slice(b"[console] ");
        log.extend_from_slice(line_of(&r).replace('\n', "\r\n").as_bytes());
        log.extend_from_slice(b"guest: exit: success\n");
        let all: std::vec::Vec<_> = records_in(&log).collect();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].unwrap().as_bytes(), r.as_bytes());
        assert_eq!(records_in(b"no record here\n").count(), 0);
    }

    #[test]
    fn damage_is_named() {
        let line = line_of(&sample());
        let cut = &line[..line.len() - 10];
        assert!(matches!(
            parse_record(cut),
            Err(RecordError::Truncated { .. })
        ));
        // Flip one data character (keeping it base64): the CRC catches it.
        let at = line.find("data=").unwrap() + 5 + 100;
        let mut bytes = line.clone().into_bytes();
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(bytes).unwrap();
        assert!(matches!(
            parse_record(&flipped),
            Err(RecordError::CrcMismatch { .. } | RecordError::BadPacking)
        ));
        let at = line.find("data=").unwrap() + 5;
        let bad = std::format!("{}*{}", &line[..at], &line[at + 1..]);
        assert_eq!(parse_record(&bad).err(), Some(RecordError::BadBase64));
        let size = std::format!("size={}", Report::SIZE);
        assert_eq!(
            parse_record(&line.replace(&size, "size=12")).err(),
            Some(RecordError::WrongSize {
                got: 12,
                need: Report::SIZE
            })
        );
        assert_eq!(
            parse_record(&line.replace(" crc32=", " crc=")).err(),
            Some(RecordError::BadField("crc32"))
        );
        assert_eq!(
            parse_record("VMMREC2 size=1").err(),
            Some(RecordError::NotFound)
        );
        let msg = std::format!("{}", RecordError::Truncated { got: 1, need: 8 });
        assert_eq!(msg, "VMMREC1 line cut: 1 of 8 data characters");
    }
}
