//! free_track (spec §5): freed blocks are held back in a bounded queue, filled with 0xef, and
//! checked for writes when they leave the queue (and at exit).

use crate::config::FILL_FREE_BYTE;
use crate::failure;
use crate::header::DEBUG_FREE_TAG;
use crate::log::log_error;
use crate::pages;
use crate::state::State;
use crate::tracking::FrameBuffer;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

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
    /// Frames of the free-time backtrace held in the entry's row of the frame area.
    frame_count: usize,
}

impl Freed {
    pub fn pointer(&self) -> usize {
        self.mangled ^ usize::MAX
    }
}

/// What `push` did with a freed block.
pub enum Pushed {
    /// Queued; nothing left the queue.
    Queued,
    /// Queued; the oldest entry left and must be retired. Its free-time frames are now in the
    /// caller's frame buffer.
    Evicted(Freed),
    /// No queue memory (mapping failed at start-up): the caller frees the block at once.
    Unmapped,
}

// SAFETY: a slot's entry is written only by the push that owns it (odd sequence); readers copy
// it and check the sequence.
unsafe impl Sync for FreeQueue {}

/// The ring of queued blocks and, beside it, each entry's free-time frames in a row of
/// `frames_per_entry` words. Raw frames instead of interned ids: a free then costs a copy of
/// the frames rather than a hash-table insertion, and leaving the queue costs no release.
///
/// No lock (docs/design.md, "The signal-33 rule"): a push claims the next index by CAS on
/// `next`, then owns that slot by making its sequence odd, swaps the entry that was there (the
/// oldest) for its own, and makes the sequence even again. A slot whose sequence is odd belongs
/// to a push in progress, which may be parked by bionic's backtrace signal: a push that meets
/// one does not wait but takes the next index, and after a few tries retires its own block at
/// once instead of queueing it. So the queue never holds more than `capacity` blocks; blocks
/// leave in the order their pushes claimed indexes, which is the order of the frees but for
/// pushes that raced.
#[repr(C)]
struct Slot {
    /// Even: the entry is stable (`mangled` 0: empty); odd: a push owns the slot.
    seq: AtomicUsize,
    entry: UnsafeCell<Freed>,
}

/// Pushes that meet a busy slot try this many indexes before retiring their block at once.
const CLAIM_TRIES: usize = 4;

#[repr(align(64))]
struct Next(AtomicUsize);

pub struct FreeQueue {
    /// `capacity` slots followed by `capacity` rows of `frames_per_entry` words; set once by
    /// `init` before the library's state is published.
    slots: AtomicPtr<Slot>,
    frames: AtomicPtr<usize>,
    frames_per_entry: AtomicUsize,
    capacity: AtomicUsize,
    next: Next,
}

pub static FREE_QUEUE: FreeQueue = FreeQueue::new();

impl FreeQueue {
    const fn new() -> Self {
        FreeQueue {
            slots: AtomicPtr::new(core::ptr::null_mut()),
            frames: AtomicPtr::new(core::ptr::null_mut()),
            frames_per_entry: AtomicUsize::new(0),
            capacity: AtomicUsize::new(0),
            next: Next(AtomicUsize::new(0)),
        }
    }

    /// Maps room for `capacity` entries (at most 16384) with up to `frames_per_entry` (at most
    /// 256) free-time frames each: 16384 × 256 frames is 32 MiB of address space, of which only
    /// the rows in use are ever touched.
    pub fn init(&self, capacity: usize, frames_per_entry: usize) -> bool {
        let capacity = capacity.max(1);
        let slot_bytes = capacity * size_of::<Slot>();
        let bytes = slot_bytes + capacity * frames_per_entry * size_of::<usize>();
        let Some(mem) = pages::map_or_log(bytes, "the free_track queue") else {
            return false;
        };
        // Zeroed memory is a valid empty slot (sequence 0, mangled 0).
        self.slots.store(mem.as_ptr().cast(), Ordering::Relaxed);
        // SAFETY: the frame rows start right after the slots, inside the mapping; Slot's size
        // is a multiple of usize's alignment.
        self.frames.store(
            unsafe { mem.add(slot_bytes) }.as_ptr().cast(),
            Ordering::Relaxed,
        );
        self.frames_per_entry
            .store(frames_per_entry, Ordering::Relaxed);
        self.capacity.store(capacity, Ordering::Release);
        true
    }

