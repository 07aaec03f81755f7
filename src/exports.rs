//! The C ABI: every `debug_*` symbol libc resolves (docs/spec/abi.md#exports). Thin: each function
//! enters the library and hands over to the module that owns the behaviour, or forwards to the
//! native allocator when the call must not be intercepted (see `entry::enter`).
//!
//! # Safety
//! These functions are called by libc with the C contracts of the malloc family: pointers passed
//! in are either null or were returned by this library (or the native allocator before it was
//! installed), out-parameters are writable.

use crate::alloc;
use crate::config::bits;
use crate::crossing;
use crate::dispatch::{IterateCallback, LibcDispatch, M_PURGE_ALL, Mallinfo, MallocDispatch};
use crate::entry::{self, Entered};
use crate::log::log_error;
use crate::platform::{self, keeping_errno};
use crate::state;
use core::ffi::{c_char, c_int, c_void};
use core::ptr::null_mut;

/// The native allocator when the call is not intercepted. Before a successful
/// `debug_initialize` there is none: allocations fail and frees are dropped rather than crash.
fn native() -> Option<&'static MallocDispatch> {
    state::native()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_initialize(
    dispatch: *const LibcDispatch,
    zygote_child: *mut bool,
    options: *const c_char,
) -> bool {
    // SAFETY: forwarded contract of debug_initialize (see lifecycle::initialize).
    keeping_errno(|| unsafe {
        crate::lifecycle::initialize(dispatch, zygote_child.cast::<u8>(), options)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn debug_finalize() {
    // The exit report's scan for unreachable blocks starts at this frame, with the caller's
    // callee-saved registers spilled here: everything below is the library's own (lifecycle::finalize
    // alone keeps kilobytes of stack whose dead slots may hold stale heap addresses).
    let mut spilled = [0usize; 16];
    let stack_from = crate::unreachable::classify::stack_top(&mut spilled);
    // On a stack of the library's own: the thread that exits may have a small one.
    keeping_errno(|| crate::report_stack::run(|| crate::lifecycle::finalize(stack_from)));
    core::hint::black_box(&spilled);
}

/// Runs an allocating call through the library and, when it succeeds, puts errno back: neither
/// the library's own work nor the native allocator's may show in a call that succeeds (Scudo
/// changes errno in about 35 of 50,000 successful calls on Android 11). A failure's errno is
/// the one the size rules or the native allocator set (docs/spec/allocation.md#size-limits-and-errno).
#[inline(always)]
fn errno_kept_on_success(call: impl FnOnce() -> *mut c_void) -> *mut c_void {
    errno_kept_if(call, |p| !p.is_null())
}

/// `errno_kept_on_success` for a call whose success `succeeded` tells from its result.
#[inline(always)]
fn errno_kept_if(
    call: impl FnOnce() -> *mut c_void,
    succeeded: impl FnOnce(*mut c_void) -> bool,
) -> *mut c_void {
    let saved = platform::SavedErrno::save();
    let p = call();
    if succeeded(p) {
        saved.restore();
    }
    p
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_malloc(size: usize) -> *mut c_void {
    match entry::enter_allocation() {
        Some(cx) => errno_kept_on_success(|| alloc::malloc(&cx, size)),
        None => native().map_or(null_mut(), |d| {
            // SAFETY: native allocator call with the caller's argument.
            crossing::handed_out(unsafe { (d.malloc)(size) })
        }),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_free(pointer: *mut c_void) {
    match entry::enter_allocation() {
        // free never changes errno (POSIX.1-2024), though verification and free_track's queue
        // make system calls that may.
        Some(cx) if !pointer.is_null() => keeping_errno(|| alloc::free(&cx, pointer)),
        _ => {
            if let Some(d) = native() {
                crossing::free(d, pointer);
            }
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_calloc(nmemb: usize, bytes: usize) -> *mut c_void {
    match entry::enter_allocation() {
        Some(cx) => errno_kept_on_success(|| alloc::calloc(&cx, nmemb, bytes)),
        None => native().map_or(null_mut(), |d| {
            // SAFETY: native allocator call with the caller's arguments.
            crossing::handed_out(unsafe { (d.calloc)(nmemb, bytes) })
        }),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_realloc(pointer: *mut c_void, bytes: usize) -> *mut c_void {
    match entry::enter_allocation() {
        // realloc(p, 0) succeeds with NULL: it frees.
        Some(cx) => errno_kept_if(
            || alloc::realloc(&cx, pointer, bytes),
            |p| !p.is_null() || bytes == 0,
        ),
        None => native().map_or(null_mut(), |d| crossing::realloc(d, pointer, bytes)),
    }
}

/// Android 17's entry (README "Android 17's dispatch table"): `n * size` bytes through
/// `debug_realloc`, ENOMEM when the product overflows; the native `reallocarray` while debug
/// calls are disabled on the thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_reallocarray(
    pointer: *mut c_void,
    nmemb: usize,
    size: usize,
) -> *mut c_void {
    if crate::sync::debug_calls_disabled() {
        return native().map_or(null_mut(), |d| {
            crossing::reallocarray(d, pointer, nmemb, size)
        });
    }
    match nmemb.checked_mul(size) {
        // SAFETY: the caller's realloc contract.
        Some(bytes) => unsafe { debug_realloc(pointer, bytes) },
        None => {
            crate::platform::set_errno(libc::ENOMEM);
            null_mut()
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_memalign(alignment: usize, bytes: usize) -> *mut c_void {
    match entry::enter_allocation() {
        Some(cx) => errno_kept_on_success(|| alloc::memalign(&cx, alignment, bytes)),
        None => native().map_or(null_mut(), |d| {
            // SAFETY: native allocator call with the caller's arguments.
            crossing::handed_out(unsafe { (d.memalign)(alignment, bytes) })
        }),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_aligned_alloc(alignment: usize, size: usize) -> *mut c_void {
    match entry::enter_allocation() {
        Some(cx) => errno_kept_on_success(|| alloc::aligned_alloc(&cx, alignment, size)),
        None => native().map_or(null_mut(), |d| {
            // SAFETY: native allocator call with the caller's arguments.
            crossing::handed_out(unsafe { (d.aligned_alloc)(alignment, size) })
        }),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_posix_memalign(
    memptr: *mut *mut c_void,
    alignment: usize,
    size: usize,
) -> c_int {
    match entry::enter_allocation() {
        Some(cx) => alloc::posix_memalign(&cx, memptr, alignment, size),
        None => native().map_or(libc::ENOMEM, |d| {
            // SAFETY: native allocator call with the caller's arguments.
            let rc = unsafe { (d.posix_memalign)(memptr, alignment, size) };
            crossing::handed_out_at(rc, memptr)
        }),
    }
}

#[cfg(target_pointer_width = "32")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_pvalloc(bytes: usize) -> *mut c_void {
    match entry::enter_allocation() {
        Some(cx) => {
            let page = crate::platform::page_size();
            match bytes.checked_add(page - 1) {
                Some(rounded) => {
                    errno_kept_on_success(|| alloc::memalign(&cx, page, rounded & !(page - 1)))
                }
                None => {
                    crate::platform::set_errno(libc::ENOMEM);
                    null_mut()
                }
            }
        }
        None => native().map_or(null_mut(), |d| {
            // SAFETY: native allocator call with the caller's argument.
            crossing::handed_out(unsafe { (d.pvalloc)(bytes) })
        }),
    }
}

#[cfg(target_pointer_width = "32")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_valloc(size: usize) -> *mut c_void {
    match entry::enter_allocation() {
        Some(cx) => {
            errno_kept_on_success(|| alloc::memalign(&cx, crate::platform::page_size(), size))
        }
        None => native().map_or(null_mut(), |d| {
            // SAFETY: native allocator call with the caller's argument.
            crossing::handed_out(unsafe { (d.valloc)(size) })
        }),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_malloc_usable_size(pointer: *const c_void) -> usize {
    match entry::enter_allocation() {
        Some(cx) if !pointer.is_null() => keeping_errno(|| alloc::malloc_usable_size(&cx, pointer)),
        _ => native().map_or(0, |d| crossing::usable_size(d, pointer)),
    }
}

/// Pass-through, no lock (docs/spec/abi.md#mallocdispatch).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_mallinfo() -> Mallinfo {
    // SAFETY: native allocator call.
    native().map_or(Mallinfo::default(), |d| unsafe { (d.mallinfo)() })
}

/// Pass-through, no lock (docs/spec/abi.md#mallocdispatch).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_mallopt(param: c_int, value: c_int) -> c_int {
    // SAFETY: native allocator call.
    native().map_or(0, |d| unsafe { (d.mallopt)(param, value) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_malloc_info(options: c_int, fp: *mut libc::FILE) -> c_int {
    let cx = entry::enter();
    match cx {
        Some(cx) if cx.state.has(bits::TRACK_ALLOCS) => {
            let saved = platform::errno();
            let rc = crate::report::malloc_info(cx.state, fp);
            if rc == 0 {
                platform::set_errno(saved);
            }
            rc
        }
        // SAFETY: native allocator call; `malloc_info` is read only here because Android 9's
        // dispatch table has no such field (callers there never reach this function).
        _ => native().map_or(-1, |d| unsafe { (d.malloc_info)(options, fp) }),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_malloc_iterate(
    base: usize,
    size: usize,
    callback: IterateCallback,
    arg: *mut c_void,
) -> c_int {
    match entry::enter_gate_only() {
        Some((state, _gate)) if state.has(bits::TRACK_ALLOCS) => {
            // The callback's own errno changes are the caller's.
            crate::iterate::malloc_iterate(state, callback, arg)
        }
        // SAFETY: native allocator call with the caller's arguments.
        _ => native().map_or(-1, |d| unsafe {
            (d.malloc_iterate)(base, size, callback, arg)
        }),
    }
}

/// Android 9's libc looks the iterate entry up under this name.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_iterate(
    base: usize,
    size: usize,
    callback: IterateCallback,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: same contract.
    unsafe { debug_malloc_iterate(base, size, callback, arg) }
}

#[unsafe(no_mangle)]
pub extern "C" fn debug_malloc_disable() {
    match crate::state::get().filter(|_| !crate::sync::debug_calls_disabled()) {
        Some(state) => crate::lifecycle::malloc_disable(state),
        None => {
            if let Some(d) = native() {
                // SAFETY: native allocator call.
                unsafe { (d.malloc_disable)() }
            }
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn debug_malloc_enable() {
    let disabler = crate::sync::disabled_by_this_thread();
    match crate::state::get().filter(|_| disabler || !crate::sync::debug_calls_disabled()) {
        Some(state) => crate::lifecycle::malloc_enable(state),
        None => {
            if let Some(d) = native() {
                // SAFETY: native allocator call.
                unsafe { (d.malloc_enable)() }
            }
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_malloc_backtrace(
    pointer: *mut c_void,
    frames: *mut usize,
    max_frames: usize,
) -> isize {
    if pointer.is_null() {
        return 0;
    }
    let Some(cx) = entry::enter() else { return 0 };
    keeping_errno(|| crate::report::malloc_backtrace(cx.state, pointer, frames, max_frames))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_get_malloc_leak_info(
    info: *mut *mut u8,
    overall_size: *mut usize,
    info_size: *mut usize,
    total_memory: *mut usize,
    backtrace_size: *mut usize,
) {
    let Some(cx) = entry::enter() else { return };
    if info.is_null()
        || overall_size.is_null()
        || info_size.is_null()
        || total_memory.is_null()
        || backtrace_size.is_null()
    {
        log_error!("get_malloc_leak_info: At least one invalid parameter.");
        return;
    }
    // SAFETY: all five out-parameters were checked non-null; the caller makes them writable.
    let out = unsafe {
        crate::report::LeakInfoOut {
            info: &mut *info,
            overall_size: &mut *overall_size,
            info_size: &mut *info_size,
            total_memory: &mut *total_memory,
            backtrace_size: &mut *backtrace_size,
        }
    };
    keeping_errno(|| {
        crate::report_stack::run(|| crate::report::get_malloc_leak_info(cx.state, out))
    });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_free_malloc_leak_info(info: *mut u8) {
    if let Some(d) = native() {
        // SAFETY: the buffer came from the native calloc in get_malloc_leak_info (or is null).
        unsafe {
            (d.free)(info.cast());
            (d.mallopt)(M_PURGE_ALL, 0);
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_write_malloc_leak_info(fp: *mut libc::FILE) -> bool {
    if !fp.is_null() {
        // SAFETY: the caller's FILE*; flushing first keeps its earlier output before the dump.
        unsafe { libc::fflush(fp) };
    }
    let Some(cx) = entry::enter() else {
        return false;
    };
    let saved = platform::errno();
    let written = crate::report_stack::run(|| crate::report::write_malloc_leak_info(cx.state, fp));
    if written {
        platform::set_errno(saved);
    }
    written
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn debug_dump_heap(file_name: *const c_char) {
    let Some(cx): Option<Entered> = entry::enter() else {
        return;
    };
    if file_name.is_null() {
        return;
    }
    // SAFETY: the caller passes a NUL-terminated path.
    let name = unsafe { crate::fmt::c_str_bytes(file_name) };
    keeping_errno(|| crate::report_stack::run(|| crate::report::dump_heap(cx.state, name)));
}
