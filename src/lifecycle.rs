//! The library's life, in the order it happens: `debug_initialize`, `malloc_disable` /
//! `malloc_enable`, `debug_finalize` and the fork handlers (docs/design.md, "fork,
//! malloc_disable, finalize").
//!
//! Initialisation is a list of steps read top to bottom. Each step that leaves something behind
//! (a key, a copy, an open file, a handler, a mapping) is noted in a [`Rollback`] as soon as it
//! has run, and a failure at any later step returns through the one rollback path: the guard
//! undoes the completed steps in reverse order, so a failed `debug_initialize` leaves nothing
//! behind and a later one starts from scratch. The published state itself lives in
//! src/state.rs, as plain data the lower layers read.

use crate::config::{Config, bits};
use crate::dispatch::{self, LibcDispatch, MallocDispatch};
use crate::fmt::{Bytes, c_str_bytes};
use crate::free_track::FREE_QUEUE;
use crate::header::Layout;
use crate::log::{log_error, log_info};
use crate::platform;
use crate::state::{self, State, get};
use crate::sync::{self, DisabledScope, GATE};
use core::ffi::c_char;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};

const UNINITIALIZED: u8 = 0;
const INITIALIZING: u8 = 1;
const INITIALIZED: u8 = 2;
static INIT_PHASE: AtomicU8 = AtomicU8::new(UNINITIALIZED);
static FINALIZED: AtomicBool = AtomicBool::new(false);

// ---------------------------------------------------------------------------------------------
// Initialize

/// `debug_initialize` (docs/spec/options.md#initialization).
///
/// # Safety
/// `dispatch` must point to libc's `MallocDispatch` (either layout) valid for the process lifetime, `zygote_child`
/// to a flag that lives as long, `options` to a NUL-terminated string valid during the call.
pub unsafe fn initialize(
    dispatch: *const LibcDispatch,
    zygote_child: *const u8,
    options: *const c_char,
) -> bool {
    if zygote_child.is_null() || options.is_null() || dispatch.is_null() {
        return false;
    }
    if asan_present() {
        log_error!("malloc debug cannot be enabled alongside ASAN");
        return false;
    }
    if INIT_PHASE
        .compare_exchange(
            UNINITIALIZED,
            INITIALIZING,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        // Bionic initialises once per process; a second call cannot replace live state.
        return false;
    }
    // Before anything is logged: which file the host log may write to (src/original_stderr.rs).
    crate::original_stderr::remember();
    // From here on every `return false` undoes what was done (in reverse), through `undo`.
    let mut undo = Rollback::new();
    undo.did(Undo::Phase);
    register_fork_handlers();
    // SAFETY: the caller's table; INIT_PHASE makes this the only adopting call.
    let Some(dispatch) = (unsafe { dispatch::adopt(dispatch) }) else {
        return false;
    };
    // Kept even if a later step fails: a confused caller still reaches a working allocator.
    state::set_native(dispatch);
    if let Err(rc) = sync::create_disabled_key() {
        log_error!("pthread_key_create failed: {}", crate::errors::strerror(rc));
        return false;
    }
    undo.did(Undo::DisabledKey);
    // SAFETY: caller guarantees a NUL-terminated string.
    let Some(options) = copy_options(dispatch, unsafe { c_str_bytes(options) }) else {
        return false;
    };
    undo.did(Undo::Options(dispatch, options));
    let config = match Config::parse(options) {
        Ok(config) => config.localize_default_paths(),
        Err(error) => {
            report_option_error(&error);
            return false;
        }
    };
    // Extensions (README "Extensions"): before anything is logged, and before the program can
    // change directory.
    crate::log_file::open(config.log_file);
    undo.did(Undo::LogFile);
    crate::suppress::load(config.leak_suppressions);
    undo.did(Undo::Suppressions);
    crate::signals::BACKTRACE_ENABLED.store(config.backtrace_enabled, Ordering::SeqCst);
    undo.did(Undo::Signals);
    if !crate::signals::install(&config) {
        return false;
    }
    undo.did(Undo::Record);
    if !crate::record_allocs::init(&config) {
        return false;
    }
    if config.has(bits::RECORD_ALLOCS) {
        crate::record_allocs::recognise_native(dispatch);
    }
    // The last step that can fail: nothing after it needs undoing, so its mapping has no undo.
    if config.has(bits::FREE_TRACK)
        && !FREE_QUEUE.init(
            config.free_track_allocations,
            config.free_track_backtrace_num_frames,
        )
    {
        return false;
    }
    crate::backtrace::startup();
    crate::pages::take_reserve();
    if config.error_backtraces && config.has(bits::BACKTRACE) {
        // The extension hooks into reports and collections from above (docs/design.md,
        // "Layers"); set before the state is published, never unset.
        crate::failure::set_epilogue(crate::error_context::log_allocation);
        crate::tracking::set_in_use_elsewhere(crate::error_context::mark_queued);
    }
    let plan = crate::plan::Plan::new(&config);
    let layout = Layout::new(&config);
    crate::tracking::keep_live_blocks_in(&plan, &layout);
    // SAFETY: INIT_PHASE makes this the only initialising call, and nothing has read the state.
    unsafe {
        state::publish(State {
            dispatch,
            zygote_child,
            config,
            layout,
            plan,
        })
    };
    if config.has(bits::VERBOSE) {
        log_info!("{}: malloc debug enabled", Bytes(platform::progname()));
    }
    INIT_PHASE.store(INITIALIZED, Ordering::Release);
    undo.commit();
    true
}

