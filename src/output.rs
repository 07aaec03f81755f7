//! Output files and descriptors (docs/spec/abi.md#output-files): buffered writes without
//! allocation, and files that appear whole or not at all: written under a temporary name in the
//! same directory, then renamed into place, never following a planted symlink.
//!
//! A file has no name while it is written (O_TMPFILE) where the file system allows; temporary
//! names are unique and unpredictable (`<name>.tmp.<16 random hex digits>`, created with
//! `O_EXCL`), so two writers of the same file (a heap dump on a signal and one at exit, two
//! record writes) never share one, and nobody can plant one in advance. Everything here is a
//! plain system call on stack buffers: record files are written from a signal handler.

use crate::fmt::StackBuf;
use crate::platform;
use core::fmt;

/// The writer of dumps and reports.
pub type FdWriter = BufWriter<8192>;

/// A buffered writer on a file descriptor (or, for a stream without one, on the `FILE*`).
/// Remembers the first failure. `N` bytes of stack: the record writer, which runs in a signal
/// handler (perhaps on a small alternate stack), uses a smaller buffer than dumps.
pub struct BufWriter<const N: usize> {
    fd: i32,
    stream: *mut libc::FILE,
    buf: StackBuf<N>,
    ok: bool,
}

impl<const N: usize> BufWriter<N> {
    pub fn new(fd: i32) -> Self {
        BufWriter {
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
            return BufWriter::new(-1);
        }
        // SAFETY: the caller's valid stream.
        let fd = unsafe {
            libc::fflush(fp);
            libc::fileno(fp)
        };
        if fd >= 0 {
            return BufWriter::new(fd);
        }
        BufWriter {
            fd: -1,
            stream: fp,
            buf: StackBuf::new(),
            ok: !fp.is_null(),
        }
    }

    pub fn write_bytes(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = N - self.buf.len();
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

    /// False once a write has failed.
    pub fn ok(&self) -> bool {
        self.ok
    }

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

impl<const N: usize> fmt::Write for BufWriter<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.write_bytes(s.as_bytes());
        Ok(())
    }
}

/// Longest file name (one path component) the kernel accepts.
const NAME_MAX: usize = 255;
/// `.tmp.` and 16 hex digits.
const TEMP_SUFFIX: usize = 5 + 16;

/// A file being written next to its final path. Where the file system allows, it has no name
/// until it is complete (O_TMPFILE): a process that dies while writing leaves nothing behind.
/// It is then linked under a random temporary name and renamed over the final one (a link
/// cannot replace an existing file). Elsewhere it is created under the temporary name at once.
/// The directory is opened once, so the temporary and the final name are in the same directory
/// even if the path's directories are renamed meanwhile.
pub struct OutputFile {
    dir: i32,
    fd: i32,
    name: StackBuf<{ NAME_MAX + 1 }>,
    temp: StackBuf<{ NAME_MAX + TEMP_SUFFIX + 1 }>,
    /// The file has the temporary name (created with it, or linked).
    named: bool,
}

impl OutputFile {
    /// Creates a temporary file for `path` (O_EXCL|O_NOFOLLOW|O_CLOEXEC). None with errno set on
    /// failure.
    pub fn create(path: &[u8], mode: libc::mode_t) -> Option<OutputFile> {
        OutputFile::open(path, b"", mode)
            .map_err(platform::set_errno)
            .ok()
    }

    /// Creates a temporary file for `path` followed by `suffix` (a suffix saves the caller a
    /// path-sized buffer). Fails with the errno that opening the final file for writing would
    /// give when the target exists and is not a regular file we may write (a symlink: ELOOP, a
    /// directory: EISDIR, a read-only file: EACCES), as the reference's
    /// `open(O_WRONLY|O_CREAT|O_TRUNC|O_NOFOLLOW)` does.
    pub fn open(path: &[u8], suffix: &[u8], mode: libc::mode_t) -> Result<OutputFile, i32> {
        if path.contains(&0) || suffix.contains(&0) || suffix.contains(&b'/') {
            return Err(libc::EINVAL);
        }
        let (dir_path, base) = match path.iter().rposition(|&b| b == b'/') {
            Some(0) => (&b"/"[..], &path[1..]),
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (&b"."[..], path),
        };
        if base.is_empty() && suffix.is_empty() {
            return Err(libc::EISDIR);
        }
        if base.len() + suffix.len() > NAME_MAX {
            return Err(libc::ENAMETOOLONG);
        }
        let mut name = StackBuf::new();
        name.push_bytes(base);
        name.push_bytes(suffix);
        let dir = open_dir(dir_path)?;
        let mut file = OutputFile {
            dir,
            fd: -1,
            name,
            temp: StackBuf::new(),
            named: false,
        };
        file.check_target()?;
        file.create_unnamed(mode)
            .or_else(|_| file.create_named(mode))?;
        Ok(file)
    }

