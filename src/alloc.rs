//! The allocation paths of spec §2 and the size/errno rules of §4, in header mode (guards) and
//! without headers. Each function runs inside an entered call (`entry::Entered`).

use crate::config::{FILL_ALLOC_BYTE, FILL_FREE_BYTE, MIN_ALIGN, bits};
use crate::entry::Entered;
use crate::free_track::{self, FREE_QUEUE, Pushed};
use crate::guard;
use crate::header::{DEBUG_FREE_TAG, DEBUG_TAG, Header};
use crate::platform::{errno, set_errno};
use crate::record;
use crate::state::State;
use crate::tracking;
use crate::verify;
use core::ffi::c_void;
use core::ptr::null_mut;

pub use crate::header::MAX_SIZE;

fn fail_nomem() -> *mut c_void {
    set_errno(libc::ENOMEM);
    null_mut()
}

fn tracking_on(state: &State) -> bool {
    state.has(bits::TRACK_ALLOCS)
}

// ---------------------------------------------------------------------------------------------
// Header mode helpers

/// Sets up the header at `header_at` for a block whose native start is `orig` (spec §2.3).
/// Returns the user pointer, or None (block already given back) if the allocator reports no
/// usable size.
fn init_header(state: &State, orig: usize, header_at: usize, size: usize) -> Option<usize> {
    // With a rear guard the usable size is the requested size: no need to ask the allocator
    // (a native call on every allocation).
    let native_usable = if state.layout.rear_guard_bytes > 0 {
        usize::MAX
    } else {
        // SAFETY: `orig` was just returned by the native allocator.
        unsafe { (state.dispatch.malloc_usable_size)(orig as *const c_void) }
    };
    init_header_with_usable(state, orig, header_at, size, native_usable)
}

/// `init_header` for a caller that already asked the allocator for `native_usable`.
fn init_header_with_usable(
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

/// Fills `[from, min(usable, limit))` of a fresh block with 0xeb (spec §6).
fn fill_on_alloc(state: &State, pointer: usize, from: usize) {
    if state.has(bits::FILL_ON_ALLOC) {
        let to = usable_size(state, pointer).min(state.config.fill_on_alloc_bytes);
        fill(pointer, FILL_ALLOC_BYTE, from, to);
    }
}

// ---------------------------------------------------------------------------------------------
// malloc / calloc / memalign

/// The internal malloc shared by malloc and realloc (spec §2.4 step 2).
fn internal_malloc(cx: &Entered, size: usize) -> *mut c_void {
    let state = cx.state;
    crate::deferred::on_internal_malloc_or_free(state);
    let size = size.max(1);
    let Some(real) = size.checked_add(state.layout.extra_bytes) else {
        return fail_nomem();
    };
    if size > MAX_SIZE {
        return fail_nomem();
    }
    let d = state.dispatch;
    let pointer = if state.layout.header {
        // SAFETY: native allocation (malloc's alignment is MIN_ALIGN: no memalign needed).
        let orig = unsafe { (d.malloc)(real) } as usize;
        if orig == 0 {
            return null_mut();
        }
        match init_header(state, orig, orig, size) {
            Some(p) => p,
            None => return null_mut(),
        }
    } else {
        // SAFETY: native allocation.
        let p = unsafe { (d.malloc)(real) } as usize;
        if p == 0 {
            return null_mut();
        }
        p
    };
    if tracking_on(state) {
        tracking::track(state, &cx.origin, pointer, size);
    }
    fill_on_alloc(state, pointer, 0);
    pointer as *mut c_void
}

/// Runs an allocating call, recorded under record_allocs: `describe` turns the result into the
/// entry (None: the entry stays unfilled, as for calls that failed their checks).
#[inline]
fn recorded(
    state: &State,
    call: impl FnOnce() -> *mut c_void,
    describe: impl FnOnce(usize) -> Option<record::Done>,
) -> *mut c_void {
    let Some(pending) = record::begin(state) else {
        return call();
    };
    let p = call();
    match describe(p as usize) {
        Some(done) => pending.finish(done),
        None => pending.abandon(),
    }
    p
}

fn allocation(kind: record::Kind, ptr: usize, size: usize, u: usize) -> record::Done {
    record::Done {
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
            Some(record::Done {
                untimed: p == 0,
                ..allocation(record::Kind::Malloc, p, size, 0)
            })
        },
    )
}

