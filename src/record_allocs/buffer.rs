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
//!
//! Memory: the slots live in chunks of `CHUNK_SLOTS`, each mapped the first time a ticket
//! reaches it (and the next one ahead of time), listed in a directory mapped at start-up.
//! Reserving all 8M slots at once took 512 MB of address space, which a process under
//! `ulimit -v` could not have: malloc debug refused to start. Chunks are never unmapped, so a
//! slot's address never changes; a reservation whose chunk cannot be mapped is refused, as one
//! past the ring's end is.

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

/// Slots per chunk: 256 KiB, mapped (and backed with memory) one `mmap` per 4,096 calls.
const CHUNK_SLOTS: u64 = 4096;

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
    /// The chunk directory: one pointer per `CHUNK_SLOTS` slots, null until mapped.
    chunks: AtomicPtr<AtomicPtr<Slot>>,
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
            chunks: AtomicPtr::new(core::ptr::null_mut()),
            capacity: AtomicU64::new(0),
            next: AtomicU64::new(0),
            low: AtomicU64::new(0),
        }
    }

    pub fn init(&'static self, capacity: usize) -> bool {
        if capacity == 0 {
            return false;
        }
        let chunks = (capacity as u64).div_ceil(CHUNK_SLOTS) as usize;
        let Some(p) = pages::map_or_log(
            chunks * size_of::<AtomicPtr<Slot>>(),
            "the record_allocs entries",
        ) else {
            return false;
        };
        self.chunks.store(p.as_ptr().cast(), Ordering::Release);
        self.capacity.store(capacity as u64, Ordering::Release);
        if self.chunk(0).is_none() {
            out_of_memory();
            self.release();
            return false;
        }
        true
    }

    fn directory(&self) -> &[AtomicPtr<Slot>] {
        let capacity = self.capacity.load(Ordering::Acquire);
        let chunks = capacity.div_ceil(CHUNK_SLOTS) as usize;
        let p = self.chunks.load(Ordering::Acquire);
        if p.is_null() {
            return &[];
        }
        // SAFETY: `init` mapped `chunks` zeroed pointers (null is a valid AtomicPtr) for the life
        // of the process, or until `release`, which runs before any ticket exists.
        unsafe { core::slice::from_raw_parts(p, chunks) }
    }

    /// Chunk `index`'s slots, mapped now if no ticket has reached it yet; None when the chunk
    /// cannot be mapped (out of memory or address space).
    fn chunk(&self, index: usize) -> Option<*mut Slot> {
        let entry = self.directory().get(index)?;
        let p = entry.load(Ordering::Acquire);
        if !p.is_null() {
            return Some(p);
        }
        Self::map_chunk(entry)
    }

    #[cold]
    #[inline(never)]
    fn map_chunk(entry: &AtomicPtr<Slot>) -> Option<*mut Slot> {
        let bytes = CHUNK_SLOTS as usize * size_of::<Slot>();
        // Backed with memory at once: every recording thread writes the slots front to back,
        // and each would otherwise fault on most pages (a third of a two-thread run in the
        // kernel, when a page fault per page was the rule).
        let fresh = pages::map_filled(bytes)?;
        match entry.compare_exchange(
            core::ptr::null_mut(),
            fresh.as_ptr().cast(),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Some(fresh.as_ptr().cast()),
            Err(won) => {
                // SAFETY: our own mapping, never published.
                unsafe { pages::unmap(fresh, bytes) };
                Some(won)
            }
        }
    }

    /// Undoes [`Buffer::init`] (a `debug_initialize` that gives up later; no call has
    /// recorded).
    pub fn release(&self) {
        let directory = self.directory();
        let bytes = CHUNK_SLOTS as usize * size_of::<Slot>();
        for entry in directory {
            let chunk = entry.swap(core::ptr::null_mut(), Ordering::AcqRel);
            if let Some(chunk) = core::ptr::NonNull::new(chunk.cast::<u8>()) {
                // SAFETY: a chunk `map_chunk` mapped, unused (no ticket was handed out).
                unsafe { pages::unmap(chunk, bytes) };
            }
        }
        let directory_bytes = core::mem::size_of_val(directory);
        self.capacity.store(0, Ordering::Release);
        let chunks = self.chunks.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if let Some(chunks) = core::ptr::NonNull::new(chunks.cast::<u8>()) {
            // SAFETY: `init`'s directory, no longer reachable.
            unsafe { pages::unmap(chunks, directory_bytes) };
        }
    }

    /// The slot of a ticket that was handed out (its chunk is mapped: `reserve` saw to it).
    #[inline]
    fn slot(&self, ticket: u64) -> &Slot {
        let capacity = self.capacity.load(Ordering::Relaxed);
        let index = ticket % capacity;
        // SAFETY: the directory `init` published before any ticket existed, with an entry for
        // every chunk of `capacity` slots (index < capacity).
        let entry = unsafe {
            &*self
                .chunks
                .load(Ordering::Relaxed)
                .add((index / CHUNK_SLOTS) as usize)
        };
        let chunk = entry.load(Ordering::Acquire);
        debug_assert!(!chunk.is_null(), "ticket {ticket} without its chunk");
        // SAFETY: a handed-out ticket's chunk was mapped before the ticket was (`reserve`) and
        // is never unmapped while tickets exist; the index is below CHUNK_SLOTS. Slots are only
        // accessed through their atomic word or, for the entry, by the ticket's owner / a writer
        // as the state word allows (module docs).
        unsafe { &*chunk.add((index % CHUNK_SLOTS) as usize) }
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
            // A ticket's chunk exists before the ticket does (`slot` relies on it). Tickets go
            // out in order, so only the first of a chunk's needs to see to it: the rest come
            // after it (the first pass maps every chunk; chunk 0 is mapped by `init`).
            let first_of_chunk = next.is_multiple_of(CHUNK_SLOTS);
            let chunk = if first_of_chunk {
                let chunk = ((next % capacity) / CHUNK_SLOTS) as usize;
                if self.chunk(chunk).is_none() {
                    out_of_memory();
                    return None;
                }
                chunk
            } else {
                0
            };
            // Acquire/release: a thread given a later ticket of the chunk sees it mapped.
            match self.next.compare_exchange_weak(
                next,
                next + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    if first_of_chunk {
                        // The next chunk, ahead of the tickets that will need it.
                        let _ = self.chunk(chunk + 1);
                    }
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

/// Says once that a chunk of entries could not be mapped; the calls that needed it are not
/// recorded, as when the ring is full.
#[cold]
fn out_of_memory() {
    static TOLD: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    if !TOLD.swap(true, Ordering::Relaxed) {
        crate::log::log_error!(
            "out of memory for the record_allocs entries ({} bytes)",
            CHUNK_SLOTS as usize * size_of::<Slot>()
        );
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

    /// Whether chunk `index` is mapped, and then how many of its pages are backed with memory.
    fn resident_pages(b: &Buffer, index: usize) -> Option<usize> {
        let chunk = b.directory()[index].load(Ordering::Acquire);
        if chunk.is_null() {
            return None;
        }
        let page = crate::platform::page_size();
        let len = CHUNK_SLOTS as usize * size_of::<Slot>();
        let mut vec = vec![0u8; len.div_ceil(page)];
        // SAFETY: a mapped chunk (page-aligned) and a vector of one byte per page.
        let rc = unsafe { libc::mincore(chunk.cast(), len, vec.as_mut_ptr()) };
        assert_eq!(rc, 0);
        Some(vec.iter().filter(|&&v| v & 1 != 0).count())
    }

    #[test]
    fn the_ticket_opening_a_chunk_maps_the_next_one_backed_with_memory() {
        static B: Buffer = Buffer::new();
        assert!(B.init(3 * CHUNK_SLOTS as usize));
        let pages =
            (CHUNK_SLOTS as usize * size_of::<Slot>()).div_ceil(crate::platform::page_size());
        assert_eq!(
            resident_pages(&B, 0),
            Some(pages),
            "the first chunk at init"
        );
        assert_eq!(resident_pages(&B, 1), None, "no ticket has reached it");
        B.abandon(B.reserve().unwrap());
        assert_eq!(resident_pages(&B, 1), Some(pages));
        assert_eq!(resident_pages(&B, 2), None);
        for _ in 1..CHUNK_SLOTS + 1 {
            B.abandon(B.reserve().unwrap());
        }
        assert_eq!(resident_pages(&B, 2), Some(pages));
    }

    #[test]
    fn a_ring_of_millions_of_entries_costs_only_its_directory_until_used() {
        static B: Buffer = Buffer::new();
        // The default count: 8M entries, 512 MB had they been mapped at once.
        assert!(B.init(8_000_000));
        let mapped = B
            .directory()
            .iter()
            .filter(|c| !c.load(Ordering::Relaxed).is_null())
            .count();
        assert_eq!(mapped, 1);
        assert_eq!(B.directory().len(), 1954);
    }
}
