//! Spare native blocks: blocks that free_track's queue has checked and let go, kept for the
//! next allocation of the same native size instead of going back to the native allocator
//! (docs/design.md, "Spare blocks").
//!
//! # Model
//!
//! Without free_track a program's free hands the native allocator a block that its next
//! allocation of that size takes straight back, inside the allocator's per-thread cache. With
//! free_track every free is delayed by up to N others, so the allocator's caches overflow and
//! run dry in turn and go to its shared size-class lists far more often — on Android, under
//! Scudo's size-class lock, which a thread parked by bionic's backtrace signal may be holding.
//! Spares restore the short loop: a block that leaves the queue waits here, and the next
//! request whose native size class is the same takes it back, and neither call reaches the
//! allocator.
//!
//! The structure is a set of buckets per shard of threads (the thread pointer hashed, as the
//! queue's rings are). A bucket holds the blocks of one native usable size, in up to `WAYS`
//! slots (four cache lines on 64-bit targets); a slot holds a block's address with the usable
//! size's low bits packed below the allocator's alignment, so a taker knows the exact usable
//! size without a native call. A bucket is used as a stack: a per-bucket hint says where its
//! top is, so a put or take usually touches one line of slots (`tops` below). Puts and takes
//! are one compare-and-swap on a slot: nothing
//! waits, so the signal-33 rule of docs/design.md holds. Each shard's bytes are bounded
//! (`SHARD_BYTES`): a block that finds its size's slots full is given back by the caller as
//! before, and one that finds the budget used up takes the place of older spares, which are
//! given back instead.
//!
//! Which bucket a request of `n` bytes takes from is the usable size the native allocator gave
//! the last request in `n`'s word-sized range: learned from the allocator itself (glibc, Scudo
//! and jemalloc all map a request to its size class by a rule that is constant over such a
//! range), and a take accepts up to about an eighth more (Scudo's usable size is the request
//! itself, so only that slack makes its blocks reusable for nearby requests). Blocks larger
//! than `MAX_USABLE` are not kept: a handful of them would fill a shard's budget, and programs
//! free them far less often than small ones.

use core::mem::size_of;
use core::sync::atomic::{AtomicU8, AtomicU16, AtomicUsize, Ordering};

/// Native blocks are aligned to at least two words (glibc, Scudo and jemalloc alike), so a
/// block address has this many low bits free for the usable size's remainder.
const GRANULE: usize = 2 * size_of::<usize>();
/// Largest usable size kept.
pub const MAX_USABLE: usize = 16 << 10;
const BUCKETS: usize = MAX_USABLE / GRANULE + 1;
/// Requests are classed per word: every allocator this library runs on gives the same usable
/// size to all requests in `((k - 1) * word, k * word]`.
const REQUEST_STEP: usize = size_of::<usize>();
const REQUEST_CLASSES: usize = MAX_USABLE / REQUEST_STEP + 1;
/// A take looks up to `1 + bucket / SLACK_DIVISOR` buckets above the request's class.
const SLACK_DIVISOR: usize = 8;
/// Slots per bucket.
const WAYS: usize = 32;
const SHARDS: usize = 8;
/// Most bytes of spares in one shard.
pub const SHARD_BYTES: usize = 512 << 10;

/// A block taken from the spares: its native start and native usable size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spare {
    pub orig: usize,
    pub usable: usize,
}

/// Why a take found nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    /// The request's size class is known; no spare of it was there.
    Empty,
    /// The request's size class is not known yet: the caller should `learn` it from the block
    /// the native allocator gives it.
    Unlearned,
    /// No spare is ever this large.
    TooLarge,
}

#[repr(C, align(64))]
struct Bucket([AtomicUsize; WAYS]);

#[repr(C, align(64))]
struct Shard {
    bytes: AtomicUsize,
    /// Where the next eviction starts looking (a hint: races only change which spare goes).
    cursor: AtomicUsize,
    /// Per bucket, a hint: one past its highest occupied slot. A bucket is used as a stack,
    /// so a put tries the slot at the hint and a take the one below it, one cache line each
    /// instead of a scan of the bucket's four; a take skips a bucket whose hint is 0 without
    /// loading its slots (most buckets of a request's slack are empty). Only the shard's own
    /// threads race on it; when a race leaves it wrong, a put or take that misses at the hint
    /// scans the whole bucket and sets it again, so the only cost of a stale hint is a spare
    /// unseen by takes (the hint 0 above it) until the next put of its size or an eviction.
    tops: [AtomicU8; BUCKETS],
    buckets: [Bucket; BUCKETS],
}

