//! The stderr sink (the host's log; Android's when there is no logd), in logcat's "threadtime"
//! layout: `MM-DD HH:MM:SS.mmm  PID  TID P tag     : message`, the prefix repeated on every line
//! of a record, UTC (the local time zone would need `localtime`, which reads files and
//! allocates).
//!
//! Writes are whole lines, so concurrent records never interleave inside a line:
//! - a record's lines are gathered in a stack buffer and written with one `write(2)` (a record
//!   longer than the buffer takes several, each ending at a line boundary);
//! - while a thread holds a [`Batch`] (the exit leak report: 200,000 leaks used to take 1.6M
//!   system calls), its records go into one process-wide 64 KiB buffer written whenever the next
//!   line would not fit, and when the batch ends. Records of other threads meanwhile go out
//!   directly, so they may appear before lines of the batch that were logged earlier, but never
//!   inside one. A signal handler that logs on the batching thread while it is appending writes
//!   directly too (`APPENDING`).
//!
//! No lock: the batch buffer belongs to the thread recorded in `OWNER` (claimed by CAS; a second
//! report that runs at the same time simply writes unbatched).

use super::RECORD_CAPACITY;
use crate::fmt::StackBuf;
use crate::platform::{self, Priority};
use core::cell::UnsafeCell;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Size of a batch's writes.
const BATCH_BYTES: usize = 64 * 1024;
/// A record's own buffer: a full ordinary record plus one prefix.
const RECORD_BUFFER: usize = RECORD_CAPACITY + 128;

/// Writes one record: through the calling thread's batch if it has one, else with one write.
pub fn write_threadtime(prio: Priority, tag: &str, msg: &[u8]) {
    if OWNER.load(Ordering::Relaxed) == thread_id() && !APPENDING.swap(true, Ordering::Acquire) {
        // SAFETY: this thread owns the batch (OWNER) and is not already appending to it
        // (APPENDING), so this is the only reference to the buffer.
        let batch = unsafe { &mut *BATCH.0.get() };
        batch.refresh_prefix(prio, tag);
        let mut lines = Lines {
            buf: &mut batch.bytes,
            len: batch.len,
        };
        record_lines(batch.prefix.as_bytes(), msg, &mut lines);
        batch.len = lines.len;
        APPENDING.store(false, Ordering::Release);
        return;
    }
    let prefix = prefix(prio, tag, platform::getpid(), platform::gettid());
    let mut buf = [0u8; RECORD_BUFFER];
    let mut lines = Lines {
        buf: &mut buf,
        len: 0,
    };
    record_lines(prefix.as_bytes(), msg, &mut lines);
    lines.flush();
}

/// A sink for one line given as parts (no newline).
pub type LineSink<'a> = dyn FnMut(&[&[u8]]) + 'a;
/// Produces a record's lines into the sink it is given.
pub type LineSource<'a> = dyn FnMut(&mut LineSink<'_>) + 'a;

/// Writes one record given line by line straight into the calling thread's batch: `lines`
/// is called with a sink that takes each line as parts (no newline). Returns false, having
/// written nothing, when this thread holds no batch (the caller then formats a record as
/// usual). The exit leak report logs every frame line this way: one copy of its parts into the
/// batch instead of a line buffer, a record buffer and a newline search (docs/performance.md,
/// "Leak reports, 2026-11-26 fourth session").
pub fn write_lines_batched(prio: Priority, tag: &str, lines: &mut LineSource<'_>) -> bool {
    if OWNER.load(Ordering::Relaxed) != thread_id() || APPENDING.swap(true, Ordering::Acquire) {
        return false;
    }
    // SAFETY: as in write_threadtime: this thread owns the batch and is its only appender.
    let batch = unsafe { &mut *BATCH.0.get() };
    batch.refresh_prefix(prio, tag);
    let mut out = Lines {
        buf: &mut batch.bytes,
        len: batch.len,
    };
    let prefix = batch.prefix.as_bytes();
    lines(&mut |parts| out.push_parts(prefix, parts));
    batch.len = out.len;
    APPENDING.store(false, Ordering::Release);
    true
}

/// Gathers the calling thread's records into 64 KiB writes until dropped (host sink only; on
/// Android each record is a logd datagram of its own and this does nothing).
pub struct Batch {
    owner: bool,
}

