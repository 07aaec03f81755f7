//! The log sink (docs/spec/errors.md#conventions, docs/logging.md). One call is one log record with
//! tag `malloc_debug`.
//!
//! Android: one datagram per record straight to logd (`logd`), falling back to stderr only when
//! there is no logd. Host: stderr in logcat's "threadtime" layout (`host`): every line of a
//! record carries the prefix, a record goes out in one `write(2)` (several only when it is very
//! long, always at line boundaries), and a long report of one thread can be gathered into 64 KiB
//! writes with [`Batch`]; concurrent records never interleave inside a line.
//! Formatting happens into stack buffers; nothing here allocates or takes a lock, and errno is
//! left as it was (logging happens inside calls that succeed).

mod host;
#[cfg_attr(
    not(target_os = "android"),
    allow(
        dead_code,
        reason = "the host sink is stderr; unit tests drive the logd writer"
    )
)]
mod logd;

pub use host::Batch;

use crate::fmt::StackBuf;
use crate::platform::{self, Priority};
use core::fmt::{self, Write};

/// Longest single record. Backtrace blocks (up to 256 frames) are logged frame group by frame
/// group by their printer, so this only bounds ordinary messages.
const RECORD_CAPACITY: usize = 4096;
pub(crate) const TAG: &str = "malloc_debug";

// Out of line and cold: inlined, its record buffer would give every caller (free, realloc, ...)
// a 4 KiB stack frame and a stack probe on every call, even when nothing is logged.
#[cold]
#[inline(never)]
pub fn log(prio: Priority, args: fmt::Arguments<'_>) {
    let _foreign = crate::sync::DisabledScope::enter();
    let mut msg = StackBuf::<RECORD_CAPACITY>::new();
    let _ = msg.write_fmt(args);
    write_record(prio, TAG, &mut msg);
}

/// Writes an already formatted record with the given tag.
pub fn write_record<const N: usize>(prio: Priority, tag: &str, msg: &mut StackBuf<N>) {
    let _foreign = crate::sync::DisabledScope::enter();
    // The sinks make system calls that may fail; the call being logged from may still succeed.
    let saved = platform::errno();
    #[cfg(target_os = "android")]
    let sent = logd::send(logd::LOGDW, prio as u8, tag.as_bytes(), msg.as_bytes());
    #[cfg(not(target_os = "android"))]
    let sent = logd::Sent::NoLogd;
    if sent == logd::Sent::NoLogd {
        host::write_threadtime(prio, tag, msg.as_bytes());
    }
    platform::set_errno(saved);
}

/// Logs one ERROR-level record line by line straight into the calling thread's batch, when it
/// has one (the host's exit reports); false, with nothing logged, otherwise. `lines` gets a
/// sink taking each line as parts, without the newline.
pub fn write_lines_batched(prio: Priority, lines: &mut host::LineSource<'_>) -> bool {
    let _foreign = crate::sync::DisabledScope::enter();
    // A full batch is written out on the way, a system call that may set errno.
    let saved = platform::errno();
    let done = host::write_lines_batched(prio, TAG, lines);
    platform::set_errno(saved);
    done
}

macro_rules! log_error {
    ($($arg:tt)*) => { $crate::log::log($crate::platform::Priority::Error, format_args!($($arg)*)) };
}
macro_rules! log_info {
    ($($arg:tt)*) => { $crate::log::log($crate::platform::Priority::Info, format_args!($($arg)*)) };
}
pub(crate) use {log_error, log_info};

/// The divider line that brackets error reports (docs/spec/errors.md#conventions).
pub const DIVIDER: &str = "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divider_is_sixteen_groups() {
        assert_eq!(DIVIDER.len(), 63);
        assert_eq!(DIVIDER.split(' ').count(), 16);
    }
}
