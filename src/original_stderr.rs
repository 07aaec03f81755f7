//! Where the host log goes when no log file is open: the standard error the process had when
//! malloc debug started, and never a file that takes descriptor 2 later
//! (docs/logging.md, "Hosts: the stderr the process started with").
//!
//! Programs close descriptor 2: coreutils in their exit handlers, before the exit leak report,
//! and daemons when they detach. The next file the program opens then gets number 2. Writing
//! the log to "fd 2" would put reports into that file, a database or the program's output. So
//! `debug_initialize` remembers what descriptor 2 is (device and inode) and, when it has one, its
//! path (a terminal, a regular file or a FIFO; `/proc/self/fd/2`). Each write checks with one
//! `fstat` that descriptor 2 is still that file. When it is not, the log goes to the path opened
//! again (and closed after the write), or, for a pipe or a socket, which has no path, or a FIFO
//! nobody reads any more, nowhere.
//!
//! No duplicate of descriptor 2 is kept open: a forked child that detaches would hold the pipe
//! the program's caller reads, and the caller would wait for an end of file that never comes.

use crate::fmt::StackBuf;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};

/// Before `remember`: descriptor 2 is used as it is (unit tests, messages of a failed start).
const UNKNOWN: u8 = 0;
/// `remember` found descriptor 2 open and recorded it.
const RECORDED: u8 = 1;
/// The process started without a descriptor 2: nothing is written.
const NONE_AT_START: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
static DEV: AtomicU64 = AtomicU64::new(0);
static INO: AtomicU64 = AtomicU64::new(0);

const PATH_MAX: usize = 4096;
/// The path descriptor 2 was opened with, when it has one; written once by `remember` before
/// `STATE` is published, then only read.
struct Path(UnsafeCell<[u8; PATH_MAX]>);
// SAFETY: written only by `remember`, once, before the release store of STATE that readers
// acquire; never written again.
unsafe impl Sync for Path {}
static PATH: Path = Path(UnsafeCell::new([0; PATH_MAX]));
static PATH_LEN: AtomicUsize = AtomicUsize::new(0);

/// Called once by `debug_initialize`, before anything is logged.
pub fn remember() {
    let errno = crate::platform::errno();
    match crate::platform::stat_of(2) {
        None => STATE.store(NONE_AT_START, Ordering::Release),
        Some((dev, ino)) => {
            DEV.store(dev, Ordering::Relaxed);
            INO.store(ino, Ordering::Relaxed);
            // SAFETY: the only writer, before STATE is published (see `Path`).
            let path = unsafe { &mut *PATH.0.get() };
            // SAFETY: NUL-terminated literal; `path` is writable for its length.
            let n = unsafe {
                libc::readlink(
                    c"/proc/self/fd/2".as_ptr(),
                    path.as_mut_ptr().cast(),
                    path.len(),
                )
            };
            // Only a real path can be opened again ("pipe:[…]", "socket:[…]" cannot).
            if n > 0 && (n as usize) < path.len() && path[0] == b'/' {
                PATH_LEN.store(n as usize, Ordering::Relaxed);
            }
            STATE.store(RECORDED, Ordering::Release);
        }
    }
    crate::platform::set_errno(errno);
}

fn is_original(fd: i32) -> bool {
    crate::platform::stat_of(fd) == Some((DEV.load(Ordering::Relaxed), INO.load(Ordering::Relaxed)))
}

/// Writes `bytes` to the original standard error, as the module docs say; errno is kept.
pub fn write(bytes: &[u8]) {
    match STATE.load(Ordering::Acquire) {
        UNKNOWN => {
            crate::platform::write_fd_no_sigpipe(2, bytes);
            return;
        }
        NONE_AT_START => return,
        _ => {}
    }
    let errno = crate::platform::errno();
    if is_original(2) {
        crate::platform::write_fd_no_sigpipe(2, bytes);
    } else if let Some(fd) = reopen() {
        crate::platform::write_fd_no_sigpipe(fd, bytes);
        // SAFETY: the descriptor `reopen` just opened, ours alone.
        unsafe { libc::close(fd) };
    }
    crate::platform::set_errno(errno);
}

/// Opens the remembered path again, at a descriptor of at least 3 (the program's standard
/// numbers stay free), if it is still the original file. Out of line: its path buffer would
/// otherwise take 4 KiB of every log write's stack, and the record file's writer logs from a
/// signal handler on a 16 KiB alternate stack.
#[cold]
#[inline(never)]
fn reopen() -> Option<i32> {
    let len = PATH_LEN.load(Ordering::Relaxed);
    if len == 0 {
        return None;
    }
    // SAFETY: published before STATE (acquired by the caller), never written again.
    let path = unsafe { &(&*PATH.0.get())[..len] };
    let mut c_path = StackBuf::<{ PATH_MAX + 1 }>::new();
    c_path.push_bytes(path);
    // O_NONBLOCK: opening a FIFO whose reader has gone would otherwise wait for ever (it fails
    // with ENXIO instead); writes then block again, as on the original descriptor.
    // SAFETY: a NUL-terminated path on our stack.
    let first = unsafe {
        libc::open(
            c_path.as_c_str(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if first < 0 {
        return None;
    }
    // SAFETY: fcntl on our own descriptor.
    unsafe {
        let flags = libc::fcntl(first, libc::F_GETFL);
        libc::fcntl(first, libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
    let fd = crate::platform::above_stdio(first);
    if fd < 0 {
        return None;
    }
    if is_original(fd) {
        Some(fd)
    } else {
        // SAFETY: our descriptor; the path now names another file.
        unsafe { libc::close(fd) };
        None
    }
}
