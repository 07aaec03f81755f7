//! Output files and descriptors (DESIGN §6): buffered writes without allocation, and files that
//! appear whole or not at all (written under a temporary name in the same directory, then
//! renamed), never following a planted symlink.

use crate::fmt::StackBuf;
use crate::platform;
use core::fmt;

/// A buffered writer on a file descriptor (or, for a stream without one, on the `FILE*`).
/// Remembers the first failure.
pub struct FdWriter {
    fd: i32,
    stream: *mut libc::FILE,
    buf: StackBuf<8192>,
    ok: bool,
}

impl FdWriter {
    pub fn new(fd: i32) -> Self {
        FdWriter {
            fd,
            stream: core::ptr::null_mut(),
            buf: StackBuf::new(),
            ok: fd >= 0,
        }
    }

    /// Writes to the caller's stream: flushes it, then writes to its descriptor as the
    /// reference does. Streams with no descriptor (`open_memstream`, `fmemopen`), where the
    /// reference writes nothing, get the bytes through `fwrite` instead; the caller must hold no
    /// lock of ours then, since the stream may allocate.
    ///
    /// # Safety
    /// `fp` is null or a valid open stream for the writer's lifetime.
    pub unsafe fn for_stream(fp: *mut libc::FILE) -> Self {
        if fp.is_null() {
            return FdWriter::new(-1);
        }
        // SAFETY: the caller's valid stream.
        let fd = unsafe {
            libc::fflush(fp);
            libc::fileno(fp)
        };
        if fd >= 0 {
            return FdWriter::new(fd);
        }
        FdWriter {
            fd: -1,
            stream: fp,
            buf: StackBuf::new(),
            ok: !fp.is_null(),
        }
    }

    pub fn write_bytes(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = 8192 - self.buf.len();
            if room == 0 {
                self.flush();
                continue;
            }
            let n = room.min(bytes.len());
            self.buf.push_bytes(&bytes[..n]);
            bytes = &bytes[n..];
        }
    }

    /// Writes out the buffer; true if everything written so far reached the descriptor.
    pub fn flush(&mut self) -> bool {
        if !self.buf.is_empty() {
            if self.ok && !self.write_out() {
                self.ok = false;
            }
            self.buf.clear();
        }
        self.ok
    }
}

impl FdWriter {
    fn write_out(&mut self) -> bool {
        let bytes = self.buf.as_bytes();
        if self.stream.is_null() {
            return platform::write_fd(self.fd, bytes);
        }
        // SAFETY: `for_stream`'s contract keeps the stream valid; the bytes are initialised.
        let n = unsafe { libc::fwrite(bytes.as_ptr().cast(), 1, bytes.len(), self.stream) };
        // The reference's writes reach the descriptor at once; do the same for the stream.
        // SAFETY: as above.
        n == bytes.len() && unsafe { libc::fflush(self.stream) } == 0
    }
}

impl fmt::Write for FdWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.write_bytes(s.as_bytes());
        Ok(())
    }
}

/// A file being written under a temporary name next to its final path.
pub struct OutputFile {
    fd: i32,
    temp: StackBuf<4200>,
    target: StackBuf<4200>,
}

impl OutputFile {
    /// Creates `<path>.tmp.<pid>` (O_EXCL|O_NOFOLLOW|O_CLOEXEC). None with errno set on failure.
    pub fn create(path: &[u8], mode: libc::mode_t) -> Option<OutputFile> {
        let mut target = StackBuf::<4200>::new();
        target.push_bytes(path);
        let mut temp = StackBuf::<4200>::new();
        temp.push_bytes(path);
        let _ = fmt::Write::write_fmt(&mut temp, format_args!(".tmp.{}", platform::getpid()));
        if target.truncated() || temp.truncated() || path.contains(&0) {
            platform::set_errno(libc::ENAMETOOLONG);
            return None;
        }
        let temp_ptr = temp.as_c_str();
        // A stale temporary from a killed earlier process with our pid is ours to replace.
        // SAFETY: NUL-terminated path.
        unsafe { libc::unlink(temp_ptr) };
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: NUL-terminated path; mode passed as the variadic argument.
        let fd = unsafe { libc::open(temp_ptr, flags, mode as libc::c_uint) };
        if fd < 0 {
            return None;
        }
        Some(OutputFile { fd, temp, target })
    }

    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// Closes and renames into place if `written_ok`; otherwise removes the temporary.
    /// Refuses to replace a symlink at the target. Returns true when the file is in place.
    pub fn commit(mut self, written_ok: bool) -> bool {
        let fd = core::mem::replace(&mut self.fd, -1);
        // SAFETY: our descriptor, closed once.
        let closed = unsafe { libc::close(fd) } == 0;
        let temp = self.temp.as_c_str();
        let target = self.target.as_c_str();
        if written_ok && closed && !is_symlink(target) {
            // SAFETY: NUL-terminated paths.
            if unsafe { libc::rename(temp, target) } == 0 {
                return true;
            }
        }
        // SAFETY: NUL-terminated path.
        unsafe { libc::unlink(temp) };
        false
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.fd >= 0 {
            // SAFETY: our descriptor and temporary path.
            unsafe {
                libc::close(self.fd);
                libc::unlink(self.temp.as_c_str());
            }
        }
    }
}

fn is_symlink(path: *const libc::c_char) -> bool {
    // SAFETY: an all-zero stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: NUL-terminated path, valid out-parameter.
    unsafe { libc::lstat(path, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFLNK }
}
