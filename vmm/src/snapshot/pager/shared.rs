//! What the pager and the run share: whether every page is in, the first
//! failure, the vCPU threads to kick out of `KVM_RUN` when a page fails,
//! and what the report keeps of the snapshot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How a restore's stored pages reached guest RAM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PagesMode {
    /// Copied in when first touched, the rest in the background, by a
    /// `userfaultfd` pager, while the file was leased.
    OnDemand,
    /// Read and verified before the first `KVM_RUN`, and why not on demand.
    UpFront {
        /// `--verify-memory`, or what on demand lacked.
        why: String,
    },
}

impl PagesMode {
    /// As `vmm restore` says it.
    pub fn describe(&self) -> String {
        match self {
            PagesMode::OnDemand => {
                "on demand (userfaultfd; the file leased until every page was in)".into()
            }
            PagesMode::UpFront { why } => format!("read up front ({why})"),
        }
    }
}

/// Why a stored page did not reach the guest. The message names the page
/// by its guest address, its place among the stored pages and in the file,
/// and the section.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// The page's bytes do not match its CRC32 in `memory.crc32`.
    #[error(
        "stored page {index} (guest address {gpa:#x}, file offset {offset}) of section \
         \"memory.pages\" is corrupt: its CRC32 is {computed:#010x}, section \"memory.crc32\" \
         says {stored:#010x}"
    )]
    Corrupt {
        /// Guest-physical address of the page.
        gpa: u64,
        /// Its index among the stored pages.
        index: u64,
        /// Its offset in the file.
        offset: u64,
        /// The CRC32 the file holds for it.
        stored: u32,
        /// The CRC32 of its bytes.
        computed: u32,
    },
    /// A file without `memory.crc32`: the whole section does not match.
    #[error(
        "section \"memory.pages\" is corrupt: its CRC32 is {computed:#010x}, the section table \
         says {stored:#010x} (this file has no \"memory.crc32\" to name the page: it was written \
         before per-page checksums)"
    )]
    SectionCorrupt {
        /// The CRC32 in the section table.
        stored: u32,
        /// The CRC32 of the section's bytes.
        computed: u32,
    },
    /// The page could not be read from the file.
    #[error(
        "stored page {index} (guest address {gpa:#x}, file offset {offset}) of section \
         \"memory.pages\" could not be read: {reason}"
    )]
    Unreadable {
        /// Guest-physical address of the page.
        gpa: u64,
        /// Its index among the stored pages.
        index: u64,
        /// Its offset in the file.
        offset: u64,
        /// What the file system said.
        reason: String,
    },
    /// Guest RAM refused the page.
    #[error("guest RAM at {gpa:#x} could not take the snapshot's page: {reason}")]
    Fill {
        /// Guest-physical address of the page.
        gpa: u64,
        /// Why.
        reason: String,
    },
}

/// The stored pages of a restore, as the run sees them: cheap to clone
/// (every vCPU runner holds one).
#[derive(Clone)]
pub struct Pages {
    pub(super) shared: Arc<Shared>,
    mode: PagesMode,
}

/// The pager's state behind [`Pages`].
pub(super) struct Shared {
    /// Set with the first failure: the run loops look at it between exits.
    failed: AtomicBool,
    /// A vCPU loop started, or someone waits for every page: the pager
    /// copies the pages nobody asked for from now on (before, it only
    /// answers faults, leaving the CPU to the VM's setup).
    go: AtomicBool,
    /// Written when `go` is set: an idle pager sleeps in `epoll` on it
    /// and on the `userfaultfd`, waking for a fault or the go.
    pub(super) go_event: Option<vmm_sys_util::eventfd::EventFd>,
    state: Mutex<State>,
    settled: Condvar,
}

#[derive(Default)]
struct State {
    /// Every stored page is in guest RAM (or a failure ended the pager).
    done: bool,
    failure: Option<PageError>,
    /// What the report keeps of the snapshot ([`Pages::kept`]).
    kept: Vec<(u64, Vec<u8>)>,
    /// The vCPU threads now running a loop (thread ids), kicked when a
    /// page fails.
    vcpus: Vec<libc::pid_t>,
    /// Faults served (on demand).
    faults: u64,
    /// From the start to the last page in.
    fill_time: Duration,
}

