//! The allocation paths of docs/spec/allocation.md and its size/errno rules
//! (docs/spec/allocation.md#size-limits-and-errno), in header mode (guards) and without headers.
//! Each function runs inside an entered call (`entry::Entered`); which steps run is decided
//! once at initialize (src/plan.rs).

use crate::config::{FILL_ALLOC_BYTE, FILL_FREE_BYTE, MIN_ALIGN};
use crate::crossing;
use crate::entry::Entered;
use crate::free_track;
use crate::guard;
use crate::header::{DEBUG_FREE_TAG, DEBUG_TAG, Header};
use crate::platform::{keeping_errno, set_errno};
use crate::record_allocs;
use crate::state::State;
use crate::tracking;
use crate::verify;
use core::ffi::c_void;
use core::ptr::null_mut;

pub use crate::header::MAX_SIZE;
pub use realloc::realloc;

mod realloc;

fn fail_nomem() -> *mut c_void {
    set_errno(libc::ENOMEM);
    null_mut()
}

// ---------------------------------------------------------------------------------------------
// Header mode helpers

/// Sets up the header at `header_at` for a block whose native start is `orig`
/// (docs/spec/allocation.md#header-mode),
/// given the allocator's usable size (`usize::MAX` when a rear guard makes it moot). Returns the
/// user pointer, or None (block already given back) if the allocator reports no usable size.
fn init_header(
    state: &State,
    orig: usize,
    header_at: usize,
    size: usize,
    native_usable: usize,
) -> Option<usize> {
    let layout = &state.layout;
    if native_usable == 0 {
        // SAFETY: giving back the block we were handed.
        unsafe { (state.dispatch.free)(orig as *mut c_void) };
        return None;
    }
    let pointer = header_at + layout.pointer_offset;
    let mut usable = native_usable - (layout.pointer_offset + (header_at - orig));
    if layout.front_guard_bytes > 0 {
        guard::write_front(pointer, layout.front_guard_bytes);
    }
    if layout.rear_guard_bytes > 0 {
        guard::write_rear(pointer, size, layout.rear_guard_bytes);
        usable = size;
    }
    let header = Header {
        tag: DEBUG_TAG,
        orig_pointer: orig,
        size,
        usable_size: usable,
    };
    // SAFETY: the header area [header_at, header_at + size_of::<Header>()) is inside the block.
    unsafe { core::ptr::write_unaligned(header_at as *mut Header, header) };
    Some(pointer)
}

fn header(state: &State, pointer: usize) -> Header {
    // SAFETY: callers pass verified (or just created) header-mode pointers.
    unsafe { core::ptr::read_unaligned(state.layout.header_of(pointer)) }
}

fn header_mut(state: &State, pointer: usize) -> *mut Header {
    state.layout.header_of(pointer)
}

/// Usable bytes behind a user pointer: the header's record, or the native allocator's.
pub(crate) fn usable_size(state: &State, pointer: usize) -> usize {
    if state.layout.header {
        header(state, pointer).usable_size
    } else {
        // SAFETY: a live native allocation.
        unsafe { (state.dispatch.malloc_usable_size)(pointer as *const c_void) }
    }
}

fn fill(pointer: usize, byte: u8, from: usize, to: usize) {
    if to > from {
        // SAFETY: callers bound `to` by the block's usable size.
        unsafe { core::ptr::write_bytes((pointer + from) as *mut u8, byte, to - from) };
    }
}

/// Fills `[from, min(usable, limit))` of a fresh block with 0xeb (docs/spec/allocation.md#fill).
fn fill_on_alloc(state: &State, pointer: usize, from: usize) {
    if state.plan.fill_on_alloc > 0 {
        let to = usable_size(state, pointer).min(state.plan.fill_on_alloc);
        fill(pointer, FILL_ALLOC_BYTE, from, to);
    }
}

// ---------------------------------------------------------------------------------------------
// malloc / calloc / memalign

/// How the caller asked for a block: the only difference the pipeline below makes between
/// malloc, calloc and memalign (plus the size rules each caller checks first).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Request {
    Malloc,
    /// Zeroed memory.
    Calloc,
    /// Aligned to the given alignment (any value the caller passed; header mode rounds it).
    Memalign(usize),
}

