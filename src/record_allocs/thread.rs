//! Per-thread state of record_allocs in one pthread key: the thread id (gettid is a system call;
//! the key is read on every record anyway) and the destructor round, so that `thread_done` is
//! recorded as late as possible in thread teardown
//! (docs/spec/abi.md#what-each-call-records): the destructor re-arms itself
//! until its fourth call (PTHREAD_DESTRUCTOR_ITERATIONS) and records then.

use super::buffer::{BUFFER, Entry, Kind};
use core::ffi::c_void;
use core::sync::atomic::{AtomicUsize, Ordering};

static KEY: AtomicUsize = AtomicUsize::new(usize::MAX);
const ROUND_BITS: usize = 2;
const LAST_ROUND: usize = 3;

pub fn init() -> bool {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: valid out-parameter and a destructor that lives as long as the process.
    if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit)) } != 0 {
        return false;
    }
    KEY.store(key as usize, Ordering::Release);
    true
}

/// Undoes [`init`] (a `debug_initialize` that gives up later).
pub fn release() {
    let key = KEY.swap(usize::MAX, Ordering::AcqRel);
    if key != usize::MAX {
        // SAFETY: the key `init` created, deleted once; no thread has a value in it yet.
        unsafe { libc::pthread_key_delete(key as libc::pthread_key_t) };
    }
}

fn value() -> usize {
    let key = KEY.load(Ordering::Acquire);
    if key == usize::MAX {
        return 0;
    }
    // SAFETY: a key we created; getspecific does not allocate.
    unsafe { libc::pthread_getspecific(key as libc::pthread_key_t) as usize }
}

fn set(value: usize) {
    let key = KEY.load(Ordering::Acquire);
    if key != usize::MAX {
        // SAFETY: a key we created, created early (a low key number: stored in the thread
        // control block, so setspecific does not allocate).
        unsafe {
            libc::pthread_setspecific(
                key as libc::pthread_key_t,
                core::ptr::without_provenance(value),
            )
        };
    }
}

/// Marks the calling thread as one that records (its exit will be recorded).
#[inline]
pub fn note_thread() {
    if value() == 0 {
        // Once per thread. A key past glibc's inline slots (a process that had created 32 keys
        // before the library loaded) makes setspecific calloc its second-level block: marked,
        // that calloc goes to the native allocator instead of recording again, recursively.
        let _foreign = crate::sync::DisabledScope::enter();
        set((crate::platform::gettid() as usize) << ROUND_BITS);
    }
}

/// The calling thread's id.
#[inline]
pub fn tid() -> i32 {
    match value() {
        0 => crate::platform::gettid(),
        v => (v >> ROUND_BITS) as i32,
    }
}

extern "C" fn thread_exit(value: *mut c_void) {
    let value = value as usize;
    let round = value & ((1 << ROUND_BITS) - 1);
    if round < LAST_ROUND {
        set(value + 1);
        return;
    }
    if let Some(ticket) = BUFFER.reserve() {
        BUFFER.fill(
            ticket,
            Entry {
                tid: (value >> ROUND_BITS) as i32,
                kind: Kind::ThreadDone as u8,
                end_ns: super::now_ns(),
                present: -1,
                ..Entry::default()
            },
        );
    }
}
