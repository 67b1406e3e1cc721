//! A single vCPU's deadlines without a supervising thread: the
//! [`Schedule`] turns `--snapshot-after` and `--timeout` into stop requests
//! when they pass (the vCPU loop asks between exits), and a POSIX timer
//! aimed at the vCPU's own thread ([`KickTimer`]) interrupts `KVM_RUN` from
//! the first deadline on, every [`KICK_EVERY`], so a guest that never
//! exits is stopped too. [`DueAt`] is the arithmetic both this schedule
//! and the SMP supervisor ([`super::stop::supervise_all_with`]) judge by.
//!
//! Why not a thread that sleeps until the deadline and signals the vCPU: a
//! thread is created before the first `KVM_RUN` and must be gone before
//! the process ends; under a nested hypervisor the two cost about 0.25 ms
//! of a `vmm run` that does nothing in under 4 ms. A timer is three system
//! calls.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the timer repeats once a deadline passed: a signal that lands
/// while the thread is outside `KVM_RUN` only interrupts the next one.
pub const KICK_EVERY: Duration = Duration::from_millis(10);

/// Which deadline passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// The run's time limit.
    Timeout,
    /// `--snapshot-after`.
    Snapshot,
}

/// `--snapshot-after` and `--timeout` as instants counted from one start.
/// Durations too large for the clock (flags are bounded, see
/// `input::MAX_SECONDS`) never pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DueAt {
    snapshot: Option<Instant>,
    timeout: Option<Instant>,
}

impl DueAt {
    /// The deadlines `snapshot_after` and `timeout` after `begin`.
    pub fn after(
        begin: Instant,
        snapshot_after: Option<Duration>,
        timeout: Option<Duration>,
    ) -> Self {
        let at = |d: Option<Duration>| d.and_then(|d| begin.checked_add(d));
        Self {
            snapshot: at(snapshot_after),
            timeout: at(timeout),
        }
    }

    /// The earlier deadline, if there is one.
    pub fn first(&self) -> Option<Instant> {
        [self.snapshot, self.timeout].into_iter().flatten().min()
    }

    /// The deadline that has passed at `now`: the timeout before the
    /// snapshot (the timeout also applies to writing the snapshot);
    /// the snapshot only while `snapshot_pending`.
    pub fn passed(&self, now: Instant, snapshot_pending: bool) -> Option<Due> {
        if self.timeout.is_some_and(|t| now >= t) {
            Some(Due::Timeout)
        } else if snapshot_pending && self.snapshot.is_some_and(|t| now >= t) {
            Some(Due::Snapshot)
        } else {
            None
        }
    }
}

/// Deadlines that become stop requests by themselves.
#[derive(Debug)]
pub struct Schedule {
    at: DueAt,
    /// The snapshot request was dealt with without ending the run (the file
    /// could not be written): only the timeout is left.
    snapshot_settled: AtomicBool,
    /// [`Schedule::due`] answered with the timeout at least once.
    timeout_seen: AtomicBool,
    timer: KickTimer,
}

impl Schedule {
    /// Start counting `deadlines` now, kicking the calling thread with
    /// `signal` (whose handler must already be installed). `None` when
    /// there is no deadline.
    pub fn arm(
        snapshot_after: Option<Duration>,
        timeout: Option<Duration>,
        signal: libc::c_int,
    ) -> io::Result<Option<Self>> {
        let at = DueAt::after(Instant::now(), snapshot_after, timeout);
        let Some(first) = at.first() else {
            return Ok(None);
        };
        let timer = KickTimer::for_this_thread(signal)?;
        timer.kick_from(first)?;
        Ok(Some(Self {
            at,
            snapshot_settled: AtomicBool::new(false),
            timeout_seen: AtomicBool::new(false),
            timer,
        }))
    }

    /// The request that is due now, if any: the timeout before the
    /// snapshot (the timeout also applies to writing the snapshot).
    pub fn due(&self) -> Option<Due> {
        let pending = !self.snapshot_settled.load(Ordering::Relaxed);
        let due = self.at.passed(Instant::now(), pending);
        if due == Some(Due::Timeout) {
            self.timeout_seen.store(true, Ordering::Relaxed);
        }
        due
    }

    /// The snapshot request was dealt with and the guest goes on: stop
    /// kicking until the timeout, if there is one.
    pub fn settle_snapshot(&self) {
        if self.snapshot_settled.swap(true, Ordering::Relaxed) {
            return;
        }
        // A failure leaves the timer repeating: extra EINTRs, which the
        // vCPU loop takes as "ask again", never a missed stop.
        let _ = match self.at.timeout {
            Some(t) => self.timer.kick_from(t),
            None => self.timer.disarm(),
        };
    }

    /// The vCPU was told of the timeout.
    pub fn timed_out(&self) -> bool {
        self.timeout_seen.load(Ordering::Relaxed)
    }
}

/// A POSIX timer (`timer_create`, `CLOCK_MONOTONIC`) that signals one
/// thread (`SIGEV_THREAD_ID`); deleted on drop.
#[derive(Debug)]
pub struct KickTimer(libc::timer_t);