/// The allocation pipeline, for a `size` its caller has already checked: a native block (with
/// the header and guards in header mode), tracked, filled. Null when the native allocator
/// failed (its errno stands) or the request cannot be met (ENOMEM).
fn allocate(cx: &Entered, request: Request, size: usize) -> *mut c_void {
    let state = cx.state;
    let pointer = match native_block(state, request, size) {
        Ok(pointer) => pointer,
        Err(NativeFailure::TooLarge) => return fail_nomem(),
        Err(NativeFailure::Refused) => return null_mut(),
    };
    if state.plan.track {
        tracking::track(state, &cx.origin, pointer, size);
    }
    if request != Request::Calloc {
        fill_on_alloc(state, pointer, 0);
    }
    pointer as *mut c_void
}

enum NativeFailure {
    /// The request plus the library's extra bytes does not fit: ENOMEM.
    TooLarge,
    /// The native allocator returned null (and set errno) or reported no usable size.
    Refused,
}

/// The user pointer of a fresh native block for `size` bytes.
fn native_block(state: &State, request: Request, size: usize) -> Result<usize, NativeFailure> {
    let layout = &state.layout;
    let d = state.dispatch;
    if !layout.header {
        let real = size
            .checked_add(layout.extra_bytes)
            .ok_or(NativeFailure::TooLarge)?;
        let p = match request {
            Request::Malloc | Request::Calloc if state.plan.reuse_freed => {
                match free_track::native_malloc(state, real) {
                    (p, _) if p == 0 || request == Request::Malloc => p,
                    // calloc from a spare or a plain malloc: zero what the caller may use.
                    (p, usable) => {
                        zero_fresh(state, p, usable);
                        p
                    }
                }
            }
            // SAFETY: native allocation calls with checked sizes.
            Request::Malloc => unsafe { (d.malloc)(real) as usize },
            // SAFETY: as above.
            Request::Calloc => unsafe { (d.calloc)(1, real) as usize },
            Request::Memalign(alignment) => {
                // Under spares the native allocator's locks are taken with the backtrace signal
                // blocked (docs/design.md, "Spare blocks"); elsewhere this blocks nothing.
                let _blocked = state
                    .plan
                    .reuse_freed
                    .then(crate::sync::BacktraceSignalBlock::new);
                // SAFETY: as above.
                unsafe { (d.memalign)(alignment, real) as usize }
            }
        };
        return if p == 0 {
            Err(NativeFailure::Refused)
        } else {
            Ok(p)
        };
    }
    // Header mode: memalign over-allocates by the alignment and places the header below the
    // first aligned user pointer; malloc's own alignment (MIN_ALIGN) needs no memalign.
    let alignment = match request {
        Request::Memalign(asked) => header_alignment(asked).ok_or(NativeFailure::TooLarge)?,
        _ => 0,
    };
    let real = size
        .checked_add(alignment)
        .and_then(|r| r.checked_add(layout.extra_bytes))
        .ok_or(NativeFailure::TooLarge)?;
    let (orig, known_usable) = if state.plan.reuse_freed {
        free_track::native_malloc(state, real)
    } else {
        // SAFETY: native allocation.
        (unsafe { (d.malloc)(real) } as usize, None)
    };
    if orig == 0 {
        return Err(NativeFailure::Refused);
    }
    let header_at = match request {
        Request::Memalign(_) => {
            (orig + layout.pointer_offset).next_multiple_of(alignment) - layout.pointer_offset
        }
        _ => orig,
    };
    if state.plan.track {
        // The table's line loads while the header and guards are written.
        tracking::prefetch(header_at + layout.pointer_offset);
    }
    let usable = if request == Request::Calloc {
        zero_fresh(state, orig, known_usable)
    } else if layout.rear_guard_bytes > 0 {
        // With a rear guard the usable size is the requested size: no need to ask the
        // allocator (a native call on every allocation).
        usize::MAX
    } else {
        usable_of_fresh(state, orig, known_usable)
    };
    init_header(state, orig, header_at, size, usable).ok_or(NativeFailure::Refused)
}

/// The usable size of a native block just obtained: the one free_track's spares already knew
/// (`known`), else the allocator's answer.
fn usable_of_fresh(state: &State, block: usize, known: Option<usize>) -> usize {
    // SAFETY: `block` was just returned by the native allocator (or is a spare, as good as one).
    known.unwrap_or_else(|| unsafe { (state.dispatch.malloc_usable_size)(block as *const c_void) })
}

/// calloc's zeroing of a native block just obtained: all of it, what the caller may use.
/// Returns its usable size.
fn zero_fresh(state: &State, block: usize, known: Option<usize>) -> usize {
    let usable = usable_of_fresh(state, block, known);
    // SAFETY: the block is fresh and all `usable` bytes of it are ours.
    unsafe { core::ptr::write_bytes(block as *mut u8, 0, usable) };
    usable
}

