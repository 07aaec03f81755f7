//! One record write at a time, without ever waiting in a signal handler (docs/spec/abi.md#writing).
//!
//! The SIGRTMAX-18 handler writes the file itself, on whichever thread the signal lands. Two
//! writes at once (signals on two threads, a signal during the exit write) must not interleave:
//! each would write and consume the same entries. A writer takes `OWNER` with a
//! compare-and-swap; a signal writer that finds it taken only raises `AGAIN`, and the owner,
//! before letting go, writes the signal's file once more for it. So no signal is lost and no
//! handler waits — least of all for a write it interrupted on its own thread. Only the exit
//! write waits for a signal writer on another thread (which never waits for anything).

use super::format::{report, write_file};
use crate::fmt::StackBuf;
use crate::platform;
use crate::state::State;
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The thread id of the thread writing, or 0.
static OWNER: AtomicI32 = AtomicI32::new(0);
/// A signal asked for a write while another was running.
static AGAIN: AtomicBool = AtomicBool::new(false);

fn try_own(tid: i32) -> bool {
    OWNER
        .compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

/// Writes the signal's file for every request raised meanwhile, then lets go; takes over again
/// if a request slipped in between the last check and the release.
fn write_requested_and_release(state: &State, tid: i32) {
    loop {
        while AGAIN.swap(false, Ordering::AcqRel) {
            let file = state.config.record_allocs_file;
            report(write_file(file, b""), file, b"");
        }
        OWNER.store(0, Ordering::Release);
        if !AGAIN.load(Ordering::Acquire) || !try_own(tid) {
            return;
        }
    }
}

/// The SIGRTMAX-18 handler's work: the records to the record file, now. Async-signal-safe: no
/// allocation, no lock, no wait; errno is left as the interrupted code had it.
pub fn on_signal() {
    let saved_errno = platform::errno();
    if let Some(state) = crate::state::get() {
        // Anything the write's calls allocate goes to the native allocator, unrecorded.
        let _foreign = crate::sync::DisabledScope::enter();
        AGAIN.store(true, Ordering::Release);
        let tid = platform::gettid();
        if try_own(tid) {
            write_requested_and_release(state, tid);
        }
    }
    platform::set_errno(saved_errno);
}

/// At exit with record_allocs_on_exit: `<record file>.<pid>` (docs/spec/abi.md#writing). Waits for
/// a signal writer on another thread; a write this thread was doing when it was interrupted (a
/// handler that calls exit) will never finish, so the exit write is skipped rather than waiting for
/// it.
pub fn write_at_exit(state: &State) {
    let tid = platform::gettid();
    while !try_own(tid) {
        if OWNER.load(Ordering::Relaxed) == tid {
            return;
        }
        // SAFETY: no preconditions.
        unsafe { libc::sched_yield() };
    }
    let mut suffix = StackBuf::<16>::new();
    let _ = write!(suffix, ".{}", platform::getpid());
    let file = state.config.record_allocs_file;
    report(write_file(file, suffix.as_bytes()), file, suffix.as_bytes());
    write_requested_and_release(state, tid);
}

/// Fork child: a write another thread was doing will never end here.
pub fn reset_in_child() {
    OWNER.store(0, Ordering::Relaxed);
    AGAIN.store(false, Ordering::Relaxed);
}
