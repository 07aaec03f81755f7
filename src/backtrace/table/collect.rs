//! Collections of unused backtrace records (see table.rs), done a bounded step at a time.
//!
//! ## Model
//!
//! A record is in use while an entry of the live table names its id. A collection marks every
//! id the live table holds, then frees, shard by shard, the records it did not mark. It is
//! *incremental*: each step marks the ids of a few live-table shards (about `STEP_ENTRIES`
//! entries) or sweeps one record shard, and the allocating threads take the steps in turn
//! (`collect_step`, called while `collection_wanted` says so; a thread that finds another one
//! at a step goes on without waiting). So no allocating thread is held for more than one step,
//! whatever the size of the heap: a whole collection at once held every thread for 16–20 ms
//! at a million live blocks (docs/performance.md).
//!
//! Marks are the collection's number (`epoch`, odd while a collection runs, even between
//! them), so a record is in use for this collection exactly when its mark equals the epoch;
//! nothing has to be cleared afterwards.
//!
//! Entries come and go while a collection runs, and the hot path takes no lock, so a thread
//! may store an id in the live table after the collection passed that entry's shard. The rule
//! that keeps such ids alive is the caller's (`tracking::publish`, docs/design.md): a thread
//! reads `epoch` before it finds its id and again after storing the entry; if they differ or a
//! collection is running, it calls `keep`, which marks the record for the running collection
//! (or says that it is gone: the thread then interns its frames again). An entry stored before
//! a collection starts is seen by that collection's pass over its shard.
//!
//! Pins (snapshots of the live table, which hold ids of blocks that may be freed meanwhile):
//! while any is held, nothing is freed. A sweep checks the pin count under its shard's lock and
//! abandons the collection when it is not zero; `pin` raises the count and then takes and
//! releases every shard lock, so a sweep that missed the pin has finished before it returns.
//!
//! Lock order: a live-table shard's lock, then record shard locks (marking holds the first
//! while it marks under the others); sweeping and `keep` hold one record shard lock and
//! nothing else; the collector's own lock is only ever tried, never waited for, except by
//! `collect_all` (tests, and nowhere on an allocation path).

use super::{BacktraceTable, FIRST_ID, SHARDS, Shard, shard_of_id};
use crate::mutex::MutexGuard;
use core::sync::atomic::{AtomicU64, Ordering, fence};

/// No collection below this many records: small tables are not worth a pass over the live
/// table.
pub(super) const MIN_COLLECT_AT: usize = 4096;
/// A collection visits every entry of the live table, so the next one waits for at least one
/// new record per this many entries it visited: the work of collecting stays proportional to
/// the records made, whatever the size of the heap (without it, a million live blocks and a
/// stream of new call paths cost a 1M-entry pass every 4096 records: about 4 µs per allocation in
/// benches/pauses.c). The dead records this lets wait (a record and its two index slots, about
/// 220 bytes with 12 frames) cost about 15 bytes per live entry.
pub(super) const ENTRIES_SCANNED_PER_RECORD: usize = 16;
/// Slots of the cache of ids a marking step marked lately (ids are never 0, the empty slot).
const RECENTLY_MARKED: usize = 256;
/// Live-table entries a marking step visits before it stops (whole shards, at least one):
/// about 0.3 ms.
pub(super) const STEP_ENTRIES: usize = 16 * 1024;