pub fn calloc(cx: &Entered, nmemb: usize, size: usize) -> *mut c_void {
    recorded(
        cx.state,
        || calloc_unrecorded(cx, nmemb, size),
        |p| (p != 0).then(|| allocation(record::Kind::Calloc, p, size, nmemb)),
    )
}

fn calloc_unrecorded(cx: &Entered, nmemb: usize, size: usize) -> *mut c_void {
    let state = cx.state;
    let Some(total) = nmemb.checked_mul(size) else {
        return fail_nomem();
    };
    let total = total.max(1);
    let Some(real) = total.checked_add(state.layout.extra_bytes) else {
        return fail_nomem();
    };
    if real > MAX_SIZE {
        return fail_nomem();
    }
    let d = state.dispatch;
    let pointer = if state.layout.header {
        // SAFETY: native allocation (malloc's alignment is MIN_ALIGN: no memalign needed).
        let orig = unsafe { (d.malloc)(real) } as usize;
        if orig == 0 {
            return null_mut();
        }
        // SAFETY: the whole usable block is ours to zero.
        let usable = unsafe { (d.malloc_usable_size)(orig as *const c_void) };
        // SAFETY: as above.
        unsafe { core::ptr::write_bytes(orig as *mut u8, 0, usable) };
        match init_header_with_usable(state, orig, orig, total, usable) {
            Some(p) => p,
            None => return null_mut(),
        }
    } else {
        // SAFETY: native allocation.
        let p = unsafe { (d.calloc)(1, real) } as usize;
        if p == 0 {
            return null_mut();
        }
        p
    };
    if tracking_on(state) {
        tracking::track(state, &cx.origin, pointer, total);
    }
    pointer as *mut c_void
}

/// Also behind aligned_alloc and posix_memalign, which record as memalign.
pub fn memalign(cx: &Entered, alignment: usize, bytes: usize) -> *mut c_void {
    recorded(
        cx.state,
        || memalign_unrecorded(cx, alignment, bytes),
        |p| (p != 0).then(|| allocation(record::Kind::Memalign, p, bytes.max(1), alignment)),
    )
}

fn memalign_unrecorded(cx: &Entered, alignment: usize, bytes: usize) -> *mut c_void {
    let state = cx.state;
    let bytes = bytes.max(1);
    if bytes > MAX_SIZE {
        return fail_nomem();
    }
    let d = state.dispatch;
    let pointer = if state.layout.header {
        let Some(alignment) = header_alignment(alignment) else {
            return fail_nomem();
        };
        let Some(real) = alignment
            .checked_add(bytes)
            .and_then(|r| r.checked_add(state.layout.extra_bytes))
        else {
            return fail_nomem();
        };
        // SAFETY: native allocation; the alignment is produced by over-allocating.
        let orig = unsafe { (d.malloc)(real) } as usize;
        if orig == 0 {
            return null_mut();
        }
        let user = (orig + state.layout.pointer_offset).next_multiple_of(alignment);
        match init_header(state, orig, user - state.layout.pointer_offset, bytes) {
            Some(p) => p,
            None => return null_mut(),
        }
    } else {
        let Some(real) = bytes.checked_add(state.layout.extra_bytes) else {
            return fail_nomem();
        };
        // SAFETY: native allocation with the caller's alignment.
        let p = unsafe { (d.memalign)(alignment, real) } as usize;
        if p == 0 {
            return null_mut();
        }
        p
    };
    if tracking_on(state) {
        tracking::track(state, &cx.origin, pointer, bytes);
    }
    fill_on_alloc(state, pointer, 0);
    pointer as *mut c_void
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
    let saved = errno();
    let p = memalign(cx, alignment, size);
    set_errno(saved);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: posix_memalign's contract: `out` is writable.
    unsafe { *out = p };
    0
}

// ---------------------------------------------------------------------------------------------
// free / realloc / malloc_usable_size

