//! Files the user names on the command line (kernels, snapshots, profiles),
//! opened so that no file can hang, exhaust or mislead the VMM.
//!
//! Everything a user hands us goes through [`open_regular`] first:
//! - it opens with `O_NONBLOCK`, so a FIFO or a device cannot block the open,
//!   and refuses anything but a regular file by name (`/dev/zero`, a FIFO, a
//!   directory), before reading a byte;
//! - it refuses a file larger than the caller's bound from its size alone, so
//!   a 4 GiB sparse file is refused in microseconds, not read in full;
//! - [`InputFile::check_magic`] reads only the first bytes, so a file of the
//!   wrong kind is named as such before the rest is read.
//!
//! Readers then take what they need: the whole (bounded) file with
//! [`InputFile::read_all`], or the open [`std::fs::File`] to stream from.
//!
//! Durations given as flags (`--timeout`, `--snapshot-after`) go through
//! [`parse_seconds`], a clap value parser with one bound, [`MAX_SECONDS`],
//! so no flag can reach `Duration::from_secs_f64`'s panic or overflow an
//! `Instant` deadline.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a file the user named cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be opened or examined.
    #[error("cannot open {what} {path}: {source}")]
    Open {
        /// What the file was for (`kernel`, `snapshot`, `profile`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Not a regular file: a FIFO would block, a device never ends.
    #[error("{what} {path} is {kind}, not a regular file")]
    NotRegular {
        /// What the file was for.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What it is instead (`a directory`, `a FIFO`, ...).
        kind: &'static str,
    },
    /// Larger than any valid file of its kind.
    #[error("{what} {path} is {len} bytes; the limit is {max} bytes")]
    TooLarge {
        /// What the file was for.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Its size.
        len: u64,
        /// The caller's bound.
        max: u64,
    },
    /// The file held more than its size said when it was opened: it is
    /// being written, or it is a pseudo-file (`/proc`, `/sys`) whose size
    /// says nothing of its content. Either way its bytes cannot be trusted
    /// as one version of the file.
    #[error(
        "{what} {path} held more than the {len} bytes its size said when it was opened: \
         it changed while it was read, or it is a pseudo-file (such as /proc's) with no \
         size; copy it to a regular file first"
    )]
    Grew {
        /// What the file was for.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Its size when it was opened.
        len: u64,
    },
    /// The first bytes are not those of this kind of file.
    #[error("{what} {path} does not start with {expected} (found {found:02x?})")]
    BadMagic {
        /// What the file was for.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The expected start, for people (`the ELF magic`, ...).
        expected: &'static str,
        /// What it starts with instead (at most as many bytes as expected).
        found: Vec<u8>,
    },
    /// Reading failed part way.
    #[error("cannot read {what} {path}: {source}")]
    Read {
        /// What the file was for.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A regular file, open for reading, whose size was checked.
#[derive(Debug)]
pub struct InputFile {
    file: File,
    path: PathBuf,
    what: &'static str,
    len: u64,
}

/// Open `path` for reading if it is a regular file of at most `max_len`
/// bytes; `what` names its role in messages (`"kernel"`, `"snapshot"`).
pub fn open_regular(
    path: &Path,
    what: &'static str,
    max_len: u64,
) -> Result<InputFile, InputError> {
    let open_err = |source| InputError::Open {
        what,
        path: path.to_path_buf(),
        source,
    };
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
    // writer. It has no effect on reads from a regular file.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(open_err)?;
    let meta = file.metadata().map_err(open_err)?;
    let ft = meta.file_type();
    if !ft.is_file() {
        let kind = if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        return Err(InputError::NotRegular {
            what,
            path: path.to_path_buf(),
            kind,
        });
    }
    let len = meta.len();
    if len > max_len {
        return Err(InputError::TooLarge {
            what,
            path: path.to_path_buf(),
            len,
            max: max_len,
        });
    }
    Ok(InputFile {
        file,
        path: path.to_path_buf(),
        what,
        len,
    })
}

impl InputFile {
    /// The file's size when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file was empty when it was opened.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Check that the file starts with `magic` (described for people as
    /// `expected`), reading only those bytes; the position is left at 0.
    pub fn check_magic(&mut self, magic: &[u8], expected: &'static str) -> Result<(), InputError> {
        let mut found = Vec::with_capacity(magic.len());
        (&mut self.file)
            .take(magic.len() as u64)
            .read_to_end(&mut found)
            .map_err(|source| self.read_err(source))?;
        self.file
            .seek(SeekFrom::Start(0))
            .map_err(|source| self.read_err(source))?;
        if found != magic {
            return Err(InputError::BadMagic {
                what: self.what,
                path: self.path.clone(),
                expected,
                found,
            });
        }
        Ok(())
    }

    /// Up to `n` bytes from the start (fewer for a shorter file); the
    /// position is left at 0.
    pub fn read_head(&mut self, n: usize) -> Result<Vec<u8>, InputError> {
        let mut found = Vec::with_capacity(n);
        (&mut self.file)
            .take(n as u64)
            .read_to_end(&mut found)
            .map_err(|source| self.read_err(source))?;
        self.file
            .seek(SeekFrom::Start(0))
            .map_err(|source| self.read_err(source))?;
        Ok(found)
    }

    /// The whole file (at most the bound it was opened with: a file that
    /// grew since is refused: [`InputError::Grew`]).
    pub fn read_all(mut self) -> Result<Vec<u8>, InputError> {
        let mut bytes = Vec::with_capacity(self.len as usize);
        // One byte past the size seen at open tells a file that grew.
        (&mut self.file)
            .take(self.len + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| self.read_err(source))?;
        if bytes.len() as u64 > self.len {
            return Err(InputError::Grew {
                what: self.what,
                path: self.path.clone(),
                len: self.len,
            });
        }
        Ok(bytes)
    }

    /// The open file itself, e.g. to map from.
    pub fn into_file(self) -> File {
        self.file
    }

    /// The open file, to stream from (its position is where the last read
    /// left it).
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// A read error naming this file.
    pub fn read_err(&self, source: std::io::Error) -> InputError {
        InputError::Read {
            what: self.what,
            path: self.path.clone(),
            source,
        }
    }
}

/// The longest duration any flag takes, in seconds: 7 days. Longer than
/// any run this VMM is for, short enough that a deadline `Instant::now() +
/// MAX_SECONDS` cannot overflow.
pub const MAX_SECONDS: u64 = 7 * 24 * 60 * 60;

/// Why a duration flag was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecondsError {
    /// Not a decimal number.
    #[error("{0:?} is not a number of seconds")]
    NotANumber(String),
    /// Negative, infinite, NaN or beyond the bound.
    #[error("{0} is out of range: seconds must be finite, >= 0 and <= {MAX_SECONDS} (7 days)")]
    OutOfRange(String),
}

