//! The stored pages copied in on demand: guest RAM's stored runs are
//! registered with a `userfaultfd` (missing pages), and a pager thread
//! answers every fault on them by reading the page (and the next few of
//! its run) from the file, checking each against its CRC32 and copying it
//! in with `UFFDIO_COPY`, which also wakes the faulting thread. Between
//! faults it copies the remaining pages in file order, so every page is in
//! soon after the guest starts; then the `userfaultfd` is closed (RAM is
//! plain anonymous memory again) and so is the file, which gives up its
//! lease.
//!
//! Faults come from the vCPU threads through KVM (`get_user_pages`, a
//! kernel-mode fault: hence a `userfaultfd` without
//! `UFFD_USER_MODE_ONLY`, which needs `CAP_SYS_PTRACE`, or access to
//! `/dev/userfaultfd`) and from the VMM's own reads of guest memory.
//! Without such a `userfaultfd` the pages are read up front.
//!
//! A page that fails: the failure is recorded first, then every vCPU
//! thread running a loop is kicked out of `KVM_RUN` (and the one that
//! faulted), again every millisecond until their loops have seen it; the
//! faults still pending are answered with zero pages, which no guest
//! instruction reads: the kick is pending before the wake, so `KVM_RUN`
//! returns before it enters the guest again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use userfaultfd::{Event, FeatureFlags, Uffd, UffdBuilder};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use super::keep::Keeper;
use super::shared::{this_thread, Shared};
use super::shared::{PageError, Pages, PagesMode};
use super::source::PageSource;
use crate::arch::layout::ram_pieces;
use crate::snapshot::sparse::{is_zero, PAGE_SIZE};

/// Pages copied in per fault (the faulting one and the next of its run):
/// a guest walking through memory faults once per cluster, not per page.
const CLUSTER_PAGES: u64 = 16;

/// Pages copied in per step between faults.
const BACKGROUND_PAGES: u64 = 32;

/// Runs closer than this (pages) are registered as one range (the gap's
/// faults are answered with zero pages): fewer ranges, fewer VMAs.
const MERGE_GAP: u64 = 16;

/// Until a vCPU loop starts (or someone waits for every page, or this
/// long passed), the pager only answers faults, asleep in `epoll` on the
/// `userfaultfd` and the go event between them: the VM's setup has the
/// CPU to itself, and the first `KVM_RUN` comes as soon as without a pager
/// (measured: copying in the background from the start made setup 3-100
/// ms longer on the 2-core development host, and a pager waking every
/// 100 µs to look still cost about a millisecond).
const IDLE_FOR: Duration = Duration::from_millis(200);

/// How long a failed pager keeps kicking vCPU threads whose loops have not
/// yet seen the failure.
const KICK_FOR: Duration = Duration::from_secs(5);

/// Why the pages are not copied in on demand: read them up front (with
/// why), or a failure that ends the restore.
pub(super) enum NotStarted {
    /// On demand is not possible here: the source back, and why.
    Fallback(Box<PageSource>, String),
    /// The pager could not start.
    Failed(PageError),
}

/// The pager thread's state.
struct Pager {
    src: PageSource,
    uffd: Uffd,
    shared: Arc<Shared>,
    /// The runs cut where guest RAM's regions end: (RAM offset, offset in
    /// the section, length), in file order, each in one host mapping.
    pieces: Vec<(u64, u64, u64)>,
    /// Host address of each piece's first byte.
    hosts: Vec<u64>,
    /// The pieces' indices by host address.
    by_host: Vec<usize>,
    /// Which stored pages are in RAM (by index in the section).
    filled: Vec<bool>,
    keeper: Keeper,
    faults: u64,
    buf: Vec<u8>,
    began: Instant,
}

