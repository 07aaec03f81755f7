//! Blocks that cross the "debug calls disabled" boundary (docs/design.md, "fork, malloc_disable,
//! finalize"): each goes back to the allocator that made it, whichever side of the boundary the
//! thread is on when it frees, resizes or measures it.
//!
//! A marked thread (inside the library running foreign code, such as glibc's `dlerror` strings
//! or a symbolizer; or the thread between `malloc_disable` and `malloc_enable`) has its
//! allocation calls served by the native allocator, and may keep what it was given past the
//! mark. It may equally free a block the library made before it was marked.
//!
//! - Blocks the native allocator hands out to a marked thread are remembered in `NATIVE`, a
//!   lock-free pointer table of their own (the live table's structure). An unmarked call that
//!   finds a pointer neither live nor ours asks here before reporting it (`verify`), and the
//!   block goes to the native allocator; a native realloc's result stays in the set.
//! - A marked call given a pointer of the library's (live in the table, or an untracked block
//!   with our header tag once tracking is incomplete) takes the debug layout into account
//!   quietly: the block's native start is freed, with no check, report, fill or free_track.
//!   Nothing here logs or takes a lock the thread may already hold.
//!
//! The cost is on the marked side only (one table operation per marked call); the unmarked hot
//! path is unchanged and asks only before a report.

use crate::dispatch::MallocDispatch;
use crate::header::{DEBUG_FREE_TAG, DEBUG_TAG};
use crate::live_table::{Info, Key, LiveTable};
use crate::state::{self, State};
use crate::tracking;
use core::ffi::c_void;
use core::ptr::null_mut;

/// Old tables are never unmapped: a marked thread need not be inside the call gate whose
/// quiescence the live table relies on (the disabling thread is not). A shard keeps at most as
/// many retired tables as doublings, whose total is below its current table's size.
static NATIVE: LiveTable = LiveTable::new(|_| false);

const NOTHING: Info = Info {
    size: 0,
    backtrace_id: 0,
};

/// Remembers a block the native allocator handed to a marked thread. Nothing is remembered
/// before the library is initialised, nor in modes that track nothing: without tracking there
/// are no headers either, and the debug path frees a native block as it is. A block the full
/// set cannot take is simply not remembered: its unmarked free is then reported as before.
pub fn handed_out(pointer: *mut c_void) -> *mut c_void {
    if !pointer.is_null() && state::get().is_some_and(|s| s.plan.track) {
        NATIVE.add_key(Key::of(pointer as usize), NOTHING);
    }
    pointer
}

/// `handed_out` for posix_memalign's out-parameter.
pub fn handed_out_at(rc: i32, out: *mut *mut c_void) -> i32 {
    if rc == 0 {
        // SAFETY: posix_memalign succeeded, so it wrote the caller's writable `out`.
        handed_out(unsafe { *out });
    }
    rc
}

/// True if `pointer` was handed out to a marked thread and not freed since.
pub fn is_native(pointer: usize) -> bool {
    NATIVE.get(pointer).is_some()
}

/// A block of the library's own, untracked because the live table could not grow (see
/// `tracking::incomplete`): in header mode it carries our live tag; without headers, any
/// pointer the table does not know may be one, unless free_track holds it (freed already).
/// Without headers and free_track, a double free of such a block goes unreported.
pub fn untracked_ours(state: &State, pointer: usize) -> bool {
    if !tracking::incomplete() {
        return false;
    }
    if state.layout.header {
        crate::platform::read_foreign_u32(state.layout.header_of(pointer) as usize)
            == Some(DEBUG_TAG)
    } else {
        !(state.plan.hold_freed && crate::free_track::is_held(pointer))
    }
}

// ---------------------------------------------------------------------------------------------
// Unmarked calls on a native block (after `verify` found it in the set)

/// free: true if the block was a native one and is freed.
pub fn free_if_native(d: &MallocDispatch, pointer: usize) -> bool {
    if NATIVE.remove(pointer).is_none() {
        return false;
    }
    // SAFETY: the native allocator made the block and it is freed once (it left the set).
    unsafe { (d.free)(pointer as *mut c_void) };
    true
}

/// realloc: the native realloc's result when the block was a native one.
pub fn realloc_if_native(d: &MallocDispatch, pointer: usize, bytes: usize) -> Option<*mut c_void> {
    NATIVE.remove(pointer)?;
    Some(native_realloc(d, pointer, bytes))
}

