//! Writing a snapshot file safely. The file holds guest RAM, so it is
//! treated as private data written into a directory other users may share:
//!
//! - **Private from creation.** The temporary file is created with
//!   `O_CREAT | O_EXCL | O_NOFOLLOW` and mode 0600 (the umask can only
//!   narrow it): a symlink or file planted at the temporary name makes the
//!   creation fail instead of sending guest RAM through it, and no other user
//!   can open the file while it fills.
//! - **Only regular files are replaced.** The destination is looked at with
//!   `lstat` (a symlink is refused, never followed); a device node, FIFO,
//!   socket, directory or symlink there is refused and left as it is. An
//!   existing regular file is refused unless the caller passes `force`
//!   (`vmm run --force`).
//! - **Permissions never widen.** A new file is 0600; a replaced file gets
//!   0600 narrowed to its old permission bits (an old 0400 stays 0400), set
//!   on the temporary file before any data is written.
//! - **Atomic, and race-checked as far as Linux allows.** The data is
//!   fsynced, then moved into place: without a file to replace with
//!   `renameat2(RENAME_NOREPLACE)` (a file appearing meanwhile is refused,
//!   not replaced); replacing with `renameat2(RENAME_EXCHANGE)`, after which
//!   the entry swapped out is checked to be the very regular file checked
//!   before (same device and inode) and swapped back otherwise, so a device
//!   node or symlink put there during the write is restored, not destroyed.
//!   The directory is fsynced after the rename. On a file system without
//!   `renameat2` flags (`EINVAL`), `link` + `unlink` stands in for
//!   `RENAME_NOREPLACE` and a plain `rename` for the exchange: there a
//!   non-regular file swapped in between the check and the rename (by
//!   someone who can write the directory) would be replaced.
//! - **Enough room first.** The directory must exist and be writable
//!   (`access(W_OK | X_OK)`, which also reports a read-only file system),
//!   and `statvfs` must show room for the exact size plus
//!   [`SPACE_MARGIN`] before the temporary file is created.
//! - **No temporary left behind.** Temporary files are named
//!   `.<name>.vmm-snapshot-tmp.<pid>.<16 hex digits>`. A failed write
//!   removes its own; SIGINT, SIGTERM and SIGHUP remove the one being
//!   written and then end the process by the same signal (status 128 + N in
//!   a shell: 130, 143, 129); a kill that cannot be caught (SIGKILL, power
//!   loss) leaves it, and the next write into the same directory removes
//!   every temporary of this naming that belongs to the current user and
//!   whose process no longer exists.

use std::ffi::{CString, OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Once;

/// The marker in a temporary file's name: `.<name>` + this + `<pid>.<hex>`.
pub const TEMP_MARKER: &str = ".vmm-snapshot-tmp.";

/// Free space asked for beyond the file's size, for the file system's own
/// metadata (extents, the directory entry).
pub const SPACE_MARGIN: u64 = 1 << 20;

/// The permission bits of a new snapshot file.
pub const NEW_FILE_MODE: u32 = 0o600;

/// Why a snapshot file was not written. Every message names the file or
/// directory; what is at the destination is never modified on failure.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The path ends in no file name (`/`, `..`).
    #[error("{} names no file", path.display())]
    NoFileName {
        /// The path given.
        path: PathBuf,
    },
    /// Something other than a regular file is at the destination.
    #[error("{} is {kind}: only a regular file may be replaced; it is left as it is", path.display())]
    NotRegular {
        /// The destination.
        path: PathBuf,
        /// What is there: "a symbolic link", "a character device", ...
        kind: &'static str,
    },
    /// A regular file is at the destination and `--force` was not given.
    #[error("{} already exists; pass --force to replace it", path.display())]
    Exists {
        /// The destination.
        path: PathBuf,
    },
    /// The destination's directory is missing, not a directory, or not
    /// writable (permissions, read-only file system).
    #[error("directory {}: {source}", dir.display())]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// What the file system said.
        #[source]
        source: io::Error,
    },
    /// The directory's file system has no room for the file.
    #[error("directory {}: not enough free space: the snapshot needs {needed} bytes (with a {SPACE_MARGIN}-byte margin), {available} are available", dir.display())]
    NoSpace {
        /// The directory.
        dir: PathBuf,
        /// The file's size plus [`SPACE_MARGIN`].
        needed: u64,
        /// What `statvfs` reports available to this user.
        available: u64,
    },
    /// The destination changed between the check and the rename; the entry
    /// found there was put back.
    #[error("{} changed while the snapshot was written (it is now {kind}); it is left as it is", path.display())]
    Changed {
        /// The destination.
        path: PathBuf,
        /// What was found there.
        kind: &'static str,
    },
    /// A file system operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// The operation: "creating", "writing", "renaming to", ...
        what: &'static str,
        /// The file it was applied to.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: io::Error,
    },
}

