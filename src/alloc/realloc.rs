//! realloc (docs/spec/allocation.md#realloc): in place when the block's usable size allows,
//! else a new block, the contents copied, the old one released as `free` releases it; recorded
//! by record_allocs with the old block's present bytes from before the call.

use super::{
    MAX_SIZE, fail_nomem, fill_on_alloc, free_untracked, header, header_mut, internal_malloc,
    usable_size,
};
use crate::crossing;
use crate::entry::Entered;
use crate::free_track;
use crate::guard;
use crate::record_allocs;
use crate::tracking;
use crate::verify;
use core::ffi::c_void;
use core::ptr::null_mut;

pub fn realloc(cx: &Entered, pointer: *mut c_void, bytes: usize) -> *mut c_void {
    let state = cx.state;
    let old = pointer as usize;
    let Some(pending) = record_allocs::begin(state) else {
        return realloc_unrecorded(cx, old, bytes, &mut OldBlock::Unseen);
    };
    let mut seen = OldBlock::Unseen;
    let p = realloc_unrecorded(cx, old, bytes, &mut seen) as usize;
    // Header-mode realloc in place is not recorded
    // (docs/spec/abi.md#what-each-call-records), nor is a failure.
    let in_place = state.layout.header && old != 0 && p == old;
    if (p == 0 && bytes != 0) || in_place || (bytes == 0 && seen == OldBlock::Rejected) {
        pending.abandon();
    } else {
        pending.finish(record_allocs::Done {
            kind: record_allocs::Kind::Realloc,
            ptr: p,
            size: if p == 0 { 0 } else { bytes },
            u: old as u64,
            present: match seen {
                OldBlock::Present(bytes) => bytes,
                _ => -1,
            },
            untimed: false,
        });
    }
    p as *mut c_void
}

/// What realloc learnt of the old block for its record_allocs entry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OldBlock {
    /// Not looked at for a record (not recording, or no old block).
    Unseen,
    /// Failed verification (reported): the call records nothing when it also frees nothing.
    Rejected,
    /// Verified; its present bytes from before the call.
    Present(i64),
}

/// `seen`: what a recording caller learns of the old block (left `Unseen` when not recording).
fn realloc_unrecorded(cx: &Entered, old: usize, bytes: usize, seen: &mut OldBlock) -> *mut c_void {
    let state = cx.state;
    let recording = state.plan.record;
    if old == 0 {
        return internal_malloc(cx, bytes);
    }
    // As in `free`: a dump the signal asked for lists the old block.
    crate::deferred::on_internal_malloc_or_free(state);
    // From here on the old block is out of the live table (one lookup for the check and the
    // removal); every way out either frees it or tracks it again.
    let old_record = match verify::check_and_untrack(state, old, "realloc") {
        verify::Release::Refused => {
            if let Some(p) = crossing::realloc_if_native(state.dispatch, old, bytes) {
                return p;
            }
            if recording {
                *seen = OldBlock::Rejected;
            }
            return null_mut();
        }
        released => released.record(),
    };
    if recording {
        *seen = OldBlock::Present(record_allocs::present_bytes(state, old));
    }
    let old_block = Untracked {
        pointer: old,
        record: old_record,
    };
    if bytes == 0 {
        old_block.free(cx);
        return null_mut();
    }
    let Some(real) = bytes
        .checked_add(state.plan.realloc_expand)
        .filter(|_| bytes <= MAX_SIZE)
    else {
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
        // Also a block that was not tracked (the table could not grow then).
        if cx.state.plan.track {
            tracking::track(cx.state, &cx.origin, pointer, size);
        }
    }

    /// The block is freed (moved or realloc to 0).
    fn free(self, cx: &Entered) {
        let alloc_backtrace = self.record.map_or(tracking::BT_OFF, |r| r.backtrace_id());
        free_untracked(cx, self.pointer, alloc_backtrace);
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
    let prev = if state.plan.fill_on_alloc > 0 {
        // SAFETY: a verified live native allocation.
        unsafe { (d.malloc_usable_size)(old as *const c_void) }
    } else {
        0
    };
    let new = if state.plan.reuse_freed {
        free_track::native_realloc(state, old, real)
    } else {
        // SAFETY: as above.
        unsafe { (d.realloc)(old as *mut c_void, real) as usize }
    };
    if new == 0 {
        // The old block is still allocated: keep it tracked (the reference loses it here).
        old_block.keep();
        return null_mut();
    }
    old_block.retrack_at(cx, new, real);
    fill_on_alloc(state, new, prev);
    new as *mut c_void
}