    /// Opening an existing target for writing (without creating or truncating it) tells whether
    /// the reference's open would have succeeded.
    fn check_target(&mut self) -> Result<(), i32> {
        let flags =
            libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;
        // SAFETY: our directory descriptor and a NUL-terminated name.
        let fd = unsafe { libc::openat(self.dir, self.name.as_c_str(), flags) };
        if fd >= 0 {
            // SAFETY: the descriptor just opened.
            unsafe { libc::close(fd) };
            return Ok(());
        }
        match platform::errno() {
            libc::ENOENT => Ok(()),
            errno => Err(errno),
        }
    }

    /// A nameless file in the directory (EOPNOTSUPP and the like where the file system or the
    /// kernel cannot).
    fn create_unnamed(&mut self, mode: libc::mode_t) -> Result<(), i32> {
        let flags = libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC;
        // SAFETY: our directory descriptor, a NUL-terminated name, the mode as the variadic
        // argument.
        let fd = platform::above_stdio(unsafe {
            libc::openat(self.dir, c".".as_ptr(), flags, mode as libc::c_uint)
        });
        if fd < 0 {
            return Err(platform::errno());
        }
        self.fd = fd;
        // It will be linked through /proc/self/fd: without /proc, a named file instead.
        // SAFETY: an all-zero stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        let mut proc_path = proc_fd_path(fd);
        // SAFETY: a NUL-terminated path and a valid out-parameter.
        if unsafe { libc::stat(proc_path.as_c_str(), &mut st) } != 0 {
            let errno = platform::errno();
            // SAFETY: the descriptor just opened, closed once.
            unsafe { libc::close(fd) };
            self.fd = -1;
            return Err(errno);
        }
        Ok(())
    }

    /// Picks a fresh random temporary name.
    fn new_temp_name(&mut self) -> *const libc::c_char {
        self.temp.clear();
        self.temp.push_bytes(self.name.as_bytes());
        let _ = fmt::Write::write_fmt(&mut self.temp, format_args!(".tmp.{:016x}", random()));
        self.temp.as_c_str()
    }

    /// Runs `attempt` with fresh temporary names until it does not fail with EEXIST. A collision
    /// of 64 random bits means someone guesses our names: give up after a few.
    fn with_temp_name(&mut self, mut attempt: impl FnMut(i32, *const libc::c_char) -> i32) -> i32 {
        let mut errno = libc::EEXIST;
        for _ in 0..8 {
            let temp = self.new_temp_name();
            if attempt(self.dir, temp) >= 0 {
                self.named = true;
                return 0;
            }
            errno = platform::errno();
            if errno != libc::EEXIST {
                break;
            }
        }
        errno
    }

    fn create_named(&mut self, mode: libc::mode_t) -> Result<(), i32> {
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        let mut fd = -1;
        let errno = self.with_temp_name(|dir, temp| {
            // SAFETY: our directory descriptor, a NUL-terminated name, the mode as the variadic
            // argument.
            fd = unsafe { libc::openat(dir, temp, flags, mode as libc::c_uint) };
            fd
        });
        if errno != 0 {
            return Err(errno);
        }
        // A failure leaves the named file for `Drop` to remove.
        self.fd = platform::above_stdio(fd);
        if self.fd < 0 {
            return Err(platform::errno());
        }
        Ok(())
    }

    /// Gives the nameless file its temporary name, through /proc/self/fd (linkat with
    /// AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH).
    fn link_unnamed(&mut self) -> Result<(), i32> {
        let mut proc_path = proc_fd_path(self.fd);
        let source = proc_path.as_c_str();
        match self.with_temp_name(|dir, temp| {
            // SAFETY: NUL-terminated paths and our directory descriptor.
            unsafe { libc::linkat(libc::AT_FDCWD, source, dir, temp, libc::AT_SYMLINK_FOLLOW) }
        }) {
            0 => Ok(()),
            errno => Err(errno),
        }
    }

    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// Closes and renames into place if `written_ok`; otherwise removes the temporary. Returns
    /// true when the file is in place.
    pub fn commit(self, written_ok: bool) -> bool {
        self.place(written_ok).is_ok()
    }

