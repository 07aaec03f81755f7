//! The `error_marker_file=FILE` extension (README "Extensions"): how `malloc-debug run
//! --error-exitcode N` learns that a run reported something, without touching the program's
//! exit status, its output or the order of its exit handlers.
//!
//! When a process first reports an error (the end of any error report, failure.rs) it appends
//! `PID error` to FILE; when its exit leak report printed leaks (unsuppressed, of the kinds
//! selected) it appends `PID leaks COUNT`. Each line is one `write` to a file opened with
//! `O_APPEND`, so the processes of one run (a make and its compilers) share the file. The CLI
//! gives every run a fresh FILE and exits with N when the file is not empty once the program has
//! exited. Written at the moment of the error so that a process that dies afterwards (an abort,
//! `_exit`) still counts.

use crate::fmt::StackBuf;
use crate::state::State;
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, Ordering};

static ERROR_MARKED: AtomicBool = AtomicBool::new(false);

/// Called at the end of every error report.
pub fn error_reported(state: &State) {
    if !state.config.error_marker_file.is_empty() && !ERROR_MARKED.swap(true, Ordering::AcqRel) {
        append(state.config.error_marker_file, format_args!("error"));
    }
}

/// Called after the exit leak report with the number of leaks it printed.
pub fn leaks_reported(state: &State, count: usize) {
    if !state.config.error_marker_file.is_empty() && count > 0 {
        append(
            state.config.error_marker_file,
            format_args!("leaks {count}"),
        );
    }
}

fn append(path: &[u8], what: core::fmt::Arguments<'_>) {
    let mut line = StackBuf::<64>::new();
    let _ = writeln!(line, "{} {what}", crate::platform::getpid());
    let mut c_path = StackBuf::<4096>::new();
    c_path.push_bytes(path);
    let errno = crate::platform::errno();
    // SAFETY: a NUL-terminated path on our stack.
    let fd = crate::platform::above_stdio(unsafe {
        libc::open(
            c_path.as_c_str(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
            0o644,
        )
    });
    if fd >= 0 {
        crate::platform::write_fd(fd, line.as_bytes());
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
    }
    // The report goes on whatever happened here; the caller's errno is not ours to change.
    crate::platform::set_errno(errno);
}
