//! The queue behind free_track: freed blocks held back, each with its free-time frames, at most
//! `capacity` of them in all (docs/design.md, "The freed-block queue").
//!
//! # Model
//!
//! One bounded FIFO ring per *shard*, and a thread always pushes into the shard its thread
//! pointer hashes to. A program with one thread therefore sees exactly the reference's single
//! FIFO; with several threads each mostly keeps to its own ring, so a free neither writes a
//! cache line another thread writes (the single ring's shared index did, on every free) nor
//! hands the native allocator a block another thread allocated (glibc's arenas and Scudo's
//! per-thread caches both pay for that with a lock; on Android such a lock, held by a thread
//! parked by the backtrace signal, stalled unwinds).
//!
//! The bound is global: `held` counts entries in all rings (plus pushes between taking a
//! place and filling it). A push that finds the bound reached first takes the oldest entry of
//! its own ring out (that entry *leaves*: the caller checks and frees it), or, when its own ring
//! is empty, the oldest of another ring; only when no entry can be taken does the pushed block
//! leave at once. So the rings never hold more than `capacity` blocks together, whatever the
//! number of threads, and a thread that has exited leaves its entries to be taken by others or
//! checked at exit.
//!
//! Each ring is a bounded multi-producer multi-consumer queue in the manner of D. Vyukov's: a
//! sequence number per slot says whether the slot is free for the push at position `p` (`p`),
//! holds that push's entry (`p + 1`) or is being emptied. Both ends are claimed by CAS and
//! **nothing ever waits** (the signal-33 rule of docs/design.md): a push or pop that meets a slot
//! another thread has claimed but not finished — possibly a thread parked by bionic's backtrace
//! signal — gives up on that ring instead, and the caller's fallback (another ring, or the block
//! leaving at once) keeps the bound.