impl Shard {
    /// Takes slot `i` of bucket `b` if it holds a spare of at least `request` bytes.
    #[inline]
    fn take_slot(&self, b: usize, i: usize, request: usize) -> Option<Spare> {
        let slot = &self.buckets[b].0[i];
        let packed = slot.load(Ordering::Relaxed);
        if packed == 0 {
            return None;
        }
        let spare = unpack(b, packed);
        // Every block of a bucket has the same usable size with the allocators this library runs
        // on; a smaller one is left where it is rather than handed out short.
        if spare.usable < request
            || slot
                .compare_exchange(packed, 0, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return None;
        }
        self.bytes.fetch_sub(spare.usable, Ordering::Relaxed);
        Some(spare)
    }

    /// A whole bucket's slots, last first: puts fill the slot at the hint (or the lowest empty
    /// one), so this takes the block put most recently, still in the cache from its check (the
    /// native allocators' per-thread caches are last in, first out for the same reason). Sets
    /// the bucket's hint.
    #[cold]
    fn take_scanning(&self, b: usize, request: usize) -> Option<Spare> {
        let mut highest = None;
        for i in (0..WAYS).rev() {
            if self.buckets[b].0[i].load(Ordering::Relaxed) == 0 {
                continue;
            }
            let top = *highest.get_or_insert(i + 1);
            if let Some(spare) = self.take_slot(b, i, request) {
                self.tops[b].store(if top == i + 1 { i } else { top } as u8, Ordering::Relaxed);
                return Some(spare);
            }
        }
        self.tops[b].store(highest.unwrap_or(0) as u8, Ordering::Relaxed);
        None
    }
}

pub struct SpareBlocks {
    shards: [Shard; SHARDS],
    /// Per request class: the usable size's bucket + 1 (0: not learned).
    class_of_request: [AtomicU16; REQUEST_CLASSES],
}

impl SpareBlocks {
    pub const fn new() -> Self {
        SpareBlocks {
            shards: [const {
                Shard {
                    bytes: AtomicUsize::new(0),
                    cursor: AtomicUsize::new(0),
                    tops: [const { AtomicU8::new(0) }; BUCKETS],
                    buckets: [const { Bucket([const { AtomicUsize::new(0) }; WAYS]) }; BUCKETS],
                }
            }; SHARDS],
            class_of_request: [const { AtomicU16::new(0) }; REQUEST_CLASSES],
        }
    }

    /// Takes a spare for a native request of `request` bytes: its usable size at least the
    /// request and at most about an eighth (plus two granules) above what the allocator gives
    /// the request — the slack that makes Scudo's blocks, whose usable size is their request,
    /// reusable for nearby requests at all.
    #[inline]
    pub fn take(&self, request: usize) -> Result<Spare, Miss> {
        let Some(class) = self.class_of_request.get(request.div_ceil(REQUEST_STEP)) else {
            return Err(Miss::TooLarge);
        };
        let bucket = match class.load(Ordering::Relaxed) {
            0 => return Err(Miss::Unlearned),
            learned => usize::from(learned) - 1,
        };
        let shard = self.own_shard();
        let last = (bucket + 1 + bucket / SLACK_DIVISOR).min(BUCKETS - 1);
        // The top of each bucket first, then whole buckets: a bucket's top block may be a
        // little smaller than the request (Scudo's usable sizes are the requests, and a bucket
        // spans a granule of them), when the next bucket's top fits at once.
        for b in bucket..=last {
            let top = usize::from(shard.tops[b].load(Ordering::Relaxed));
            if top > 0
                && let Some(spare) = shard.take_slot(b, top - 1, request)
            {
                shard.tops[b].store(top as u8 - 1, Ordering::Relaxed);
                return Ok(spare);
            }
        }
        for b in bucket..=last {
            if shard.tops[b].load(Ordering::Relaxed) > 0
                && let Some(spare) = shard.take_scanning(b, request)
            {
                return Ok(spare);
            }
        }
        Err(Miss::Empty)
    }

    /// Keeps `orig`, a native block of `usable` bytes that nothing uses any more. Whatever is
    /// not kept goes to `give_back`, in one call: `orig` itself when it is too large; when
    /// `WAYS` of its size wait already, the newer half of them (so that the next puts of the
    /// size find room, and the caller's cost per give-back is shared by several); when the
    /// shard's budget is used up, older spares of other sizes, taken round-robin over the sizes
    /// until an eighth of the budget is free (so that sizes the program has stopped asking for
    /// do not hold it for ever).
    #[inline]
    pub fn put(&self, orig: usize, usable: usize, give_back: impl FnOnce(&[usize])) {
        let mut returned = Returned::new();
        self.keep(orig, usable, &mut returned);
        if returned.len > 0 {
            give_back(&returned.blocks[..returned.len]);
        }
    }

