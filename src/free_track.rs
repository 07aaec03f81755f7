//! free_track (spec §5): freed blocks are held back in a bounded FIFO, filled with 0xef, and
//! checked for writes when they leave the queue (and at exit).

use crate::config::FILL_FREE_BYTE;
use crate::failure;
use crate::header::DEBUG_FREE_TAG;
use crate::log::log_error;
use crate::mutex::Mutex;
use crate::pages;
use crate::state::State;
use crate::tracking;
use core::ptr::NonNull;

/// Freed blocks compared in chunks of this size; each damaged chunk yields one report (the
/// reference's granularity, kept so reports match).
const COMPARE_CHUNK: usize = 512 * 1024;

#[derive(Clone, Copy)]
pub struct Freed {
    /// The user pointer, mangled like the live table's keys.
    mangled: usize,
    /// Interned free-time backtrace, or 0.
    backtrace_id: u32,
}

impl Freed {
    pub fn pointer(&self) -> usize {
        self.mangled ^ usize::MAX
    }
}

struct Ring {
    slots: Option<NonNull<Freed>>,
    capacity: usize,
    head: usize,
    len: usize,
}

// SAFETY: the ring memory is owned by the queue and touched only under its mutex.
unsafe impl Send for Ring {}

impl Ring {
    /// Slot `i` (modulo capacity). Callers check that the ring is mapped first.
    fn slot(&mut self, i: usize) -> &mut Freed {
        let base = self.slots.map_or(core::ptr::NonNull::dangling(), |p| p);
        // SAFETY: the ring is mapped (callers check `slots`) with `capacity` slots, and the
        // index is reduced modulo capacity.
        unsafe { &mut *base.as_ptr().add(i % self.capacity) }
    }
}

pub struct FreeQueue {
    ring: Mutex<Ring>,
}

pub static FREE_QUEUE: FreeQueue = FreeQueue::new();

impl FreeQueue {
    const fn new() -> Self {
        FreeQueue {
            ring: Mutex::new(Ring {
                slots: None,
                capacity: 0,
                head: 0,
                len: 0,
            }),
        }
    }

    /// Maps room for `capacity` entries (at most 16384: 256 KiB on LP64).
    pub fn init(&self, capacity: usize) -> bool {
        let Some(mem) = pages::map(capacity.max(1) * size_of::<Freed>()) else {
            return false;
        };
        let mut ring = self.ring.lock();
        ring.slots = Some(mem.cast());
        ring.capacity = capacity.max(1);
        true
    }

    pub fn is_mapped(&self) -> bool {
        self.ring.lock().slots.is_some()
    }

    /// Appends a freed block; returns the oldest entry when the queue was full.
    pub fn push(&self, pointer: usize, backtrace_id: u32) -> Option<Freed> {
        let entry = Freed {
            mangled: pointer ^ usize::MAX,
            backtrace_id,
        };
        let mut ring = self.ring.lock();
        ring.slots?;
        let evicted = if ring.len == ring.capacity {
            let head = ring.head;
            let old = *ring.slot(head);
            ring.head = (head + 1) % ring.capacity;
            ring.len -= 1;
            Some(old)
        } else {
            None
        };
        let tail = ring.head + ring.len;
        *ring.slot(tail) = entry;
        ring.len += 1;
        evicted
    }

    /// The free-time backtrace recorded for a queued pointer, if any.
    pub fn free_backtrace_of(&self, pointer: usize) -> Option<u32> {
        let mut ring = self.ring.lock();
        ring.slots?;
        let mangled = pointer ^ usize::MAX;
        let (head, len) = (ring.head, ring.len);
        (0..len)
            .map(|i| *ring.slot(head + i))
            .find(|e| e.mangled == mangled)
            .map(|e| e.backtrace_id)
            .filter(|&id| id > tracking::BT_EMPTY)
    }

    /// Calls `f` on every queued entry in queue order (at exit; the queue stays locked).
    pub fn for_each(&self, mut f: impl FnMut(Freed)) {
        let mut ring = self.ring.lock();
        if ring.slots.is_none() {
            return;
        }
        let (head, len) = (ring.head, ring.len);
        for i in 0..len {
            f(*ring.slot(head + i));
        }
    }

    pub fn lock_raw(&self) {
        self.ring.lock_raw();
    }

    pub fn unlock_raw(&self) {
        self.ring.force_unlock();
    }
}

/// Checks a block that has been in the queue: header tag intact, contents still 0xef.
/// Returns false when the header itself is damaged (its `orig_pointer` cannot be trusted).
pub fn verify(state: &State, entry: &Freed) -> bool {
    let pointer = entry.pointer();
    let usable = if state.layout.header {
        // SAFETY: the block is still allocated from the native allocator (we hold it in the
        // queue), so its header is readable.
        let header = unsafe { core::ptr::read(state.layout.header_of(pointer)) };
        let tag = header.tag;
        if tag != DEBUG_FREE_TAG {
            report_corrupted_tag(state, pointer, tag);
            return false;
        }
        header.usable_size
    } else {
        // SAFETY: as above, a native allocation we still own.
        unsafe { (state.dispatch.malloc_usable_size)(pointer as *const _) }
    };
    let checked = usable.min(state.config.fill_on_free_bytes);
    // SAFETY: [pointer, pointer+checked) lies inside the block's usable size.
    let bytes = unsafe { core::slice::from_raw_parts(pointer as *const u8, checked) };
    for chunk in bytes.chunks(COMPARE_CHUNK) {
        if !crate::bytes::all_equal(chunk, FILL_FREE_BYTE) {
            report_used_after_free(state, entry, bytes);
        }
    }
    true
}

// The reports are out of line: their log buffers would otherwise give every eviction a
// multi-kilobyte stack frame.
#[cold]
#[inline(never)]
fn report_corrupted_tag(state: &State, pointer: usize, tag: u32) {
    let _foreign = crate::sync::DisabledScope::enter();
    failure::divider();
    log_error!(
        "+++ ALLOCATION 0x{:x} HAS CORRUPTED HEADER TAG 0x{:x} AFTER FREE",
        pointer,
        tag
    );
    failure::end_report(state);
}

#[cold]
#[inline(never)]
fn report_used_after_free(state: &State, entry: &Freed, bytes: &[u8]) {
    let _foreign = crate::sync::DisabledScope::enter();
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
    if entry.backtrace_id > tracking::BT_EMPTY {
        log_error!("Backtrace at time of free:");
        failure::log_interned_backtrace(state, entry.backtrace_id);
    }
    failure::end_report(state);
}

/// Verifies an evicted entry and gives its memory back to the native allocator.
pub fn retire(state: &State, entry: Freed) {
    let intact = verify(state, &entry);
    tracking::release_backtrace(entry.backtrace_id);
    if !intact {
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
    // SAFETY: `orig` is the native allocation behind the queued block, freed exactly once.
    unsafe { (state.dispatch.free)(orig as *mut _) };
}

/// At exit: every queued block is checked, in queue order; nothing is released.
pub fn verify_all(state: &State) {
    FREE_QUEUE.for_each(|entry| {
        verify(state, &entry);
    });
}