/// The runs of `src` cut at the regions of `mem`, each with its host
/// address and region; `None` for a run outside RAM.
#[allow(clippy::type_complexity)]
fn pieces_of(
    src: &PageSource,
    mem: &GuestMemoryMmap,
) -> Option<(Vec<(u64, u64, u64)>, Vec<(u64, usize)>)> {
    let mut pieces = Vec::with_capacity(src.runs.len());
    let mut hosts = Vec::with_capacity(src.runs.len());
    for &(off, at, len) in &src.runs {
        let (mut o, mut a) = (off, at);
        for (gpa, l) in ram_pieces(&src.regions, off, len)? {
            let host = mem.get_slice(GuestAddress(gpa), l as usize).ok()?;
            let region = src
                .regions
                .iter()
                .position(|r| gpa >= r.addr && gpa < r.end())?;
            pieces.push((o, a, l));
            hosts.push((host.ptr_guard_mut().as_ptr() as u64, region));
            o += l;
            a += l;
        }
    }
    Some((pieces, hosts))
}

/// Register the stored runs of `mem` and start the pager thread.
pub(super) fn start(src: PageSource, mem: &GuestMemoryMmap) -> Result<Pages, NotStarted> {
    let Some((pieces, hosts)) = pieces_of(&src, mem) else {
        let why = "a run of stored pages lies outside guest RAM".to_string();
        return Err(NotStarted::Fallback(Box::new(src), why));
    };
    if let Err(e) = crate::vstate::stop::install_kick_handler() {
        return Err(NotStarted::Fallback(Box::new(src), e.to_string()));
    }
    let uffd = match UffdBuilder::new()
        .close_on_exec(true)
        .non_blocking(true)
        .user_mode_only(false)
        .require_features(FeatureFlags::THREAD_ID)
        .create()
    {
        Ok(u) => u,
        Err(e) => {
            let why = format!("no userfaultfd that sees KVM's faults: {e}");
            return Err(NotStarted::Fallback(Box::new(src), why));
        }
    };
    let mut by_host: Vec<usize> = (0..pieces.len()).collect();
    by_host.sort_by_key(|&k| hosts[k].0);
    for (host, len) in merged(&pieces, &hosts, &by_host) {
        if let Err(e) = uffd.register(host as *mut libc::c_void, len as usize) {
            // Dropping `uffd` unregisters what was registered.
            return Err(NotStarted::Fallback(
                Box::new(src),
                format!("UFFDIO_REGISTER: {e}"),
            ));
        }
    }
    let shared = Shared::new();
    let pager = Pager {
        filled: vec![false; (src.section.length / PAGE_SIZE as u64) as usize],
        src,
        uffd,
        shared: shared.clone(),
        pieces,
        hosts: hosts.iter().map(|&(h, _)| h).collect(),
        by_host,
        keeper: Keeper::default(),
        faults: 0,
        buf: vec![0u8; (CLUSTER_PAGES.max(BACKGROUND_PAGES) as usize) * PAGE_SIZE],
        began: Instant::now(),
    };
    let watch = shared.clone();
    std::thread::Builder::new()
        .name("vmm-pager".into())
        .spawn(move || {
            // A panic must not leave a run waiting for pages forever.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pager.run()));
            if ran.is_err() {
                watch.fail(PageError::Fill {
                    gpa: 0,
                    reason: "the pager thread panicked".into(),
                });
            }
        })
        .map_err(|e| {
            NotStarted::Failed(PageError::Fill {
                gpa: 0,
                reason: format!("cannot start the pager thread: {e}"),
            })
        })?;
    Ok(Pages::new(shared, PagesMode::OnDemand))
}

/// The host ranges to register: the pieces in host order, neighbours in
/// one region less than [`MERGE_GAP`] pages apart joined.
fn merged(
    pieces: &[(u64, u64, u64)],
    hosts: &[(u64, usize)],
    by_host: &[usize],
) -> Vec<(u64, u64)> {
    let gap = MERGE_GAP * PAGE_SIZE as u64;
    let mut out: Vec<(u64, u64, usize)> = Vec::new();
    for &k in by_host {
        let ((host, region), len) = (hosts[k], pieces[k].2);
        match out.last_mut() {
            Some((start, l, r))
                if *r == region && host >= *start + *l && host - (*start + *l) < gap =>
            {
                *l = host + len - *start
            }
            _ => out.push((host, len, region)),
        }
    }
    out.into_iter().map(|(h, l, _)| (h, l)).collect()
}