// SAFETY: a timer_t is the kernel's timer ID; timer_settime and
// timer_delete may be called on it from any thread of the process.
unsafe impl Send for KickTimer {}
// SAFETY: as above; the methods take `&self` and only make those calls.
unsafe impl Sync for KickTimer {}

impl KickTimer {
    /// A disarmed timer whose expiries send `signal` to the calling thread.
    pub fn for_this_thread(signal: libc::c_int) -> io::Result<Self> {
        // SAFETY: sigevent is plain data; all-zero is a valid start.
        let mut event: libc::sigevent = unsafe { std::mem::zeroed() };
        event.sigev_notify = libc::SIGEV_THREAD_ID;
        event.sigev_signo = signal;
        // The system call, not glibc's `gettid()`: the standard library
        // refers to that symbol weakly, and a statically linked build
        // (`-C target-feature=+crt-static`) then resolved it to address 0
        // and crashed here at the first run with a deadline.
        // SAFETY: SYS_gettid takes no arguments and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        event.sigev_notify_thread_id = tid as libc::pid_t;
        let mut id: libc::timer_t = std::ptr::null_mut();
        // SAFETY: both pointers are to live locals; the kernel copies the
        // event and writes the ID.
        if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut event, &mut id) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self(id))
    }

    /// Fire at `at` (at once if it passed) and every [`KICK_EVERY`] after.
    pub fn kick_from(&self, at: Instant) -> io::Result<()> {
        // A zero it_value disarms: at least a nanosecond.
        let first = at
            .saturating_duration_since(Instant::now())
            .max(Duration::from_nanos(1));
        self.set(timespec(first), timespec(KICK_EVERY))
    }

    /// Fire every `period` from now on.
    pub fn every(&self, period: Duration) -> io::Result<()> {
        let period = period.max(Duration::from_nanos(1));
        self.set(timespec(period), timespec(period))
    }

    /// No more expiries.
    pub fn disarm(&self) -> io::Result<()> {
        self.set(timespec(Duration::ZERO), timespec(Duration::ZERO))
    }

    fn set(&self, value: libc::timespec, interval: libc::timespec) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_interval: interval,
            it_value: value,
        };
        // SAFETY: `self.0` is a live timer of this process; `spec` is a
        // live local the kernel only reads; no old value is asked for.
        if unsafe { libc::timer_settime(self.0, 0, &spec, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for KickTimer {
    fn drop(&mut self) {
        // SAFETY: the timer is this object's and deleted once, here.
        unsafe { libc::timer_delete(self.0) };
    }
}

/// `d` as a `timespec` (durations here are far below `time_t`'s range).
fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(snapshot_ms: Option<u64>, timeout_ms: Option<u64>) -> Option<Schedule> {
        // The timer fires in these tests: its signal must not end them.
        // The one kick handler of the process, as the supervisors install
        // it (with SA_RESTART, which `super::super::stop`'s tests of the
        // same process rely on).
        super::super::stop::install_kick_handler().unwrap();
        let signal = vmm_sys_util::signal::SIGRTMIN();
        Schedule::arm(
            snapshot_ms.map(Duration::from_millis),
            timeout_ms.map(Duration::from_millis),
            signal,
        )
        .unwrap()
    }

    #[test]
    fn no_deadline_no_schedule() {
        assert!(arm(None, None).is_none());
    }

    #[test]
    fn requests_become_due_in_order_and_the_timeout_wins() {
        let s = arm(Some(0), Some(40)).unwrap();
        // The timer fires at once: the handler must exist.
        assert_eq!(s.due(), Some(Due::Snapshot));
        assert!(!s.timed_out());
        s.settle_snapshot();
        assert_eq!(s.due(), None, "settled: only the timeout is left");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(s.due(), Some(Due::Timeout));
        assert!(s.timed_out());
    }

    #[test]
    fn deadlines_pass_timeout_first_and_snapshot_only_while_pending() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let at = DueAt::after(t0, Some(ms(10)), Some(ms(20)));
        assert_eq!(at.first(), Some(t0 + ms(10)));
        assert_eq!(at.passed(t0 + ms(5), true), None);
        assert_eq!(at.passed(t0 + ms(10), true), Some(Due::Snapshot));
        assert_eq!(at.passed(t0 + ms(10), false), None);
        assert_eq!(at.passed(t0 + ms(20), true), Some(Due::Timeout));
        assert_eq!(at.passed(t0 + ms(20), false), Some(Due::Timeout));
        // Only a timeout; a deadline past the clock's range never passes.
        let only = DueAt::after(t0, None, Some(ms(1)));
        assert_eq!(only.first(), Some(t0 + ms(1)));
        assert_eq!(only.passed(t0 + ms(1), true), Some(Due::Timeout));
        let never = DueAt::after(t0, Some(Duration::MAX), None);
        assert_eq!(
            (never.first(), never.passed(t0 + ms(1), true)),
            (None, None)
        );
        assert_eq!(DueAt::after(t0, None, None), DueAt::default());
    }

    #[test]
    fn far_deadlines_are_not_due() {
        let s = arm(Some(600_000), Some(u64::MAX / 2)).unwrap();
        assert_eq!(s.due(), None);
        assert!(!s.timed_out());
    }
}