/// A completed step of `initialize` that a failure must undo.
#[derive(Clone, Copy)]
enum Undo {
    /// INIT_PHASE back to UNINITIALIZED, so that a later call may initialise.
    Phase,
    DisabledKey,
    /// The options' copy, from the native allocator (every path of the config points into it).
    Options(&'static MallocDispatch, &'static [u8]),
    LogFile,
    Suppressions,
    /// The handlers installed (all or some) and the backtrace toggle.
    Signals,
    /// record_allocs' ring and thread key (all or some).
    Record,
}

impl Undo {
    fn run(self) {
        match self {
            Undo::Phase => INIT_PHASE.store(UNINITIALIZED, Ordering::Release),
            Undo::DisabledKey => sync::delete_disabled_key(),
            // SAFETY: the copy came from this dispatch and nothing refers to it any more (the
            // steps that kept pointers into it were undone before).
            Undo::Options(dispatch, copy) => unsafe {
                (dispatch.free)(copy.as_ptr().cast_mut().cast())
            },
            Undo::LogFile => crate::log_file::close(),
            Undo::Suppressions => crate::suppress::unload(),
            Undo::Signals => crate::signals::uninstall(),
            Undo::Record => crate::record_allocs::release(),
        }
    }
}

/// The steps `initialize` has completed; dropped without [`Rollback::commit`], it undoes them
/// in reverse order.
struct Rollback {
    done: [Option<Undo>; 8],
    len: usize,
}

impl Rollback {
    fn new() -> Self {
        Rollback {
            done: [None; 8],
            len: 0,
        }
    }

    fn did(&mut self, step: Undo) {
        // Eight slots for seven kinds of step, each noted once.
        if let Some(slot) = self.done.get_mut(self.len) {
            *slot = Some(step);
            self.len += 1;
        }
    }

    /// Initialisation succeeded: keep everything.
    fn commit(mut self) {
        self.len = 0;
    }
}

impl Drop for Rollback {
    fn drop(&mut self) {
        while self.len > 0 {
            self.len -= 1;
            if let Some(step) = self.done[self.len].take() {
                step.run();
            }
        }
    }
}

/// The options pointer dies when `debug_initialize` returns (it is a stack buffer in libc on
/// the property path): keep a copy from the native allocator for the process lifetime.
fn copy_options(dispatch: &MallocDispatch, options: &[u8]) -> Option<&'static [u8]> {
    // SAFETY: plain native allocation of len+1 bytes.
    let p = unsafe { (dispatch.malloc)(options.len() + 1) }.cast::<u8>();
    if p.is_null() {
        log_error!(
            "out of memory for the options ({} bytes)",
            options.len() + 1
        );
        return None;
    }
    // SAFETY: `p` has room for len+1 bytes and does not overlap `options`.
    unsafe {
        core::ptr::copy_nonoverlapping(options.as_ptr(), p, options.len());
        *p.add(options.len()) = 0;
        Some(core::slice::from_raw_parts(p, options.len()))
    }
}

fn report_option_error(error: &crate::config::ConfigError<'_>) {
    let mut msg = crate::fmt::StackBuf::<1024>::new();
    let _ = error.write_message(platform::progname(), &mut msg);
    crate::log::write_record(platform::Priority::Error, "malloc_debug", &mut msg);
    for line in crate::config::USAGE_LINES {
        log_error!("{}", line);
    }
}

/// Is the AddressSanitizer runtime in the process? Looked up at initialisation only (the
/// dispatch table is not swapped yet, so dlsym's own allocations go to the native allocator).
fn asan_present() -> bool {
    // SAFETY: the name is a NUL-terminated literal; RTLD_DEFAULT searches the global scope.
    unsafe { !libc::dlsym(libc::RTLD_DEFAULT, c"__asan_init".as_ptr()).is_null() }
}

// ---------------------------------------------------------------------------------------------
// malloc_disable / malloc_enable (docs/spec/abi.md#malloc_iterate-malloc_disable-malloc_enable)
//
// malloc_disable closes the library's gate: every other thread's allocation call waits until
// malloc_enable, and none is in flight meanwhile. The disabling thread stays marked (its own
// allocations go to the native allocator, which the native disable governs) with the
// backtrace signal blocked, since other threads wait for it.

