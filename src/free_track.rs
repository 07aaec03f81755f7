//! free_track (docs/spec/allocation.md#free_track): freed blocks are held back in a bounded
//! queue, filled with 0xef, and checked for writes when they leave the queue (and at exit). The queue itself, a data
//! structure that knows nothing of blocks, is src/free_queue.rs.

use crate::config::FILL_FREE_BYTE;
use crate::failure;
use crate::free_queue::FreeQueue;
use crate::header::DEBUG_FREE_TAG;
use crate::live_table::Key;
use crate::log::log_error;
use crate::spare_blocks::{Miss, SpareBlocks};
use crate::state::State;
use crate::tracking::FrameBuffer;

/// Freed blocks compared in chunks of this size; each damaged chunk yields one report (the
/// reference's granularity, kept so reports match).
const COMPARE_CHUNK: usize = 512 * 1024;

#[derive(Clone, Copy)]
pub struct Freed {
    /// The user pointer, mangled like the live table's keys.
    mangled: usize,
    /// Bytes filled with 0xef at free: what must still hold 0xef when the block leaves. Kept
    /// here so that leaving costs no `malloc_usable_size` on cold memory.
    filled: usize,
    /// The block's allocation backtrace (an interned id, or `tracking::BT_OFF`/`BT_EMPTY`),
    /// for the `error_backtraces` extension; kept alive by collections while queued
    /// (src/error_context.rs).
    alloc_backtrace: u32,
}

impl Freed {
    pub fn pointer(&self) -> usize {
        Key::mangle(self.mangled)
    }

    pub fn alloc_backtrace(&self) -> u32 {
        self.alloc_backtrace
    }
}

/// The held blocks, one ring per shard of threads (src/free_queue.rs explains the model and
/// README's "Differences from the reference" the order in which blocks leave).
pub static FREE_QUEUE: FreeQueue<Freed> = FreeQueue::new();

/// Blocks allocated ahead when a take misses.
const PREFILL: usize = 3;

/// The blocks that left the queue, kept for reuse (src/spare_blocks.rs explains why).
static SPARES: SpareBlocks = SpareBlocks::new();

/// Holds a freed block (already filled with 0xef over its first `filled` bytes) with its
/// allocation backtrace's id and its free-time frames; the blocks that leave to make room are
/// checked and given back.
pub fn hold(state: &State, pointer: usize, filled: usize, alloc_backtrace: u32, frames: &[usize]) {
    let entry = Freed {
        mangled: Key::mangle(pointer),
        filled,
        alloc_backtrace,
    };
    FREE_QUEUE.push(entry, frames, |leaving, frames| {
        retire(state, leaving, frames)
    });
}

/// Whether free_track holds `pointer` (every ring is looked at: out of line, for the rare
/// callers that ask).
#[cold]
#[inline(never)]
pub fn is_held(pointer: usize) -> bool {
    let mangled = Key::mangle(pointer);
    let mut found = false;
    FREE_QUEUE.for_each(|entry, _| found |= entry.mangled == mangled);
    found
}

/// Copies the free-time frames recorded for a held pointer into `out`; false when the pointer
/// is not held (an error report: every ring is looked at).
pub fn free_backtrace_of(pointer: usize, out: &mut FrameBuffer) -> bool {
    let mangled = Key::mangle(pointer);
    let mut found = false;
    FREE_QUEUE.for_each(|entry, frames| {
        if !found && entry.mangled == mangled {
            out.copy_from(frames);
            found = true;
        }
    });
    found
}

/// Checks a block that has been in the queue: header tag intact, contents still 0xef.
/// `frames` is its free-time backtrace. Returns false when the header itself is damaged (its
/// `orig_pointer` cannot be trusted).
pub fn verify(state: &State, entry: &Freed, frames: &[usize]) -> bool {
    let pointer = entry.pointer();
    if state.layout.header {
        // SAFETY: the block is still allocated from the native allocator (we hold it in the
        // queue), so its header is readable.
        let tag =
            unsafe { core::ptr::addr_of!((*state.layout.header_of(pointer)).tag).read_unaligned() };
        if tag != DEBUG_FREE_TAG {
            report_corrupted_tag(state, entry, tag);
            return false;
        }
    }
    // SAFETY: [pointer, pointer + filled) lies inside the block, which we still own.
    let bytes = unsafe { core::slice::from_raw_parts(pointer as *const u8, entry.filled) };
    for chunk in bytes.chunks(COMPARE_CHUNK) {
        if !crate::bytes::all_equal(chunk, FILL_FREE_BYTE) {
            report_used_after_free(state, entry, bytes, frames);
        }
    }
    true
}

// The reports are out of line: their log buffers would otherwise give every eviction a
// multi-kilobyte stack frame.
#[cold]
#[inline(never)]
fn report_corrupted_tag(state: &State, entry: &Freed, tag: u32) {
    let _foreign = crate::sync::DisabledScope::enter();
    failure::in_report(|| {
        failure::divider();
        log_error!(
            "+++ ALLOCATION 0x{:x} HAS CORRUPTED HEADER TAG 0x{:x} AFTER FREE",
            entry.pointer(),
            tag
        );
        failure::end_report_of(state, entry.pointer(), entry.alloc_backtrace);
    });
}

#[cold]
#[inline(never)]
fn report_used_after_free(state: &State, entry: &Freed, bytes: &[u8], frames: &[usize]) {
    let _foreign = crate::sync::DisabledScope::enter();
    failure::in_report(|| {
        failure::divider();
        log_error!("+++ ALLOCATION 0x{:x} USED AFTER FREE", entry.pointer());
        for (i, &b) in bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b != FILL_FREE_BYTE)
        {
            log_error!(
                "  allocation[{}] = 0x{:02x} (expected 0x{:02x})",
                i,
                b,
                FILL_FREE_BYTE
            );
        }
        if !frames.is_empty() {
            log_error!("Backtrace at time of free:");
            failure::log_backtrace_or_failure(state, frames);
        }
        failure::end_report_of(state, entry.pointer(), entry.alloc_backtrace);
    });
}

