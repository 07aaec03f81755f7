//! Entering the library from an exported function: the re-entrancy check, the gate and the
//! "debug calls disabled" mark.
//!
//! An allocation call makes no system call on its way in or out: bionic's backtrace signal is
//! blocked only around the slow paths that take a lock or run foreign code (see
//! `sync::DisabledScope` and docs/design.md, "The signal-33 rule").

use crate::backtrace::Origin;
use crate::state::{self, State};
use crate::sync::{self, DisabledScope, GateGuard};

/// Proof that the calling thread is inside a debug call: holds the gate open and marks the
/// thread so that allocations made by the library itself go straight to the native allocator.
pub struct Entered {
    pub state: &'static State,
    /// The entry point's registers, where allocation backtraces start.
    pub origin: Origin,
    _disabled: DisabledScope,
    _gate: GateGuard,
}

/// Enters the library for a call that may run code outside it (reports, dumps, leak info): the
/// thread is marked (and the backtrace signal blocked) for the whole call, so anything that
/// allocates on the way goes straight to the native allocator. `None` when the call must go to
/// the native allocator itself: not initialised, or this thread is already inside the library.
#[inline(always)]
pub fn enter() -> Option<Entered> {
    enter_with(DisabledScope::enter_clear)
}

/// Enters the library for an allocation call. The thread is not marked up front: the paths of
/// malloc, free and the rest call only the native allocator, the kernel and our own lock-free
/// tables, none of which comes back into malloc or waits for another thread. Whatever may run
/// foreign code or take a lock on the way (logging, error reports, the deferred signal work,
/// the unwinder's table lookups, table growth, new backtrace records) marks the thread itself
/// with `DisabledScope::enter`. Saves two `pthread_setspecific` calls and two `rt_sigprocmask`
/// system calls (on Android) on every allocation.
/// Inlined (always: the snapshot in `Entered::origin` must be of the exported function itself,
/// whose frame outlives every capture of the call).
#[inline(always)]
pub fn enter_allocation() -> Option<Entered> {
    enter_with(DisabledScope::unmarked)
}

#[inline(always)]
fn enter_with(mark: fn() -> DisabledScope) -> Option<Entered> {
    if sync::debug_calls_disabled() {
        return None;
    }
    let state = state::get()?;
    let gate = sync::GATE.enter();
    let entered = Entered {
        state,
        origin: Origin::here(),
        _disabled: mark(),
        _gate: gate,
    };
    crate::deferred::on_entry(state);
    Some(entered)
}

/// An entered call on `state` for in-process unit tests (the thread is not marked; the gate
/// is held as in a real call).
#[cfg(test)]
pub fn enter_for_test(state: &'static State) -> Entered {
    Entered {
        state,
        origin: Origin::here(),
        _disabled: DisabledScope::unmarked(),
        _gate: sync::GATE.enter(),
    }
}

/// Enters the gate only, without marking the thread (malloc_iterate: the callback is the
/// caller's code and may legitimately allocate). The thread that closed the gate with
/// `malloc_disable` passes without it (`None` guard).
pub fn enter_gate_only() -> Option<(&'static State, Option<GateGuard>)> {
    if sync::disabled_by_this_thread() {
        return Some((state::get()?, None));
    }
    if sync::debug_calls_disabled() {
        return None;
    }
    let state = state::get()?;
    Some((state, Some(sync::GATE.enter())))
}
