//! The shared [`Symbolizer`] and report sessions (see the parent module: fresh per backtrace
//! outside a session, caches kept while one is open; only ever try-locked on report paths).

use super::Symbolizer;
use core::sync::atomic::{AtomicUsize, Ordering};

static SHARED: crate::mutex::Mutex<Symbolizer> = crate::mutex::Mutex::new(Symbolizer::new());
static SESSIONS: AtomicUsize = AtomicUsize::new(0);

/// Runs `f` with a symbolizer: the shared one when it is free (its caches kept inside a
/// session, fresh otherwise), else a private one.
pub fn with_symbolizer<R>(f: impl FnOnce(&mut Symbolizer) -> R) -> R {
    match SHARED.try_lock() {
        Some(mut shared) => {
            if SESSIONS.load(Ordering::Acquire) == 0 {
                *shared = Symbolizer::new();
            }
            let r = f(&mut shared);
            // Released when no session is open (any more: a session that ended while this
            // thread held the lock left the release to it).
            if SESSIONS.load(Ordering::Acquire) == 0 {
                *shared = Symbolizer::new();
            }
            r
        }
        None => f(&mut Symbolizer::new()),
    }
}

/// A report that symbolizes many backtraces: caches live until the last session ends.
pub struct Session(());

impl Session {
    pub fn begin() -> Session {
        if SESSIONS.fetch_add(1, Ordering::AcqRel) == 0
            && let Some(mut shared) = SHARED.try_lock()
        {
            // Maps read by an earlier report may be stale.
            *shared = Symbolizer::new();
        }
        Session(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if SESSIONS.fetch_sub(1, Ordering::AcqRel) == 1
            && let Some(mut shared) = SHARED.try_lock()
        {
            // Returns the memory and unmaps the module files (a heap dump copies the maps
            // next, which must not list them). Never waits: a report may run in a signal
            // handler that interrupted this thread's own symbolization; a holder releases the
            // caches itself when it finds no session open.
            *shared = Symbolizer::new();
        }
    }
}

/// Fork prepare / malloc_disable.
pub fn lock_raw() {
    SHARED.lock_raw();
}

/// Fork parent and child / malloc_enable.
pub fn unlock_raw() {
    SHARED.force_unlock();
}
