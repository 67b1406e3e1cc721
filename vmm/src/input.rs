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
//! Text inputs read whole (guest logs, profiles, baselines) go through
//! [`read_whole`] instead, which also takes a pipe (`/dev/stdin` under
//! `qemu ... | vmm features --guest-log /dev/stdin`, or a shell's `<(...)`):
//! a pipe has no size to check first, so it is read to its end under the
//! same bound, and refused the moment it passes it. There `-` names
//! standard input ([`is_stdin`]), as it does to `cat`; a file named `-` is
//! `./-`.
//!
//! Durations given as flags (`--timeout`, `--snapshot-after`) go through
//! [`parse_seconds`], a clap value parser with one bound, [`MAX_SECONDS`],
//! so no flag can reach `Duration::from_secs_f64`'s panic or overflow an
//! `Instant` deadline. Counts and sizes (`--vcpus`, `--mem`) go through
//! [`parse_whole`], which says what is wrong with the text (negative, not
//! whole, too large) where Rust's integer parser says "invalid digit"; the
//! flag's own range is checked where its reason is known.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsFd;
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
    #[error("{what} {path} is {kind}, not {wanted}")]
    NotRegular {
        /// What the file was for.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What it is instead (`a directory`, `a FIFO`, ...).
        kind: &'static str,
        /// What the reader takes (`a regular file`, `a regular file or a
        /// pipe`).
        wanted: &'static str,
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
    /// A pipe carried more than the bound before its end.
    #[error("{what} {path} is a pipe that carried more than {max} bytes, the limit")]
    PipeTooLarge {
        /// What the file was for.
        what: &'static str,
        /// The pipe's path.
        path: PathBuf,
        /// The caller's bound.
        max: u64,
    },
    /// A pipe (or standard input's socket) ended before its first byte:
    /// its writer wrote nothing, an earlier argument naming the same pipe
    /// read it to its end, or (a named FIFO) no writer had it open when it
    /// was read.
    #[error(
        "{what} {path} is a pipe that ended before its first byte: its writer wrote \
         nothing, another argument naming it read it first, or no writer had it open"
    )]
    EmptyPipe {
        /// What the file was for.
        what: &'static str,
        /// The pipe's path.
        path: PathBuf,
    },
    /// `-` where only a file will do: a kernel, an initrd or a snapshot is
    /// read in place (mapped, sought in), so standard input cannot stand
    /// for it.
    #[error(
        "`-` (standard input) cannot stand for a {what}: kernels, initrds and snapshots are \
         read in place (mapped, sought in); name the file (./- for one named -)"
    )]
    StdinNotAFile {
        /// What the file was for.
        what: &'static str,
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
    if is_stdin(path) {
        return Err(InputError::StdinNotAFile { what });
    }
    match open_any(path, what, max_len, "a regular file")? {
        Opened::Regular(f) => Ok(f),
        Opened::Pipe(_) => Err(InputError::NotRegular {
            what,
            path: path.to_path_buf(),
            kind: "a FIFO",
            wanted: "a regular file",
        }),
    }
}

/// The whole content of `path`, a regular file or a pipe, of at most
/// `max_len` bytes; `what` names its role in messages.
///
/// A regular file is checked by its size first, as [`open_regular`] does. A
/// pipe (a named FIFO, or an anonymous one reached as `/dev/stdin`,
/// `/dev/fd/N` or `-`) is read to its end with blocking reads, and refused
/// as soon as it carries one byte past `max_len`; so a writer that never
/// stops costs at most the bound in memory, never more. Devices,
/// directories and sockets are refused by name, as by [`open_regular`].
///
/// `-` is standard input itself ([`is_stdin`]): a pipe, a redirected file
/// or a socket on descriptor 0 is read; a terminal or `/dev/null` is
/// refused as a device rather than waited on.
///
/// # Errors
/// [`InputError::PipeTooLarge`] and [`InputError::EmptyPipe`] for a pipe
/// past the bound or with nothing in it; otherwise those of
/// [`open_regular`] and [`InputFile::read_all`].
pub fn read_whole(path: &Path, what: &'static str, max_len: u64) -> Result<Vec<u8>, InputError> {
    if is_stdin(path) {
        // Messages say what `-` stood for.
        let shown = Path::new("- (standard input)");
        let opened = open_stdin(shown, what, max_len)?;
        return read_opened(opened, shown, what, max_len);
    }
    let opened = open_any(path, what, max_len, "a regular file or a pipe")?;
    read_opened(opened, path, what, max_len)
}

