//! Synchronisation that is safe inside malloc: the per-thread re-entrancy flag, the process-wide
//! gate that `debug_finalize` closes, and the fork handlers.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

// ---------------------------------------------------------------------------------------------
// Re-entrancy flag ("debug calls disabled")

/// The `pthread_key_t` holding the flag; `usize::MAX` until created. A key (not
/// `thread_local!`) because TLS set-up allocates on first use on Android, and because bionic's
/// and glibc's key slots for low key numbers live inside the thread control block.
static DISABLED_KEY: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Creates the key. On failure returns the pthread error code.
pub fn create_disabled_key() -> Result<(), i32> {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-parameter; no destructor is registered.
    let rc = unsafe { libc::pthread_key_create(&mut key, None) };
    if rc != 0 {
        return Err(rc);
    }
    DISABLED_KEY.store(key as usize, Ordering::Release);
    Ok(())
}

pub fn delete_disabled_key() {
    let key = DISABLED_KEY.swap(usize::MAX, Ordering::AcqRel);
    if key != usize::MAX {
        // SAFETY: the key was created by create_disabled_key and is deleted once.
        unsafe { libc::pthread_key_delete(key as libc::pthread_key_t) };
    }
}

/// True while this thread is inside the library (its own allocations must go straight to the
/// native allocator) or when the key does not exist yet.
pub fn debug_calls_disabled() -> bool {
    let key = DISABLED_KEY.load(Ordering::Acquire);
    if key == usize::MAX {
        return true;
    }
    // SAFETY: the key is valid once stored; getspecific never allocates.
    unsafe { !libc::pthread_getspecific(key as libc::pthread_key_t).is_null() }
}

fn set_disabled(on: bool) {
    let key = DISABLED_KEY.load(Ordering::Acquire);
    if key != usize::MAX {
        let value: *const c_void = if on {
            core::ptr::without_provenance::<c_void>(1)
        } else {
            core::ptr::null()
        };
        // SAFETY: valid key. Low key numbers (ours is created at start-up) are stored inline in
        // the thread's control block on glibc and bionic, so setspecific does not allocate.
        unsafe { libc::pthread_setspecific(key as libc::pthread_key_t, value) };
    }
}

/// Marks the thread "inside malloc debug" for its lifetime, if it was not already.
pub struct DisabledScope {
    was_clear: bool,
}

impl DisabledScope {
    pub fn enter() -> Self {
        let was_clear = !debug_calls_disabled();
        if was_clear {
            set_disabled(true);
        }
        DisabledScope { was_clear }
    }

    /// `enter` for a caller that has just seen the flag clear (saves a second key lookup on
    /// every call).
    pub fn enter_clear() -> Self {
        set_disabled(true);
        DisabledScope { was_clear: true }
    }

    /// A scope that leaves the flag alone (an allocation call: see `entry::enter_allocation`).
    pub fn unmarked() -> Self {
        DisabledScope { was_clear: false }
    }
}

impl Drop for DisabledScope {
    fn drop(&mut self) {
        if self.was_clear {
            set_disabled(false);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The gate: every intercepting entry point passes it; `debug_finalize` closes it.

const GATE_SHARDS: usize = 16;

#[repr(align(64))]
struct PaddedCount(AtomicUsize);

/// A reader/writer gate built for the hot path: readers touch one of several cache-line-sized
/// counters (chosen by stack address, so threads rarely share one) instead of one shared word,
/// so concurrent allocating threads do not bounce a cache line. The writer (`close`) is rare:
/// it raises `closed` and waits for every counter to drain.
pub struct Gate {
    closed: AtomicBool,
    readers: [PaddedCount; GATE_SHARDS],
}

pub static GATE: Gate = Gate::new();

impl Gate {
    pub const fn new() -> Self {
        Gate {
            closed: AtomicBool::new(false),
            readers: [const { PaddedCount(AtomicUsize::new(0)) }; GATE_SHARDS],
        }
    }

    fn shard(&self) -> &AtomicUsize {
        let probe = 0u8;
        let addr = &probe as *const u8 as usize;
        // Thread stacks are megabytes apart; hash the high bits.
        let h = (addr >> 16).wrapping_mul(0x9e37_79b9_7f4a_7c15_u64 as usize);
        &self.readers[(h >> (usize::BITS - 4)) % GATE_SHARDS].0
    }

    /// Enters as a reader, waiting while the gate is closed.
    pub fn enter(&'static self) -> GateGuard {
        let shard = self.shard();
        loop {
            while self.closed.load(Ordering::SeqCst) {
                wait_a_moment();
            }
            shard.fetch_add(1, Ordering::SeqCst);
            // Pairs with the SeqCst store in `close`: either the closer sees our count or we see
            // its flag.
            if !self.closed.load(Ordering::SeqCst) {
                return GateGuard { shard };
            }
            shard.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Closes the gate and waits until no reader is inside.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        while self.readers.iter().any(|r| r.0.load(Ordering::SeqCst) != 0) {
            wait_a_moment();
        }
    }

    pub fn open(&self) {
        self.closed.store(false, Ordering::SeqCst);
    }

    /// After fork only the forking thread exists; readers counted in other threads are gone.
    pub fn reset_in_child(&self) {
        for r in &self.readers {
            r.0.store(0, Ordering::SeqCst);
        }
    }
}

pub struct GateGuard {
    shard: &'static AtomicUsize,
}

impl Drop for GateGuard {
    fn drop(&mut self) {
        self.shard.fetch_sub(1, Ordering::SeqCst);
    }
}

fn wait_a_moment() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

// ---------------------------------------------------------------------------------------------
// Fork

static FORK_HANDLERS_REGISTERED: AtomicBool = AtomicBool::new(false);

/// Registers the fork handlers once per process. Prepare takes every internal lock so that no
/// other thread holds one at the moment of fork; the child then finds them all free.
pub fn register_fork_handlers() {
    if FORK_HANDLERS_REGISTERED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: the handlers are plain functions that live as long as the process.
    unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
}

// Stack walks are drained first: a walk holds the dynamic loader's lock (dl_iterate_phdr), and a
// child forked while another thread held it could never walk a stack again. Walks take none of
// our locks, so waiting for them cannot deadlock with the locks taken next.
extern "C" fn fork_prepare() {
    crate::backtrace::CAPTURES.close();
    crate::state::lock_all_for_fork();
}

extern "C" fn fork_parent() {
    crate::state::unlock_all_after_fork();
    crate::backtrace::CAPTURES.open();
}

extern "C" fn fork_child() {
    GATE.reset_in_child();
    crate::record::reset_in_child();
    crate::tracking::reset_in_child();
    crate::backtrace::CAPTURES.reset_in_child();
    crate::state::reset_all_in_child();
    crate::backtrace::CAPTURES.open();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_close_waits_for_readers_and_reopens() {
        static G: Gate = Gate::new();
        let guard = G.enter();
        let t = std::thread::spawn(|| {
            G.close();
            G.open();
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!t.is_finished(), "close must wait for the reader");
        drop(guard);
        t.join().unwrap();
        drop(G.enter());
    }
}