/// A regular file found at the destination, to be replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Existing {
    /// Its device.
    pub dev: u64,
    /// Its inode.
    pub ino: u64,
    /// Its permission bits (`st_mode & 0o7777`).
    pub mode: u32,
}

/// A checked destination: where the file goes and what it replaces.
#[derive(Clone, Debug)]
pub struct Destination {
    /// The final path.
    pub path: PathBuf,
    /// Its directory (`.` for a bare name).
    pub dir: PathBuf,
    /// Its file name.
    pub name: OsString,
    /// The regular file it replaces (only with `force`).
    pub existing: Option<Existing>,
}

impl Destination {
    /// The permission bits the file gets: 0600, narrowed to a replaced
    /// file's bits.
    pub fn mode(&self) -> u32 {
        match self.existing {
            Some(e) => NEW_FILE_MODE & e.mode,
            None => NEW_FILE_MODE,
        }
    }
}

/// What a successful write did besides writing the file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Stale temporary files of earlier, killed writes that were removed.
    pub stale_removed: Vec<PathBuf>,
}

/// What a directory entry is, for messages.
fn kind_of(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
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
        "not a regular file"
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Check where a snapshot may go, without writing anything: the directory
/// exists and is writable, and the destination is absent or (with `force`)
/// a regular file. Done before a run starts and again before each write.
pub fn check(path: &Path, force: bool) -> Result<Destination, WriteError> {
    let name = path
        .file_name()
        .filter(|_| !path.as_os_str().as_bytes().ends_with(b"/"))
        .ok_or_else(|| WriteError::NoFileName {
            path: path.to_path_buf(),
        })?
        .to_os_string();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir_err = |source| WriteError::Directory {
        dir: dir.clone(),
        source,
    };
    let meta = std::fs::metadata(&dir).map_err(dir_err)?;
    if !meta.is_dir() {
        return Err(dir_err(io::Error::from_raw_os_error(libc::ENOTDIR)));
    }
    let c_dir = c_path(&dir).map_err(dir_err)?;
    // SAFETY: `c_dir` is a NUL-terminated path that outlives the call.
    if unsafe { libc::access(c_dir.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(dir_err(io::Error::last_os_error()));
    }
    let existing = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(WriteError::Io {
                what: "looking at",
                path: path.to_path_buf(),
                source,
            })
        }
        Ok(m) if !m.file_type().is_file() => {
            return Err(WriteError::NotRegular {
                path: path.to_path_buf(),
                kind: kind_of(m.file_type()),
            })
        }
        Ok(_) if !force => {
            return Err(WriteError::Exists {
                path: path.to_path_buf(),
            })
        }
        Ok(m) => Some(Existing {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode() & 0o7777,
        }),
    };
    Ok(Destination {
        path: path.to_path_buf(),
        dir,
        name,
        existing,
    })
}

