//! The library's process-wide state as plain data: the native dispatch, the parsed options and
//! the header layout. Built once by `debug_initialize` (src/lifecycle.rs), published with one
//! atomic store, read by every entry point and passed down to the features as `&State`.
//!
//! This module knows nothing above it (docs/design.md, "Layers"): the lifecycle writes it, the
//! layers below only read it.

use crate::config::Config;
use crate::dispatch::MallocDispatch;
use crate::header::Layout;
use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicPtr, Ordering};

pub struct State {
    pub dispatch: &'static MallocDispatch,
    /// libc's "this process is a zygote child" flag (`bool*`; Android 9 passes `int*` — only the
    /// first byte is read, which is the low byte of the int on our little-endian targets).
    pub zygote_child: *const u8,
    pub config: Config<'static>,
    pub layout: Layout,
    /// The steps of the allocation pipeline, decided once (src/plan.rs).
    pub plan: crate::plan::Plan,
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
// SAFETY: written only by the single initialising call (the lifecycle's INIT_PHASE lets one in)
// before STATE publishes it.
unsafe impl Sync for StateCell {}

static STORAGE: StateCell = StateCell(UnsafeCell::new(MaybeUninit::uninit()));
static STATE: AtomicPtr<State> = AtomicPtr::new(core::ptr::null_mut());
/// The native dispatch (the library's copy of libc's table), known from the start of
/// `debug_initialize` even if it fails, so that entry points called by a confused caller still
/// reach a working allocator.
static NATIVE: AtomicPtr<MallocDispatch> = AtomicPtr::new(core::ptr::null_mut());

pub fn get() -> Option<&'static State> {
    let p = STATE.load(Ordering::Acquire);
    // SAFETY: non-null only after STORAGE was fully written (Release store in initialize).
    unsafe { p.as_ref() }
}

pub fn native() -> Option<&'static MallocDispatch> {
    // SAFETY: the dispatch table is libc's and outlives the process.
    unsafe { NATIVE.load(Ordering::Acquire).as_ref() }
}

/// Records the native dispatch as soon as `debug_initialize` has adopted it (kept even if the
/// initialisation fails later).
pub fn set_native(dispatch: &'static MallocDispatch) {
    NATIVE.store(core::ptr::from_ref(dispatch).cast_mut(), Ordering::Release);
}

/// Writes the state and publishes it: from the Release store on, every entry point sees it.
///
/// # Safety
/// Called at most once, by the single initialising call, before anything reads the state.
pub unsafe fn publish(state: State) {
    // SAFETY: the caller is the only writer, and nothing reads STORAGE before the Release
    // store below publishes it.
    unsafe {
        (*STORAGE.0.get()).write(state);
        STATE.store((*STORAGE.0.get()).as_mut_ptr(), Ordering::Release);
    }
}

/// Unit tests: a `State` with the given options over the test process's own allocator, never
/// published (each test passes its own to the code under test).
#[cfg(test)]
pub fn for_tests(options: &'static str) -> &'static State {
    static NOT_A_ZYGOTE_CHILD: u8 = 0;
    let config = Config::parse(options.as_bytes()).expect("valid test options");
    Box::leak(Box::new(State {
        dispatch: crate::dispatch::for_tests(),
        zygote_child: &NOT_A_ZYGOTE_CHILD,
        config,
        layout: Layout::new(&config),
        plan: crate::plan::Plan::new(&config),
    }))
}
