//! The log sink (DESIGN §5, spec §0.1). One call is one log record with tag `malloc_debug`.
//!
//! Android: `__android_log_write`, falling back to stderr when liblog refuses the record.
//! Host: stderr in logcat's "threadtime" layout, one `write(2)` per line, so a multi-line record
//! repeats the prefix on every line and concurrent records never interleave inside a line.
//! Formatting happens into stack buffers; nothing here allocates.

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
    #[cfg(target_os = "android")]
    {
        let mut ctag = StackBuf::<32>::new();
        ctag.push_bytes(tag.as_bytes());
        let tag_ptr = ctag.as_c_str();
        // SAFETY: tag_ptr is NUL-terminated (as_c_str above) and outlives the call.
        let tag_cstr = unsafe { core::ffi::CStr::from_ptr(tag_ptr) };
        if platform::android_log(prio, tag_cstr, msg.as_c_str()) {
            return;
        }
    }
    write_threadtime(prio, tag, msg.as_bytes());
}

/// Host layout: `MM-DD HH:MM:SS.mmm  PID  TID P tag     : message`, UTC (the local time zone
/// would need `localtime`, which reads files and allocates).
fn write_threadtime(prio: Priority, tag: &str, msg: &[u8]) {
    let (secs, nanos) = platform::realtime();
    let pid = platform::getpid();
    let tid = platform::gettid();
    let mut prefix = StackBuf::<96>::new();
    let _ = write_prefix(&mut prefix, secs, nanos, pid, tid, prio, tag);
    // A trailing newline ends the record's last line rather than starting an empty one.
    let body = msg.strip_suffix(b"\n").unwrap_or(msg);
    for line in body.split(|&b| b == b'\n') {
        let mut out = StackBuf::<{ RECORD_CAPACITY + 128 }>::new();
        out.push_bytes(prefix.as_bytes());
        out.push_bytes(line);
        out.push_bytes(b"\n");
        crate::log_file::write_or_stderr(out.as_bytes());
    }
}

fn write_prefix(
    out: &mut impl Write,
    secs: i64,
    nanos: i64,
    pid: i32,
    tid: i32,
    prio: Priority,
    tag: &str,
) -> fmt::Result {
    let (_, month, day) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    write!(
        out,
        "{:02}-{:02} {:02}:{:02}:{:02}.{:03} {:5} {:5} {} {:<8}: ",
        month,
        day,
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        nanos / 1_000_000,
        pid,
        tid,
        prio.letter() as char,
        tag
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

macro_rules! log_error {
    ($($arg:tt)*) => { $crate::log::log($crate::platform::Priority::Error, format_args!($($arg)*)) };
}
macro_rules! log_info {
    ($($arg:tt)*) => { $crate::log::log($crate::platform::Priority::Info, format_args!($($arg)*)) };
}
pub(crate) use {log_error, log_info};

/// The divider line that brackets error reports (spec §0.1).
pub const DIVIDER: &str = "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_414), (2025, 11, 22));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn threadtime_prefix_layout() {
        let mut b = StackBuf::<96>::new();
        write_prefix(
            &mut b,
            20_414 * 86_400 + 3723,
            45_600_000,
            1234,
            56,
            Priority::Error,
            TAG,
        )
        .unwrap();
        assert_eq!(
            b.as_bytes(),
            b"11-22 01:02:03.045  1234    56 E malloc_debug: "
        );
    }

    #[test]
    fn divider_is_sixteen_groups() {
        assert_eq!(DIVIDER.len(), 63);
        assert_eq!(DIVIDER.split(' ').count(), 16);
    }
}