/// Verifies an evicted entry; its memory becomes a spare, or goes back to the native allocator.
pub fn retire(state: &State, entry: Freed, frames: &[usize]) {
    if !verify(state, &entry, frames) {
        // A damaged header's orig_pointer is garbage: leaking the block is the safe choice.
        return;
    }
    let pointer = entry.pointer();
    let orig = if state.layout.header {
        // SAFETY: header of a block we still own.
        unsafe { (*state.layout.header_of(pointer)).orig_pointer }
    } else {
        pointer
    };
    if state.plan.reuse_freed {
        let usable = native_usable(state, pointer, orig);
        SPARES.put(orig, usable, |blocks| give_back(state, blocks));
    } else {
        give_back(state, &[orig]);
    }
}

/// The native usable size of a held block whose native start is `orig`.
fn native_usable(state: &State, pointer: usize, orig: usize) -> usize {
    if state.layout.header && state.layout.rear_guard_bytes == 0 {
        // The header's usable size is the native one less what precedes the user pointer
        // (with a rear guard it is the request's size, and only the allocator knows).
        // SAFETY: header of a block we still own.
        unsafe { (*state.layout.header_of(pointer)).usable_size + (pointer - orig) }
    } else {
        // SAFETY: a native block we still own.
        unsafe { (state.dispatch.malloc_usable_size)(orig as *const _) }
    }
}

/// Frees native blocks free_track no longer keeps. On Android with signal 33 blocked: every
/// backtrace-signal stall under free_track was a give-back that Scudo's drain made wait
/// (docs/design.md, "Spare blocks"); the spares keep these rare, and batch them.
fn give_back(state: &State, blocks: &[usize]) {
    let _blocked = crate::sync::BacktraceSignalBlock::new();
    free_all(state, blocks);
}

/// `give_back` for a caller that has the signal blocked already.
fn free_all(state: &State, blocks: &[usize]) {
    for &orig in blocks {
        // SAFETY: a native block free_track held (a queued block's, a spare's or one allocated
        // ahead), freed exactly once: it left the queue or the spares before this call.
        unsafe { (state.dispatch.free)(orig as *mut _) };
    }
}

/// A native block of at least `request` bytes for an allocation under free_track: a spare of
/// the request's size class when there is one, else the native allocator's. Returns the block
/// (0 when the allocator failed, its errno set) and its native usable size when that is known
/// without asking the allocator.
#[inline]
pub fn native_malloc(state: &State, request: usize) -> (usize, Option<usize>) {
    let miss = match SPARES.take(request) {
        Ok(spare) => return (spare.orig, Some(spare.usable)),
        Err(miss) => miss,
    };
    let orig = {
        // With spares, this thread's own frees no longer refill the native allocator's cache,
        // so a miss is often a refill under the size class's lock: blocked like a give-back.
        let _blocked = crate::sync::BacktraceSignalBlock::new();
        // SAFETY: native allocation.
        let orig = unsafe { (state.dispatch.malloc)(request) as usize };
        if orig != 0 && miss == Miss::Empty {
            prefill(state, request);
        }
        orig
    };
    if orig == 0 || miss != Miss::Unlearned {
        return (orig, None);
    }
    // SAFETY: the block the allocator just returned.
    let usable = unsafe { (state.dispatch.malloc_usable_size)(orig as *const _) };
    SPARES.learn(request, usable);
    (orig, Some(usable))
}

/// realloc without a header under free_track on bionic. When the block moves, the native
/// realloc allocates and frees inside the allocator, under its size-class locks with the
/// backtrace signal unblocked (it stalled unwinds, 1 in 10,000, once the rest was blocked); so
/// the block is resized here. It stays where it is when the new size fits and uses at least
/// half of it; else it moves to a spare or a blocked native allocation (`native_malloc`), and
/// its old native block becomes a spare. Returns 0, the old block untouched, when the
/// allocation fails.
pub fn native_realloc(state: &State, old: usize, request: usize) -> usize {
    // SAFETY: a verified live native block.
    let old_usable = unsafe { (state.dispatch.malloc_usable_size)(old as *const _) };
    if request <= old_usable && request >= old_usable / 2 {
        return old;
    }
    let (new, _) = native_malloc(state, request);
    if new == 0 {
        return 0;
    }
    // SAFETY: two distinct live native blocks, each at least as long as what is copied.
    unsafe {
        core::ptr::copy_nonoverlapping(old as *const u8, new as *mut u8, old_usable.min(request))
    };
    SPARES.put(old, old_usable, |blocks| give_back(state, blocks));
    new
}

/// Spares allocated ahead for a request whose size class ran dry, inside the caller's blocked
/// window: the next requests of the size then find them, and the window's cost is shared.
fn prefill(state: &State, request: usize) {
    for _ in 0..PREFILL {
        // SAFETY: native allocation.
        let extra = unsafe { (state.dispatch.malloc)(request) as usize };
        if extra == 0 {
            return;
        }
        // SAFETY: the block the allocator just returned.
        let usable = unsafe { (state.dispatch.malloc_usable_size)(extra as *const _) };
        SPARES.put(extra, usable, |blocks| free_all(state, blocks));
    }
}

/// At exit: every queued block is checked, in queue order; nothing is released.
pub fn verify_all(state: &State) {
    FREE_QUEUE.for_each(|entry, frames| {
        verify(state, entry, frames);
    });
}
