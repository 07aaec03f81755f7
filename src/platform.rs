//! What differs between Android (bionic) and a glibc host: the program name,
//! thread ids, default output directories. Everything here is allocation-free.

use core::ffi::{c_char, c_int};

/// The program name used as the `%s` prefix of messages (`getprogname()` on bionic).
pub fn progname() -> &'static [u8] {
    // SAFETY: both symbols are NUL-terminated strings owned by libc for the process lifetime.
    unsafe {
        let p = raw_progname();
        if p.is_null() {
            b"<unknown>"
        } else {
            crate::fmt::c_str_bytes(p)
        }
    }
}

#[cfg(target_os = "android")]
unsafe fn raw_progname() -> *const c_char {
    unsafe extern "C" {
        fn getprogname() -> *const c_char;
    }
    // SAFETY: bionic's getprogname has no preconditions.
    unsafe { getprogname() }
}

#[cfg(not(target_os = "android"))]
unsafe fn raw_progname() -> *const c_char {
    unsafe extern "C" {
        static program_invocation_short_name: *const c_char;
    }
    // SAFETY: glibc initialises this before any constructor runs and never frees it.
    unsafe { program_invocation_short_name }
}

pub fn getpid() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::getpid() }
}

/// A value distinct for every live thread, read without a system call or a memory access
/// beyond the thread register: the thread pointer (TLS base). Used to spread threads over
/// sharded structures, never as an identity that must survive the thread.
#[inline(always)]
pub fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: reads the thread register (fs base's self pointer on x86_64, tpidr_el0 on
    // aarch64), which both glibc and bionic set for every thread; no memory is written.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        core::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nomem, nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        // Stacks of different threads are far apart; a frame of this thread is near its others.
        let local = 0u8;
        tp = (core::ptr::addr_of!(local) as usize) >> 16;
    }
    tp
}

/// Which of `shards` shards of a sharded structure this thread uses: a hash of the thread
/// pointer, distinct per live thread and one register read away.
#[inline(always)]
pub fn thread_shard(shards: usize) -> usize {
    if shards == 1 {
        return 0;
    }
    let hashed = (thread_pointer() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // The hash's top 32 bits scaled to [0, shards) by a multiply: `%` by a count known only at
    // run time was a division on every free_track free (half a percent of its samples).
    (((hashed >> 32) * shards as u64) >> 32) as usize
}

/// Whether a `stat`'s mode has file type `kind` (`libc::S_IFREG`, ...). The casts are for 32-bit
/// bionic, whose `S_IF*` constants are 16-bit while `st_mode` is 32.
#[allow(clippy::unnecessary_cast)]
pub fn is_file_type(st: &libc::stat, kind: libc::mode_t) -> bool {
    st.st_mode as u32 & libc::S_IFMT as u32 == kind as u32
}

pub fn gettid() -> i32 {
    // SAFETY: no preconditions; bionic caches the tid (no system call per log record).
    #[cfg(target_os = "android")]
    return unsafe { libc::gettid() };
    // SAFETY: the raw syscall has no preconditions and cannot fail; libc's wrapper is not
    // available on every glibc we build against.
    #[cfg(not(target_os = "android"))]
    unsafe {
        libc::syscall(libc::SYS_gettid) as i32
    }
}

/// Writes all of `bytes` to fd 2, retrying on EINTR and short writes; errors are ignored (there
/// is nowhere left to report them).
pub fn write_stderr(bytes: &[u8]) {
    write_fd(2, bytes);
}

/// `write_fd` for the log, which must never kill the program: a write to a pipe whose reader has
/// gone raises SIGPIPE, whose default action ends the process (a program piped into `head`
/// exited 141 instead of 0 once the exit report outgrew what head read), and a handler of the
/// program's would see a signal it did not cause. SIGPIPE is blocked for the write, and one the
/// write raised is taken back before it is unblocked (it is sent to the writing thread).
pub fn write_fd_no_sigpipe(fd: c_int, bytes: &[u8]) -> bool {
    const PIPE: u64 = 1 << (libc::SIGPIPE - 1);
    let old = mask_signals(libc::SIG_BLOCK, PIPE);
    let mut pending: u64 = 0;
    // SAFETY: rt_sigpending with an 8-byte kernel set that outlives the call.
    unsafe { libc::syscall(libc::SYS_rt_sigpending, &mut pending, 8usize) };
    let written = write_fd(fd, bytes);
    if !written && errno() == libc::EPIPE && pending & PIPE == 0 {
        let now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: takes back the SIGPIPE this write raised (it is pending on this thread, where
        // it is blocked); the set and the time-out outlive the call, no siginfo is asked for.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigtimedwait,
                &PIPE,
                core::ptr::null_mut::<libc::siginfo_t>(),
                &now,
                8usize,
            )
        };
    }
    if old & PIPE == 0 {
        mask_signals(libc::SIG_UNBLOCK, PIPE);
    }
    written
}

