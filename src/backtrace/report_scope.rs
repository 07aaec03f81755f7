//! One symbol resolver for a whole report of one thread. A resolver reads /proc/self/maps and
//! opens module symbol tables as it goes; the exit leak report made a new one for every leak's
//! backtrace, and at 200,000 leaks those reads were most of its time (docs/performance.md,
//! "Exit reports"). While a thread holds a [`ResolverScope`], its logged backtraces share one
//! resolver, which re-reads the maps whenever a frame is in none of them (a module loaded
//! since). Other threads' backtraces, and a signal handler's on the owner thread while it is
//! resolving (`BUSY`), use a resolver of their own as before.
//!
//! No lock: the shared resolver belongs to the thread recorded in `OWNER` (claimed by CAS; a
//! second report at the same time resolves as before).

use super::symbols::LiveResolver;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub struct ResolverScope {
    owner: bool,
}

impl ResolverScope {
    pub fn begin() -> ResolverScope {
        let owner = OWNER
            .compare_exchange(0, thread_id(), Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        ResolverScope { owner }
    }
}

impl Drop for ResolverScope {
    fn drop(&mut self) {
        if self.owner {
            // SAFETY: this thread owns the slot and is not resolving (drop runs between
            // records); the resolver's memory is returned here.
            unsafe { *SHARED.0.get() = None };
            OWNER.store(0, Ordering::Release);
        }
    }
}

/// Runs `f` with the calling thread's shared resolver if it holds a scope, else a new one.
pub fn with_resolver(frames: &[usize], f: impl FnOnce(&mut LiveResolver)) {
    if OWNER.load(Ordering::Relaxed) == thread_id() && !BUSY.swap(true, Ordering::Acquire) {
        // SAFETY: this thread owns the slot (OWNER) and is not already using it (BUSY).
        let slot = unsafe { &mut *SHARED.0.get() };
        let res = slot.get_or_insert_with(LiveResolver::new);
        for &pc in frames {
            res.refresh_for(pc);
        }
        f(res);
        BUSY.store(false, Ordering::Release);
        return;
    }
    f(&mut LiveResolver::new());
}

struct Shared(UnsafeCell<Option<LiveResolver>>);
// SAFETY: only the thread recorded in OWNER touches the resolver.
unsafe impl Sync for Shared {}

static SHARED: Shared = Shared(UnsafeCell::new(None));
static OWNER: AtomicUsize = AtomicUsize::new(0);
static BUSY: AtomicBool = AtomicBool::new(false);

fn thread_id() -> usize {
    // SAFETY: no preconditions; never 0 for a live thread.
    unsafe { libc::pthread_self() as usize }
}