/// The internal free shared by free and realloc (spec §2.8 step 4), for a block already out of
/// the live table (the deferred signal work ran before it left: see `free`).
fn free_untracked(cx: &Entered, pointer: usize) {
    let state = cx.state;
    let d = state.dispatch;
    // Without a header, the usable size costs a native call: ask only when something needs it.
    let needs_bytes = state.has(bits::FILL_ON_FREE) || state.has(bits::FREE_TRACK);
    let (bytes, orig) = if state.layout.header {
        let h = header(state, pointer);
        guard::check(state, pointer, h.size);
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
    if state.has(bits::FILL_ON_FREE) {
        fill(
            pointer,
            FILL_FREE_BYTE,
            0,
            bytes.min(state.config.fill_on_free_bytes),
        );
    }
    if state.has(bits::FREE_TRACK) {
        queue_freed(cx, pointer, orig, bytes);
    } else {
        // SAFETY: the block's native start, freed once.
        unsafe { (d.free)(orig as *mut c_void) };
    }
}

/// free_track: the block (already filled) joins the queue with its free-time backtrace, and
/// the oldest queued block leaves when the queue is full. Out of line, as `capture_interned`.
#[inline(never)]
fn queue_freed(cx: &Entered, pointer: usize, orig: usize, bytes: usize) {
    let state = cx.state;
    let mut trace = tracking::FrameBuffer::new();
    let frames = state.config.free_track_backtrace_num_frames;
    if frames > 0 {
        trace.capture(state, &cx.origin, bytes, frames);
    }
    let filled = bytes.min(state.config.fill_on_free_bytes);
    match FREE_QUEUE.push(pointer, filled, &mut trace) {
        Pushed::Evicted(evicted) => free_track::retire(state, evicted, trace.frames()),
        Pushed::Queued => {}
        // SAFETY: the block's native start, freed once.
        Pushed::Unmapped => unsafe { (state.dispatch.free)(orig as *mut c_void) },
    }
}

pub fn free(cx: &Entered, pointer: *mut c_void) {
    let state = cx.state;
    let pointer = pointer as usize;
    // Before the block leaves the table, as the reference does: a heap dump the signal asked
    // for still lists the block being freed.
    crate::deferred::on_internal_malloc_or_free(state);
    if let verify::Release::Refused = verify::check_and_untrack(state, pointer, "free") {
        return;
    }
    // Recorded only once verified, with the block's present bytes from before the free.
    let Some(pending) = record::begin(state) else {
        return free_untracked(cx, pointer);
    };
    let present = record::present_bytes(state, pointer);
    free_untracked(cx, pointer);
    pending.finish(record::Done {
        kind: record::Kind::Free,
        ptr: pointer,
        size: 0,
        u: 0,
        present,
        untimed: false,
    });
}

pub fn realloc(cx: &Entered, pointer: *mut c_void, bytes: usize) -> *mut c_void {
    let state = cx.state;
    let old = pointer as usize;
    let Some(pending) = record::begin(state) else {
        return realloc_unrecorded(cx, old, bytes, &mut -1);
    };
    let mut present = -1;
    let p = realloc_unrecorded(cx, old, bytes, &mut present) as usize;
    // Header-mode realloc in place is not recorded (spec §7.2), nor is a failure.
    let in_place = state.layout.header && old != 0 && p == old;
    if (p == 0 && bytes != 0) || in_place || (bytes == 0 && present == -2) {
        pending.abandon();
    } else {
        pending.finish(record::Done {
            kind: record::Kind::Realloc,
            ptr: p,
            size: if p == 0 { 0 } else { bytes },
            u: old as u64,
            present: present.max(-1),
            untimed: false,
        });
    }
    p as *mut c_void
}

/// `present`: set to the old block's present bytes once it is verified (left at -1 when not
/// recording, -2 when recording and the pointer failed verification).
fn realloc_unrecorded(cx: &Entered, old: usize, bytes: usize, present: &mut i64) -> *mut c_void {
    let state = cx.state;
    let recording = state.has(bits::RECORD_ALLOCS);
    if old == 0 {
        return internal_malloc(cx, bytes);
    }
    // As in `free`: a dump the signal asked for lists the old block.
    crate::deferred::on_internal_malloc_or_free(state);
    // From here on the old block is out of the live table (one lookup for the check and the
    // removal); every way out either frees it or tracks it again.
    let old_record = match verify::check_and_untrack(state, old, "realloc") {
        verify::Release::Refused => {
            if recording {
                *present = -2;
            }
            return null_mut();
        }
        released => released.record(),
    };
    if recording {
        *present = record::present_bytes(state, old);
    }
    let old_block = Untracked {
        pointer: old,
        record: old_record,
    };
    if bytes == 0 {
        old_block.free(cx);
        return null_mut();
    }
    let expand = if state.has(bits::EXPAND_ALLOC) {
        state.config.expand_alloc_bytes
    } else {
        0
    };
    let Some(real) = bytes.checked_add(expand).filter(|_| bytes <= MAX_SIZE) else {
        old_block.keep();
        return fail_nomem();
    };
    if state.layout.header {
        realloc_header(cx, old_block, bytes, real)
    } else {
        realloc_native(cx, old_block, real)
    }
}

/// A verified block taken out of the live table by realloc, with what the table held for it.
struct Untracked {
    pointer: usize,
    record: Option<tracking::Removed>,
}

impl Untracked {
    /// The block stays as it was: its record goes back into the table.
    fn keep(self) {
        if let Some(record) = self.record {
            tracking::restore(self.pointer, record);
        }
    }

    /// The block lives on at `pointer` (itself, resized in place, or where the native realloc
    /// moved it): recorded afresh, with a new allocation backtrace.
    fn retrack_at(self, cx: &Entered, pointer: usize, size: usize) {
        if self.record.is_some() {
            tracking::track(cx.state, &cx.origin, pointer, size);
        }
    }

    /// The block is freed (moved or realloc to 0).
    fn free(self, cx: &Entered) {
        free_untracked(cx, self.pointer);
    }
}

fn realloc_header(cx: &Entered, old_block: Untracked, bytes: usize, real: usize) -> *mut c_void {
    let state = cx.state;
    let old = old_block.pointer;
    let h = header(state, old);
    if real == h.size {
        // Same size: nothing moves; re-recording refreshes the allocation backtrace.
        old_block.retrack_at(cx, old, real);
        return old as *mut c_void;
    }
    if real < h.usable_size {
        let hp = header_mut(state, old);
        // SAFETY: header of a verified live block.
        unsafe { core::ptr::addr_of_mut!((*hp).size).write_unaligned(real) };
        if state.layout.rear_guard_bytes > 0 {
            // SAFETY: as above.
            unsafe { core::ptr::addr_of_mut!((*hp).usable_size).write_unaligned(real) };
            guard::write_rear(old, real, state.layout.rear_guard_bytes);
        }
        old_block.retrack_at(cx, old, real);
        return old as *mut c_void;
    }
    let new = internal_malloc(cx, bytes) as usize;
    if new == 0 {
        old_block.keep();
        return fail_nomem();
    }
    let prev = h.usable_size;
    // The reference copies `prev` bytes even when the new block (with expand_alloc and a rear
    // guard) is smaller, overwriting the new rear guard; never copy past the new block.
    let copy = prev.min(usable_size(state, new));
    // SAFETY: both ranges are inside live blocks of at least `copy` bytes; distinct blocks.
    unsafe { core::ptr::copy_nonoverlapping(old as *const u8, new as *mut u8, copy) };
    old_block.free(cx);
    fill_on_alloc(state, new, prev);
    new as *mut c_void
}

fn realloc_native(cx: &Entered, old_block: Untracked, real: usize) -> *mut c_void {
    let state = cx.state;
    let d = state.dispatch;
    // The old block left the table before this point: once the native realloc returns, its
    // address may already belong to another thread's new allocation.
    let old = old_block.pointer;
    // Only fill_on_alloc needs the old usable size (a native call on every realloc otherwise).
    let prev = if state.has(bits::FILL_ON_ALLOC) {
        // SAFETY: a verified live native allocation.
        unsafe { (d.malloc_usable_size)(old as *const c_void) }
    } else {
        0
    };
    // SAFETY: as above.
    let new = unsafe { (d.realloc)(old as *mut c_void, real) } as usize;
    if new == 0 {
        // The old block is still allocated: keep it tracked (the reference loses it here).
        old_block.keep();
        return null_mut();
    }
    old_block.retrack_at(cx, new, real);
    fill_on_alloc(state, new, prev);
    new as *mut c_void
}

pub fn malloc_usable_size(cx: &Entered, pointer: *const c_void) -> usize {
    if !verify::check(cx.state, pointer as usize, "malloc_usable_size") {
        return 0;
    }
    usable_size(cx.state, pointer as usize)
}
