//! Deduplicated backtrace records (docs/spec/allocation.md#allocation-backtraces): one record per
//! distinct frame vector, shared by every allocation with that vector, identified by an id that is
//! never reused.
//!
//! Records carry no reference count. Counting cost every allocation and every free a lock and a
//! write to a record that all threads allocating from the same place share (10–15% of a
//! `backtrace` run, more on two threads). Instead the records nobody refers to are collected
//! in batches, a step at a time (collect.rs): once the table holds twice as many records as
//! survived the last collection (and at least one new record per `ENTRIES_SCANNED_PER_RECORD`
//! entries that collection visited), the allocating threads mark every id the live table holds
//! and free the rest.
//!
//! Finding an existing vector takes no lock (`find_published`): a seqlock read against the
//! shard's version, which a sweep makes odd while it frees records. A read that a sweep got in
//! the way of falls back to the shard's lock. Every lock of the table is held marked and with
//! bionic's backtrace signal blocked (`sync::DisabledScope`), so the hot path, which finds
//! existing vectors without it, never waits for a parked thread.
//!
//! The table is split into shards by the hash of the frame vector; each shard has its own lock,
//! its own records and its own two indexes (index.rs: frames → record, id → record). An id
//! names its shard (`id = 2 + seq * SHARDS + shard`), so a lookup by id touches one shard and
//! one lock only. All memory comes from mmap (records in size classes with free lists, indexes
//! as open-addressing tables that double when half full) and is bounded by `MAX_BYTES`.

mod collect;
mod index;

pub use collect::LiveIds;

use crate::mutex::Mutex;
use collect::{Collection, MIN_COLLECT_AT};
use core::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};