/// Blocks or unblocks (`how`: SIG_BLOCK, SIG_UNBLOCK) the signals of `set` for this thread, one
/// bit per signal as the kernel counts them, and returns the mask as it was. The raw system call
/// with the kernel's 8-byte set: libc's `sigprocmask` refuses bionic's reserved signals (the
/// backtrace signal, src/sync.rs), and its 128-byte `sigset_t` weighs on the 16 KiB alternate
/// stacks of the signal handlers that log.
pub fn mask_signals(how: c_int, set: u64) -> u64 {
    let mut old: u64 = 0;
    // SAFETY: rt_sigprocmask with 8-byte kernel sets that outlive the call.
    unsafe { libc::syscall(libc::SYS_rt_sigprocmask, how, &set, &mut old, 8usize) };
    old
}

/// The (device, inode) of descriptor `fd`, if it is open.
pub fn stat_of(fd: c_int) -> Option<(u64, u64)> {
    let mut st = core::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a whole `stat` into `st` on success.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: initialised by the successful fstat.
    let st = unsafe { st.assume_init() };
    #[allow(
        clippy::unnecessary_cast,
        reason = "dev_t and ino_t are not u64 on every target"
    )]
    Some((st.st_dev as u64, st.st_ino as u64))
}

/// `fd` itself, or, when it took descriptor 0, 1 or 2, a duplicate above them (and `fd`
/// closed): a file the library writes must not be where the program's standard streams write
/// meanwhile, as they would into it in a program that closed them. -1, errno set, on failure.
pub fn above_stdio(fd: c_int) -> c_int {
    if !(0..3).contains(&fd) {
        return fd;
    }
    // SAFETY: duplicates the caller's descriptor above 2.
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    let errno = errno();
    // SAFETY: the caller's descriptor, handed over to this function.
    unsafe { libc::close(fd) };
    set_errno(errno);
    high
}

/// Thread cancellation held off while it lives (glibc). The library's slow paths write logs and
/// files, read `/proc` and wait for children, all cancellation points: a thread cancelled there
/// unwound out of a report and left the library's locks and counts held, so the process hung
/// or crashed (`pthread_cancel` of a thread inside an error report, tests/front.rs). A pending
/// cancellation acts at the program's next cancellation point instead. Bionic has no
/// `pthread_cancel`.
pub struct CancelOff {
    #[cfg(not(target_os = "android"))]
    restore: bool,
}

#[cfg(not(target_os = "android"))]
unsafe extern "C" {
    fn pthread_setcancelstate(state: c_int, old: *mut c_int) -> c_int;
}
/// glibc's `PTHREAD_CANCEL_ENABLE` and `PTHREAD_CANCEL_DISABLE`.
#[cfg(not(target_os = "android"))]
const CANCEL_ENABLE: c_int = 0;
#[cfg(not(target_os = "android"))]
const CANCEL_DISABLE: c_int = 1;

impl CancelOff {
    pub fn new() -> Self {
        #[cfg(not(target_os = "android"))]
        {
            let mut old = CANCEL_DISABLE;
            // SAFETY: `old` is a valid out-parameter; the call is not a cancellation point.
            unsafe { pthread_setcancelstate(CANCEL_DISABLE, &mut old) };
            CancelOff {
                restore: old == CANCEL_ENABLE,
            }
        }
        #[cfg(target_os = "android")]
        CancelOff {}
    }

    /// Whether dropping it enables cancellation again (`DisabledScope::into_raw`).
    pub fn restores(&self) -> bool {
        #[cfg(not(target_os = "android"))]
        return self.restore;
        #[cfg(target_os = "android")]
        false
    }

    /// The guard `restores` described (`DisabledScope::from_raw`).
    pub fn from_restores(restore: bool) -> Self {
        #[cfg(target_os = "android")]
        let _ = restore;
        CancelOff {
            #[cfg(not(target_os = "android"))]
            restore,
        }
    }
}

