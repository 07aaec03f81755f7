//! Formatting without allocation: `core::fmt` into fixed buffers on the stack.

use core::fmt;
use core::mem::MaybeUninit;

/// A fixed-capacity byte buffer that `core::fmt` can write into. Output beyond the capacity is
/// dropped (and remembered in `truncated`), so a long message is cut rather than lost entirely.
pub struct StackBuf<const N: usize> {
    /// Only `buf[..len]` is initialized: a buffer is not zeroed when made (the exit leak report
    /// makes a few 4 KiB ones per leak; zeroing them was half of its instructions).
    buf: [MaybeUninit<u8>; N],
    len: usize,
    truncated: bool,
}

impl<const N: usize> StackBuf<N> {
    pub const fn new() -> Self {
        StackBuf {
            buf: [const { MaybeUninit::uninit() }; N],
            len: 0,
            truncated: false,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `buf[..len]` has been written (push_bytes, as_c_str), and len <= N.
        unsafe { core::slice::from_raw_parts(self.buf.as_ptr().cast::<u8>(), self.len) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn clear(&mut self) {
        self.len = 0;
        self.truncated = false;
    }

    pub fn truncated(&self) -> bool {
        self.truncated
    }

    pub fn push_bytes(&mut self, bytes: &[u8]) {
        let room = N - self.len;
        let n = bytes.len().min(room);
        // SAFETY: `n` bytes fit in `buf` after `len`; `bytes` is not part of `self`.
        unsafe {
            core::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.buf.as_mut_ptr().add(self.len).cast::<u8>(),
                n,
            )
        };
        self.len += n;
        if n < bytes.len() {
            self.truncated = true;
        }
    }

    /// The contents followed by a NUL, for C calls; the last byte is sacrificed if full.
    pub fn as_c_str(&mut self) -> *const core::ffi::c_char {
        if self.len == N {
            self.len = N - 1;
            self.truncated = true;
        }
        self.buf[self.len] = MaybeUninit::new(0);
        self.buf.as_ptr().cast()
    }
}

impl<const N: usize> Default for StackBuf<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> fmt::Write for StackBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push_bytes(s.as_bytes());
        Ok(())
    }
}

/// Displays bytes from C (program names, option values, paths) as text without validating
/// UTF-8 up front: valid runs are written as is, invalid bytes as U+FFFD.
pub struct Bytes<'a>(pub &'a [u8]);

impl fmt::Display for Bytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names are almost always valid UTF-8: one check, one write (chunk by chunk showed in
        // the profile of a million-leak report).
        if let Ok(s) = core::str::from_utf8(self.0) {
            return f.write_str(s);
        }
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_str("\u{fffd}")?;
            }
        }
        Ok(())
    }
}

/// Length of a NUL-terminated C string.
///
/// # Safety
/// `s` must point to a readable NUL-terminated string.
pub unsafe fn c_str_bytes<'a>(s: *const core::ffi::c_char) -> &'a [u8] {
    // SAFETY: the caller guarantees a NUL-terminated string; strlen reads up to the NUL.
    unsafe { core::slice::from_raw_parts(s.cast::<u8>(), libc::strlen(s)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Write;

    #[test]
    fn truncates_instead_of_overflowing() {
        let mut b = StackBuf::<8>::new();
        write!(b, "0123456789").unwrap();
        assert_eq!(b.as_bytes(), b"01234567");
        assert!(b.truncated());
        b.as_c_str();
        assert_eq!(b.as_bytes(), b"0123456");
    }

    #[test]
    fn bytes_display_is_lossy() {
        let mut b = StackBuf::<32>::new();
        write!(b, "{}", Bytes(b"a\xffb")).unwrap();
        assert_eq!(b.as_bytes(), "a\u{fffd}b".as_bytes());
    }
}
