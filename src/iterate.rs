//! malloc_iterate / malloc_disable / malloc_enable with pointer tracking (abi §6.2–§6.3).
//!
//! The reference calls the callback while holding the live table's mutex and deadlocks when the
//! thread that called malloc_disable iterates. Here iteration works on a copy: taken under the
//! locks by any thread, or read directly by the thread that holds them through malloc_disable;
//! callbacks run with no lock of ours held.

use crate::config::bits;
use crate::dispatch::IterateCallback;
use crate::platform;
use crate::snapshot::Snapshot;
use crate::state::{self, State};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicI32, Ordering};

/// The thread that holds the tracking locks through malloc_disable (0: none).
static DISABLED_BY: AtomicI32 = AtomicI32::new(0);

pub fn malloc_disable(state: &State) {
    if state.has(bits::TRACK_ALLOCS) {
        state::lock_all_for_fork();
        DISABLED_BY.store(platform::gettid(), Ordering::Release);
    }
    // SAFETY: native allocator call.
    unsafe { (state.dispatch.malloc_disable)() };
}

pub fn malloc_enable(state: &State) {
    // SAFETY: native allocator call.
    unsafe { (state.dispatch.malloc_enable)() };
    if state.has(bits::TRACK_ALLOCS) {
        DISABLED_BY.store(0, Ordering::Release);
        state::unlock_all_after_fork();
    }
}

/// Calls `callback(user pointer, usable size, arg)` for every live tracked allocation,
/// whatever range was asked for (as the reference does).
pub fn malloc_iterate(state: &State, callback: IterateCallback, arg: *mut c_void) -> c_int {
    let Some(callback) = callback else { return 0 };
    let holds_locks = DISABLED_BY.load(Ordering::Acquire) == platform::gettid();
    let snapshot = if holds_locks {
        // SAFETY: this thread took every tracking lock in malloc_disable.
        unsafe { Snapshot::take_unsorted_held() }
    } else {
        Snapshot::take_unsorted()
    };
    let Some(snapshot) = snapshot else { return -1 };
    for r in snapshot.records() {
        let usable = if state.layout.header {
            // SAFETY: a live header-mode block (the process is expected to be quiescent).
            unsafe {
                core::ptr::addr_of!((*state.layout.header_of(r.pointer)).usable_size)
                    .read_unaligned()
            }
        } else {
            // SAFETY: a live native allocation.
            unsafe { (state.dispatch.malloc_usable_size)(r.pointer as *const c_void) }
        };
        // SAFETY: the caller's callback with its own argument.
        unsafe { callback(r.pointer, usable, arg) };
    }
    0
}