impl Drop for CancelOff {
    fn drop(&mut self) {
        #[cfg(not(target_os = "android"))]
        if self.restore {
            let mut old = CANCEL_DISABLE;
            // SAFETY: as in new().
            unsafe { pthread_setcancelstate(CANCEL_ENABLE, &mut old) };
        }
    }
}

pub fn write_fd(fd: c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid readable slice for its length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return false;
        }
        if n == 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

/// Starts loading the cache line at `address` without waiting for it: for a line the caller
/// will touch after some other work, so that the miss overlaps that work. Never faults, whatever
/// the address (a hint to the CPU, on both architectures).
#[inline(always)]
pub fn prefetch(address: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 reads nothing architecturally and never faults.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            address as *const i8,
        )
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: PRFM is a hint: it never faults and changes no register or memory.
    unsafe {
        core::arch::asm!("prfm pldl1keep, [{0}]", in(reg) address, options(nostack, preserves_flags, readonly))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = address;
}

pub fn errno() -> c_int {
    // SAFETY: the errno location is valid for the calling thread.
    unsafe { *errno_location() }
}

pub fn set_errno(value: c_int) {
    // SAFETY: the errno location is valid for the calling thread.
    unsafe { *errno_location() = value }
}

/// Runs `f` and puts errno back as it was: for internal work that makes system calls (files,
/// dumps, reports, the signal-driven work) inside calls that succeed, which must leave errno
/// alone (README "Differences from the reference").
#[inline]
pub fn keeping_errno<R>(f: impl FnOnce() -> R) -> R {
    let saved = SavedErrno::save();
    let result = f();
    saved.restore();
    result
}

/// errno as a call found it, and where this thread's errno lives: saving and restoring around
/// an allocation call then costs one libc call, not two.
pub struct SavedErrno {
    location: *mut c_int,
    value: c_int,
}

impl SavedErrno {
    #[inline(always)]
    pub fn save() -> Self {
        // SAFETY: no preconditions; the location is valid for the calling thread's lifetime.
        let location = unsafe { errno_location() };
        // SAFETY: as above.
        let value = unsafe { *location };
        SavedErrno { location, value }
    }

    #[inline(always)]
    pub fn restore(&self) {
        // SAFETY: the calling thread's errno (a SavedErrno is not Send: raw pointer field).
        unsafe { *self.location = self.value }
    }
}

#[cfg(target_os = "android")]
unsafe fn errno_location() -> *mut c_int {
    // SAFETY: no preconditions.
    unsafe { libc::__errno() }
}

#[cfg(not(target_os = "android"))]
unsafe fn errno_location() -> *mut c_int {
    // SAFETY: no preconditions.
    unsafe { libc::__errno_location() }
}

/// Log priorities of the Android log (only these two are used; docs/spec/errors.md#conventions).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Priority {
    Info = 4,
    Error = 6,
}

impl Priority {
    pub fn letter(self) -> u8 {
        match self {
            Priority::Info => b'I',
            Priority::Error => b'E',
        }
    }
}

/// Realtime clock as (seconds, nanoseconds) since the epoch.
pub fn realtime() -> (i64, i64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    #[allow(
        clippy::useless_conversion,
        reason = "time_t and c_long are 32 bits on 32-bit targets"
    )]
    (i64::from(ts.tv_sec), i64::from(ts.tv_nsec))
}

/// Aborts the process after writing `msg` to stderr (and the Android abort message).
#[cfg_attr(
    test,
    allow(dead_code, reason = "the panic handler is not built into unit tests")
)]
pub fn abort_with_message(msg: &str) -> ! {
    write_stderr(msg.as_bytes());
    write_stderr(b"\n");
    #[cfg(target_os = "android")]
    {
        unsafe extern "C" {
            fn android_set_abort_message(msg: *const c_char);
        }
        let mut buf = crate::fmt::StackBuf::<256>::new();
        buf.push_bytes(msg.as_bytes());
        // SAFETY: buf is NUL-terminated by as_c_str and lives across the call.
        unsafe { android_set_abort_message(buf.as_c_str()) };
    }
    // SAFETY: abort has no preconditions and does not return.
    unsafe { libc::abort() }
}

/// Does `/data/local/tmp` exist (where Android writes dumps and records)? See
/// `Config::localize_default_paths`.
pub fn data_local_tmp_exists() -> bool {
    // SAFETY: NUL-terminated literal path.
    unsafe { libc::access(c"/data/local/tmp".as_ptr(), libc::F_OK) == 0 }
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; _SC_PAGESIZE is always available.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}