/// The internal malloc shared by malloc and realloc (docs/spec/allocation.md#malloc).
fn internal_malloc(cx: &Entered, size: usize) -> *mut c_void {
    crate::deferred::on_internal_malloc_or_free(cx.state);
    let size = size.max(1);
    if size > MAX_SIZE || size.checked_add(cx.state.layout.extra_bytes).is_none() {
        return fail_nomem();
    }
    allocate(cx, Request::Malloc, size)
}

/// Runs an allocating call, recorded under record_allocs: `describe` turns the result into the
/// entry (None: the entry stays unfilled, as for calls that failed their checks).
#[inline]
fn recorded(
    state: &State,
    call: impl FnOnce() -> *mut c_void,
    describe: impl FnOnce(usize) -> Option<record_allocs::Done>,
) -> *mut c_void {
    let Some(pending) = record_allocs::begin(state) else {
        return call();
    };
    let p = call();
    match describe(p as usize) {
        Some(done) => pending.finish(done),
        None => pending.abandon(),
    }
    p
}

fn allocation(kind: record_allocs::Kind, ptr: usize, size: usize, u: usize) -> record_allocs::Done {
    record_allocs::Done {
        kind,
        ptr,
        size,
        u: u as u64,
        present: -1,
        untimed: false,
    }
}

pub fn malloc(cx: &Entered, size: usize) -> *mut c_void {
    recorded(
        cx.state,
        || internal_malloc(cx, size),
        // A failed malloc is recorded too, without timestamps.
        |p| {
            Some(record_allocs::Done {
                untimed: p == 0,
                ..allocation(record_allocs::Kind::Malloc, p, size, 0)
            })
        },
    )
}

pub fn calloc(cx: &Entered, nmemb: usize, size: usize) -> *mut c_void {
    recorded(
        cx.state,
        || calloc_unrecorded(cx, nmemb, size),
        |p| (p != 0).then(|| allocation(record_allocs::Kind::Calloc, p, size, nmemb)),
    )
}

fn calloc_unrecorded(cx: &Entered, nmemb: usize, size: usize) -> *mut c_void {
    let Some(total) = nmemb.checked_mul(size) else {
        return fail_nomem();
    };
    let total = total.max(1);
    // calloc's limit counts the library's extra bytes too
    // (docs/spec/allocation.md#size-limits-and-errno).
    match total.checked_add(cx.state.layout.extra_bytes) {
        Some(real) if real <= MAX_SIZE => allocate(cx, Request::Calloc, total),
        _ => fail_nomem(),
    }
}

/// Also behind aligned_alloc and posix_memalign, which record as memalign.
/// The record holds the alignment the allocation used: in header mode the rounded one, as the
/// reference records it (docs/spec/abi.md#what-each-call-records).
pub fn memalign(cx: &Entered, alignment: usize, bytes: usize) -> *mut c_void {
    let used = if cx.state.layout.header {
        header_alignment(alignment).unwrap_or(alignment)
    } else {
        alignment
    };
    recorded(
        cx.state,
        || memalign_unrecorded(cx, alignment, bytes),
        |p| (p != 0).then(|| allocation(record_allocs::Kind::Memalign, p, bytes.max(1), used)),
    )
}

fn memalign_unrecorded(cx: &Entered, alignment: usize, bytes: usize) -> *mut c_void {
    let bytes = bytes.max(1);
    if bytes > MAX_SIZE {
        return fail_nomem();
    }
    allocate(cx, Request::Memalign(alignment), bytes)
}

/// Header mode's alignment: a power of two (0 counts as one), at least MIN_ALIGN.
fn header_alignment(alignment: usize) -> Option<usize> {
    let a = if alignment == 0 || alignment.is_power_of_two() {
        alignment
    } else {
        alignment.checked_next_power_of_two()?
    };
    Some(a.max(MIN_ALIGN))
}

