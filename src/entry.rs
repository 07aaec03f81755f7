//! Entering the library from an exported function: the re-entrancy check, the gate and the
//! "debug calls disabled" mark, in the order of abi-and-dumps §6.4.

use crate::backtrace::Origin;
use crate::state::{self, State};
use crate::sync::{self, DisabledScope, GateGuard};

/// Proof that the calling thread is inside a debug call: holds the gate open and marks the
/// thread so that allocations made by the library itself go straight to the native allocator.
pub struct Entered {
    pub state: &'static State,
    /// The entry point's registers, where allocation backtraces start.
    pub origin: Origin,
    _signal: BacktraceSignalBlock,
    _disabled: DisabledScope,
    _gate: GateGuard,
}

/// Enters the library for a call that may run code outside it (reports, dumps, leak info): the
/// thread is marked for the whole call, so anything that allocates on the way goes straight to
/// the native allocator. `None` when the call must go to the native allocator itself: not
/// initialised, or this thread is already inside the library.
#[inline(always)]
pub fn enter() -> Option<Entered> {
    enter_with(DisabledScope::enter_clear)
}

/// Enters the library for an allocation call. The thread is not marked up front: the paths of
/// malloc, free and the rest call only the native allocator, the kernel and our own tables, none
/// of which comes back into malloc. Whatever may run foreign code on the way (logging, error
/// reports, the deferred signal work, the unwinder's table lookups) marks the thread itself with
/// `DisabledScope::enter`. Saves two `pthread_setspecific` calls on every allocation.
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
        _signal: BacktraceSignalBlock::new(),
        _disabled: mark(),
        _gate: gate,
    };
    crate::deferred::on_entry(state);
    Some(entered)
}

/// Enters the gate only, without marking the thread (malloc_iterate: the callback is the
/// caller's code and may legitimately allocate).
pub fn enter_gate_only() -> Option<(&'static State, GateGuard)> {
    if sync::debug_calls_disabled() {
        return None;
    }
    let state = state::get()?;
    Some((state, sync::GATE.enter()))
}

/// Blocks bionic's backtrace signal (`BIONIC_SIGNAL_BACKTRACE` = SIGRTMIN+1 = 33) for the
/// duration of a call, so a thread being unwound by debuggerd is never stopped while it holds the
/// library's locks (abi-and-dumps §6.4). libc's `sigprocmask` refuses reserved signals, hence the
/// raw syscall. glibc has no such signal, so hosts skip the two syscalls.
pub struct BacktraceSignalBlock {
    #[cfg(target_os = "android")]
    was_blocked: bool,
}

#[cfg(target_os = "android")]
const BACKTRACE_SIGNAL_MASK: u64 = 1 << (33 - 1);

impl BacktraceSignalBlock {
    #[cfg(target_os = "android")]
    fn new() -> Self {
        let set: u64 = BACKTRACE_SIGNAL_MASK;
        let mut old: u64 = 0;
        // SAFETY: rt_sigprocmask with 8-byte kernel sigsets that live across the call.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_BLOCK,
                &set,
                &mut old,
                8usize,
            );
        }
        BacktraceSignalBlock {
            was_blocked: old & BACKTRACE_SIGNAL_MASK != 0,
        }
    }

    #[cfg(not(target_os = "android"))]
    fn new() -> Self {
        BacktraceSignalBlock {}
    }
}

#[cfg(target_os = "android")]
impl Drop for BacktraceSignalBlock {
    fn drop(&mut self) {
        if !self.was_blocked {
            let set: u64 = BACKTRACE_SIGNAL_MASK;
            // SAFETY: as in new(); the old mask is not needed.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigprocmask,
                    libc::SIG_UNBLOCK,
                    &set,
                    core::ptr::null_mut::<u64>(),
                    8usize,
                );
            }
        }
    }
}
