//! Stopping a running vCPU from outside: why it is asked to stop
//! ([`StopReason`], shared through a [`StopFlag`]) and the supervisors
//! that kick vCPU threads out of `KVM_RUN` with a signal when a deadline
//! passes.
//!
//! A vCPU thread blocked in `KVM_RUN` only notices a request when `KVM_RUN`
//! returns; a signal with a no-op handler makes it return `EINTR`. A signal
//! landing outside `KVM_RUN` is lost, so the supervisor repeats it until the
//! thread finishes.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use vmm_sys_util::signal::{Killable, SIGRTMIN};

use super::deadline::{Due, DueAt, KickTimer, Schedule};
use crate::error::{Result, VcpuError};

/// Why the VMM interrupts the vCPU thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum StopReason {
    /// The run's time limit passed: stop, the run timed out.
    Timeout = 1,
    /// `--snapshot-after` passed: write a snapshot and stop.
    Snapshot = 2,
    /// Another vCPU ended the run (exit, crash, exception, violation):
    /// stop without an end of this vCPU's own.
    Peer = 3,
}

/// A [`StopReason`] the supervisor sets, or a deadline's when it passed,
/// which the vCPU thread polls between exits.
#[derive(Debug, Default)]
pub struct StopFlag {
    /// A request made by someone: [`StopReason`] as a number, 0 for none.
    request: AtomicU8,
    /// Deadlines that become requests by themselves ([`supervise`]).
    schedule: Option<Schedule>,
    /// Rounds of the halt watch's kicks so far (see [`super::halt`]):
    /// bumped by [`supervise_all_with`] before each round.
    watch_round: AtomicU64,
}

impl StopFlag {
    /// No stop requested.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask the vCPU thread to stop, replacing an earlier reason.
    pub fn request(&self, why: StopReason) {
        self.request.store(why as u8, Ordering::SeqCst);
    }

    /// The vCPU thread dealt with a snapshot request without ending the run
    /// (the file could not be written and the guest went on): clear it,
    /// unless a timeout replaced it meanwhile.
    pub fn snapshot_done(&self) {
        let _ = self.request.compare_exchange(
            StopReason::Snapshot as u8,
            0,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        if let Some(s) = &self.schedule {
            s.settle_snapshot();
        }
    }

    /// The halt watch's round: a vCPU thread that finds it changed since
    /// its last look was kicked to look again.
    pub fn watch_round(&self) -> u64 {
        self.watch_round.load(Ordering::SeqCst)
    }

    /// The pending request, if any: one made, else a deadline that passed.
    pub fn requested(&self) -> Option<StopReason> {
        match self.request.load(Ordering::Relaxed) {
            1 => Some(StopReason::Timeout),
            2 => Some(StopReason::Snapshot),
            3 => Some(StopReason::Peer),
            _ => match self.schedule.as_ref().and_then(Schedule::due) {
                Some(Due::Timeout) => Some(StopReason::Timeout),
                Some(Due::Snapshot) => Some(StopReason::Snapshot),
                None => None,
            },
        }
    }
}

/// When the supervisor stops the vCPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct Deadlines {
    /// Stop and report a timeout after this long.
    pub timeout: Option<Duration>,
    /// Stop for a snapshot after this long (only when one can be written).
    pub snapshot_after: Option<Duration>,
    /// Kick the vCPUs this often so that each looks whether it waits with
    /// nothing to wake it ([`super::halt`]); `None` where a halt cannot
    /// stay in KVM (no in-kernel LAPIC).
    pub watch_every: Option<Duration>,
}

/// What a supervised vCPU thread returned.
pub struct Supervised<R> {
    /// The thread's result.
    pub value: R,
    /// The time limit passed (even if the thread then ended otherwise).
    pub timed_out: bool,
}

extern "C" fn kick_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

fn kick_signal() -> libc::c_int {
    SIGRTMIN()
}