/// What a collection needs of the table that holds the ids in use: its shards, each passed
/// over on its own.
pub trait LiveIds {
    fn shards(&self) -> usize;
    /// Calls `f` with the backtrace id of every entry of shard `k`, holding what keeps that
    /// shard's storage in place (entries added or removed meanwhile may or may not be seen);
    /// returns the number of entries visited.
    fn for_each_id(&self, k: usize, f: &mut dyn FnMut(u32)) -> usize;
    /// What visiting one entry of shard `k` costs, in table entries (a step stops after about
    /// `STEP_ENTRIES` of them): more where ids are read through the kernel.
    fn cost_per_entry(&self, _k: usize) -> usize {
        1
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Idle,
    /// Marking the live table's shard `next` onwards.
    Marking,
    /// Sweeping record shard `next` onwards.
    Sweeping,
}

/// The running collection (under `BacktraceTable::collector`).
pub(super) struct Collection {
    phase: Phase,
    next: usize,
    /// Live-table entries visited so far.
    scanned: usize,
}

impl Collection {
    pub(super) const fn new() -> Self {
        Collection {
            phase: Phase::Idle,
            next: 0,
            scanned: 0,
        }
    }
}

impl Shard {
    /// Frees every record not marked for collection `epoch`; returns how many it freed.
    /// `version` is odd meanwhile (readers without the lock check it).
    fn sweep(&mut self, version: &AtomicU64, epoch: u32) -> usize {
        let v = version.load(Ordering::Relaxed);
        version.store(v + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let mut freed = 0;
        let mut i = 0;
        while i < self.by_id.cap {
            let r = self.by_id.slots()[i].rec.load(Ordering::Relaxed);
            // SAFETY: index members are live records, under the shard lock.
            if r.is_null() || unsafe { (*r).mark } == epoch {
                i += 1;
                continue;
            }
            // SAFETY: as above.
            let hash = unsafe { (*r).hash };
            self.by_frames.remove(hash, r);
            self.by_id.remove_at(i);
            self.free_record(r);
            self.live -= 1;
            freed += 1;
            // Slot i may now hold a later member of its run: look at it again. (A survivor
            // from the start of the array may be seen twice: harmless.)
        }
        version.store(v + 2, Ordering::Release);
        freed
    }
}

impl BacktraceTable {
    /// The collection number: odd while a collection runs, and it changes with every
    /// collection's start and end (see the module doc for how callers use it).
    #[inline]
    pub fn epoch(&self) -> u32 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// True once enough records were made since the last collection, and while one runs (a
    /// relaxed load of a line that is written about once per new record).
    #[inline]
    pub fn collection_wanted(&self) -> bool {
        self.collection_wanted.load(Ordering::Relaxed)
    }

    /// Whether `id` still names a record; if so and a collection is running, marks it in use
    /// for that collection. For a thread that stored `id` in the live table while a collection
    /// may have passed over that entry (see the module doc).
    pub fn keep(&self, id: u32) -> bool {
        let Some(s) = shard_of_id(id) else {
            return false;
        };
        let _slow = crate::sync::DisabledScope::enter();
        let shard = self.shards[s].lock();
        let Some(r) = shard.find_id(id) else {
            return false;
        };
        // Under the lock: the sweep of this shard has either finished (and kept the record,
        // found above) or not started, and will see the mark.
        let epoch = self.epoch.load(Ordering::SeqCst);
        if epoch & 1 != 0 {
            // SAFETY: live record, under its shard's lock.
            unsafe { (*r).mark = epoch };
        }
        true
    }

    /// One step of the collection that is due or running; does nothing when another thread
    /// is taking one (never waits for the collector). Call while `collection_wanted`.
    pub fn collect_step(&self, live: &dyn LiveIds) {
        let _slow = crate::sync::DisabledScope::enter();
        if let Some(mut c) = self.collector.try_lock() {
            self.step(&mut c, live);
        }
    }

    /// Runs a whole collection (the rest of a running one, or a new one) to its end.
    #[cfg(test)]
    pub fn collect_all(&self, live: &dyn LiveIds) {
        let _slow = crate::sync::DisabledScope::enter();
        let mut c = self.collector.lock();
        if c.phase == Phase::Idle {
            self.step(&mut c, live);
        }
        while c.phase != Phase::Idle {
            self.step(&mut c, live);
        }
    }

    fn step(&self, c: &mut MutexGuard<'_, Collection>, live: &dyn LiveIds) {
        match c.phase {
            Phase::Idle => {
                if self.pins.load(Ordering::SeqCst) != 0 {
                    self.set_next_collection(self.records().saturating_mul(2));
                    return;
                }
                // SeqCst, as the publishing threads' loads: a thread that reads the old even
                // epoch after storing its entry stored it before this pass began.
                self.epoch.fetch_add(1, Ordering::SeqCst);
                self.collection_wanted.store(true, Ordering::Relaxed);
                c.phase = Phase::Marking;
                c.next = 0;
                c.scanned = 0;
                self.mark_step(c, live);
            }
            Phase::Marking => self.mark_step(c, live),
            Phase::Sweeping => self.sweep_step(c),
        }
    }

