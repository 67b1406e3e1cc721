//! A minimal HTTP/1.1 client over a Unix socket, for the peers' API
//! servers (Cloud Hypervisor's `--api-socket`, Firecracker's `--api-sock`).
//!
//! One request per connection, blocking, with one deadline for the whole
//! exchange (every read and write gets only what is left of it, so a server
//! that trickles its answer a byte at a time cannot stretch it): enough to
//! pause, snapshot, restore and resume a VM, without an async runtime (the field's Unix-socket HTTP clients all bring one). The
//! response is read up to its `Content-Length` (absent: no body, as the
//! peers send for `204 No Content`), so a server that keeps the connection
//! open cannot stall it.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The largest response accepted: the peers answer with a few bytes of
/// JSON; a bound keeps a broken server from growing memory.
const MAX_RESPONSE: usize = 1 << 20;

/// How often a socket that does not accept yet is retried.
const CONNECT_RETRY: Duration = Duration::from_millis(2);

/// Why an API request failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The socket did not accept a connection before the deadline.
    #[error("cannot connect to {}: {source}", path.display())]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The last connection error.
        #[source]
        source: std::io::Error,
    },
    /// Sending the request or reading the response failed (or timed out).
    #[error("I/O on the API socket: {0}")]
    Io(#[from] std::io::Error),
    /// The response is not HTTP/1.x as expected.
    #[error("malformed response: {0}")]
    Malformed(String),
    /// The server answered with a non-2xx status.
    #[error("status {code}: {body}")]
    Status {
        /// The HTTP status code.
        code: u16,
        /// The response body (the peer's error message).
        body: String,
    },
}

/// Connect to `sock`, retrying while it does not exist or refuses (a VMM
/// that was just spawned has not bound it yet), until `deadline`.
pub fn connect(sock: &Path, deadline: Instant) -> Result<UnixStream, HttpError> {
    loop {
        match UnixStream::connect(sock) {
            Ok(s) => return Ok(s),
            Err(source) if Instant::now() >= deadline => {
                return Err(HttpError::Connect {
                    path: sock.to_path_buf(),
                    source,
                })
            }
            Err(_) => std::thread::sleep(CONNECT_RETRY),
        }
    }
}

/// Send `method path` with an optional JSON `body` to the server at `sock`
/// and return the response body of a 2xx answer.
pub fn request(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
    deadline: Instant,
) -> Result<String, HttpError> {
    let s = connect(sock, deadline)?;
    let mut s = Deadlined { s: &s, deadline };
    let body = body.unwrap_or("");
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n");
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes())?;
    let (code, text) = read_response(&mut s)?;
    if (200..300).contains(&code) {
        Ok(text)
    } else {
        Err(HttpError::Status { code, body: text })
    }
}

/// A socket whose every read and write may take only what is left until
/// `deadline`; past it, they fail with `TimedOut`.
struct Deadlined<'a> {
    s: &'a UnixStream,
    deadline: Instant,
}

/// The error of a call the deadline cut short.
fn past_deadline() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the API server did not answer before the deadline",
    )
}

/// A socket timeout (Linux reports `SO_RCVTIMEO`/`SO_SNDTIMEO` expiry as
/// `EAGAIN`) said as the deadline it is.
fn named(e: std::io::Error) -> std::io::Error {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => past_deadline(),
        _ => e,
    }
}

impl Deadlined<'_> {
    /// What is left of the deadline, as the socket's timeout for the next
    /// call (never zero, which would mean no timeout).
    fn arm(&self, read: bool) -> std::io::Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(past_deadline());
        }
        if read {
            self.s.set_read_timeout(Some(left))
        } else {
            self.s.set_write_timeout(Some(left))
        }
    }
}

impl Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.arm(true)?;
        (&mut &*self.s).read(buf).map_err(named)
    }
}

impl Write for Deadlined<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.arm(false)?;
        (&mut &*self.s).write(buf).map_err(named)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        (&mut &*self.s).flush()
    }
}

