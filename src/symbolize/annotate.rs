//! Frame lines annotated by `malloc-debug run` (host only): when the CLI runs the program it
//! serves `  FUNCTION at FILE:LINE` for frame lines on a Unix socket whose path is in
//! `MALLOC_DEBUG_ANNOTATE_SOCKET` (tools/malloc-debug/src/annotate.rs has the protocol), and a
//! symbolizer asks it once for each distinct frame line it renders (rendered.rs keeps the
//! answer with the line). Without the variable, or when the server cannot be reached, lines go
//! out as the library renders them; nothing here ever fails a report.
//!
//! Requests happen on report paths only, never on an allocation path, and each waits at most
//! `TIMEOUT_S` for its answer, so a CLI that stopped answering costs a report time, not the
//! program its life. A connection belongs to the process that made it: a fork child that
//! inherits a symbolizer connects again. A module the server says has nothing to add is not
//! asked about again (`-`), so a program without debug information costs one request per module.

use crate::fmt::StackBuf;

const SOCKET_ENV: &core::ffi::CStr = c"MALLOC_DEBUG_ANNOTATE_SOCKET";
const TIMEOUT_S: libc::time_t = 5;
/// Modules remembered as having nothing to add (direct-mapped by key; a collision only costs
/// a request).
const SILENT: usize = 64;

const NOT_CONNECTED: i32 = -1;
const OFF: i32 = -2;

/// Most lines asked about in one round trip.
pub const BATCH: usize = 16;

/// One frame line to annotate.
pub struct Request {
    /// The symbolizer's frame index.
    pub frame: usize,
    /// `module_key` of the frame's module; `None` for a frame the CLI would not annotate.
    pub module: Option<u64>,
    /// The rendered line, newline included; annotated in place.
    pub line: StackBuf<1024>,
    /// How many bytes the annotation added (before the newline).
    pub added: usize,
}

fn slot(module: u64) -> usize {
    (module as usize >> 1) % SILENT
}

pub struct Annotator {
    /// The connected socket, NOT_CONNECTED, or OFF (no server, or it failed).
    fd: i32,
    /// The socket's identity (device, inode): another thread of the program may close the
    /// descriptor and reuse its number for a file of its own during a report.
    identity: (u64, u64),
    /// The process that connected `fd`.
    pid: i32,
    silent: [u64; SILENT],
    inbox: Inbox,
}

/// A module's key for the silent set (never 0, the empty slot).
pub fn module_key(path: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in path {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h | 1
}

impl Annotator {
    pub const fn new() -> Self {
        Annotator {
            fd: NOT_CONNECTED,
            identity: (0, 0),
            pid: 0,
            silent: [0; SILENT],
            inbox: Inbox {
                bytes: [0; 512],
                len: 0,
            },
        }
    }

    /// Inserts the server's text before the newline of each request's line (a rendered frame
    /// line), asking about all of them in one round trip: every request is written, then every
    /// answer read. Requests of modules known to have nothing, and lines too long to be asked
    /// whole, are left as they are.
    pub fn annotate(&mut self, requests: &mut [Option<Request>]) {
        let saved = crate::platform::errno();
        let mut asked = [false; BATCH];
        let mut any = false;
        for (r, asked) in requests.iter().zip(asked.iter_mut()) {
            if let Some(r) = r
                && let Some(module) = r.module
            {
                // One newline, at the end: a path with a newline in it would be two requests.
                let lines = r.line.as_bytes().iter().filter(|&&b| b == b'\n').count();
                *asked = self.silent[slot(module)] != module && !r.line.truncated() && lines == 1;
                any |= *asked;
            }
        }
        if any && self.connected() {
            // The requests go out together, in as few writes as fit a page each.
            let mut out = StackBuf::<4096>::new();
            let mut sent = true;
            for r in requests
                .iter()
                .zip(&asked)
                .filter_map(|(r, &a)| r.as_ref().filter(|_| a))
            {
                // A line is at most 1 KiB: it always fits an emptied buffer.
                if out.len() + r.line.len() > 4096 {
                    sent &= write_all(self.fd, out.as_bytes());
                    out.clear();
                }
                out.push_bytes(r.line.as_bytes());
            }
            sent &= out.is_empty() || write_all(self.fd, out.as_bytes());
            for (r, &a) in requests.iter_mut().zip(&asked) {
                let Some(r) = r.as_mut().filter(|_| a && sent) else {
                    continue;
                };
                let mut answer = StackBuf::<1024>::new();
                if !read_line(self.fd, &mut self.inbox, &mut answer) {
                    self.fail();
                    break;
                }
                self.apply(r, answer.as_bytes());
            }
            if !sent {
                self.fail();
            }
        }
        crate::platform::set_errno(saved);
    }

    fn apply(&mut self, r: &mut Request, answer: &[u8]) {
        match answer {
            [b'+', text @ ..] => {
                let body = r.line.as_bytes();
                let body = body.strip_suffix(b"\n").unwrap_or(body);
                let mut out = StackBuf::<1024>::new();
                out.push_bytes(body);
                out.push_bytes(text);
                out.push_bytes(b"\n");
                if !out.truncated() {
                    r.line = out;
                    r.added = text.len();
                }
            }
            b"-" => {
                if let Some(module) = r.module {
                    self.silent[slot(module)] = module;
                }
            }
            _ => {}
        }
    }

    /// Whether a connection of this process is open, connecting once if none was tried.
    fn connected(&mut self) -> bool {
        let pid = crate::platform::getpid();
        if self.fd >= 0 && self.pid != pid {
            // Inherited across fork: the parent's connection is not this process's.
            self.fd = NOT_CONNECTED;
            self.inbox.len = 0;
        }
        if self.fd == NOT_CONNECTED {
            self.fd = connect().unwrap_or(OFF);
            self.pid = pid;
            self.identity = crate::platform::stat_of(self.fd).unwrap_or((0, 0));
            return self.fd >= 0;
        }
        if self.fd >= 0 && crate::platform::stat_of(self.fd) != Some(self.identity) {
            // Not our socket any more: the number belongs to the program now, left alone.
            self.fd = OFF;
        }
        self.fd >= 0
    }

    /// A broken connection: no more requests from this symbolizer.
    fn fail(&mut self) {
        self.close();
        self.fd = OFF;
        self.inbox.len = 0;
    }

    fn close(&mut self) {
        if self.fd >= 0 && self.pid == crate::platform::getpid() {
            // SAFETY: our own socket, closed once.
            unsafe { libc::close(self.fd) };
        }
    }
}

impl Drop for Annotator {
    fn drop(&mut self) {
        self.close();
    }
}

/// Whether the program runs under `malloc-debug run`'s annotation server (read once: `run`
/// sets the variable before the program starts; reports ask for every frame).
pub fn configured() -> bool {
    use core::sync::atomic::{AtomicU8, Ordering};
    static KNOWN: AtomicU8 = AtomicU8::new(0);
    match KNOWN.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            // SAFETY: a NUL-terminated name; getenv neither allocates nor keeps the pointer.
            let set = !unsafe { libc::getenv(SOCKET_ENV.as_ptr()) }.is_null();
            KNOWN.store(if set { 2 } else { 1 }, Ordering::Relaxed);
            set
        }
    }
}