/// The build fingerprint for heap dumps: the property on Android, `unknown` elsewhere (the
/// reference's default for an unset property).
pub fn build_fingerprint(out: &mut dyn FnMut(&[u8])) {
    #[cfg(target_os = "android")]
    {
        let mut value = [0u8; 92];
        // SAFETY: PROP_VALUE_MAX-sized buffer, NUL-terminated name.
        let n = unsafe {
            libc::__system_property_get(c"ro.build.fingerprint".as_ptr(), value.as_mut_ptr().cast())
        };
        if n > 0 {
            out(&value[..(n as usize).min(91)]);
            return;
        }
    }
    out(b"unknown");
}

/// Reads `N` bytes at each address of `addresses` (ascending), memory that may not be mapped
/// (or may be unmapped meanwhile), without faulting: `out[i]` is what `addresses[i]` holds, or
/// `None`. Neighbouring records are read as one run of at most `MAX_RUN` bytes, as many runs per
/// system call as `scratch` holds: the kernel's cost is mostly per run (the pages it looks up),
/// so the headers of a heap of small blocks cost a system call per few hundred blocks instead
/// of a run each. A run that cannot be read (some page of it is gone), or that does not fit in
/// `scratch` (empty when none could be had), is read record by record.
pub fn read_foreign_records<const N: usize>(
    addresses: &[usize],
    out: &mut [Option<[u8; N]>],
    scratch: &mut [u8],
) {
    const MAX_RUN: usize = 4096;
    const RUNS: usize = 64;
    let read_each = |addresses: &[usize], out: &mut [Option<[u8; N]>]| {
        for (read, &address) in out.iter_mut().zip(addresses) {
            let mut record = [0u8; N];
            *read = read_foreign(address, &mut record).then_some(record);
        }
    };
    let mut next = 0;
    while next < addresses.len() {
        // Runs: (first record, one past the last) into `addresses`, and their iovecs.
        let mut runs = [(0usize, 0usize); RUNS];
        let mut remote = [libc::iovec {
            iov_base: core::ptr::null_mut(),
            iov_len: 0,
        }; RUNS];
        let mut count = 0;
        let mut bytes = 0;
        while count < RUNS && next < addresses.len() {
            let start = addresses[next];
            let mut end = next + 1;
            while end < addresses.len()
                && addresses[end] >= addresses[end - 1]
                && addresses[end] + N - start <= MAX_RUN
            {
                end += 1;
            }
            let len = addresses[end - 1] + N - start;
            if bytes + len > scratch.len() {
                if count > 0 {
                    break;
                }
                read_each(&addresses[next..end], &mut out[next..end]);
                next = end;
                continue;
            }
            runs[count] = (next, end);
            remote[count] = libc::iovec {
                iov_base: start as *mut libc::c_void,
                iov_len: len,
            };
            count += 1;
            bytes += len;
            next = end;
        }
        if count == 0 {
            continue;
        }
        let local = libc::iovec {
            iov_base: scratch.as_mut_ptr().cast(),
            iov_len: bytes,
        };
        // SAFETY: as in `read_foreign`: the kernel copies from our own address space into
        // `scratch` (room for every run), and stops at the first run it cannot read whole (it
        // never splits one).
        let n = crate::platform::keeping_errno(|| unsafe {
            libc::process_vm_readv(libc::getpid(), &local, 1, remote.as_ptr(), count as _, 0)
        });
        let mut read = if n < 0 { 0 } else { n as usize };
        let mut at = 0;
        for (&(first, end), iov) in runs[..count].iter().zip(&remote) {
            let start = iov.iov_base as usize;
            if read >= iov.iov_len {
                for i in first..end {
                    let offset = at + addresses[i] - start;
                    let mut record = [0u8; N];
                    record.copy_from_slice(&scratch[offset..offset + N]);
                    out[i] = Some(record);
                }
                read -= iov.iov_len;
            } else {
                read = 0;
                read_each(&addresses[first..end], &mut out[first..end]);
            }
            at += iov.iov_len;
        }
    }
}