use core::cell::UnsafeCell;
use core::mem::{MaybeUninit, size_of};
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Most frames kept with an entry (the library's deepest backtrace).
pub const MAX_FRAMES: usize = crate::backtrace::MAX_FRAMES;

/// Upper bound on the rings' address space: shards are fewer when entries are many or their
/// frame rows long (free_track's maximum, 16384 entries of 256 frames, gets one ring of 32 MiB).
const MAX_RESERVED_BYTES: usize = 64 << 20;
/// Most shards: enough for the threads that free concurrently in typical programs; more threads
/// share rings (correct, only contended).
const MAX_SHARDS: usize = 8;
/// One push in this many of a ring at the bound looks for an idle ring to take its room from.
const STEAL_EVERY: usize = 16;

#[repr(C)]
struct Slot<T> {
    /// `p`: free for the push at position `p`; `p + 1`: holds that push's entry; anything else:
    /// a push or pop is in the middle of it.
    seq: AtomicUsize,
    entry: UnsafeCell<MaybeUninit<T>>,
    frame_count: UnsafeCell<usize>,
}

/// One ring's ends, each on its own cache line: the owner thread writes both, but a pop by
/// another thread (rare) should not slow the owner's pushes more than it must.
#[repr(C, align(64))]
struct Ends {
    head: AtomicUsize,
    _pad: [u8; 56],
    tail: AtomicUsize,
    _pad2: [u8; 56],
    /// `tail` as the last stealing look at this ring saw it: a ring whose tail has not moved
    /// between two looks belongs to no thread that is still freeing.
    seen_tail: AtomicUsize,
}

#[repr(align(64))]
struct Held(AtomicUsize);

pub struct FreeQueue<T> {
    /// `shards` rings of `ring` slots each, then `shards` × `ring` frame rows; set once by
    /// `init` before the library's state is published.
    slots: AtomicPtr<Slot<T>>,
    frames: AtomicPtr<usize>,
    ends: AtomicPtr<Ends>,
    frames_per_entry: AtomicUsize,
    /// Slots per ring: a power of two, at least `capacity`.
    ring: AtomicUsize,
    shards: AtomicUsize,
    /// The bound on entries held in all rings together; 0 until `init`.
    capacity: AtomicUsize,
    held: Held,
}

// SAFETY: a slot's entry and frame row are written only by the push or pop that owns the slot
// through its sequence number; readers without ownership copy them and discard the copy if the
// sequence moved.
unsafe impl<T: Copy + Send> Sync for FreeQueue<T> {}

impl<T: Copy> FreeQueue<T> {
    pub const fn new() -> Self {
        FreeQueue {
            slots: AtomicPtr::new(core::ptr::null_mut()),
            frames: AtomicPtr::new(core::ptr::null_mut()),
            ends: AtomicPtr::new(core::ptr::null_mut()),
            frames_per_entry: AtomicUsize::new(0),
            ring: AtomicUsize::new(0),
            shards: AtomicUsize::new(0),
            capacity: AtomicUsize::new(0),
            held: Held(AtomicUsize::new(0)),
        }
    }

    /// Maps the rings for at most `capacity` entries of up to `frames_per_entry` frames each.
    /// Only the slots and rows in use are ever touched.
    pub fn init(&self, capacity: usize, frames_per_entry: usize) -> bool {
        let capacity = capacity.max(1);
        let frames_per_entry = frames_per_entry.min(MAX_FRAMES);
        let ring = capacity.next_power_of_two();
        let per_ring = ring * (size_of::<Slot<T>>() + frames_per_entry * size_of::<usize>());
        let shards = (MAX_RESERVED_BYTES / per_ring).clamp(1, MAX_SHARDS);
        let ends_bytes = shards * size_of::<Ends>();
        let slot_bytes = shards * ring * size_of::<Slot<T>>();
        let Some(mem) =
            crate::pages::map_or_log(ends_bytes + shards * per_ring, "the free_track queue")
        else {
            return false;
        };
        let base = mem.as_ptr() as usize;
        // Zeroed memory is not yet a valid ring: slot i must start with sequence i.
        for s in 0..shards {
            for i in 0..ring {
                // SAFETY: slot (s, i) lies inside the fresh mapping, which nobody else sees yet.
                unsafe {
                    (*((base + ends_bytes) as *mut Slot<T>).add(s * ring + i))
                        .seq
                        .store(i, Ordering::Relaxed);
                }
            }
        }
        self.ends.store(base as *mut Ends, Ordering::Relaxed);
        self.slots
            .store((base + ends_bytes) as *mut Slot<T>, Ordering::Relaxed);
        self.frames.store(
            (base + ends_bytes + slot_bytes) as *mut usize,
            Ordering::Relaxed,
        );
        self.frames_per_entry
            .store(frames_per_entry, Ordering::Relaxed);
        self.ring.store(ring, Ordering::Relaxed);
        self.shards.store(shards, Ordering::Relaxed);
        self.capacity.store(capacity, Ordering::Release);
        true
    }

    pub fn is_mapped(&self) -> bool {
        self.capacity.load(Ordering::Acquire) != 0
    }

    fn ends(&self, shard: usize) -> &Ends {
        // SAFETY: shard < shards of the mapping made by `init` (callers' bound).
        unsafe { &*self.ends.load(Ordering::Relaxed).add(shard) }
    }

    fn slot(&self, shard: usize, position: usize) -> (&Slot<T>, usize) {
        let ring = self.ring.load(Ordering::Relaxed);
        let index = shard * ring + (position & (ring - 1));
        // SAFETY: index < shards × ring, inside the mapping made by `init`.
        (
            unsafe { &*self.slots.load(Ordering::Relaxed).add(index) },
            index,
        )
    }

    /// Frame row `index`.
    ///
    /// # Safety
    /// The caller owns the slot of the same index (its sequence claimed by the caller).
    #[allow(clippy::mut_from_ref)]
    unsafe fn row(&self, index: usize) -> &mut [usize] {
        let n = self.frames_per_entry.load(Ordering::Relaxed);
        // SAFETY: row `index` of `init`'s mapping; exclusive by the caller's ownership of the
        // slot.
        unsafe {
            core::slice::from_raw_parts_mut(self.frames.load(Ordering::Relaxed).add(index * n), n)
        }
    }

    /// Takes a place under the bound, if one is free.
    fn take_place(&self, capacity: usize) -> bool {
        // A load first: at the bound (the steady state) the counter's line stays shared.
        if self.held.0.load(Ordering::Relaxed) >= capacity {
            return false;
        }
        if self.held.0.fetch_add(1, Ordering::Relaxed) < capacity {
            return true;
        }
        self.held.0.fetch_sub(1, Ordering::Relaxed);
        false
    }

    /// Queues `entry` with its free-time `frames` (cut to the configured count). Every entry
    /// that must leave to keep the bound — the oldest of this thread's ring, another ring's
    /// oldest, or `entry` itself when no place can be made — is handed to `leave` with its
    /// frames, at most once per push. With no rings mapped (`init` failed) `entry` leaves.
    pub fn push(&self, entry: T, frames: &[usize], mut leave: impl FnMut(T, &[usize])) {
        let capacity = self.capacity.load(Ordering::Acquire);
        if capacity == 0 {
            return leave(entry, frames);
        }
        let shards = self.shards.load(Ordering::Relaxed);
        self.push_to(crate::platform::thread_shard(shards), entry, frames, leave)
    }

    /// `push` into the ring of shard `own`.
    fn push_to(&self, own: usize, entry: T, frames: &[usize], mut leave: impl FnMut(T, &[usize])) {
        let capacity = self.capacity.load(Ordering::Acquire);
        let shards = self.shards.load(Ordering::Relaxed);
        if !self.take_place(capacity) && !self.make_room(own, shards, &mut leave) {
            return leave(entry, frames);
        }
        if !self.enqueue(own, entry, frames) {
            self.held.0.fetch_sub(1, Ordering::Relaxed);
            leave(entry, frames);
        }
    }

    /// At the bound: one entry leaves, its place passing to the caller. Usually the own ring's
    /// oldest. Every `STEAL_EVERY`th push of a ring looks at the other rings instead, a
    /// different one first each time, and takes the oldest entry of one whose owner has stopped
    /// freeing (its tail has not moved since the previous look): so rings of threads that exited
    /// drain instead of holding their part of the bound until exit, while a thread never frees
    /// blocks that a busy thread queued — that would make it free into the other thread's size
    /// classes, and on Android wait for the allocator lock of a thread the backtrace signal has
    /// parked inside the allocator (docs/design.md, "The freed-block queue"). Only when the own
    /// ring has nothing to give does any ring give.
    fn make_room(&self, own: usize, shards: usize, leave: &mut impl FnMut(T, &[usize])) -> bool {
        let turn = self.ends(own).tail.load(Ordering::Relaxed);
        let cursor = turn / STEAL_EVERY;
        let others = (0..shards - 1).map(|k| (own + 1 + (cursor + k) % (shards - 1)) % shards);
        let mut frames = [MaybeUninit::<usize>::uninit(); MAX_FRAMES];
        let mut take = |shard: usize| self.dequeue(shard, &mut frames);
        let idle = |shard: usize| {
            let ends = self.ends(shard);
            let tail = ends.tail.load(Ordering::Relaxed);
            ends.head.load(Ordering::Relaxed) != tail
                && ends.seen_tail.swap(tail, Ordering::Relaxed) == tail
        };
        let mut found = None;
        if shards > 1 && turn.is_multiple_of(STEAL_EVERY) {
            found = others.clone().filter(|&s| idle(s)).find_map(&mut take);
        }
        let found = found
            .or_else(|| take(own))
            .or_else(|| others.clone().find_map(&mut take));
        let Some((entry, n)) = found else {
            return false;
        };
        // SAFETY: `dequeue` initialised the first `n` frames.
        let frames = unsafe { core::slice::from_raw_parts(frames.as_ptr().cast::<usize>(), n) };
        leave(entry, frames);
        true
    }

    /// Claims the slot at `end` (a ring's tail for a push, its head for a pop) once it is in
    /// the state the claim needs: its sequence `position + ready` (0: free for this position;
    /// 1: holding this position's entry). None when it is not and `end` has not moved: a push
    /// or pop in progress there, or nothing to take. The slot is the caller's until it stores
    /// the next sequence.
    fn claim(
        &self,
        shard: usize,
        end: &AtomicUsize,
        ready: usize,
    ) -> Option<(&Slot<T>, usize, usize)> {
        let mut position = end.load(Ordering::Relaxed);
        loop {
            let (slot, index) = self.slot(shard, position);
            if slot.seq.load(Ordering::Acquire) != position + ready {
                // Not ready, or `position` is stale (another thread moved `end` on, and it
                // only moves forward): look once more at the current end.
                let now = end.load(Ordering::Relaxed);
                if now == position {
                    return None;
                }
                position = now;
                continue;
            }
            match end.compare_exchange_weak(
                position,
                position + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some((slot, index, position)),
                Err(now) => position = now,
            }
        }
    }

    fn enqueue(&self, shard: usize, entry: T, frames: &[usize]) -> bool {
        let Some((slot, index, position)) = self.claim(shard, &self.ends(shard).tail, 0) else {
            return false;
        };
        // SAFETY: `claim` made this free slot ours until the sequence store below.
        unsafe {
            let row = self.row(index);
            let n = frames.len().min(row.len());
            row[..n].copy_from_slice(&frames[..n]);
            *slot.frame_count.get() = n;
            (*slot.entry.get()).write(entry);
        }
        slot.seq.store(position + 1, Ordering::Release);
        true
    }

    /// Takes the oldest entry of `shard`'s ring, copying its frames into `out`; None when the
    /// ring is empty or its oldest slot is not finished.
    fn dequeue(&self, shard: usize, out: &mut [MaybeUninit<usize>]) -> Option<(T, usize)> {
        let (slot, index, position) = self.claim(shard, &self.ends(shard).head, 1)?;
        // SAFETY: `claim` made this full slot ours until the sequence store below.
        let taken = unsafe {
            let row = self.row(index);
            let n = (*slot.frame_count.get()).min(row.len()).min(out.len());
            for (dst, &src) in out.iter_mut().zip(&row[..n]) {
                dst.write(src);
            }
            ((*slot.entry.get()).assume_init(), n)
        };
        // Free for the push that comes round to this slot next.
        slot.seq.store(
            position + self.ring.load(Ordering::Relaxed),
            Ordering::Release,
        );
        Some(taken)
    }

    /// Calls `f` on every queued entry and its frames, ring by ring, oldest first. Entries that
    /// pushes or pops are changing meanwhile are passed over (seen whole or not at all): a copy
    /// is kept only if the slot's sequence did not move.
    pub fn for_each(&self, mut f: impl FnMut(&T, &[usize])) {
        if !self.is_mapped() {
            return;
        }
        let mut frames = [0usize; MAX_FRAMES];
        for shard in 0..self.shards.load(Ordering::Relaxed) {
            let ends = self.ends(shard);
            let head = ends.head.load(Ordering::Acquire);
            let tail = ends.tail.load(Ordering::Acquire);
            for position in head..tail {
                let (slot, index) = self.slot(shard, position);
                if slot.seq.load(Ordering::Acquire) != position + 1 {
                    continue;
                }
                // SAFETY: volatile reads of memory inside the rings; a torn copy is detected by
                // the sequence check below and dropped.
                let (entry, n) = unsafe {
                    let n = core::ptr::read_volatile(slot.frame_count.get()).min(frames.len());
                    let row = self.row(index);
                    let n = n.min(row.len());
                    for (dst, src) in frames.iter_mut().zip(&row[..n]) {
                        *dst = core::ptr::read_volatile(src);
                    }
                    (core::ptr::read_volatile(slot.entry.get()), n)
                };
                core::sync::atomic::fence(Ordering::Acquire);
                if slot.seq.load(Ordering::Relaxed) == position + 1 {
                    // SAFETY: the sequence says the slot held a whole entry throughout the copy.
                    let entry = unsafe { entry.assume_init() };
                    f(&entry, &frames[..n]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