    /// Marks the ids of live-table shards from `c.next` on, about STEP_ENTRIES entries.
    fn mark_step(&self, c: &mut Collection, live: &dyn LiveIds) {
        let epoch = self.epoch.load(Ordering::Relaxed);
        let mut visited = 0;
        while c.next < live.shards() {
            // The store's shard locks are taken inside the pass, after the live-table shard's own
            // (the order every whole-table pass keeps), and only if the shard has an id.
            let mut shards: Option<[MutexGuard<'_, Shard>; SHARDS]> = None;
            // Ids marked lately, by their low bits: most live blocks come from a few hot call
            // paths, and a repeat then costs a compare instead of an index lookup in a cold
            // record table. Marking twice is harmless, so a collision only costs the lookup.
            let mut recent = [0u32; RECENTLY_MARKED];
            let n = live.for_each_id(c.next, &mut |id| {
                if id < FIRST_ID {
                    return;
                }
                let seen = &mut recent[id as usize % RECENTLY_MARKED];
                if *seen == id {
                    return;
                }
                *seen = id;
                let Some(s) = shard_of_id(id) else { return };
                let shards =
                    shards.get_or_insert_with(|| core::array::from_fn(|i| self.shards[i].lock()));
                if let Some(r) = shards[s].find_id(id) {
                    // SAFETY: live record, under its shard's lock.
                    unsafe { (*r).mark = epoch };
                }
            });
            drop(shards);
            let cost = n.max(1) * live.cost_per_entry(c.next);
            visited += cost;
            c.scanned += n;
            c.next += 1;
            // The next shard is likely about as large as this one (the presence map's parts
            // are even): a step that would go past its budget with it stops before it, so a
            // step is one part of a large map, not two (benches/pauses.c: pairs of about 1 ms
            // at a million live blocks, where parts fell just under the budget).
            if visited + cost > STEP_ENTRIES {
                break;
            }
        }
        if c.next >= live.shards() {
            c.phase = Phase::Sweeping;
            c.next = 0;
        }
    }

    /// Sweeps record shard `c.next`; after the last one, ends the collection. Abandons it
    /// instead when a snapshot holds a pin.
    fn sweep_step(&self, c: &mut Collection) {
        let epoch = self.epoch.load(Ordering::Relaxed);
        let freed = {
            let mut shard = self.shards[c.next].lock();
            // Under the shard lock: see `pin`.
            if self.pins.load(Ordering::SeqCst) != 0 {
                drop(shard);
                self.end(c, self.records().saturating_mul(2));
                return;
            }
            shard.sweep(&self.published[c.next].version, epoch)
        };
        let records = self.records.fetch_sub(freed, Ordering::Relaxed) - freed;
        c.next += 1;
        if c.next == SHARDS {
            let next_at = records
                .saturating_mul(2)
                .max(records.saturating_add(c.scanned / ENTRIES_SCANNED_PER_RECORD));
            self.end(c, next_at);
        }
    }

    /// Ends (or abandons) the running collection; the next is due past `next_at` records.
    fn end(&self, c: &mut Collection, next_at: usize) {
        c.phase = Phase::Idle;
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.set_next_collection(next_at);
    }

    fn set_next_collection(&self, records: usize) {
        self.collect_at
            .store(records.max(MIN_COLLECT_AT), Ordering::Relaxed);
        self.collection_wanted.store(false, Ordering::Relaxed);
    }

    /// Keeps every record alive until the matching `unpin` (snapshots of the live table).
    pub fn pin(&self) {
        self.pins.fetch_add(1, Ordering::SeqCst);
        // A sweep that read the count before the increment holds its shard's lock until it is
        // done; every later sweep sees the pin.
        let _slow = crate::sync::DisabledScope::enter();
        for s in &self.shards {
            drop(s.lock());
        }
    }

    pub fn unpin(&self) {
        // Saturating: a pin taken before a fork is not counted in the child (reset_in_child).
        let _ = self
            .pins
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    /// Fork child: the other threads, their pins and any step in progress are gone (no step
    /// runs at a fork: the call gate is closed). A running collection is abandoned.
    pub fn reset_in_child(&self) {
        self.pins.store(0, Ordering::SeqCst);
        self.collector.force_unlock();
        let mut c = self.collector.lock();
        if c.phase != Phase::Idle {
            self.end(&mut c, self.records().saturating_mul(2));
        }
    }
}