    #[inline]
    fn keep(&self, orig: usize, usable: usize, returned: &mut Returned) {
        let bucket = usable / GRANULE;
        if bucket >= BUCKETS || orig == 0 || !orig.is_multiple_of(GRANULE) {
            return returned.push(orig);
        }
        let shard = self.own_shard();
        let slots = &shard.buckets[bucket].0;
        let top = usize::from(shard.tops[bucket].load(Ordering::Relaxed));
        if top >= WAYS && slots.iter().all(|s| s.load(Ordering::Relaxed) != 0) {
            shard.tops[bucket].store(WAYS as u8 / 2, Ordering::Relaxed);
            for slot in &slots[WAYS / 2..] {
                let packed = slot.swap(0, Ordering::Acquire);
                if packed != 0 {
                    let spare = unpack(bucket, packed);
                    shard.bytes.fetch_sub(spare.usable, Ordering::Relaxed);
                    returned.push(spare.orig);
                }
            }
        }
        if shard.bytes.fetch_add(usable, Ordering::Relaxed) + usable > SHARD_BYTES {
            shard.bytes.fetch_sub(usable, Ordering::Relaxed);
            while returned.len < returned.blocks.len() - 1
                && shard.bytes.load(Ordering::Relaxed) + usable > SHARD_BYTES - SHARD_BYTES / 8
            {
                match self.evict(shard) {
                    Some(older) => returned.push(older),
                    None => break,
                }
            }
            if shard.bytes.fetch_add(usable, Ordering::Relaxed) + usable > SHARD_BYTES {
                shard.bytes.fetch_sub(usable, Ordering::Relaxed);
                return returned.push(orig);
            }
        }
        let packed = orig | (usable % GRANULE);
        let place = |i: usize| {
            slots[i].load(Ordering::Relaxed) == 0
                && slots[i]
                    .compare_exchange(0, packed, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
        };
        let top = usize::from(shard.tops[bucket].load(Ordering::Relaxed));
        let placed = if top < WAYS && place(top) {
            Some(top)
        } else {
            (0..WAYS).find(|&i| place(i))
        };
        if let Some(i) = placed {
            if i >= top {
                shard.tops[bucket].store(i as u8 + 1, Ordering::Relaxed);
            }
            return;
        }
        shard.bytes.fetch_sub(usable, Ordering::Relaxed);
        returned.push(orig);
    }

    /// Takes out one spare of the shard, from the first non-empty bucket at or after the
    /// shard's cursor, and moves the cursor past that bucket. None when the shard has none.
    #[cold]
    fn evict(&self, shard: &Shard) -> Option<usize> {
        let start = shard.cursor.load(Ordering::Relaxed);
        for k in 0..BUCKETS {
            let bucket = (start + k) % BUCKETS;
            for slot in &shard.buckets[bucket].0 {
                let packed = slot.load(Ordering::Relaxed);
                if packed != 0
                    && slot
                        .compare_exchange(packed, 0, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    let spare = unpack(bucket, packed);
                    shard.bytes.fetch_sub(spare.usable, Ordering::Relaxed);
                    shard.cursor.store(bucket + 1, Ordering::Relaxed);
                    return Some(spare.orig);
                }
            }
        }
        None
    }

    /// Records that the native allocator gave a request of `request` bytes a block of `usable`
    /// bytes.
    pub fn learn(&self, request: usize, usable: usize) {
        let bucket = usable / GRANULE;
        if usable < request || bucket >= BUCKETS {
            return;
        }
        if let Some(class) = self.class_of_request.get(request.div_ceil(REQUEST_STEP)) {
            class.store(bucket as u16 + 1, Ordering::Relaxed);
        }
    }

    /// Calls `f` for every spare of every shard (tests; the process quiescent).
    #[cfg(test)]
    pub fn for_each(&self, mut f: impl FnMut(Spare)) {
        for shard in &self.shards {
            for (bucket, slots) in shard.buckets.iter().enumerate() {
                for slot in &slots.0 {
                    let packed = slot.load(Ordering::Acquire);
                    if packed != 0 {
                        f(unpack(bucket, packed));
                    }
                }
            }
        }
    }

    fn own_shard(&self) -> &Shard {
        &self.shards[crate::platform::thread_shard(SHARDS)]
    }
}

/// The blocks one put gives back: half a bucket, the evictions that free an eighth of a budget,
/// the block itself.
struct Returned {
    blocks: [usize; WAYS / 2 + 16 + 1],
    len: usize,
}

impl Returned {
    fn new() -> Self {
        Returned {
            blocks: [0; WAYS / 2 + 16 + 1],
            len: 0,
        }
    }

    fn push(&mut self, block: usize) {
        self.blocks[self.len] = block;
        self.len += 1;
    }
}

fn unpack(bucket: usize, packed: usize) -> Spare {
    Spare {
        orig: packed & !(GRANULE - 1),
        usable: bucket * GRANULE + packed % GRANULE,
    }
}

#[cfg(test)]
mod tests;
