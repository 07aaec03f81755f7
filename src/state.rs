//! The library's process-wide state: set up once by `debug_initialize`, published with one
//! atomic store, read by every entry point.

use crate::config::{Config, bits};
use crate::dispatch::{self, LibcDispatch, MallocDispatch};
use crate::fmt::{Bytes, c_str_bytes};
use crate::free_track::FREE_QUEUE;
use crate::header::Layout;
use crate::log::{log_error, log_info};
use crate::platform;
use crate::sync;
use core::cell::UnsafeCell;
use core::ffi::c_char;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};

pub struct State {
    pub dispatch: &'static MallocDispatch,
    /// libc's "this process is a zygote child" flag (`bool*`; Android 9 passes `int*` — only the
    /// first byte is read, which is the low byte of the int on our little-endian targets).
    zygote_child: *const u8,
    pub config: Config<'static>,
    pub layout: Layout,
}

// SAFETY: the state is written once before publication and only read afterwards; the zygote
// pointer refers to libc's global that lives for the whole process.
unsafe impl Sync for State {}

impl State {
    pub fn zygote_child(&self) -> bool {
        // SAFETY: libc's flag lives for the process; it is a plain byte written by one thread.
        unsafe { core::ptr::read_volatile(self.zygote_child) != 0 }
    }

    pub fn has(&self, bit: u64) -> bool {
        self.config.has(bit)
    }

    /// Usable bytes behind a live user pointer: the header's record in header mode, the native
    /// allocator's answer otherwise.
    pub fn usable_size(&self, pointer: usize) -> usize {
        if self.layout.header {
            // SAFETY: the caller passes a live header-mode block, whose header sits in front.
            unsafe {
                core::ptr::addr_of!((*self.layout.header_of(pointer)).usable_size).read_unaligned()
            }
        } else {
            // SAFETY: the caller passes a live native allocation.
            unsafe { (self.dispatch.malloc_usable_size)(pointer as *const core::ffi::c_void) }
        }
    }
}

struct StateCell(UnsafeCell<MaybeUninit<State>>);
// SAFETY: written only by the single initialising call (guarded by INIT_PHASE) before STATE
// publishes it.
unsafe impl Sync for StateCell {}

static STORAGE: StateCell = StateCell(UnsafeCell::new(MaybeUninit::uninit()));
static STATE: AtomicPtr<State> = AtomicPtr::new(core::ptr::null_mut());
/// The native dispatch (the library's copy of libc's table), known from the start of
/// `debug_initialize` even if it fails, so that entry points called by a confused caller still
/// reach a working allocator.
static NATIVE: AtomicPtr<MallocDispatch> = AtomicPtr::new(core::ptr::null_mut());

const UNINITIALIZED: u8 = 0;
const INITIALIZING: u8 = 1;
const INITIALIZED: u8 = 2;
static INIT_PHASE: AtomicU8 = AtomicU8::new(UNINITIALIZED);
static FINALIZED: AtomicBool = AtomicBool::new(false);

pub fn get() -> Option<&'static State> {
    let p = STATE.load(Ordering::Acquire);
    // SAFETY: non-null only after STORAGE was fully written (Release store in initialize).
    unsafe { p.as_ref() }
}

pub fn native() -> Option<&'static MallocDispatch> {
    // SAFETY: the dispatch table is libc's and outlives the process.
    unsafe { NATIVE.load(Ordering::Acquire).as_ref() }
}

/// `debug_initialize` (spec §1.6 / abi §1.7).
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
    register_fork_handlers();
    // SAFETY: the caller's table; INIT_PHASE makes this the only adopting call.
    let Some(dispatch) = (unsafe { dispatch::adopt(dispatch) }) else {
        INIT_PHASE.store(UNINITIALIZED, Ordering::Release);
        return false;
    };
    NATIVE.store(core::ptr::from_ref(dispatch).cast_mut(), Ordering::Release);
    if let Err(rc) = sync::create_disabled_key() {
        log_error!("pthread_key_create failed: {}", crate::errors::strerror(rc));
        INIT_PHASE.store(UNINITIALIZED, Ordering::Release);
        return false;
    }
    // SAFETY: caller guarantees a NUL-terminated string.
    let Some(options) = copy_options(dispatch, unsafe { c_str_bytes(options) }) else {
        sync::delete_disabled_key();
        INIT_PHASE.store(UNINITIALIZED, Ordering::Release);
        return false;
    };
    let config = match Config::parse(options) {
        Ok(config) => config,
        Err(error) => {
            report_option_error(&error);
            // SAFETY: the copy came from this dispatch and nothing refers to it any more.
            unsafe { (dispatch.free)(options.as_ptr().cast_mut().cast()) };
            sync::delete_disabled_key();
            INIT_PHASE.store(UNINITIALIZED, Ordering::Release);
            return false;
        }
    };
    let config = config.localize_default_paths();
    // Extensions (README "Extensions"): before anything is logged, and before the program can
    // change directory.
    crate::log_file::open(config.log_file);
    crate::suppress::load(config.leak_suppressions);
    crate::signals::BACKTRACE_ENABLED.store(config.backtrace_enabled, Ordering::SeqCst);
    if !crate::signals::install(&config)
        || (config.has(bits::FREE_TRACK)
            && !FREE_QUEUE.init(
                config.free_track_allocations,
                config.free_track_backtrace_num_frames,
            ))
        || !crate::record::init(&config)
    {
        sync::delete_disabled_key();
        INIT_PHASE.store(UNINITIALIZED, Ordering::Release);
        return false;
    }
    crate::backtrace::startup();
    // SAFETY: INIT_PHASE makes this the only writer, and nothing reads STORAGE before the
    // Release store below publishes it.
    unsafe {
        (*STORAGE.0.get()).write(State {
            dispatch,
            zygote_child,
            config,
            layout: Layout::new(&config),
        });
        STATE.store((*STORAGE.0.get()).as_mut_ptr(), Ordering::Release);
    }
    if config.has(bits::VERBOSE) {
        log_info!("{}: malloc debug enabled", Bytes(platform::progname()));
    }
    INIT_PHASE.store(INITIALIZED, Ordering::Release);
    true
}

/// The options pointer dies when `debug_initialize` returns (it is a stack buffer in libc on
/// the property path): keep a copy from the native allocator for the process lifetime.
fn copy_options(dispatch: &MallocDispatch, options: &[u8]) -> Option<&'static [u8]> {
    // SAFETY: plain native allocation of len+1 bytes.
    let p = unsafe { (dispatch.malloc)(options.len() + 1) }.cast::<u8>();
    if p.is_null() {
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

/// `debug_finalize` (spec §9.9). Runs its exit-time work once; later calls do nothing.
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
    if state.has(bits::BACKTRACE) && state.config.backtrace_dump_on_exit {
        crate::report::dump_heap_at_exit(state);
    }
    if state.has(bits::LOG_ALLOCATOR_STATS_ON_EXIT) {
        crate::deferred::log_allocator_stats(state);
    }
    if state.has(bits::RECORD_ALLOCS) && state.config.record_allocs_on_exit {
        crate::record::write_at_exit(state);
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
    crate::record::reset_in_child();
    crate::tracking::reset_in_child();
    crate::backtrace::CAPTURES.reset_in_child();
    unlock_all_after_fork();
    crate::iterate::reset_in_child();
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
