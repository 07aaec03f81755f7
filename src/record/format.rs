//! The record file (spec §7.3, §7.5): one text line per filled entry, written whole under a
//! temporary name and renamed into place.

use super::buffer::{BUFFER, Entry, Kind, kind_of};
use crate::errors::strerror;
use crate::fmt::{Bytes, StackBuf};
use crate::log::{log_error, log_info};
use crate::output::{FdWriter, OutputFile};
use crate::platform;
use crate::state::State;
use core::fmt::Write;

pub fn write_file(_state: &State, file: &[u8], at_exit: bool) {
    let entries = BUFFER.begin_write();
    if entries.is_empty() {
        log_info!("No alloc entries to write.");
        BUFFER.end_write(false);
        return;
    }
    let mut path = StackBuf::<4200>::new();
    path.push_bytes(file);
    if at_exit {
        let _ = write!(path, ".{}", platform::getpid());
    }
    let Some(out) = OutputFile::create(path.as_bytes(), 0o755) else {
        log_error!(
            "Cannot create record alloc file {}: {}",
            Bytes(path.as_bytes()),
            strerror(platform::errno())
        );
        // Kept: a later dump can still write them.
        BUFFER.end_write(false);
        return;
    };
    let mut w = FdWriter::new(out.fd());
    for e in entries {
        let mut line = StackBuf::<256>::new();
        if format_line(e, &mut line) {
            w.write_bytes(line.as_bytes());
        }
    }
    let ok = w.flush();
    if !ok {
        log_error!(
            "Failed to write record alloc information: {}",
            strerror(platform::errno())
        );
    }
    out.commit(ok);
    BUFFER.end_write(true);
}

/// One entry's line, `\n` included; false for a reserved entry that was never filled.
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
            kind: kind as u8 + 1,
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
            kind: Kind::ThreadDone as u8 + 1,
            end_ns: 999,
            present: -1,
            ..Entry::default()
        };
        let mut out = String::new();
        assert!(format_line(&done, &mut out));
        assert_eq!(out, "187: thread_done 0x0 999\n");
        done.kind = 0;
        assert!(!format_line(&done, &mut String::new()));
    }
}
