//! The path to Android's logd, owned by the library (README "Differences from the reference",
//! docs/logging.md): one datagram per record on `/dev/socket/logdw`, in the layout liblog's
//! `logd_writer` and bionic's async-safe log send and logd's `LogListener` reads:
//!
//! ```text
//! u8 log id (LOG_ID_MAIN = 0) | u16 tid | u32 realtime seconds | u32 nanoseconds   (packed, LE)
//! u8 priority | tag NUL | message NUL                      (payload, at most 4068 bytes)
//! ```
//!
//! Why not liblog: at exit libc has often closed fds 0-2, and liblog's lazily opened socket then
//! comes out as fd 0, which Android 11's liblog takes for "no socket" (the record is dropped and
//! success returned); and liblog's socket is non-blocking, so a burst of records (an exit leak
//! report) fills logd's queue and every further record fails with EAGAIN and is dropped.
//!
//! The model:
//! - One process-wide socket, opened lazily, unconnected (every datagram carries logd's address,
//!   so a restarted logd is found again without reconnecting), close-on-exec and never at fd 0-2
//!   (it is moved to >= 3). Its descriptor and socket inode are published together in one atomic
//!   word; two threads that open at once keep the winner's and close their own. No lock: one
//!   `sendmsg` per record is atomic for datagrams, so records never mix.
//! - Before each send the descriptor is checked with `fstat` to still be our socket: a program
//!   may close every descriptor and reuse the number, and a record must never go into its files
//!   or connections. A descriptor that is no longer ours is left alone and a new socket opened.
//! - A full logd queue is waited for, bounded: the socket has a 1 s send time-out
//!   (`SO_SNDTIMEO`), so the kernel parks the sender until logd drains or the time is up. A record
//!   that timed out is dropped and the next ones do not wait until one gets through again, so a
//!   hung logd costs at most about a second, not a second per record.
//! - logd absent (no socket at the path, nobody listening): `send` returns false and the caller
//!   falls back to stderr.
//!
//! Nothing here allocates or takes a lock; errno is the caller's to save (`log::write_record`).

use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// logd's datagram socket.
pub const LOGDW: &[u8] = b"/dev/socket/logdw";
/// liblog's LOGGER_ENTRY_MAX_PAYLOAD: logd keeps at most this much after the header.
pub const MAX_PAYLOAD: usize = 4068;
const HEADER_LEN: usize = 11;
const LOG_ID_MAIN: u8 = 0;
/// How long one record may wait for room in logd's queue.
const SEND_TIMEOUT_SECS: libc::time_t = 1;
/// Retries of a send interrupted by a signal, and of a socket found stale.
const RETRIES: usize = 8;

/// The socket: `(inode as u32) << 32 | fd`, or `NONE`.
static SOCKET: AtomicU64 = AtomicU64::new(NONE);
const NONE: u64 = u64::MAX;
/// The last record timed out: do not wait for the next ones.
static STALLED: AtomicBool = AtomicBool::new(false);

/// Outcome of one record.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Sent {
    /// logd has the record.
    Delivered,
    /// logd exists but did not take the record in time (or refused it): dropped.
    Dropped,
    /// No logd at the path: the caller should use another sink.
    NoLogd,
}

/// The 11-byte header of a record.
pub fn header(tid: i32, secs: i64, nanos: i64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0] = LOG_ID_MAIN;
    // liblog truncates the tid and the seconds the same way.
    h[1..3].copy_from_slice(&(tid as u16).to_le_bytes());
    h[3..7].copy_from_slice(&(secs as u32).to_le_bytes());
    h[7..11].copy_from_slice(&(nanos as u32).to_le_bytes());
    h
}

/// How much of `msg` fits in one record with `tag` (the payload holds the priority byte and
/// both NULs too).
pub fn message_room(tag: &[u8], msg: &[u8]) -> usize {
    msg.len().min(MAX_PAYLOAD.saturating_sub(tag.len() + 3))
}

/// Sends one record to the logd socket at `path` (`LOGDW` outside tests). `tag` and `msg` must
/// not contain NUL bytes (a NUL would end them early for logd).
pub fn send(path: &[u8], prio: u8, tag: &[u8], msg: &[u8]) -> Sent {
    let Some(addr) = sockaddr(path) else {
        return Sent::NoLogd;
    };
    let (secs, nanos) = crate::platform::realtime();
    let head = header(crate::platform::gettid(), secs, nanos);
    let msg = &msg[..message_room(tag, msg)];
    let nul = 0u8;
    let parts: [&[u8]; 6] = [
        &head,
        core::slice::from_ref(&prio),
        tag,
        core::slice::from_ref(&nul),
        msg,
        core::slice::from_ref(&nul),
    ];
    let mut iov = parts.map(|p| libc::iovec {
        iov_base: p.as_ptr().cast_mut().cast(),
        iov_len: p.len(),
    });
    // SAFETY: an all-zero msghdr is a valid empty message.
    let mut hdr: libc::msghdr = unsafe { core::mem::zeroed() };
    hdr.msg_name = (&addr as *const libc::sockaddr_un).cast_mut().cast();
    hdr.msg_namelen = core::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    hdr.msg_iov = iov.as_mut_ptr();
    hdr.msg_iovlen = iov.len() as _;

    for _ in 0..RETRIES {
        let Some(fd) = socket() else {
            return Sent::NoLogd;
        };
        let flags = if STALLED.load(Ordering::Relaxed) {
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT
        } else {
            libc::MSG_NOSIGNAL
        };
        // SAFETY: hdr points at live iovecs, buffers and address for the whole call.
        if unsafe { libc::sendmsg(fd, &hdr, flags) } >= 0 {
            STALLED.store(false, Ordering::Relaxed);
            return Sent::Delivered;
        }
        match crate::platform::errno() {
            libc::EINTR => continue,
            // The time-out (or, stalled, a full queue): logd is alive but behind.
            libc::EAGAIN => {
                STALLED.store(true, Ordering::Relaxed);
                return Sent::Dropped;
            }
            libc::ENOENT | libc::ECONNREFUSED | libc::ENOTDIR | libc::EACCES => {
                return Sent::NoLogd;
            }
            // The descriptor went away or changed between the check and the send.
            libc::EBADF | libc::ENOTSOCK => forget(fd),
            _ => return Sent::Dropped,
        }
    }
    Sent::Dropped
}

