//! A newc ("070701") cpio archive writer, the format Linux unpacks as an
//! initramfs (Documentation/driver-api/early-userspace/buffer-format.rst):
//! a 110-byte ASCII header per entry, its NUL-terminated name and its data,
//! each padded to 4 bytes, and a `TRAILER!!!` entry at the end.

/// Mode bits of a directory.
pub const DIR: u32 = 0o040_000;
/// Mode bits of a regular file.
pub const FILE: u32 = 0o100_000;
/// Mode bits of a character device.
pub const CHAR_DEV: u32 = 0o020_000;

/// An archive being written.
#[derive(Default)]
pub struct Cpio {
    bytes: Vec<u8>,
    ino: u32,
}

impl Cpio {
    /// An empty archive.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a directory `name` (no leading `/`).
    pub fn dir(&mut self, name: &str, perm: u32) -> &mut Self {
        self.entry(name, DIR | perm, (0, 0), &[])
    }

    /// Adds a regular file `name` with `data`.
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) -> &mut Self {
        self.entry(name, FILE | perm, (0, 0), data)
    }

    /// Adds a character device `name` with its major and minor numbers.
    pub fn char_dev(&mut self, name: &str, perm: u32, dev: (u32, u32)) -> &mut Self {
        self.entry(name, CHAR_DEV | perm, dev, &[])
    }

    /// The archive, closed with its trailer.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.bytes
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) -> &mut Self {
        self.ino += 1;
        let nlink = if mode & DIR != 0 { 2 } else { 1 };
        let name_len = name.len() as u32 + 1;
        // magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
        // devminor, rdevmajor, rdevminor, namesize, check.
        let fields = [
            self.ino,
            mode,
            0,
            0,
            nlink,
            0,
            data.len() as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            name_len,
            0,
        ];
        self.bytes.extend_from_slice(b"070701");
        for f in fields {
            self.bytes.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
        self
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }
}