    fn slot(&self, i: usize) -> &Slot {
        // SAFETY: callers pass i < capacity of a mapped ring (`init`).
        unsafe { &*self.slots.load(Ordering::Relaxed).add(i) }
    }

    /// Frame row `i`.
    ///
    /// # Safety
    /// The caller must own slot `i` (odd sequence, set by itself) or the whole queue.
    #[allow(clippy::mut_from_ref)]
    unsafe fn row(&self, i: usize) -> &mut [usize] {
        let n = self.frames_per_entry.load(Ordering::Relaxed);
        // SAFETY: row i of `init`'s mapping; exclusive by the caller's ownership of the slot.
        unsafe {
            core::slice::from_raw_parts_mut(self.frames.load(Ordering::Relaxed).add(i * n), n)
        }
    }

    /// The next index, modulo the capacity (a compare and an add: no division on a free).
    fn claim(&self, capacity: usize) -> usize {
        let mut cur = self.next.0.load(Ordering::Relaxed);
        loop {
            let next = if cur + 1 >= capacity { 0 } else { cur + 1 };
            match self
                .next
                .0
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return cur.min(capacity - 1),
                Err(now) => cur = now,
            }
        }
    }

    /// Appends a freed block whose first `filled` bytes hold 0xef and whose free-time frames
    /// are in `trace`. When the slot it takes held a block, that block leaves, and its frames
    /// take the new ones' place in `trace`.
    pub fn push(&self, pointer: usize, filled: usize, trace: &mut FrameBuffer) -> Pushed {
        let capacity = self.capacity.load(Ordering::Acquire);
        if capacity == 0 {
            return Pushed::Unmapped;
        }
        let mine = Freed {
            mangled: pointer ^ usize::MAX,
            filled,
            frame_count: 0,
        };
        for _ in 0..CLAIM_TRIES {
            let i = self.claim(capacity);
            let slot = self.slot(i);
            let seq = slot.seq.load(Ordering::Relaxed);
            if seq & 1 != 0
                || slot
                    .seq
                    .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            // SAFETY: the odd sequence makes the slot and its row ours until the store below.
            let (entry, row) = unsafe { (&mut *slot.entry.get(), self.row(i)) };
            let old = *entry;
            let frame_count = trace.frames().len().min(row.len());
            trace.swap_with(row, if old.mangled != 0 { old.frame_count } else { 0 });
            *entry = Freed {
                frame_count,
                ..mine
            };
            slot.seq.store(seq + 2, Ordering::Release);
            return if old.mangled != 0 {
                Pushed::Evicted(old)
            } else {
                Pushed::Queued
            };
        }
        // Every slot tried was busy: the block leaves at once, with its own frames.
        Pushed::Evicted(Freed {
            frame_count: trace.frames().len(),
            ..mine
        })
    }

    /// Copies the free-time frames recorded for a queued pointer into `out`; false when the
    /// pointer is not queued (an error report: the whole queue is looked at).
    pub fn free_backtrace_of(&self, pointer: usize, out: &mut FrameBuffer) -> bool {
        let mangled = pointer ^ usize::MAX;
        let mut found = false;
        self.for_each(|entry, frames| {
            if !found && entry.mangled == mangled {
                out.copy_from(frames);
                found = true;
            }
        });
        found
    }

    /// Calls `f` on every queued entry and its frames, oldest first. Entries that pushes are
    /// changing meanwhile are passed over (seen whole or not at all): a copy is taken and kept
    /// only if the slot's sequence did not move.
    pub fn for_each(&self, mut f: impl FnMut(&Freed, &[usize])) {
        let capacity = self.capacity.load(Ordering::Acquire);
        let start = self.next.0.load(Ordering::Relaxed);
        let mut frames = [0usize; crate::backtrace::MAX_FRAMES];
        for k in 0..capacity {
            let i = (start + k) % capacity;
            let slot = self.slot(i);
            let before = slot.seq.load(Ordering::Acquire);
            if before & 1 != 0 {
                continue;
            }
            // SAFETY: volatile reads of memory inside the ring; a torn copy is detected by the
            // sequence check below and dropped.
            let entry = unsafe { core::ptr::read_volatile(slot.entry.get()) };
            // SAFETY: as above, for the row.
            let row = unsafe { self.row(i) };
            let n = entry.frame_count.min(row.len()).min(frames.len());
            for (dst, src) in frames.iter_mut().zip(&row[..n]) {
                // SAFETY: as above.
                *dst = unsafe { core::ptr::read_volatile(src) };
            }
            core::sync::atomic::fence(Ordering::Acquire);
            if entry.mangled != 0 && slot.seq.load(Ordering::Relaxed) == before {
                f(&entry, &frames[..n]);
            }
        }
    }
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
            report_corrupted_tag(state, pointer, tag);
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
fn report_used_after_free(state: &State, entry: &Freed, bytes: &[u8], frames: &[usize]) {
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
    if !frames.is_empty() {
        log_error!("Backtrace at time of free:");
        failure::log_backtrace_or_failure(state, frames);
    }
    failure::end_report(state);
}

