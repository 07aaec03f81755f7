//! malloc_iterate / malloc_disable / malloc_enable
//! (docs/spec/abi.md#malloc_iterate-malloc_disable-malloc_enable).
//!
//! malloc_disable closes the library's gate: every other thread's allocation call waits until
//! malloc_enable, and none is in flight meanwhile. The disabling thread stays marked (its own
//! allocations go to the native allocator, which the native disable governs) with the
//! backtrace signal blocked, since other threads wait for it.
//!
//! The reference calls the callback while holding the live table's mutex and deadlocks when the
//! thread that called malloc_disable iterates. Here iteration works on a copy, and callbacks
//! run with no lock of ours held.

use crate::dispatch::IterateCallback;
use crate::platform;
use crate::snapshot::Snapshot;
use crate::state::State;
use crate::sync::{DisabledScope, GATE};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicI32, AtomicU8, Ordering};

/// The thread that closed the gate through malloc_disable (0: none).
static DISABLED_BY: AtomicI32 = AtomicI32::new(0);
/// Its `DisabledScope`, kept until malloc_enable.
static DISABLE_SCOPE: AtomicU8 = AtomicU8::new(0);

pub fn disabled_by_this_thread() -> bool {
    let by = DISABLED_BY.load(Ordering::Acquire);
    by != 0 && by == platform::gettid()
}

pub fn malloc_disable(state: &State) {
    if disabled_by_this_thread() {
        return;
    }
    let scope = DisabledScope::enter();
    GATE.close();
    DISABLE_SCOPE.store(scope.into_raw(), Ordering::Relaxed);
    DISABLED_BY.store(platform::gettid(), Ordering::Release);
    // SAFETY: native allocator call.
    unsafe { (state.dispatch.malloc_disable)() };
}

pub fn malloc_enable(state: &State) {
    // SAFETY: native allocator call.
    unsafe { (state.dispatch.malloc_enable)() };
    if disabled_by_this_thread() {
        DISABLED_BY.store(0, Ordering::Release);
        let scope = DISABLE_SCOPE.load(Ordering::Relaxed);
        GATE.open();
        drop(DisabledScope::from_raw(scope));
    }
}

/// Fork child: a disabling thread of the parent does not exist here.
pub fn reset_in_child() {
    if !disabled_by_this_thread() {
        DISABLED_BY.store(0, Ordering::Release);
    }
}

/// Calls `callback(user pointer, usable size, arg)` for every live tracked allocation,
/// whatever range was asked for (as the reference does).
pub fn malloc_iterate(state: &State, callback: IterateCallback, arg: *mut c_void) -> c_int {
    let Some(callback) = callback else { return 0 };
    let snapshot = if disabled_by_this_thread() {
        Snapshot::take_unsorted_quiescent()
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