/// Install the no-op handler of the kick signal: its only job is to make
/// `KVM_RUN` return `EINTR` (the signal's default action would end the
/// process).
///
/// With `SA_RESTART`: the halt watch kicks a vCPU thread every
/// [`super::halt::WATCH_EVERY`] wherever it is, and a kick that lands in
/// another system call of that thread (a snapshot's write, a wait for the
/// native worker) must restart it rather than fail it with `EINTR`.
/// `KVM_RUN` itself is never restarted: KVM returns a plain `EINTR` for
/// a pending signal, which `SA_RESTART` does not cover.
///
/// One `sigaction` call, not `vmm_sys_util`'s `register_signal_handler`
/// (which sets `SA_SIGINFO` alone) followed by a second call adding the
/// flag: between the two, a kick (another run's, or another test's in the
/// same process) would find the handler without `SA_RESTART`.
pub(crate) fn install_kick_handler() -> Result<()> {
    let failed = || VcpuError::KickHandler(vmm_sys_util::errno::Error::last());
    // SAFETY: sigaction is plain data; all-zero is a valid start, and
    // sigfillset only writes the live local set it is given.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::sigfillset(&mut act.sa_mask) } != 0 {
        return Err(failed().into());
    }
    act.sa_sigaction = kick_handler as *const () as libc::sighandler_t;
    act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: `act` names a handler that does nothing (async-signal-safe)
    // for a real-time signal this process uses for kicks only; the kernel
    // copies `act`, and no old action is asked for.
    if unsafe { libc::sigaction(kick_signal(), &act, std::ptr::null_mut()) } != 0 {
        return Err(failed().into());
    }
    Ok(())
}

/// Kick thread `tid` of this process out of `KVM_RUN` (the handler must be
/// installed, [`install_kick_handler`]): how a restore's pager stops the
/// vCPUs when a page fails. A thread that has gone is no error.
pub(crate) fn kick_thread(tid: libc::pid_t) {
    // SAFETY: tgkill sends a signal whose handler is a no-op to one thread
    // of this very process (getpid); no memory is passed.
    unsafe {
        libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, kick_signal());
    }
}

/// Run `body` (the vCPU loop) on this thread; its [`StopFlag`] asks it to
/// stop when the first deadline passes, and a timer kicks it out of
/// `KVM_RUN` from then on (see [`super::deadline`], which says why no
/// thread watches the clock). After a snapshot is due, the timeout still
/// applies to writing it.
pub fn supervise<R>(
    deadlines: Deadlines,
    body: impl FnOnce(&StopFlag) -> R,
) -> Result<Supervised<R>> {
    if deadlines.timeout.is_some()
        || deadlines.snapshot_after.is_some()
        || deadlines.watch_every.is_some()
    {
        install_kick_handler()?;
    }
    let stop = StopFlag {
        request: AtomicU8::new(0),
        schedule: Schedule::arm(deadlines.snapshot_after, deadlines.timeout, kick_signal())
            .map_err(VcpuError::Timer)?,
        watch_round: AtomicU64::new(0),
    };
    // The halt watch: a second timer, repeating, so a kick lost outside
    // KVM_RUN only delays the next look (every kick is a look here).
    let _watch = match deadlines.watch_every {
        Some(every) => {
            let timer = KickTimer::for_this_thread(kick_signal()).map_err(VcpuError::Timer)?;
            timer.every(every).map_err(VcpuError::Timer)?;
            Some(timer)
        }
        None => None,
    };
    // A panic in the vCPU loop is the error it was on a thread of its own,
    // not the end of the process.
    let value = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&stop)));
    let timed_out = stop.schedule.as_ref().is_some_and(Schedule::timed_out);
    // Deletes the timer: nothing kicks this thread any more.
    drop(stop);
    let value = value.map_err(|_| VcpuError::ThreadPanicked)?;
    Ok(Supervised { value, timed_out })
}

/// One vCPU thread's body for [`supervise_all_with`].
pub type VcpuBody<R> = Box<dyn FnOnce(&StopFlag) -> R + Send>;

