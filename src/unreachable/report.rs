//! The parent's side of the check: the child's findings, logged in libmemunreachable's layout
//! (`GetUnreachableMemory`'s summary, then `Leak::ToString` per leak, contents included, and the
//! allocation backtrace when one was recorded).

use super::{CONTENTS, Leak, Summary};
use crate::fmt::StackBuf;
use crate::log::{TAG, log_error, write_record};
use crate::platform::Priority;
use crate::state::State;
use core::fmt::Write;

pub(super) fn receive_and_log(state: &State, fd: libc::c_int) -> Option<()> {
    let summary: Summary = receive(fd)?;
    log_error!(
        "{} bytes in {} allocation{} unreachable out of {} bytes in {} allocation{}",
        summary.leak_bytes,
        summary.leaks,
        plural(summary.leaks),
        summary.allocation_bytes,
        summary.allocations,
        plural(summary.allocations)
    );
    // One symbolization session for every backtrace of the report.
    let _symbols = crate::backtrace::SymbolSession::begin();
    for _ in 0..summary.reported {
        let leak: Leak = receive(fd)?;
        let mut record = StackBuf::<2048>::new();
        describe(&leak, &mut record);
        write_record(Priority::Error, TAG, &mut record);
        if leak.backtrace_id > crate::tracking::BT_EMPTY {
            crate::failure::log_interned_backtrace(state, leak.backtrace_id);
        }
    }
    Some(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `Leak::ToString(true)` without its final newline.
fn describe(leak: &Leak, out: &mut impl Write) {
    let _ = write!(out, "  {} bytes unreachable at {:x}", leak.size, leak.begin);
    if leak.referenced_count > 0 {
        let _ = write!(
            out,
            "\n   referencing {} unreachable bytes in {} allocation{}",
            leak.referenced_size,
            leak.referenced_count,
            plural(leak.referenced_count)
        );
    }
    let shown = leak.contents_len.min(CONTENTS);
    if shown == leak.size {
        let _ = write!(out, "\n   contents:");
    } else {
        let _ = write!(out, "\n   first {shown} bytes of contents:");
    }
    for (line, bytes) in leak.contents[..shown].chunks(16).enumerate() {
        let _ = write!(out, "\n   {:x}: ", leak.begin + line * 16);
        for b in bytes {
            let _ = write!(out, "{b:02x} ");
        }
        for _ in bytes.len()..16 {
            let _ = out.write_str("   ");
        }
        for &b in bytes {
            let c = if (b' '..0x7f).contains(&b) {
                b as char
            } else {
                '.'
            };
            let _ = out.write_char(c);
        }
    }
}

/// Reads one value the child wrote with the same layout (same build, same process image).
fn receive<T: Copy + Default>(fd: libc::c_int) -> Option<T> {
    let mut value = T::default();
    let len = core::mem::size_of::<T>();
    let mut got = 0;
    while got < len {
        // SAFETY: reads into the remaining bytes of `value`, a plain-data repr(C) type for which
        // any bytes the child copied from a valid value are valid.
        let n = unsafe {
            libc::read(
                fd,
                (&mut value as *mut T).cast::<u8>().add(got).cast(),
                len - got,
            )
        };
        if n < 0 && crate::platform::errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            return None;
        }
        got += n as usize;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leak_layout_matches_libmemunreachable() {
        let mut leak = Leak {
            begin: 0x7f001000,
            size: 40,
            referenced_count: 2,
            referenced_size: 96,
            contents_len: 32,
            ..Leak::default()
        };
        leak.contents[..20].copy_from_slice(b"leaked block\x00\x01\x7f\xffabcd");
        let mut out = String::new();
        describe(&leak, &mut out);
        assert_eq!(
            out,
            "  40 bytes unreachable at 7f001000\n   referencing 96 unreachable bytes in 2 \
             allocations\n   first 32 bytes of contents:\n   7f001000: 6c 65 61 6b 65 64 20 62 \
             6c 6f 63 6b 00 01 7f ff leaked block....\n   7f001010: 61 62 63 64 00 00 00 00 00 \
             00 00 00 00 00 00 00 abcd............"
        );
        leak.size = 3;
        leak.contents_len = 3;
        leak.referenced_count = 0;
        let mut out = String::new();
        describe(&leak, &mut out);
        let padding = " ".repeat(13 * 3);
        assert_eq!(
            out,
            format!(
                "  3 bytes unreachable at 7f001000\n   contents:\n   7f001000: 6c 65 61 {padding}lea"
            )
        );
    }
}