pub fn aligned_alloc(cx: &Entered, alignment: usize, size: usize) -> *mut c_void {
    // The reference divides by a zero alignment; a zero alignment is simply invalid.
    if !alignment.is_power_of_two() || !size.is_multiple_of(alignment) {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    memalign(cx, alignment, size)
}

pub fn posix_memalign(cx: &Entered, out: *mut *mut c_void, alignment: usize, size: usize) -> i32 {
    if alignment < size_of::<usize>() || !alignment.is_power_of_two() {
        return libc::EINVAL;
    }
    // posix_memalign reports failure by its result and never changes errno.
    let p = keeping_errno(|| memalign(cx, alignment, size));
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: posix_memalign's contract: `out` is writable.
    unsafe { *out = p };
    0
}

// ---------------------------------------------------------------------------------------------
// free / realloc / malloc_usable_size

/// The internal free shared by free and realloc (docs/spec/allocation.md#free, steps 3-5), for
/// a block already out of the live table (the deferred signal work ran before it left: see
/// `free`). `alloc_backtrace`: the id of its allocation backtrace, for error reports
/// (src/error_context.rs).
fn free_untracked(cx: &Entered, pointer: usize, alloc_backtrace: u32) {
    let state = cx.state;
    let d = state.dispatch;
    // Without a header, the usable size costs a native call: ask only when something needs it.
    let needs_bytes = state.plan.free_needs_usable_size();
    let (bytes, orig) = if state.layout.header {
        let h = header(state, pointer);
        guard::check(state, pointer, h.size, alloc_backtrace);
        // SAFETY: header of a verified live block.
        unsafe {
            core::ptr::addr_of_mut!((*header_mut(state, pointer)).tag)
                .write_unaligned(DEBUG_FREE_TAG)
        };
        (h.usable_size, h.orig_pointer)
    } else if needs_bytes {
        // SAFETY: a live native allocation.
        (
            unsafe { (d.malloc_usable_size)(pointer as *const c_void) },
            pointer,
        )
    } else {
        (0, pointer)
    };
    if state.plan.fill_on_free > 0 {
        fill(
            pointer,
            FILL_FREE_BYTE,
            0,
            bytes.min(state.plan.fill_on_free),
        );
    }
    if state.plan.hold_freed {
        queue_freed(cx, pointer, bytes, alloc_backtrace);
    } else {
        // SAFETY: the block's native start, freed once.
        unsafe { (d.free)(orig as *mut c_void) };
    }
}

/// free_track: the block (already filled) joins the queue with its free-time backtrace, and
/// the oldest queued block leaves when the queue is full. Out of line, as `capture_interned`.
#[inline(never)]
fn queue_freed(cx: &Entered, pointer: usize, bytes: usize, alloc_backtrace: u32) {
    let state = cx.state;
    let mut trace = tracking::FrameBuffer::new();
    if state.plan.free_frames > 0 {
        trace.capture(state, &cx.origin, bytes, state.plan.free_frames);
    }
    free_track::hold(
        state,
        pointer,
        bytes.min(state.plan.fill_on_free),
        alloc_backtrace,
        trace.frames(),
    );
}

pub fn free(cx: &Entered, pointer: *mut c_void) {
    let state = cx.state;
    let pointer = pointer as usize;
    if state.plan.track && state.layout.header {
        // Both misses of a header-mode free at once: the table's line and the header, which
        // the checks after the removal read.
        tracking::prefetch(pointer);
        crate::platform::prefetch(state.layout.header_of(pointer) as usize);
    }
    // Before the block leaves the table, as the reference does: a heap dump the signal asked
    // for still lists the block being freed.
    crate::deferred::on_internal_malloc_or_free(state);
    let removed = match verify::check_and_untrack(state, pointer, "free") {
        verify::Release::Refused => {
            crossing::free_if_native(state.dispatch, pointer);
            return;
        }
        released => released.record(),
    };
    let alloc_backtrace = removed.map_or(tracking::BT_OFF, |r| r.backtrace_id());
    // Recorded only once verified, with the block's present bytes from before the free.
    let Some(pending) = record_allocs::begin(state) else {
        return free_untracked(cx, pointer, alloc_backtrace);
    };
    let present = record_allocs::present_bytes(state, pointer);
    free_untracked(cx, pointer, alloc_backtrace);
    pending.finish(record_allocs::Done {
        kind: record_allocs::Kind::Free,
        ptr: pointer,
        size: 0,
        u: 0,
        present,
        untimed: false,
    });
}

pub fn malloc_usable_size(cx: &Entered, pointer: *const c_void) -> usize {
    if !verify::check(cx.state, pointer as usize, "malloc_usable_size") {
        return crossing::usable_size_if_native(cx.state.dispatch, pointer as usize).unwrap_or(0);
    }
    usable_size(cx.state, pointer as usize)
}

#[cfg(test)]
mod tests;
