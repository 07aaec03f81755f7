//! The record file (docs/spec/abi.md#line-format, docs/spec/abi.md#writing): one text line per
//! published entry, written whole under a temporary name and renamed into place (src/output.rs).
//! Runs in the SIGRTMAX-18 handler, so it allocates nothing, takes no lock and keeps its stack
//! small; `super::writer` lets one write run at a time.

use super::buffer::{BUFFER, Entry, Kind, kind_of};
use crate::errors::strerror;
use crate::fmt::{Bytes, StackBuf};
use crate::log::{log_error, log_info};
use crate::output::{BufWriter, OutputFile};
use crate::platform;
use core::fmt::Write;

/// How a write ended, for `report` (logged outside `write_file`'s frame: a log record needs
/// 8 KiB of stack, and this runs in a signal handler, perhaps on a 16 KiB alternate stack).
pub enum Outcome {
    NothingToWrite,
    Placed,
    /// The file could not be created or put in place (errno).
    CannotCreate(i32),
    /// A write failed (errno).
    WriteFailed(i32),
}

/// Writes the pending entries to `file` followed by `suffix`. A file that cannot be created or
/// put in place, or whose writes fail, leaves its entries for a later write
/// (docs/spec/abi.md#writing); so do entries still being filled by their calls.
#[inline(never)]
pub fn write_file(file: &[u8], suffix: &[u8]) -> Outcome {
    let batch = BUFFER.pending();
    // Entries that are all still being filled (or abandoned) would make an empty file that
    // replaces the last one: they wait for the next write instead.
    if !BUFFER.has_published(batch) {
        return Outcome::NothingToWrite;
    }
    let out = match OutputFile::open(file, suffix, 0o755) {
        Ok(out) => out,
        Err(errno) => return Outcome::CannotCreate(errno),
    };
    let mut w = BufWriter::<1024>::new(out.fd());
    BUFFER.write_published(batch, |e| {
        let mut line = StackBuf::<256>::new();
        if format_line(e, &mut line) {
            w.write_bytes(line.as_bytes());
        }
        w.ok()
    });
    let written = w.flush();
    let write_errno = platform::errno();
    let placed = out.place(written);
    BUFFER.end_write(batch, placed.is_ok());
    match placed {
        Ok(()) => Outcome::Placed,
        Err(_) if !written => Outcome::WriteFailed(write_errno),
        Err(errno) => Outcome::CannotCreate(errno),
    }
}

/// Logs a write's outcome with the reference's messages (docs/spec/abi.md#writing).
#[inline(never)]
pub fn report(outcome: Outcome, file: &[u8], suffix: &[u8]) {
    match outcome {
        Outcome::Placed => {}
        Outcome::NothingToWrite => log_info!("No alloc entries to write."),
        Outcome::CannotCreate(errno) => log_error!(
            "Cannot create record alloc file {}{}: {}",
            Bytes(file),
            Bytes(suffix),
            strerror(errno)
        ),
        Outcome::WriteFailed(errno) => log_error!(
            "Failed to write record alloc information: {}",
            strerror(errno)
        ),
    }
}

/// One entry's line, `\n` included; false for an entry of no known kind.
pub fn format_line(e: &Entry, out: &mut impl Write) -> bool {
    let Some(kind) = kind_of(e) else {
        return false;
    };
    let name = match kind {
        Kind::Malloc => "malloc",
        Kind::Calloc => "calloc",
        Kind::Memalign => "memalign",
        Kind::Realloc => "realloc",
        Kind::Free => "free",
        Kind::ThreadDone => "thread_done",
    };
    let _ = write!(out, "{}: {} 0x{:x}", e.tid, name, e.ptr);
    match kind {
        Kind::Malloc => {
            let _ = write!(out, " {}", e.size);
        }
        Kind::Calloc | Kind::Memalign => {
            let _ = write!(out, " {} {}", e.u, e.size);
        }
        Kind::Realloc => {
            let _ = write!(out, " 0x{:x} {}", e.u, e.size);
        }
        Kind::Free => {}
        Kind::ThreadDone => {
            if e.end_ns != 0 {
                let _ = write!(out, " {}", e.end_ns);
            }
            let _ = out.write_char('\n');
            return true;
        }
    }
    let has_present = matches!(kind, Kind::Free | Kind::Realloc) && e.present != -1;
    if e.start_ns != 0 || has_present {
        let _ = write!(out, " {} {}", e.start_ns, e.end_ns);
    }
    if has_present {
        let _ = write!(out, " {}", e.present);
    }
    let _ = out.write_char('\n');
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(kind: Kind, ptr: u64, size: u64, u: u64, present: i64, s: u64, e: u64) -> String {
        let entry = Entry {
            tid: 186,
            kind: kind as u8,
            ptr,
            size,
            u,
            present,
            start_ns: s,
            end_ns: e,
        };
        let mut out = String::new();
        assert!(format_line(&entry, &mut out));
        out
    }

    #[test]
    fn lines_match_the_spec_examples() {
        assert_eq!(
            line(Kind::Malloc, 0xb6038060, 20, 0, -1, 1234, 5678),
            "186: malloc 0xb6038060 20 1234 5678\n"
        );
        assert_eq!(
            line(Kind::Free, 0xb6038060, 0, 0, 4096, 1300, 1400),
            "186: free 0xb6038060 1300 1400 4096\n"
        );
        assert_eq!(
            line(Kind::Calloc, 0xb609f080, 32, 4, -1, 1, 2),
            "186: calloc 0xb609f080 4 32 1 2\n"
        );
        assert_eq!(
            line(Kind::Realloc, 0xb609f080, 12, 0xb603e9a0, 4096, 5, 6),
            "186: realloc 0xb609f080 0xb603e9a0 12 5 6 4096\n"
        );
        assert_eq!(
            line(Kind::Realloc, 0, 0, 0xb609f080, 128, 5, 6),
            "186: realloc 0x0 0xb609f080 0 5 6 128\n"
        );
        assert_eq!(
            line(Kind::Memalign, 0x85423660, 104, 16, -1, 5, 6),
            "186: memalign 0x85423660 16 104 5 6\n"
        );
        // A failed malloc: no timestamps.
        assert_eq!(line(Kind::Malloc, 0, 0, 0, -1, 0, 0), "186: malloc 0x0 0\n");
        // present bytes force the timestamps even when they are 0.
        assert_eq!(
            line(Kind::Free, 0x10, 0, 0, 0, 0, 0),
            "186: free 0x10 0 0 0\n"
        );
        let mut done = Entry {
            tid: 187,
            kind: Kind::ThreadDone as u8,
            end_ns: 999,
            present: -1,
            ..Entry::default()
        };
        let mut out = String::new();
        assert!(format_line(&done, &mut out));
        assert_eq!(out, "187: thread_done 0x0 999\n");
        done.kind = 6;
        assert!(!format_line(&done, &mut String::new()));
    }
}
