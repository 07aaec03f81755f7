//! The entry ring: fixed capacity, mapped once at start-up (untouched pages cost nothing), and
//! lock-free on both sides, so that the writer may run inside the SIGRTMAX-18 handler
//! (docs/spec/abi.md#writing) while other threads — or the very thread it interrupted — are
//! half-way through a call.
//!
//! Every call takes a *ticket* (a 64-bit count that never wraps in practice) by a compare-and-swap
//! on `next`; ticket `t` lives in slot `t % capacity`. `low` is the first ticket not yet consumed
//! by a successful write, and a reservation succeeds only while `t < low + capacity`: the slot's
//! previous ticket has been written out, so the ring holds at most `capacity` entries that are
//! not in a file yet, as the reference's array does (its index goes back to 0 only after a
//! successful write).
//!
//! Each slot has a state word `(ticket + 1) << 2 | tag` (zero: never used). The call that holds
//! the ticket fills the entry and then publishes it with one release store; until then the word
//! still names an older ticket, so a writer that finds it skips the entry and leaves it for the
//! next write — never torn, never lost. Writers (one at a time, see `format.rs`) mark what they
//! wrote and, once the file is in place, consume it; `low` then moves over the consumed prefix.
//! An entry a reservation never filled (a call that failed its checks) is marked abandoned:
//! skipped when writing, consumed like a written one.

use crate::log::log_info;
use crate::pages;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Entry types, numbered as memory_trace::Entry's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Malloc = 0,
    Calloc = 1,
    Memalign = 2,
    Realloc = 3,
    Free = 4,
    ThreadDone = 5,
}