fn sockaddr(path: &[u8]) -> Option<libc::sockaddr_un> {
    // SAFETY: an all-zero sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    if path.len() >= addr.sun_path.len() {
        return None;
    }
    for (d, &s) in addr.sun_path.iter_mut().zip(path) {
        *d = s as libc::c_char;
    }
    Some(addr)
}

/// The published socket when it is still ours, else a new one.
fn socket() -> Option<c_int> {
    let word = SOCKET.load(Ordering::Acquire);
    if word != NONE {
        let fd = word as u32 as c_int;
        if inode_of(fd) == Some((word >> 32) as u32) {
            return Some(fd);
        }
    }
    let (fd, ino) = open()?;
    let new = (u64::from(ino) << 32) | u64::from(fd as u32);
    match SOCKET.compare_exchange(word, new, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(fd),
        Err(winner) => {
            // Another thread published first: use its socket (checked on the next record).
            // SAFETY: fd is the socket this call just opened and published nowhere.
            unsafe { libc::close(fd) };
            Some(winner as u32 as c_int)
        }
    }
}

/// Drops the published socket if it is still `fd` (its number is no longer ours to close).
fn forget(fd: c_int) {
    let word = SOCKET.load(Ordering::Acquire);
    if word != NONE && word as u32 as c_int == fd {
        let _ = SOCKET.compare_exchange(word, NONE, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// The socket inode behind `fd` (its low 32 bits: sockfs numbers them from a 32-bit counter),
/// or `None` when `fd` is not a socket.
fn inode_of(fd: c_int) -> Option<u32> {
    // SAFETY: an all-zero stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: st is writable; a bad fd only makes fstat fail.
    if unsafe { libc::fstat(fd, &mut st) } != 0
        || !crate::platform::is_file_type(&st, libc::S_IFSOCK)
    {
        return None;
    }
    Some(st.st_ino as u32)
}

/// A new datagram socket at a descriptor >= 3, with the send time-out set.
fn open() -> Option<(c_int, u32)> {
    // fds 0-2 may be closed (libc does so before the exit report on some releases): the
    // socket is kept above them, free for the program and out of stdio's way.
    // SAFETY: plain socket creation.
    let fd = crate::platform::above_stdio(unsafe {
        libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    });
    if fd < 0 {
        return None;
    }
    let timeout = libc::timeval {
        tv_sec: SEND_TIMEOUT_SECS,
        tv_usec: 0,
    };
    // SAFETY: timeout is a valid timeval of the size given.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&timeout as *const libc::timeval).cast(),
            core::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    match inode_of(fd) {
        Some(ino) => Some((fd, ino)),
        None => {
            // SAFETY: our socket, not published.
            unsafe { libc::close(fd) };
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    #[test]
    fn header_layout() {
        let h = header(0x1_2345, 0x1_0000_0002, 999_999_999);
        assert_eq!(h[0], 0);
        assert_eq!(&h[1..3], &0x2345u16.to_le_bytes());
        assert_eq!(&h[3..7], &2u32.to_le_bytes());
        assert_eq!(&h[7..11], &999_999_999u32.to_le_bytes());
    }

    #[test]
    fn long_messages_are_cut_to_the_payload() {
        let tag = b"malloc_debug";
        assert_eq!(message_room(tag, &[b'x'; 10]), 10);
        assert_eq!(
            message_room(tag, &[b'x'; 5000]),
            MAX_PAYLOAD - tag.len() - 3
        );
    }

    #[test]
    fn records_arrive_whole_and_missing_logd_is_reported() {
        let dir = std::env::temp_dir().join(format!("logd-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("logdw");
        let _ = std::fs::remove_file(&path);
        let path_bytes = path.as_os_str().as_encoded_bytes();
        assert_eq!(send(path_bytes, 6, b"malloc_debug", b"x"), Sent::NoLogd);

        let rx = UnixDatagram::bind(&path).unwrap();
        assert_eq!(
            send(path_bytes, 6, b"malloc_debug", b"line 1\nline 2"),
            Sent::Delivered
        );
        let mut buf = [0u8; 8192];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(buf[0], 0, "LOG_ID_MAIN");
        assert_eq!(
            u16::from_le_bytes([buf[1], buf[2]]),
            crate::platform::gettid() as u16
        );
        assert_eq!(&buf[11..n], b"\x06malloc_debug\0line 1\nline 2\0");

        let long = vec![b'y'; 5000];
        assert_eq!(send(path_bytes, 4, b"t", &long), Sent::Delivered);
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(n, HEADER_LEN + MAX_PAYLOAD);
        assert_eq!(&buf[11..14], b"\x04t\0");
        assert_eq!(buf[n - 1], 0);

        // Our descriptor closed behind our back: a new socket is opened, the record arrives.
        let fd = SOCKET.load(Ordering::Acquire) as u32 as c_int;
        // SAFETY: test-only; the socket is ours.
        unsafe { libc::close(fd) };
        assert_eq!(send(path_bytes, 6, b"t", b"again"), Sent::Delivered);
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[11..n], b"\x06t\0again\0");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
