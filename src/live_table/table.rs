//! One table of a shard of the live-pointer table: fixed size, slots claimed and released by
//! compare-and-swap, frozen slot by slot when the shard grows (see the parent module's doc).

use super::{Info, SHARD_BITS, WAYS};
use crate::pages;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

const EMPTY: usize = 0;
const RESERVED: usize = 2;
pub(super) const FROZEN_FREE: usize = 4;
/// The low bits every mangled key has (pointers are 8-aligned).
const KEY_BITS: usize = 0b111;

pub(super) fn is_key(v: usize) -> bool {
    v & KEY_BITS == KEY_BITS
}

pub(super) fn is_frozen(v: usize) -> bool {
    v == FROZEN_FREE || v & KEY_BITS == 0b110
}

fn freeze(v: usize) -> usize {
    if is_key(v) { v & !1 } else { FROZEN_FREE }
}

#[repr(C)]
pub(super) struct Slot {
    pub(super) key: AtomicUsize,
    pub(super) info: AtomicU64,
}

#[repr(C, align(64))]
pub(super) struct Bucket {
    pub(super) slots: [Slot; WAYS],
}

/// One table of a shard: a header, `bucket_count` buckets, then `bucket_count` overflow counts,
/// in one mapping. Never changes size; growth makes a new one.
#[repr(C, align(64))]
pub(super) struct Table {
    pub(super) bucket_count: usize,
    /// 64 − log2(bucket_count): shifts a hash (shard bits removed) down to a bucket index.
    index_shift: u32,
}

fn mapping_bytes(buckets: usize) -> Option<usize> {
    buckets
        .checked_mul(size_of::<Bucket>() + size_of::<AtomicU32>())?
        .checked_add(size_of::<Table>())
}

/// Outcome of one attempt on one table.
pub(super) enum Attempt<T> {
    Done(T),
    /// A grower froze part of the table: wait for the new one and start again.
    Frozen,
}

impl Table {
    pub(super) fn map(bucket_count: usize) -> Option<NonNull<Table>> {
        // Growth fills the new table with the old one's entries straight away, spread over
        // all of it by the hash.
        let mem = pages::map_filled(mapping_bytes(bucket_count)?)?.cast::<Table>();
        // SAFETY: fresh zeroed mapping, large enough for the header; nobody else sees it yet.
        unsafe {
            mem.as_ptr().write(Table {
                bucket_count,
                index_shift: 64 - bucket_count.trailing_zeros(),
            })
        };
        Some(mem)
    }

    /// # Safety
    /// `t` must come from `Table::map` and not have been unmapped.
    pub(super) unsafe fn unmap(t: NonNull<Table>) {
        // SAFETY: forwarded; the size is the one it was mapped with.
        unsafe {
            let bytes = mapping_bytes(t.as_ref().bucket_count).unwrap_or(0);
            pages::unmap(t.cast(), bytes);
        }
    }

    pub(super) fn buckets(&self) -> &[Bucket] {
        // SAFETY: the buckets follow the header inside the mapping (`Table::map`); all their
        // fields are atomics, shared freely.
        unsafe {
            let first = (self as *const Table).add(1).cast::<Bucket>();
            core::slice::from_raw_parts(first, self.bucket_count)
        }
    }

    pub(super) fn overflow(&self) -> &[AtomicU32] {
        // SAFETY: the counts follow the buckets inside the mapping (64-byte buckets keep them
        // aligned); atomics.
        unsafe {
            let first = (self as *const Table)
                .add(1)
                .cast::<Bucket>()
                .add(self.bucket_count)
                .cast::<AtomicU32>();
            core::slice::from_raw_parts(first, self.bucket_count)
        }
    }

    /// The chunk's base bucket (the hash's bits below the shard's) plus the block's step in
    /// its chunk (the low bits): see `hash` in live_table.rs.
    pub(super) fn home(&self, h: u64) -> usize {
        let base = ((h << SHARD_BITS) >> self.index_shift) as usize;
        (base + (h & super::CHUNK_SLOT_MASK) as usize) & (self.bucket_count - 1)
    }