impl Batch {
    pub fn begin() -> Batch {
        if cfg!(target_os = "android") {
            return Batch { owner: false };
        }
        let owner = OWNER
            .compare_exchange(0, thread_id(), Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if owner {
            // SAFETY: this thread just became the owner; nobody else touches the buffer.
            let batch = unsafe { &mut *BATCH.0.get() };
            batch.len = 0;
            batch.pid = platform::getpid();
            batch.tid = platform::gettid();
            batch.stamp = None;
        }
        Batch { owner }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if !self.owner {
            return;
        }
        // SAFETY: still the owner, and not inside an append (drop runs on the owner thread
        // between its records).
        let batch = unsafe { &mut *BATCH.0.get() };
        Lines {
            buf: &mut batch.bytes,
            len: batch.len,
        }
        .flush();
        batch.len = 0;
        OWNER.store(0, Ordering::Release);
    }
}

struct BatchBuffer {
    len: usize,
    pid: i32,
    tid: i32,
    /// What `prefix` was made for: (seconds, milliseconds, priority, tag address and length).
    stamp: Option<(i64, i64, u8, usize, usize)>,
    prefix: StackBuf<96>,
    bytes: [u8; BATCH_BYTES],
}

impl BatchBuffer {
    /// The prefix for a record logged now. It changes once a millisecond: a report's records
    /// reuse it until then.
    fn refresh_prefix(&mut self, prio: Priority, tag: &str) {
        let (secs, nanos) = platform::realtime();
        let stamp = (
            secs,
            nanos / 1_000_000,
            prio as u8,
            tag.as_ptr() as usize,
            tag.len(),
        );
        if self.stamp != Some(stamp) {
            self.prefix = prefix_at(prio, tag, self.pid, self.tid, secs, nanos);
            self.stamp = Some(stamp);
        }
    }
}

struct Shared(UnsafeCell<BatchBuffer>);
// SAFETY: only the thread recorded in OWNER touches the buffer (see write_threadtime).
unsafe impl Sync for Shared {}

/// In .bss: costs no memory until a batch first writes into it.
static BATCH: Shared = Shared(UnsafeCell::new(BatchBuffer {
    len: 0,
    pid: 0,
    tid: 0,
    stamp: None,
    prefix: StackBuf::new(),
    bytes: [0; BATCH_BYTES],
}));
/// `pthread_self()` of the thread that owns BATCH, 0 when none. (A fork child of a process
/// whose other thread was batching keeps that owner and writes unbatched: harmless.)
static OWNER: AtomicUsize = AtomicUsize::new(0);
/// The owner is appending to BATCH (a signal handler interrupting it must not).
static APPENDING: AtomicBool = AtomicBool::new(false);

fn thread_id() -> usize {
    // SAFETY: no preconditions; never 0 for a live thread.
    unsafe { libc::pthread_self() as usize }
}

/// Output lines gathered in `buf[..len]`, written to fd 2 when the next line would not fit.
struct Lines<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Lines<'_> {
    /// Appends `prefix line \n`; a line longer than the whole buffer is cut.
    fn push_line(&mut self, prefix: &[u8], line: &[u8]) {
        self.push_parts(prefix, &[line]);
    }

    /// Appends `prefix`, the parts of one line and a newline; a line longer than the whole
    /// buffer is cut.
    fn push_parts(&mut self, prefix: &[u8], parts: &[&[u8]]) {
        let len = prefix.len() + parts.iter().map(|p| p.len()).sum::<usize>();
        if self.len + len + 1 > self.buf.len() {
            self.flush();
        }
        // Keep one byte for the newline.
        let end = self.buf.len() - 1;
        for part in core::iter::once(prefix).chain(parts.iter().copied()) {
            let n = part.len().min(end - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&part[..n]);
            self.len += n;
        }
        self.buf[self.len] = b'\n';
        self.len += 1;
    }

    fn flush(&mut self) {
        if self.len > 0 {
            crate::log_file::write_or_stderr(&self.buf[..self.len]);
            self.len = 0;
        }
    }
}

fn record_lines(prefix: &[u8], msg: &[u8], out: &mut Lines<'_>) {
    // A trailing newline ends the record's last line rather than starting an empty one.
    let mut body = msg.strip_suffix(b"\n").unwrap_or(msg);
    loop {
        // SAFETY: memchr reads at most body.len() bytes of body.
        let nl = unsafe { libc::memchr(body.as_ptr().cast(), b'\n'.into(), body.len()) };
        if nl.is_null() {
            out.push_line(prefix, body);
            return;
        }
        let at = nl as usize - body.as_ptr() as usize;
        out.push_line(prefix, &body[..at]);
        body = &body[at + 1..];
    }
}

fn prefix(prio: Priority, tag: &str, pid: i32, tid: i32) -> StackBuf<96> {
    let (secs, nanos) = platform::realtime();
    prefix_at(prio, tag, pid, tid, secs, nanos)
}

fn prefix_at(prio: Priority, tag: &str, pid: i32, tid: i32, secs: i64, nanos: i64) -> StackBuf<96> {
    let mut prefix = StackBuf::<96>::new();
    let _ = write_prefix(&mut prefix, secs, nanos, pid, tid, prio, tag);
    prefix
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::TAG;

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
    fn lines_fill_the_buffer_with_whole_lines_and_cut_overlong_ones() {
        let mut buf = [0u8; 16];
        let mut lines = Lines {
            buf: &mut buf,
            len: 0,
        };
        record_lines(b"P: ", b"ab\ncd\n", &mut lines);
        assert_eq!(&lines.buf[..lines.len], b"P: ab\nP: cd\n");
        lines.len = 0;
        record_lines(b"P: ", b"0123456789abcdefghij", &mut lines);
        assert_eq!(&lines.buf[..lines.len], b"P: 0123456789ab\n");
    }
}