fn connect() -> Option<i32> {
    // SAFETY: a NUL-terminated name; getenv neither allocates nor keeps the pointer.
    let path = unsafe { libc::getenv(SOCKET_ENV.as_ptr()) };
    if path.is_null() {
        return None;
    }
    // SAFETY: getenv's answer is a NUL-terminated string of the environment.
    let path = unsafe { crate::fmt::c_str_bytes(path) };
    // SAFETY: sockaddr_un is plain data; all zeros is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    if path.is_empty() || path.len() >= addr.sun_path.len() {
        return None;
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, &s) in addr.sun_path.iter_mut().zip(path) {
        *d = s as libc::c_char;
    }
    // SAFETY: plain system calls on a socket this function owns.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let timeout = libc::timeval {
            tv_sec: TIMEOUT_S,
            tv_usec: 0,
        };
        for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&timeout as *const libc::timeval).cast(),
                core::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
        }
        let len = core::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        if libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len) != 0 {
            libc::close(fd);
            return None;
        }
        // Above the standard descriptors, which a program that closed them may reopen by
        // number (as the log file does, src/log_file.rs).
        let high = crate::platform::above_stdio(fd);
        (high >= 0).then_some(high)
    }
}

fn write_all(fd: i32, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: writes from a valid slice; MSG_NOSIGNAL: a closed server is an error, not a
        // SIGPIPE for the program.
        let n = unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) };
        if n < 0 && crate::platform::errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

/// Received bytes not consumed yet: answers to pipelined requests arrive together.
struct Inbox {
    bytes: [u8; 512],
    len: usize,
}

/// Reads one answer line (without its newline) into `out`; a line longer than `out` is read to
/// its end and comes back empty.
fn read_line(fd: i32, inbox: &mut Inbox, out: &mut StackBuf<1024>) -> bool {
    loop {
        let held = &inbox.bytes[..inbox.len];
        if let Some(nl) = held.iter().position(|&b| b == b'\n') {
            out.push_bytes(&held[..nl]);
            if out.truncated() {
                out.clear();
            }
            inbox.bytes.copy_within(nl + 1..inbox.len, 0);
            inbox.len -= nl + 1;
            return true;
        }
        if inbox.len == inbox.bytes.len() {
            // No newline in a full inbox: part of an overlong line.
            out.push_bytes(held);
            inbox.len = 0;
        }
        let free = &mut inbox.bytes[inbox.len..];
        // SAFETY: reads into the free part of a local buffer.
        let n = unsafe { libc::recv(fd, free.as_mut_ptr().cast(), free.len(), 0) };
        if n < 0 && crate::platform::errno() == libc::EINTR {
            continue;
        }
        if n <= 0 {
            return false;
        }
        inbox.len += n as usize;
    }
}
