//! The loader quarantine of fork children.
//!
//! `fork` copies only the calling thread. If another thread of the parent held the dynamic
//! loader's lock at that moment (inside `dlopen`, `dlclose` or `dl_iterate_phdr`), the child
//! inherits the lock held by a thread that no longer exists: neither glibc nor bionic resets the
//! lock `dl_iterate_phdr` takes, so the child's first call blocks forever. A bare child that
//! never calls the loader runs; the unwinder calls it on its cache misses (cfi.rs), so it must
//! not in such a child.
//!
//! Whether the lock can be held is decided at fork: the prepare handler counts the parent's
//! threads (`sole_thread`). With one thread — the forking one, which is not inside
//! the loader since it is forking — the child is safe and behaves like any process. Otherwise the
//! child is *quarantined* for its whole life (until it `exec`s): the unwinder never calls the
//! loader there and uses only what it recorded of the modules loaded before the library started
//! (never unloaded, so readable without the lock). README.md, "Fork children", says what that
//! costs: frames in code loaded later end the child's backtraces.
//!
//! A thread started between the count and the fork can only be started by another thread, which
//! the count saw; a thread that ends in between makes a child quarantined needlessly, never the
//! other way round.

use core::sync::atomic::{AtomicBool, Ordering};

/// Set in the child of a fork whose parent had other threads.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The prepare handler's verdict, read by the child handler.
static PARENT_HAD_OTHER_THREADS: AtomicBool = AtomicBool::new(true);
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// Whether this process is a quarantined fork child: no call into the dynamic loader. Besides
/// the unwinder (cfi.rs, walk.rs), symbolisation must not call `dladdr` or `dlsym` then: bionic's
/// take the same lock (glibc's take one that fork resets).
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Registers the fork handlers once per process (from `startup`).
pub fn register() {
    if REGISTERED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: plain functions that live as long as the process.
    unsafe { libc::pthread_atfork(Some(prepare), None, Some(child)) };
}

extern "C" fn prepare() {
    // The handler runs inside `fork`, which leaves errno alone when it succeeds.
    let saved = crate::platform::errno();
    let sole = sole_thread();
    PARENT_HAD_OTHER_THREADS.store(!sole, Ordering::Relaxed);
    crate::platform::set_errno(saved);
}

extern "C" fn child() {
    if PARENT_HAD_OTHER_THREADS.load(Ordering::Relaxed) {
        ACTIVE.store(true, Ordering::Relaxed);
    }
}

/// Whether this process has one thread. procfs gives `/proc/self/task` two links plus one per
/// thread (one `stat`, a quarter of the cost of reading `/proc/self/stat`, whose generation
/// dominates a fork handler otherwise); any other link count than 3 or more is not trusted and
/// the documented count is read instead. Unknown counts as "not alone".
fn sole_thread() -> bool {
    // SAFETY: an all-zero `stat` is a valid value to overwrite.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: a NUL-terminated literal path and a valid out-pointer.
    if unsafe { libc::stat(c"/proc/self/task".as_ptr(), &mut st) } == 0 && st.st_nlink >= 3 {
        return st.st_nlink == 3;
    }
    thread_count() == Some(1)
}

/// The number of threads of this process (`num_threads` of `/proc/self/stat`), or `None` when
/// it cannot be read. Two system calls and a read into a stack buffer: no allocation, no lock.
fn thread_count() -> Option<u64> {
    let mut buf = [0u8; 512];
    // SAFETY: a NUL-terminated literal path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c"/proc/self/stat".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: reads at most buf.len() bytes into buf.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: fd was opened above and is not used afterwards.
    unsafe { libc::close(fd) };
    let text = buf.get(..usize::try_from(n).ok()?)?;
    parse_thread_count(text)
}

/// Field 20 of a `/proc/PID/stat` line. The command name (field 2, in parentheses) may contain
/// spaces and parentheses: fields are counted after its last `)`. `None` unless the field is
/// followed by a space (a cut-off number is not trusted).
fn parse_thread_count(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    // After ")": " state ppid ... num_threads " — num_threads is the 18th field from there.
    let rest = stat.get(close + 2..)?;
    let mut fields = rest.split(|&b| b == b' ');
    let field = fields.nth(17)?;
    fields.next()?;
    if field.is_empty() || !field.iter().all(u8::is_ascii_digit) {
        return None;
    }
    field.iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_thread_count() {
        let line = b"1234 (a b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 7 0 555 \
                     1000 50 18446744073709551615";
        assert_eq!(parse_thread_count(line), Some(7));
        // Cut off right after the field, or before it.
        let end = line.windows(3).position(|w| w == b" 7 ").unwrap() + 2;
        assert_eq!(parse_thread_count(&line[..end]), None);
        assert_eq!(parse_thread_count(b"1 (x) S 1 2"), None);
        assert_eq!(parse_thread_count(b"no parenthesis"), None);
    }

    #[test]
    fn counts_this_process_threads() {
        let before = thread_count().expect("/proc/self/stat");
        assert!(before >= 1);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || rx.recv().ok());
        assert!(thread_count().unwrap() >= 2);
        // The test harness has several threads, and now one more.
        assert!(!sole_thread());
        drop(tx);
        t.join().unwrap();
    }

    #[test]
    fn a_process_alone_is_seen_alone() {
        // A fork child of this multi-threaded test process has one thread.
        // SAFETY: the child only calls the function under test and _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = sole_thread() && thread_count() == Some(1);
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
}
