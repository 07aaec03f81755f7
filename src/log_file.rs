//! The `log_file=FILE` extension (README "Extensions"): on a host, the log records that would go
//! to stderr go to FILE instead, so the program's own stdout and stderr stay exactly as in a
//! bare run (`malloc-debug run --log-file FILE`).
//!
//! FILE is opened once, by `debug_initialize`, with `O_APPEND` (several processes of one run —
//! a make and its compilers, a parent and its forked children — share it line by line) and
//! `O_CLOEXEC` (an exec'd program opens it again through its own initialisation), at a
//! descriptor of at least 3 so that it never becomes the program's stdin, stdout or stderr.
//!
//! A program may close descriptors it does not know about (daemons close everything above 2)
//! and open something else that gets the same number. Each write therefore checks, with one
//! `fstat`, that the descriptor is still the file opened; if not, the file is opened again by
//! name. The log sink (log.rs) calls [`write_or_stderr`] where it would write to stderr.

use crate::fmt::{Bytes, StackBuf};
use core::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

const NONE: i32 = -1;
/// The open descriptor, or NONE.
static FD: AtomicI32 = AtomicI32::new(NONE);
/// Device and inode of the file opened, to recognise it later.
static DEV: AtomicU64 = AtomicU64::new(0);
static INO: AtomicU64 = AtomicU64::new(0);
/// The path (in the options' copy, which lives as long as the process): address and length.
static PATH: AtomicUsize = AtomicUsize::new(0);
static PATH_LEN: AtomicUsize = AtomicUsize::new(0);
const PATH_MAX: usize = 4096;

/// Called once by `debug_initialize` with the `log_file` option's value (empty: not given).
/// On failure the log stays on stderr and says why.
pub fn open(path: &'static [u8]) {
    if path.is_empty() {
        return;
    }
    PATH.store(path.as_ptr() as usize, Ordering::Relaxed);
    PATH_LEN.store(path.len(), Ordering::Release);
    if reopen().is_none() {
        let errno = crate::platform::errno();
        let mut msg = StackBuf::<{ PATH_MAX + 128 }>::new();
        let _ = core::fmt::write(
            &mut msg,
            format_args!(
                "log_file: cannot open {}: {}\n",
                Bytes(path),
                crate::errors::strerror(errno)
            ),
        );
        crate::original_stderr::write(msg.as_bytes());
    }
}

/// Undoes [`open`] for a `debug_initialize` that gives up later: the log goes back to stderr,
/// and the path (in the options' copy, which the failed initialisation frees) is forgotten.
pub fn close() {
    PATH_LEN.store(0, Ordering::Release);
    PATH.store(0, Ordering::Relaxed);
    let fd = FD.swap(NONE, Ordering::AcqRel);
    if fd != NONE && is_ours(fd) {
        // SAFETY: the descriptor `open` opened, still ours (same device and inode).
        unsafe { libc::close(fd) };
    }
}

/// The log sink's host output: to the log file when one is open, else to the standard error
/// the process started with (src/original_stderr.rs).
pub fn write_or_stderr(bytes: &[u8]) {
    let fd = FD.load(Ordering::Acquire);
    if fd == NONE {
        crate::original_stderr::write(bytes);
        return;
    }
    // Logging happens inside the program's calls, which must leave errno alone.
    let errno = crate::platform::errno();
    let fd = if is_ours(fd) { Some(fd) } else { reopen() };
    match fd {
        Some(fd) => {
            crate::platform::write_fd(fd, bytes);
        }
        // Gone and cannot be opened again (deleted directory, no descriptors left): stderr is
        // better than losing a report.
        None => crate::original_stderr::write(bytes),
    }
    crate::platform::set_errno(errno);
}

fn is_ours(fd: i32) -> bool {
    crate::platform::stat_of(fd) == Some((DEV.load(Ordering::Relaxed), INO.load(Ordering::Relaxed)))
}

/// Opens the path (again) at a descriptor >= 3 and publishes it. The errno of a failure is left
/// for the caller's message. Out of line, like original_stderr's: its path buffer must not
/// weigh on every log write's stack.
#[cold]
#[inline(never)]
fn reopen() -> Option<i32> {
    let len = PATH_LEN.load(Ordering::Acquire);
    let addr = PATH.load(Ordering::Relaxed);
    if len == 0 || len >= PATH_MAX {
        return None;
    }
    // SAFETY: the option value stored by `open`, which lives for the process.
    let path = unsafe { core::slice::from_raw_parts(addr as *const u8, len) };
    let mut c_path = StackBuf::<PATH_MAX>::new();
    c_path.push_bytes(path);
    // SAFETY: a NUL-terminated path on our stack.
    let fd = crate::platform::above_stdio(unsafe {
        libc::open(
            c_path.as_c_str(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
            0o644,
        )
    });
    if fd < 0 {
        return None;
    }
    let (dev, ino) = crate::platform::stat_of(fd)?;
    DEV.store(dev, Ordering::Relaxed);
    INO.store(ino, Ordering::Relaxed);
    // The old descriptor is never closed: either the program owns that number now, or another
    // thread reopened at the same moment and may be writing to it (one descriptor leaked, once).
    FD.store(fd, Ordering::Release);
    Some(fd)
}
