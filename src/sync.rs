//! Synchronisation that is safe inside malloc: the per-thread re-entrancy flag (which also
//! blocks bionic's backtrace signal while it is set), and the process-wide gate that
//! `debug_finalize`, `malloc_disable` and fork close.
//!
//! The signal-33 rule (docs/design.md): a thread may wait for a lock only if every holder of
//! that lock has the backtrace signal blocked. The hot path holds no lock at all; everything
//! that does hold one runs inside a `DisabledScope`, which blocks the signal.

use crate::mutex::{futex_wait, futex_wake_all};
use core::ffi::c_void;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

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

/// Marks the thread "inside malloc debug" for its lifetime, if it was not already, and blocks
/// the backtrace signal meanwhile: the slow paths that run foreign code or take a lock (logging,
/// reports, table growth, new backtrace records, collections) run inside one. Allocations a
/// signal handler makes meanwhile go straight to the native allocator, so a handler can never
/// wait for a lock its own thread holds.
pub struct DisabledScope {
    was_clear: bool,
    _signal: BacktraceSignalBlock,
    /// Cancellation off for the scope (platform::CancelOff says why).
    _cancel: crate::platform::CancelOff,
}

impl DisabledScope {
    pub fn enter() -> Self {
        if debug_calls_disabled() {
            return Self::unmarked();
        }
        Self::enter_clear()
    }

    /// `enter` for a caller that has just seen the flag clear (saves a second key lookup).
    pub fn enter_clear() -> Self {
        // Signal first: a handler that ran between the two would find the thread unmarked but
        // holding nothing yet.
        let signal = BacktraceSignalBlock::new();
        let cancel = crate::platform::CancelOff::new();
        set_disabled(true);
        DisabledScope {
            was_clear: true,
            _signal: signal,
            _cancel: cancel,
        }
    }

    /// Ends the scope's life without ending its effect, for a scope that must outlive the
    /// function that made it (fork prepare to fork parent/child, malloc_disable to
    /// malloc_enable). `from_raw` makes it again.
    pub fn into_raw(self) -> u8 {
        let bits = u8::from(self.was_clear)
            | (u8::from(self._signal.unblocks()) << 1)
            | (u8::from(self._cancel.restores()) << 2);
        core::mem::forget(self);
        bits
    }

    pub fn from_raw(bits: u8) -> Self {
        DisabledScope {
            was_clear: bits & 1 != 0,
            _signal: BacktraceSignalBlock::from_unblocks(bits & 2 != 0),
            _cancel: crate::platform::CancelOff::from_restores(bits & 4 != 0),
        }
    }