/// Bytes `statvfs` says this user may still write in `dir`.
pub fn available_space(dir: &Path) -> io::Result<u64> {
    let c = c_path(dir)?;
    // SAFETY: an all-zero statvfs is a valid value for the kernel to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` is a valid out-pointer; both
    // outlive the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Refuse a write of `size` bytes into `dir` when `available` bytes cannot
/// hold it with [`SPACE_MARGIN`] to spare.
pub fn check_space(dir: &Path, size: u64, available: u64) -> Result<(), WriteError> {
    let needed = size.saturating_add(SPACE_MARGIN);
    if available < needed {
        return Err(WriteError::NoSpace {
            dir: dir.to_path_buf(),
            needed,
            available,
        });
    }
    Ok(())
}

/// Write `bytes` to `path` with every property of the module description.
pub fn write_atomic(path: &Path, force: bool, bytes: &[u8]) -> Result<Written, WriteError> {
    write_with(path, force, bytes.len() as u64, |f| {
        io::Write::write_all(f, bytes)
    })
}

/// Write a file of `size` bytes that `fill` writes into the (private,
/// still unnamed to readers) temporary file, then move it into place.
/// `fill` may take as long as it likes: a SIGINT or SIGTERM meanwhile
/// removes the temporary file before the process ends.
pub fn write_with(
    path: &Path,
    force: bool,
    size: u64,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<Written, WriteError> {
    let dest = check(path, force)?;
    let stale_removed = remove_stale_temporaries(&dest.dir);
    let available = available_space(&dest.dir).map_err(|source| WriteError::Directory {
        dir: dest.dir.clone(),
        source,
    })?;
    check_space(&dest.dir, size, available)?;

    let mut tmp = TempFile::create(&dest.dir, &dest.name)?;
    let io_err = |what, p: &Path| {
        let p = p.to_path_buf();
        move |source| WriteError::Io {
            what,
            path: p,
            source,
        }
    };
    // Narrowed before any data is in the file: never wider than 0600, nor
    // than the file it replaces.
    tmp.file
        .set_permissions(std::fs::Permissions::from_mode(dest.mode()))
        .map_err(io_err("setting the permissions of", &tmp.path))?;
    fill(&mut tmp.file).map_err(io_err("writing", &tmp.path))?;
    tmp.file.sync_all().map_err(io_err("syncing", &tmp.path))?;
    place(&tmp.path, &dest)?;
    tmp.placed();
    // The rename is only durable once the directory is.
    File::open(&dest.dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("syncing the directory", &dest.dir))?;
    Ok(Written { stale_removed })
}

/// `renameat2(AT_FDCWD, from, AT_FDCWD, to, flags)`.
fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> io::Result<()> {
    let (f, t) = (c_path(from)?, c_path(to)?);
    // SAFETY: both paths are NUL-terminated and outlive the call.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            flags,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The file system does not take `renameat2`'s flags.
fn flags_unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS))
}

/// Move the written temporary file to the destination, replacing only the
/// regular file `dest` was checked to hold.
fn place(tmp: &Path, dest: &Destination) -> Result<(), WriteError> {
    let path = &dest.path;
    let rename_err = |source| WriteError::Io {
        what: "renaming the temporary file to",
        path: path.clone(),
        source,
    };
    let Some(existing) = dest.existing else {
        return place_new(tmp, path);
    };
    match renameat2(tmp, path, libc::RENAME_EXCHANGE) {
        Ok(()) => {}
        // The file went away since the check: nothing to replace.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return place_new(tmp, path),
        Err(e) if flags_unsupported(&e) => {
            // No atomic exchange here: re-check and rename (the residual
            // race is documented above).
            let now = std::fs::symlink_metadata(path).map_err(rename_err)?;
            if !now.file_type().is_file() {
                return Err(WriteError::Changed {
                    path: path.clone(),
                    kind: kind_of(now.file_type()),
                });
            }
            return std::fs::rename(tmp, path).map_err(rename_err);
        }
        Err(e) => return Err(rename_err(e)),
    }
    // `tmp` now names what was at the destination.
    let old = std::fs::symlink_metadata(tmp);
    let same = matches!(&old, Ok(m) if m.file_type().is_file()
        && m.dev() == existing.dev && m.ino() == existing.ino);
    if same {
        return std::fs::remove_file(tmp).map_err(|source| WriteError::Io {
            what: "removing the replaced file (now named)",
            path: tmp.to_path_buf(),
            source,
        });
    }
    // Something else was put there during the write: give it its name back.
    let kind = match &old {
        Ok(m) if m.file_type().is_file() => "another regular file",
        Ok(m) => kind_of(m.file_type()),
        Err(_) => "unreadable",
    };
    renameat2(tmp, path, libc::RENAME_EXCHANGE).map_err(rename_err)?;
    Err(WriteError::Changed {
        path: path.clone(),
        kind,
    })
}