/// Standard input, sorted as [`open_any`] sorts a path, but for sockets.
///
/// Descriptor 0 is duplicated, not reopened through /dev/stdin: that link
/// is missing where no udev made it (an initramfs), and a socket cannot be
/// reopened by path. For the same reason a socket here (a supervisor's
/// socketpair, inetd) is a stream to read to its end, as a pipe is.
fn open_stdin(shown: &Path, what: &'static str, max_len: u64) -> Result<Opened, InputError> {
    let file = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(File::from)
        .map_err(|source| InputError::Open {
            what,
            path: shown.to_path_buf(),
            source,
        })?;
    if file.metadata().is_ok_and(|m| m.file_type().is_socket()) {
        return Ok(Opened::Pipe(file));
    }
    sort(
        file,
        shown,
        what,
        max_len,
        "a regular file, a pipe or a socket",
    )
}

/// The whole content of what [`open_any`] or [`sort`] found.
fn read_opened(
    opened: Opened,
    path: &Path,
    what: &'static str,
    max_len: u64,
) -> Result<Vec<u8>, InputError> {
    match opened {
        Opened::Regular(f) => f.read_all(),
        Opened::Pipe(file) => read_pipe(file, path, what, max_len),
    }
}

/// A kernel, initrd or snapshot path from the command line: `-` is refused
/// as it is said (a usage error, 68), because these files are read in
/// place (mapped, sought in) and standard input cannot stand for one.
/// `open_regular` refuses it too, for callers that did not come through
/// the command line.
///
/// # Errors
///
/// `InputError::StdinNotAFile` for `-`.
pub fn parse_in_place(text: &str) -> Result<PathBuf, InputError> {
    let path = PathBuf::from(text);
    if is_stdin(&path) {
        return Err(InputError::StdinNotAFile { what: "file" });
    }
    Ok(path)
}

/// Whether `path` is `-`, which the readers of whole text files
/// ([`read_whole`]) take as standard input.
pub fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// What a directory entry is, for messages (`a FIFO`, `a directory`):
/// the one wording of every reader's and writer's refusals.
pub(crate) fn kind_of(ft: std::fs::FileType) -> &'static str {
    if ft.is_file() {
        "a regular file"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "a file of an unknown kind"
    }
}

/// What [`open_any`] found at a path.
enum Opened {
    /// A regular file within the bound.
    Regular(InputFile),
    /// A FIFO (opened with `O_NONBLOCK`), or standard input's socket: a
    /// stream read to its end.
    Pipe(File),
}

/// Open `path` without blocking and sort it: a regular file (size checked)
/// or a pipe; anything else is refused by name, saying what was `wanted`.
fn open_any(
    path: &Path,
    what: &'static str,
    max_len: u64,
    wanted: &'static str,
) -> Result<Opened, InputError> {
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
    sort(file, path, what, max_len, wanted)
}