const SHARDS: usize = 16;
/// Upper bound on the memory the whole table may map.
const MAX_BYTES: usize = if cfg!(target_pointer_width = "64") {
    1 << 30
} else {
    128 << 20
};
const CHUNK: usize = 256 * 1024;
/// Frame-count capacities of the record size classes.
const CLASSES: [usize; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
/// A record: read without a lock by `BacktraceTable::find_published` (id, len and frames, hence
/// atomics), everything else under its shard's lock.
#[repr(C)]
struct Stored {
    id: AtomicU32,
    len: AtomicU32,
    /// The last collection that found the record in use (collect.rs).
    mark: u32,
    hash: u64,
    /// Free-list link while free.
    next_free: *mut Stored,
    // followed by `capacity` frames (AtomicUsize)
}

const HEADER: usize = core::mem::size_of::<Stored>();

impl Stored {
    fn frames_ptr(this: *mut Stored) -> *mut AtomicUsize {
        // SAFETY: the frames follow the header inside the same slot.
        unsafe { this.cast::<u8>().add(HEADER).cast() }
    }

    /// # Safety
    /// `this` must be a live record and the caller must hold its shard's lock (frames are only
    /// written under it).
    unsafe fn frames<'a>(this: *mut Stored) -> &'a [usize] {
        // SAFETY: a live record has `len` initialised frames; AtomicUsize has usize's layout,
        // and no store can race with this view under the lock.
        unsafe {
            let len = (*this).len.load(Ordering::Relaxed) as usize;
            core::slice::from_raw_parts(Self::frames_ptr(this).cast::<usize>(), len)
        }
    }

    /// Whether the record holds `frames`, read without the lock: the answer is only to be
    /// trusted if the shard's version did not change meanwhile.
    ///
    /// # Safety
    /// `this` must be a record slot (live or free: slots are never unmapped) of a size class
    /// whose every record had at most as many frames as the class holds.
    unsafe fn holds(this: *mut Stored, frames: &[usize]) -> bool {
        // SAFETY: any len ever stored in this slot fits its class, so once it equals
        // frames.len() the reads below stay inside the slot.
        unsafe {
            if (*this).len.load(Ordering::Relaxed) as usize != frames.len() {
                return false;
            }
            let stored = Self::frames_ptr(this);
            frames
                .iter()
                .enumerate()
                .all(|(i, &f)| (*stored.add(i)).load(Ordering::Relaxed) == f)
        }
    }
}

use index::{Index, hash_frames, map_counted, probe, slots_of};

struct Shard {
    by_frames: Index,
    by_id: Index,
    free: [*mut Stored; CLASSES.len()],
    bump: *mut u8,
    bump_left: usize,
    next_seq: u32,
    live: usize,
}

// SAFETY: the raw pointers are owned by the shard and only used under its mutex.
unsafe impl Send for Shard {}

impl Shard {
    const fn new() -> Self {
        Shard {
            by_frames: Index::new(true),
            by_id: Index::new(false),
            free: [core::ptr::null_mut(); CLASSES.len()],
            bump: core::ptr::null_mut(),
            bump_left: 0,
            next_seq: 0,
            live: 0,
        }
    }

    fn class_of(len: usize) -> Option<usize> {
        CLASSES.iter().position(|&c| c >= len)
    }

    fn alloc(&mut self, class: usize) -> Option<*mut Stored> {
        let head = self.free[class];
        if !head.is_null() {
            // SAFETY: free-list members are slots of this class owned by this shard.
            self.free[class] = unsafe { (*head).next_free };
            return Some(head);
        }
        let size = HEADER + CLASSES[class] * core::mem::size_of::<usize>();
        if self.bump_left < size {
            // The tail of the old chunk is abandoned (at most one slot's worth).
            let p = map_counted(CHUNK)?;
            self.bump = p.as_ptr();
            self.bump_left = CHUNK;
        }
        let r = self.bump.cast::<Stored>();
        // SAFETY: `size` bytes remain in the current chunk.
        self.bump = unsafe { self.bump.add(size) };
        self.bump_left -= size;
        Some(r)
    }

    fn free_record(&mut self, r: *mut Stored) {
        // SAFETY: r is a live record of this shard, about to become free.
        unsafe {
            if let Some(class) = Self::class_of((*r).len.load(Ordering::Relaxed) as usize) {
                (*r).next_free = self.free[class];
                self.free[class] = r;
            }
        }
    }

    fn find_id(&self, id: u32) -> Option<*mut Stored> {
        // SAFETY: index members are live records.
        self.by_id.find(id as u64, |r| unsafe {
            (*r).id.load(Ordering::Relaxed) == id
        })
    }
}

/// What readers without the lock see of a shard.
#[repr(align(64))]
struct Published {
    /// The frames index's current mapping (see `slots_of`).
    frames_map: AtomicPtr<usize>,
    /// Odd while a collection frees records of the shard; changes with every collection.
    version: AtomicU64,
}

pub struct BacktraceTable {
    shards: [Mutex<Shard>; SHARDS],
    published: [Published; SHARDS],
    /// Records in all shards (written when one is made or collected).
    records: AtomicUsize,
    /// A collection is due once `records` passes this.
    collect_at: AtomicUsize,
    /// Set once `records` passes `collect_at`, until the collection it calls for has ended.
    collection_wanted: AtomicBool,
    /// Odd while a collection runs (collect.rs).
    epoch: AtomicU32,
    /// Snapshots that keep every record alive.
    pins: AtomicUsize,
    /// The running collection; only tried on allocation paths.
    collector: Mutex<Collection>,
}

/// Ids 0 and 1 are the "capture off" and "nothing recorded" slot values.
const FIRST_ID: u32 = 2;

fn shard_of_id(id: u32) -> Option<usize> {
    id.checked_sub(FIRST_ID).map(|x| x as usize % SHARDS)
}

impl Default for BacktraceTable {
    fn default() -> Self {
        Self::new()
    }
}

impl BacktraceTable {
    pub const fn new() -> Self {
        BacktraceTable {
            shards: [const { Mutex::new(Shard::new()) }; SHARDS],
            published: [const {
                Published {
                    frames_map: AtomicPtr::new(core::ptr::null_mut()),
                    version: AtomicU64::new(0),
                }
            }; SHARDS],
            records: AtomicUsize::new(0),
            collect_at: AtomicUsize::new(MIN_COLLECT_AT),
            collection_wanted: AtomicBool::new(false),
            epoch: AtomicU32::new(0),
            pins: AtomicUsize::new(0),
            collector: Mutex::new(Collection::new()),
        }
    }

    /// The hash `intern` files a frame vector under (computed apart so that callers can do it
    /// before taking their own locks).
    pub fn hash(frames: &[usize]) -> u64 {
        hash_frames(frames)
    }

    /// The id of this frame vector, or None when out of memory or ids. The id stays valid as
    /// long as collections find it in use: the caller stores it in the live table and follows
    /// the rule of collect.rs for ids stored while a collection runs.
    #[cfg(test)]
    pub fn intern(&self, frames: &[usize]) -> Option<u32> {
        self.intern_hashed(frames, hash_frames(frames))
    }

    /// `intern` with the frames' `hash` from `BacktraceTable::hash`.
    pub fn intern_hashed(&self, frames: &[usize], hash: u64) -> Option<u32> {
        let class = Shard::class_of(frames.len())?;
        if frames.is_empty() {
            return None;
        }
        let s = (hash >> 60) as usize % SHARDS;
        if let Some(id) = self.find_published(s, hash, frames) {
            return Some(id);
        }
        // A new vector (rare once a program runs): its lock is held marked and with the
        // backtrace signal blocked, so threads that wait for it never wait for a parked thread.
        let _slow = crate::sync::DisabledScope::enter();
        let mut shard = self.shards[s].lock();
        if let Some(r) = shard.by_frames.find(hash, |r| {
            // SAFETY: the index holds only live records, and the shard lock held here keeps
            // them from being collected while their frames are compared.
            unsafe { Stored::frames(r) == frames }
        }) {
            // SAFETY: live record, under the shard lock.
            return Some(unsafe { (*r).id.load(Ordering::Relaxed) });
        }
        let seq = shard.next_seq;
        let id = (seq as u64 * SHARDS as u64 + s as u64 + FIRST_ID as u64)
            .try_into()
            .ok()?;
        let r = shard.alloc(class)?;
        // A reader without the lock may still be comparing this slot's old contents (it was
        // freed by a collection): the fence orders that collection's version change before
        // the stores below, so a reader that sees any of them sees the new version too.
        fence(Ordering::Release);
        // SAFETY: r is a slot with room for CLASSES[class] >= frames.len() frames; id, len
        // and frames are stored atomically (see `Stored::holds`), the rest is ours under the
        // lock.
        unsafe {
            (*r).id.store(id, Ordering::Relaxed);
            (*r).len.store(frames.len() as u32, Ordering::Relaxed);
            core::ptr::addr_of_mut!((*r).mark).write(0);
            core::ptr::addr_of_mut!((*r).hash).write(hash);
            core::ptr::addr_of_mut!((*r).next_free).write(core::ptr::null_mut());
            let stored = Stored::frames_ptr(r);
            for (i, &f) in frames.iter().enumerate() {
                (*stored.add(i)).store(f, Ordering::Relaxed);
            }
        }
        // The frames index last: once a reader without the lock finds the record there, it is
        // complete and has its id.
        if !shard.by_id.insert(id as u64, r) {
            shard.free_record(r);
            return None;
        }
        if !shard.by_frames.insert(hash, r) {
            shard.by_id.remove(id as u64, r);
            shard.free_record(r);
            return None;
        }
        self.published[s]
            .frames_map
            .store(shard.by_frames.map, Ordering::Release);
        shard.next_seq = seq + 1;
        shard.live += 1;
        drop(shard);
        let records = self.records.fetch_add(1, Ordering::Relaxed) + 1;
        if records > self.collect_at.load(Ordering::Relaxed) {
            self.collection_wanted.store(true, Ordering::Relaxed);
        }
        Some(id)
    }

    /// The id of `frames` if shard `s` holds it, found without the lock (a seqlock read:
    /// `None` also when a collection got in the way; the caller then looks under the lock).
    fn find_published(&self, s: usize, hash: u64, frames: &[usize]) -> Option<u32> {
        let published = &self.published[s];
        let version = published.version.load(Ordering::Acquire);
        if version & 1 != 0 {
            return None;
        }
        let map = published.frames_map.load(Ordering::Acquire);
        // SAFETY: frames-index mappings are never unmapped; records are slots of mappings that
        // are never unmapped either, filled within their class (`Stored::holds`).
        let id = unsafe {
            let r = probe(slots_of(map), hash, |r| Stored::holds(r, frames))?;
            (*r).id.load(Ordering::Relaxed)
        };
        fence(Ordering::Acquire);
        // Unchanged: no collection freed (let alone reused) the record while it was compared.
        (published.version.load(Ordering::Relaxed) == version).then_some(id)
    }

    /// Records currently held (including those a collection would free).
    pub fn records(&self) -> usize {
        self.records.load(Ordering::Relaxed)
    }

    /// Whether `id` names a record (it may have been collected since it was read).
    #[cfg(test)]
    pub fn contains(&self, id: u32) -> bool {
        let Some(s) = shard_of_id(id) else {
            return false;
        };
        let _slow = crate::sync::DisabledScope::enter();
        self.shards[s].lock().find_id(id).is_some()
    }

    /// Calls `f` with the frames of `id` (under the shard lock: `f` must not use the table).
    pub fn with_frames<R>(&self, id: u32, f: impl FnOnce(&[usize]) -> R) -> Option<R> {
        let s = shard_of_id(id)?;
        let _slow = crate::sync::DisabledScope::enter();
        let shard = self.shards[s].lock();
        let r = shard.find_id(id)?;
        // SAFETY: live record, under the shard lock.
        Some(f(unsafe { Stored::frames(r) }))
    }

    /// Number of distinct live records.
    #[cfg_attr(not(test), allow(dead_code, reason = "used by the unit tests"))]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().live).sum()
    }

    /// Takes every shard lock (fork prepare, malloc_disable).
    pub fn lock_raw(&self) {
        for s in &self.shards {
            s.lock_raw();
        }
    }

    /// Releases what `lock_raw` took (fork parent/child, malloc_enable).
    pub fn unlock_raw(&self) {
        for s in self.shards.iter().rev() {
            s.force_unlock();
        }
    }
}

#[cfg(test)]
mod tests;
