//! A progress bar on stderr for long steps, drawn only when stderr is a terminal.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Progress {
    label: &'static str,
    total: u64,
    shown: bool,
    last: Option<Instant>,
}

/// Below this much work no bar is drawn: it would only flicker.
const MIN_TOTAL: u64 = 1 << 20;

impl Progress {
    pub fn new(label: &'static str, total: u64) -> Progress {
        Progress {
            label,
            total,
            shown: total >= MIN_TOTAL && std::io::stderr().is_terminal(),
            last: None,
        }
    }

    pub fn set(&mut self, done: u64) {
        if !self.shown {
            return;
        }
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_millis(100))
        {
            return;
        }
        self.last = Some(now);
        let fraction = (done as f64 / self.total.max(1) as f64).min(1.0);
        let width = 40;
        let filled = (fraction * width as f64) as usize;
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r{:<14} [{}{}] {:5.1}%",
            self.label,
            "#".repeat(filled),
            "-".repeat(width - filled),
            fraction * 100.0
        );
        let _ = err.flush();
    }

    pub fn finish(&mut self) {
        if self.shown && self.last.is_some() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{:70}\r", "");
            let _ = err.flush();
        }
        self.shown = false;
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
