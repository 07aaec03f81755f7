//! `malloc_debug_check_options`: the option parser as a host-only extension export (README
//! "Differences from the reference"), so that the `malloc-debug` CLI can refuse a bad option
//! string with the library's own messages *before* it starts a program, instead of
//! re-implementing the parser.
//!
//! ```c
//! int64_t malloc_debug_check_options(const char* options, const char* progname,
//!                                     char* out, size_t size);
//! ```
//!
//! Parses `options` exactly as `debug_initialize` does, and initialises nothing. Valid: returns
//! the option bits (>= 0, `config::bits`) and writes the heap-dump prefix the options select
//! (after the host's `/tmp` fallback, see `Config::localize_default_paths`). Invalid: returns
//! -1 and writes the ERROR lines `debug_initialize` would log — the message (naming `progname`,
//! or this process's name when null) then the usage lines — each ended by a newline. `out` is
//! always NUL-terminated and truncated to `size` bytes; it may be null when `size` is 0.
//!
//! Not exported on Android: there the library's ABI is exactly bionic's `debug_*` set
//! (tests/android_build.rs).

use super::{Config, USAGE_LINES};
use crate::fmt::StackBuf;
use core::ffi::c_char;
use core::fmt::Write;

/// # Safety
/// `options` and `progname` (unless null) are NUL-terminated strings; `out` has room for
/// `size` bytes (or `size` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_debug_check_options(
    options: *const c_char,
    progname: *const c_char,
    out: *mut c_char,
    size: usize,
) -> i64 {
    let saved = crate::platform::errno();
    let options: &[u8] = if options.is_null() {
        b""
    } else {
        // SAFETY: the caller passes a NUL-terminated string.
        unsafe { crate::fmt::c_str_bytes(options) }
    };
    let progname: &[u8] = if progname.is_null() {
        crate::platform::progname()
    } else {
        // SAFETY: the caller passes a NUL-terminated string.
        unsafe { crate::fmt::c_str_bytes(progname) }
    };
    let mut text = StackBuf::<2048>::new();
    let result = match Config::parse(options) {
        Ok(config) => {
            let config = config.localize_default_paths();
            text.push_bytes(config.backtrace_dump_prefix);
            // The bits are a few low flags: the cast never reaches the sign bit.
            (config.options & i64::MAX as u64) as i64
        }
        Err(error) => {
            let _ = error.write_message(progname, &mut text);
            for line in USAGE_LINES {
                let _ = write!(text, "\n{line}");
            }
            text.push_bytes(b"\n");
            -1
        }
    };
    if !out.is_null() && size > 0 {
        let n = text.len().min(size - 1);
        // SAFETY: `out` has room for `size` bytes and `n + 1 <= size`; the stack buffer does not
        // overlap it.
        unsafe {
            core::ptr::copy_nonoverlapping(text.as_bytes().as_ptr(), out.cast::<u8>(), n);
            *out.add(n) = 0;
        }
    }
    crate::platform::set_errno(saved);
    result
}