/// Give the temporary file the destination's name, refusing (not
/// replacing) anything that appeared there.
fn place_new(tmp: &Path, path: &Path) -> Result<(), WriteError> {
    let appeared = |path: &Path| {
        let kind = std::fs::symlink_metadata(path)
            .map(|m| kind_of(m.file_type()))
            .unwrap_or("unreadable");
        WriteError::Changed {
            path: path.to_path_buf(),
            kind,
        }
    };
    let rename_err = |source| WriteError::Io {
        what: "renaming the temporary file to",
        path: path.to_path_buf(),
        source,
    };
    match renameat2(tmp, path, libc::RENAME_NOREPLACE) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(appeared(path)),
        Err(e) if flags_unsupported(&e) => {
            // link() never replaces either; then drop the temporary name.
            match std::fs::hard_link(tmp, path) {
                Ok(()) => std::fs::remove_file(tmp).map_err(rename_err),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(appeared(path)),
                Err(e) => Err(rename_err(e)),
            }
        }
        Err(e) => Err(rename_err(e)),
    }
}

/// The temporary file name for `name`: `.<name>.vmm-snapshot-tmp.<pid>.<hex>`.
pub fn temp_name(name: &OsStr, pid: u32, random: u64) -> OsString {
    let mut n = OsString::from(".");
    n.push(name);
    n.push(format!("{TEMP_MARKER}{pid}.{random:016x}"));
    n
}

/// The pid in a temporary file name of this module's making, `None` for
/// any other name.
pub fn temp_pid(file_name: &OsStr) -> Option<u32> {
    let s = file_name.to_str()?;
    let rest = s.strip_prefix('.')?;
    let at = rest.rfind(TEMP_MARKER)?;
    if at == 0 {
        return None;
    }
    let (pid, hex) = rest[at + TEMP_MARKER.len()..].split_once('.')?;
    let valid = !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && hex.len() == 16
        && hex.bytes().all(|b| b.is_ascii_hexdigit());
    valid.then(|| pid.parse().ok()).flatten()
}

