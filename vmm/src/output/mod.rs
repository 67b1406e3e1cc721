//! Writing what `vmm` produces: [`stdout`] for a command's result,
//! [`terminal::line`] for its messages (both escaped by
//! [`terminal::escape_controls`]), and files (snapshots first) written
//! safely.
//!
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

mod atomic;
mod destination;
mod dir;
mod error;
mod signals;
pub mod stdout;
mod sys;
mod temp;
pub mod terminal;

pub use atomic::{write_atomic, write_set, write_with};
#[cfg(test)]
pub(crate) use destination::check_space;
pub use destination::{check, parse_destination};
pub use dir::create_dir;
pub use error::WriteError;
pub use temp::temp_name;
#[cfg(test)]
pub(crate) use temp::temp_pid;

/// The marker in a temporary file's name: `.<name>` + this + `<pid>.<hex>`.
pub const TEMP_MARKER: &str = ".vmm-snapshot-tmp.";

/// Free space asked for beyond the file's size, for the file system's own
/// metadata (extents, the directory entry).
pub const SPACE_MARGIN: u64 = 1 << 20;

/// The permission bits of a new snapshot file.
pub const NEW_FILE_MODE: u32 = 0o600;

#[cfg(test)]
mod tests;