/// Whether `read_foreign` works in this process (a seccomp filter may refuse
/// `process_vm_readv`, qemu's user mode lacks it). Probed once.
pub fn can_read_foreign() -> bool {
    use core::sync::atomic::{AtomicU8, Ordering};
    const UNKNOWN: u8 = 0;
    const WORKS: u8 = 1;
    const REFUSED: u8 = 2;
    static ANSWER: AtomicU8 = AtomicU8::new(UNKNOWN);
    match ANSWER.load(Ordering::Relaxed) {
        UNKNOWN => {
            let probe = 0x5eed_u32;
            let works = read_foreign_u32(&probe as *const u32 as usize) == Some(probe);
            ANSWER.store(if works { WORKS } else { REFUSED }, Ordering::Relaxed);
            works
        }
        known => known == WORKS,
    }
}

/// Reads 4 bytes at an address that may not be mapped, without faulting.
pub fn read_foreign_u32(address: usize) -> Option<u32> {
    let mut value = [0u8; 4];
    read_foreign(address, &mut value).then(|| u32::from_ne_bytes(value))
}

/// Fills `into` from memory at `address` that may not be mapped (or may be unmapped meanwhile
/// by another thread), without faulting: true when all of it could be read.
pub fn read_foreign(address: usize, into: &mut [u8]) -> bool {
    let local = libc::iovec {
        iov_base: into.as_mut_ptr().cast(),
        iov_len: into.len(),
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: into.len(),
    };
    // SAFETY: the kernel copies from our own address space and reports EFAULT instead of
    // faulting; `local` is `into`, live and writable. A failed read is an answer here, not the
    // caller's error: errno stays as it was.
    let n = crate::platform::keeping_errno(|| unsafe {
        libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0)
    });
    n >= 0 && n as usize == into.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_reads_skip_what_cannot_be_read_and_go_on() {
        // SAFETY: a fresh inaccessible page, unmapped at the end.
        let unreadable = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                4096,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as usize;
        assert_ne!(unreadable, libc::MAP_FAILED as usize);
        // Records 16 bytes apart (runs of many), and far apart (a run each), with unreadable
        // ones among them: at the start, inside runs, at the end.
        let near: std::vec::Vec<u32> = (0..3000).collect();
        let far: std::vec::Vec<std::boxed::Box<[u32; 2048]>> = (0..50u32)
            .map(|i| std::boxed::Box::new([i + 5000; 2048]))
            .collect();
        let mut addresses: std::vec::Vec<usize> = near
            .iter()
            .step_by(4)
            .map(|v| v as *const u32 as usize)
            .chain(far.iter().map(|b| b.as_ptr() as usize))
            .collect();
        let bad = [0, 5, 127, 128, 600, 790, addresses.len() - 1];
        for &i in &bad {
            addresses[i] = unreadable + 16 * i % 4096;
        }
        let mut sorted: std::vec::Vec<(usize, usize)> = addresses
            .iter()
            .copied()
            .enumerate()
            .map(|(i, a)| (a, i))
            .collect();
        sorted.sort();
        let ordered: std::vec::Vec<usize> = sorted.iter().map(|&(a, _)| a).collect();
        // With room for many runs, and with none (every record read on its own).
        for room in [16 * 1024, 0] {
            let mut out = std::vec![None; ordered.len()];
            let mut scratch = std::vec![0u8; room];
            read_foreign_records::<4>(&ordered, &mut out, &mut scratch);
            for (k, &(address, i)) in sorted.iter().enumerate() {
                let expected = (!bad.contains(&i)).then(|| {
                    // SAFETY: a readable u32 of this test (not one of the bad addresses).
                    unsafe { (address as *const u32).read() }.to_ne_bytes()
                });
                assert_eq!(out[k], expected, "record {i}, scratch {room}");
            }
        }
        assert!(can_read_foreign());
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(unreadable as *mut libc::c_void, 4096) };
    }

    #[test]
    fn threads_spread_over_every_shard_count() {
        // Threads alive at once (a joined thread's control block is reused by the next).
        let threads = 32;
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(threads));
        for shards in [1, 2, 3, 7, 64] {
            let handles: std::vec::Vec<_> = (0..threads)
                .map(|_| {
                    let barrier = barrier.clone();
                    std::thread::spawn(move || {
                        barrier.wait();
                        let shard = thread_shard(shards);
                        barrier.wait();
                        shard
                    })
                })
                .collect();
            let seen: std::vec::Vec<usize> =
                handles.into_iter().map(|h| h.join().unwrap()).collect();
            assert!(seen.iter().all(|&s| s < shards), "{shards}: {seen:?}");
            if shards > 1 {
                assert!(seen.iter().any(|&s| s != seen[0]), "{shards}: {seen:?}");
            }
        }
    }
}