/// Whether process `pid` exists (`kill(pid, 0)`; `EPERM`: it exists but
/// belongs to someone else).
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Remove the temporary files of earlier writes into `dir` that were killed
/// before they could clean up: regular files named by [`temp_name`], owned
/// by this user, whose process no longer exists. A live process's file
/// (another `vmm` writing into the same directory) is left alone; so is a
/// dead one's whose pid was reused since. Returns what was removed; errors
/// only mean something is left for next time.
pub fn remove_stale_temporaries(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = temp_pid(&entry.file_name()) else {
            continue;
        };
        let path = entry.path();
        let ours = std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.file_type().is_file() && m.uid() == me);
        if ours && !process_exists(pid) && std::fs::remove_file(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// A temporary file being written: removed on drop unless placed, and
/// removed by the termination signals while it exists.
struct TempFile {
    path: PathBuf,
    file: File,
    slot: Option<usize>,
    placed: bool,
}

impl TempFile {
    /// Create a new private temporary file for `name` in `dir`. Creation is
    /// exclusive and does not follow symlinks: anything already at the
    /// chosen name (a planted symlink included) makes it fail, and another
    /// random name is tried.
    fn create(dir: &Path, name: &OsStr) -> Result<Self, WriteError> {
        install_signal_cleanup();
        let pid = std::process::id();
        let mut attempt = 0u64;
        loop {
            let path = dir.join(temp_name(name, pid, random_u64(attempt)));
            attempt += 1;
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(NEW_FILE_MODE)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
            {
                Ok(file) => {
                    let slot = register(&path);
                    return Ok(Self {
                        path,
                        file,
                        slot,
                        placed: false,
                    });
                }
                // Something is at that name (possibly planted): never
                // opened, another name is tried, 16 times at most.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 16 => {}
                Err(source) => {
                    return Err(WriteError::Io {
                        what: "creating the temporary file",
                        path,
                        source,
                    })
                }
            }
        }
    }

    /// The file now has its final name: nothing to remove.
    fn placed(&mut self) {
        self.placed = true;
        if let Some(s) = self.slot.take() {
            unregister(s);
        }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(s) = self.slot.take() {
            unregister(s);
        }
        if !self.placed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// 64 unpredictable bits for a temporary name (std's randomly keyed
/// hasher, mixed with the time and the attempt).
fn random_u64(attempt: u64) -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(attempt);
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish()
}

/// Temporary files being written, as C paths the signal handler can
/// `unlink`. A slot's string is leaked when it is freed (a few dozen bytes
/// per write), so a handler running on another thread never reads freed
/// memory.
static SLOTS: [AtomicPtr<libc::c_char>; 8] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 8];

/// The signals that remove the temporary files before ending the process.
const CLEANUP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Record a temporary file for the signal handler; `None` when all slots
/// are taken (more than 8 writes at once in one process: the extra files
/// are then only cleaned up by the next write's stale-file sweep).
fn register(path: &Path) -> Option<usize> {
    let c = c_path(path).ok()?;
    let ptr = c.into_raw();
    for (i, slot) in SLOTS.iter().enumerate() {
        if slot
            .compare_exchange(
                std::ptr::null_mut(),
                ptr,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
        {
            return Some(i);
        }
    }
    // SAFETY: `ptr` came from `CString::into_raw` above and was never shared.
    drop(unsafe { CString::from_raw(ptr) });
    None
}

/// Forget slot `i` (its string is leaked, see [`SLOTS`]).
fn unregister(i: usize) {
    SLOTS[i].store(std::ptr::null_mut(), Ordering::SeqCst);
}

/// The handler of [`CLEANUP_SIGNALS`]: unlink every temporary file being
/// written, then end the process by the same signal with its default
/// action, as if the handler had not been there. Only async-signal-safe
/// calls (`unlink`, `signal`, `raise`).
extern "C" fn remove_temporaries_and_end(sig: libc::c_int) {
    for slot in &SLOTS {
        let p = slot.load(Ordering::SeqCst);
        if !p.is_null() {
            // SAFETY: a non-null slot holds a leaked, NUL-terminated CString
            // that is never freed.
            unsafe { libc::unlink(p) };
        }
    }
    // SAFETY: restoring the default action and re-raising are
    // async-signal-safe; the signal is delivered (and ends the process)
    // once this handler returns.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Install the handler that removes the temporary files being written
/// before SIGINT, SIGTERM or SIGHUP end the process, once.
/// A signal that is ignored (`nohup`, a background job's SIGINT) or already
/// has a handler of someone else's keeps it.
///
/// SIGXFSZ (a write past `ulimit -f`), whose default action kills the
/// process mid-write and leaves the temporary file, is ignored from then on
/// unless someone else handles it: the write fails with `EFBIG` instead, and
/// the failure is reported like any other.
pub fn install_signal_cleanup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: an all-zero sigaction is a valid value to read into.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reading the current action into a valid out-pointer.
        let read = unsafe { libc::sigaction(libc::SIGXFSZ, std::ptr::null(), &mut old) };
        if read == 0 && old.sa_sigaction == libc::SIG_DFL {
            // SAFETY: ignoring a signal installs no code.
            unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        }
        for sig in CLEANUP_SIGNALS {
            // SAFETY: an all-zero sigaction is a valid value to read into.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: reading the current action into a valid out-pointer.
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                continue;
            }
            // SAFETY: an all-zero sigaction is valid; the fields are set below.
            let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
            let handler: extern "C" fn(libc::c_int) = remove_temporaries_and_end;
            new.sa_sigaction = handler as libc::sighandler_t;
            new.sa_flags = libc::SA_RESTART;
            // SAFETY: `new.sa_mask` is a valid sigset_t to fill.
            unsafe { libc::sigfillset(&mut new.sa_mask) };
            // SAFETY: the handler only makes async-signal-safe calls; `new`
            // is valid for the call.
            unsafe { libc::sigaction(sig, &new, std::ptr::null_mut()) };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    fn temporaries(dir: &Path) -> Vec<OsString> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().contains(TEMP_MARKER))
            .collect()
    }

    #[test]
    fn temp_names_round_trip_and_others_are_not_ours() {
        let n = temp_name(OsStr::new("a.snap"), 4242, 0xdead_beef);
        assert_eq!(n, ".a.snap.vmm-snapshot-tmp.4242.00000000deadbeef");
        assert_eq!(temp_pid(&n), Some(4242));
        for other in [
            "a.snap",
            ".a.snap.tmp",
            ".a.snap.vmm-snapshot-tmp.4242.deadbeef",
            ".a.snap.vmm-snapshot-tmp.x.00000000deadbeef",
            ".vmm-snapshot-tmp.1.00000000deadbeef",
            "a.snap.vmm-snapshot-tmp.1.00000000deadbeef",
        ] {
            assert_eq!(temp_pid(OsStr::new(other)), None, "{other}");
        }
    }

    #[test]
    fn a_new_file_is_0600_whatever_the_umask_allows() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("new.snap");
        write_atomic(&p, false, b"guest ram").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"guest ram");
        assert_eq!(mode(&p), 0o600);
        assert!(temporaries(dir.path()).is_empty());
    }

    #[test]
    fn an_existing_file_is_refused_without_force_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("old.snap");
        std::fs::write(&p, b"precious").unwrap();
        let e = write_atomic(&p, false, b"new").unwrap_err();
        assert!(matches!(e, WriteError::Exists { .. }), "{e}");
        assert!(e.to_string().contains("--force"), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), b"precious");
        assert!(temporaries(dir.path()).is_empty());
    }

    #[test]
    fn force_replaces_a_regular_file_without_widening_it() {
        let dir = tempfile::tempdir().unwrap();
        for (old, new) in [
            (0o644, 0o600),
            (0o600, 0o600),
            (0o400, 0o400),
            (0o640, 0o600),
        ] {
            let p = dir.path().join(format!("f{old:o}.snap"));
            std::fs::write(&p, b"old").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(old)).unwrap();
            write_atomic(&p, true, b"replacement").unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), b"replacement");
            assert_eq!(mode(&p), new, "old mode {old:o}");
        }
        assert!(temporaries(dir.path()).is_empty());
    }

    #[test]
    fn non_regular_destinations_are_refused_even_with_force() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"target").unwrap();
        let link = dir.path().join("link.snap");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let sub = dir.path().join("sub.snap");
        std::fs::create_dir(&sub).unwrap();
        let fifo = dir.path().join("fifo.snap");
        let c = c_path(&fifo).unwrap();
        // SAFETY: `c` is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for (p, kind) in [
            (&link, "a symbolic link"),
            (&sub, "a directory"),
            (&fifo, "a FIFO"),
            (&PathBuf::from("/dev/null"), "a character device"),
        ] {
            for force in [false, true] {
                let e = write_atomic(p, force, b"ram").unwrap_err();
                match &e {
                    WriteError::NotRegular { kind: k, .. } => assert_eq!(*k, kind, "{e}"),
                    _ => panic!("{}: {e}", p.display()),
                }
            }
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"target");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(temporaries(dir.path()).is_empty());
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing/x.snap");
        let e = write_atomic(&p, false, b"ram").unwrap_err();
        match &e {
            WriteError::Directory { dir: d, source } => {
                assert_eq!(d, &dir.path().join("missing"));
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            _ => panic!("{e}"),
        }
        assert!(e.to_string().contains("missing"), "{e}");
    }

    #[test]
    fn too_little_space_is_refused_naming_the_sizes() {
        let e = check_space(Path::new("/d"), 10 << 20, 5 << 20).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "directory /d: not enough free space: the snapshot needs {} bytes (with a {SPACE_MARGIN}-byte margin), {} are available",
                (10 << 20) + SPACE_MARGIN,
                5 << 20
            )
        );
        check_space(Path::new("/d"), 1 << 20, (2 << 20) + 1).unwrap();
    }

    #[test]
    fn a_failed_fill_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fail.snap");
        let e = write_with(&p, false, 3, |_| {
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        })
        .unwrap_err();
        assert!(
            matches!(
                &e,
                WriteError::Io {
                    what: "writing",
                    ..
                }
            ),
            "{e}"
        );
        assert!(!p.exists());
        assert!(temporaries(dir.path()).is_empty());
    }

    #[test]
    fn the_temporary_is_private_while_it_fills() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("private.snap");
        write_with(&p, false, 3, |f| {
            let names = temporaries(dir.path());
            assert_eq!(names.len(), 1, "{names:?}");
            assert_eq!(temp_pid(&names[0]), Some(std::process::id()));
            assert_eq!(mode(&dir.path().join(&names[0])), 0o600);
            io::Write::write_all(f, b"abc")
        })
        .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"abc");
    }

    #[test]
    fn a_symlink_swapped_in_during_a_forced_write_is_put_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("swap.snap");
        std::fs::write(&p, b"old").unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"target").unwrap();
        let e = write_with(&p, true, 3, |f| {
            // The check saw a regular file; a symlink replaces it meanwhile.
            std::fs::remove_file(&p)?;
            std::os::unix::fs::symlink(&target, &p)?;
            io::Write::write_all(f, b"ram")
        })
        .unwrap_err();
        assert!(
            matches!(
                &e,
                WriteError::Changed {
                    kind: "a symbolic link",
                    ..
                }
            ),
            "{e}"
        );
        assert!(std::fs::symlink_metadata(&p)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"target");
        assert!(temporaries(dir.path()).is_empty());
    }

    #[test]
    fn a_file_appearing_during_a_write_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("race.snap");
        for force in [false, true] {
            let e = write_with(&p, force, 3, |f| {
                std::fs::write(&p, b"theirs")?;
                io::Write::write_all(f, b"ram")
            })
            .unwrap_err();
            assert!(
                matches!(
                    &e,
                    WriteError::Changed {
                        kind: "a regular file",
                        ..
                    }
                ),
                "{e}"
            );
            assert_eq!(std::fs::read(&p).unwrap(), b"theirs");
            std::fs::remove_file(&p).unwrap();
        }
        assert!(temporaries(dir.path()).is_empty());
    }

    #[test]
    fn stale_temporaries_of_dead_processes_are_removed_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        // A pid that cannot exist (above the kernel's PID_MAX_LIMIT).
        let dead = dir
            .path()
            .join(temp_name(OsStr::new("x.snap"), 4_194_305, 1));
        let live = dir
            .path()
            .join(temp_name(OsStr::new("x.snap"), std::process::id(), 2));
        let foreign = dir.path().join(".x.snap.tmp");
        for f in [&dead, &live, &foreign] {
            std::fs::write(f, b"left over").unwrap();
        }
        let w = write_atomic(&dir.path().join("x.snap"), false, b"ram").unwrap();
        assert_eq!(w.stale_removed, vec![dead.clone()]);
        assert!(!dead.exists());
        assert!(live.exists() && foreign.exists());
    }
}
