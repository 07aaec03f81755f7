//! The `error_backtraces` extension (README "Extensions"): an error report about a block ends
//! with where the block was allocated, as ASan and valgrind say, whenever allocation backtraces
//! are being collected (`backtrace`, or `backtrace_enable_on_signal` once turned on).
//!
//! The reference's lines of the report stay exactly as they are, closing divider included
//! (current AOSP rules for extensions, README "Extensions"); after them come
//!
//! ```text
//! Backtrace at time of allocation of 0x<pointer>:
//! <frames, in the format of every other backtrace of the log>
//! <divider>
//! ```
//!
//! and only then the error marker and `abort_on_error`. Where the block was freed is not
//! repeated: the reference's own lines already print the free backtrace whenever one was kept
//! (`Backtrace at time of free:` for a write after free, `Backtrace of original free:` for a
//! double free under free_track). An unknown pointer that points inside a live block gets one
//! more line first, `0x<pointer> points <n> bytes inside the block of <size> bytes at 0x<block>`,
//! and the block's allocation. Nothing is added when the block's allocation is not known: a
//! wild or foreign pointer, a block freed long ago whose record left free_track's queue, a
//! block allocated while capture was off or filtered out by the size options, or (rarely) a
//! record collected while the block was between the live table and the queue.
//!
//! Where the allocation backtrace comes from, per report:
//! * guard corruption at free: the live table's record of the block, which `free` took out of
//!   the table just before (`alloc.rs` passes its id down);
//! * free_track (write after free, damaged tag after free): the id kept with the queued entry;
//! * pointer verification (double free, invalid tag, unknown pointer): the live table if the
//!   block is in it, else free_track's queue, else the live block the pointer points inside of
//!   (a copy of the live table, searched whole: an error path).
//!
//! Ids of interned backtraces stay valid only while a collection finds them in use
//! (src/backtrace/table.rs). The live table's are; for the ids held by free_track's queue,
//! [`mark_queued`] hands them to every collection while the extension is on. An id that was
//! collected anyway (a collection in the few instructions between `free`'s removal from the
//! table and the queue's push, or a push in progress that the scan passes over) simply fails to
//! resolve: ids are never reused, so it can never name another backtrace.

use crate::config::bits;
use crate::failure;
use crate::free_track::FREE_QUEUE;
use crate::log::log_error;
use crate::snapshot::Snapshot;
use crate::state::State;
use crate::tracking::{self, BT_EMPTY, FrameBuffer};

/// Whether reports get the extension's lines: the option is on and backtraces are collected.
pub fn wanted(state: &State) -> bool {
    state.config.error_backtraces && state.has(bits::BACKTRACE)
}

/// After a report's closing divider: the allocation backtrace `alloc_backtrace` of the block at
/// `pointer`, and a divider, when the extension is on and the backtrace is known.
pub fn log_allocation(state: &State, pointer: usize, allocation: failure::Allocation) {
    let alloc_backtrace = allocation.backtrace;
    if !wanted(state) || alloc_backtrace <= BT_EMPTY {
        return;
    }
    // Copied out, then logged: symbolizing under the record's shard lock would make every
    // thread interning a new backtrace in that shard wait for the log.
    let mut frames = FrameBuffer::new();
    let found = tracking::BACKTRACES.with_frames(alloc_backtrace, |f| frames.copy_from(f));
    if found.is_none() || frames.frames().is_empty() {
        return;
    }
    if allocation.block != pointer {
        log_error!(
            "0x{:x} points {} bytes inside the block of {} bytes at 0x{:x}",
            pointer,
            pointer - allocation.block,
            allocation.size,
            allocation.block
        );
    }
    log_error!(
        "Backtrace at time of allocation of 0x{:x}:",
        allocation.block
    );
    failure::log_backtrace_or_failure(state, frames.frames());
    failure::divider();
}

/// The block of `pointer` for a verification report: the live table's record if the block is
/// in it, else the entry of free_track's queue that holds it, else the live block `pointer`
/// points inside of (an interior pointer, as ASan tells them), else nothing known (`BT_EMPTY`).
/// Looked up only when the extension is on (the queue and, for the last, a copy of the live
/// table are searched whole: an error path).
pub fn allocation_of(state: &State, pointer: usize) -> failure::Allocation {
    let mut found = failure::Allocation {
        block: pointer,
        size: 0,
        backtrace: BT_EMPTY,
    };
    if !wanted(state) {
        return found;
    }
    if let Some(id) = tracking::backtrace_of(pointer) {
        found.backtrace = id;
        return found;
    }
    if state.plan.hold_freed {
        FREE_QUEUE.for_each(|entry, _| {
            if entry.pointer() == pointer {
                found.backtrace = entry.alloc_backtrace();
            }
        });
        if found.backtrace != BT_EMPTY {
            return found;
        }
    }
    let snapshot = Snapshot::take_unsorted();
    let records = snapshot.as_ref().map_or(&[][..], |s| s.records());
    if let Some(r) = records
        .iter()
        .find(|r| r.pointer < pointer && pointer - r.pointer < r.size)
    {
        found = failure::Allocation {
            block: r.pointer,
            size: r.size,
            backtrace: r.backtrace_id,
        };
    }
    found
}

/// Hands the allocation backtrace ids held by free_track's queue to a collection (its last
/// marking step, after the live table's shards), so that a queued block's allocation backtrace
/// survives while it waits. Nothing to do when the extension is off: the ids are then never printed.
pub fn mark_queued(mark: &mut dyn FnMut(u32)) {
    let Some(state) = crate::state::get() else {
        return;
    };
    if !wanted(state) || !state.plan.hold_freed {
        return;
    }
    FREE_QUEUE.for_each(|entry, _| {
        if entry.alloc_backtrace() > BT_EMPTY {
            mark(entry.alloc_backtrace());
        }
    });
}