    /// `commit` that says why the file is not in place: the errno of the failed link, close or
    /// rename, ELOOP if a symlink appeared at the target meanwhile (it is never replaced), or 0
    /// when `written_ok` was false.
    pub fn place(mut self, written_ok: bool) -> Result<(), i32> {
        let linked = if written_ok && !self.named {
            self.link_unnamed()
        } else {
            Ok(())
        };
        let fd = core::mem::replace(&mut self.fd, -1);
        // SAFETY: our descriptor, closed once.
        let closed = unsafe { libc::close(fd) } == 0;
        let result = if !written_ok {
            Err(0)
        } else if let Err(errno) = linked {
            Err(errno)
        } else if !closed {
            Err(platform::errno())
        } else if self.target_is_symlink() {
            Err(libc::ELOOP)
        } else {
            let dir = self.dir;
            let temp = self.temp.as_c_str();
            // SAFETY: our directory descriptor and NUL-terminated names.
            if unsafe { libc::renameat(dir, temp, dir, self.name.as_c_str()) } == 0 {
                self.named = false;
                return Ok(());
            }
            Err(platform::errno())
        };
        self.remove_temp();
        result
    }

    fn remove_temp(&mut self) {
        if core::mem::replace(&mut self.named, false) {
            // SAFETY: our directory descriptor and NUL-terminated name.
            unsafe { libc::unlinkat(self.dir, self.temp.as_c_str(), 0) };
        }
    }

    fn target_is_symlink(&mut self) -> bool {
        // SAFETY: an all-zero stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: our directory descriptor, a NUL-terminated name, a valid out-parameter.
        let rc = unsafe {
            libc::fstatat(
                self.dir,
                self.name.as_c_str(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        rc == 0 && crate::platform::is_file_type(&st, libc::S_IFLNK)
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        // SAFETY: our descriptors, each closed once (`place` leaves `fd` at -1).
        unsafe {
            if self.fd >= 0 {
                libc::close(self.fd);
            }
        }
        self.remove_temp();
        // SAFETY: as above.
        unsafe { libc::close(self.dir) };
    }
}

/// `/proc/self/fd/<fd>`.
fn proc_fd_path(fd: i32) -> StackBuf<32> {
    let mut path = StackBuf::new();
    let _ = fmt::Write::write_fmt(&mut path, format_args!("/proc/self/fd/{fd}"));
    path
}

/// The directory as an O_PATH descriptor, opened one component at a time from `/` or the
/// working directory, so that no path-sized buffer is needed: this runs in signal handlers, on
/// alternate stacks of 16 KiB. The kernel resolves each component as it would the whole path
/// (symlinks to directories are followed, `..` works).
fn open_dir(path: &[u8]) -> Result<i32, i32> {
    if path.len() >= 4096 {
        return Err(libc::ENAMETOOLONG);
    }
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let start = if path.first() == Some(&b'/') {
        c"/"
    } else {
        c"."
    };
    // SAFETY: a NUL-terminated literal path.
    let mut dir = unsafe { libc::open(start.as_ptr(), flags) };
    for component in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
        if dir < 0 {
            break;
        }
        let mut name = StackBuf::<{ NAME_MAX + 1 }>::new();
        name.push_bytes(component);
        let next = if name.truncated() || component.len() > NAME_MAX {
            platform::set_errno(libc::ENAMETOOLONG);
            -1
        } else {
            // SAFETY: our directory descriptor and a NUL-terminated name.
            unsafe { libc::openat(dir, name.as_c_str(), flags) }
        };
        let errno = platform::errno();
        // SAFETY: our descriptor, replaced by the next one.
        unsafe { libc::close(dir) };
        platform::set_errno(errno);
        dir = next;
    }
    if dir < 0 {
        return Err(platform::errno());
    }
    Ok(dir)
}

/// 64 bits from the kernel's generator (without blocking), or, should it refuse, from the clock,
/// the thread and a counter (unique within the process; unpredictable enough with O_EXCL).
fn random() -> u64 {
    let mut value = 0u64;
    // SAFETY: the kernel writes at most 8 bytes into `value`.
    let got = unsafe {
        libc::syscall(
            libc::SYS_getrandom,
            &mut value as *mut u64,
            8usize,
            libc::GRND_NONBLOCK,
        )
    };
    if got == 8 {
        return value;
    }
    static COUNTER: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
    let (secs, nanos) = platform::realtime();
    let mut x = (secs as u64)
        ^ ((nanos as u64) << 20)
        ^ ((platform::gettid() as u64) << 40)
        ^ COUNTER
            .fetch_add(1, core::sync::atomic::Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // splitmix64's finaliser.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
