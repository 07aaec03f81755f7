//! Work requested by signals, done at the next internal malloc/free (docs/spec/options.md#signals):
//! the heap dump (SIGRTMAX-17) and the allocator statistics (SIGRTMAX-15); and at the next call of
//! any allocation function, the unreachable-memory check (SIGRTMAX-16).

use crate::dispatch::M_LOG_STATS;
use crate::log::{log_error, log_info};
use crate::signals::{DUMP_PENDING, STATS_PENDING, UNREACHABLE_CHECK_PENDING};
use crate::state::State;
use core::sync::atomic::Ordering;

/// The unreachable-memory check (SIGRTMAX-16) runs at the start of any allocation call, not
/// only malloc and free (docs/spec/options.md#signals).
#[inline]
pub fn on_entry(state: &State) {
    if UNREACHABLE_CHECK_PENDING.load(Ordering::Relaxed)
        && state.plan.unreachable_on_signal
        && UNREACHABLE_CHECK_PENDING.swap(false, Ordering::AcqRel)
    {
        check_unreachable(state);
    }
}

#[cold]
#[inline(never)]
fn check_unreachable(state: &State) {
    let _foreign = crate::sync::DisabledScope::enter();
    // The scan of this thread's stack starts here, with the registers spilled here, before the
    // work moves to the report stack (the allocating thread's own may be small).
    let mut spilled = [0usize; 16];
    let stack_from = crate::unreachable::classify::stack_top(&mut spilled);
    // Inside an allocation call that succeeds: errno stays the caller's.
    crate::platform::keeping_errno(|| {
        crate::report_stack::run(|| {
            crate::unreachable::check(state, stack_from);
            if state.config.leak_unreachable {
                crate::leaks::summary_on_signal(state, stack_from);
            }
        })
    });
    core::hint::black_box(&spilled);
}

#[inline]
pub fn on_internal_malloc_or_free(state: &State) {
    if state.plan.dump_on_signal && DUMP_PENDING.load(Ordering::Relaxed) {
        // One signal, one dump: only the thread that clears the flag dumps.
        if DUMP_PENDING.swap(false, Ordering::AcqRel) {
            // On the report stack: the allocating thread's own may be small.
            crate::platform::keeping_errno(|| {
                crate::report_stack::run(|| crate::report::dump_heap_on_signal(state))
            });
        }
    }
    if state.plan.stats_on_signal
        && STATS_PENDING.load(Ordering::Relaxed)
        && STATS_PENDING.swap(false, Ordering::AcqRel)
    {
        crate::platform::keeping_errno(|| log_allocator_stats(state));
    }
}

/// `Logging allocator stats...` and `mallopt(M_LOG_STATS, 0)` on the native allocator.
#[cold]
#[inline(never)]
pub fn log_allocator_stats(state: &State) {
    let _foreign = crate::sync::DisabledScope::enter();
    log_info!("Logging allocator stats...");
    // SAFETY: plain native call.
    if unsafe { (state.dispatch.mallopt)(M_LOG_STATS, 0) } == 0 {
        log_error!("mallopt(M_LOG_STATS, 0) call failed.");
    }
}