/// Read one response: status line, headers, then `Content-Length` bytes.
pub(crate) fn read_response(r: &mut impl Read) -> Result<(u16, String), HttpError> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        let n = r.read(&mut chunk)?;
        if n == 0 {
            return Err(HttpError::Malformed(format!(
                "connection closed after {} bytes, before the end of the headers",
                buf.len()
            )));
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_RESPONSE {
            return Err(HttpError::Malformed("headers larger than 1 MiB".into()));
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or("");
    let code = match status.split(' ').collect::<Vec<_>>()[..] {
        [v, c, ..] if v.starts_with("HTTP/1.") => c
            .parse::<u16>()
            .map_err(|_| HttpError::Malformed(format!("status line {status:?}")))?,
        _ => return Err(HttpError::Malformed(format!("status line {status:?}"))),
    };
    let mut len = 0usize;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                len = v
                    .trim()
                    .parse()
                    .map_err(|_| HttpError::Malformed(format!("Content-Length {:?}", v.trim())))?;
            }
        }
    }
    if len > MAX_RESPONSE {
        return Err(HttpError::Malformed(format!("body of {len} bytes")));
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = r.read(&mut chunk)?;
        if n == 0 {
            return Err(HttpError::Malformed(format!(
                "connection closed after {} of {len} body bytes",
                body.len()
            )));
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    Ok((code, String::from_utf8_lossy(&body).into_owned()))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_status_and_body_by_content_length() {
        let mut r: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\ncontent-length: 16\r\n\r\n{\"fault\":\"bad\"}\nEXTRA";
        let (code, body) = read_response(&mut r).unwrap();
        assert_eq!(code, 400);
        assert_eq!(body, "{\"fault\":\"bad\"}\n");
        let mut r: &[u8] = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(read_response(&mut r).unwrap(), (204, String::new()));
    }

    #[test]
    fn refuses_what_is_not_http() {
        let mut r: &[u8] = b"SSH-2.0-OpenSSH\r\n\r\n";
        let e = read_response(&mut r).unwrap_err().to_string();
        assert_eq!(e, "malformed response: status line \"SSH-2.0-OpenSSH\"");
        let mut r: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
        let e = read_response(&mut r).unwrap_err().to_string();
        assert_eq!(
            e,
            "malformed response: connection closed after 3 of 10 body bytes"
        );
        let mut r: &[u8] = b"HTTP/1.1 200 OK\r\n";
        assert!(read_response(&mut r)
            .unwrap_err()
            .to_string()
            .contains("before the end of the headers"));
    }

    /// A server that trickles its answer a byte every 100 ms cannot hold the
    /// client past its deadline: every read gets only what is left of it
    /// (issue 37 §6: a slowloris peer held `bench peers` over 120 s).
    #[test]
    fn a_trickling_server_cannot_outlast_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("api.sock");
        let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut got = vec![0u8; 4096];
            let _ = c.read(&mut got);
            for b in b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"
                .iter()
                .cycle()
            {
                if c.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let start = Instant::now();
        let deadline = start + Duration::from_millis(700);
        let e = request(&sock, "GET", "/", None, deadline).unwrap_err();
        let took = start.elapsed();
        assert!(took < Duration::from_secs(3), "held for {took:?}: {e}");
        assert!(
            e.to_string().contains("deadline") || e.to_string().contains("timed out"),
            "{e}"
        );
    }

    #[test]
    fn a_server_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("api.sock");
        let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut got = vec![0u8; 4096];
            let n = c.read(&mut got).unwrap();
            c.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap();
            String::from_utf8_lossy(&got[..n]).into_owned()
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let body = request(&sock, "PUT", "/api/v1/vm.pause", Some("{}"), deadline).unwrap();
        assert_eq!(body, "");
        let req = server.join().unwrap();
        assert!(
            req.starts_with("PUT /api/v1/vm.pause HTTP/1.1\r\n"),
            "{req}"
        );
        assert!(req.ends_with("Content-Length: 2\r\n\r\n{}"), "{req}");
    }
}