    /// A scope that changes nothing (the thread was already marked).
    pub fn unmarked() -> Self {
        DisabledScope {
            was_clear: false,
            _signal: BacktraceSignalBlock::none(),
            _cancel: crate::platform::CancelOff::from_restores(false),
        }
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
// Bionic's backtrace signal

/// Blocks bionic's backtrace signal (`BIONIC_SIGNAL_BACKTRACE` = SIGRTMIN+1 = 33) while it
/// lives, so that a thread holding one of the library's locks is never parked by an unwinder
/// that may then wait for that lock. libc's `sigprocmask` refuses reserved signals, hence the
/// raw syscall. glibc has no such signal: hosts make no syscall.
pub struct BacktraceSignalBlock {
    #[cfg(target_os = "android")]
    unblock: bool,
}

#[cfg(target_os = "android")]
const BACKTRACE_SIGNAL_MASK: u64 = 1 << (33 - 1);

impl BacktraceSignalBlock {
    #[cfg(target_os = "android")]
    pub fn new() -> Self {
        let old = crate::platform::mask_signals(libc::SIG_BLOCK, BACKTRACE_SIGNAL_MASK);
        BacktraceSignalBlock {
            unblock: old & BACKTRACE_SIGNAL_MASK == 0,
        }
    }

    #[cfg(not(target_os = "android"))]
    pub fn new() -> Self {
        BacktraceSignalBlock {}
    }

    fn unblocks(&self) -> bool {
        #[cfg(target_os = "android")]
        return self.unblock;
        #[cfg(not(target_os = "android"))]
        false
    }

    fn from_unblocks(unblock: bool) -> Self {
        #[cfg(not(target_os = "android"))]
        let _ = unblock;
        BacktraceSignalBlock {
            #[cfg(target_os = "android")]
            unblock,
        }
    }

    /// Blocks nothing.
    pub fn none() -> Self {
        BacktraceSignalBlock {
            #[cfg(target_os = "android")]
            unblock: false,
        }
    }
}

impl Default for BacktraceSignalBlock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(target_os = "android")]
impl Drop for BacktraceSignalBlock {
    fn drop(&mut self) {
        if self.unblock {
            crate::platform::mask_signals(libc::SIG_UNBLOCK, BACKTRACE_SIGNAL_MASK);
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
/// so concurrent allocating threads do not bounce a cache line. Closers (finalize,
/// malloc_disable, fork) are rare: a closer raises `closers` and waits for every counter to
/// drain; readers that arrive meanwhile sleep on `closers` until the last closer opens.
///
/// The counters also tell when memory that readers may still hold (the live table's old
/// tables) can be given back: `observe_quiescence`.
pub struct Gate {
    closers: AtomicU32,
    readers: [PaddedCount; GATE_SHARDS],
}

pub static GATE: Gate = Gate::new();

impl Gate {
    pub const fn new() -> Self {
        Gate {
            closers: AtomicU32::new(0),
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
    #[inline]
    pub fn enter(&'static self) -> GateGuard {
        let shard = self.shard();
        loop {
            shard.fetch_add(1, Ordering::SeqCst);
            // Pairs with the SeqCst increment in `close`: either the closer sees our count or
            // we see its mark.
            if self.closers.load(Ordering::SeqCst) == 0 {
                return GateGuard { shard };
            }
            shard.fetch_sub(1, Ordering::SeqCst);
            self.wait_while_closed();
        }
    }

    #[cold]
    fn wait_while_closed(&self) {
        loop {
            let c = self.closers.load(Ordering::SeqCst);
            if c == 0 {
                return;
            }
            futex_wait(&self.closers, c);
        }
    }

    /// Closes the gate and waits until no reader is inside. Closes nest.
    pub fn close(&self) {
        self.close_allowing(0);
    }

    /// Closes the gate and waits until at most `own` readers are inside: the calling thread's
    /// own, when it closes from inside a call (a fork made by the library itself). A thread
    /// keeps its count for its whole call and late arrivals only add to the counts, so a sum
    /// read counter by counter that comes to `own` proves no other call is in flight.
    pub fn close_allowing(&self, own: usize) {
        self.closers.fetch_add(1, Ordering::SeqCst);
        while self
            .readers
            .iter()
            .map(|r| r.0.load(Ordering::SeqCst))
            .sum::<usize>()
            > own
        {
            wait_a_moment();
        }
    }

    pub fn open(&self) {
        if self
            .closers
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| c.checked_sub(1))
            == Ok(1)
        {
            futex_wake_all(&self.closers);
        }
    }

    /// After fork only the forking thread exists: readers and closers counted in other threads
    /// are gone.
    pub fn reset_in_child(&self) {
        for r in &self.readers {
            r.0.store(0, Ordering::SeqCst);
        }
        self.closers.store(0, Ordering::SeqCst);
    }

    /// ORs into `seen` a bit for every reader counter that is zero now; true once all are
    /// seen. A counter seen at zero after some moment proves that every thread counted there
    /// at that moment has left: a thread keeps its counter above zero for its whole call.
    pub fn observe_quiescence(&self, seen: &mut u32) -> bool {
        for (i, r) in self.readers.iter().enumerate() {
            if r.0.load(Ordering::SeqCst) == 0 {
                *seen |= 1 << i;
            }
        }
        *seen & ((1 << GATE_SHARDS) - 1) == (1 << GATE_SHARDS) - 1
    }
}

pub struct GateGuard {
    shard: &'static AtomicUsize,
}

impl Drop for GateGuard {
    #[inline]
    fn drop(&mut self) {
        self.shard.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The thread that forks from inside library calls (the unreachable-memory check, the leak
/// classification on signal), so that the fork handlers do not wait for its own calls to end.
/// 0: none.
static FORKING_INSIDE: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);
static FORKING_OWN_CALLS: AtomicUsize = AtomicUsize::new(0);

/// Runs `fork` for a thread that has `own_calls` library calls in flight (their gate counts
/// held; 0 when it closed the gate itself, as finalize does).
pub fn fork_from_inside(own_calls: usize) -> libc::pid_t {
    FORKING_OWN_CALLS.store(own_calls, Ordering::SeqCst);
    FORKING_INSIDE.store(crate::platform::gettid(), Ordering::SeqCst);
    // SAFETY: fork; the fork handlers leave the child able to run the library.
    let pid = unsafe { libc::fork() };
    if pid != 0 {
        FORKING_INSIDE.store(0, Ordering::SeqCst);
    }
    pid
}

/// The calls the forking thread itself has in flight (see `fork_from_inside`).
pub fn own_calls_at_fork() -> usize {
    let tid = FORKING_INSIDE.load(Ordering::SeqCst);
    if tid != 0 && tid == crate::platform::gettid() {
        FORKING_OWN_CALLS.load(Ordering::SeqCst)
    } else {
        0
    }
}

/// Fork child: the child's own fork is over.
pub fn forked_in_child() {
    FORKING_INSIDE.store(0, Ordering::SeqCst);
}

// ---------------------------------------------------------------------------------------------
// malloc_disable's hold on the gate

/// The thread that closed the gate through malloc_disable (0: none): it passes the closed gate
/// (`entry::enter_gate_only`) and reopens it with malloc_enable.
static DISABLED_BY: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);
/// Its `DisabledScope`, kept until malloc_enable.
static DISABLE_SCOPE: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

pub fn disabled_by_this_thread() -> bool {
    let by = DISABLED_BY.load(Ordering::Acquire);
    by != 0 && by == crate::platform::gettid()
}

/// Records the calling thread, which has closed the gate inside `scope`, as the disabler.
pub fn hold_disabled(scope: DisabledScope) {
    DISABLE_SCOPE.store(scope.into_raw(), Ordering::Relaxed);
    DISABLED_BY.store(crate::platform::gettid(), Ordering::Release);
}

/// If the calling thread is the disabler: forgets it and gives back its scope (the caller opens
/// the gate, then drops the scope).
pub fn release_disabled() -> Option<DisabledScope> {
    if !disabled_by_this_thread() {
        return None;
    }
    DISABLED_BY.store(0, Ordering::Release);
    Some(DisabledScope::from_raw(
        DISABLE_SCOPE.load(Ordering::Relaxed),
    ))
}

/// Fork child: a disabling thread of the parent does not exist here.
pub fn reset_disabled_in_child() {
    if !disabled_by_this_thread() {
        DISABLED_BY.store(0, Ordering::Release);
    }
}

fn wait_a_moment() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

/// A function pointer a module above sets once, at initialize, for a module below to call (a
/// callback going up instead of an import: docs/design.md, "Layers"). `F` must be a plain `fn`
/// pointer type; unset until `set`.
pub struct Hook<F: Copy> {
    address: AtomicUsize,
    _f: core::marker::PhantomData<F>,
}

impl<F: Copy> Hook<F> {
    pub const fn new() -> Self {
        const { assert!(size_of::<F>() == size_of::<usize>()) };
        Hook {
            address: AtomicUsize::new(0),
            _f: core::marker::PhantomData,
        }
    }

    pub fn set(&self, f: F) {
        // SAFETY: `F` is a fn pointer type of a usize's size (asserted in `new`): its bits are
        // an address.
        let address = unsafe { core::mem::transmute_copy::<F, usize>(&f) };
        self.address.store(address, Ordering::Release);
    }

    pub fn get(&self) -> Option<F> {
        match self.address.load(Ordering::Acquire) {
            0 => None,
            // SAFETY: a non-zero address was stored by `set` from an `F`.
            address => Some(unsafe { core::mem::transmute_copy::<usize, F>(&address) }),
        }
    }
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