impl Kind {
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            0 => Kind::Malloc,
            1 => Kind::Calloc,
            2 => Kind::Memalign,
            3 => Kind::Realloc,
            4 => Kind::Free,
            5 => Kind::ThreadDone,
            _ => return None,
        })
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Entry {
    pub tid: i32,
    /// `Kind as u8`.
    pub kind: u8,
    pub ptr: u64,
    pub size: u64,
    /// old pointer (realloc), element count (calloc) or alignment (memalign).
    pub u: u64,
    pub present: i64,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Tickets whose slots are backed with memory at once, ahead of use (`populate_after`): 256 KiB
/// of slots, one `madvise` per 4,096 calls.
const POPULATE_SLOTS: u64 = 4096;

/// One slot: 64 bytes, so slots never share a cache line.
#[repr(C, align(64))]
struct Slot {
    state: AtomicU64,
    entry: UnsafeCell<Entry>,
}

// Tags of the state word.
/// Written out and in a file: the slot is free for ticket + capacity.
const CONSUMED: u64 = 0;
/// Filled by its call: a writer may write it.
const PUBLISHED: u64 = 1;
/// Reserved and never filled (a call that failed its checks): skipped, then consumed.
const ABANDONED: u64 = 2;
/// Written into a file that is not in place yet.
const WRITING: u64 = 3;

const fn word(ticket: u64, tag: u64) -> u64 {
    ((ticket + 1) << 2) | tag
}

pub struct Buffer {
    slots: AtomicPtr<Slot>,
    capacity: AtomicU64,
    next: AtomicU64,
    low: AtomicU64,
}

pub static BUFFER: Buffer = Buffer::new();

/// A reserved entry: the call that holds it must `fill` or `abandon` it.
pub struct Ticket(u64);

/// The tickets a write covers: `[from, to)`.
#[derive(Clone, Copy, Debug)]
pub struct Batch {
    from: u64,
    to: u64,
}

#[cfg(test)]
impl Batch {
    pub fn is_empty(&self) -> bool {
        self.from == self.to
    }
}

impl Buffer {
    /// An empty ring, mapped by [`Buffer::init`].
    pub const fn new() -> Buffer {
        Buffer {
            slots: AtomicPtr::new(core::ptr::null_mut()),
            capacity: AtomicU64::new(0),
            next: AtomicU64::new(0),
            low: AtomicU64::new(0),
        }
    }

    pub fn init(&'static self, capacity: usize) -> bool {
        let Some(bytes) = capacity.checked_mul(size_of::<Slot>()) else {
            return false;
        };
        let Some(p) = pages::map_or_log(bytes, "the record_allocs entries") else {
            return false;
        };
        self.slots.store(p.as_ptr().cast(), Ordering::Release);
        self.capacity.store(capacity as u64, Ordering::Release);
        self.populate_chunk(0);
        true
    }

    /// On the first pass over the ring, the ticket that opens a chunk of slots backs the next
    /// chunk with memory. Without it, every 64th call took a page fault, and with two threads
    /// recording, both threads faulted on most pages (their tickets interleave): 158,000 faults
    /// for 5M calls instead of 78,000, and a third of the run in the kernel. Later passes reuse
    /// the pages.
    #[inline]
    fn populate_after(&self, ticket: u64) {
        if ticket.is_multiple_of(POPULATE_SLOTS) && ticket < self.capacity.load(Ordering::Relaxed) {
            self.populate_chunk(ticket / POPULATE_SLOTS + 1);
        }
    }

    #[cold]
    fn populate_chunk(&self, chunk: u64) {
        let capacity = self.capacity.load(Ordering::Relaxed);
        let first = chunk * POPULATE_SLOTS;
        if first >= capacity {
            return;
        }
        let slots = (capacity - first).min(POPULATE_SLOTS) as usize;
        let start = core::ptr::NonNull::from(self.slot(first)).cast::<u8>();
        pages::populate(start, slots * size_of::<Slot>());
    }

    /// Undoes [`Buffer::init`] (a `debug_initialize` that gives up later; no call has
    /// recorded).
    pub fn release(&self) {
        let capacity = self.capacity.swap(0, Ordering::AcqRel) as usize;
        let slots = self.slots.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if let Some(slots) = core::ptr::NonNull::new(slots.cast::<u8>()) {
            // SAFETY: `init`'s mapping of `capacity` slots, unused (no ticket was handed out).
            unsafe { pages::unmap(slots, capacity * size_of::<Slot>()) };
        }
    }

    fn slot(&self, ticket: u64) -> &Slot {
        let capacity = self.capacity.load(Ordering::Relaxed);
        // SAFETY: `capacity` is non-zero once a ticket exists (reserve checks it), the mapping
        // holds `capacity` zero-initialised slots for the life of the process, and the index is
        // below `capacity`. Slots are only accessed through their atomic word or, for the entry,
        // by the ticket's owner / a writer as the state word allows (module docs).
        unsafe {
            &*self
                .slots
                .load(Ordering::Acquire)
                .add((ticket % capacity) as usize)
        }
    }

    /// The next ticket, or None while the ring is full (the reference's "all new operations will
    /// be dropped" until a write empties it). Lock-free: never waits for another thread.
    #[inline]
    pub fn reserve(&self) -> Option<Ticket> {
        let capacity = self.capacity.load(Ordering::Relaxed);
        let mut next = self.next.load(Ordering::Relaxed);
        loop {
            // `low` only grows: a stale value can refuse a ticket, never hand out a slot that is
            // still in use.
            let low = self.low.load(Ordering::Acquire);
            if next >= low + capacity {
                return None;
            }
            match self.next.compare_exchange_weak(
                next,
                next + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.populate_after(next);
                    if next + 1 == low + capacity {
                        log_info!(
                            "Maximum number of records added, all new operations will be dropped."
                        );
                    }
                    return Some(Ticket(next));
                }
                Err(now) => next = now,
            }
        }
    }

    /// Fills the ticket's entry and publishes it.
    pub fn fill(&self, ticket: Ticket, entry: Entry) {
        let slot = self.slot(ticket.0);
        // SAFETY: the slot belongs to this ticket alone: its previous ticket was consumed (a
        // reservation needs `ticket < low + capacity`), and no writer reads an entry whose word
        // does not carry this ticket yet.
        unsafe { slot.entry.get().write(entry) };
        slot.state
            .store(word(ticket.0, PUBLISHED), Ordering::Release);
    }

    /// Leaves the ticket's entry unfilled: skipped when writing, as the reference's UNKNOWN.
    pub fn abandon(&self, ticket: Ticket) {
        self.slot(ticket.0)
            .state
            .store(word(ticket.0, ABANDONED), Ordering::Release);
    }

    /// The tickets handed out and not yet consumed. Only one writer at a time may use a batch.
    pub fn pending(&self) -> Batch {
        Batch {
            from: self.low.load(Ordering::Acquire),
            to: self.next.load(Ordering::Acquire),
        }
    }

    /// Whether the batch holds an entry a write would write.
    pub fn has_published(&self, batch: Batch) -> bool {
        (batch.from..batch.to)
            .any(|t| self.slot(t).state.load(Ordering::Acquire) == word(t, PUBLISHED))
    }

    /// Calls `write` with each published entry of the batch in ticket order (stopping when it
    /// returns false) and marks them as being written. Entries still being filled are skipped.
    pub fn write_published(&self, batch: Batch, mut write: impl FnMut(&Entry) -> bool) {
        for t in batch.from..batch.to {
            let slot = self.slot(t);
            if slot.state.load(Ordering::Acquire) != word(t, PUBLISHED) {
                continue;
            }
            // SAFETY: published (acquire pairs with the filler's release): the filler is done
            // and nobody writes the entry until this writer consumes it.
            let entry = unsafe { &*slot.entry.get() };
            if !write(entry) {
                return;
            }
            slot.state.store(word(t, WRITING), Ordering::Relaxed);
        }
    }

    /// Ends a write. `in_place`: the file holding the marked entries is in place, so they (and
    /// the abandoned ones) are consumed and `low` moves over the consumed prefix. Otherwise they
    /// are published again, for a later write.
    pub fn end_write(&self, batch: Batch, in_place: bool) {
        for t in batch.from..batch.to {
            let state = &self.slot(t).state;
            let now = state.load(Ordering::Acquire);
            if now == word(t, WRITING) {
                let tag = if in_place { CONSUMED } else { PUBLISHED };
                state.store(word(t, tag), Ordering::Relaxed);
            } else if in_place && now == word(t, ABANDONED) {
                state.store(word(t, CONSUMED), Ordering::Relaxed);
            }
        }
        let mut low = batch.from;
        while low < batch.to && self.slot(low).state.load(Ordering::Relaxed) == word(low, CONSUMED)
        {
            low += 1;
        }
        // Release: a reservation that sees the new `low` sees the slots consumed.
        self.low.store(low, Ordering::Release);
    }

    /// Fork child: only the forking thread exists, so entries other threads had reserved will
    /// never be filled; they are abandoned rather than kept pending for ever.
    pub fn reset_in_child(&self) {
        let batch = self.pending();
        for t in batch.from..batch.to {
            let state = &self.slot(t).state;
            let now = state.load(Ordering::Acquire);
            if now >> 2 != t + 1 {
                state.store(word(t, ABANDONED), Ordering::Release);
            } else if now & 3 == WRITING {
                // A write in progress in another thread: it will never finish here.
                state.store(word(t, PUBLISHED), Ordering::Release);
            }
        }
    }
}