    pub(super) fn capacity(&self) -> usize {
        self.bucket_count * WAYS
    }

    /// The slot holding `key`, or None. A frozen copy of the key counts as found (its info is
    /// what the new table holds too); `Frozen` when the walk met a frozen slot without finding
    /// the key (it may have moved).
    ///
    /// Nearly every lookup finds its key, published, in its home bucket: that case is four
    /// compares inline, and everything else (frozen copies, overflow into later buckets,
    /// absent keys) takes the full walk out of line.
    #[inline(always)]
    pub(super) fn locate(&self, key: usize, h: u64) -> Attempt<Option<(usize, &Slot)>> {
        let home = self.home(h);
        // SAFETY: `home` < bucket_count (a hash shifted down to the table's index bits).
        let bucket = unsafe { &*self.first_bucket().add(home) };
        for slot in &bucket.slots {
            if slot.key.load(Ordering::Acquire) == key {
                return Attempt::Done(Some((home, slot)));
            }
        }
        self.locate_walk(key, h)
    }

    /// Where `h`'s home bucket is (for a prefetch: nothing is read).
    pub(super) fn bucket_address(&self, h: u64) -> usize {
        self.first_bucket().wrapping_add(self.home(h)) as usize
    }

    fn first_bucket(&self) -> *const Bucket {
        // The buckets follow the header inside the mapping (`Table::map`).
        (self as *const Table).wrapping_add(1).cast::<Bucket>()
    }

    #[inline(never)]
    fn locate_walk(&self, key: usize, h: u64) -> Attempt<Option<(usize, &Slot)>> {
        let buckets = self.buckets();
        let overflow = self.overflow();
        let mask = self.bucket_count - 1;
        let frozen_key = key & !1;
        let mut saw_frozen = false;
        let mut b = self.home(h);
        // Bounded by the table's size: a lookup of an absent key must end.
        for _ in 0..self.bucket_count {
            for slot in &buckets[b].slots {
                let k = slot.key.load(Ordering::Acquire);
                if k == key || k == frozen_key {
                    return Attempt::Done(Some((b, slot)));
                }
                saw_frozen |= is_frozen(k);
            }
            if overflow[b].load(Ordering::Acquire) == 0 {
                break;
            }
            b = (b + 1) & mask;
        }
        if saw_frozen {
            Attempt::Frozen
        } else {
            Attempt::Done(None)
        }
    }

    pub(super) fn get(&self, key: usize, h: u64) -> Attempt<Option<Info>> {
        match self.locate(key, h) {
            Attempt::Done(found) => Attempt::Done(
                found.map(|(_, slot)| Info::unpack(slot.info.load(Ordering::Acquire))),
            ),
            Attempt::Frozen => Attempt::Frozen,
        }
    }

    /// Claims a free slot from the home bucket on, fills it and publishes the key. The common
    /// case, an empty slot in the home bucket, is inline; a full home bucket (or a freeze:
    /// frozen slots are never `EMPTY`, so the claim below cannot take one) walks on out of line.
    #[inline(always)]
    pub(super) fn insert(&self, key: usize, h: u64, info: u64) -> Attempt<()> {
        // SAFETY: `home` < bucket_count, as in `locate`.
        let bucket = unsafe { &*self.first_bucket().add(self.home(h)) };
        for slot in &bucket.slots {
            if slot.key.load(Ordering::Relaxed) == EMPTY
                && slot
                    .key
                    .compare_exchange(EMPTY, RESERVED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return Self::publish(slot, key, info);
            }
        }
        self.insert_walk(key, h, info)
    }

    /// Fills a claimed slot and publishes the key.
    #[inline(always)]
    fn publish(slot: &Slot, key: usize, info: u64) -> Attempt<()> {
        slot.info.store(info, Ordering::Relaxed);
        // Release: whoever finds the key finds the info. Fails only if a grower froze
        // the reservation meanwhile; the entry then goes into the new table.
        match slot
            .key
            .compare_exchange(RESERVED, key, Ordering::SeqCst, Ordering::Relaxed)
        {
            Ok(_) => Attempt::Done(()),
            Err(_) => Attempt::Frozen,
        }
    }