impl Pager {
    fn run(mut self) {
        match self.populate() {
            Ok(()) => {
                let kept = std::mem::take(&mut self.keeper).into_kept();
                self.shared.finish(kept, self.faults, self.began.elapsed());
            }
            Err((e, faulted)) => {
                self.shared.fail(e);
                self.stop_vcpus(faulted);
            }
        }
        // Dropping `self` closes the userfaultfd (RAM is plain anonymous
        // memory again) and the file (its lease is given up).
    }

    /// Serve faults first, copy the rest in file order meanwhile; on a
    /// failure, the error and the thread that faulted, if one did.
    fn populate(&mut self) -> Result<(), (PageError, Option<libc::pid_t>)> {
        let mut next = 0usize;
        loop {
            self.serve_faults()?;
            while next < self.filled.len() && self.filled[next] {
                next += 1;
            }
            if next == self.filled.len() {
                return Ok(());
            }
            if !self.shared.go() && self.began.elapsed() < IDLE_FOR {
                self.idle();
                continue;
            }
            let at = next as u64 * PAGE_SIZE as u64;
            let k = self.pieces.partition_point(|&(_, a, _)| a <= at) - 1;
            let page = (at - self.pieces[k].1) / PAGE_SIZE as u64;
            self.fill(k, page, BACKGROUND_PAGES)
                .map_err(|e| (e, None))?;
        }
    }