/// Run one body per vCPU, each on its own thread (`vcpu0`, `vcpu1`, ...),
/// until one of them ends the run: the first thread to finish with a
/// result `ends_run` accepts stops all the others ([`StopReason::Peer`],
/// kicked out of `KVM_RUN` until they finish); the timeout stops all of
/// them ([`StopReason::Timeout`]). Returns every thread's result, in vCPU
/// order, and the index of the vCPU that ended the run (`None` when only
/// the timeout did).
///
/// When `deadlines.snapshot_after` passes first, every thread is asked to stop
/// for a snapshot ([`StopReason::Snapshot`]) and kicked out of `KVM_RUN`
/// until all have returned: the consistent point at which the caller
/// saves the whole machine. The timeout still applies meanwhile (it
/// replaces the request).
pub fn supervise_all_with<R: Send + 'static>(
    deadlines: Deadlines,
    bodies: Vec<VcpuBody<R>>,
    ends_run: impl Fn(&R) -> bool,
) -> Result<(Vec<R>, Option<usize>, bool)> {
    let Deadlines {
        timeout,
        snapshot_after,
        watch_every,
    } = deadlines;
    install_kick_handler()?;
    let stop = Arc::new(StopFlag::new());
    let (tx, rx) = mpsc::channel::<usize>();
    let n = bodies.len();
    let mut handles = spawn_vcpus(bodies, &stop, tx)?;
    let mut results: Vec<Option<R>> = (0..n).map(|_| None).collect();
    let at = DueAt::after(Instant::now(), snapshot_after, timeout);
    let mut ended_by = None;
    let mut timed_out = false;
    let mut done = 0;
    let mut next_watch = watch_every.and_then(|every| Instant::now().checked_add(every));
    while done < n {
        let wait = if stop.requested().is_some() {
            // Stopping: kick again every 1 ms until all threads are out. A
            // kick that lands between a thread's look at the stop flag and
            // its next KVM_RUN is lost, and a vCPU parked in HLT stays in
            // KVM_RUN until the next one: this bounds that wait (it was
            // 10 ms); a kick costs one tgkill.
            Duration::from_millis(1)
        } else {
            [at.first(), next_watch]
                .into_iter()
                .flatten()
                .min()
                .map_or(Duration::from_secs(3600), |d| {
                    d.saturating_duration_since(Instant::now())
                })
        };
        let mut watch_now = false;
        match rx.recv_timeout(wait) {
            Ok(i) => {
                let handle = handles[i].take().ok_or(VcpuError::ThreadPanicked)?;
                let value = handle.join().map_err(|_| VcpuError::ThreadPanicked)?;
                done += 1;
                if stop.requested().is_none() && ends_run(&value) {
                    ended_by = Some(i);
                    stop.request(StopReason::Peer);
                }
                results[i] = Some(value);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // The timeout replaces a snapshot request, never a stop
                // that a vCPU's own end (Peer) or the timeout made.
                let requested = stop.requested();
                match at.passed(Instant::now(), requested.is_none()) {
                    Some(Due::Timeout)
                        if !matches!(requested, Some(StopReason::Timeout | StopReason::Peer)) =>
                    {
                        timed_out = true;
                        stop.request(StopReason::Timeout);
                    }
                    Some(Due::Snapshot) => stop.request(StopReason::Snapshot),
                    _ => {}
                }
                // A watch round: every vCPU looks once whether it waits.
                let now = Instant::now();
                if let (Some(at), Some(every)) = (next_watch, watch_every) {
                    if now >= at && stop.requested().is_none() {
                        stop.watch_round.fetch_add(1, Ordering::SeqCst);
                        watch_now = true;
                        next_watch = now.checked_add(every);
                    }
                }
            }
        }
        if stop.requested().is_some() || watch_now {
            for h in handles.iter().flatten() {
                if !h.is_finished() {
                    let _ = h.kill(kick_signal());
                }
            }
        }
    }
    // A thread that panicked dropped its sender without a result.
    for h in handles.iter_mut() {
        if let Some(h) = h.take() {
            h.join().map_err(|_| VcpuError::ThreadPanicked)?;
        }
    }
    let results = results
        .into_iter()
        .map(|r| r.ok_or(VcpuError::ThreadPanicked))
        .collect::<std::result::Result<Vec<R>, _>>()?;
    Ok((results, ended_by, timed_out))
}

