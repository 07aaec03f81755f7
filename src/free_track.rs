//! free_track (spec §5): freed blocks are held back in a bounded FIFO, filled with 0xef, and
//! checked for writes when they leave the queue (and at exit).

use crate::config::FILL_FREE_BYTE;
use crate::failure;
use crate::header::DEBUG_FREE_TAG;
use crate::log::log_error;
use crate::mutex::Mutex;
use crate::pages;
use crate::state::State;
use crate::tracking::FrameBuffer;
use core::ptr::NonNull;

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

/// The ring of queued blocks and, beside it, each entry's free-time frames in a row of
/// `frames_per_entry` words. Raw frames instead of interned ids: a free then costs a copy of
/// the frames rather than a hash-table insertion, and leaving the queue costs no release.
struct Ring {
    entries: Option<NonNull<Freed>>,
    frames: Option<NonNull<usize>>,
    frames_per_entry: usize,
    capacity: usize,
    head: usize,
    len: usize,
}

// SAFETY: the ring memory is owned by the queue and touched only under its mutex.
unsafe impl Send for Ring {}

impl Ring {
    /// `i` modulo the capacity. Indexes are `head + k` with `k <= capacity`: a subtraction
    /// does, where a 64-bit division would cost more than the rest of a push. `%` stays for
    /// any other index.
    fn wrap(&self, i: usize) -> usize {
        if i < self.capacity {
            i
        } else if i - self.capacity < self.capacity {
            i - self.capacity
        } else {
            i % self.capacity
        }
    }

    /// Entry `i` (modulo capacity) and its frame row. Callers check that the ring is mapped.
    fn slot(&mut self, i: usize) -> (&mut Freed, &mut [usize]) {
        let i = self.wrap(i);
        let entries = self.entries.map_or(NonNull::dangling(), |p| p);
        let frames = self.frames.map_or(NonNull::dangling(), |p| p);
        // SAFETY: the ring is mapped (callers check `entries`) with `capacity` entries followed
        // by `capacity` rows of `frames_per_entry` words, and `i < capacity`. The two borrows
        // are disjoint memory and both end with `&mut self`'s.
        unsafe {
            (
                &mut *entries.as_ptr().add(i),
                core::slice::from_raw_parts_mut(
                    frames.as_ptr().add(i * self.frames_per_entry),
                    self.frames_per_entry,
                ),
            )
        }
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
                entries: None,
                frames: None,
                frames_per_entry: 0,
                capacity: 0,
                head: 0,
                len: 0,
            }),
        }
    }

    /// Maps room for `capacity` entries (at most 16384) with up to `frames_per_entry` (at most
    /// 256) free-time frames each: 16384 × 256 frames is 32 MiB of address space, of which only
    /// the rows in use are ever touched.
    pub fn init(&self, capacity: usize, frames_per_entry: usize) -> bool {
        let capacity = capacity.max(1);
        let entry_bytes = capacity * size_of::<Freed>();
        let Some(mem) = pages::map(entry_bytes + capacity * frames_per_entry * size_of::<usize>())
        else {
            return false;
        };
        let mut ring = self.ring.lock();
        ring.entries = Some(mem.cast());
        // SAFETY: the frame rows start right after the entries, inside the mapping; Freed's
        // size is a multiple of usize's alignment.
        ring.frames = Some(unsafe { mem.add(entry_bytes) }.cast());
        ring.frames_per_entry = frames_per_entry;
        ring.capacity = capacity;
        true
    }

    /// Appends a freed block whose first `filled` bytes hold 0xef and whose free-time frames
    /// are in `trace`. When the queue was full the oldest entry leaves, and its frames take
    /// the new ones' place in `trace`.
    pub fn push(&self, pointer: usize, filled: usize, trace: &mut FrameBuffer) -> Pushed {
        let mut ring = self.ring.lock();
        if ring.entries.is_none() {
            return Pushed::Unmapped;
        }
        let evicted = if ring.len == ring.capacity {
            let head = ring.head;
            ring.head = ring.wrap(head + 1);
            ring.len -= 1;
            Some(*ring.slot(head).0)
        } else {
            None
        };
        let tail = ring.head + ring.len;
        let (entry, frames) = ring.slot(tail);
        let frame_count = trace.frames().len().min(frames.len());
        // When full, the tail is the evicted entry's slot: its frames come out as ours go in.
        trace.swap_with(frames, evicted.map_or(0, |e| e.frame_count));
        *entry = Freed {
            mangled: pointer ^ usize::MAX,
            filled,
            frame_count,
        };
        ring.len += 1;
        match evicted {
            Some(e) => Pushed::Evicted(e),
            None => Pushed::Queued,
        }
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

    /// Calls `f` on every queued entry and its frames, in queue order, with the queue locked.
    pub fn for_each(&self, mut f: impl FnMut(&Freed, &[usize])) {
        let mut ring = self.ring.lock();
        if ring.entries.is_none() {
            return;
        }
        let (head, len) = (ring.head, ring.len);
        for i in 0..len {
            let (entry, frames) = ring.slot(head + i);
            f(entry, &frames[..entry.frame_count]);
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
