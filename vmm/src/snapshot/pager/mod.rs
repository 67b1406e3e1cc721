//! A restored guest's stored pages, from the snapshot file into guest
//! RAM: isolated from the file and verified page by page.
//!
//! Why not map the file (`MAP_PRIVATE`, as restores once did): the guest's
//! memory would stay the file's for as long as the guest runs. Overwriting
//! the file changes pages the guest has not written yet; truncating it (or
//! `cp` over it) makes the kernel drop even the private copies the guest
//! wrote; a snapshot taken then dies by `SIGBUS`. So the pages are copied
//! into anonymous RAM, and every one is checked against its CRC32
//! (`memory.crc32`) before the guest can read it. Two ways:
//!
//! - **On demand** (`lazy`): guest RAM is registered with a
//!   `userfaultfd`; a pager thread copies each page in (`UFFDIO_COPY`) when
//!   the guest or the VMM first touches it, and meanwhile copies all the
//!   others in the background, so the file is done with soon after the
//!   guest starts. Meanwhile the file holds a read lease
//!   (`F_SETLEASE`, `lease`): whoever opens it for writing or truncates
//!   it waits until every page is in (or gets `EAGAIN` with `O_NONBLOCK`).
//!   The first `KVM_RUN` does not wait for any page.
//! - **Up front** ([`PageSource::fill`] with `up_front`, and whenever on
//!   demand is not possible: no `memory.crc32` section, no lease, no
//!   `userfaultfd` that sees KVM's faults): every page is read and checked
//!   before the first `KVM_RUN`. Measured on the development host, copying
//!   a 27 MB snapshot's pages into fresh memory costs 25-40 ms, almost all
//!   of it the kernel finding fresh pages, which is why it is not the
//!   default.
//!
//! Either way the file is closed once the last page is in: nothing done to
//! it later reaches the guest, and the report keeps what it needs of the
//! snapshot ([`Pages::kept`]) instead of reading the file again. A page
//! that fails its checksum (or can no longer be read) never reaches the
//! guest: the restore stops with [`PageError`], naming the page, its guest
//! address and the section; during the run the vCPUs are kicked out of
//! `KVM_RUN` and the run ends with its own status, never blamed on the
//! guest.

mod keep;
mod lazy;
mod lease;
mod shared;
mod source;
mod upfront;

use vm_memory::GuestMemoryMmap;

pub use lease::take_lease;
pub use shared::{PageError, Pages, PagesMode};
pub use source::PageSource;

impl PageSource {
    /// Put the pages into `mem`: on demand when that is possible and
    /// `up_front` is false, else every page now, verified, before this
    /// returns.
    ///
    /// # Errors
    /// A page that fails its checksum or cannot be read, or RAM that
    /// cannot hold it (up front; on demand these end the run instead).
    pub fn fill(self, mem: &GuestMemoryMmap, up_front: bool) -> Result<Pages, PageError> {
        let why_not = if up_front {
            "--verify-memory".to_string()
        } else if self.crcs.is_empty() && !self.runs.is_empty() {
            "the file has no \"memory.crc32\" (written before per-page checksums)".into()
        } else if !self.leased {
            "no read lease on the file (another process has it open for writing, \
             or this file system or user cannot lease it)"
                .into()
        } else {
            match lazy::start(self, mem) {
                Ok(pages) => return Ok(pages),
                Err(lazy::NotStarted::Fallback(source, why)) => {
                    return source.read_up_front(mem, why)
                }
                Err(lazy::NotStarted::Failed(e)) => return Err(e),
            }
        };
        self.read_up_front(mem, why_not)
    }
}

#[cfg(test)]
mod tests;