impl Shared {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            failed: AtomicBool::new(false),
            go: AtomicBool::new(false),
            go_event: vmm_sys_util::eventfd::EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)
                .ok(),
            state: Mutex::new(State::default()),
            settled: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record the first failure; the run loops see it from now on.
    pub(super) fn fail(&self, e: PageError) {
        let mut s = self.lock();
        if s.failure.is_none() {
            s.failure = Some(e);
        }
        self.failed.store(true, Ordering::SeqCst);
        self.settled.notify_all();
    }

    /// Every page is in (or none will come): wake whoever waits.
    pub(super) fn finish(&self, kept: Vec<(u64, Vec<u8>)>, faults: u64, fill_time: Duration) {
        let mut s = self.lock();
        s.done = true;
        s.kept = kept;
        s.faults = faults;
        s.fill_time = fill_time;
        self.settled.notify_all();
    }

    /// Whether the pager should copy the pages nobody asked for yet.
    pub(super) fn go(&self) -> bool {
        self.go.load(Ordering::Relaxed)
    }

    /// Tell the pager to copy the pages nobody asked for yet.
    fn start_copying(&self) {
        if !self.go.swap(true, Ordering::SeqCst) {
            if let Some(e) = &self.go_event {
                let _ = e.write(1);
            }
        }
    }

    /// The vCPU threads running a loop now.
    pub(super) fn vcpu_threads(&self) -> Vec<libc::pid_t> {
        self.lock().vcpus.clone()
    }
}

/// A vCPU thread's registration ([`Pages::enter_vcpu`]), removed on drop.
pub struct VcpuEntry {
    shared: Arc<Shared>,
    tid: libc::pid_t,
}

impl Drop for VcpuEntry {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        if let Some(i) = s.vcpus.iter().position(|&t| t == self.tid) {
            s.vcpus.swap_remove(i);
        }
    }
}

/// This thread's id (`gettid`).
pub(super) fn this_thread() -> libc::pid_t {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::pid_t }
}

impl Pages {
    pub(super) fn new(shared: Arc<Shared>, mode: PagesMode) -> Self {
        Self { shared, mode }
    }

    /// Pages already all in RAM (read up front).
    pub(super) fn filled(mode: PagesMode, kept: Vec<(u64, Vec<u8>)>, took: Duration) -> Self {
        let shared = Shared::new();
        shared.finish(kept, 0, took);
        Self { shared, mode }
    }

    /// How the pages reach RAM.
    pub fn mode(&self) -> &PagesMode {
        &self.mode
    }

    /// The failure that stopped the pages, if one did: cheap enough for
    /// every exit of a run loop.
    pub fn failure(&self) -> Option<PageError> {
        if !self.shared.failed.load(Ordering::Relaxed) {
            return None;
        }
        self.shared.lock().failure.clone()
    }

    /// Wait until every stored page is in guest RAM: before a snapshot
    /// (it finds the pages that hold data by their presence) and before
    /// the report reads [`Pages::kept`].
    ///
    /// # Errors
    /// The failure that stopped the pages.
    pub fn wait(&self) -> Result<(), PageError> {
        self.shared.start_copying();
        let mut s = self.shared.lock();
        while !s.done && s.failure.is_none() {
            s = self
                .shared
                .settled
                .wait(s)
                .unwrap_or_else(|p| p.into_inner());
        }
        s.failure.clone().map_or(Ok(()), Err)
    }

    /// What the report keeps of the snapshot's memory, as (guest address,
    /// bytes): the guest's report record as it was when the snapshot was
    /// taken, found while its pages were verified. Complete once
    /// [`Pages::wait`] returned.
    pub fn kept(&self) -> Vec<(u64, Vec<u8>)> {
        self.shared.lock().kept.clone()
    }

    /// Page faults the pager served (0 up front), and the time from the
    /// start to the last page in.
    pub fn served(&self) -> (u64, Duration) {
        let s = self.shared.lock();
        (s.faults, s.fill_time)
    }

    /// Register the calling thread as a vCPU thread until the returned
    /// entry is dropped: a page that fails meanwhile kicks it out of
    /// `KVM_RUN` (the kick signal of `vstate::stop`).
    pub fn enter_vcpu(&self) -> VcpuEntry {
        let tid = this_thread();
        self.shared.lock().vcpus.push(tid);
        self.shared.start_copying();
        VcpuEntry {
            shared: self.shared.clone(),
            tid,
        }
    }
}
