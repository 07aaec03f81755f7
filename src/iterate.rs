//! malloc_iterate (docs/spec/abi.md#malloc_iterate-malloc_disable-malloc_enable).
//! malloc_disable / malloc_enable, which usually surround it, are part of the lifecycle
//! (src/lifecycle.rs).
//!
//! The reference calls the callback while holding the live table's mutex and deadlocks when the
//! thread that called malloc_disable iterates. Here iteration works on a copy, and callbacks
//! run with no lock of ours held.

use crate::dispatch::IterateCallback;
use crate::snapshot::Snapshot;
use crate::state::State;
use crate::sync::disabled_by_this_thread;
use core::ffi::{c_int, c_void};

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
        // A live block (the process is expected to be quiescent).
        let usable = state.usable_size(r.pointer);
        // SAFETY: the caller's callback with its own argument.
        unsafe { callback(r.pointer, usable, arg) };
    }
    0
}
