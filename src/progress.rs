//! Progress on a terminal for long work: a bar (or a spinner when the total is unknown) on
//! standard error with bytes, rate and ETA (in SI units, as every size capsule prints), and a
//! count of packets or segments where the caller knows it. Nothing at all when standard
//! error is not a terminal (logs, pipes, CI), so scripts and tests see only the command's own
//! messages.

use std::io::{Read, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// One progress display; all methods do nothing when it is hidden.
#[derive(Clone)]
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// Progress in bytes towards `total` (a spinner when `None`), labelled `what`.
    pub fn bytes(what: &str, total: Option<u64>) -> Progress {
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return Progress(None);
        }
        let bar = match total {
            Some(t) => ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::stderr()),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
        };
        let template = if total.is_some() {
            "{prefix} [{bar:30}] {decimal_bytes}/{decimal_total_bytes} {decimal_bytes_per_sec} ETA \
             {eta} {msg}"
        } else {
            "{prefix} {spinner} {decimal_bytes} {decimal_bytes_per_sec} {elapsed} {msg}"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress(Some(bar))
    }

    /// A spinner with the time elapsed, labelled `what`, for work whose size is not known
    /// in bytes (`query --count`); hidden, like every display, off a terminal, and when
    /// `hidden` (`--json`).
    pub fn spinner(what: &str, hidden: bool) -> Progress {
        if hidden || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return Progress(None);
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{prefix} {spinner} {elapsed} {msg}") {
            bar.set_style(style);
        }
        bar.set_prefix(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress(Some(bar))
    }

    /// No display at all (`--json`).
    pub fn hidden() -> Progress {
        Progress(None)
    }

    /// Adds `n` bytes done.
    pub fn add(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.inc(n);
        }
    }

    /// Sets the trailing message, e.g. `12,345 packets` or `segment 3 of 9`.
    pub fn message(&self, msg: String) {
        if let Some(b) = &self.0 {
            b.set_message(msg);
        }
    }

    /// Runs `f` (which prints) with the display out of the way, then draws it again.
    pub fn suspend<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.0 {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    /// Removes the display (the command prints its own summary after).
    pub fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }

    /// `r`, counting the bytes read from it.
    pub fn reader<R: Read>(&self, r: R) -> Counting<R> {
        Counting {
            inner: r,
            progress: self.clone(),
        }
    }

    /// `w`, counting the bytes written to it.
    pub fn writer<W: Write>(&self, w: W) -> Counting<W> {
        Counting {
            inner: w,
            progress: self.clone(),
        }
    }
}

/// A reader or writer that reports the bytes through it to a [`Progress`].
pub struct Counting<T> {
    inner: T,
    progress: Progress,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.add(n as u64);
        Ok(n)
    }
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.progress.add(n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