/// The entry's kind, or None for a kind no call records.
pub fn kind_of(e: &Entry) -> Option<Kind> {
    Kind::from_u8(e.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tid: i32) -> Entry {
        Entry {
            tid,
            ..Entry::default()
        }
    }

    fn written(b: &'static Buffer, in_place: bool) -> Vec<i32> {
        let batch = b.pending();
        let mut tids = Vec::new();
        b.write_published(batch, |e| {
            tids.push(e.tid);
            true
        });
        b.end_write(batch, in_place);
        tids
    }

    #[test]
    fn unfilled_entries_wait_for_the_next_write_and_capacity_counts_them() {
        static B: Buffer = Buffer::new();
        assert!(B.init(4));
        let a = B.reserve().unwrap();
        let slow = B.reserve().unwrap();
        let c = B.reserve().unwrap();
        let d = B.reserve().unwrap();
        assert!(B.reserve().is_none(), "full");
        B.fill(a, entry(1));
        B.fill(c, entry(3));
        B.abandon(d);
        // A refused file keeps everything.
        assert_eq!(written(&B, false), [1, 3]);
        assert_eq!(written(&B, true), [1, 3]);
        // Only the first slot is free: the second is still being filled.
        let e = B.reserve().unwrap();
        assert!(B.reserve().is_none());
        B.fill(slow, entry(2));
        B.fill(e, entry(5));
        assert_eq!(written(&B, true), [2, 5]);
        assert!(B.pending().is_empty());
        for tid in 6..10 {
            B.fill(B.reserve().unwrap(), entry(tid));
        }
        assert_eq!(written(&B, true), [6, 7, 8, 9]);
    }

    /// Pages of the slots `[first, first + count)` that are backed with memory.
    fn resident_pages(b: &Buffer, first: u64, count: u64) -> usize {
        let page = crate::platform::page_size();
        let start = b.slot(first) as *const Slot as usize;
        let len = count as usize * size_of::<Slot>();
        let mut vec = vec![0u8; len.div_ceil(page)];
        // SAFETY: a page-aligned range inside the buffer's mapping and a vector of one byte per
        // page.
        let rc = unsafe { libc::mincore(start as *mut libc::c_void, len, vec.as_mut_ptr()) };
        assert_eq!(rc, 0);
        vec.iter().filter(|&&v| v & 1 != 0).count()
    }

    #[test]
    fn the_ticket_opening_a_chunk_backs_the_next_one_with_memory() {
        static B: Buffer = Buffer::new();
        assert!(B.init(3 * POPULATE_SLOTS as usize));
        let pages =
            (POPULATE_SLOTS as usize * size_of::<Slot>()).div_ceil(crate::platform::page_size());
        assert_eq!(
            resident_pages(&B, 0, POPULATE_SLOTS),
            pages,
            "the first chunk at init"
        );
        assert_eq!(resident_pages(&B, POPULATE_SLOTS, POPULATE_SLOTS), 0);
        B.abandon(B.reserve().unwrap());
        assert_eq!(resident_pages(&B, POPULATE_SLOTS, POPULATE_SLOTS), pages);
        assert_eq!(resident_pages(&B, 2 * POPULATE_SLOTS, POPULATE_SLOTS), 0);
        for _ in 1..POPULATE_SLOTS + 1 {
            B.abandon(B.reserve().unwrap());
        }
        assert_eq!(
            resident_pages(&B, 2 * POPULATE_SLOTS, POPULATE_SLOTS),
            pages
        );
    }
}
