//! Standard output is a file too: a command's result written there, where a
//! reader that went away (`vmm run --json | head`) or a full device is an
//! answer to report, not a panic. `print!` would panic on either (SIGPIPE
//! is ignored, so a closed pipe is an `EPIPE` error), and a panic in `vmm`'s
//! C entry point aborts the process.

use std::io::{self, Write};

/// The exit status of a command whose reader closed the pipe: what a shell
/// reports for a tool SIGPIPE ended (128 + 13), said without a message.
pub const EXIT_CLOSED_PIPE: i32 = 141;

/// Why standard output could not take a command's result.
#[derive(Debug, thiserror::Error)]
pub enum StdoutError {
    /// The reader closed the pipe: nobody is left to read the rest.
    #[error("standard output was closed by its reader")]
    Closed,
    /// Any other write error (a full device, an I/O error).
    #[error("writing standard output: {0}")]
    Io(#[source] io::Error),
}

impl From<io::Error> for StdoutError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::BrokenPipe {
            StdoutError::Closed
        } else {
            StdoutError::Io(e)
        }
    }
}

/// Write `text` to standard output, control characters escaped
/// ([`super::terminal::escape_controls`]: a table or JSON document is
/// unchanged unless a name in it holds one), and flush it.
///
/// # Errors
/// [`StdoutError::Closed`] when the reader went away, [`StdoutError::Io`]
/// for any other write error.
///
/// # Examples
/// ```
/// vmm::internal::cli::stdout::print("").unwrap();
/// ```
pub fn print(text: &str) -> Result<(), StdoutError> {
    write_to(&mut io::stdout().lock(), text)
}

/// [`print()`] into any writer.
///
/// # Errors
/// As [`print()`].
pub fn write_to(w: &mut impl Write, text: &str) -> Result<(), StdoutError> {
    w.write_all(super::terminal::escape_controls(text).as_bytes())?;
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose reader has gone, or whose device is full.
    struct Refusing(io::ErrorKind);

    impl Write for Refusing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(self.0))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_and_a_full_device_are_errors_not_panics() {
        let closed = write_to(&mut Refusing(io::ErrorKind::BrokenPipe), "x");
        assert!(matches!(closed, Err(StdoutError::Closed)), "{closed:?}");
        let full = write_to(&mut Refusing(io::ErrorKind::StorageFull), "x");
        assert!(matches!(full, Err(StdoutError::Io(_))), "{full:?}");
        let mut ok = Vec::new();
        write_to(&mut ok, "table\n").unwrap();
        assert_eq!(ok, b"table\n");
    }
}
