//! The progress bar of `vmm bench`: boots done, elapsed time and ETA on
//! stderr, so a benchmark of minutes is not a silent terminal. Hidden when
//! stderr is not a terminal (pipes, CI logs, tests) or with `--quiet`, so
//! stdout (the table or JSON) and captured stderr stay clean.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar counting VM boots.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `len` boots; drawn only when `!quiet` and stderr is a
    /// terminal.
    pub fn new(len: u64, quiet: bool) -> Progress {
        let target = if quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let bar = ProgressBar::with_draw_target(Some(len), target);
        // The template is a constant; should it ever fail to parse the
        // default style is still a working bar.
        if let Ok(style) = ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} boots, ETA {eta} {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.enable_steady_tick(Duration::from_millis(250));
        Progress { bar }
    }

    /// Say what runs now.
    pub fn step(&self, what: String) {
        self.bar
            .set_message(crate::output::terminal::escape_controls(&what).into_owned());
    }

    /// One boot done.
    pub fn inc(&self) {
        self.bar.inc(1);
    }

    /// Change the planned number of boots (after calibration).
    pub fn set_len(&self, len: u64) {
        self.bar.set_length(len);
    }

    /// A line above the bar (nothing when hidden).
    pub fn println(&self, line: String) {
        self.bar
            .println(crate::output::terminal::escape_controls(&line));
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // Erase the bar so the table starts on a clean line.
        self.bar.finish_and_clear();
    }
}