/// Spawns one thread per vCPU body, the last vCPU's first; each sends its
/// index on `tx` when its body returns. Returns the threads' handles in
/// vCPU order (`tx` is dropped here: the receiver sees the end once every
/// thread has sent or died).
fn spawn_vcpus<R: Send + 'static>(
    bodies: Vec<VcpuBody<R>>,
    stop: &Arc<StopFlag>,
    tx: mpsc::Sender<usize>,
) -> Result<Vec<Option<std::thread::JoinHandle<R>>>> {
    let mut handles: Vec<Option<std::thread::JoinHandle<R>>> =
        (0..bodies.len()).map(|_| None).collect();
    // The last vCPU's thread first, vCPU 0's last: an AP's thread only
    // blocks in KVM until the boot processor's SIPI reaches it, while
    // vCPU 0 runs (and then spins at CPL3 waiting for the APs) from its
    // first instant. Spawned first, vCPU 0's thread could take the CPU
    // the spawning thread and then the APs' threads need: on the 2-core
    // development host under load the AP's thread started 6-16 ms after
    // vCPU 0's (`smp.vcpus[].phases`), all of it on the boot's path.
    for (i, body) in bodies.into_iter().enumerate().rev() {
        let tx = tx.clone();
        let thread_stop = stop.clone();
        let handle = std::thread::Builder::new()
            .name(format!("vcpu{i}"))
            .spawn(move || {
                let value = body(&thread_stop);
                let _ = tx.send(i);
                value
            })
            .map_err(VcpuError::Spawn)?;
        handles[i] = Some(handle);
    }
    Ok(handles)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_round_trips_every_reason() {
        let f = StopFlag::new();
        assert_eq!(f.requested(), None);
        for r in [StopReason::Snapshot, StopReason::Timeout, StopReason::Peer] {
            f.request(r);
            assert_eq!(f.requested(), Some(r));
        }
    }

    #[test]
    fn without_deadlines_the_body_runs_here() {
        let here = std::thread::current().id();
        let s = supervise(Deadlines::default(), move |stop| {
            assert_eq!(stop.requested(), None);
            std::thread::current().id() == here
        })
        .unwrap();
        assert!(s.value && !s.timed_out);
    }

    fn wait_for_request(stop: &StopFlag) -> StopReason {
        loop {
            if let Some(why) = stop.requested() {
                return why;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn with_a_deadline_the_body_still_runs_here_and_is_stopped() {
        let here = std::thread::current().id();
        let deadlines = Deadlines {
            timeout: Some(Duration::from_millis(20)),
            snapshot_after: None,
            watch_every: None,
        };
        let s = supervise(deadlines, move |stop| {
            (std::thread::current().id() == here, wait_for_request(stop))
        })
        .unwrap();
        assert_eq!(s.value, (true, StopReason::Timeout));
        assert!(s.timed_out);
    }

    #[test]
    fn a_body_that_ends_first_is_not_timed_out() {
        let deadlines = Deadlines {
            timeout: Some(Duration::from_secs(600)),
            snapshot_after: Some(Duration::from_secs(300)),
            watch_every: None,
        };
        let begin = Instant::now();
        let s = supervise(deadlines, |stop| stop.requested()).unwrap();
        assert_eq!(s.value, None);
        assert!(!s.timed_out);
        // The deadline thread is not waited for.
        assert!(begin.elapsed() < Duration::from_secs(60));
    }

    #[test]
    fn an_unwritten_snapshot_leaves_the_timeout_in_force() {
        let deadlines = Deadlines {
            timeout: Some(Duration::from_millis(80)),
            snapshot_after: Some(Duration::from_millis(10)),
            watch_every: None,
        };
        let s = supervise(deadlines, |stop| {
            let first = wait_for_request(stop);
            // The file could not be written: the guest goes on.
            stop.snapshot_done();
            (first, wait_for_request(stop))
        })
        .unwrap();
        assert_eq!(s.value, (StopReason::Snapshot, StopReason::Timeout));
        assert!(s.timed_out);
    }

    /// The halt watch's timer kicks the body's thread every period, and
    /// with `SA_RESTART` a kick restarts the other system calls it lands
    /// in: a blocking read across many kicks returns its data, where
    /// without the flag it failed with `EINTR`.
    #[test]
    fn watch_kicks_interrupt_a_pause_and_restart_a_read() {
        let deadlines = Deadlines {
            watch_every: Some(Duration::from_millis(2)),
            ..Deadlines::default()
        };
        let (mut reader, mut writer) = std::io::pipe().unwrap();
        let writes = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            std::io::Write::write_all(&mut writer, b"x").unwrap();
        });
        let s = supervise(deadlines, move |_| {
            // SAFETY: pause only waits for a signal.
            let paused = unsafe { libc::pause() };
            let mut byte = [0u8; 1];
            // One read(2), as a vCPU thread's other system calls are.
            let read = std::io::Read::read(&mut reader, &mut byte).map_err(|e| e.kind());
            (paused, read, byte)
        })
        .unwrap();
        writes.join().unwrap();
        assert_eq!(s.value, (-1, Ok(1), *b"x"));
    }

    #[test]
    fn a_panicking_body_is_an_error_not_a_crash() {
        let deadlines = Deadlines {
            timeout: Some(Duration::from_secs(600)),
            snapshot_after: None,
            watch_every: None,
        };
        let e = supervise(deadlines, |_| -> u32 { panic!("a bug in the vCPU loop") })
            .err()
            .expect("an error");
        assert!(
            matches!(e, crate::error::Error::Vcpu(VcpuError::ThreadPanicked)),
            "{e}"
        );
    }
}

#[cfg(test)]
mod all_tests {
    use super::*;

    fn timeout(ms: u64) -> Deadlines {
        Deadlines {
            timeout: Some(Duration::from_millis(ms)),
            snapshot_after: None,
            watch_every: None,
        }
    }

    /// Each watch round bumps the round and kicks every thread; without a
    /// watch the round stays 0.
    #[test]
    fn watch_rounds_kick_every_thread() {
        let wait_for_round = |stop: &StopFlag| {
            while stop.watch_round() < 3 {
                // SAFETY: pause only waits for a signal: the round's kick.
                unsafe { libc::pause() };
            }
            stop.watch_round()
        };
        let bodies: Vec<VcpuBody<u64>> = vec![Box::new(wait_for_round), Box::new(wait_for_round)];
        let deadlines = Deadlines {
            watch_every: Some(Duration::from_millis(2)),
            ..timeout(600_000)
        };
        let (values, _, timed_out) = supervise_all_with(deadlines, bodies, |_| false).unwrap();
        assert!(values.iter().all(|&r| r >= 3), "{values:?}");
        assert!(!timed_out);
        let bodies: Vec<VcpuBody<u64>> = vec![Box::new(|stop: &StopFlag| stop.watch_round())];
        let (values, _, _) = supervise_all_with(timeout(600_000), bodies, |_| false).unwrap();
        assert_eq!(values, [0]);
    }

    #[test]
    fn the_snapshot_deadline_pauses_every_thread() {
        let spin = |stop: &StopFlag| {
            while stop.requested().is_none() {
                std::thread::sleep(Duration::from_millis(1));
            }
            stop.requested()
        };
        let bodies: Vec<VcpuBody<Option<StopReason>>> = vec![Box::new(spin), Box::new(spin)];
        let deadlines = Deadlines {
            timeout: Some(Duration::from_secs(600)),
            snapshot_after: Some(Duration::from_millis(20)),
            watch_every: None,
        };
        let (values, ended_by, timed_out) =
            supervise_all_with(deadlines, bodies, |_| true).unwrap();
        assert_eq!(values, vec![Some(StopReason::Snapshot); 2]);
        assert_eq!(ended_by, None, "a pause is no thread's end");
        assert!(!timed_out);
    }

    /// The threads are spawned last vCPU first (see the loop's comment):
    /// each body still runs on the thread named for its index and its
    /// result comes back at that index.
    #[test]
    fn threads_spawned_in_reverse_keep_their_index() {
        let name = |_: &StopFlag| std::thread::current().name().map(str::to_string);
        let bodies: Vec<VcpuBody<Option<String>>> =
            vec![Box::new(name), Box::new(name), Box::new(name)];
        let (values, ended_by, timed_out) =
            supervise_all_with(timeout(600_000), bodies, |_| false).unwrap();
        assert_eq!(
            values,
            vec![
                Some("vcpu0".to_string()),
                Some("vcpu1".to_string()),
                Some("vcpu2".to_string())
            ]
        );
        assert_eq!(ended_by, None);
        assert!(!timed_out);
    }

    #[test]
    fn the_first_ending_thread_stops_the_others() {
        let bodies: Vec<VcpuBody<(usize, bool)>> = vec![
            Box::new(|stop: &StopFlag| {
                // Waits for the peer's end, as an AP halted in KVM would.
                while stop.requested().is_none() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                (0, stop.requested() == Some(StopReason::Peer))
            }),
            Box::new(|_: &StopFlag| (1, true)),
        ];
        let (values, ended_by, timed_out) =
            supervise_all_with(timeout(600_000), bodies, |v| v.0 == 1).unwrap();
        assert_eq!(values, vec![(0, true), (1, true)]);
        assert_eq!(ended_by, Some(1));
        assert!(!timed_out);
    }

    #[test]
    fn the_timeout_stops_every_thread() {
        let spin = |stop: &StopFlag| {
            while stop.requested().is_none() {
                std::thread::sleep(Duration::from_millis(1));
            }
            stop.requested()
        };
        let bodies: Vec<VcpuBody<Option<StopReason>>> = vec![Box::new(spin), Box::new(spin)];
        let (values, ended_by, timed_out) =
            supervise_all_with(timeout(50), bodies, |_| false).unwrap();
        assert_eq!(values, vec![Some(StopReason::Timeout); 2]);
        assert_eq!(ended_by, None);
        assert!(timed_out);
    }
}