pub fn malloc_disable(state: &State) {
    if sync::disabled_by_this_thread() {
        return;
    }
    let scope = DisabledScope::enter();
    GATE.close();
    sync::hold_disabled(scope);
    // SAFETY: native allocator call.
    unsafe { (state.dispatch.malloc_disable)() };
}

pub fn malloc_enable(state: &State) {
    // SAFETY: native allocator call.
    unsafe { (state.dispatch.malloc_enable)() };
    if let Some(scope) = sync::release_disabled() {
        GATE.open();
        drop(scope);
    }
}

// ---------------------------------------------------------------------------------------------
// Finalize

/// `debug_finalize` (docs/spec/abi.md#debug_finalize). Runs its exit-time work once; later calls do nothing.
/// `stack_from`: where the exit report's scan of this thread's stack starts (the exported
/// function's frame, see `leaks::report`).
///
/// Unlike the reference, which leaves the global lock write-held forever (so any other thread
/// that allocates afterwards hangs), the gate is reopened once the reports are written: other
/// threads — and destructors that run after the exit handler — keep a working allocator.
/// Out of line: its frame (kilobytes) must lie below the export's, where the scan starts.
#[inline(never)]
pub fn finalize(stack_from: usize) {
    let Some(state) = get() else { return };
    if FINALIZED.swap(true, Ordering::AcqRel) {
        return;
    }
    let _disabled = sync::DisabledScope::enter();
    sync::GATE.close();
    if state.has(bits::FREE_TRACK) {
        crate::free_track::verify_all(state);
    }
    if state.has(bits::LEAK_TRACK) {
        crate::leaks::report(state, stack_from);
    }
    // The reference's order: the record file, then the heap dump, then the statistics.
    if state.has(bits::RECORD_ALLOCS) && state.config.record_allocs_on_exit {
        crate::record_allocs::write_at_exit(state);
    }
    if state.has(bits::BACKTRACE) && state.config.backtrace_dump_on_exit {
        crate::report::dump_heap_at_exit(state);
    }
    if state.has(bits::LOG_ALLOCATOR_STATS_ON_EXIT) {
        crate::deferred::log_allocator_stats(state);
    }
    sync::GATE.open();
}

// ---------------------------------------------------------------------------------------------
// Fork

static FORK_HANDLERS_REGISTERED: AtomicBool = AtomicBool::new(false);
/// The forking thread's `DisabledScope`, kept from prepare to parent/child (one forker at a
/// time gets past the locks prepare takes).
static FORK_SCOPE: AtomicU8 = AtomicU8::new(0);

/// Registers the fork handlers once per process. Prepare closes the gate (no call is in flight
/// at the fork) and takes the remaining locks, so that the child finds everything free.
pub fn register_fork_handlers() {
    if FORK_HANDLERS_REGISTERED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: the handlers are plain functions that live as long as the process.
    unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
}

// The gate is closed first: once it has drained, no call is in flight, so no stack walk either
// (a walk holds the dynamic loader's lock, and a child forked while another thread held it could
// never walk a stack again). Closing the walks' own gate first would deadlock: a thread inside
// the call gate would wait at the walks' gate for the forker, which waits for it. The forking
// thread is marked, with the backtrace signal blocked, until the handlers after the fork:
// threads wait for the closed gates and the locks it holds.
extern "C" fn fork_prepare() {
    let scope = sync::DisabledScope::enter();
    sync::GATE.close_allowing(sync::own_calls_at_fork());
    crate::backtrace::CAPTURES.close();
    lock_all_for_fork();
    FORK_SCOPE.store(scope.into_raw(), Ordering::Relaxed);
}

extern "C" fn fork_parent() {
    let scope = FORK_SCOPE.load(Ordering::Relaxed);
    unlock_all_after_fork();
    crate::backtrace::CAPTURES.open();
    sync::GATE.open();
    drop(sync::DisabledScope::from_raw(scope));
}

extern "C" fn fork_child() {
    let scope = FORK_SCOPE.load(Ordering::Relaxed);
    sync::GATE.reset_in_child();
    sync::forked_in_child();
    crate::record_allocs::reset_in_child();
    crate::tracking::reset_in_child();
    crate::backtrace::CAPTURES.reset_in_child();
    unlock_all_after_fork();
    sync::reset_disabled_in_child();
    crate::backtrace::CAPTURES.open();
    drop(sync::DisabledScope::from_raw(scope));
}

/// Takes the locks that threads outside the gate may hold (a finalize in progress, a
/// malloc_disable's iteration): backtrace records, then the symbolizer.
fn lock_all_for_fork() {
    if get().is_some_and(|s| s.has(bits::TRACK_ALLOCS)) {
        crate::tracking::BACKTRACES.lock_raw();
    }
    crate::backtrace::lock_raw();
}

/// Fork parent and fork child (where the holders no longer exist).
fn unlock_all_after_fork() {
    crate::backtrace::unlock_raw();
    if get().is_some_and(|s| s.has(bits::TRACK_ALLOCS)) {
        crate::tracking::BACKTRACES.unlock_raw();
    }
}