/// Verifies an evicted entry and gives its memory back to the native allocator.
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
    // SAFETY: `orig` is the native allocation behind the queued block, freed exactly once.
    unsafe { (state.dispatch.free)(orig as *mut _) };
}

/// At exit: every queued block is checked, in queue order; nothing is released.
pub fn verify_all(state: &State) {
    FREE_QUEUE.for_each(|entry, frames| {
        verify(state, entry, frames);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(frames: &[usize]) -> FrameBuffer {
        let mut t = FrameBuffer::new();
        t.copy_from(frames);
        t
    }

    #[test]
    fn evicted_entries_bring_their_own_frames_back() {
        let queue = FreeQueue::new();
        assert!(queue.init(2, 4));
        let mut t = trace(&[1, 2, 3, 4]);
        assert!(matches!(queue.push(0x1000, 10, &mut t), Pushed::Queued));
        let mut t = trace(&[5, 6]);
        assert!(matches!(queue.push(0x2000, 20, &mut t), Pushed::Queued));
        // Full: the first entry leaves with its four frames; the new one has none.
        let mut t = trace(&[]);
        match queue.push(0x3000, 30, &mut t) {
            Pushed::Evicted(e) => {
                assert_eq!((e.pointer(), e.filled), (0x1000, 10));
                assert_eq!(t.frames(), [1, 2, 3, 4]);
            }
            _ => panic!("the queue was full"),
        }
        // Longer frames than the slot holds are cut to the configured count.
        let mut t = trace(&[7, 8, 9, 10, 11, 12]);
        match queue.push(0x4000, 40, &mut t) {
            Pushed::Evicted(e) => {
                assert_eq!(e.pointer(), 0x2000);
                assert_eq!(t.frames(), [5, 6]);
            }
            _ => panic!("the queue was full"),
        }
        let mut out = FrameBuffer::new();
        assert!(queue.free_backtrace_of(0x3000, &mut out));
        assert!(out.frames().is_empty());
        assert!(queue.free_backtrace_of(0x4000, &mut out));
        assert_eq!(out.frames(), [7, 8, 9, 10]);
        assert!(!queue.free_backtrace_of(0x1000, &mut out));
        let mut seen = Vec::new();
        queue.for_each(|e, frames| seen.push((e.pointer(), frames.to_vec())));
        assert_eq!(seen, [(0x3000, vec![]), (0x4000, vec![7, 8, 9, 10])]);
    }

    #[test]
    fn an_unmapped_queue_hands_blocks_back() {
        let queue = FreeQueue::new();
        assert!(matches!(
            queue.push(0x1000, 1, &mut trace(&[1])),
            Pushed::Unmapped
        ));
    }
}