/// Resizes a block known to be native (already out of the set), which stays native.
fn native_realloc(d: &MallocDispatch, pointer: usize, bytes: usize) -> *mut c_void {
    // SAFETY: a live native block, with the caller's size.
    let new = unsafe { (d.realloc)(pointer as *mut c_void, bytes) };
    if new.is_null() && bytes != 0 {
        // Not resized: the old block is still there.
        NATIVE.add_key(Key::of(pointer), NOTHING);
        return new;
    }
    if !new.is_null() {
        NATIVE.add_key(Key::of(new as usize), NOTHING);
    }
    new
}

/// malloc_usable_size of a native block.
pub fn usable_size_if_native(d: &MallocDispatch, pointer: usize) -> Option<usize> {
    // SAFETY: a live native block.
    is_native(pointer).then(|| unsafe { (d.malloc_usable_size)(pointer as *const c_void) })
}

// ---------------------------------------------------------------------------------------------
// Marked calls (the exports' native branches)

/// The library's own live block at `pointer`, if it is one: its usable size. Only tracked
/// modes can tell (header mode always tracks; without tracking a block of ours is a native one).
fn ours(state: &State, pointer: usize) -> Option<usize> {
    if pointer == 0 || !state.plan.track {
        return None;
    }
    let live = tracking::is_live(pointer) || untracked_ours(state, pointer);
    live.then(|| state.usable_size(pointer))
}

/// Frees a block of ours without checks or reports: out of the table, tagged freed, its native
/// start given back.
fn free_ours_quietly(state: &State, pointer: usize) {
    let _ = tracking::untrack(pointer);
    let mut orig = pointer;
    if state.layout.header {
        let header = state.layout.header_of(pointer);
        // SAFETY: a live header-mode block of ours: its header is mapped and ours.
        unsafe {
            orig = core::ptr::addr_of!((*header).orig_pointer).read_unaligned();
            core::ptr::addr_of_mut!((*header).tag).write_unaligned(DEBUG_FREE_TAG);
        }
    }
    // SAFETY: the block's native start, freed once (it left the table).
    unsafe { (state.dispatch.free)(orig as *mut c_void) };
}

/// free while marked (or before initialisation).
pub fn free(d: &MallocDispatch, pointer: *mut c_void) {
    let p = pointer as usize;
    if p != 0
        && let Some(state) = state::get()
        && NATIVE.remove(p).is_none()
        && ours(state, p).is_some()
    {
        return free_ours_quietly(state, p);
    }
    // SAFETY: the native allocator made the block (or it is null).
    unsafe { (d.free)(pointer) }
}

/// realloc while marked: a block of ours moves to a native one.
pub fn realloc(d: &MallocDispatch, pointer: *mut c_void, bytes: usize) -> *mut c_void {
    let p = pointer as usize;
    let Some(state) = state::get() else {
        // SAFETY: native allocator call with the caller's arguments.
        return unsafe { (d.realloc)(pointer, bytes) };
    };
    if p != 0 && NATIVE.remove(p).is_some() {
        return native_realloc(d, p, bytes);
    }
    let Some(usable) = ours(state, p) else {
        // SAFETY: native allocator call with the caller's arguments.
        return handed_out(unsafe { (d.realloc)(pointer, bytes) });
    };
    if bytes == 0 {
        free_ours_quietly(state, p);
        return null_mut();
    }
    // SAFETY: native allocation.
    let new = unsafe { (d.malloc)(bytes) };
    if new.is_null() {
        // The old block stays as it was.
        return new;
    }
    // SAFETY: both blocks are live and distinct; the copy is within both.
    unsafe { core::ptr::copy_nonoverlapping(pointer as *const u8, new.cast(), usable.min(bytes)) };
    free_ours_quietly(state, p);
    handed_out(new)
}

/// reallocarray while marked: the native table's own, unless the block crossed the boundary.
pub fn reallocarray(
    d: &MallocDispatch,
    pointer: *mut c_void,
    nmemb: usize,
    size: usize,
) -> *mut c_void {
    let p = pointer as usize;
    if p != 0
        && let Some(state) = state::get()
        && (is_native(p) || ours(state, p).is_some())
    {
        let Some(bytes) = nmemb.checked_mul(size) else {
            crate::platform::set_errno(libc::ENOMEM);
            return null_mut();
        };
        return realloc(d, pointer, bytes);
    }
    // SAFETY: native allocator call with the caller's arguments.
    handed_out(unsafe { d.reallocarray(pointer, nmemb, size) })
}

/// malloc_usable_size while marked.
pub fn usable_size(d: &MallocDispatch, pointer: *const c_void) -> usize {
    if let Some(state) = state::get()
        && !is_native(pointer as usize)
        && let Some(usable) = ours(state, pointer as usize)
    {
        return usable;
    }
    // SAFETY: native allocator call with the caller's argument.
    unsafe { (d.malloc_usable_size)(pointer) }
}