/// A duration flag's value: decimal seconds (`600`, `0.5`, `1e3`), finite,
/// `>= 0` and `<= MAX_SECONDS`. Written for clap's `value_parser`, so a bad
/// value is a usage error naming the flag.
pub fn parse_seconds(text: &str) -> Result<Duration, SecondsError> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| SecondsError::NotANumber(text.to_string()))?;
    // The negated test also refuses NaN.
    if !(0.0..=MAX_SECONDS as f64).contains(&v) {
        return Err(SecondsError::OutOfRange(text.to_string()));
    }
    Duration::try_from_secs_f64(v).map_err(|_| SecondsError::OutOfRange(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_finite_non_negative_and_bounded() {
        assert_eq!(parse_seconds("600"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_seconds("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_seconds("0"), Ok(Duration::ZERO));
        assert_eq!(
            parse_seconds("604800"),
            Ok(Duration::from_secs(MAX_SECONDS))
        );
        for bad in [
            "1e300", "1e20", "1e19", "inf", "-inf", "infinity", "NaN", "-1", "604800.5",
        ] {
            let e = parse_seconds(bad).unwrap_err();
            assert_eq!(e, SecondsError::OutOfRange(bad.into()));
            assert!(e.to_string().contains("<= 604800 (7 days)"), "{e}");
        }
        assert_eq!(
            parse_seconds("ten").unwrap_err().to_string(),
            "\"ten\" is not a number of seconds"
        );
    }

    #[test]
    fn refuses_devices_directories_and_fifos_by_name() {
        let e = open_regular(Path::new("/dev/zero"), "kernel", 1 << 20).unwrap_err();
        assert!(
            e.to_string()
                .contains("kernel /dev/zero is a character device, not a regular file"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let e = open_regular(dir.path(), "snapshot", 1 << 20).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Returns at once: no writer is needed to refuse it.
        let e = open_regular(&fifo, "profile", 1 << 20).unwrap_err();
        assert!(e.to_string().contains("is a FIFO"), "{e}");
    }

    #[test]
    fn refuses_large_files_from_their_size_and_checks_magic_first() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("sparse");
        let f = File::create(&big).unwrap();
        f.set_len(4 << 30).unwrap();
        let e = open_regular(&big, "snapshot", 1 << 30).unwrap_err();
        assert!(
            matches!(e, InputError::TooLarge { len, .. } if len == 4 << 30),
            "{e}"
        );

        let small = dir.path().join("small");
        std::fs::write(&small, b"\x7fELF rest").unwrap();
        let mut f = open_regular(&small, "kernel", 1 << 20).unwrap();
        f.check_magic(b"\x7fELF", "the ELF magic").unwrap();
        assert_eq!(f.read_all().unwrap(), b"\x7fELF rest");
        let mut f = open_regular(&small, "snapshot", 1 << 20).unwrap();
        let e = f
            .check_magic(b"VMMSNAP\0", "the snapshot magic")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("does not start with the snapshot magic"),
            "{e}"
        );
    }
}
