//! The current thread's stack bounds, for the frame-record walk on aarch64 Android.
//!
//! Non-main threads: bionic's `pthread_getattr_np` copies the bounds stored at thread creation
//! (no allocation, no file access). The main thread: bionic would read /proc/self/maps (with
//! stdio, which mallocs), so its bounds are learned once in `init` instead, by our own
//! allocation-free maps reader, and the main thread is recognised by its `pthread_t`.

use core::sync::atomic::{AtomicUsize, Ordering};

static MAIN_THREAD: AtomicUsize = AtomicUsize::new(0);
static MAIN_LO: AtomicUsize = AtomicUsize::new(0);
static MAIN_HI: AtomicUsize = AtomicUsize::new(0);

/// Learns the main thread's stack if called on the main thread; otherwise the frame-record
/// walk stays off for the main thread only if we cannot tell which thread is main, i.e. it is
/// off everywhere (see `bounds`).
pub fn init(sp: usize) {
    if crate::platform::gettid() != crate::platform::getpid() {
        return;
    }
    let Some(maps) = crate::symbolize::maps::Maps::read_self() else {
        return;
    };
    let Some(i) = maps.find_inclusive(sp) else {
        return;
    };
    let hi = maps.entries()[i].end;
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-parameter.
    let limit = if unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut rl) } == 0
        && rl.rlim_cur != libc::RLIM_INFINITY
        && rl.rlim_cur as usize >= 128 * 1024
    {
        rl.rlim_cur as usize
    } else {
        8 << 20
    };
    MAIN_LO.store(hi.saturating_sub(limit), Ordering::Relaxed);
    MAIN_HI.store(hi, Ordering::Relaxed);
    // SAFETY: no preconditions.
    MAIN_THREAD.store(unsafe { libc::pthread_self() } as usize, Ordering::Release);
}

/// `(sp, stack top)` when `sp` is on the current thread's own stack, else `None` (unknown
/// main thread, alternate signal stack, foreign stack).
#[inline]
pub fn bounds(sp: usize) -> Option<(usize, usize)> {
    let main = MAIN_THREAD.load(Ordering::Acquire);
    if main == 0 {
        return None;
    }
    // SAFETY: no preconditions.
    let me = unsafe { libc::pthread_self() } as usize;
    let (lo, hi) = if me == main {
        (
            MAIN_LO.load(Ordering::Relaxed),
            MAIN_HI.load(Ordering::Relaxed),
        )
    } else {
        thread_stack(me)?
    };
    (sp >= lo && sp < hi && hi - sp >= 16).then_some((sp, hi))
}

fn thread_stack(me: usize) -> Option<(usize, usize)> {
    // SAFETY: pthread_attr_t is plain data; bionic fills it from the thread's own record.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(me as libc::pthread_t, &mut attr) != 0 {
            return None;
        }
        let mut base: *mut libc::c_void = core::ptr::null_mut();
        let mut size: usize = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut base, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        let lo = base as usize;
        (ok && size > 0).then(|| (lo, lo.saturating_add(size)))
    }
}
