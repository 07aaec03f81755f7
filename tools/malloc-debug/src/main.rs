//! `malloc-debug`: the host side of malloc_debug. Runs programs under the glibc front, turns heap
//! dumps (ours or a device's `am dumpheap -n`) into symbolized text/HTML/flamegraph/pprof reports,
//! diffs two dumps, summarises record_allocs files, and drives adb for device set-up.

#![deny(clippy::undocumented_unsafe_blocks)]

mod annotate;
mod args;
mod cli;
mod device;
mod diff;
mod dump;
mod flamegraph;
mod hostdump;
mod html;
mod logsym;
mod options;
mod pprof;
mod profile;
mod progress;
mod records;
mod report;
mod run;
mod run_gate;
mod run_preflight;
mod symbolize;

use std::process::ExitCode;

/// Every failure the CLI reports: one message, printed as `malloc-debug: MESSAGE`.
#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<lexopt::Error> for Error {
    fn from(e: lexopt::Error) -> Self {
        Error(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// `format!` into an `Error`.
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => { $crate::Error(format!($($arg)*)) };
}

fn main() -> ExitCode {
    match cli::main(std::env::args_os().skip(1).collect()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("malloc-debug: {e}");
            ExitCode::from(2)
        }
    }
}