    /// Sleep until a fault, the go event, or the end of [`IDLE_FOR`].
    fn idle(&self) {
        use std::os::fd::AsRawFd;
        use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
        let left = IDLE_FOR.saturating_sub(self.began.elapsed());
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        let waited = Epoll::new().and_then(|ep| {
            ep.ctl(
                ControlOperation::Add,
                self.uffd.as_raw_fd(),
                EpollEvent::new(EventSet::IN, 0),
            )?;
            if let Some(e) = &self.shared.go_event {
                ep.ctl(
                    ControlOperation::Add,
                    e.as_raw_fd(),
                    EpollEvent::new(EventSet::IN, 1),
                )?;
            }
            let mut events = [EpollEvent::default(); 2];
            ep.wait(ms, &mut events)
        });
        if waited.is_err() {
            // No epoll: look again shortly.
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Answer every fault pending now.
    fn serve_faults(&mut self) -> Result<(), (PageError, Option<libc::pid_t>)> {
        loop {
            let event = self.uffd.read_event().map_err(|e| {
                let reason = format!("reading the userfaultfd: {e}");
                (PageError::Fill { gpa: 0, reason }, None)
            })?;
            let Some(Event::Pagefault {
                addr, thread_id, ..
            }) = event
            else {
                return Ok(());
            };
            self.faults += 1;
            let host = addr as u64 & !(PAGE_SIZE as u64 - 1);
            let tid = thread_id.as_raw();
            let i = self
                .by_host
                .partition_point(|&k| self.hosts[k] <= host)
                .checked_sub(1);
            let inside = i
                .map(|i| self.by_host[i])
                .filter(|&k| host < self.hosts[k] + self.pieces[k].2);
            match inside {
                Some(k) => {
                    let page = (host - self.hosts[k]) / PAGE_SIZE as u64;
                    self.fill(k, page, CLUSTER_PAGES)
                        .map_err(|e| (e, Some(tid)))?;
                }
                None => zeros(&self.uffd, host, PAGE_SIZE),
            }
        }
    }

    /// Copy in up to `max` pages of piece `k` from its page `page` on (the
    /// ones not yet in), each checked against its CRC32.
    fn fill(&mut self, k: usize, page: u64, max: u64) -> Result<(), PageError> {
        let (off0, at, len) = self.pieces[k];
        let index = at / PAGE_SIZE as u64 + page;
        if self.filled[index as usize] {
            // Already in: the fault raced a copy; wake the thread.
            let _ = self.uffd.wake(
                (self.hosts[k] + page * PAGE_SIZE as u64) as *mut libc::c_void,
                PAGE_SIZE,
            );
            return Ok(());
        }
        let in_run = len / PAGE_SIZE as u64 - page;
        let mut n = 0;
        while n < max.min(in_run) && !self.filled[(index + n) as usize] {
            n += 1;
        }
        let bytes = (n as usize) * PAGE_SIZE;
        let off = page * PAGE_SIZE as u64;
        let buf = &mut self.buf[..bytes];
        self.src.read(buf, off0 + off, index, at + off)?;
        self.src.verify(buf, off0 + off, index, at + off)?;
        self.keeper.scan(&self.src, buf, off0 + off);
        let dst = self.hosts[k] + off;
        // All-zero pages (a crafted file's holes: a snapshot stores none)
        // map the zero page instead of taking memory.
        let mut p = 0usize;
        while p < bytes {
            let zero = is_zero(&buf[p..p + PAGE_SIZE]);
            let mut q = p + PAGE_SIZE;
            while q < bytes && is_zero(&buf[q..q + PAGE_SIZE]) == zero {
                q += PAGE_SIZE;
            }
            let at = (dst + p as u64, off0 + off + p as u64);
            if zero {
                zeros(&self.uffd, at.0, q - p);
            } else {
                copy_in(&self.uffd, &buf[p..q], at.0).map_err(|reason| PageError::Fill {
                    gpa: self.src.gpa(at.1),
                    reason,
                })?;
            }
            p = q;
        }
        for i in index..index + n {
            self.filled[i as usize] = true;
        }
        Ok(())
    }

    /// After a failure: kick every vCPU thread out of `KVM_RUN` (and the
    /// one that faulted), then answer its pending faults with zero pages;
    /// again every millisecond until their loops have seen the failure
    /// (they leave the list), at most [`KICK_FOR`].
    fn stop_vcpus(&mut self, faulted: Option<libc::pid_t>) {
        let end = Instant::now() + KICK_FOR;
        let me = this_thread();
        let mut targets: Vec<libc::pid_t> = faulted.into_iter().collect();
        loop {
            targets.extend(self.shared.vcpu_threads());
            targets.sort_unstable();
            targets.dedup();
            targets.retain(|&t| t != me);
            for &t in &targets {
                crate::vstate::stop::kick_thread(t);
            }
            while let Ok(Some(Event::Pagefault {
                addr, thread_id, ..
            })) = self.uffd.read_event()
            {
                crate::vstate::stop::kick_thread(thread_id.as_raw());
                zeros(&self.uffd, addr as u64 & !(PAGE_SIZE as u64 - 1), PAGE_SIZE);
            }
            targets.clear();
            if self.shared.vcpu_threads().is_empty() || Instant::now() > end {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Copy `bytes` (verified pages) into registered RAM at `dst` with
/// `UFFDIO_COPY`, which also wakes the threads waiting on them; a page
/// already present (EEXIST) is skipped. The error says what the kernel
/// said.
fn copy_in(uffd: &Uffd, bytes: &[u8], dst: u64) -> Result<(), String> {
    let mut copied = 0usize;
    while copied < bytes.len() {
        // SAFETY: `dst + copied ..` lies inside a range of guest RAM
        // registered with `uffd`, `bytes` is readable for its length; the
        // kernel copies from `bytes` into pages it allocates, and refuses a
        // page already present (EEXIST) or a range no longer registered.
        let r = unsafe {
            uffd.copy(
                bytes[copied..].as_ptr().cast(),
                (dst + copied as u64) as *mut libc::c_void,
                bytes.len() - copied,
                true,
            )
        };
        match r {
            Ok(c) | Err(userfaultfd::Error::PartiallyCopied(c)) if c > 0 => copied += c,
            Err(userfaultfd::Error::CopyFailed(e)) if e as i32 == libc::EEXIST => {
                copied += PAGE_SIZE
            }
            other => return Err(format!("UFFDIO_COPY: {other:?}")),
        }
    }
    Ok(())
}

/// Map the zero page at `len` bytes of RAM registered with `uffd` from
/// `host` (a fault outside the stored pages, in a gap of a merged range;
/// or stored pages that are all zeros), waking whoever waits there; pages
/// already present are left as they are.
fn zeros(uffd: &Uffd, host: u64, len: usize) {
    for page in (0..len).step_by(PAGE_SIZE) {
        // SAFETY: `host + page` is a page of a range registered with
        // `uffd`; the kernel maps its zero page there, or refuses (EEXIST)
        // a page already present.
        let _ =
            unsafe { uffd.zeropage((host + page as u64) as *mut libc::c_void, PAGE_SIZE, true) };
    }
}