    #[inline(never)]
    fn insert_walk(&self, key: usize, h: u64, info: u64) -> Attempt<()> {
        let buckets = self.buckets();
        let overflow = self.overflow();
        let mask = self.bucket_count - 1;
        let mut b = self.home(h);
        for _ in 0..self.bucket_count {
            for slot in &buckets[b].slots {
                let k = slot.key.load(Ordering::Relaxed);
                if is_frozen(k) {
                    return Attempt::Frozen;
                }
                if k != EMPTY
                    || slot
                        .key
                        .compare_exchange(EMPTY, RESERVED, Ordering::Acquire, Ordering::Relaxed)
                        .is_err()
                {
                    continue;
                }
                return Self::publish(slot, key, info);
            }
            // Counted before the entry can be published further on: a lookup that can see the
            // entry sees the count.
            overflow[b].fetch_add(1, Ordering::Release);
            b = (b + 1) & mask;
        }
        // Completely full (only possible while growth is held off): treated as a freeze, the
        // caller grows and retries.
        Attempt::Frozen
    }

    pub(super) fn remove(&self, key: usize, h: u64) -> Attempt<Option<Info>> {
        let Attempt::Done(found) = self.locate(key, h) else {
            return Attempt::Frozen;
        };
        let Some((at, slot)) = found else {
            return Attempt::Done(None);
        };
        let info = Info::unpack(slot.info.load(Ordering::Acquire));
        if slot
            .key
            .compare_exchange(key, EMPTY, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            // Frozen under us (or found as a frozen copy).
            return Attempt::Frozen;
        }
        let overflow = self.overflow();
        let mask = self.bucket_count - 1;
        let mut b = self.home(h);
        while b != at {
            overflow[b].fetch_sub(1, Ordering::Relaxed);
            b = (b + 1) & mask;
        }
        Attempt::Done(Some(info))
    }

    /// Replaces the info of `key`'s entry (the caller owns the entry).
    pub(super) fn set_info(&self, key: usize, h: u64, info: u64) -> Attempt<bool> {
        match self.locate(key, h) {
            Attempt::Done(Some((_, slot))) => {
                slot.info.store(info, Ordering::Release);
                // A freeze may have copied the old info meanwhile: then do it again there.
                if slot.key.load(Ordering::SeqCst) == key {
                    Attempt::Done(true)
                } else {
                    Attempt::Frozen
                }
            }
            Attempt::Done(None) => Attempt::Done(false),
            Attempt::Frozen => Attempt::Frozen,
        }
    }

    /// Every published entry as (mangled key, packed info).
    pub(super) fn for_each(&self, mut f: impl FnMut(usize, u64)) {
        for bucket in self.buckets() {
            for slot in &bucket.slots {
                let k = slot.key.load(Ordering::Acquire);
                if is_key(k) {
                    f(k, slot.info.load(Ordering::Acquire));
                }
            }
        }
    }

    /// Growth, step one: makes every slot frozen, so that no hot-path CAS on this table can
    /// succeed any more.
    pub(super) fn freeze_all(&self) {
        for bucket in self.buckets() {
            for slot in &bucket.slots {
                let mut v = slot.key.load(Ordering::Relaxed);
                while !is_frozen(v) {
                    match slot.key.compare_exchange_weak(
                        v,
                        freeze(v),
                        Ordering::SeqCst,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break,
                        Err(now) => v = now,
                    }
                }
            }
        }
    }

    /// Growth, step two: the frozen entries, as (mangled key, packed info).
    pub(super) fn for_each_frozen(&self, mut f: impl FnMut(usize, u64)) {
        for bucket in self.buckets() {
            for slot in &bucket.slots {
                let k = slot.key.load(Ordering::Acquire);
                if k != FROZEN_FREE {
                    f(k | 1, slot.info.load(Ordering::Acquire));
                }
            }
        }
    }
}
