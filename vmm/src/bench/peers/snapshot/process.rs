//! The processes of a cycle: spawning a VMM with its console in a log,
//! waiting for its guest to run (or for it to end), its API requests, and
//! the check that a restored guest finished its normal run.

use std::ffi::OsString;
use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{released_line, waiting_line, CycleError};
use crate::bench::peers::http;
use crate::bench::peers::model::{tail_text, PeerError, POLL};
use crate::features::guest_log::GuestRecord;
use guest::protocol::SnapshotPhase;

pub(super) fn scratch(path: &Path) -> impl FnOnce(std::io::Error) -> PeerError + '_ {
    move |source| PeerError::Scratch {
        path: path.to_path_buf(),
        source,
    }
}

/// Spawn `binary args` with stdout and stderr to files `log` and
/// `log.stderr`, stdin null.
pub(super) fn spawn(binary: &Path, args: &[OsString], log: &Path) -> Result<Child, PeerError> {
    spawn_with_stdin(binary, args, log, Stdio::null())
}

/// [`spawn`] with `stdin` as its standard input (the guest's serial input).
pub(super) fn spawn_with_stdin(
    binary: &Path,
    args: &[OsString],
    log: &Path,
    stdin: Stdio,
) -> Result<Child, PeerError> {
    let out = File::create(log).map_err(scratch(log))?;
    let err_log = log.with_extension("stderr");
    let err = File::create(&err_log).map_err(scratch(&err_log))?;
    Command::new(binary)
        .args(args)
        .stdin(stdin)
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|source| PeerError::Spawn {
            binary: binary.to_path_buf(),
            source,
        })
}

/// Wait for `child` until `deadline`; killed (and an error) past it.
pub(super) fn wait(
    child: &mut Child,
    binary: &Path,
    deadline: Instant,
    timeout: Duration,
) -> Result<ExitStatus, PeerError> {
    loop {
        if let Some(s) = child.try_wait().map_err(|source| PeerError::Wait {
            binary: binary.to_path_buf(),
            source,
        })? {
            return Ok(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(PeerError::Timeout {
                secs: timeout.as_secs(),
            });
        }
        std::thread::sleep(POLL);
    }
}

/// Kills a child when dropped: a failed cycle leaves no VMM behind.
pub(super) struct Reaper(pub(super) Option<Child>);

impl Reaper {
    pub(super) fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("a child until dropped")
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Wait until the guest is at its snapshot point `point`: `log` holds
/// its waiting line (the guest then polls COM1 for up to a minute). The
/// child must not end first.
pub(super) fn wait_at_point(
    child: &mut Child,
    log: &Path,
    point: SnapshotPhase,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), CycleError> {
    let line = waiting_line(point);
    loop {
        let bytes = std::fs::read(log).map_err(scratch(log))?;
        if contains(&bytes, line.as_bytes()) {
            return Ok(());
        }
        if let Ok(Some(s)) = child.try_wait() {
            return Err(CycleError::Vmm(format!(
                "ended ({s}) before its guest reached its snapshot point; serial log tail: {:?}",
                tail_text(&bytes)
            )));
        }
        if Instant::now() >= deadline {
            return Err(CycleError::NotAtPoint {
                line,
                secs: timeout.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

pub(super) fn api(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
    deadline: Instant,
) -> Result<(), CycleError> {
    http::request(sock, method, path, body, deadline)
        .map(|_| ())
        .map_err(|source| CycleError::Api {
            request: format!("{method} {path}"),
            source,
        })
}

/// The restored run's end: status 0, the guest released at `point`, and
/// a valid record in `log` with every check passing.
pub(super) fn check_restored(
    status: ExitStatus,
    log: &Path,
    point: SnapshotPhase,
) -> Result<(), CycleError> {
    let bytes = std::fs::read(log).map_err(scratch(log))?;
    let stderr = std::fs::read(log.with_extension("stderr")).unwrap_or_default();
    if !status.success() {
        return Err(CycleError::Restored(format!(
            "{status}; serial log tail: {:?}; stderr tail: {:?}",
            tail_text(&bytes),
            tail_text(&stderr)
        )));
    }
    let released = released_line(point);
    if !contains(&bytes, released.as_bytes()) {
        return Err(CycleError::NotReleased {
            line: released.trim_end().to_string(),
            log_tail: tail_text(&bytes),
        });
    }
    let record = GuestRecord::parse(log, &bytes).map_err(|e| {
        CycleError::Restored(format!("{e}; serial log tail: {:?}", tail_text(&bytes)))
    })?;
    let failed: Vec<String> = record
        .report
        .results()
        .iter()
        .filter(|r| r.check != 1)
        .map(|r| guest::protocol::field_str(&r.name).to_string())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CycleError::Restored(format!("checks failed: {failed:?}")))
    }
}

pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(super) fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}