/// Sort an open `file` as [`open_any`] does.
fn sort(
    file: File,
    path: &Path,
    what: &'static str,
    max_len: u64,
    wanted: &'static str,
) -> Result<Opened, InputError> {
    let meta = file.metadata().map_err(|source| InputError::Open {
        what,
        path: path.to_path_buf(),
        source,
    })?;
    let ft = meta.file_type();
    if ft.is_fifo() {
        return Ok(Opened::Pipe(file));
    }
    if !ft.is_file() {
        return Err(InputError::NotRegular {
            what,
            path: path.to_path_buf(),
            kind: kind_of(ft),
            wanted,
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
    Ok(Opened::Regular(InputFile {
        file,
        path: path.to_path_buf(),
        what,
        len,
    }))
}

/// Read a pipe opened by [`open_any`] to its end, under `max_len`.
fn read_pipe(
    file: File,
    path: &Path,
    what: &'static str,
    max_len: u64,
) -> Result<Vec<u8>, InputError> {
    let read_err = |source| InputError::Read {
        what,
        path: path.to_path_buf(),
        source,
    };
    // Blocking reads from here: the writer may be slower than we are (a
    // guest's serial log through `qemu ... |`), and a non-blocking read
    // would take its pause for the end.
    set_blocking(&file).map_err(read_err)?;
    let mut bytes = Vec::new();
    (&file)
        .take(max_len.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > max_len {
        return Err(InputError::PipeTooLarge {
            what,
            path: path.to_path_buf(),
            max: max_len,
        });
    }
    if bytes.is_empty() {
        return Err(InputError::EmptyPipe {
            what,
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// Clear `O_NONBLOCK` on `file`.
fn set_blocking(file: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL on a descriptor `file` owns reads its flags only.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: F_SETFL on a descriptor `file` owns changes only its status
    // flags; nothing else refers to them.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
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

/// Why a count or size flag's text is not a whole number.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WholeError {
    /// A minus sign: `--mem -5`.
    #[error("{0} is negative")]
    Negative(String),
    /// Anything else that is not decimal digits: `1.5`, `4k`, ``.
    #[error("{0:?} is not a whole number")]
    NotWhole(String),
    /// More than the flag's type holds.
    #[error("{text} is too large (at most {max})")]
    TooLarge {
        /// The text given.
        text: String,
        /// The type's largest value.
        max: u64,
    },
}

/// A count or size flag's value: decimal digits (a leading `+` allowed, as
/// Rust's parser does), no larger than `T` holds. Written for clap's
/// `value_parser`, so a bad value is a usage error naming the flag.
///
/// # Errors
///
/// [`WholeError`] naming which of the three faults the text has.
pub fn parse_whole<T>(text: &str) -> Result<T, WholeError>
where
    T: std::str::FromStr<Err = std::num::ParseIntError> + Into<u64>,
{
    let t = text.trim();
    let e = match t.parse::<T>() {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if t.strip_prefix('-').is_some_and(digits) {
        Err(WholeError::Negative(t.to_string()))
    } else if *e.kind() == std::num::IntErrorKind::PosOverflow {
        Err(WholeError::TooLarge {
            text: t.to_string(),
            max: largest::<T>(),
        })
    } else {
        Err(WholeError::NotWhole(text.to_string()))
    }
}

/// The largest value of an unsigned `T` no wider than 64 bits (the
/// `Into<u64>` bound admits only those).
fn largest<T: Into<u64>>() -> u64 {
    u64::MAX >> (64 - 8 * std::mem::size_of::<T>())
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
    fn whole_numbers_name_what_is_wrong_with_the_text() {
        assert_eq!(parse_whole::<u32>("8"), Ok(8));
        assert_eq!(parse_whole::<u64>(" +64 "), Ok(64));
        assert_eq!(parse_whole::<u32>("0"), Ok(0));
        assert_eq!(parse_whole::<u32>("4294967295"), Ok(u32::MAX));
        for neg in ["-1", "-0", "-64"] {
            assert_eq!(
                parse_whole::<u64>(neg),
                Err(WholeError::Negative(neg.into()))
            );
        }
        for bad in ["1.5", "x", "", "-", "-x", "4k", "0x10", "--1"] {
            let e = parse_whole::<u32>(bad).unwrap_err();
            assert_eq!(e, WholeError::NotWhole(bad.into()), "{bad:?}");
            assert_eq!(e.to_string(), format!("{bad:?} is not a whole number"));
        }
        assert_eq!(
            parse_whole::<u32>("4294967296").unwrap_err().to_string(),
            "4294967296 is too large (at most 4294967295)"
        );
        assert_eq!(
            parse_whole::<u64>("18446744073709551616")
                .unwrap_err()
                .to_string(),
            "18446744073709551616 is too large (at most 18446744073709551615)"
        );
        assert_eq!(
            parse_whole::<u64>("-5").unwrap_err().to_string(),
            "-5 is negative"
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
        let fifo = fifo_in(dir.path());
        // Returns at once: no writer is needed to refuse it.
        let e = open_regular(&fifo, "profile", 1 << 20).unwrap_err();
        assert!(e.to_string().contains("is a FIFO"), "{e}");
    }

    /// A named FIFO in `dir`: a pipe as `read_whole` meets it at any path
    /// (`/dev/stdin` under `|` leads to an anonymous one, read the same).
    fn fifo_in(dir: &Path) -> PathBuf {
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        fifo
    }

    #[test]
    fn reads_a_pipe_to_its_end_under_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = fifo_in(dir.path());
        // A writer slower than the reader: pauses between pieces are not
        // taken for the end.
        let w = fifo.clone();
        let writer = std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(w).unwrap();
            for piece in [&b"VMMREC1 "[..], b"one ", b"two\n"] {
                std::io::Write::write_all(&mut f, piece).unwrap();
                std::thread::sleep(Duration::from_millis(30));
            }
        });
        // Wait for the writer's open, so the read sees it (a FIFO read
        // with no writer is its end, as for `cat`).
        let held = wait_for_writer(&fifo);
        let bytes = read_whole(&fifo, "guest log", 1 << 20).unwrap();
        drop(held);
        writer.join().unwrap();
        assert_eq!(bytes, b"VMMREC1 one two\n");

        // One byte past the bound: refused, and not read on.
        let w = fifo.clone();
        let writer = std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(w).unwrap();
            // The reader stops at 17 bytes and closes: EPIPE here.
            let _ = std::io::Write::write_all(&mut f, &[b'x'; 1 << 20]);
        });
        let held = wait_for_writer(&fifo);
        let e = read_whole(&fifo, "profile", 16).unwrap_err();
        // The last reader gone, the writer's next write fails and it ends.
        drop(held);
        writer.join().unwrap();
        assert_eq!(
            e.to_string(),
            format!(
                "profile {} is a pipe that carried more than 16 bytes, the limit",
                fifo.display()
            )
        );

        // No writer: the end at once, named.
        let e = read_whole(&fifo, "baseline", 16).unwrap_err();
        assert!(matches!(e, InputError::EmptyPipe { .. }), "{e}");
        assert!(e.to_string().contains("ended before its first byte"), "{e}");

        // A device is still refused, saying what is taken instead.
        let e = read_whole(Path::new("/dev/zero"), "guest log", 16).unwrap_err();
        assert_eq!(
            e.to_string(),
            "guest log /dev/zero is a character device, not a regular file or a pipe"
        );
        // A regular file reads as `read_all` does.
        let file = dir.path().join("file");
        std::fs::write(&file, b"{}").unwrap();
        assert_eq!(read_whole(&file, "profile", 16).unwrap(), b"{}");
        std::fs::write(&file, [b' '; 17]).unwrap();
        let e = read_whole(&file, "profile", 16).unwrap_err();
        assert!(matches!(e, InputError::TooLarge { len: 17, .. }), "{e}");
    }

    /// Block until a writer has `fifo` open (a reader's blocking open waits
    /// for one), and return that reader: held while `read_whole` reads, it
    /// keeps the writer's writes from failing for want of a reader.
    fn wait_for_writer(fifo: &Path) -> File {
        File::open(fifo).unwrap()
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
